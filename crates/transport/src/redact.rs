//! Redaction: the one place that decides how secrets are kept out of what the harness prints,
//! logs or serialises.
//!
//! Invariants:
//! - every configured secret — each stdio `env` value, each HTTP header value, each URL query
//!   value, path parameter value and fragment, and a URL's password — is registered ([`register_server`]) before the server's
//!   connector exists, and from then on [`text`] replaces each occurrence of it with
//!   [`MARKER`] in any text: errors, server states, stderr tails (a server that echoes its
//!   environment), log lines;
//! - a value shorter than `MIN_SECRET_CHARS` is not looked for in free text: replacing `1`,
//!   `true` or `dev` everywhere would wreck every message while protecting nothing a guess would
//!   not find. Where the position of a value is known (a URL's query, [`url`]) it is always
//!   replaced, whatever its length;
//! - what a remote party echoes of a request it refused (an authorization server's error
//!   text) passes [`credentials`]: credential shapes are replaced whatever their value;
//! - the registry is process-wide and only grows (a secret once configured stays redacted after
//!   a reload removed it), bounded by `MAX_SECRETS`; every text a secret covers is replaced,
//!   so a secret containing another, or two that overlap, leave nothing of either.

use std::collections::BTreeSet;
use std::sync::RwLock;

/// What a redacted value is replaced with.
pub const MARKER: &str = "[redacted]";
/// Shortest value looked for in free text (see the module invariants).
pub(crate) const MIN_SECRET_CHARS: usize = 6;
/// Most secrets kept; later ones are still redacted where their position is known.
pub(crate) const MAX_SECRETS: usize = 4096;

static SECRETS: RwLock<Registered> = RwLock::new(Registered {
    values: Vec::new(),
    matcher: None,
});

/// The registered secrets, longest first, and one automaton that finds them all in one pass
/// (so redacting a text costs its length, not its length times the number of secrets).
struct Registered {
    values: Vec<String>,
    matcher: Option<aho_corasick::AhoCorasick>,
}

/// Registers values to redact from now on (values under `MIN_SECRET_CHARS` are ignored). A
/// value with a character JSON escapes (a line break, a quote) is registered in its escaped
/// spelling too, so it is found inside a JSON document as well as in plain text.
pub fn register<I, S>(values: I)
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let Ok(mut secrets) = SECRETS.write() else {
        return;
    };
    let mut set: BTreeSet<String> = secrets.values.drain(..).collect();
    for value in values {
        let value = value.as_ref().trim();
        if value.chars().count() >= MIN_SECRET_CHARS && set.len() < MAX_SECRETS {
            set.insert(value.to_string());
            if let Ok(quoted) = serde_json::to_string(value)
                && let Some(escaped) = quoted.get(1..quoted.len() - 1)
                && escaped != value
            {
                set.insert(escaped.to_string());
            }
        }
    }
    let mut sorted: Vec<String> = set.into_iter().collect();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.len()));
    // Every match, overlapping ones included (see `replace_secrets`). A contiguous NFA: small
    // whatever the secrets (a DFA of a few PEM keys is megabytes), built again at each
    // registration.
    secrets.matcher = aho_corasick::AhoCorasick::builder()
        .match_kind(aho_corasick::MatchKind::Standard)
        .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
        .build(&sorted)
        .ok();
    secrets.values = sorted;
}

/// `text` with every registered secret replaced, `None` when it holds none. All occurrences are
/// found in one pass of the automaton, overlapping ones included, and each run of text that
/// some secret covers becomes one [`MARKER`]: a secret inside another, or two that overlap
/// (`tok-AAAAAA` and `AAAAAA-BBBBBBBB` in `tok-AAAAAA-BBBBBBBB`), leave nothing of either.
/// Without an automaton (it could not be built) each secret is looked for in turn, longest
/// first.
fn replace_secrets(secrets: &Registered, text: &str) -> Option<String> {
    let Some(matcher) = &secrets.matcher else {
        let mut out = None::<String>;
        for secret in &secrets.values {
            let current = out.as_deref().unwrap_or(text);
            if current.contains(secret.as_str()) {
                out = Some(current.replace(secret.as_str(), MARKER));
            }
        }
        return out;
    };
    // Reported by where they end: sorted by where they start, then merged.
    let mut found: Vec<(usize, usize)> = matcher
        .find_overlapping_iter(text)
        .map(|m| (m.start(), m.end()))
        .collect();
    if found.is_empty() {
        return None;
    }
    found.sort_unstable();
    let mut covered: Vec<(usize, usize)> = Vec::with_capacity(found.len());
    for (start, end) in found {
        match covered.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => covered.push((start, end)),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in covered {
        out.push_str(&text[at..start]);
        out.push_str(MARKER);
        at = end;
    }
    out.push_str(&text[at..]);
    Some(out)
}

/// `value` with every string in it passed through [`text`]: a JSON document redacted without
/// touching its syntax (a URL's query value ending at an escaped quote stays inside its string).
pub fn json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(text(s)),
        Value::Array(items) => Value::Array(items.iter().map(json).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (text(k), json(v))).collect()),
        other => other.clone(),
    }
}

/// Registers the secrets of one server's connection parameters: environment values, header
/// values (and the part after `Bearer `/`Basic `), and a URL's query values and password.
pub fn register_server<'a>(
    env: impl IntoIterator<Item = &'a String>,
    headers: impl IntoIterator<Item = &'a String>,
    url: Option<&str>,
) {
    let mut values: Vec<String> = env.into_iter().cloned().collect();
    for header in headers {
        values.push(header.clone());
        if let Some((_, token)) = header.split_once(' ') {
            values.push(token.to_string());
        }
    }
    if let Some(url) = url {
        values.extend(url_secrets(url));
    }
    register(values);
}

/// The length in bytes of the longest registered secret (0 when none is).
pub fn longest_secret() -> usize {
    SECRETS
        .read()
        .map(|secrets| secrets.values.first().map_or(0, String::len))
        .unwrap_or(0)
}

/// `text` with every registered secret replaced by [`MARKER`], and every URL in it passed
/// through [`url`].
pub fn text(text: &str) -> String {
    let mut out = text.to_string();
    if let Ok(secrets) = SECRETS.read()
        && let Some(replaced) = replace_secrets(&secrets, text)
    {
        out = replaced;
    }
    if out.contains("://") && out.contains(['?', '@', ';', '#']) {
        out = urls_in(&out);
    }
    out
}

/// Words in a command-line flag that say its value is a secret (`--api-key`, `--token=…`).
const SECRET_FLAG_WORDS: [&str; 7] = [
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "auth",
];

/// Whether `flag` (an argument starting with `-`) names a secret value.
fn secret_flag(flag: &str) -> bool {
    flag.starts_with('-') && secret_name(flag.trim_start_matches('-'))
}

/// Whether `name` of a `NAME=VALUE` argument is a variable's name whose last word says its
/// value is a secret (`API_KEY`, `github.token`; not `OAUTH_CALLBACK_PORT`, `DISABLE_AUTH`).
fn secret_assignment(name: &str) -> bool {
    !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && name.rsplit(['-', '_', '.']).next().is_some_and(secret_name)
}

/// Whether `value` is a boolean (`DISABLE_AUTH=true`): no secret. (A number may be one: a
/// PIN, a numeric key.)
fn plain_value(value: &str) -> bool {
    matches!(value, "true" | "false")
}

/// Whether `name` (an environment variable's, a flag's) says its value is a secret: one of its
/// words ends in `key`, `token`, `secret`, `password`, `credential`, `auth` … (`GITHUB_TOKEN`,
/// `api-key`, `OPENAI_API_KEY`).
pub fn secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    !name.is_empty()
        && name.split(['-', '_', '.']).any(|word| {
            SECRET_FLAG_WORDS
                .iter()
                .any(|secret| word.ends_with(secret))
        })
}

/// A server's command-line arguments for people: each through [`text`], and the value of a
/// flag that names a secret (`--api-key VALUE`, `--token=VALUE`, `--client-secret VALUE`) or
/// of a `NAME=VALUE` whose name does (`GITHUB_TOKEN=…` passed to `env`, `-e API_KEY=…` to
/// `docker run`) replaced with [`MARKER`] — a key written into `args` is shown by no listing.
pub fn args<'a>(args: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut shown = Vec::new();
    let mut value_next = false;
    for arg in args {
        if value_next && !arg.starts_with('-') {
            shown.push(MARKER.to_string());
            value_next = false;
            continue;
        }
        value_next = false;
        match arg.split_once('=') {
            Some((flag, value))
                if !value.is_empty()
                    && (secret_flag(flag) || secret_assignment(flag) && !plain_value(value)) =>
            {
                shown.push(format!("{flag}={MARKER}"));
            }
            Some(_) => shown.push(text(arg)),
            None => {
                value_next = secret_flag(arg);
                shown.push(text(arg));
            }
        }
    }
    shown
}

/// Words after which the next token is a credential (`Authorization` schemes).
const SCHEMES: [&str; 3] = ["basic", "bearer", "dpop"];

/// Keys whose value is a credential, in a form body, a query or JSON an authorization server
/// may echo in an error.
const CREDENTIAL_KEYS: [&str; 11] = [
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "client_assertion",
    "assertion",
    "subject_token",
    "actor_token",
    "code_verifier",
    "code",
    "password",
];

/// Longest text [`credentials`] looks at; the rest is cut (an error shown is far shorter).
const MAX_SCANNED: usize = 8 * 1024;

/// `text` (what a remote party said, in an error) fit for a terminal and a log line, whatever
/// it echoes: control characters (escape sequences, line breaks) become spaces, the token after
/// `Basic`/`Bearer`/`DPoP`, and the value of a credential key (`refresh_token=…`,
/// `"client_secret": "…"`, `'access_token': '…'`), are replaced with [`MARKER`] — so an
/// authorization server that echoes the request it refused shows neither the refresh token nor
/// the client's credentials. At most 8 KiB are kept (`MAX_SCANNED`); the work is linear in them.
pub fn credentials(text: &str) -> String {
    let mut end = text.len().min(MAX_SCANNED);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let truncated = end < text.len();
    let kept: String = text[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut text = credential_shapes(&kept).into_owned();
    if truncated {
        text.push('…');
    }
    text
}

/// `text` with its credential shapes replaced (as [`credentials`] does), nothing else changed:
/// for a log line, whose layout and colours stay. Linear in `text`; borrowed when nothing
/// was replaced.
pub fn credential_shapes(text: &str) -> std::borrow::Cow<'_, str> {
    let lower = text.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    // Byte ranges of `text` to replace (ASCII-lowered `lower` has the same byte offsets).
    let mut hidden: Vec<(usize, usize)> = Vec::new();
    let boundary =
        |at: usize| at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
    let value_end = |from: usize| {
        from + lower[from..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '&' | '"' | '\'' | ',' | ';' | '}' | '\\')
            })
            .unwrap_or(lower.len() - from)
    };
    for scheme in SCHEMES {
        let mut at = 0;
        while let Some(found) = lower[at..].find(scheme) {
            let start = at + found;
            let after = start + scheme.len();
            at = after;
            if !boundary(start) || !lower[after..].starts_with(' ') {
                continue;
            }
            let from = after + lower[after..].len() - lower[after..].trim_start().len();
            // Punctuation the text put after the token is not part of it.
            let end = from
                + lower[from..value_end(from)]
                    .trim_end_matches([':', ')', ']', '>', '.'])
                    .len();
            // `Bearer resource_metadata="…"`: a challenge's parameter, not a token.
            let parameter = lower[..end].ends_with('=') && lower[end..].starts_with('"');
            if !parameter && is_credential(scheme, &text[from..end]) {
                hidden.push((from, end));
                at = end.max(after);
            }
        }
    }
    for key in CREDENTIAL_KEYS {
        let mut at = 0;
        while let Some(found) = lower[at..].find(key) {
            let start = at + found;
            let after = start + key.len();
            at = after;
            if !boundary(start) {
                continue;
            }
            let Some(from) = value_start(&lower, after) else {
                continue;
            };
            let end = value_end(from);
            if end > from {
                hidden.push((from, end));
                at = end;
            }
        }
    }
    if hidden.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    hidden.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut next = 0;
    for (from, end) in hidden {
        if from < next {
            next = next.max(end);
            continue;
        }
        out.push_str(&text[next..from]);
        out.push_str(MARKER);
        next = end;
    }
    out.push_str(&text[next..]);
    std::borrow::Cow::Owned(out)
}

/// Where the value of a credential key that ends at `after` starts, in `lower`: after `=`
/// (a form or a query: any value), or after `:` when the value is a quoted string (JSON, a
/// Python or Debug rendering: `"code": -32600` or `password: incorrect` are no credential),
/// quotes, backslashes and spaces around the separator allowed. `None`: no value follows.
fn value_start(lower: &str, after: usize) -> Option<usize> {
    let rest = &lower[after..];
    let around = |c: char| matches!(c, '"' | '\'' | '\\' | ' ');
    let past_key = rest.trim_start_matches(around);
    let (separator, value) = match past_key.chars().next()? {
        '=' => ('=', &past_key[1..]),
        ':' => (':', &past_key[1..]),
        _ => return None,
    };
    let trimmed = value.trim_start_matches(' ');
    let value = match separator {
        '=' => trimmed,
        _ => {
            let unquoted = trimmed.trim_start_matches(['\\', '"', '\'']);
            if unquoted.len() == trimmed.len() {
                return None;
            }
            unquoted
        }
    };
    Some(lower.len() - value.len())
}

/// Whether `token`, the word after `scheme` in free text, is a credential rather than a word
/// (`Basic realm=…`, `Bearer error=…`, "basic authentication failed"): a token68 that is base64
/// of `id:secret`, or of 16 characters or more.
fn is_credential(scheme: &str, token: &str) -> bool {
    use base64::Engine as _;
    let token68 =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '+' | '/');
    let body = token.trim_end_matches('=');
    if body.is_empty() || !body.chars().all(token68) {
        return false;
    }
    body.len() >= 16
        || (scheme == "basic"
            && base64::engine::general_purpose::STANDARD
                .decode(token)
                .is_ok_and(|decoded| decoded.contains(&b':')))
}

/// A map of secret values (env, headers) for `Debug`: its keys, each value `[redacted]`.
pub struct Values<'a>(pub &'a std::collections::BTreeMap<String, String>);

impl std::fmt::Debug for Values<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|key| (key, MARKER)))
            .finish()
    }
}

/// A URL for `Debug`, through [`url`].
pub struct Url<'a>(pub &'a str);

impl std::fmt::Debug for Url<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&url(self.0), f)
    }
}

/// Arguments of a command line for `Debug`, each through [`text`].
pub struct Args<'a>(pub &'a [String]);

impl std::fmt::Debug for Args<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|arg| text(arg)))
            .finish()
    }
}

/// `url` without its user info, query and fragment: the scheme, host and path, for people
/// (where [`url`] keeps the query's keys, this keeps nothing after the path).
pub fn bare_url(url: &str) -> String {
    let mut shown = url.to_string();
    if let Some(at) = shown.find(['?', '#']) {
        shown.truncate(at);
    }
    if let Some(scheme_end) = shown.find("://") {
        let rest = &shown[scheme_end + 3..];
        let host_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..host_end].rfind('@') {
            shown = format!("{}{}", &shown[..scheme_end + 3], &rest[at + 1..]);
        }
    }
    redact_path_params(&shown)
}

/// `url` with each query value (`?key=value&flag`: `value` and `flag`), each path parameter's
/// value (`;jsessionid=value`), the fragment and the password of its user info replaced by
/// [`MARKER`]; the scheme, host, path and keys stay readable.
pub fn url(url: &str) -> String {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (url, None),
    };
    let (base, query) = match before_fragment.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (before_fragment, None),
    };
    let mut out = redact_path_params(&redact_password(base));
    if let Some(query) = query {
        out.push('?');
        out.push_str(&hide_values(query, '&'));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        if !fragment.is_empty() {
            out.push_str(MARKER);
        }
    }
    out
}

/// `base` (a URL without query and fragment) with the value of each path parameter
/// (`;jsessionid=value`, `;value`) replaced by [`MARKER`].
fn redact_path_params(base: &str) -> String {
    let Some((scheme, authority, path)) = split_base(base) else {
        return base.to_string();
    };
    if !path.contains(';') {
        return base.to_string();
    }
    let segments: Vec<String> = path
        .split('/')
        .map(|segment| match segment.split_once(';') {
            Some((name, params)) => format!("{name};{}", hide_values(params, ';')),
            None => segment.to_string(),
        })
        .collect();
    format!("{scheme}://{authority}{}", segments.join("/"))
}

/// `params` (`key=value` pairs or bare values, separated by `separator`) with each value
/// replaced by [`MARKER`]; an empty one stays empty.
fn hide_values(params: &str, separator: char) -> String {
    let hidden: Vec<String> = params
        .split(separator)
        .map(|param| match param.split_once('=') {
            Some((key, _)) => format!("{key}={MARKER}"),
            None if param.is_empty() => String::new(),
            None => MARKER.to_string(),
        })
        .collect();
    hidden.join(&separator.to_string())
}

/// `base` (a URL without query and fragment) as scheme, authority and path; `None` without
/// `://`.
fn split_base(base: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = base.split_once("://")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Some((scheme, authority, path))
}

/// `scheme://user:password@host` → `scheme://user:[redacted]@host`.
fn redact_password(base: &str) -> String {
    let Some((scheme, authority, path)) = split_base(base) else {
        return base.to_string();
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:{MARKER}@{host}{path}"),
            None => base.to_string(),
        },
        None => base.to_string(),
    }
}

/// The query values and password of `url` (what [`url`] hides).
fn url_secrets(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let (before_fragment, fragment) = url.split_once('#').unwrap_or((url, ""));
    if !fragment.is_empty() {
        found.push(fragment.to_string());
    }
    let path = before_fragment.split('?').next().unwrap_or("");
    let path = path.split_once("://").map_or("", |(_, rest)| rest);
    for segment in path.split('/').skip(1) {
        for param in segment.split(';').skip(1) {
            let value = param.split_once('=').map_or(param, |(_, v)| v);
            if !value.is_empty() {
                found.push(value.to_string());
            }
        }
    }
    let (base, query) = before_fragment
        .split_once('?')
        .map_or((before_fragment, None), |(base, query)| (base, Some(query)));
    for pair in query.into_iter().flat_map(|query| query.split('&')) {
        let value = pair.split_once('=').map_or(pair, |(_, v)| v);
        if !value.is_empty() {
            found.push(value.to_string());
        }
    }
    // The password, with a query or without one.
    if let Some((_, rest)) = base.split_once("://") {
        let authority = rest.split('/').next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
            && !password.is_empty()
        {
            found.push(password.to_string());
        }
    }
    found
}

/// Every `scheme://…` run in `text` (up to whitespace or a quote) passed through [`url`].
fn urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.'))
            .map_or(0, |i| i + 1);
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | ')' | ','))
            .map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..start]);
        out.push_str(&url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret with line breaks (a PEM key) is found as written and in its JSON spelling (a
    /// `--json` document, a log line as JSON); of two secrets at one place the longer goes
    /// whole; hundreds of secrets are found in one pass.
    #[test]
    fn secrets_are_found_in_plain_text_and_in_json_in_one_pass() {
        let pem = "-----BEGIN KEY-----\nPEMSECRETLINE-1a2b\n-----END KEY-----";
        let many: Vec<String> = (0..300).map(|i| format!("many-secret-{i:04}-zz")).collect();
        register([pem, "prefix-secret-77", "prefix-secret-77-longer"]);
        register(&many);
        let plain = text(&format!("key {pem} end"));
        assert_eq!(plain, "key [redacted] end");
        let doc = serde_json::json!({"text": format!("key {pem} end")}).to_string();
        assert!(!text(&doc).contains("PEMSECRETLINE"), "{doc}");
        assert_eq!(text("a prefix-secret-77-longer b"), "a [redacted] b");
        register(["tok-AAAAAA", "AAAAAA-BBBBBBBBBBBB"]);
        assert_eq!(
            text("x tok-AAAAAA-BBBBBBBBBBBB y"),
            "x [redacted] y",
            "overlapping"
        );
        assert_eq!(
            text("many-secret-0007-zz and many-secret-0299-zz"),
            "[redacted] and [redacted]"
        );
        assert_eq!(text("nothing here"), "nothing here");
        // A JSON document is redacted string by string: it stays JSON (a URL's query value
        // next to an escaped quote used to take the backslash with it).
        let doc =
            serde_json::json!({"data": format!("GET \"https://api.example/x?key=abc\" {pem}")});
        let shown = json(&doc).to_string();
        let back: serde_json::Value = serde_json::from_str(&shown).expect("still JSON");
        let data = back["data"].as_str().unwrap_or_default();
        assert!(
            !data.contains("key=abc") && !data.contains("PEMSECRETLINE"),
            "{data}"
        );
    }

    /// The value of a `NAME=VALUE` argument whose name ends in a secret word is hidden (a
    /// number too: a PIN), unless it is a boolean; other assignments stay.
    #[test]
    fn secret_assignments_in_args_are_hidden() {
        let shown = args([
            "-e",
            "API_KEY=sk-live-1",
            "GITHUB_TOKEN=ghp_2",
            "mode=auth",
            "PORT=8080",
            "a b=TOKEN",
            "OAUTH_CALLBACK_PORT=8080",
            "DB_PASSWORD=20231231",
            "DISABLE_AUTH=true",
        ]);
        assert_eq!(
            shown,
            [
                "-e",
                "API_KEY=[redacted]",
                "GITHUB_TOKEN=[redacted]",
                "mode=auth",
                "PORT=8080",
                "a b=TOKEN",
                "OAUTH_CALLBACK_PORT=8080",
                "DB_PASSWORD=[redacted]",
                "DISABLE_AUTH=true"
            ]
        );
    }

    /// The value of a flag that names a secret is hidden, in both spellings; other arguments
    /// stay.
    #[test]
    fn secret_flags_in_args_are_hidden() {
        let shown = args([
            "--api-key",
            "sk-live-SECRET123",
            "--token=tok_SECRET",
            "--client-secret",
            "cs",
            "--port",
            "8080",
            "-y",
            "@scope/server",
            "--auth-token",
            "--verbose",
            "--keyboard-layout",
            "us",
        ]);
        assert_eq!(
            shown,
            [
                "--api-key",
                MARKER,
                "--token=[redacted]",
                "--client-secret",
                MARKER,
                "--port",
                "8080",
                "-y",
                "@scope/server",
                "--auth-token",
                "--verbose",
                "--keyboard-layout",
                "us",
            ]
        );
    }

    /// What an authorization server echoes of a refused request loses its credentials, its
    /// control characters, and nothing else.
    #[test]
    fn credentials_echoed_in_free_text_are_replaced() {
        let echoed = "invalid_request: auth=Basic Y2xpZW50OkNTLTNEME91Ri0zZm9tYVNrakJKSVVFbFE= raw=grant_type=refresh_token&refresh_token=RT-cjSso20ClzaQOKT0e&client_secret=hunter2+pw%21";
        let shown = credentials(echoed);
        for secret in ["Y2xpZW50", "RT-cjSso20", "hunter2"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains("grant_type=refresh_token&refresh_token=[redacted]"),
            "{shown}"
        );
        let json = r#"{"error":"x","client_secret": "s3cr3t-value","code":"CODE-abc"}"#;
        let shown = credentials(json);
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("CODE-abc"),
            "{shown}"
        );
        let bearer = "sent Authorization: Bearer AT-olv8abcdefghijklmnop, refused";
        assert_eq!(
            credentials(bearer),
            "sent Authorization: Bearer [redacted], refused"
        );
        // Words and challenges stay.
        for plain in [
            "authorization required: Bearer resource_metadata=\"http://127.0.0.1:18080/.well-known/oauth-protected-resource/mcp\", scope=\"read\"",
            "basic authentication failed",
            "Bearer error=\"insufficient_scope\", scope=\"mcp:write\"",
            "error_code=7 and the authorization code was spent",
        ] {
            assert_eq!(credentials(plain), plain);
        }
        assert_eq!(
            credentials("X\u{1b}]0;PWNED\u{7}\nFAKE: ok"),
            "X ]0;PWNED  FAKE: ok"
        );
        // Other spellings of the same credentials.
        for (echoed, secret) in [
            (r#"{"access_token" : "AT-spaced-1"}"#, "AT-spaced-1"),
            (r#"{'refresh_token': 'RT-python-2'}"#, "RT-python-2"),
            (r#"refresh_token:"RT-tight-3""#, "RT-tight-3"),
            (r#"{\"refresh_token\":\"RT-escaped-4\"}"#, "RT-escaped-4"),
            (
                "Bearer AT-olv8abcdefghijklmnop: unauthorized",
                "AT-olv8abcdefghijklmnop",
            ),
            (
                "(sent Bearer AT-olv8abcdefghijklmnop)",
                "AT-olv8abcdefghijklmnop",
            ),
            (
                "Basic Y2xpZW50OnNlY3JldA==: invalid_client",
                "Y2xpZW50OnNlY3JldA",
            ),
            (
                "Basic c29tZWxvbmdzZWNyZXR2YWx1ZQ",
                "c29tZWxvbmdzZWNyZXR2YWx1ZQ",
            ),
        ] {
            let shown = credentials(echoed);
            assert!(!shown.contains(secret), "{echoed} → {shown}");
        }
        // A JSON-RPC code and a word after `password` are no credential.
        for plain in [
            r#"{"error":{"code":-32600,"message":"x"}}"#,
            "password: incorrect for user bob",
        ] {
            assert_eq!(credentials(plain), plain);
        }
    }

    /// A hostile text is looked at up to a bound, in linear time.
    #[test]
    fn credentials_work_is_bounded() {
        let hostile = "code=".repeat(200_000);
        let shown = credentials(&hostile);
        assert!(
            shown.len() <= MAX_SCANNED + MARKER.len() * 2 + 4,
            "{}",
            shown.len()
        );
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn url_query_values_and_passwords_are_hidden() {
        assert_eq!(
            url("https://u:pw@example.test/mcp?api_key=abc&x=1&flag#top"),
            "https://u:[redacted]@example.test/mcp?api_key=[redacted]&x=[redacted]&[redacted]#[redacted]"
        );
        assert_eq!(url("http://h/mcp"), "http://h/mcp");
        // Path parameters and the fragment may carry a session or a token too.
        assert_eq!(
            url("http://h:1/a;jsessionid=PATHSECRET/mcp;v#frag=FRAGSECRET"),
            "http://h:1/a;jsessionid=[redacted]/mcp;[redacted]#[redacted]"
        );
        assert_eq!(
            url_secrets("http://h/a;jsessionid=PATHSECRET/mcp#frag=FRAGSECRET"),
            ["frag=FRAGSECRET", "PATHSECRET"]
        );
        // In free text too, however short the value; a `;` or `#` that ends a URL stays.
        assert_eq!(
            text("GET http://h/a;jsessionid=ab12c and http://h/cb#tok=xy1"),
            "GET http://h/a;jsessionid=[redacted] and http://h/cb#[redacted]"
        );
        assert_eq!(
            text("see http://h/mcp; then retry"),
            "see http://h/mcp; then retry"
        );
    }

    /// A URL's password is a secret with a query or without one, registered or found in text.
    #[test]
    fn a_password_without_a_query_is_hidden_too() {
        assert_eq!(
            url_secrets("http://u:pw-no-query-123@h:9/mcp"),
            ["pw-no-query-123"]
        );
        assert_eq!(
            text("`url` http://u:other-pw-4567@127.0.0.1:9/mcp: unreachable"),
            "`url` http://u:[redacted]@127.0.0.1:9/mcp: unreachable"
        );
    }

    #[test]
    fn registered_values_are_replaced_in_any_text_short_ones_are_not() {
        register(["s3cr3t-value-1234", "dev"]);
        let shown = text("token s3cr3t-value-1234 for dev at (http://h/x?k=v)");
        assert_eq!(
            shown,
            "token [redacted] for dev at (http://h/x?k=[redacted])"
        );
    }
}
