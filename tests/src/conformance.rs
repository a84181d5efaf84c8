//! `--conformance`: the server the official MCP conformance suite's *server* scenarios expect
//! (`@modelcontextprotocol/conformance server --url …`): the tools `test_*`, the resources
//! `test://…`, the prompts `test_*_prompt`, logging, completion and subscriptions, and the
//! SEP-2640 skills extension (`skills`), with the exact texts and payloads the scenarios check.
//!
//! Invariants:
//! - Every result is built from the JSON the scenarios compare against and decoded into rmcp's
//!   types once; a payload rmcp cannot decode is a bug of this module, reported as an internal
//!   error, never a panic.
//! - List and read results carry the SEP-2549 cache hints (`ttlMs`, `cacheScope`); rmcp drops
//!   what an older negotiated protocol does not know.
//! - Server-to-client requests (sampling, elicitation) ride the caller's request (they are sent
//!   from the handler's own task, never from a spawned one).

// Logging (and the capability, level and notification types) is deprecated by SEP-2577, but the
// scenarios still exercise it.
#![allow(deprecated)]

mod asking;
mod catalog;
mod changes;
mod mrtr;
mod skills;
mod tasks;

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
        GetPromptRequestParams, GetPromptResponse, GetSkillRequestParams, GetSkillResult,
        Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
        ListSkillsResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
        NumberOrString, PaginatedRequestParams, ProgressNotificationParam,
        ReadResourceDirectoryRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ServerCapabilities, ServerConfig, ServerNotification, SetLevelRequestParams,
        SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
    },
    service::{RequestContext, SubscriptionContext, SubscriptionSink},
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use asking::{ask_client, elicit};

use catalog::{sep1034_schema, sep1330_schema};

/// A 1×1 PNG, base64.
const IMAGE_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A minimal WAV file, base64.
const AUDIO_WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";
/// Cache lifetime announced on lists and reads (SEP-2549).
const TTL_MS: u64 = 300_000;
/// Pause between the notifications of the logging and progress tools.
const STEP: Duration = Duration::from_millis(50);
/// How long `test_reconnection` runs: well past the 50 ms a gateway in front holds a call's
/// answer to send it as one JSON body (`crates/gateway/src/in_session.rs`, `HOLD`), so the
/// answer comes on an event stream with its priming event there too, as the scenario checks.
/// At `STEP` the two raced, and a fast path answered in JSON.
const RECONNECTION_RUN: Duration = Duration::from_millis(200);

/// The conformance suite's reference server behaviour. Clones share the subscription set and
/// the open `subscriptions/listen` streams.
#[derive(Clone, Default)]
pub struct ConformanceServer {
    subscriptions: Arc<Mutex<BTreeSet<String>>>,
    /// Open listen streams (2026-07-28), keyed by a registration number.
    sinks: Arc<Mutex<Vec<(u64, SubscriptionSink)>>>,
    next_sink: Arc<std::sync::atomic::AtomicU64>,
    /// SEP-2663 tasks of every session.
    tasks: rmcp::task_manager::TaskManager,
    /// What the list-change triggers changed.
    changes: changes::Changes,
}

impl ConformanceServer {
    /// A server with no subscriptions.
    pub fn new() -> Self {
        Self::default()
    }

    fn subscriptions(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.subscriptions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn sinks(&self) -> std::sync::MutexGuard<'_, Vec<(u64, SubscriptionSink)>> {
        self.sinks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sends `notification` to every open listen stream whose accepted filter takes it
    /// (rmcp's sink refuses the others).
    async fn broadcast(&self, notification: ServerNotification) {
        let sinks: Vec<SubscriptionSink> = self.sinks().iter().map(|(_, s)| s.clone()).collect();
        for sink in sinks {
            if let Err(error) = sink.send(notification.clone()).await {
                tracing::debug!(%error, "listen stream did not take the notification");
            }
        }
    }
}

/// Decodes `value` into an rmcp type; failure is this module's bug (see the invariant).
fn decode<T: DeserializeOwned>(value: Value) -> Result<T, McpError> {
    serde_json::from_value(value)
        .map_err(|e| McpError::internal_error(format!("conformance fixture payload: {e}"), None))
}

/// Decodes a *result*: `resultType: "complete"` is set unless the payload names one (2026-07-28
/// requires it; rmcp drops it for peers that negotiated an older protocol).
fn complete<T: DeserializeOwned>(mut value: Value) -> Result<T, McpError> {
    if let Value::Object(map) = &mut value {
        map.entry("resultType").or_insert_with(|| json!("complete"));
    }
    decode(value)
}

fn text(text: impl Into<String>) -> Value {
    json!({ "type": "text", "text": text.into() })
}

fn tool_result(content: Vec<Value>) -> Result<CallToolResponse, McpError> {
    let result: rmcp::model::CallToolResult = complete(json!({ "content": content }))?;
    Ok(result.into())
}

fn string_arg(args: &serde_json::Map<String, Value>, name: &str) -> Result<String, McpError> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            McpError::invalid_params(format!("argument {name:?} (string) is required"), None)
        })
}

#[allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the scenarios.
async fn log(context: &RequestContext<RoleServer>, data: &str) {
    let param = LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(data));
    if let Err(error) = context.peer.notify_logging_message(param).await {
        tracing::debug!(%error, "log notification not delivered");
    }
}

fn with_cache_hints(mut list: Value, scope: &str) -> Value {
    list["ttlMs"] = json!(TTL_MS);
    list["cacheScope"] = json!(scope);
    list
}

impl ServerHandler for ConformanceServer {
    /// The listed tool `name` (rmcp validates SEP-2243 `Mcp-Param-*` headers against its
    /// `x-mcp-header` annotations).
    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        let tools: Vec<rmcp::model::Tool> = serde_json::from_value(self.changes.tools()).ok()?;
        tools.into_iter().find(|t| t.name == name)
    }

    fn get_info(&self) -> ServerConfig {
        #[allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the scenarios.
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_skills_with_directory_read()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            "mcp-conformance-test-server",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        complete(with_cache_hints(
            json!({ "tools": self.changes.tools() }),
            "public",
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let round = mrtr::Round {
            responses: mrtr::responses(request.input_responses.clone())?,
            state: request.request_state.as_deref(),
            capabilities: context.meta.client_capabilities(),
        };
        if let Some(result) = mrtr::call(request.name.as_ref(), &round) {
            return result;
        }
        let args = request.arguments.unwrap_or_default();
        if let Some(result) = tasks::call(
            &self.tasks,
            request.name.as_ref(),
            &args,
            &round.responses,
            &context,
        )
        .await
        {
            return result;
        }
        let responses = &round.responses;
        match request.name.as_ref() {
            "test_simple_text" => {
                tool_result(vec![text("This is a simple text response for testing.")])
            }
            "test_image_content" => tool_result(vec![
                json!({ "type": "image", "data": IMAGE_PNG, "mimeType": "image/png" }),
            ]),
            "test_audio_content" => tool_result(vec![
                json!({ "type": "audio", "data": AUDIO_WAV, "mimeType": "audio/wav" }),
            ]),
            "test_embedded_resource" => tool_result(vec![json!({
                "type": "resource",
                "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content."
                }
            })]),
            "test_multiple_content_types" => tool_result(vec![
                text("Multiple content types test:"),
                json!({ "type": "image", "data": IMAGE_PNG, "mimeType": "image/png" }),
                json!({
                    "type": "resource",
                    "resource": {
                        "uri": "test://mixed-content-resource",
                        "mimeType": "application/json",
                        "text": json!({ "test": "data", "value": 123 }).to_string()
                    }
                }),
            ]),
            "test_tool_with_logging" => {
                for (i, line) in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                .into_iter()
                .enumerate()
                {
                    if i > 0 {
                        tokio::time::sleep(STEP).await;
                    }
                    log(&context, line).await;
                }
                tool_result(vec![text("Tool with logging executed successfully")])
            }
            "test_tool_with_progress" => {
                let token = context
                    .meta
                    .get_progress_token()
                    .unwrap_or(rmcp::model::ProgressToken(NumberOrString::Number(0)));
                for (i, done) in [0u32, 50, 100].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(STEP).await;
                    }
                    let param = ProgressNotificationParam::new(token.clone(), f64::from(done))
                        .with_total(100.0)
                        .with_message(format!("Completed step {done} of 100"));
                    if let Err(error) = context.peer.notify_progress(param).await {
                        tracing::debug!(%error, "progress notification not delivered");
                    }
                }
                let shown = match &token.0 {
                    NumberOrString::Number(n) => n.to_string(),
                    NumberOrString::String(s) => s.to_string(),
                };
                tool_result(vec![text(shown)])
            }
            "test_error_handling" => {
                let result: rmcp::model::CallToolResult = complete(json!({
                    "content": [text("This tool intentionally returns an error for testing")],
                    "isError": true
                }))?;
                Ok(result.into())
            }
            // rmcp offers a handler no way to close the POST stream mid-call, so the result
            // comes on the stream whose priming event (id + retry) the scenario checks.
            "test_reconnection" => {
                tokio::time::sleep(RECONNECTION_RUN).await;
                tool_result(vec![text(
                    "Reconnection test completed successfully. If you received this, the client \
                     properly reconnected after stream closure.",
                )])
            }
            "test_sampling" => {
                let prompt = string_arg(&args, "prompt")?;
                let answer = ask_client(
                    &context,
                    responses,
                    json!({
                        "method": "sampling/createMessage",
                        "params": {
                            "messages": [{ "role": "user", "content": text(prompt) }],
                            "maxTokens": 100
                        }
                    }),
                )
                .await;
                let answer = match answer {
                    Ok(answer) => answer,
                    Err(needed) => return Ok(needed.into()),
                };
                let line = match answer {
                    Ok(result) => {
                        let reply = result["content"]["text"]
                            .as_str()
                            .or_else(|| result["content"][0]["text"].as_str())
                            .unwrap_or("No response");
                        format!("LLM response: {reply}")
                    }
                    Err(error) => format!("Sampling not supported or error: {error}"),
                };
                tool_result(vec![text(line)])
            }
            "test_elicitation" => {
                let message = string_arg(&args, "message")?;
                let schema = json!({
                    "type": "object",
                    "properties": {
                        "response": { "type": "string", "description": "User's response" }
                    },
                    "required": ["response"]
                });
                elicit(&context, responses, &message, schema, "User response").await
            }
            "test_elicitation_sep1034_defaults" => {
                elicit(
                    &context,
                    responses,
                    "Please review and update the form fields with defaults",
                    sep1034_schema(),
                    "Elicitation completed",
                )
                .await
            }
            "test_elicitation_sep1330_enums" => {
                elicit(
                    &context,
                    responses,
                    "Please select options from the enum fields",
                    sep1330_schema(),
                    "Elicitation completed",
                )
                .await
            }
            // SEP-2575: a tool that needs sampling refuses a request whose per-request
            // capabilities do not declare it (-32021, HTTP 400 by rmcp).
            "test_missing_capability" => {
                let declared = context
                    .meta
                    .client_capabilities()
                    .or_else(|| context.peer.peer_info().map(|i| i.capabilities.clone()));
                if declared.is_some_and(|c| c.sampling.is_some()) {
                    tool_result(vec![text("Success")])
                } else {
                    let required: rmcp::model::ClientCapabilities =
                        decode(json!({ "sampling": {} }))?;
                    Err(McpError::missing_required_client_capability(required))
                }
            }
            "test_streaming_elicitation" => tool_result(vec![text("streaming ok")]),
            // Logs only when the request asked for a level (2026-07-28 `_meta` logLevel).
            "test_logging_tool" => {
                if context
                    .meta
                    .0
                    .0
                    .contains_key("io.modelcontextprotocol/logLevel")
                {
                    log(&context, "test_logging_tool ran").await;
                }
                tool_result(vec![text("logging tool ran")])
            }
            changes::TOOL => tool_result(vec![text(self.changes.tools_text())]),
            "test_trigger_tool_change" => {
                self.changes.bump_tools();
                self.broadcast(ServerNotification::ToolListChangedNotification(
                    Default::default(),
                ))
                .await;
                tool_result(vec![text("tools/list_changed sent")])
            }
            "test_trigger_prompt_change" => {
                self.changes.bump_prompts();
                self.broadcast(ServerNotification::PromptListChangedNotification(
                    Default::default(),
                ))
                .await;
                tool_result(vec![text("prompts/list_changed sent")])
            }
            "test_custom_header" => {
                let region = string_arg(&args, "region")?;
                tool_result(vec![text(format!("region: {region}"))])
            }
            "json_schema_2020_12_tool" => tool_result(vec![text(format!(
                "JSON Schema 2020-12 tool called with: {}",
                Value::Object(args)
            ))]),
            other => Err(McpError::invalid_params(
                format!("unknown tool {other:?}"),
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let mut resources = json!([
                {
                    "uri": "test://static-text", "name": "static-text",
                    "title": "Static Text Resource",
                    "description": "A static text resource for testing",
                    "mimeType": "text/plain"
                },
                {
                    "uri": "test://static-binary", "name": "static-binary",
                    "title": "Static Binary Resource",
                    "description": "A static binary resource (image) for testing",
                    "mimeType": "image/png"
                },
                {
                    "uri": "test://watched-resource", "name": "watched-resource",
                    "title": "Watched Resource",
                    "description": "A resource that can be subscribed to",
                    "mimeType": "text/plain"
                },
                {
                    "uri": mrtr::RESOURCE, "name": "input-required-resource",
                    "description": "MRTR: resource that requires elicitation, then roots",
                    "mimeType": "text/plain"
                }
        ]);
        if let Value::Array(all) = &mut resources {
            all.extend(skills::resources());
        }
        complete(with_cache_hints(
            json!({ "resources": resources }),
            "public",
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        complete(with_cache_hints(
            json!({ "resourceTemplates": [{
                "uriTemplate": "test://template/{id}/data", "name": "template",
                "title": "Resource Template",
                "description": "A resource template with parameter substitution",
                "mimeType": "application/json"
            }]}),
            "public",
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if request.uri == mrtr::RESOURCE {
            return mrtr::resource(&mrtr::Round {
                responses: mrtr::responses(request.input_responses)?,
                state: request.request_state.as_deref(),
                capabilities: None,
            });
        }
        let uri = request.uri;
        if let Some(contents) = skills::read(&uri) {
            let result: rmcp::model::ReadResourceResult = complete(with_cache_hints(
                json!({ "contents": [contents?] }),
                "public",
            ))?;
            return Ok(result.into());
        }
        let contents = match uri.as_str() {
            "test://static-text" => json!({
                "uri": uri, "mimeType": "text/plain",
                "text": "This is the content of the static text resource."
            }),
            "test://static-binary" => json!({
                "uri": uri, "mimeType": "image/png", "blob": IMAGE_PNG
            }),
            "test://watched-resource" => json!({
                "uri": uri, "mimeType": "text/plain", "text": "Watched resource content"
            }),
            _ => match uri
                .strip_prefix("test://template/")
                .and_then(|rest| rest.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => json!({
                    "uri": uri, "mimeType": "application/json",
                    "text": json!({
                        "id": id, "templateTest": true, "data": format!("Data for ID: {id}")
                    }).to_string()
                }),
                // SEP-2164: an unknown resource is -32602 Invalid Params with the URI in
                // `data` (not rmcp's -32002 `resource_not_found`), never empty contents.
                None => {
                    return Err(McpError::invalid_params(
                        format!("Resource not found: {uri}"),
                        Some(json!({ "uri": uri })),
                    ));
                }
            },
        };
        let result: rmcp::model::ReadResourceResult = complete(with_cache_hints(
            json!({ "contents": [contents] }),
            "private",
        ))?;
        Ok(result.into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        log(
            &context,
            &format!("Subscribed to resource: {}", request.uri),
        )
        .await;
        self.subscriptions().insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        log(
            &context,
            &format!("Unsubscribed from resource: {}", request.uri),
        )
        .await;
        self.subscriptions().remove(&request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let arg = |name: &str, description: &str| json!({ "name": name, "description": description, "required": true });
        complete(with_cache_hints(
            json!({ "prompts": [
                {
                    "name": "test_simple_prompt", "title": "Simple Test Prompt",
                    "description": "A simple prompt without arguments"
                },
                {
                    "name": "test_prompt_with_arguments", "title": "Prompt With Arguments",
                    "description": "A prompt with required arguments",
                    "arguments": [
                        arg("arg1", "First test argument"),
                        arg("arg2", "Second test argument")
                    ]
                },
                {
                    "name": "test_prompt_with_embedded_resource",
                    "title": "Prompt With Embedded Resource",
                    "description": "A prompt that includes an embedded resource",
                    "arguments": [arg("resourceUri", "URI of the resource to embed")]
                },
                {
                    "name": "test_prompt_with_image", "title": "Prompt With Image",
                    "description": "A prompt that includes image content"
                },
                {
                    "name": mrtr::PROMPT,
                    "description": "MRTR: prompt that requires elicitation input"
                },
                self.changes.prompt()
            ]}),
            "public",
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name == mrtr::PROMPT {
            return mrtr::prompt(&mrtr::Round {
                responses: mrtr::responses(request.input_responses.clone())?,
                state: request.request_state.as_deref(),
                capabilities: None,
            });
        }
        let args = request.arguments.unwrap_or_default();
        let user = |content: Value| json!({ "role": "user", "content": content });
        let messages = match request.name.as_str() {
            "test_simple_prompt" => vec![user(text("This is a simple prompt for testing."))],
            "test_prompt_with_arguments" => {
                let (a, b) = (string_arg(&args, "arg1")?, string_arg(&args, "arg2")?);
                vec![user(text(format!(
                    "Prompt with arguments: arg1='{a}', arg2='{b}'"
                )))]
            }
            "test_prompt_with_embedded_resource" => {
                let uri = string_arg(&args, "resourceUri")?;
                vec![
                    user(json!({
                        "type": "resource",
                        "resource": {
                            "uri": uri, "mimeType": "text/plain",
                            "text": "Embedded resource content for testing."
                        }
                    })),
                    user(text("Please process the embedded resource above.")),
                ]
            }
            changes::PROMPT => vec![user(text(self.changes.prompts_text()))],
            "test_prompt_with_image" => vec![
                user(json!({ "type": "image", "data": IMAGE_PNG, "mimeType": "image/png" })),
                user(text("Please analyze the image above.")),
            ],
            other => {
                return Err(McpError::invalid_params(
                    format!("unknown prompt {other:?}"),
                    None,
                ));
            }
        };
        let result: rmcp::model::GetPromptResult = complete(json!({ "messages": messages }))?;
        Ok(result.into())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let level = serde_json::to_value(request.level).unwrap_or_default();
        log(
            &context,
            &format!("Log level set to: {}", level.as_str().unwrap_or_default()),
        )
        .await;
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let key = self
            .next_sink
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.sinks().push((key, context.sink().clone()));
        context.cancelled().await;
        self.sinks().retain(|(k, _)| *k != key);
        Ok(())
    }

    async fn list_skills(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        skills::list()
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        skills::get(&request.uri)
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        Ok(rmcp::model::GetTaskResult::new(
            self.tasks.get_task(&request.task_id)?,
        ))
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        skills::directory(&request.uri)
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        complete(json!({ "completion": { "values": [], "total": 0, "hasMore": false } }))
    }
}

#[cfg(test)]
mod tests {
    use super::catalog::json_schema_2020_12;
    use rmcp::model::ServerRequest;

    use super::*;

    /// The invariant's first half: every fixed payload decodes into rmcp's types, so no
    /// scenario meets an internal error instead of its expected result.
    #[test]
    fn every_payload_decodes() {
        let server = ConformanceServer::new();
        let tools: ListToolsResult = complete(with_cache_hints(
            json!({ "tools": server.changes.tools() }),
            "public",
        ))
        .expect("tools");
        assert_eq!(tools.ttl_ms, Some(TTL_MS));
        let names: Vec<&str> = tools.tools.iter().map(|t| t.name.as_ref()).collect();
        assert!(names.contains(&"test_simple_text") && names.contains(&"json_schema_2020_12_tool"));
        // A trigger changes what is listed, not only what is notified.
        let before = server.changes.tools();
        server.changes.bump_tools();
        assert_ne!(
            server.changes.tools(),
            before,
            "test_trigger_tool_change changed nothing"
        );
        let before = server.changes.prompt();
        server.changes.bump_prompts();
        assert_ne!(
            server.changes.prompt(),
            before,
            "test_trigger_prompt_change changed nothing"
        );
        let schema = &tools
            .tools
            .iter()
            .find(|t| t.name == "json_schema_2020_12_tool");
        let schema = schema.map(|t| Value::Object((*t.input_schema).clone()));
        assert_eq!(
            schema,
            Some(json_schema_2020_12()),
            "the 2020-12 schema reaches clients intact"
        );
        for schema in [sep1034_schema(), sep1330_schema()] {
            let request: ServerRequest = serde_json::from_value(json!({
                "method": "elicitation/create",
                "params": { "message": "m", "requestedSchema": schema }
            }))
            .expect("elicitation request");
            assert!(matches!(request, ServerRequest::ElicitRequest(_)));
        }
        let sampling: ServerRequest = serde_json::from_value(json!({
            "method": "sampling/createMessage",
            "params": { "messages": [{ "role": "user", "content": text("hi") }], "maxTokens": 100 }
        }))
        .expect("sampling request");
        assert!(matches!(sampling, ServerRequest::CreateMessageRequest(_)));
    }
}
