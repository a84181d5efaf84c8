//! [`Traced`]: a session handler with a server span around every request it serves (see
//! [`crate::spans`] for the names and attributes), so no handler has to start or end one.
//!
//! Invariants:
//! - every method of rmcp's `ServerHandler` is forwarded to the inner handler (none falls back
//!   to rmcp's default), unchanged: tracing adds spans, never behaviour;
//! - without a tracer a request only passes through: no span, no allocation;
//! - `subscriptions/listen` (as long-lived as the client's interest), custom requests (the
//!   gateway serves none) and notifications get no span.

// Forwards the legacy methods too (logging/setLevel, resources/subscribe|unsubscribe).
#![allow(deprecated)]

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CancelledNotificationParam,
    CompleteRequestParams, CompleteResult, CustomNotification, CustomRequest, CustomResult,
    DiscoverResult, GetPromptRequestParams, GetPromptResponse, GetSkillRequestParams,
    GetSkillResult, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListSkillsResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion,
    ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult, ReadResourceRequestParams,
    ReadResourceResponse, Reference, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::spans::{Answer, Serving, Target};
use crate::trace::Tracer;

/// A session handler whose requests get server spans when a tracer is configured.
pub(crate) struct Traced<S> {
    inner: S,
    tracer: Option<Arc<Tracer>>,
}

impl<S> Traced<S> {
    /// `inner`, traced by `tracer` (`None`: only forwarded).
    pub(crate) fn new(inner: S, tracer: Option<Arc<Tracer>>) -> Self {
        Self { inner, tracer }
    }

    fn start(
        &self,
        method: &'static str,
        target: Target<'_>,
        context: &mut RequestContext<RoleServer>,
    ) -> Option<Serving> {
        let tracer = self.tracer.as_ref()?;
        Some(crate::spans::serve(tracer, method, target, context))
    }
}

fn ok<T>(_: &T) -> Answer<'static> {
    Answer::Ok
}

fn call_answer(response: &CallToolResponse) -> Answer<'static> {
    match response {
        CallToolResponse::Complete(result) if result.is_error == Some(true) => Answer::ToolError,
        _ => Answer::Ok,
    }
}

/// A forwarded request method with a server span around it: `(name, params type, result
/// type, method, |params| target, answer)`.
macro_rules! traced {
    ($name:ident, $params:ty, $result:ty, $method:literal, |$request:ident| $target:expr, $answer:expr) => {
        async fn $name(
            &self,
            $request: $params,
            mut context: RequestContext<RoleServer>,
        ) -> Result<$result, McpError> {
            let serving = self.start($method, $target, &mut context);
            let result = self.inner.$name($request, context).await;
            if let Some(serving) = serving {
                serving.end(result.as_ref().map($answer));
            }
            result
        }
    };
}

/// Paginated listings: nothing to name.
macro_rules! listing {
    ($name:ident, $result:ty, $method:literal) => {
        traced!(
            $name,
            Option<PaginatedRequestParams>,
            $result,
            $method,
            |_request| Target::None,
            ok
        );
    };
}

impl<S: ServerHandler> ServerHandler for Traced<S> {
    async fn ping(&self, mut context: RequestContext<RoleServer>) -> Result<(), McpError> {
        let serving = self.start("ping", Target::None, &mut context);
        let result = self.inner.ping(context).await;
        if let Some(serving) = serving {
            serving.end(result.as_ref().map(ok));
        }
        result
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let mut serving = self.start("initialize", Target::None, &mut context);
        if let Some(serving) = &mut serving {
            serving.set("mcp.protocol.version", request.protocol_version.as_str());
            serving.set_client(&request.client_info.name);
        }
        let result = self.inner.initialize(request, context).await;
        if let Some(serving) = serving {
            let answer = result
                .as_ref()
                .map(|r| Answer::Initialized(r.protocol_version.as_str()));
            serving.end(answer);
        }
        result
    }

    fn negotiate_initialize(
        &self,
        request: &InitializeRequestParams,
    ) -> Result<InitializeResult, McpError> {
        self.inner.negotiate_initialize(request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }

    async fn discover(
        &self,
        mut context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let serving = self.start("server/discover", Target::None, &mut context);
        let result = self.inner.discover(context).await;
        if let Some(serving) = serving {
            serving.end(result.as_ref().map(ok));
        }
        result
    }

    traced!(
        complete,
        CompleteRequestParams,
        CompleteResult,
        "completion/complete",
        |request| match &request.r#ref {
            Reference::Prompt(prompt) => Target::Prompt(&prompt.name),
            Reference::Resource(template) => Target::Resource(&template.uri),
            _ => Target::None,
        },
        ok
    );
    traced!(
        set_level,
        SetLevelRequestParams,
        (),
        "logging/setLevel",
        |_request| Target::None,
        ok
    );
    traced!(
        get_prompt,
        GetPromptRequestParams,
        GetPromptResponse,
        "prompts/get",
        |request| Target::Prompt(&request.name),
        ok
    );
    listing!(list_prompts, ListPromptsResult, "prompts/list");
    listing!(list_resources, ListResourcesResult, "resources/list");
    listing!(
        list_resource_templates,
        ListResourceTemplatesResult,
        "resources/templates/list"
    );
    traced!(
        read_resource,
        ReadResourceRequestParams,
        ReadResourceResponse,
        "resources/read",
        |request| Target::Resource(&request.uri),
        ok
    );

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.inner.accepted_subscription_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.inner.listen(context).await
    }

    traced!(
        subscribe,
        SubscribeRequestParams,
        (),
        "resources/subscribe",
        |request| Target::Resource(&request.uri),
        ok
    );
    traced!(
        unsubscribe,
        UnsubscribeRequestParams,
        (),
        "resources/unsubscribe",
        |request| Target::Resource(&request.uri),
        ok
    );
    traced!(
        call_tool,
        CallToolRequestParams,
        CallToolResponse,
        "tools/call",
        |request| Target::Tool(&request.name),
        call_answer
    );
    listing!(list_tools, ListToolsResult, "tools/list");

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.get_tool(name)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        self.inner.on_custom_request(request, context).await
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        self.inner.on_cancelled(notification, context).await;
    }

    async fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        self.inner.on_progress(notification, context).await;
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.inner.on_initialized(context).await;
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.inner.on_roots_list_changed(context).await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) {
        self.inner
            .on_custom_notification(notification, context)
            .await;
    }

    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    traced!(
        get_task,
        GetTaskParams,
        GetTaskResult,
        "tasks/get",
        |_request| Target::None,
        ok
    );
    traced!(
        update_task,
        UpdateTaskParams,
        (),
        "tasks/update",
        |_request| Target::None,
        ok
    );
    traced!(
        cancel_task,
        CancelTaskParams,
        (),
        "tasks/cancel",
        |_request| Target::None,
        ok
    );
    listing!(list_skills, ListSkillsResult, "skills/list");
    traced!(
        get_skill,
        GetSkillRequestParams,
        GetSkillResult,
        "skills/get",
        |request| Target::Resource(&request.uri),
        ok
    );
    traced!(
        read_resource_directory,
        ReadResourceDirectoryRequestParams,
        ReadResourceDirectoryResult,
        "resources/directory/read",
        |request| Target::Resource(&request.uri),
        ok
    );
}
