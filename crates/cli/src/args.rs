//! The command line: global options and the commands, as clap parses them.
//!
//! Invariant: each command says which servers it needs ([`Command::wants`]), so a targeted
//! command starts only its own server.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{commands, exit, targets};

#[derive(Parser)]
#[command(
    name = "mcp-harness",
    version,
    about = "Inspect, call and watch MCP servers through mcp-harness",
    after_help = exit::TABLE
)]
pub(crate) struct Cli {
    /// Read only this config file, in any supported format (Claude Code, Claude Desktop,
    /// Cursor, VS Code, Codex, Gemini CLI, mcp-harness). Default: the user config merged with
    /// ./.mcp.json and ./.mcp-harness.json (see `mcp-harness config`).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// More logs on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// Run every tool call that would need approval without asking. Deny rules still hold. Use
    /// only where every configured server is trusted with every call.
    #[arg(long, global = true)]
    pub(crate) yes: bool,
    /// Start only this server (repeat for more); any command then sees only these servers.
    /// Without it, `call`, `prompt`, `read`, `subscribe` and `skill` start only the server
    /// their name or argument belongs to.
    #[arg(long = "server", global = true, value_name = "NAME")]
    pub(crate) servers: Vec<String>,
    /// Output for scripts: JSON on stdout (one object per line for `watch` and `subscribe`);
    /// `call --json` prints the result object even when the tool failed.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// A directory servers may work in, offered as a root (`roots/list`); repeat for more.
    /// Default: the working directory.
    #[arg(long = "root", global = true, value_name = "DIR")]
    pub(crate) roots: Vec<PathBuf>,
    /// Show the servers' log messages of LEVEL and above on stderr, and ask each server the
    /// command uses that declares logging to send them (`logging/setLevel`). Without it, warning
    /// and above are shown (every level with -v) and no level is asked for. With --json, each
    /// is a JSON line on stderr: {"log": {"server", "level", "logger", "data", "time"}}.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub(crate) server_log_level: Option<crate::server_logs::Level>,
    /// Talk to a running `mcp-harness serve --http` at URL (e.g. http://127.0.0.1:8080/mcp)
    /// instead of starting servers: no config file is read, names are the gateway's
    /// (`mcp__SERVER__TOOL`) unchanged, and the gateway's permission rules decide.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) connect: Option<String>,
    /// With --connect: send `Authorization: Bearer <the value of VAR>` to a gateway whose
    /// client profiles ask for a bearer token (`gateway.clients.*.auth.tokenEnv` on its side).
    /// The token is read from the environment, never from the command line, and never shown.
    #[arg(long, global = true, value_name = "VAR", requires = "connect")]
    pub(crate) connect_token_env: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Each server's state, transport, tool count and last error.
    Servers,
    /// The tools the model sees (qualified names): exactly what a step bound now shows — server
    /// tools within the exposure budgets (shared fairly across servers), the harness's built-in
    /// tools, and with tool search on the tools found through it.
    Tools {
        /// List what was withheld from the model, and why (listing, filters, exposure budgets,
        /// name conflicts).
        #[arg(long)]
        hidden: bool,
    },
    /// Prompts, usable as commands.
    Prompts,
    /// Resources and resource templates.
    Resources,
    /// Skills (SEP-2640) of every server; with a query, the best matches first.
    Skills {
        /// Search names and descriptions.
        query: Option<String>,
    },
    /// Load a skill: fetch its SKILL.md now and verify it against the listing.
    Skill {
        server: String,
        /// The skill's name, or its `SKILL.md` URI (when the server lists several skills of
        /// one name, as a gateway in front of several servers may).
        name: String,
    },
    /// Run a command built from a prompt: `prompt mcp__srv__review '{"file": "x"}'`.
    Prompt {
        name: String,
        /// Arguments: a JSON object, @FILE (read from FILE) or - (read from stdin).
        args: Option<String>,
    },
    /// Read a resource: `read SERVER URI`.
    Read {
        server: String,
        uri: String,
        /// Write the contents to this file instead (a blob decoded from base64, text as is;
        /// `-`: standard output, the bytes alone); refused when the answer holds several
        /// resources (`--json` shows them all).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Subscribe to a resource and print each update, until interrupted.
    Subscribe {
        server: String,
        uri: String,
        /// Stop after this many updates (at least 1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// Call a tool by its qualified name, e.g. `call mcp__fs__read_file '{"path": "x"}'`.
    Call {
        name: String,
        /// Arguments: a JSON object, @FILE (read from FILE) or - (read from stdin).
        args: Option<String>,
    },
    /// Complete a prompt argument or a resource template variable (`completion/complete`):
    /// `complete mcp__srv__review file src/`, `complete 'file:///{path}' path src/`.
    Complete {
        /// A prompt's qualified name, or a resource template's URI template.
        name: String,
        /// The prompt argument or template variable to complete.
        argument: String,
        /// What is typed so far.
        #[arg(default_value = "")]
        value: String,
        /// An argument already filled in, which the server may use: KEY=VALUE (repeat for more).
        #[arg(long = "with", value_name = "KEY=VALUE")]
        with: Vec<String>,
    },
    /// Send `ping` to a server and print the round-trip time.
    Ping { server: String },
    /// Print a completion script for SHELL: `mcp-harness completions bash >
    /// ~/.local/share/bash-completion/completions/mcp-harness` (zsh: a `_mcp-harness` file on
    /// $fpath; fish: ~/.config/fish/completions/mcp-harness.fish).
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff), generated from these definitions: `mcp-harness man | man
    /// -l -`.
    Man,
    /// An interactive session against one runtime: `call`, `prompt`, `read`, `subscribe`,
    /// `servers`, `tools`, `restart`, `enable`/`disable` (this session only), `roots`, with
    /// line editing, history and tab completion; piped, it reads the same commands line by line.
    Shell,
    /// Print every new catalog revision and what changed, until interrupted.
    Watch {
        /// Stop after this many revisions (at least 1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// The merged config: each server's transport, source file and whether it is enabled, and
    /// the servers dropped, with why. `config import FILE` converts another host's config;
    /// `config import --from HOST` adds that host's servers to ours.
    Config {
        #[command(subcommand)]
        action: Option<commands::config::Action>,
    },
    /// Project config files (./.mcp.json, ./.mcp-harness.json) start servers only once trusted:
    /// `trust PATH` shows what the file would start and trusts its current content (a folder:
    /// its project files); `trust --revoke PATH` forgets it; `trust` lists.
    Trust {
        path: Option<PathBuf>,
        /// Forget the file instead: its servers no longer start.
        #[arg(long)]
        revoke: bool,
    },
    /// Serve every configured server's governed catalog as one MCP server: over stdio (use
    /// `mcp-harness serve` as the `command` in a host's config) or Streamable HTTP (`--http`).
    Serve(commands::serve::ServeArgs),
    #[command(flatten)]
    Edit(commands::edit::Edit),
    /// A tour on built-in servers; needs no config and no install.
    Demo,
    /// Log in to an OAuth-protected HTTP server: opens the browser (or prints the URL) and
    /// takes the redirect on a loopback callback or pasted on stdin.
    Login(commands::auth::LoginArgs),
    /// Delete the stored OAuth tokens of a server.
    Logout { server: String },
    /// Client mode for the official MCP conformance suite (reads MCP_CONFORMANCE_SCENARIO).
    ConformanceClient { url: String },
    /// Run the built-in fixture MCP server (used by `demo` over stdio).
    #[command(hide = true)]
    FixtureServer {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

impl Command {
    /// What the command names, which decides the servers it starts ([`targets::plan`]).
    pub(crate) fn wants(&self) -> targets::Wants<'_> {
        match self {
            Command::Call { name, .. } | Command::Prompt { name, .. } => {
                targets::Wants::Qualified(name)
            }
            // A template's URI template names no server.
            Command::Complete { name, .. } if !name.contains('{') => {
                targets::Wants::Qualified(name)
            }
            Command::Read { server, .. }
            | Command::Subscribe { server, .. }
            | Command::Skill { server, .. }
            | Command::Ping { server } => targets::Wants::Server(server),
            _ => targets::Wants::Every,
        }
    }
}

/// clap_complete's bash script names a subcommand's state `mcp__harness__subcmd__X` where it
/// walks the words but `mcp__subcmd__harness__subcmd__X` in the `case` that completes it (the
/// `-` of a binary's name is mangled twice; clap-rs/clap#6421), so nothing after a subcommand
/// ever completed: the labels are written as the walk names them.
fn bash_case_labels(script: &[u8]) -> String {
    String::from_utf8_lossy(script).replace("mcp__subcmd__harness", "mcp__harness")
}

/// clap_complete's fish script puts the values of an option (`-a "…"`) in double quotes, where
/// fish expands variables: a value's description naming `$CODEX_HOME` showed the user's
/// folder, or nothing. Every `$` inside those quotes is escaped.
fn fish_values_unexpanded(script: &[u8]) -> String {
    let script = String::from_utf8_lossy(script);
    let mut out = String::with_capacity(script.len());
    let mut rest = script.as_ref();
    while let Some(at) = rest.find(" -a \"") {
        let (before, values) = rest.split_at(at + 5);
        out.push_str(before);
        // The closing quote: the first one not escaped.
        let mut end = values.len();
        let mut escaped = false;
        for (i, c) in values.char_indices() {
            match c {
                '"' if !escaped => {
                    end = i;
                    break;
                }
                '\\' => escaped = !escaped,
                _ => escaped = false,
            }
        }
        let mut previous = None;
        for c in values[..end].chars() {
            if c == '$' && previous != Some('\\') {
                out.push('\\');
            }
            out.push(c);
            previous = Some(c);
        }
        rest = &values[end..];
    }
    out.push_str(rest);
    out
}

/// `completions SHELL` and `man`: print what clap generates from [`Cli`]; no runtime starts.
pub(crate) fn generated(command: &Command) -> Option<u8> {
    use clap::CommandFactory;
    let cli = Cli::command();
    // Generated whole first: clap_complete panics on a failed write.
    let mut text = Vec::new();
    match command {
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut cli.clone(), "mcp-harness", &mut text);
            match shell {
                clap_complete::Shell::Bash => text = bash_case_labels(&text).into_bytes(),
                clap_complete::Shell::Fish => text = fish_values_unexpanded(&text).into_bytes(),
                _ => {}
            }
        }
        Command::Man => {
            if let Err(e) = clap_mangen::Man::new(cli).render(&mut text) {
                return Some(crate::fail(
                    &format!("cannot render the manual page: {e}"),
                    exit::Exit::Failed,
                ));
            }
        }
        _ => return None,
    }
    emit!("{}", String::from_utf8_lossy(&text));
    Some(exit::Exit::Ok.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fish_values_keep_their_dollar_signs() {
        let script = br#"complete -c x -d 'a $KEEP' -a "one\t'`$CODEX_HOME/c` \"q\" \$done'
two" -f
function f; echo $argv; end"#;
        let fixed = fish_values_unexpanded(script);
        assert!(fixed.contains(r"`\$CODEX_HOME/c`"), "{fixed}");
        assert!(
            fixed.contains(r"\$done"),
            "an escaped one stays once: {fixed}"
        );
        assert!(!fixed.contains(r"\\$done"), "{fixed}");
        assert!(
            fixed.contains("'a $KEEP'") && fixed.contains("echo $argv"),
            "{fixed}"
        );
    }

    #[test]
    fn bash_labels_are_named_as_the_walk_names_them() {
        assert_eq!(
            bash_case_labels(b"        mcp__subcmd__harness__subcmd__config)"),
            "        mcp__harness__subcmd__config)"
        );
    }
}
