//! The requests a server sends back — elicitation (form and URL), sampling — and progress,
//! against `@modelcontextprotocol/server-everything`, through an embedder's callbacks. The
//! server only offers these tools to clients that declare the capabilities, which the harness
//! declares exactly when the embedder answers them.

#![allow(deprecated)] // sampling types are deprecated by SEP-2577 but still in use

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use mcp_harness_catalog::qualify;
use mcp_harness_runtime::transport::{CallbackFuture, ClientCallbacks, Supported};
use mcp_harness_runtime::{CallOptions, RuntimeBuilder};
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
