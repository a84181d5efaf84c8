//! Model-visible names. The model sees `mcp__<server>__<name>`, always matching
//! `^[a-zA-Z0-9_-]{1,64}$`; when sanitising or truncating was needed, an identity hash of the raw
//! (server, name) pair is appended so that distinct raw names stay distinct. The raw name is what
//! goes on the wire; a public name is never parsed back into a raw one.

/// What joins the prefix, the server and the tool in a model-visible name.
pub const SEPARATOR: &str = "__";

/// Whether `server` can be part of plain names that no other server's can equal: it must not
/// contain [`SEPARATOR`] nor end with `_`. Then the first `__` after `mcp__` in a plain name is
/// the one after the server, so a plain name belongs to one (server, tool) pair only. (Server
/// `x__y` with tool `z`, and server `x` with tool `y__z`, would both be `mcp__x__y__z`; server
/// `x_` with tool `z`, and server `x` with tool `_z`, both `mcp__x___z`.) The config refuses
/// other server names.
pub fn is_unambiguous_server_name(server: &str) -> bool {
    !server.contains(SEPARATOR) && !server.ends_with('_')
}

/// A name like `server` that [`is_unambiguous_server_name`] accepts (each `__` becomes `-`,
/// trailing `_` become `-`), for messages that suggest a rename.
pub fn suggest_server_name(server: &str) -> String {
    let mut name = server.replace(SEPARATOR, "-");
    if name.ends_with('_') {
        name.pop();
        name.push('-');
    }
    name
}

/// Longest model-visible name (the common provider limit).
pub const MAX_NAME_LEN: usize = 64;
const PREFIX: &str = "mcp";
const HASH_LEN: usize = 8;

/// The model-visible name of `name` on `server`.
pub fn qualify(server: &str, name: &str) -> String {
    let plain = format!("{PREFIX}__{server}__{name}");
    if plain.len() <= MAX_NAME_LEN && plain.bytes().all(is_allowed) {
        return plain;
    }
    let sanitized: String = plain
        .chars()
        .map(|c| {
            if c.is_ascii() && is_allowed(c as u8) {
                c
            } else {
                '_'
            }
        })
        .collect();
    cut_with_hash(&sanitized, MAX_NAME_LEN, &identity_hash(server, name))
}

/// The shortest limit [`shorten`] takes: a head of 15 characters, `_` and the hash.
pub const MIN_SHORTENED_LEN: usize = 24;

/// `name` when it has at most `max` characters, else its first characters, `_` and 8 hex digits
/// of a hash of the whole name, `max` in all: for a host that puts its own prefix before each
/// name it gets and must stay within the provider's limit. The result depends on nothing but
/// `name` and `max` (stable when other names come and go), and distinct long names stay
/// distinct (up to the hash). `max` below [`MIN_SHORTENED_LEN`] counts as that.
pub fn shorten(name: &str, max: usize) -> String {
    let max = max.max(MIN_SHORTENED_LEN);
    if name.chars().count() <= max {
        return name.to_string();
    }
    cut_with_hash(name, max, &identity_hash("", name))
}

/// The first characters of `text`, `_` and `hash`, `max` characters in all.
fn cut_with_hash(text: &str, max: usize, hash: &str) -> String {
    let head: String = text.chars().take(max - HASH_LEN - 1).collect();
    format!("{head}_{hash}")
}

/// How one server's tool, prompt and command names become model-visible names.
///
/// Invariant: whichever is chosen, [`Naming::public`] returns a valid model-visible name
/// ([`is_valid`]) that is never one of the harness's own (`mcp_harness__…`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Naming {
    /// `mcp__<server>__<name>` ([`qualify`]): the default.
    #[default]
    Qualified,
    /// The name exactly as the server listed it, for a server that already qualifies its
    /// names (an `mcp-harness serve` gateway lists `mcp__<upstream>__<tool>`). A listed name that
    /// is not a valid model-visible name, or that starts with the harness's own prefix
    /// `mcp_harness__`, is qualified as usual.
    AsListed,
}

/// The prefix of the harness's built-in tools, which a server's listed name never takes.
const HARNESS_PREFIX: &str = "mcp_harness__";

impl Naming {
    /// The model-visible name of `name` on `server` under this naming.
    pub fn public(self, server: &str, name: &str) -> String {
        match self {
            Naming::AsListed if is_valid(name) && !name.starts_with(HARNESS_PREFIX) => {
                name.to_string()
            }
            _ => qualify(server, name),
        }
    }
}

/// Whether `name` is a valid model-visible tool name.
pub fn is_valid(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && name.bytes().all(is_allowed)
}

fn is_allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// 8 hex digits of FNV-1a over the raw identity; stable across builds and platforms.
fn identity_hash(server: &str, name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in server.bytes().chain([0u8]).chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:08x}", (h >> 32) as u32 ^ h as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortened_names_fit_stay_apart_and_keep_short_ones() {
        assert_eq!(shorten("mcp__fx__echo", 30), "mcp__fx__echo");
        let long = "mcp__fx__a_rather_long_tool_name_one";
        let other = "mcp__fx__a_rather_long_tool_name_two";
        let (a, b) = (shorten(long, 30), shorten(other, 30));
        assert_eq!(a.len(), 30);
        assert_ne!(a, b);
        assert_eq!(a, shorten(long, 30), "stable");
        assert!(a.starts_with("mcp__fx__a_rather_"), "{a}");
        assert!(is_valid(&a));
        assert_eq!(shorten(long, 3).len(), MIN_SHORTENED_LEN);
    }

    #[test]
    fn unambiguous_server_names() {
        for good in ["x", "x_y", "_x", "x-y", "a_b_c"] {
            assert!(is_unambiguous_server_name(good), "{good}");
        }
        for bad in ["x__y", "x_", "__", "a___b"] {
            assert!(!is_unambiguous_server_name(bad), "{bad}");
            assert!(
                is_unambiguous_server_name(&suggest_server_name(bad)),
                "{bad}"
            );
        }
        assert_eq!(suggest_server_name("x__y"), "x-y");
        assert_eq!(suggest_server_name("x_"), "x-");
        // The collisions the rule prevents.
        assert_eq!(qualify("x__y", "z"), qualify("x", "y__z"));
        assert_eq!(qualify("x_", "z"), qualify("x", "_z"));
    }

    #[test]
    fn as_listed_keeps_valid_names_and_qualifies_the_rest() {
        let kept = Naming::AsListed;
        assert_eq!(kept.public("gw", "mcp__fs__read"), "mcp__fs__read");
        assert_eq!(
            kept.public("gw", "mcp_harness__read_output"),
            qualify("gw", "mcp_harness__read_output")
        );
        assert_eq!(kept.public("gw", "do thing"), qualify("gw", "do thing"));
        assert_eq!(Naming::Qualified.public("gw", "x"), "mcp__gw__x");
    }

    #[test]
    fn plain_names_are_kept() {
        assert_eq!(
            qualify("github", "create_issue"),
            "mcp__github__create_issue"
        );
    }

    #[test]
    fn illegal_characters_get_a_hash() {
        let q = qualify("my.server", "do thing/now");
        assert!(is_valid(&q), "{q}");
        assert!(q.starts_with("mcp__my_server__do_thing_now_"), "{q}");
        assert_ne!(q, qualify("my server", "do thing/now"));
    }

    #[test]
    fn long_names_are_truncated_and_stay_distinct() {
        let long_a = "a".repeat(200);
        let long_b = format!("{}b", "a".repeat(199));
        let qa = qualify("srv", &long_a);
        let qb = qualify("srv", &long_b);
        assert!(is_valid(&qa) && is_valid(&qb));
        assert_eq!(qa.len(), MAX_NAME_LEN);
        assert_ne!(qa, qb);
    }

    #[test]
    fn non_ascii_look_alikes_do_not_collide_with_ascii() {
        let cyrillic = qualify("srv", "\u{0435}cho"); // Cyrillic 'е'
        assert!(is_valid(&cyrillic));
        assert_ne!(cyrillic, qualify("srv", "echo"));
    }

    #[test]
    fn hash_is_stable() {
        // Fixed expectations: changing the hash would rename every sanitised tool.
        assert_eq!(
            qualify("a b", "c"),
            format!("mcp__a_b__c_{}", identity_hash("a b", "c"))
        );
        assert_eq!(identity_hash("a b", "c").len(), 8);
    }
}
