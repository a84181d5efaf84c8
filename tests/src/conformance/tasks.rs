//! SEP-2663 tasks in the conformance mode: the tools the suite's `tasks-*` server scenarios
//! call — `greet` (sync only); `slow_compute` and `protocol_error_job` (a task when the client
//! declared `io.modelcontextprotocol/tasks`, at the session or in the request's `_meta`, else
//! synchronous); `failing_job`, `confirm_delete` and `multi_input` (tasks only: `-32021` for a
//! client that did not declare them; the last two ask for input inside the task, answered with
//! `tasks/update`); `test_tool_with_task` (asks for a name with an SEP-2322 InputRequiredResult,
//! then greets it in a task) — run by rmcp's [`TaskManager`].
//!
//! Invariants: a task is created only for a declaring request; a cancelled `slow_compute`
//! settles as `cancelled`, a tool error as `completed` with `isError`, a protocol error as
//! `failed` with the error inlined (rmcp's task manager keeps these shapes).

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use serde_json::{Map, Value, json};

use super::mrtr;

/// The longest `slow_compute` sleep honoured, in seconds (the scenarios ask up to 60 and cancel).
const MAX_SECONDS: f64 = 120.0;
/// How long `failing_job` and `protocol_error_job` run before they fail.
const JOB: Duration = Duration::from_millis(300);
/// The poll interval the server suggests.
const POLL_MS: u64 = 100;
const PROTOCOL_ERROR: &str = "protocol_error_job: internal failure (on purpose)";

/// The tools' definitions (`execution.taskSupport` says which may run as tasks).
pub(super) fn tools() -> Vec<Value> {
    let task = |name: &str, description: &str, properties: Value, support: &str| {
        json!({
            "name": name, "description": description,
            "inputSchema": { "type": "object", "properties": properties },
            "execution": { "taskSupport": support }
        })
    };
    vec![
        json!({
            "name": "greet", "description": "Returns Hello, {name}! (sync only)",
            "inputSchema": { "type": "object", "properties": { "name": { "type": "string" } } }
        }),
        task(
            "slow_compute",
            "Sleeps `seconds`, then answers (a task for a declaring client)",
            json!({ "seconds": { "type": "number" }, "label": { "type": "string" } }),
            "optional",
        ),
        task(
            "protocol_error_job",
            "Fails with a protocol error after a moment",
            json!({}),
            "optional",
        ),
        task(
            "failing_job",
            "Fails as a tool after a moment (a task only)",
            json!({}),
            "required",
        ),
        task(
            "confirm_delete",
            "Asks to confirm deleting `filename`, inside the task",
            json!({ "filename": { "type": "string" } }),
            "required",
        ),
        task(
            "multi_input",
            "Asks two questions at once, inside the task",
            json!({}),
            "required",
        ),
        task(
            "test_tool_with_task",
            "Asks for a name (input_required), then greets it in a task",
            json!({}),
            "required",
        ),
    ]
}

fn text_result(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn failing() -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text("failing_job failed (on purpose)")])
}

fn seconds(args: &Map<String, Value>) -> Duration {
    let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0);
    Duration::from_secs_f64(seconds.clamp(0.0, MAX_SECONDS))
}

/// The task-supporting tools, and whether each requires a task (`false`: it runs
/// synchronously for a client that did not declare tasks).
const TASK_TOOLS: [(&str, bool); 6] = [
    ("slow_compute", false),
    ("protocol_error_job", false),
    ("failing_job", true),
    ("confirm_delete", true),
    ("multi_input", true),
    ("test_tool_with_task", true),
];

/// Answers `name` when it is one of this module's tools (`None` otherwise); `responses` are
/// the request's `inputResponses` (SEP-2322).
pub(super) async fn call(
    tasks: &TaskManager,
    name: &str,
    args: &Map<String, Value>,
    responses: &Map<String, Value>,
    context: &RequestContext<RoleServer>,
) -> Option<Result<CallToolResponse, McpError>> {
    if name == "greet" {
        let who = args.get("name").and_then(Value::as_str).unwrap_or("World");
        return Some(Ok(text_result(format!("Hello, {who}!")).into()));
    }
    let (_, required) = TASK_TOOLS.iter().find(|(tool, _)| *tool == name)?;
    let declared = context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks());
    if !declared {
        if *required {
            let tasks = rmcp::model::ClientCapabilities::builder()
                .enable_tasks()
                .build();
            return Some(Err(McpError::missing_required_client_capability(tasks)));
        }
        return Some(sync(name, args).await);
    }
    // SEP-2322 then SEP-2663: the name is gathered synchronously, the work runs as a task.
    let user = match (name, responses.get("user_name")) {
        ("test_tool_with_task", None) => {
            let ask = json!({ "user_name": mrtr::elicit("What is your name?", "name", "string") });
            return Some(mrtr::input_required(ask, None).map(Into::into));
        }
        (_, answer) => mrtr::answer_text(answer, "name"),
    };
    let (name, args) = (name.to_string(), args.clone());
    let options = TaskOptions::new().with_poll_interval_ms(POLL_MS);
    let task = tasks.spawn(options, move |ctx| {
        Box::pin(async move {
            match name.as_str() {
                "slow_compute" => {
                    tokio::select! {
                        _ = tokio::time::sleep(seconds(&args)) => {}
                        _ = ctx.cancelled() => return Err(TaskExit::Cancelled),
                    }
                    Ok(text_result(format!("computed {}", label(&args))))
                }
                "failing_job" => {
                    tokio::time::sleep(JOB).await;
                    Ok(failing())
                }
                "confirm_delete" => {
                    let file = args
                        .get("filename")
                        .and_then(Value::as_str)
                        .unwrap_or("file");
                    let answer = ctx.request_input("confirm", confirm(file)?).await?;
                    let confirmed = answer["content"]["confirm"].as_bool().unwrap_or(false);
                    Ok(text_result(format!(
                        "{file}: {}",
                        if confirmed { "deleted" } else { "kept" }
                    )))
                }
                "multi_input" => {
                    let (first, second) = tokio::join!(
                        ctx.request_input("first", confirm("first")?),
                        ctx.request_input("second", confirm("second")?),
                    );
                    let (_, _) = (first?, second?);
                    Ok(text_result("both answered".into()))
                }
                "test_tool_with_task" => Ok(text_result(format!("Hello, {user}!"))),
                _ => {
                    tokio::time::sleep(JOB).await;
                    Err(TaskExit::Error(McpError::internal_error(
                        PROTOCOL_ERROR,
                        None,
                    )))
                }
            }
        })
    });
    Some(Ok(CallToolResponse::Task(CreateTaskResult::new(task))))
}

/// An `elicitation/create` input request asking to confirm `what`.
fn confirm(what: &str) -> Result<rmcp::model::InputRequest, TaskExit> {
    serde_json::from_value(mrtr::elicit(
        &format!("Confirm {what}?"),
        "confirm",
        "boolean",
    ))
    .map_err(|e| TaskExit::Error(McpError::internal_error(e.to_string(), None)))
}

fn label(args: &Map<String, Value>) -> String {
    args.get("label")
        .and_then(Value::as_str)
        .unwrap_or("result")
        .to_string()
}

/// The same tools run synchronously (a client that did not declare tasks).
async fn sync(name: &str, args: &Map<String, Value>) -> Result<CallToolResponse, McpError> {
    match name {
        "slow_compute" => {
            tokio::time::sleep(seconds(args)).await;
            Ok(text_result(format!("computed {}", label(args))).into())
        }
        "failing_job" => {
            tokio::time::sleep(JOB).await;
            Ok(failing().into())
        }
        _ => {
            tokio::time::sleep(JOB).await;
            Err(McpError::internal_error(PROTOCOL_ERROR, None))
        }
    }
}
