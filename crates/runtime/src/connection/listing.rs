//! Listing a server's catalog over its session: only the kinds its capabilities declare, every
//! page (through [`collect_pages`] and its guards), each page under a deadline. A listing is all
//! of a kind or an error, never a prefix.

use std::time::Duration;

use mcp_harness_catalog::{Kind, ListError, PageLimits, collect_pages};
use mcp_harness_transport::{ClientPeer, SessionInfo, WireNotes};
use rmcp::model::{PaginatedRequestParams, Prompt, Resource, ResourceTemplate, Skill, Tool};
use rmcp::service::ServiceError;

use crate::error::describe;

/// One complete listing of one kind.
#[derive(Debug)]
pub(crate) enum Listed {
    Tools(Vec<Tool>),
    Prompts(Vec<Prompt>),
    Resources(Vec<Resource>),
    Templates(Vec<ResourceTemplate>),
    Skills(Vec<Skill>),
}

impl Listed {
    /// An empty listing of `kind` (`None` for the kinds that are built, not listed).
    pub(crate) fn empty(kind: Kind) -> Option<Self> {
        Some(match kind {
            Kind::Tools => Self::Tools(Vec::new()),
            Kind::Prompts => Self::Prompts(Vec::new()),
            Kind::Resources => Self::Resources(Vec::new()),
            Kind::ResourceTemplates => Self::Templates(Vec::new()),
            Kind::Skills => Self::Skills(Vec::new()),
            Kind::Commands => return None,
        })
    }
}

/// The kinds `info`'s capabilities declare.
pub(crate) fn declared_kinds(info: &SessionInfo) -> Vec<Kind> {
    let caps = &info.capabilities;
    let mut kinds = Vec::new();
    if caps.tools.is_some() {
        kinds.push(Kind::Tools);
    }
    if caps.prompts.is_some() {
        kinds.push(Kind::Prompts);
    }
    if caps.resources.is_some() {
        kinds.push(Kind::Resources);
        kinds.push(Kind::ResourceTemplates);
    }
    if caps.supports_skills() {
        kinds.push(Kind::Skills);
    }
    kinds
}

/// Lists every page of `kind`, each page within `page_timeout`.
pub(crate) async fn list_kind(
    peer: ClientPeer,
    wire: WireNotes,
    kind: Kind,
    limits: PageLimits,
    page_timeout: Duration,
) -> Result<Listed, ListFailure> {
    let params =
        |cursor: Option<String>| Some(PaginatedRequestParams::default().with_cursor(cursor));
    let result = match kind {
        Kind::Commands => {
            return Err(ListFailure {
                message: "commands are built from prompts and skills, not listed".to_string(),
                auth_required: false,
                timed_out: false,
            });
        }
        Kind::Skills => collect_pages(limits, |c| {
            let peer = peer.clone();
            timed_page(page_timeout, &wire, async move {
                peer.list_skills(params(c))
                    .await
                    .map(|r| (r.skills, r.next_cursor))
            })
        })
        .await
        .map(Listed::Skills),
        Kind::Tools => collect_pages(limits, |c| {
            let peer = peer.clone();
            timed_page(page_timeout, &wire, async move {
                peer.list_tools(params(c))
                    .await
                    .map(|r| (r.tools, r.next_cursor))
            })
        })
        .await
        .map(Listed::Tools),
        Kind::Prompts => collect_pages(limits, |c| {
            let peer = peer.clone();
            timed_page(page_timeout, &wire, async move {
                peer.list_prompts(params(c))
                    .await
                    .map(|r| (r.prompts, r.next_cursor))
            })
        })
        .await
        .map(Listed::Prompts),
        Kind::Resources => collect_pages(limits, |c| {
            let peer = peer.clone();
            timed_page(page_timeout, &wire, async move {
                peer.list_resources(params(c))
                    .await
                    .map(|r| (r.resources, r.next_cursor))
            })
        })
        .await
        .map(Listed::Resources),
        Kind::ResourceTemplates => collect_pages(limits, |c| {
            let peer = peer.clone();
            timed_page(page_timeout, &wire, async move {
                peer.list_resource_templates(params(c))
                    .await
                    .map(|r| (r.resource_templates, r.next_cursor))
            })
        })
        .await
        .map(Listed::Templates),
    };
    result.map_err(|e| {
        let auth_required = matches!(&e, ListError::Fetch(f) if f.auth_required);
        let timed_out = matches!(&e, ListError::Fetch(f) if f.timed_out);
        ListFailure {
            message: format!("listing {kind} failed: {e}"),
            auth_required,
            timed_out,
        }
    })
}

/// Why a listing failed, and whether the server asked for authorization (then the server
/// needs a login rather than a retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListFailure {
    pub message: String,
    pub auth_required: bool,
    /// No answer came within the listing's deadline.
    pub timed_out: bool,
}

impl std::fmt::Display for ListFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

async fn timed_page<T>(
    limit: Duration,
    wire: &WireNotes,
    fut: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, ListFailure> {
    let mark = wire.anomaly_mark();
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            let auth_required = e.auth_challenge().is_some();
            Err(ListFailure {
                message: describe(e),
                auth_required,
                timed_out: false,
            })
        }
        Err(_) => Err(ListFailure {
            message: match wire.anomalies_since(mark) {
                Some(arrived) => format!(
                    "no usable answer within {}s; the server sent {arrived}",
                    seconds(limit)
                ),
                None => format!("no answer within {}s", seconds(limit)),
            },
            auth_required: false,
            timed_out: true,
        }),
    }
}

/// `d` in seconds to the millisecond, as an error says it.
fn seconds(d: Duration) -> f64 {
    d.as_millis() as f64 / 1000.0
}
