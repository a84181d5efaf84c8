//! `call`: one tool call through the runtime, printed for a person (or as JSON).

use mcp_harness_runtime::TaskUpdate;
use mcp_harness_runtime::{CallError, CallOptions, Runtime, ToolResult};
use rmcp::model::{ContentBlock, JsonObject, ProgressNotificationParam};

/// The most bytes of arguments read from `@FILE` or stdin (a server's default message limit):
/// `@/dev/zero` is refused at this size, not read until memory runs out.
pub(crate) const MAX_ARGUMENTS_BYTES: u64 = 64 << 20;

/// [`parse_args`] on a blocking thread: reading `-` or `@FILE` (a FIFO, a slow pipe) leaves the
/// command's task free, so Ctrl-C and SIGTERM still end the command.
pub(crate) async fn read_args(text: Option<String>) -> Result<Option<JsonObject>, String> {
    match text {
        Some(text) if text == "-" || text.starts_with('@') => {
            tokio::task::spawn_blocking(move || parse_args(Some(&text)))
                .await
                .map_err(|e| format!("reading the arguments failed: {e}"))?
        }
        text => parse_args(text.as_deref()),
    }
}

/// All of `source`, at most [`MAX_ARGUMENTS_BYTES`]: more is an error naming `what`.
fn read_capped(source: impl std::io::Read, what: &str) -> Result<String, String> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut source.take(MAX_ARGUMENTS_BYTES + 1), &mut bytes)
        .map_err(|e| format!("cannot read the arguments from {what}: {e}; nothing was sent"))?;
    if bytes.len() as u64 > MAX_ARGUMENTS_BYTES {
        return Err(format!(
            "the arguments in {what} are larger than {} MiB; nothing was sent",
            MAX_ARGUMENTS_BYTES >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "the arguments in {what} are not UTF-8 (at byte {}); nothing was sent",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Parses the arguments given on the command line: a JSON object, `@FILE` (the object read
/// from FILE), `-` (read from stdin to its end), or nothing; from a file or stdin at most
/// [`MAX_ARGUMENTS_BYTES`]. An error says where the text came from and what is wrong with it;
/// nothing has been sent then.
pub(crate) fn parse_args(text: Option<&str>) -> Result<Option<JsonObject>, String> {
    let Some(text) = text else { return Ok(None) };
    let (read, origin) = if text == "-" {
        let all = read_capped(std::io::stdin().lock(), "stdin")?;
        (all, "the arguments read from stdin".to_string())
    } else if let Some(path) = text.strip_prefix('@') {
        let file = std::fs::File::open(path)
            .map_err(|e| format!("cannot read the arguments from {path}: {e}; nothing was sent"))?;
        let all = read_capped(file, path)?;
        (all, format!("the arguments in {path}"))
    } else {
        (text.to_string(), "the arguments".to_string())
    };
    match serde_json::from_str::<serde_json::Value>(&read) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        Ok(other) => Err(format!(
            "{origin} must be a JSON object, not {}; nothing was sent",
            short_json(&other)
        )),
        Err(e) => Err(format!(
            "{origin} are not valid JSON ({e}); nothing was sent (pass an object like '{{\"key\": \"value\"}}'{})",
            if crate::explain::in_shell() {
                " or @FILE"
            } else {
                ", @FILE or - for stdin"
            }
        )),
    }
}

/// `value` as compact JSON, cut to 60 characters.
fn short_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// A finished call, ready to print.
pub(crate) struct Outcome {
    /// The result rendered for a person (or as JSON). Server text: print it to a terminal only
    /// through [`for_terminal`](crate::output::for_terminal).
    pub text: String,
    /// The tool reported an error (`isError`).
    pub is_error: bool,
    /// What the result normaliser found wrong with the result (a `structuredContent` that does
    /// not match the tool's `outputSchema`, image data that is not base64, ...), one line each,
    /// control characters dropped.
    pub warnings: Vec<String>,
}

/// Calls `name` and renders the result. While it runs, progress notifications and task status
/// changes are written to stderr as plain lines (stdout keeps only the result).
pub(crate) async fn run(
    runtime: &Runtime,
    name: &str,
    args: Option<JsonObject>,
    as_json: bool,
) -> Result<Outcome, CallError> {
    let (progress_tx, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let (status_tx, mut status) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        progress: Some(progress_tx),
        task_status: Some(status_tx),
        // Interrupted (Ctrl-C), the call tells its server before the command ends.
        cancel: crate::INTERRUPT.try_with(Clone::clone).ok(),
        ..Default::default()
    };
    let call = runtime.call_tool_with(name, args, options);
    tokio::pin!(call);
    let result = loop {
        tokio::select! {
            result = &mut call => break result,
            // With --json, stderr stays one JSON object per line (log lines are too).
            Some(p) = progress.recv() => match as_json {
                true => say!("{}", serde_json::json!({"progress": {
                    "progress": p.progress, "total": p.total, "message": p.message,
                }})),
                false => say!("{}", progress_line(&p)),
            },
            Some(u) = status.recv() => match as_json {
                true => say!("{}", serde_json::json!({"task": {
                    "taskId": u.task_id, "status": u.status, "message": u.message,
                }})),
                false => say!("{}", status_line(&u)),
            },
        }
    };
    let result = result?;
    Ok(Outcome {
        text: render(&result, as_json),
        is_error: result.is_error(),
        warnings: result
            .normalized
            .warnings
            .iter()
            .map(|w| printable(&w.message))
            .collect(),
    })
}

/// `progress 3/10: message` (server text is untrusted: control characters are dropped).
fn progress_line(p: &ProgressNotificationParam) -> String {
    let mut line = match p.total {
        Some(total) => format!("progress {}/{}", p.progress, total),
        None => format!("progress {}", p.progress),
    };
    if let Some(message) = &p.message {
        line.push_str(": ");
        line.push_str(&printable(message));
    }
    line
}

/// `task <id>: working — message`.
fn status_line(u: &TaskUpdate) -> String {
    let status = serde_json::to_value(u.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{:?}", u.status));
    match &u.message {
        Some(m) => format!(
            "task {}: {status} — {}",
            printable(&u.task_id),
            printable(m)
        ),
        None => format!("task {}: {status}", printable(&u.task_id)),
    }
}

fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

/// A result as text: text blocks verbatim, other blocks summarised, structured content as JSON,
/// once: a text block that is the structured content serialised (as the protocol asks servers
/// to send it, for older clients) is not printed again.
pub(crate) fn render(result: &ToolResult, as_json: bool) -> String {
    if as_json {
        // A tool's error is an error: the configured secrets it quotes are redacted, string by
        // string (the document stays JSON); a result is the tool's data, as sent.
        let mut s = match result.is_error() {
            true => serde_json::to_value(&result.result)
                .map(|v| mcp_harness_transport::redact::json(&v))
                .and_then(|v| serde_json::to_string_pretty(&v)),
            false => serde_json::to_string_pretty(&result.result),
        }
        .unwrap_or_default();
        s.push('\n');
        return s;
    }
    let structured = result.result.structured_content.as_ref();
    let repeats_structured = |text: &str| {
        structured.is_some_and(|s| {
            serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .as_ref()
                == Some(s)
        })
    };
    let mut out = String::new();
    for block in &result.result.content {
        match block {
            ContentBlock::Text(t) if repeats_structured(&t.text) => continue,
            ContentBlock::Text(t) => out.push_str(&t.text),
            ContentBlock::Image(i) => out.push_str(&format!(
                "[image {}, {} base64 bytes]",
                i.mime_type,
                i.data.len()
            )),
            ContentBlock::Audio(a) => out.push_str(&format!(
                "[audio {}, {} base64 bytes]",
                a.mime_type,
                a.data.len()
            )),
            ContentBlock::Resource(r) => out.push_str(&format!(
                "[embedded resource {}]",
                serde_json::to_string(&r.resource).unwrap_or_default()
            )),
            ContentBlock::ResourceLink(l) => out.push_str(&format!("[resource link {}]", l.uri)),
            other => out.push_str(&format!(
                "[content {}]",
                serde_json::to_string(other).unwrap_or_default()
            )),
        }
        out.push('\n');
    }
    if let Some(structured) = structured {
        out.push_str("structured content:\n");
        out.push_str(&serde_json::to_string_pretty(structured).unwrap_or_default());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{NumberOrString, ProgressToken, TaskStatus};

    #[test]
    fn terminal_text_keeps_newlines_and_tabs_only() {
        assert_eq!(
            crate::output::for_terminal("a\u{1b}[2J\u{1b}[31mb\u{7}\rc\nd\te\u{9b}f\u{0}g"),
            "a[2J[31mbc\nd\tefg"
        );
    }

    #[test]
    fn progress_and_status_lines_are_plain_and_drop_control_characters() {
        let mut p = ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(1)), 3.0);
        p.total = Some(10.0);
        p.message = Some("step\u{1b}[2J three".into());
        assert_eq!(progress_line(&p), "progress 3/10: step[2J three");
        let u = TaskUpdate {
            task_id: "t-1".into(),
            status: TaskStatus::Working,
            message: Some("Gathering sources...".into()),
        };
        assert_eq!(status_line(&u), "task t-1: working — Gathering sources...");
    }
}
