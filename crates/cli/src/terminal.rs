//! The CLI's answers to what needs a person: tool-call approvals, server elicitations and VS Code
//! config inputs, asked on the terminal. Without a terminal (stdin not a TTY), approvals are
//! denied with the config key that would allow the call, elicitations are declined and inputs
//! stay unset (the config error names the variable to set) — nothing is answered on the user's
//! behalf. Password inputs are read with echo off and never printed. Servers also get the roots
//! the user offered ([`Roots`]) and a sampling request is declined with the reason ([`NO_MODEL`]).

use std::io::{BufRead, IsTerminal, Write};

use futures::future::BoxFuture;
use mcp_harness_policy::{Approval, ApprovalRequest, Approver, DenyAll};
use mcp_harness_transport::{CallbackFuture, ClientCallbacks, Supported};
use rmcp::model::{ElicitRequestParams, ElicitResult};
use serde_json::{Value, json};

/// Whether a person can answer questions on this terminal.
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Reads one line from stdin on a blocking thread; `None` on end of input.
///
/// Dropped before a line came (its command was interrupted, or timed out), the question stops
/// waiting within [`ASK_POLL`]: it reads nothing more, so the line typed next goes to whoever
/// reads stdin then (the shell's prompt), and the process can exit without an Enter.
async fn ask(prompt: String) -> Option<String> {
    let given_up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _give_up = GiveUpOnDrop(given_up.clone());
    tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr();
        let _ = write!(err, "{prompt}");
        let _ = err.flush();
        while !given_up.load(std::sync::atomic::Ordering::SeqCst) {
            if stdin_ready(ASK_POLL) {
                let mut line = String::new();
                return match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(line.trim_end_matches(['\r', '\n']).to_string()),
                };
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
}

/// How often a question waiting for its line checks whether it was given up.
const ASK_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Sets its flag when dropped: the future waiting for a question's answer is gone.
struct GiveUpOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for GiveUpOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Whether stdin has something to read (a line, on a terminal; or its end) within `wait`.
fn stdin_ready(wait: std::time::Duration) -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDIN_FILENO,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: poll(2) on one valid pollfd.
    let ready = unsafe { libc::poll(&mut fd, 1, millis) };
    ready > 0
}

/// Asks a yes/no question on the terminal (blocking); only "y" or "yes" is a yes, and without a
/// terminal the answer is no.
pub(crate) fn ask_yes_no(question: &str) -> bool {
    if !interactive() {
        return false;
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{question}");
    let _ = err.flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) | Err(_) => false,
        Ok(_) => matches!(line.trim(), "y" | "Y" | "yes"),
    }
}

/// Asks for a VS Code input (`${input:ID}`) the environment has no value for; `None` without a
/// terminal. A `password` input is read with echo off.
pub(crate) fn ask_input(request: &mcp_harness_runtime::sources::InputRequest) -> Option<String> {
    if !interactive() {
        return None;
    }
    let about = request
        .description
        .as_deref()
        .map(|d| {
            format!(
                " — {}",
                d.chars().filter(|c| !c.is_control()).collect::<String>()
            )
        })
        .unwrap_or_default();
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "server \"{}\" needs VS Code input \"{}\"{about}\n(or set {} next time): ",
        request.server, request.id, request.variable
    );
    let _ = err.flush();
    let _echo = request.password.then(echo_off);
    let mut line = String::new();
    let read = std::io::stdin().lock().read_line(&mut line);
    if request.password {
        let _ = writeln!(err);
    }
    match read {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end_matches(['\r', '\n']).to_string()),
    }
}

/// The terminal settings of stdin as they were when made, put back when dropped: a shell that
/// a signal ends while its line editor has the terminal raw leaves it as it found it.
pub(crate) struct Restore(Option<libc::termios>);

impl Restore {
    /// The settings now (nothing to put back when stdin is not a terminal).
    pub(crate) fn now() -> Self {
        // SAFETY: tcgetattr on fd 0 into a termios we own.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return Self(None);
            }
            Self(Some(saved))
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            // SAFETY: restores the settings read in `now`.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, saved);
            }
        }
    }
}

/// Turns terminal echo off on stdin until the returned guard is dropped.
fn echo_off() -> Restore {
    let restore = Restore::now();
    if let Some(saved) = &restore.0 {
        let mut quiet = *saved;
        quiet.c_lflag &= !libc::ECHO;
        // SAFETY: tcsetattr on fd 0 with a termios we own; failure leaves echo as is.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &quiet);
        }
    }
    restore
}

/// Asks on the terminal before each call that needs approval.
pub(crate) struct TerminalApprover;

impl Approver for TerminalApprover {
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'static, Approval> {
        if !interactive() {
            return DenyAll.approve(request);
        }
        Box::pin(async move {
            let args = serde_json::to_string(&request.args).unwrap_or_default();
            let prompt = format!(
                "\n{} wants to run `{}` with {}\n  ({})\nAllow? [y/N] ",
                request.server, request.qualified_name, args, request.reason
            );
            match ask(prompt).await.as_deref().map(str::trim) {
                Some("y" | "Y" | "yes") => Approval::Approved,
                Some(_) => Approval::Denied {
                    reason: "the user said no".into(),
                },
                None => Approval::Cancelled,
            }
        })
    }
}

/// The directories the CLI offers servers as roots (`--root DIR`, else the working directory).
/// Shared by the callbacks (which answer `roots/list`) and the shell's `roots` command (which
/// changes them and then tells every server, `notifications/roots/list_changed`).
#[derive(Default)]
pub(crate) struct Roots(std::sync::RwLock<Vec<std::path::PathBuf>>);

impl Roots {
    /// Roots from `--root` (each made absolute and checked to be a directory), else the working
    /// directory. An `Err` names the argument to fix.
    pub(crate) fn from_args(dirs: &[std::path::PathBuf]) -> Result<Self, String> {
        let dirs = if dirs.is_empty() {
            vec![std::env::current_dir().map_err(|e| {
                format!("the working directory cannot be read ({e}); pass --root DIR")
            })?]
        } else {
            dirs.iter()
                .map(|d| Self::resolve(d).map_err(|e| format!("--root {e}")))
                .collect::<Result<_, _>>()?
        };
        Ok(Self(std::sync::RwLock::new(dirs)))
    }

    /// `dir` as an absolute directory path; an `Err` (`DIR: why`) says it is not a directory.
    pub(crate) fn resolve(dir: &std::path::Path) -> Result<std::path::PathBuf, String> {
        match std::fs::canonicalize(dir) {
            Ok(path) if path.is_dir() => Ok(path),
            Ok(_) => Err(format!("{}: not a directory", dir.display())),
            Err(e) => Err(format!("{}: {e}", dir.display())),
        }
    }

    /// The roots now.
    pub(crate) fn list(&self) -> Vec<std::path::PathBuf> {
        self.0.read().map(|r| r.clone()).unwrap_or_default()
    }

    /// Replaces the roots; returns whether they changed.
    pub(crate) fn set(&self, dirs: Vec<std::path::PathBuf>) -> bool {
        let Ok(mut roots) = self.0.write() else {
            return false;
        };
        let changed = *roots != dirs;
        *roots = dirs;
        changed
    }

    /// The `roots/list` answer: a `file://` URI (percent-encoded) and the folder's name each.
    fn answer(&self) -> Value {
        let roots: Vec<Value> = self
            .list()
            .iter()
            .map(|dir| {
                let name = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| dir.display().to_string());
                json!({"uri": file_uri(dir), "name": name})
            })
            .collect();
        json!({ "roots": roots })
    }
}

/// `file://` + the path, every byte outside RFC 3986's unreserved set and `/` percent-encoded.
pub(crate) fn file_uri(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

/// Why sampling is declined: the CLI has no model to run.
pub(crate) const NO_MODEL: &str = "declined: mcp-harness's command line has no model attached, \
so it cannot run sampling/createMessage; use a host with a model (or `mcp-harness serve` under one)";

/// The CLI's answers to servers' requests: elicitations asked on the terminal (a form field by
/// field, see [`crate::elicit`]; a URL shown until the user says they went there), roots from
/// [`Roots`], and sampling declined with the reason (no model is attached; the capability is not
/// declared, so only a server that ignores that asks).
pub(crate) struct TerminalCallbacks {
    /// The roots offered.
    pub roots: std::sync::Arc<Roots>,
}

// Sampling and roots are deprecated by SEP-2577, but servers of every earlier protocol use them.
#[allow(deprecated)]
impl ClientCallbacks for TerminalCallbacks {
    fn supports(&self) -> Supported {
        let on = interactive();
        Supported {
            elicitation_form: on,
            elicitation_url: on,
            sampling: false,
            roots: true,
        }
    }

    fn roots(&self, _server: &str) -> CallbackFuture<rmcp::model::ListRootsResult> {
        let answer = self.roots.answer();
        Box::pin(async move {
            serde_json::from_value(answer)
                .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
        })
    }

    fn sample(
        &self,
        server: &str,
        _request: rmcp::model::CreateMessageRequestParams,
    ) -> CallbackFuture<rmcp::model::CreateMessageResult> {
        say!(
            "{} asked to run a model (sampling/createMessage): {NO_MODEL}",
            server
                .chars()
                .filter(|c| !c.is_control())
                .collect::<String>()
        );
        // The protocol's answer for a refused sampling request: an error with code -1.
        Box::pin(async {
            Err(rmcp::ErrorData::new(
                rmcp::model::ErrorCode(-1),
                NO_MODEL,
                None,
            ))
        })
    }

    fn elicit(&self, server: &str, request: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        let server = server.to_string();
        Box::pin(async move {
            let to_error =
                |e: serde_json::Error| rmcp::ErrorData::internal_error(e.to_string(), None);
            if !interactive() {
                return serde_json::from_value(json!({"action": "decline"})).map_err(to_error);
            }
            let answer = match request {
                ElicitRequestParams::FormElicitationParams {
                    message,
                    requested_schema,
                    ..
                } => {
                    let order = requested_schema.property_order.clone().unwrap_or_default();
                    let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
                    let answer =
                        crate::elicit::ask_form(&server, &message, &schema, &order, ask, |text| {
                            say!("{text}")
                        })
                        .await;
                    crate::elicit::result_json(answer)
                }
                ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                    say!(
                        "\n{server} asks: {}\n  open: {}",
                        message
                            .chars()
                            .filter(|c| !c.is_control())
                            .collect::<String>(),
                        url.chars().filter(|c| !c.is_control()).collect::<String>()
                    );
                    match ask("Press Enter when done, d to decline, Ctrl-D to cancel: ".into())
                        .await
                        .as_deref()
                        .map(str::trim)
                    {
                        Some("d" | "no" | "decline") => json!({"action": "decline"}),
                        Some(_) => json!({"action": "accept"}),
                        None => json!({"action": "cancel"}),
                    }
                }
                _ => json!({"action": "decline"}),
            };
            serde_json::from_value(answer).map_err(to_error)
        })
    }
}
