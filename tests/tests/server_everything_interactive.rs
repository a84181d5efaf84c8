//! The requests a server sends back — elicitation (form and URL), sampling — and progress,
//! against `@modelcontextprotocol/server-everything`, through an embedder's callbacks. The
//! server only offers these tools to clients that declare the capabilities, which the harness
//! declares exactly when the embedder answers them. A callback that blocks its thread stalls
//! no other server, even one sharing the connection thread.

#![allow(deprecated)] // sampling types are deprecated by SEP-2577 but still in use

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use mcp_harness_catalog::qualify;
use mcp_harness_runtime::transport::{CallbackFuture, ClientCallbacks, Supported};
use mcp_harness_runtime::{CallOptions, IoThreads, RuntimeBuilder};
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
};
use serde_json::json;

struct TestUser;

impl ClientCallbacks for TestUser {
    fn supports(&self) -> Supported {
        Supported {
            elicitation_form: true,
            elicitation_url: true,
            sampling: true,
            roots: false,
        }
    }

    fn elicit(&self, _server: &str, request: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        let answer = match request {
            ElicitRequestParams::FormElicitationParams { .. } => {
                json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true, "email": "ada@example.com"}})
            }
            _ => json!({"action": "accept"}),
        };
        Box::pin(async move {
            serde_json::from_value(answer)
                .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
        })
    }

    fn sample(
        &self,
        _server: &str,
        _request: CreateMessageRequestParams,
    ) -> CallbackFuture<CreateMessageResult> {
        let answer = json!({"model": "test-model", "role": "assistant", "content": {"type": "text", "text": "sampled by the test"}});
        Box::pin(async move {
            serde_json::from_value(answer)
                .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_sampling_and_progress_through_callbacks() {
    let runtime = RuntimeBuilder::new(config(vec![server(
        "everything",
        stdio(&node(), &[&server_everything(), "stdio"]),
    )]))
    .callbacks(Arc::new(TestUser))
    .start()
    .expect("start");
    let q = |t: &str| qualify("everything", t);
    // The conditional tools are registered after initialization; they arrive by list_changed.
    let s = runtime
        .wait_for(SETTLE, |s| {
            [
                "trigger-elicitation-request",
                "trigger-sampling-request",
                "trigger-url-elicitation",
            ]
            .iter()
            .all(|t| s.tool(&q(t)).is_some())
        })
        .await;
    for t in [
        "trigger-elicitation-request",
        "trigger-sampling-request",
        "trigger-url-elicitation",
    ] {
        assert!(
            s.tool(&q(t)).is_some(),
            "{t} offered once the capabilities are declared"
        );
    }

    let form = runtime
        .call_tool(&q("trigger-elicitation-request"), None)
        .await
        .expect("elicitation");
    let form_text =
        text(&form) + &serde_json::to_string(&form.result.structured_content).unwrap_or_default();
    assert!(form_text.contains("Ada Lovelace"), "{form_text}");
    assert!(
        form_text.contains("It was a dark and stormy night."),
        "the schema default was filled in: {form_text}"
    );

    let sampled = runtime
        .call_tool(
            &q("trigger-sampling-request"),
            args(json!({"prompt": "say hi", "maxTokens": 20})),
        )
        .await
        .expect("sampling");
    assert!(
        text(&sampled).contains("sampled by the test"),
        "{}",
        text(&sampled)
    );

    let url = runtime
        .call_tool(
            &q("trigger-url-elicitation"),
            args(json!({"url": "https://example.com/authorize", "message": "Please sign in"})),
        )
        .await
        .expect("url elicitation");
    assert!(!url.is_error(), "{:?}", url.result.content);

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let options = CallOptions {
        progress: Some(tx),
        timeout: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    let long = runtime
        .call_tool_with(
            &q("trigger-long-running-operation"),
            args(json!({"duration": 1, "steps": 4})),
            options,
        )
        .await
        .expect("long running");
    assert!(!long.is_error());
    let mut updates = 0;
    while rx.try_recv().is_ok() {
        updates += 1;
    }
    assert!(updates >= 3, "progress delivered to the caller: {updates}");
    runtime.shutdown().await;
}

/// Answers a form elicitation only once the test says so, blocking its thread meanwhile the
/// way a synchronous prompt would.
struct BlockingUser {
    asked: std::sync::Mutex<std::sync::mpsc::Sender<()>>,
    answer: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl ClientCallbacks for BlockingUser {
    fn supports(&self) -> Supported {
        Supported {
            elicitation_form: true,
            ..Default::default()
        }
    }

    fn elicit(&self, _server: &str, _request: ElicitRequestParams) -> CallbackFuture<ElicitResult> {
        let _ = self.asked.lock().unwrap().send(());
        // Blocks whichever thread polls this, bounded.
        let answered = self
            .answer
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30));
        Box::pin(async move {
            answered.map_err(|_| rmcp::ErrorData::internal_error("no answer in 30 s", None))?;
            serde_json::from_value(json!({"action": "accept", "content": {"name": "Grace Hopper", "check": true, "email": "grace@example.com"}}))
                .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_callback_stalls_no_other_server() {
    let (asked_tx, asked) = std::sync::mpsc::channel();
    let (answer, answer_rx) = std::sync::mpsc::channel();
    let user = BlockingUser {
        asked: std::sync::Mutex::new(asked_tx),
        answer: std::sync::Mutex::new(answer_rx),
    };
    // One I/O thread: both connections share it.
    let runtime = RuntimeBuilder::new(config(vec![
        server(
            "everything",
            stdio(&node(), &[&server_everything(), "stdio"]),
        ),
        server("fixture", fixture_stdio(&[])),
    ]))
    .callbacks(Arc::new(user))
    .io_threads(IoThreads::Pinned(1))
    .start()
    .expect("start");
    let elicit = qualify("everything", "trigger-elicitation-request");
    let s = runtime
        .wait_for(SETTLE, |s| {
            s.tool(&elicit).is_some() && s.tool("mcp__fixture__echo").is_some()
        })
        .await;
    assert!(s.tool(&elicit).is_some() && s.tool("mcp__fixture__echo").is_some());

    let runtime = Arc::new(runtime);
    let pending = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.call_tool(&elicit, None).await }
    });
    tokio::task::spawn_blocking(move || asked.recv_timeout(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("the server asked");

    // The callback now blocks a thread; the other server still answers at once.
    let echoed = tokio::time::timeout(
        Duration::from_secs(10),
        runtime.call_tool("mcp__fixture__echo", args(json!({"message": "still here"}))),
    )
    .await
    .expect("the fixture answered while the callback blocked")
    .expect("echo");
    assert_eq!(text(&echoed), "still here");

    answer.send(()).unwrap();
    let form = tokio::time::timeout(Duration::from_secs(30), pending)
        .await
        .expect("the elicitation call finished")
        .unwrap()
        .expect("elicitation");
    let form_text =
        text(&form) + &serde_json::to_string(&form.result.structured_content).unwrap_or_default();
    assert!(form_text.contains("Grace Hopper"), "{form_text}");
    Arc::into_inner(runtime)
        .expect("one owner")
        .shutdown()
        .await;
}
