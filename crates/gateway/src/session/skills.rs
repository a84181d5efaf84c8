//! The skills (SEP-2640) side of a session: whether the gateway declares the extension, the
//! `skills/list` and `skills/get` answers from the catalog, and `resources/directory/read`
//! routed to the server that owns the directory.
//!
//! Invariants:
//! - the extension is declared while some connected upstream declares it (or lists skills),
//!   and `directoryRead` only while one of those declares `directoryRead` too, so a declared
//!   method is never one no upstream can answer;
//! - `skills/list` and `skills/get` answer from the same [`SkillView`] of the current snapshot
//!   and the client's profile, so a skill it may not see is neither listed nor found (`-32602`);
//! - every URI a directory listing returns is shown as the client's view shows it.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    GetSkillResult, ListResourcesResult, ListSkillsResult, ResourceContents, ResultType,
    SkillsCapability,
};

use rmcp::RoleServer;
use rmcp::service::RequestContext;

use super::Session;
use super::call::upstream_error;
use super::shared::profile_of;
use crate::names::{ResourceView, SkillView};
use mcp_harness_runtime::ClientProfile;

impl Session {
    /// The skills extension's settings to declare (`None`: no upstream serves skills).
    pub(super) fn skills_capability(&self) -> Option<SkillsCapability> {
        let snapshot = self.runtime().snapshot();
        let mut declared = None;
        for (server, catalog) in &snapshot.catalogs {
            let capabilities = self.runtime().server_capabilities(server);
            let supports = capabilities.as_ref().is_some_and(|c| c.supports_skills());
            if !supports && catalog.skills.is_empty() {
                continue;
            }
            let mut skills = declared.unwrap_or_else(SkillsCapability::new);
            if capabilities.is_some_and(|c| c.supports_directory_read()) {
                skills = skills.with_directory_read();
            }
            declared = Some(skills);
        }
        declared
    }

    /// `skills/list`: every skill the client's profile may see, on one page.
    pub(super) fn skills_listing(&self, profile: Option<&ClientProfile>) -> ListSkillsResult {
        let view = SkillView::new(
            &self.runtime().snapshot(),
            self.shared().options.prefix,
            profile,
        );
        ListSkillsResult::with_all_items(view.skills)
    }

    /// `skills/get`: the entry listed at `uri`, else `-32602`.
    pub(super) fn skill(
        &self,
        uri: &str,
        profile: Option<&ClientProfile>,
    ) -> Result<GetSkillResult, McpError> {
        let view = SkillView::new(
            &self.runtime().snapshot(),
            self.shared().options.prefix,
            profile,
        );
        view.get(uri)
            .cloned()
            .map(GetSkillResult::new)
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("no skill is served at `{uri}`; list skills again (skills/list)"),
                    Some(serde_json::json!({ "uri": uri })),
                )
            })
    }

    /// `resources/directory/read`, sent to the server that owns `uri`; its children shown as
    /// this client's view shows them.
    pub(super) async fn directory(
        &self,
        uri: &str,
        cursor: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let profile = profile_of(&context.extensions);
        let view = ResourceView::new(
            &self.runtime().snapshot(),
            self.shared().options.prefix,
            profile.as_deref(),
        );
        let Some((server, upstream)) = view.route(uri) else {
            return Err(McpError::invalid_params(
                format!("`{uri}` is not a directory any server of this gateway serves"),
                Some(serde_json::json!({ "uri": uri })),
            ));
        };
        let target = crate::spans::Target::Resource(&upstream);
        let span = self.upstream(context, "resources/directory/read", target, &server);
        let trace = crate::spans::meta(span.as_ref());
        let result = self
            .runtime()
            .read_resource_directory_with(&server, &upstream, cursor, &trace)
            .await;
        crate::spans::end_upstream(span, result.as_ref().map(|_| false));
        let mut result = result.map_err(upstream_error)?;
        // An upstream of an older protocol sends none; rmcp drops it for such clients.
        result.result_type.get_or_insert(ResultType::COMPLETE);
        // Only what is in this directory and this client may see: a child the upstream names
        // elsewhere (another scheme, a path out of it, a `.`/`..` segment) or that the
        // profile's rules deny is left out.
        let directory = upstream.split(['?', '#']).next().unwrap_or_default();
        let directory = directory.trim_end_matches('/');
        result.resources.retain_mut(|child| {
            let inside = (child.uri.strip_prefix(directory)).is_some_and(|rest| rest.starts_with('/'))
                && !mcp_harness_policy::uri::has_dot_segment(&child.uri);
            if !inside || !view.admits(&server, &child.uri) {
                tracing::debug!(%server, child = %child.uri, "a directory entry outside the directory or hidden from this client; left out");
                return false;
            }
            child.uri = view.shown(&server, &child.uri);
            true
        });
        Ok(result)
    }
}

/// `contents` of `server` with each URI shown as `view` shows it.
pub(super) fn shown_contents(view: &ResourceView, server: &str, contents: &mut [ResourceContents]) {
    for content in contents {
        if let ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } = content
        {
            *uri = view.shown(server, uri);
        }
    }
}
