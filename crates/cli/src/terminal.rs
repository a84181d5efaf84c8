//! The CLI's answers to what needs a person: tool-call approvals, server elicitations and VS Code
//! config inputs, asked on the terminal. Without a terminal (stdin not a TTY), approvals are
//! denied with the config key that would allow the call, elicitations are declined and inputs
//! stay unset (the config error names the variable to set) — nothing is answered on the user's
//! behalf. Password inputs are read with echo off and never printed.

use std::io::{BufRead, IsTerminal, Write};

use futures::future::BoxFuture;
use mcp_harness_policy::{Approval, ApprovalRequest, Approver, DenyAll};
use mcp_harness_transport::{CallbackFuture, ClientCallbacks, Supported};
use rmcp::model::{ElicitRequestParams, ElicitResult};
use serde_json::{Map, Value, json};

/// Whether a person can answer questions on this terminal.
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Reads one line from stdin on a blocking thread; `None` on end of input.
async fn ask(prompt: String) -> Option<String> {
    tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr();
        let _ = write!(err, "{prompt}");
        let _ = err.flush();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end_matches(['\r', '\n']).to_string()),
        }
    })
    .await
    .ok()
    .flatten()
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
    let _echo = request.password.then(EchoOff::new);
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

/// Turns terminal echo off on stdin until dropped.
struct EchoOff(Option<libc::termios>);

impl EchoOff {
    fn new() -> Self {
        // SAFETY: tcgetattr/tcsetattr on fd 0 with a termios we own; failure leaves echo as is.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return Self(None);
            }
            let mut quiet = saved;
            quiet.c_lflag &= !libc::ECHO;
            if libc::tcsetattr(0, libc::TCSANOW, &quiet) != 0 {
                return Self(None);
            }
            Self(Some(saved))
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            // SAFETY: restores the settings read in `new`.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, saved);
            }
        }
    }
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

/// Answers elicitations on the terminal: a form field by field (Enter keeps the default), a URL
/// by showing it and waiting until the user says they went there.
pub(crate) struct TerminalElicitation;

impl ClientCallbacks for TerminalElicitation {
    fn supports(&self) -> Supported {
        let on = interactive();
        Supported {
            elicitation_form: on,
            elicitation_url: on,
            ..Default::default()
        }
    }

    fn elicit(&self, server: &str, request: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        let server = server.to_string();
        Box::pin(async move {
            let decline = || serde_json::from_value::<ElicitResult>(json!({"action": "decline"}));
            let to_error =
                |e: serde_json::Error| rmcp::ErrorData::internal_error(e.to_string(), None);
            if !interactive() {
                return decline().map_err(to_error);
            }
            let answer = match request {
                ElicitRequestParams::FormElicitationParams {
                    message,
                    requested_schema,
                    ..
                } => {
                    say!("\n{server} asks: {message}");
                    let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
                    let mut content = Map::new();
                    let properties = schema
                        .get("properties")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    for (name, property) in properties {
                        let default = property.get("default").map(|d| d.to_string());
                        let hint = default
                            .as_deref()
                            .map(|d| format!(" [{d}]"))
                            .unwrap_or_default();
                        let Some(line) = ask(format!("  {name}{hint}: ")).await else {
                            return serde_json::from_value(json!({"action": "cancel"}))
                                .map_err(to_error);
                        };
                        if line.is_empty() {
                            continue; // the default is filled in by the runtime
                        }
                        let kind = property
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("string");
                        let value = match kind {
                            "integer" | "number" | "boolean" => {
                                serde_json::from_str(&line).unwrap_or(Value::String(line))
                            }
                            _ => Value::String(line),
                        };
                        content.insert(name, value);
                    }
                    json!({"action": "accept", "content": content})
                }
                ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                    say!("\n{server} asks: {message}\n  open: {url}");
                    match ask("Press Enter when done, or type `no` to decline: ".into())
                        .await
                        .as_deref()
                    {
                        Some("no") => json!({"action": "decline"}),
                        Some(_) => json!({"action": "accept"}),
                        None => json!({"action": "cancel"}),
                    }
                }
                _ => return decline().map_err(to_error),
            };
            serde_json::from_value(answer).map_err(to_error)
        })
    }
}
