//! Command-line options of the fixture server.
//!
//! Invariant: a [`FixtureOptions`] value produced by [`FixtureOptions::from_args`]
//! is always usable as-is — every flag was recognised, every numeric value
//! parsed, and `page_size`, when set, is at least 1. Anything else is rejected
//! with a human-readable message instead of being silently defaulted.

use std::fmt;

/// Which transport the fixture binary serves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportKind {
    /// Newline-delimited JSON-RPC on stdin/stdout.
    #[default]
    Stdio,
    /// Streamable HTTP at `http://127.0.0.1:PORT/mcp`.
    Http,
}

/// How `--tamper-skill` alters `pdf-processing`'s `SKILL.md`, the way the conformance suite's
/// SEP-2640 verification scenarios do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillTamper {
    /// Same size, different bytes: the listed digest no longer matches.
    Digest,
    /// A line appended: the listed size no longer matches.
    Size,
    /// The file's `description` differs from the listed frontmatter, while the listed digest
    /// and size are those of the served file (only the frontmatter comparison catches it).
    Frontmatter,
}

impl SkillTamper {
    fn parse(value: &str) -> Option<Self> {
        match value {
            "digest" => Some(Self::Digest),
            "size" => Some(Self::Size),
            "frontmatter" => Some(Self::Frontmatter),
            _ => None,
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stdio => "stdio",
            Self::Http => "http",
        })
    }
}

/// Behaviour switches of the fixture server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureOptions {
    /// Server name reported in `serverInfo.name`.
    pub name: String,
    /// Number of generated tools `tool_0 .. tool_{n-1}`.
    pub tools: usize,
    /// When set, every list result is paginated with this many items per page.
    pub page_size: Option<usize>,
    /// Instructions returned in the initialize result.
    pub instructions: Option<String>,
    /// Sleep forever before serving (to exercise startup timeouts).
    pub hang_at_start: bool,
    /// Sleep this many milliseconds before serving (`--start-delay-ms N`): a slow start.
    pub start_delay_ms: u64,
    /// Exit with this code before serving.
    pub exit_at_start: Option<i32>,
    /// Line written to stderr at start (by [`crate::run_main`]).
    pub stderr_banner: Option<String>,
    /// Transport used by [`crate::run_main`] (`--transport`).
    pub transport: TransportKind,
    /// TCP port for the HTTP transport; 0 picks a free port (`--port`).
    pub port: u16,
    /// Lists this static tool twice, a protocol violation that clients must survive
    /// (`--duplicate-tool NAME`).
    pub duplicate_tool: Option<String>,
    /// Lists tools with hostile metadata (`--hostile`; see the `hostile` module).
    pub hostile: bool,
    /// Lists tools whose results are broken or hostile (`--bad-results`; see the
    /// `bad_results` module).
    pub bad_results: bool,
    /// Declares the experimental capability that opts out of client catalog caches
    /// (`--no-catalog-cache`).
    pub no_catalog_cache: bool,
    /// Declares the SEP-2640 skills extension and serves the fixture's skills (`--skills`).
    pub skills: bool,
    /// Serves `pdf-processing`'s `SKILL.md` altered this way (`--tamper-skill MODE`); only
    /// with `skills` (the flag sets it).
    pub tamper_skill: Option<SkillTamper>,
    /// Ends the connection right after answering this many `tools/call` requests; the program
    /// then exits with [`crate::CRASH_EXIT_CODE`] (`--crash-after-calls N`, at least 1; stdio and
    /// in-process).
    pub crash_after_calls: Option<u64>,
    /// Answers the first N HTTP requests with 503 (`--fail-http N`; Streamable HTTP only).
    pub fail_http: u64,
    /// Keeps running after the client closed stdin, as servers that ignore EOF do
    /// (`--ignore-stdin-eof`; stdio program only).
    pub ignore_stdin_eof: bool,
    /// Starts two `sleep` children before serving: one in the server's process group and one
    /// in a session of its own (`setsid`), both inheriting the server's environment
    /// (`--spawn-grandchildren`; program only).
    pub spawn_grandchildren: bool,
    /// Exits with this code in the middle of the first `tools/call`, before answering it,
    /// after a line on stderr (`--die-on-call CODE`; stdio program only — it ends the process).
    pub die_on_call: Option<i32>,
    /// Writes `fixture: NAME=<value>` on stderr at start (`--echo-env NAME`), as servers that
    /// log their settings do.
    pub echo_env: Option<String>,
    /// Lists `wire_fault`, whose answer is broken on the wire: invalid UTF-8, nested too deep,
    /// or with the id of no request (`--wire-faults`; see the `wire_faults` module).
    pub wire_faults: bool,
    /// Lists `deep_schema`, a tool whose input schema nests past the client decoder's depth
    /// limit (`--deep-schema-tool`).
    pub deep_schema_tool: bool,
    /// Serves the official conformance suite's server scenarios instead of the fixture's
    /// catalogue (`--conformance`; see the `conformance` module); every other catalogue flag
    /// is ignored.
    pub conformance: bool,
    /// Lists `ask_form`, `ask_roots`, `ask_sample` and `ask_url`, tools that send the client an
    /// elicitation, a `roots/list` and a `sampling/createMessage` and report what came back
    /// (`--client-requests`; see the `client_requests` module).
    pub client_requests: bool,
    /// Declares `logging` and `completions`, lists `log` and answers `completion/complete`
    /// (`--log-and-complete`; see the `extras` module).
    pub log_and_complete: bool,
    /// Declares no `resources` capability (`--no-resources`): a client must not ask it for
    /// resources. Its resource handlers still answer.
    pub no_resources: bool,
    /// Declares `resources` without `subscribe` (`--no-subscribe`).
    pub no_subscribe: bool,
    /// Answers `resources/templates/list` with -32601, as older servers that declare
    /// `resources` but never implemented templates do (`--no-templates-method`).
    pub no_templates_method: bool,
}

impl Default for FixtureOptions {
    fn default() -> Self {
        Self {
            name: "fixture".to_owned(),
            tools: 0,
            page_size: None,
            instructions: None,
            hang_at_start: false,
            start_delay_ms: 0,
            exit_at_start: None,
            stderr_banner: None,
            transport: TransportKind::Stdio,
            port: 0,
            duplicate_tool: None,
            hostile: false,
            bad_results: false,
            no_catalog_cache: false,
            skills: false,
            tamper_skill: None,
            crash_after_calls: None,
            fail_http: 0,
            ignore_stdin_eof: false,
            spawn_grandchildren: false,
            die_on_call: None,
            echo_env: None,
            wire_faults: false,
            deep_schema_tool: false,
            conformance: false,
            client_requests: false,
            log_and_complete: false,
            no_resources: false,
            no_subscribe: false,
            no_templates_method: false,
        }
    }
}

/// One-line usage summary, appended to argument errors.
pub const USAGE: &str = "usage: mcp-fixture-server [--transport stdio|http] [--port N] [--name NAME] \
[--tools N] [--page-size N] [--instructions TEXT] [--hang-at-start] [--start-delay-ms N] [--exit-at-start CODE] \
[--stderr-banner TEXT] [--duplicate-tool NAME] [--no-catalog-cache] [--hostile] [--bad-results] [--skills] \
[--tamper-skill digest|size|frontmatter] [--crash-after-calls N] [--fail-http N] \
[--ignore-stdin-eof] [--spawn-grandchildren] [--die-on-call CODE] [--echo-env NAME] [--wire-faults] \
[--deep-schema-tool] [--conformance] [--client-requests] [--log-and-complete] [--no-resources] [--no-subscribe] \
[--no-templates-method]";

impl FixtureOptions {
    /// Parses the fixture's flags. `args` must not include the program name.
    ///
    /// Both `--flag value` and `--flag=value` are accepted.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut opts = Self::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => {
                    (flag.to_owned(), Some(value.to_owned()))
                }
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| -> Result<String, String> {
                match inline.clone() {
                    Some(v) => Ok(v),
                    None => args
                        .next()
                        .ok_or_else(|| format!("flag {name} needs a value\n{USAGE}")),
                }
            };
            match flag.as_str() {
                "--transport" => {
                    opts.transport = match value("--transport")?.as_str() {
                        "stdio" => TransportKind::Stdio,
                        "http" => TransportKind::Http,
                        other => {
                            return Err(format!(
                                "--transport must be stdio or http, got {other:?}\n{USAGE}"
                            ));
                        }
                    }
                }
                "--port" => opts.port = parse_num("--port", &value("--port")?)?,
                "--name" => opts.name = value("--name")?,
                "--tools" => opts.tools = parse_num("--tools", &value("--tools")?)?,
                "--page-size" => {
                    let size: usize = parse_num("--page-size", &value("--page-size")?)?;
                    if size == 0 {
                        return Err(format!("--page-size must be at least 1\n{USAGE}"));
                    }
                    opts.page_size = Some(size);
                }
                "--instructions" => opts.instructions = Some(value("--instructions")?),
                "--hang-at-start" if inline.is_none() => opts.hang_at_start = true,
                "--start-delay-ms" => {
                    opts.start_delay_ms =
                        parse_num("--start-delay-ms", &value("--start-delay-ms")?)?
                }
                "--exit-at-start" => {
                    opts.exit_at_start =
                        Some(parse_num("--exit-at-start", &value("--exit-at-start")?)?)
                }
                "--stderr-banner" => opts.stderr_banner = Some(value("--stderr-banner")?),
                "--duplicate-tool" => opts.duplicate_tool = Some(value("--duplicate-tool")?),
                "--hostile" => opts.hostile = true,
                "--bad-results" => opts.bad_results = true,
                "--no-catalog-cache" => opts.no_catalog_cache = true,
                "--skills" if inline.is_none() => opts.skills = true,
                "--tamper-skill" => {
                    let mode = value("--tamper-skill")?;
                    let tamper = SkillTamper::parse(&mode).ok_or_else(|| {
                        format!(
                            "--tamper-skill must be digest, size or frontmatter, got {mode:?}\n{USAGE}"
                        )
                    })?;
                    opts.tamper_skill = Some(tamper);
                    opts.skills = true;
                }
                "--crash-after-calls" => {
                    let calls: u64 =
                        parse_num("--crash-after-calls", &value("--crash-after-calls")?)?;
                    if calls == 0 {
                        return Err(format!("--crash-after-calls must be at least 1\n{USAGE}"));
                    }
                    opts.crash_after_calls = Some(calls);
                }
                "--fail-http" => opts.fail_http = parse_num("--fail-http", &value("--fail-http")?)?,
                "--ignore-stdin-eof" if inline.is_none() => opts.ignore_stdin_eof = true,
                "--spawn-grandchildren" if inline.is_none() => opts.spawn_grandchildren = true,
                "--die-on-call" => {
                    opts.die_on_call = Some(parse_num("--die-on-call", &value("--die-on-call")?)?)
                }
                "--echo-env" => opts.echo_env = Some(value("--echo-env")?),
                "--wire-faults" if inline.is_none() => opts.wire_faults = true,
                "--deep-schema-tool" if inline.is_none() => opts.deep_schema_tool = true,
                "--conformance" if inline.is_none() => opts.conformance = true,
                "--client-requests" if inline.is_none() => opts.client_requests = true,
                "--log-and-complete" if inline.is_none() => opts.log_and_complete = true,
                "--no-resources" if inline.is_none() => opts.no_resources = true,
                "--no-subscribe" if inline.is_none() => opts.no_subscribe = true,
                "--no-templates-method" if inline.is_none() => opts.no_templates_method = true,
                _ => return Err(format!("unknown argument {arg:?}\n{USAGE}")),
            }
        }
        Ok(opts)
    }
}

fn parse_num<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{flag} expects a number, got {value:?}\n{USAGE}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<FixtureOptions, String> {
        FixtureOptions::from_args(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn defaults() {
        assert_eq!(parse(&[]), Ok(FixtureOptions::default()));
    }

    #[test]
    fn all_flags() {
        let opts = parse(&[
            "--transport=http",
            "--port",
            "0",
            "--name",
            "x",
            "--tools",
            "3",
            "--page-size",
            "2",
            "--instructions",
            "do it",
            "--hang-at-start",
            "--exit-at-start",
            "7",
            "--stderr-banner",
            "hi",
            "--crash-after-calls",
            "2",
            "--fail-http=4",
        ])
        .expect("valid flags");
        assert_eq!(opts.transport, TransportKind::Http);
        assert_eq!(opts.name, "x");
        assert_eq!(opts.tools, 3);
        assert_eq!(opts.page_size, Some(2));
        assert_eq!(opts.instructions.as_deref(), Some("do it"));
        assert!(opts.hang_at_start);
        assert_eq!(opts.exit_at_start, Some(7));
        assert_eq!(opts.stderr_banner.as_deref(), Some("hi"));
        assert!(!opts.skills);
        assert_eq!(opts.crash_after_calls, Some(2));
        assert_eq!(opts.fail_http, 4);
    }

    #[test]
    fn skill_flags() {
        assert!(parse(&["--skills"]).expect("valid").skills);
        let opts = parse(&["--tamper-skill=size"]).expect("valid");
        assert!(opts.skills, "--tamper-skill implies --skills");
        assert_eq!(opts.tamper_skill, Some(SkillTamper::Size));
        assert_eq!(
            parse(&["--skills", "--tamper-skill", "frontmatter"])
                .expect("valid")
                .tamper_skill,
            Some(SkillTamper::Frontmatter)
        );
        assert!(parse(&["--tamper-skill", "bytes"]).is_err());
        assert!(parse(&["--tamper-skill"]).is_err());
        assert!(parse(&["--skills=yes"]).is_err());
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--tools"]).is_err());
        assert!(parse(&["--tools", "many"]).is_err());
        assert!(parse(&["--page-size", "0"]).is_err());
        assert!(parse(&["--transport", "ws"]).is_err());
        assert!(parse(&["--port", "70000"]).is_err());
        assert!(parse(&["--hang-at-start=yes"]).is_err());
        assert!(parse(&["--crash-after-calls", "0"]).is_err());
        assert!(parse(&["--fail-http", "-1"]).is_err());
    }
}
