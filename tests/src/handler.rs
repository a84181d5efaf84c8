//! The fixture's [`ServerHandler`] implementation.
//!
//! Invariants:
//! - Every list (tools, prompts, resources, templates, skills) is built in one fixed
//!   order — static, then generated, then dynamic in insertion order — so
//!   pagination cursors stay meaningful between pages.
//! - Client input never panics the server: bad arguments become
//!   `invalid_params` errors, tool-level failures become `isError` results.
//! - Clones of a [`FixtureServer`] share one state; only
//!   [`FixtureServer::for_new_connection`] hands out a new connection id.

pub(crate) mod bad_results;
pub(crate) mod client_requests;
pub(crate) mod extras;
pub(crate) mod faults;
pub(crate) mod hostile;
pub(crate) mod lifecycle;
pub(crate) mod lists;
pub(crate) mod ops;
pub(crate) mod skills;
pub(crate) mod state;
pub(crate) mod versioned;

use std::{
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
        ContentBlock, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
        GetSkillRequestParams, GetSkillResult, Implementation, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListSkillsResult, ListToolsResult,
        PaginatedRequestParams, ProgressNotificationParam, PromptMessage,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
        Role, ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter,
        UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};
use serde_json::{Value, json};
use tokio::time::{Instant, MissedTickBehavior};

use crate::{
    handler::lists::{ListKind, paginate},
    handler::state::{ConnId, FixtureState},
    options::FixtureOptions,
    tools::{self, Args},
};

/// Longest sleep the `slow` tool accepts (one day).
const MAX_SLOW_MS: u64 = 24 * 60 * 60 * 1000;
/// Interval between progress notifications of the `slow` tool.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// An MCP server whose catalogue is set by [`FixtureOptions`] and changed at
/// runtime by its own tools. Clones share the same state.
#[derive(Clone)]
pub struct FixtureServer {
    pub(crate) opts: Arc<FixtureOptions>,
    pub(crate) state: Arc<Mutex<FixtureState>>,
    pub(crate) conn: ConnId,
}

impl FixtureServer {
    /// Asks `peer` for its roots outside any call; what came back (or the error) is kept as
    /// `roots_after_change`, which `ask_roots` reports.
    fn ask_roots_outside_calls(&self, peer: rmcp::Peer<RoleServer>) {
        let state = self.state.clone();
        tokio::spawn(async move {
            #[allow(deprecated)] // roots: every protocol before 2026-07-28
            let got = match peer.list_roots().await {
                Ok(roots) => serde_json::to_value(roots).unwrap_or_default(),
                Err(e) => serde_json::json!({"error": e.to_string()}),
            };
            state
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .roots_after_change = Some(got);
        });
    }

    /// A server with fresh state built from `opts`.
    pub fn new(opts: FixtureOptions) -> Self {
        Self {
            state: Arc::new(Mutex::new(FixtureState::new(&opts))),
            opts: Arc::new(opts),
            conn: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The options this server was built with.
    pub fn options(&self) -> &FixtureOptions {
        &self.opts
    }

    /// A handle sharing this server's state but counting as a separate client
    /// connection (used for each Streamable HTTP session).
    pub fn for_new_connection(&self) -> Self {
        Self {
            conn: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            ..self.clone()
        }
    }

    /// Locks the shared state; a poisoned lock is recovered, since every
    /// mutation leaves the state consistent.
    pub(crate) fn lock(&self) -> MutexGuard<'_, FixtureState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn all_tools(&self) -> Vec<rmcp::model::Tool> {
        let mut all = tools::static_tools();
        all.extend(crate::handler::faults::fault_tools());
        all.extend(crate::handler::versioned::versioned_tools());
        if self.lock().http.serving {
            all.extend(crate::handler::lifecycle::http_fault_tools());
        }
        if self.opts.skills {
            all.extend(crate::handler::skills::skill_tools());
        }
        all.extend((0..self.opts.tools).map(tools::generated_tool));
        let state = self.lock();
        all.extend(state.dynamic_tools.iter().cloned());
        all.extend(state.faults.flood_tool());
        all.extend(state.versioned.listed());
        if self.opts.hostile {
            all.extend(crate::handler::hostile::hostile_tools());
        }
        if self.opts.bad_results {
            all.extend(crate::handler::bad_results::bad_result_tools());
        }
        if self.opts.wire_faults {
            all.push(crate::wire_faults::wire_fault_tool());
        }
        if self.opts.deep_schema_tool {
            all.push(crate::wire_faults::deep_schema_tool());
        }
        if self.opts.client_requests {
            all.extend(crate::handler::client_requests::client_request_tools());
        }
        if self.opts.log_and_complete {
            all.push(crate::handler::extras::log_tool());
        }
        if let Some(dup) = &self.opts.duplicate_tool {
            let copy = all.iter().find(|t| t.name == dup.as_str()).cloned();
            all.extend(copy);
        }
        all
    }

    /// Whether `name` is a tool added at run time (by `add_tool` or `flood`).
    fn is_dynamic_tool(&self, name: &str) -> bool {
        let state = self.lock();
        state.dynamic_tools.iter().any(|t| t.name == name) || state.faults.is_flood_tool(name)
    }

    /// Fails a list request when a failure was scheduled for its page (`fail_next_list`).
    pub(crate) fn check_list(
        &self,
        kind: ListKind,
        request: &Option<PaginatedRequestParams>,
    ) -> Result<(), McpError> {
        let cursor = cursor_of(request);
        let page = crate::handler::faults::page_of(cursor, self.opts.page_size);
        let mut state = self.lock();
        if cursor.is_none() {
            state.versioned.count_listing(kind.method());
        }
        state.faults.check_list(kind, page)
    }

    fn resource_exists(&self, uri: &str) -> bool {
        let state = self.lock();
        tools::item_id(uri).is_some()
            || state.resources.iter().any(|r| r.uri == uri)
            || state.skills.serves(uri)
    }

    /// Sleeps `ms` milliseconds, sending progress every 100 ms when the
    /// request carries a progress token; stops early on cancellation.
    async fn slow(
        &self,
        ms: u64,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        if ms > MAX_SLOW_MS {
            return Err(McpError::invalid_params(
                format!("argument \"ms\" must be at most {MAX_SLOW_MS}"),
                None,
            ));
        }
        let token = context.meta.get_progress_token();
        let start = Instant::now();
        let deadline = start + Duration::from_millis(ms);
        let mut ticks = tokio::time::interval_at(start + PROGRESS_EVERY, PROGRESS_EVERY);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = context.ct.cancelled() => {
                    tracing::debug!(ms, "slow tool cancelled");
                    return Err(McpError::internal_error("request cancelled", None));
                }
                () = tokio::time::sleep_until(deadline) => break,
                _ = ticks.tick() => {
                    let Some(token) = token.clone() else { continue };
                    let done = start.elapsed().as_millis().min(u128::from(ms));
                    let param = ProgressNotificationParam::new(token, done as f64)
                        .with_total(ms as f64)
                        .with_message(format!("slept {done} of {ms} ms"));
                    if let Err(error) = context.peer.notify_progress(param).await {
                        tracing::debug!(%error, "progress notification not delivered");
                    }
                }
            }
        }
        Ok(text_result(format!("slept {ms} ms")))
    }
}

/// A successful result with one text block.
pub(crate) fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// A tool-level error result with one text block.
pub(crate) fn error_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

pub(crate) fn cursor_of(request: &Option<PaginatedRequestParams>) -> Option<&str> {
    request.as_ref().and_then(|r| r.cursor.as_deref())
}

impl ServerHandler for FixtureServer {
    fn get_info(&self) -> ServerConfig {
        let builder = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe();
        let mut capabilities = if self.opts.skills {
            builder.enable_skills_with_directory_read().build()
        } else {
            builder.build()
        };
        if self.opts.log_and_complete {
            capabilities.logging = Some(Default::default());
            capabilities.completions = Some(Default::default());
        }
        if self.opts.no_resources {
            capabilities.resources = None;
        } else if self.opts.no_subscribe
            && let Some(resources) = capabilities.resources.as_mut()
        {
            resources.subscribe = None;
        }
        let mut info = ServerConfig::new(capabilities).with_server_info(Implementation::new(
            &self.opts.name,
            env!("CARGO_PKG_VERSION"),
        ));
        info.instructions = self.opts.instructions.clone();
        if self.opts.no_catalog_cache {
            let mut experimental = std::collections::BTreeMap::new();
            let mut off = rmcp::model::JsonObject::new();
            off.insert("enabled".into(), Value::Bool(false));
            experimental.insert("mcp-harness/catalog-cache".to_string(), off);
            info.capabilities.experimental = Some(experimental);
        }
        info
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        let id = notification.request_id.map(|id| id.to_string());
        tracing::debug!(conn = self.conn, ?id, "cancel received");
        self.lock().versioned.cancelled(id, notification.reason);
    }

    #[allow(deprecated)] // logging/setLevel: every protocol before 2026-07-28
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !self.opts.log_and_complete {
            return Err(McpError::method_not_found::<
                rmcp::model::SetLevelRequestMethod,
            >());
        }
        self.set_log_level(request.level);
        Ok(())
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        if !self.opts.log_and_complete {
            return Err(McpError::method_not_found::<
                rmcp::model::CompleteRequestMethod,
            >());
        }
        self.completions(&request)
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.lock().roots_changed += 1;
        // Asks the roots again outside any call, as a filesystem server does.
        self.ask_roots_outside_calls(context.peer);
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        tracing::debug!(conn = self.conn, "client initialized");
        // With `--client-requests`, asks a client that has roots for them at start, as a
        // filesystem server does.
        if self.opts.client_requests
            && context
                .peer
                .peer_info()
                .is_some_and(|info| info.capabilities.roots.is_some())
        {
            self.ask_roots_outside_calls(context.peer.clone());
        }
        let mut state = self.lock();
        state.prune_closed();
        state.peers.insert(self.conn, context.peer);
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.check_list(ListKind::Tools, &request)?;
        let (page, next) = paginate(
            ListKind::Tools,
            self.all_tools(),
            self.opts.page_size,
            cursor_of(&request),
        )?;
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = request.arguments.unwrap_or_default();
        let args = Args(&arguments);
        let name = request.name.as_ref();
        if let Some(code) = self.opts.die_on_call {
            use std::io::Write as _;
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "fixture: dying in the middle of tools/call {name}");
            let _ = stderr.flush();
            std::process::exit(code);
        }
        self.lock()
            .crash
            .count(&context.id, self.opts.crash_after_calls);
        if crate::handler::lifecycle::HTTP_FAULT_TOOL_NAMES.contains(&name) {
            let times = if arguments.contains_key("times") {
                Some(args.unsigned("times")?)
            } else {
                None
            };
            if let Some(result) = self.http_fault_call(name, times) {
                return Ok(result.into());
            }
        }
        self.lock().versioned.count(name);
        let executing = self.lock().versioned.executing(name);
        if let Some(version) = executing {
            return Ok(self.versioned_call(version).into());
        }
        if self.opts.bad_results
            && let Some(result) = crate::handler::bad_results::call(name)
        {
            return Ok(result.into());
        }
        if self.opts.client_requests
            && let Some(result) = self
                .client_request_call(name, args.opt_string("message")?, &context)
                .await
        {
            return Ok(result?.into());
        }
        if self.opts.log_and_complete && name == "log" {
            return Ok(self.log_call(&context).await.into());
        }
        let result = match name {
            "echo" => {
                let mut result = text_result(args.string("message")?);
                result.meta = trace_meta(&context.meta);
                result
            }
            "add" => {
                let (text, sum) = tools::sum_value(args.number("a")?, args.number("b")?);
                let mut result = text_result(text);
                result.structured_content = Some(json!({ "sum": sum }));
                result
            }
            "slow" => {
                self.lock().versioned.slow_started(context.id.to_string());
                self.slow(args.unsigned("ms")?, &context).await?
            }
            "large" => {
                let bytes = args.unsigned("bytes")?;
                let bytes = usize::try_from(bytes)
                    .ok()
                    .filter(|b| *b as u64 <= tools::MAX_LARGE_BYTES)
                    .ok_or_else(|| {
                        McpError::invalid_params(
                            format!(
                                "argument \"bytes\" must be at most {}",
                                tools::MAX_LARGE_BYTES
                            ),
                            None,
                        )
                    })?;
                text_result(tools::large_text(bytes))
            }
            "fail" => error_result(
                args.opt_string("message")?
                    .unwrap_or_else(|| "fixture tool failed on purpose".into()),
            ),
            "wire_fault" if self.opts.wire_faults => text_result(format!(
                "{}{}",
                crate::wire_faults::MARKER,
                args.string("kind")?
            )),
            "add_tool" => {
                self.add_tool(
                    args.string("name")?,
                    args.opt_string("description")?,
                    &context,
                )
                .await
            }
            "remove_tool" => self.remove_tool(&args.string("name")?, &context).await,
            "mutate_tool" => {
                let after = if arguments.contains_key("apply_after_ms") {
                    args.unsigned("apply_after_ms")?
                } else {
                    0
                };
                self.mutate_tool(
                    args.string("name")?,
                    args.unsigned("version")?,
                    after,
                    &context,
                )
                .await
            }
            "calls" => self.call_counts(),
            "cancellations" => self.cancellations(),
            "flood" => {
                self.flood(&args.string("kind")?, args.unsigned("count")?, &context)
                    .await
            }
            "fail_next_list" => {
                let page = if arguments.contains_key("page") {
                    args.unsigned("page")?
                } else {
                    0
                };
                let times = if arguments.contains_key("times") {
                    args.unsigned("times")?
                } else {
                    1
                };
                self.fail_next_list(&args.string("kind")?, page, times)
            }
            "add_prompt" => self.add_prompt(args.string("name")?, &context).await,
            "remove_prompt" => self.remove_prompt(&args.string("name")?, &context).await,
            "add_resource" => {
                self.add_resource(args.string("uri")?, args.opt_string("text")?, &context)
                    .await
            }
            "remove_resource" => self.remove_resource(&args.string("uri")?, &context).await,
            "add_skill" if self.opts.skills => {
                self.add_skill(args.string("name")?, args.string("description")?, &context)
                    .await
            }
            "skill_reads" if self.opts.skills => self.skill_reads(),
            "update_resource" => {
                self.update_resource(&args.string("uri")?, args.string("text")?, &context)
                    .await
            }
            _ => {
                if let Some(index) = tools::generated_index(name, self.opts.tools) {
                    let value = args.opt_string("value")?.unwrap_or_default();
                    text_result(format!("tool_{index}: {value}"))
                } else if self.is_dynamic_tool(name) {
                    text_result(Value::Object(arguments.clone()).to_string())
                } else {
                    return Err(McpError::invalid_params(
                        format!("unknown tool {name:?}"),
                        None,
                    ));
                }
            }
        };
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.check_list(ListKind::Prompts, &request)?;
        let mut prompts = vec![tools::greeting_prompt()];
        {
            let state = self.lock();
            prompts.extend(
                state
                    .dynamic_prompts
                    .iter()
                    .map(|n| tools::dynamic_prompt(n)),
            );
            prompts.extend(state.faults.flood_prompt());
        }
        let (page, next) = paginate(
            ListKind::Prompts,
            prompts,
            self.opts.page_size,
            cursor_of(&request),
        )?;
        let mut result = ListPromptsResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let text = if request.name == "greeting" {
            let arguments = request.arguments.unwrap_or_default();
            let who = Args(&arguments).string("name")?;
            format!("Hello, {who}!")
        } else if self.lock().dynamic_prompts.contains(&request.name) {
            format!("prompt {}", request.name)
        } else {
            return Err(McpError::invalid_params(
                format!("unknown prompt {:?}", request.name),
                None,
            ));
        };
        let mut result = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]);
        result.meta = trace_meta(&context.meta);
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.check_list(ListKind::Resources, &request)?;
        let resources = {
            let state = self.lock();
            let mut all: Vec<_> = state
                .resources
                .iter()
                .map(|r| tools::text_resource(&r.uri))
                .collect();
            all.extend(state.faults.flood_resource());
            all.extend(state.skills.resources());
            all
        };
        let (page, next) = paginate(
            ListKind::Resources,
            resources,
            self.opts.page_size,
            cursor_of(&request),
        )?;
        let mut result = ListResourcesResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        if self.opts.no_templates_method {
            return Err(McpError::method_not_found::<
                rmcp::model::ListResourceTemplatesRequestMethod,
            >());
        }
        self.check_list(ListKind::ResourceTemplates, &request)?;
        let (page, next) = paginate(
            ListKind::ResourceTemplates,
            vec![tools::item_template()],
            self.opts.page_size,
            cursor_of(&request),
        )?;
        let mut result = ListResourceTemplatesResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        if let Some(result) = self.read_skill_file(&uri) {
            return result.map(Into::into);
        }
        let stored = self.lock().resource_mut(&uri).map(|r| r.text.clone());
        let text = match (stored, tools::item_id(&uri)) {
            (Some(text), _) => text,
            (None, Some(id)) => format!("item {id}"),
            (None, None) => {
                return Err(McpError::resource_not_found(
                    format!("unknown resource {uri}"),
                    Some(json!({ "uri": uri })),
                ));
            }
        };
        let mut result = ReadResourceResult::new(vec![ResourceContents::text(text, uri)]);
        result.meta = trace_meta(&context.meta);
        Ok(result.into())
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, McpError> {
        self.skills_page(&request)
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, McpError> {
        self.skill_entry(&request.uri)
    }

    async fn read_resource_directory(
        &self,
        request: rmcp::model::ReadResourceDirectoryRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.skill_directory(&request.uri)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !self.resource_exists(&request.uri) {
            return Err(McpError::resource_not_found(
                format!("unknown resource {}", request.uri),
                Some(json!({ "uri": request.uri })),
            ));
        }
        let mut state = self.lock();
        state.prune_closed();
        state
            .subscribers
            .entry(request.uri)
            .or_default()
            .insert(self.conn, context.peer);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let mut state = self.lock();
        if let Some(subs) = state.subscribers.get_mut(&request.uri) {
            subs.remove(&self.conn);
        }
        state.prune_closed();
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let _registration = self.register_sink(context.sink().clone());
        context.cancelled().await;
        Ok(())
    }
}

/// The trace context (SEP-414) a request carried, as `fixture/traceparent` and
/// `fixture/tracestate` for its result's `_meta`, so a gateway test can see that its upstream
/// span reached the server; `None` when the request carried none.
fn trace_meta(meta: &rmcp::model::RequestMetaObject) -> Option<rmcp::model::MetaObject> {
    let traceparent = meta.get_traceparent()?;
    let mut out = rmcp::model::JsonObject::new();
    out.insert("fixture/traceparent".into(), json!(traceparent));
    if let Some(tracestate) = meta.get_tracestate() {
        out.insert("fixture/tracestate".into(), json!(tracestate));
    }
    Some(rmcp::model::MetaObject(out))
}
