//! What operators see: Prometheus metrics of calls, servers, catalog and sessions, and the audit
//! log (one JSON line per call).
//!
//! Invariants:
//! - label values are escaped and bounded (a client's self-chosen name cannot break the text
//!   format), and the number of distinct call series is capped: past the cap a new series is
//!   counted under `server`, `tool` and `client` `"other"` (its outcome kept), so memory stays
//!   bounded whatever clients send — a client's own name or the names of tools it calls;
//! - a call of a series already counted allocates nothing to be counted;
//! - the audit log never holds a secret: no arguments unless the operator enabled them, and no
//!   client token ever (the gateway does not put one in a record).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use dashmap::DashMap;
use mcp_harness_runtime::catalog::Snapshot;
use serde_json::{Map, Value, json};

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 11] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 10.0,
];

/// At most this many distinct (server, tool, client, outcome) series.
const MAX_SERIES: usize = 10_000;

/// At most this many distinct client labels (an unauthenticated client names itself); later
/// ones are counted as `other`.
const MAX_CLIENTS: usize = 100;

/// The tool label of a call that reached no server (an unknown name, a throttled call) once
/// [`MAX_UNRESOLVED`] such names have their own: the name a client asked for is anything it
/// likes.
const UNRESOLVED_TOOL: &str = "_unknown";

/// At most this many names of calls that reached no server get a label of their own (a typo,
/// a tool hidden from the caller's profile: worth seeing); later ones are [`UNRESOLVED_TOOL`].
const MAX_UNRESOLVED: usize = 100;

/// The most bytes of a call's arguments an audit line carries (`--audit-arguments`); larger
/// ones are left out, their size said.
const MAX_AUDITED_ARGUMENTS: usize = 16 * 1024;

/// How one call ended, as metrics and the audit log name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    Ok,
    ToolError,
    Refused,
    Stale,
    Unknown,
    Failed,
    /// The upstream runs the call as a task, handed to the client (SEP-2663): how it ends is
    /// the client's to follow.
    Task,
    /// The upstream needs input first (SEP-2322), handed to a client that answers its own
    /// rounds: the call goes on in the client's retry, counted on its own.
    InputRequired,
    /// Refused before anything else: the session had `--max-calls-per-session` calls in flight.
    Throttled,
    /// Refused before it was sent: its arguments do not match the tool's input schema.
    InvalidArguments,
    /// Sent, and not answered within the server's `toolTimeoutSec` (or the call's own limit).
    Timeout,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::Refused => "refused",
            Outcome::Stale => "stale",
            Outcome::Unknown => "unknown",
            Outcome::Failed => "failed",
            Outcome::Task => "task",
            Outcome::InputRequired => "input_required",
            Outcome::Throttled => "throttled",
            Outcome::InvalidArguments => "invalid_arguments",
            Outcome::Timeout => "timeout",
        }
    }

    /// The permission decision the outcome shows.
    fn decision(self) -> &'static str {
        match self {
            Outcome::Refused => "refused",
            Outcome::Stale | Outcome::Unknown | Outcome::Throttled | Outcome::InvalidArguments => {
                "not_run"
            }
            _ => "allowed",
        }
    }
}

/// One finished call.
pub(crate) struct CallRecord<'a> {
    pub(crate) client: &'a str,
    pub(crate) server: &'a str,
    pub(crate) tool: &'a str,
    pub(crate) outcome: Outcome,
    pub(crate) duration: Duration,
    pub(crate) arguments: Option<&'a Map<String, Value>>,
}

/// One call series: its labels (each [`bounded`]).
#[derive(Debug, Clone)]
struct Series {
    server: String,
    tool: String,
    client: String,
    outcome: Outcome,
}

impl Series {
    /// Where a new series goes once the map holds [`MAX_SERIES`].
    fn overflow(outcome: Outcome) -> Self {
        let other = || String::from("other");
        Self {
            server: other(),
            tool: other(),
            client: other(),
            outcome,
        }
    }
}

/// A series' labels, owned ([`Series`]) or borrowed (a call's own), so the map is searched
/// without making a [`Series`]. Equal labels hash and compare equal either way.
trait SeriesKey {
    fn labels(&self) -> (&str, &str, &str, Outcome);
}

impl SeriesKey for Series {
    fn labels(&self) -> (&str, &str, &str, Outcome) {
        (&self.server, &self.tool, &self.client, self.outcome)
    }
}

impl SeriesKey for (&str, &str, &str, Outcome) {
    fn labels(&self) -> (&str, &str, &str, Outcome) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn SeriesKey + 'a> for Series {
    fn borrow(&self) -> &(dyn SeriesKey + 'a) {
        self
    }
}

impl std::hash::Hash for dyn SeriesKey + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.labels().hash(state);
    }
}

impl PartialEq for dyn SeriesKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.labels() == other.labels()
    }
}

impl Eq for dyn SeriesKey + '_ {}

impl std::hash::Hash for Series {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.labels().hash(state);
    }
}

impl PartialEq for Series {
    fn eq(&self, other: &Self) -> bool {
        self.labels() == other.labels()
    }
}

impl Eq for Series {}

#[derive(Default)]
struct Stats {
    count: u64,
    sum: f64,
    buckets: [u64; BUCKETS.len()],
}

/// Counters and histograms of calls.
#[derive(Default)]
pub(crate) struct Metrics {
    /// On foldhash, seeded per process: a key is labels a client chose.
    calls: DashMap<Series, Mutex<Stats>, foldhash::quality::RandomState>,
    /// The client labels in use (at most [`MAX_CLIENTS`]).
    clients: dashmap::DashSet<String, foldhash::quality::RandomState>,
    /// The labels of calls that reached no server (at most [`MAX_UNRESOLVED`]).
    unresolved: dashmap::DashSet<String, foldhash::quality::RandomState>,
}

/// Where audit lines go, and whether they carry arguments.
pub(crate) struct Audit {
    file: Mutex<std::fs::File>,
    arguments: bool,
}

impl Audit {
    /// Appends to `path` (created if missing, mode 0600; an existing one open to others is
    /// warned about).
    pub(crate) fn open(path: &Path, arguments: bool) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        use std::os::unix::fs::PermissionsExt as _;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        // An existing file keeps its mode: said when others may read who called what.
        if let Ok(metadata) = file.metadata()
            && metadata.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                file = %path.display(),
                mode = format!("{:o}", metadata.permissions().mode() & 0o777),
                "the audit file is readable or writable by others; `chmod 600` it"
            );
        }
        Ok(Self {
            file: Mutex::new(file),
            arguments,
        })
    }

    /// Whether its lines carry a call's arguments (so the caller keeps them for it).
    pub(crate) fn wants_arguments(&self) -> bool {
        self.arguments
    }

    fn write(&self, record: &CallRecord<'_>) {
        // What a client sent (its name, the tool it asked for) is cut: a line stays a line.
        let mut line = json!({
            "time": rfc3339_now(),
            "client": audited(record.client),
            "server": record.server,
            "tool": audited(record.tool),
            "decision": record.outcome.decision(),
            "outcome": record.outcome.as_str(),
            "duration_ms": record.duration.as_secs_f64() * 1000.0,
        });
        // Only for a call that reached a tool, and bounded: an unknown tool's megabytes are
        // not written down.
        if self.arguments
            && record.server != "-"
            && let Some(arguments) = record.arguments
        {
            let arguments = Value::Object(arguments.clone());
            let size = arguments.to_string().len();
            if size <= MAX_AUDITED_ARGUMENTS {
                line["arguments"] = arguments;
            } else {
                line["arguments_bytes"] = json!(size);
            }
        }
        let mut text = line.to_string();
        text.push('\n');
        let mut file = crate::sync::lock(&self.file);
        if let Err(error) = file.write_all(text.as_bytes()) {
            tracing::warn!(%error, "the audit log could not be written");
        }
    }
}

/// Now in RFC 3339 (UTC, milliseconds).
fn rfc3339_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Metrics {
    pub(crate) fn record(&self, record: &CallRecord<'_>, audit: Option<&Audit>) {
        let (server, mut tool, mut client) = (
            label(record.server),
            label(record.tool),
            label(record.client),
        );
        if record.server == "-" && !admitted(&self.unresolved, &tool, MAX_UNRESOLVED) {
            tool = std::borrow::Cow::Borrowed(UNRESOLVED_TOOL);
        }
        if !admitted(&self.clients, &client, MAX_CLIENTS) {
            client = std::borrow::Cow::Borrowed("other");
        }
        let labels = (&*server, &*tool, &*client, record.outcome);
        let stats = match self.calls.get(&labels as &dyn SeriesKey) {
            Some(stats) => stats,
            None => {
                let series = if self.calls.len() >= MAX_SERIES {
                    Series::overflow(record.outcome)
                } else {
                    Series {
                        server: labels.0.to_owned(),
                        tool: labels.1.to_owned(),
                        client: labels.2.to_owned(),
                        outcome: record.outcome,
                    }
                };
                self.calls.entry(series).or_default().downgrade()
            }
        };
        let mut stats = crate::sync::lock(stats.value());
        let secs = record.duration.as_secs_f64();
        stats.count += 1;
        stats.sum += secs;
        for (bucket, bound) in stats.buckets.iter_mut().zip(BUCKETS) {
            if secs <= bound {
                *bucket += 1;
            }
        }
        drop(stats);
        if let Some(audit) = audit {
            audit.write(record);
        }
    }

    /// The Prometheus text exposition of calls, servers, the catalog revision and sessions.
    pub(crate) fn render(
        &self,
        snapshot: &Snapshot,
        sessions: usize,
        http_sessions: usize,
    ) -> String {
        let mut out = String::new();
        out.push_str("# HELP mcp_harness_calls_total Tool calls through the gateway.\n");
        out.push_str("# TYPE mcp_harness_calls_total counter\n");
        let mut rows: Vec<(Series, u64, f64, [u64; BUCKETS.len()])> = self
            .calls
            .iter()
            .map(|entry| {
                let stats = crate::sync::lock(entry.value());
                (entry.key().clone(), stats.count, stats.sum, stats.buckets)
            })
            .collect();
        rows.sort_by(|a, b| {
            (&a.0.server, &a.0.tool, &a.0.client, a.0.outcome.as_str()).cmp(&(
                &b.0.server,
                &b.0.tool,
                &b.0.client,
                b.0.outcome.as_str(),
            ))
        });
        let labels = |s: &Series| {
            format!(
                "server=\"{}\",tool=\"{}\",client=\"{}\",outcome=\"{}\"",
                escape(&s.server),
                escape(&s.tool),
                escape(&s.client),
                s.outcome.as_str()
            )
        };
        for (series, count, _, _) in &rows {
            let _ = writeln!(out, "mcp_harness_calls_total{{{}}} {count}", labels(series));
        }
        out.push_str(
            "# HELP mcp_harness_call_duration_seconds Tool call latency through the gateway.\n",
        );
        out.push_str("# TYPE mcp_harness_call_duration_seconds histogram\n");
        for (series, count, sum, buckets) in &rows {
            let labels = labels(series);
            for (bound, n) in BUCKETS.iter().zip(buckets) {
                let _ = writeln!(
                    out,
                    "mcp_harness_call_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "mcp_harness_call_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(
                out,
                "mcp_harness_call_duration_seconds_sum{{{labels}}} {sum}"
            );
            let _ = writeln!(
                out,
                "mcp_harness_call_duration_seconds_count{{{labels}}} {count}"
            );
        }
        out.push_str("# HELP mcp_harness_server_state Each upstream server's state (1 for its current state).\n");
        out.push_str("# TYPE mcp_harness_server_state gauge\n");
        for (name, status) in &snapshot.servers {
            let _ = writeln!(
                out,
                "mcp_harness_server_state{{server=\"{}\",state=\"{}\"}} 1",
                escape(bounded(name)),
                status.state.label()
            );
        }
        out.push_str("# HELP mcp_harness_catalog_revision The published catalog revision.\n");
        out.push_str("# TYPE mcp_harness_catalog_revision gauge\n");
        let _ = writeln!(out, "mcp_harness_catalog_revision {}", snapshot.revision);
        out.push_str("# HELP mcp_harness_sessions Client sessions: notified listeners and open HTTP sessions.\n");
        out.push_str("# TYPE mcp_harness_sessions gauge\n");
        let _ = writeln!(out, "mcp_harness_sessions{{kind=\"listeners\"}} {sessions}");
        let _ = writeln!(out, "mcp_harness_sessions{{kind=\"http\"}} {http_sessions}");
        out
    }
}

/// At most 256 characters of `value`, an ellipsis after them when it is longer, and no
/// character that would make it read otherwise on a terminal.
fn audited(value: &str) -> std::borrow::Cow<'_, str> {
    let cut: std::borrow::Cow<'_, str> = match value.char_indices().nth(256) {
        Some((end, _)) => format!("{}…", &value[..end]).into(),
        None => value.into(),
    };
    // Characters that make a name read otherwise on a terminal (line and paragraph
    // separators, which JSON writes raw; bidirectional overrides and isolates) are shown as
    // U+FFFD, as control characters are in labels.
    let deceiving = |c: char| matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if cut.chars().any(deceiving) {
        cut.chars()
            .map(|c| if deceiving(c) { '\u{fffd}' } else { c })
            .collect::<String>()
            .into()
    } else {
        cut
    }
}

/// Whether `label` is one of `seen`, or joins them while they are fewer than `max`.
fn admitted(
    seen: &dashmap::DashSet<String, foldhash::quality::RandomState>,
    label: &str,
    max: usize,
) -> bool {
    if seen.contains(label) {
        return true;
    }
    if seen.len() >= max {
        return false;
    }
    seen.insert(label.to_string());
    true
}

/// At most 64 characters of `value`.
fn bounded(value: &str) -> &str {
    match value.char_indices().nth(64) {
        Some((end, _)) => &value[..end],
        None => value,
    }
}

/// `value` as a series is keyed by: [`bounded`], every control character but a line feed
/// already as [`escape`] shows it, so two values that are exposed alike are one series (a
/// duplicate series breaks the scrape).
fn label(value: &str) -> std::borrow::Cow<'_, str> {
    let value = bounded(value);
    match value.chars().any(|c| c.is_control() && c != '\n') {
        false => std::borrow::Cow::Borrowed(value),
        true => value
            .chars()
            .map(|c| match c {
                c if c.is_control() && c != '\n' => '\u{fffd}',
                c => c,
            })
            .collect(),
    }
}

/// Escapes a label value for the Prometheus text format; another control character (a CR, a
/// tab, a NUL a client put in its name) becomes U+FFFD, so no line-based reader of the
/// exposition can be misled.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(client: &str, outcome: Outcome, ms: u64) -> CallRecord<'_> {
        CallRecord {
            client,
            server: "fx",
            tool: "mcp__fx__echo",
            outcome,
            duration: Duration::from_millis(ms),
            arguments: None,
        }
    }

    #[test]
    fn hostile_client_names_cannot_break_the_exposition() {
        let metrics = Metrics::default();
        metrics.record(
            &record(
                "evil\"} 1\nmcp_harness_catalog_revision 999",
                Outcome::Ok,
                3,
            ),
            None,
        );
        let text = metrics.render(&Snapshot::empty(), 0, 0);
        assert!(
            !text.contains("\nmcp_harness_catalog_revision 999"),
            "{text}"
        );
        assert!(
            text.contains("client=\"evil\\\"} 1\\nmcp_harness_catalog_revision 999\""),
            "{text}"
        );
        metrics.record(&record("cr\rtab\tnul\0", Outcome::Ok, 3), None);
        let text = metrics.render(&Snapshot::empty(), 0, 0);
        assert!(
            text.contains("client=\"cr\u{fffd}tab\u{fffd}nul\u{fffd}\""),
            "{text}"
        );
        // Names exposed alike are one series: a duplicate series breaks the scrape.
        for client in ["cr\rx", "cr\tx", "cr\u{fffd}x"] {
            metrics.record(&record(client, Outcome::Ok, 3), None);
        }
        let text = metrics.render(&Snapshot::empty(), 0, 0);
        let counts = text
            .lines()
            .filter(|l| l.starts_with("mcp_harness_calls_total{") && l.contains("cr\u{fffd}x"))
            .collect::<Vec<_>>();
        assert_eq!(counts.len(), 1, "{text}");
        assert!(counts[0].ends_with(" 3"), "{text}");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_series_capped() {
        let metrics = Metrics::default();
        metrics.record(&record("a", Outcome::Ok, 3), None);
        metrics.record(&record("a", Outcome::Ok, 300), None);
        let text = metrics.render(&Snapshot::empty(), 0, 0);
        assert!(text.contains("le=\"0.005\"} 1"), "{text}");
        assert!(text.contains("le=\"0.5\"} 2"), "{text}");
        assert!(text.contains("le=\"+Inf\"} 2"), "{text}");
        for i in 0..MAX_SERIES + 10 {
            metrics.record(&record(&format!("c{i}"), Outcome::Ok, 1), None);
        }
        assert!(
            metrics.calls.len() <= MAX_SERIES + 1,
            "{}",
            metrics.calls.len()
        );
    }

    /// A client that calls ever new (unknown) tool names makes a series for each of the first
    /// [`MAX_UNRESOLVED`] and one (tool `_unknown`) for the rest, not a series per name;
    /// made-up client names beyond [`MAX_CLIENTS`] are `other`.
    #[test]
    fn series_stay_capped_whatever_tools_are_called() {
        let metrics = Metrics::default();
        for i in 0..MAX_SERIES + 50 {
            let tool = format!("no-such-tool-{i}");
            let call = CallRecord {
                tool: &tool,
                server: "-",
                ..record("prober", Outcome::Unknown, 1)
            };
            metrics.record(&call, None);
        }
        assert_eq!(metrics.calls.len(), MAX_UNRESOLVED + 1);
        let unknown = metrics
            .calls
            .get(&("-", UNRESOLVED_TOOL, "prober", Outcome::Unknown) as &dyn SeriesKey)
            .expect("the one series");
        assert_eq!(
            crate::sync::lock(unknown.value()).count,
            (MAX_SERIES + 50 - MAX_UNRESOLVED) as u64
        );
        // The map's read guard is let go before recording again (the same shard).
        drop(unknown);
        for i in 0..MAX_CLIENTS + 20 {
            metrics.record(&record(&format!("made-up-{i}"), Outcome::Ok, 1), None);
        }
        assert_eq!(metrics.clients.len(), MAX_CLIENTS);
        let other = metrics
            .calls
            .get(&("fx", "mcp__fx__echo", "other", Outcome::Ok) as &dyn SeriesKey)
            .expect("the other clients' series");
        assert_eq!(crate::sync::lock(other.value()).count, 21);
    }

    /// With `--audit-arguments`, a call's arguments are written when it reached a tool and
    /// they are at most [`MAX_AUDITED_ARGUMENTS`] bytes; otherwise only their size (an unknown
    /// tool's megabytes filled the disk).
    #[test]
    fn audited_arguments_are_bounded_and_only_for_calls_that_reached_a_tool() {
        let path = std::env::temp_dir().join(format!("mcp-harness-audit-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let audit = Audit::open(&path, true).expect("audit file");
        let small: Map<String, Value> = [("q".to_string(), json!("hi"))].into_iter().collect();
        let big: Map<String, Value> = [("q".to_string(), json!("x".repeat(MAX_AUDITED_ARGUMENTS)))]
            .into_iter()
            .collect();
        let call = |server, arguments| CallRecord {
            server,
            arguments: Some(arguments),
            ..record("a", Outcome::Ok, 1)
        };
        audit.write(&call("fx", &small));
        audit.write(&call("fx", &big));
        audit.write(&call("-", &small));
        audit.write(&record("evil\u{202e}txt.exe\u{2028}x", Outcome::Ok, 1));
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        assert_eq!(lines[0]["arguments"], json!({"q": "hi"}));
        assert!(lines[1].get("arguments").is_none(), "{}", lines[1]);
        assert!(lines[1]["arguments_bytes"].as_u64() > Some(MAX_AUDITED_ARGUMENTS as u64));
        assert!(lines[2].get("arguments").is_none(), "{}", lines[2]);
        assert_eq!(lines[3]["client"], "evil\u{fffd}txt.exe\u{fffd}x");
        let _ = std::fs::remove_file(&path);
    }

    /// Labels are cut at 64 characters, not bytes, and a cut label finds its series again.
    #[test]
    fn labels_are_bounded_by_characters() {
        let long = "é".repeat(70);
        assert_eq!(bounded(&long).chars().count(), 64);
        assert_eq!(bounded("short"), "short");
        let metrics = Metrics::default();
        metrics.record(&record(&long, Outcome::Ok, 1), None);
        metrics.record(&record(&"é".repeat(80), Outcome::Ok, 1), None);
        assert_eq!(metrics.calls.len(), 1);
        let text = metrics.render(&Snapshot::empty(), 0, 0);
        assert!(
            text.contains(&format!("client=\"{}\",outcome=\"ok\"}} 2", "é".repeat(64))),
            "{text}"
        );
    }
}
