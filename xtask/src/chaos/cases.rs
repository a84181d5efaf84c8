//! The fault matrix: every case `cargo xtask chaos` runs, and which of them still fail on main.
//!
//! Invariant: every case has a deadline (time to its outcome) and a memory bound, and the
//! known-failing list names only cases of this table, each with the issue-13 point that fixes it
//! (a unit test below checks both).

use std::time::Duration;

use super::raw::{HttpFault, RequestKind};

/// The server a stdio case puts beside the healthy one.
#[derive(Debug, Clone, Copy)]
pub(super) enum Server {
    /// The fixture server with these arguments.
    Fixture(&'static [&'static str]),
    /// The raw server (`cargo xtask chaos-server MODE`).
    Raw(&'static str),
    /// The fixture started by `sh -c`, after this shell snippet (which starts a grandchild).
    ShellThenFixture(&'static str),
}

/// What a case does.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// A stdio server beside the healthy one; `call` is its tool and JSON arguments.
    Stdio {
        server: Server,
        call: Option<(&'static str, &'static str)>,
        startup_s: u64,
        tool_s: u64,
    },
    /// The raw Streamable HTTP server with a fault on one request kind (none: healthy).
    Http {
        fault: Option<(RequestKind, HttpFault)>,
    },
    /// `mcp-harness watch` is sent this signal once both servers are connected; `server` is
    /// the one beside the healthy fixture.
    Signal { signal: libc::c_int, server: Server },
}

/// One row of the matrix.
#[derive(Debug, Clone)]
pub(super) struct Case {
    pub name: String,
    pub kind: Kind,
    /// Longest acceptable time from the harness's start to the outcome (for signals: from the
    /// signal to the harness's exit). Past it the run counts as hung and is killed.
    pub deadline: Duration,
    /// Acceptable outcomes (prefixes: `failed` accepts `failed`, `connected/ok` only that); empty:
    /// any outcome is acceptable as long as it comes in time.
    pub expect: &'static [&'static str],
    /// Peak RSS bound of the harness process, MiB.
    pub rss_bound_mib: u64,
    /// Texts the outcome's message must not contain, each with the issue-13 point it shows.
    pub reject_detail: &'static [(&'static str, u8)],
}

/// Cases that fail on main today, with the issue-13 point whose fix makes them pass.
/// `--skip-known` leaves them out (CI); remove a line when its fix lands.
pub(super) const KNOWN_FAILING: &[(&str, u8)] = &[];

/// The issue point a known-failing case waits for.
pub(super) fn known_point(name: &str) -> Option<u8> {
    KNOWN_FAILING
        .iter()
        .find(|(case, _)| *case == name)
        .map(|(_, point)| *point)
}

const ECHO: Option<(&str, &str)> = Some(("echo", r#"{"message": "hi"}"#));
const DEFAULT_RSS_MIB: u64 = 256;

fn stdio(
    name: &str,
    server: Server,
    call: Option<(&'static str, &'static str)>,
    (startup_s, tool_s, deadline_s): (u64, u64, u64),
    expect: &'static [&'static str],
) -> Case {
    Case {
        name: name.to_owned(),
        kind: Kind::Stdio {
            server,
            call,
            startup_s,
            tool_s,
        },
        deadline: Duration::from_secs(deadline_s),
        expect,
        rss_bound_mib: DEFAULT_RSS_MIB,
        reject_detail: &[],
    }
}

/// Every case, in table order.
pub(super) fn all() -> Vec<Case> {
    use Server::*;
    let mut cases = vec![
        stdio(
            "exit-at-start",
            Fixture(&["--exit-at-start", "3"]),
            None,
            (5, 5, 10),
            &["failed"],
        ),
        stdio(
            "hang-before-initialize",
            Fixture(&["--hang-at-start"]),
            None,
            (2, 5, 10),
            &["failed"],
        ),
        stdio(
            "hang-after-initialize",
            Raw("hang-after-init"),
            None,
            (2, 5, 10),
            &["failed"],
        ),
        stdio(
            "hang-on-listing",
            Raw("hang-on-listing"),
            ECHO,
            (2, 5, 10),
            &[],
        ),
        // A call that dies must fail at once, not after `toolTimeoutSec` (30 s).
        stdio(
            "dies-mid-call",
            Raw("die-mid-call"),
            ECHO,
            (5, 30, 10),
            &["connected/transport"],
        ),
        stdio("wrong-response-id", Raw("wrong-id"), ECHO, (5, 3, 10), &[]),
        stdio(
            "non-json-line",
            Raw("non-json"),
            ECHO,
            (5, 5, 10),
            &["connected/ok"],
        ),
        // An undecodable answer fails its request at once (point 3), not after 30 s.
        stdio(
            "invalid-utf8",
            Raw("invalid-utf8"),
            ECHO,
            (5, 30, 10),
            &["connected/"],
        ),
        // Over rmcp's 16 MiB line: arrives or fails at once (point 2), not after 30 s.
        stdio(
            "oversize-message",
            Raw("oversize"),
            ECHO,
            (5, 30, 15),
            &["connected/"],
        ),
        stdio(
            "endless-line",
            Raw("endless-line"),
            ECHO,
            (5, 30, 15),
            &["connected/"],
        ),
        stdio(
            "log-flood",
            Raw("log-flood"),
            ECHO,
            (5, 30, 30),
            &["connected/ok"],
        ),
        stdio(
            "list-changed-flood",
            Fixture(&[]),
            Some(("flood", r#"{"kind": "tools", "count": 2000}"#)),
            (5, 30, 30),
            &["connected/ok"],
        ),
        // One undecodable entry costs that entry, not the server (point 3).
        stdio(
            "nested-schema",
            Raw("nested-schema"),
            ECHO,
            (5, 5, 10),
            &["connected/ok"],
        ),
        stdio(
            "endless-cursor",
            Raw("endless-cursor"),
            None,
            (5, 5, 10),
            &[],
        ),
        stdio(
            "repeated-cursor",
            Raw("repeated-cursor"),
            None,
            (5, 5, 10),
            &[],
        ),
        stdio(
            "hostile-names",
            Fixture(&["--hostile"]),
            ECHO,
            (10, 5, 20),
            &["connected/ok"],
        ),
        stdio(
            "grandchild",
            ShellThenFixture("sleep 300 </dev/null >/dev/null 2>&1 &"),
            ECHO,
            (5, 5, 10),
            &["connected/ok"],
        ),
        // A grandchild that left the process group is reaped at shutdown (point 6).
        stdio(
            "setsid-grandchild",
            ShellThenFixture("setsid sleep 300 </dev/null >/dev/null 2>&1 &"),
            ECHO,
            (5, 5, 10),
            &["connected/ok"],
        ),
    ];
    // Over the listing's 10,000-item guard: failing the server at once, with the reason, is
    // the designed outcome; what is checked is time, memory and the healthy server.
    let mut many = stdio(
        "tools-20000",
        Fixture(&["--tools", "20000"]),
        ECHO,
        (30, 5, 40),
        &[],
    );
    many.rss_bound_mib = 1024;
    cases.insert(cases.len() - 3, many);

    cases.push(Case {
        name: "http-ok".into(),
        kind: Kind::Http { fault: None },
        deadline: Duration::from_secs(10),
        expect: &["connected/ok"],
        rss_bound_mib: DEFAULT_RSS_MIB,
        reject_detail: HTTP_REJECT,
    });
    let faults = [
        ("500", HttpFault::Status500),
        ("404", HttpFault::Status404),
        ("drop", HttpFault::Drop),
        ("endless-sse", HttpFault::EndlessSse),
    ];
    let kinds = [
        ("initialize", RequestKind::Initialize),
        ("initialized", RequestKind::Initialized),
        ("list", RequestKind::List),
        ("call", RequestKind::Call),
        ("stream", RequestKind::Stream),
    ];
    for (kind_name, kind) in kinds {
        for (fault_name, fault) in faults {
            cases.push(Case {
                name: format!("http-{fault_name}-{kind_name}"),
                kind: Kind::Http {
                    fault: Some((kind, fault)),
                },
                deadline: Duration::from_secs(10),
                expect: &[],
                rss_bound_mib: DEFAULT_RSS_MIB,
                // Only a refused `initialize` may switch to the 2026-07-28 handshake (point 1).
                reject_detail: if kind == RequestKind::Initialize
                    || matches!(fault, HttpFault::Status500)
                {
                    HTTP_REJECT
                } else {
                    HTTP_REJECT_LOCKOUT
                },
            });
        }
    }
    let grandchild = ShellThenFixture("sleep 300 </dev/null >/dev/null 2>&1 &");
    for (name, signal, server) in [
        ("signal-term", libc::SIGTERM, grandchild),
        ("signal-int", libc::SIGINT, grandchild),
        // Closing a terminal: servers that ignore stdin EOF must still go (point 6).
        ("signal-hup", libc::SIGHUP, Raw("ignore-eof")),
        // Nothing runs in the harness: only PR_SET_PDEATHSIG stops such a child (point 6).
        ("signal-kill", libc::SIGKILL, Raw("ignore-eof")),
    ] {
        cases.push(Case {
            name: name.into(),
            kind: Kind::Signal { signal, server },
            deadline: Duration::from_secs(10),
            expect: &[],
            rss_bound_mib: DEFAULT_RSS_MIB,
            reject_detail: &[],
        });
    }
    cases
}

/// HTTP errors are described, not shown as Rust type names (point 9).
const HTTP_REJECT: &[(&str, u8)] = &[("rmcp::", 9)];
/// ... and a failed first listing does not lock the server out with `server/discover` (point 1).
const HTTP_REJECT_LOCKOUT: &[(&str, u8)] = &[("server/discover", 1), ("rmcp::", 9)];

/// Startup and tool timeouts of the faulty HTTP server (s).
pub(super) const HTTP_TIMEOUTS: (u64, u64) = (3, 3);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_failing_cases_exist_and_names_are_unique() {
        let cases = all();
        let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        for (known, point) in KNOWN_FAILING {
            assert!(names.contains(known), "{known} is not a case");
            assert!((1..=14).contains(point));
        }
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "case names must be unique");
    }
}
