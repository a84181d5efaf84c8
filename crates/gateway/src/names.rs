//! What a client sees: the downstream listings built from one binding or snapshot, the map
//! from each downstream name back to the catalog entry it came from, and a digest per kind.
//!
//! Invariant: a view's list and its name map are built from the same entries of the same
//! frozen binding or snapshot, so a listed name always maps back to the entry that was listed;
//! the digest changes exactly when the list a client would get changes. A client profile's
//! filters are applied while building, so what a profile may not see is neither listed nor
//! resolvable: no list/call mismatch.

use std::collections::HashMap;

/// The views' maps from a downstream name, looked up on every call (foldhash: SipHash cost
/// about a thousand instructions a call across the gateway's maps).
type Map<K, V> = HashMap<K, V, foldhash::quality::RandomState>;
use std::hash::{Hash as _, Hasher as _};

use mcp_harness_policy::uri::{canonical_uri, has_dot_segment};
use mcp_harness_runtime::catalog::Snapshot;
use mcp_harness_runtime::catalog::uri_template::{Budget, Template};
use mcp_harness_runtime::{ClientProfile, SEARCH_TOOL, StepBinding};
use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};
use serde::Serialize;

use crate::Prefix;

mod skills;

pub(crate) use skills::SkillView;
use skills::{downstream_uri, upstream_of};

/// A digest of what a list shows (stable across processes of the same build).
pub(crate) fn digest<T: Serialize>(items: &[T]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    for item in items {
        serde_json::to_string(item)
            .unwrap_or_default()
            .hash(&mut hasher);
    }
    hasher.finish()
}

/// The digest of what a client is told about with `notifications/resources/list_changed`: its
/// resources and templates, and its skills (which have no list_changed of their own).
pub(crate) fn resources_digest(resources: &ResourceView, skills: &SkillView) -> u64 {
    resources.digest ^ skills.digest.rotate_left(2)
}

/// The tools of one binding, under their downstream names.
pub(crate) struct ToolView {
    pub(crate) tools: Vec<Tool>,
    /// Downstream name → the name the binding knows the tool by.
    names: Map<String, String>,
    pub(crate) digest: u64,
}

impl ToolView {
    /// The view of `binding` for `profile`, names under `prefix` and shortened to at most
    /// `max_len` characters.
    pub(crate) fn new(
        binding: &StepBinding,
        (prefix, max_len): (Prefix, usize),
        profile: Option<&ClientProfile>,
    ) -> Self {
        let snapshot = binding.snapshot();
        // Each server's tools in the order it listed them (servers by name, the gateway's own
        // tools last): in front of one server (`--prefix none`) the listing is the server's.
        let listed_at: HashMap<&str, (&str, usize)> =
            snapshot
                .catalogs
                .iter()
                .flat_map(|(server, catalog)| {
                    catalog.tools.iter().enumerate().map(move |(at, entry)| {
                        (entry.qualified_name.as_str(), (server.as_str(), at))
                    })
                })
                .collect();
        let mut tools = Vec::new();
        let mut names = Map::default();
        let mut bound_tools = binding.tools();
        bound_tools.sort_by_key(|bound| match listed_at.get(bound.name.as_str()) {
            Some((server, at)) => (0, *server, *at),
            None => (1, "", 0),
        });
        for bound in bound_tools {
            if let Some(profile) = profile {
                let server_seen = bound
                    .server
                    .as_deref()
                    .is_none_or(|server| profile.servers.admits(server));
                // Tool search answers from the whole catalog: a filtered profile does not get it.
                let filtered = !(profile.tools.is_open() && profile.servers.is_open());
                if !server_seen
                    || !profile.tools.admits(&bound.name)
                    || (filtered && bound.name == SEARCH_TOOL)
                {
                    continue;
                }
            }
            let downstream = match (prefix, &bound.server) {
                (Prefix::None, Some(_)) => snapshot
                    .tool(&bound.name)
                    .map(|entry| entry.raw_name.clone())
                    .unwrap_or_else(|| bound.name.clone()),
                _ => bound.name.clone(),
            };
            let downstream = mcp_harness_runtime::catalog::shorten(&downstream, max_len);
            if names.contains_key(&downstream) {
                // Two names shortened alike (a hash collision): the second is withheld rather
                // than listed under a name that calls the first.
                tracing::warn!(tool = %bound.name, %downstream, "a shortened tool name is taken; the tool is not listed");
                continue;
            }
            let mut tool = (*bound.tool).clone();
            tool.name = downstream.clone().into();
            names.insert(downstream, bound.name.clone());
            tools.push(tool);
        }
        let digest = digest(&tools);
        Self {
            tools,
            names,
            digest,
        }
    }

    /// The tool listed as `downstream`, as it was listed.
    pub(crate) fn tool(&self, downstream: &str) -> Option<&Tool> {
        self.tools.iter().find(|tool| tool.name == downstream)
    }

    /// The binding's name of the tool listed as `downstream`.
    pub(crate) fn resolve(&self, downstream: &str) -> Option<&str> {
        self.names.get(downstream).map(String::as_str)
    }
}

/// Where a listed prompt comes from.
pub(crate) struct PromptTarget {
    pub(crate) server: String,
    pub(crate) raw_name: String,
}

/// The prompts of one snapshot, under their downstream names.
pub(crate) struct PromptView {
    pub(crate) prompts: Vec<Prompt>,
    targets: Map<String, PromptTarget>,
    pub(crate) digest: u64,
}

impl PromptView {
    pub(crate) fn new(
        snapshot: &Snapshot,
        prefix: Prefix,
        profile: Option<&ClientProfile>,
    ) -> Self {
        let mut prompts = Vec::new();
        let mut targets = Map::default();
        for catalog in snapshot.catalogs.values() {
            for entry in &catalog.prompts {
                if profile.is_some_and(|p| {
                    !p.servers.admits(&entry.server) || !p.prompts.admits(&entry.qualified_name)
                }) {
                    continue;
                }
                let downstream = match prefix {
                    Prefix::Server => entry.qualified_name.clone(),
                    Prefix::None => entry.raw_name.clone(),
                };
                if targets.contains_key(&downstream) {
                    // Qualified names are unique per server; this is a truncation clash.
                    tracing::debug!(name = %downstream, server = %entry.server, "prompt name taken; withheld");
                    continue;
                }
                let mut prompt = (*entry.prompt).clone();
                prompt.name = downstream.clone();
                targets.insert(
                    downstream,
                    PromptTarget {
                        server: entry.server.clone(),
                        raw_name: entry.raw_name.clone(),
                    },
                );
                prompts.push(prompt);
            }
        }
        let digest = digest(&prompts);
        Self {
            prompts,
            targets,
            digest,
        }
    }

    /// The server and raw name of the prompt listed as `downstream`.
    pub(crate) fn resolve(&self, downstream: &str) -> Option<&PromptTarget> {
        self.targets.get(downstream)
    }
}

/// The resources and resource templates of one snapshot, and which server owns each URI.
///
/// Resource URIs are served unchanged (tool results link to them by URI), except `skill://`
/// URIs under [`Prefix::Server`], which carry their server's name (see [`skills`]). When two
/// servers list the same URI, the server whose name sorts first serves it and the other's
/// entry is withheld; the choice depends on nothing but the two names. A profile's `resources`
/// filter matches URIs as shown downstream.
pub(crate) struct ResourceView {
    pub(crate) resources: Vec<Resource>,
    pub(crate) templates: Vec<ResourceTemplate>,
    prefix: Prefix,
    owners: Map<String, String>,
    /// (a template as shown, parsed; its server), the most specific first (a malformed
    /// template never gets here: the catalog refuses it when it is listed).
    template_owners: Vec<(String, Template, String)>,
    /// Templates a deny rule of the profile names as templates, parsed: a URI whose most specific template
    /// is one of these is hidden too (unless a listing names it), so a deny written as a
    /// template's pattern is not undone by another template or the one-server fallback.
    hidden_templates: Vec<(Template, String)>,
    /// Servers that list resources or templates.
    servers: Vec<String>,
    /// Every server the profile may see (skill files route to these).
    admitted: Vec<String>,
    /// How many servers the profile may see are configured but not connected (what they
    /// would serve is not known): a URI no listing claims goes to "the only server" only when
    /// there is none, not merely when the others are down (their URIs would reach a server
    /// that never listed them).
    unknown: usize,
    /// The profile's resource filter: a URI it does not admit has no owner.
    denied: Option<mcp_harness_policy::NameFilter>,
    pub(crate) digest: u64,
}

impl ResourceView {
    pub(crate) fn new(
        snapshot: &Snapshot,
        prefix: Prefix,
        profile: Option<&ClientProfile>,
    ) -> Self {
        let mut resources = Vec::new();
        let mut templates = Vec::new();
        let mut owners = Map::default();
        let mut template_owners = Vec::new();
        let mut hidden_templates = Vec::new();
        let mut servers = Vec::new();
        let mut admitted = Vec::new();
        let mut seen_templates = std::collections::HashSet::new();
        // `catalogs` is ordered by server name: the first lister of a URI keeps it.
        // Servers the profile may see that are configured but not connected: what they would
        // serve is not known (a connected one without resources serves none).
        let unknown = snapshot
            .servers
            .iter()
            .filter(|(name, status)| {
                !snapshot.catalogs.contains_key(*name)
                    && !matches!(
                        status.state,
                        mcp_harness_runtime::catalog::ServerState::Disabled
                            | mcp_harness_runtime::catalog::ServerState::Untrusted { .. }
                    )
                    && profile.is_none_or(|p| p.servers.admits(name))
            })
            .count();
        for (server, catalog) in &snapshot.catalogs {
            if profile.is_some_and(|p| !p.servers.admits(server)) {
                continue;
            }
            admitted.push(server.clone());
            // Judged as a read of the URI is (every reading of it): a URI the profile may not
            // use is not listed either, whatever its spelling (`SECRET://x` under a deny of
            // `secret://**`).
            let hidden =
                |uri: &str| profile.is_some_and(|p| !admits_every_reading(&p.resources, uri));
            if !catalog.resources.is_empty() || !catalog.templates.is_empty() {
                servers.push(server.clone());
            }
            for entry in &catalog.resources {
                let uri = downstream_uri(prefix, server, &entry.resource.uri);
                if hidden(&uri) {
                    continue;
                }
                if owners.contains_key(&uri) {
                    tracing::debug!(%uri, %server, "resource URI listed by an earlier server; withheld");
                    continue;
                }
                let mut resource = (*entry.resource).clone();
                resource.uri.clone_from(&uri);
                owners.insert(uri, server.clone());
                resources.push(resource);
            }
            for entry in &catalog.templates {
                let pattern = downstream_uri(prefix, server, &entry.template.uri_template);
                if hidden(&pattern) {
                    // Hidden by a deny rule that names it as a template (`files://{path}`):
                    // what it expands to is hidden with it. (An allow list, and a glob such as
                    // `files://*`, are judged on each URI as it is.)
                    if profile.is_some_and(|p| p.resources.denies_as_template(&pattern)) {
                        hidden_templates
                            .extend(Template::parse(&pattern).map(|t| (t, server.clone())));
                    }
                    continue;
                }
                if !seen_templates.insert(pattern.clone()) {
                    continue;
                }
                if let Some(parsed) = Template::parse(&pattern) {
                    template_owners.push((pattern.clone(), parsed, server.clone()));
                }
                let mut template = (*entry.template).clone();
                template.uri_template = pattern;
                templates.push(template);
            }
        }
        // A skill's files under another scheme than `skill://` (which routes by the server in
        // its downstream URI) are read where the skill was listed — after every resource
        // listing, so a skill file never withholds another server's listed resource.
        for (server, catalog) in &snapshot.catalogs {
            if !admitted.contains(server) {
                continue;
            }
            for skill in &catalog.skills {
                let files = std::iter::once(skill.uri.as_str())
                    .chain(skill.supporting_files().map(|f| f.uri.as_str()));
                for uri in files.filter(|u| !u.starts_with(skills::SCHEME)) {
                    if profile.is_none_or(|p| admits_every_reading(&p.resources, uri)) {
                        owners
                            .entry(uri.to_string())
                            .or_insert_with(|| server.clone());
                    }
                }
            }
        }
        let denied = profile.map(|p| p.resources.clone());
        // Stable: of two as specific, the server whose name sorts first.
        template_owners.sort_by_key(|(_, t, _)| std::cmp::Reverse(t.specificity()));
        let digest = digest(&resources) ^ digest(&templates).rotate_left(1);
        Self {
            resources,
            templates,
            prefix,
            owners,
            template_owners,
            hidden_templates,
            unknown,
            servers,
            admitted,
            denied,
            digest,
        }
    }

    /// The server that serves `uri` (`None` when the client's profile may not see it): the one
    /// listing it; else the one whose template it is (a completion names the template itself);
    /// else the one whose template it expands (the most specific template, RFC 6570); else the
    /// only server with resources. (What [`ResourceView::route`] decides, less its fallbacks
    /// for skills and admitted servers; the tests ask it.)
    #[cfg(test)]
    pub(crate) fn owner(&self, uri: &str) -> Option<&str> {
        if self
            .denied
            .as_ref()
            .is_some_and(|f| !admits_every_reading(f, uri))
        {
            return None;
        }
        self.owned(uri, &mut Budgets::default()).flatten()
    }

    /// [`ResourceView::owner`] past the profile's rules: `None` when `uri` is behind a hidden
    /// template, `Some(None)` when no server owns it.
    fn owned<'a>(&'a self, uri: &str, budgets: &mut Budgets<'a>) -> Option<Option<&'a str>> {
        if let Some(server) = self.owners.get(uri) {
            return Some(Some(server));
        }
        if self.behind_hidden_template(uri, budgets) {
            return None;
        }
        Some(
            self.template_owner(uri, budgets)
                .or_else(|| self.only_server(budgets)),
        )
    }

    /// The only server with resources, when no other the profile sees is down or connecting —
    /// and no template match was cut short (its "no" is no answer), and the profile hides no
    /// template: a URI a hidden template does not match as written (`FILES://x`, `files://x?y`)
    /// may still be one of its expansions to the server, so nothing unclaimed is forwarded.
    fn only_server(&self, budgets: &Budgets<'_>) -> Option<&str> {
        match self.servers.as_slice() {
            [only] if self.fallback_open(budgets) => Some(only),
            _ => None,
        }
    }

    /// Whether a URI no listing or template claims may go to the one server there is.
    fn fallback_open(&self, budgets: &Budgets<'_>) -> bool {
        self.unknown == 0 && !budgets.spent_any() && self.hidden_templates.is_empty()
    }

    /// The server whose template `uri` is (a completion names the template itself), else whose
    /// most specific template it expands.
    fn template_owner<'a>(&'a self, uri: &str, budgets: &mut Budgets<'a>) -> Option<&'a str> {
        self.template_owners
            .iter()
            .find(|(pattern, _, _)| pattern == uri)
            .or_else(|| {
                self.template_owners
                    .iter()
                    .find(|(_, t, server)| budgets.matches(t, server, uri))
            })
            .map(|(_, _, server)| server.as_str())
    }

    /// Whether a listing or a template of a server the client may see names `uri` — not only
    /// the fallback of [`ResourceView::owner`] to the only server with resources.
    pub(crate) fn claims(&self, uri: &str) -> bool {
        let admitted = self
            .denied
            .as_ref()
            .is_none_or(|f| admits_every_reading(f, uri));
        let mut budgets = Budgets::default();
        admitted
            && (self.owners.contains_key(uri)
                || !self.behind_hidden_template(uri, &mut budgets)
                    && self.template_owners.iter().any(|(pattern, t, server)| {
                        pattern == uri || budgets.matches(t, server, uri)
                    }))
    }

    /// Whether `uri`, named by no listing, is an expansion of a template the profile hides at
    /// least as specific as every visible template it also expands. A match cut short by its
    /// budget counts as hidden (fail closed: a long URI must not slip past a hidden template).
    fn behind_hidden_template<'a>(&'a self, uri: &str, budgets: &mut Budgets<'a>) -> bool {
        if self.hidden_templates.is_empty() || self.owners.contains_key(uri) {
            return false;
        }
        let hidden = self
            .hidden_templates
            .iter()
            .filter(|(t, server)| budgets.matches(t, server, uri))
            .map(|(t, _)| t.specificity())
            .max();
        if budgets.spent_any() {
            return true;
        }
        let Some(hidden) = hidden else {
            return false;
        };
        let visible = self
            .template_owners
            .iter()
            .find(|(_, t, server)| budgets.matches(t, server, uri));
        budgets.spent_any() || visible.is_none_or(|(_, visible, _)| visible.specificity() <= hidden)
    }

    /// Where a request for downstream `uri` goes: (server, the URI that server knows). A
    /// `skill://S/…` URI (under [`Prefix::Server`]) goes to server `S` when the profile may see
    /// it; under [`Prefix::None`] a URI no listing or template claims goes to the one server.
    pub(crate) fn route(&self, uri: &str) -> Option<(String, String)> {
        if self
            .denied
            .as_ref()
            .is_some_and(|f| !admits_every_reading(f, uri))
        {
            return None;
        }
        if let Some((server, upstream)) = upstream_of(self.prefix, uri) {
            return self
                .admitted
                .iter()
                .any(|s| s == server)
                .then(|| (server.to_string(), upstream));
        }
        if self.prefix == Prefix::Server && uri.starts_with(skills::SCHEME) {
            return None;
        }
        let mut budgets = Budgets::default();
        let owner = self.owned(uri, &mut budgets)?;
        let server = match (owner, self.admitted.as_slice()) {
            (Some(server), _) => server,
            (None, [only]) if self.fallback_open(&budgets) => only,
            (None, _) => return None,
        };
        Some((server.to_string(), uri.to_string()))
    }

    /// Whether the profile's resource rules admit `server`'s `uri` as this client is shown it.
    pub(crate) fn admits(&self, server: &str, uri: &str) -> bool {
        let shown = self.shown(server, uri);
        self.denied
            .as_ref()
            .is_none_or(|f| admits_every_reading(f, &shown))
    }

    /// How `server`'s `uri` is shown to this client.
    pub(crate) fn shown(&self, server: &str, uri: &str) -> String {
        downstream_uri(self.prefix, server, uri)
    }
}

/// The template-matching work one look-up of a URI may spend on one server's templates: a
/// server whose templates take more (thousands of them, or pathological ones) matches nothing
/// more in that look-up — and costs the other servers none of theirs.
const TEMPLATE_STEPS_PER_SERVER: usize = 1 << 20;

/// One look-up's template-matching budgets, one per server.
#[derive(Default)]
struct Budgets<'a>(std::collections::HashMap<&'a str, Budget>);

impl<'a> Budgets<'a> {
    /// Whether some server's templates ran out of budget in this look-up (a "no match" then
    /// is not known to be one).
    fn spent_any(&self) -> bool {
        self.0.values().any(Budget::spent)
    }

    /// Whether `uri` is an expansion of `server`'s `template`, within that server's budget.
    fn matches(&mut self, template: &Template, server: &'a str, uri: &str) -> bool {
        let budget = self
            .0
            .entry(server)
            .or_insert_with(|| Budget::new(TEMPLATE_STEPS_PER_SERVER));
        if budget.spent() {
            return false;
        }
        let matched = template.matches_within(uri, budget);
        if budget.spent() {
            spent_warning(server);
        }
        matched
    }
}

/// Says (at most once a minute per server, at debug level otherwise) that a server's
/// templates took more than their budget to match a URI.
fn spent_warning(server: &str) {
    type Said = std::collections::HashMap<String, std::time::Instant>;
    static LAST: std::sync::Mutex<Option<Said>> = std::sync::Mutex::new(None);
    let due = LAST.lock().is_ok_and(|mut last| {
        let said = last.get_or_insert_with(Said::new);
        let due = said
            .get(server)
            .is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(60));
        if due {
            if said.len() >= 256 {
                said.clear();
            }
            said.insert(server.to_string(), std::time::Instant::now());
        }
        due
    });
    if due {
        tracing::warn!(
            %server,
            "matching a resource URI against server \"{server}\"'s resource templates took too \
             long (too many or pathological templates); its templates route nothing more for \
             that request"
        );
    } else {
        tracing::debug!(%server, "resource template matching budget spent");
    }
}

/// Whether `filter` admits `uri` however the server may read it: as written (allow and deny),
/// and no deny matching the form a URL parser or a server makes of it ([`canonical_uri`]);
/// neither with a `.`/`..` segment (which could name, once resolved, what a rule denies).
/// `DEMO://x`, `file:///se\tcrets/k`, `file:///secr%65ts/k` and `file:/secrets/k` are each
/// the URI a deny on its plain spelling names; an allow is met by the URI as listed.
pub(crate) fn admits_every_reading(filter: &mcp_harness_policy::NameFilter, uri: &str) -> bool {
    filter.admits(uri)
        && !has_dot_segment(uri)
        && canonical_uri(uri)
            .is_none_or(|canonical| !filter.denies(&canonical) && !has_dot_segment(&canonical))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mcp_harness_runtime::catalog::{
        ServerCatalog, ServerState, ServerStatus, SnapshotBuilder, TemplateEntry,
    };
    use rmcp::model::ResourceTemplate;

    use super::*;

    fn with_templates(servers: &[(&str, &[&str])]) -> Snapshot {
        let mut b = SnapshotBuilder::new();
        for (server, templates) in servers {
            let templates = templates
                .iter()
                .map(|t| TemplateEntry {
                    server: server.to_string(),
                    template: Arc::new(ResourceTemplate::new(*t, "t")),
                })
                .collect();
            b.server(
                ServerStatus::new(server, "stdio", ServerState::Connected),
                Some(Arc::new(ServerCatalog {
                    templates,
                    ..Default::default()
                })),
            );
        }
        b.build(1)
    }

    /// A read or a completion goes to the server whose template made the URI: the most
    /// specific one that matches, never one whose template only shares a prefix, and never
    /// one whose malformed template would claim everything after its `{`.
    #[test]
    fn a_uri_goes_to_the_server_whose_template_made_it() {
        let snapshot = with_templates(&[
            ("ta", &["res://{id}"]),
            ("tb", &["res://{id}/meta"]),
            ("legit", &["file:///{+path}"]),
            ("zevil", &["file:///home/{"]),
        ]);
        let view = ResourceView::new(&snapshot, Prefix::Server, None);
        assert_eq!(view.owner("res://5"), Some("ta"));
        assert_eq!(view.owner("res://5/meta"), Some("tb"));
        assert_eq!(
            view.owner("res://{id}/meta"),
            Some("tb"),
            "a completion's template"
        );
        assert_eq!(view.owner("res://{id}"), Some("ta"));
        assert_eq!(view.owner("file:///home/user/.ssh/id_rsa"), Some("legit"));
        assert_eq!(view.owner("other://x"), None, "several servers: no guess");
    }

    /// A URI that a URL parser or a server reads as one a rule denies is refused as that one:
    /// another case of its scheme or host, a tab or line break inside, `\\` for `/`, a
    /// percent-escape, a dot segment.
    #[test]
    fn a_uri_spelt_otherwise_is_refused_as_the_one_it_names() {
        use mcp_harness_policy::{NameFilter, PatternKind};
        let deny = |d: &[&str]| {
            NameFilter::new(
                None,
                d.iter().map(|s| s.to_string()).collect(),
                PatternKind::Uri,
            )
            .unwrap()
        };
        let f = deny(&["file:///secrets/**", "demo://resource/static/*"]);
        for uri in [
            "file:///secrets/key",
            "FILE:///secrets/key",
            "file:///secret\ts/key",
            "file:///secrets\t/key",
            "\tfile:///secrets/key",
            "file:///secrets%2Fkey",
            "file:///secr%65ts/key",
            "file:///secrets\\key",
            "file:///secrets%5ckey",
            "file:///secrets%5Ckey",
            "file:///public/..%5csecrets%5ckey",
            "file:///public/.\t./secrets/key",
            "file:///public/%2e%2e/secrets/key",
            "DEMO://resource/static/features.md",
            "demo://RESOURCE/static/features.md",
            "demo://resource/static/feat\nures.md",
            "file:/secrets/key",
            "file:secrets/key",
            "file://localhost/secrets/key",
            "file:////secrets/key",
        ] {
            assert!(!admits_every_reading(&f, uri), "{uri:?} is let through");
        }
        // A deny pattern spelt otherwise names the URI in its canonical spelling too.
        let f2 = deny(&["Demo://Docs/*"]);
        for uri in [
            "demo://docs/x",
            "DEMO://docs/x",
            "Demo://Docs/x",
            "demo://docs/%78",
        ] {
            assert!(!admits_every_reading(&f2, uri), "{uri:?} is let through");
        }
        // An allow is met by the URI as listed: another reading of it is no reason to refuse.
        let allow = NameFilter::new(
            Some(vec!["file:///docs/*".into(), "Demo://Docs/*".into()]),
            Vec::new(),
            PatternKind::Uri,
        )
        .unwrap();
        for uri in [
            "file:///docs/a%2Fb.md",
            "Demo://Docs/readme",
            "file:///docs/plain.md",
        ] {
            assert!(admits_every_reading(&allow, uri), "{uri:?} is refused");
        }
        for uri in [
            "file:///public/key",
            "demo://resource/dynamic/1",
            "file:///public/a%20b",
            "file:///public/100%",
        ] {
            assert!(admits_every_reading(&f, uri), "{uri:?} is refused");
        }
        assert_eq!(
            mcp_harness_policy::uri::canonical_uri("file:///a/b"),
            None,
            "nothing to read otherwise"
        );
    }

    /// "The only server" takes a URI nobody lists only when no other server the client may see
    /// is down or connecting: with the owner down, its URIs must not reach the server that is
    /// up (which never listed them); a connected server without resources is no other owner.
    #[test]
    fn an_unclaimed_uri_goes_to_the_only_server_only_when_no_other_is_configured() {
        let up = |b: &mut SnapshotBuilder| {
            b.server(
                ServerStatus::new("beta", "stdio", ServerState::Connected),
                Some(Arc::new(ServerCatalog {
                    templates: vec![TemplateEntry {
                        server: "beta".into(),
                        template: Arc::new(ResourceTemplate::new("res://{id}", "t")),
                    }],
                    ..Default::default()
                })),
            );
        };
        let mut b = SnapshotBuilder::new();
        up(&mut b);
        let alone = ResourceView::new(&b.build(1), Prefix::Server, None);
        assert_eq!(alone.owner("mem://a"), Some("beta"));
        assert!(alone.route("mem://a").is_some());
        let mut b = SnapshotBuilder::new();
        up(&mut b);
        b.server(
            ServerStatus::new(
                "alpha",
                "stdio",
                ServerState::Failed {
                    error: "gone".into(),
                },
            ),
            None,
        );
        let owner_down = ResourceView::new(&b.build(2), Prefix::Server, None);
        assert_eq!(owner_down.owner("mem://a"), None);
        assert!(owner_down.route("mem://a").is_none());
        assert_eq!(
            owner_down.owner("res://5"),
            Some("beta"),
            "its own template"
        );
        // A connected server without resources is no other owner.
        let mut b = SnapshotBuilder::new();
        up(&mut b);
        b.server(
            ServerStatus::new("tools", "stdio", ServerState::Connected),
            Some(Arc::new(ServerCatalog::default())),
        );
        let with_tools = ResourceView::new(&b.build(3), Prefix::Server, None);
        assert_eq!(with_tools.owner("mem://a"), Some("beta"));
    }

    /// A server listing thousands of pathological templates (adjacent expressions, as
    /// specific as can be) spends its own matching budget, not the others' routing: a URI of
    /// the honest server's template still goes there, and one of nobody's is refused.
    #[test]
    fn pathological_templates_cost_only_their_server() {
        let catalog = |server: &str, templates: Vec<String>| {
            Some(Arc::new(ServerCatalog {
                templates: templates
                    .into_iter()
                    .map(|t| TemplateEntry {
                        server: server.into(),
                        template: Arc::new(ResourceTemplate::new(t, "t")),
                    })
                    .collect(),
                ..Default::default()
            }))
        };
        let hostile = (0..5_000)
            .map(|n| format!("{}{}/{n}", "{+a}".repeat(10), "file:///".repeat(4)))
            .collect();
        let mut b = SnapshotBuilder::new();
        b.server(
            ServerStatus::new("aaa", "stdio", ServerState::Connected),
            catalog("aaa", hostile),
        );
        b.server(
            ServerStatus::new("zz", "stdio", ServerState::Connected),
            catalog("zz", vec!["file:///{+path}".into()]),
        );
        let view = ResourceView::new(&b.build(1), Prefix::Server, None);
        let uri = "file:///home/bob/project/file:///README.md";
        assert_eq!(view.owner(uri), Some("zz"));
        assert!(view.claims(uri));
        assert_eq!(view.route(uri).map(|(s, _)| s), Some("zz".to_string()));
        assert_eq!(view.owner("other://x"), None);
    }

    /// A profile that sees everything but the resources `deny` names.
    fn profile_denying(deny: &[&str]) -> mcp_harness_runtime::ClientProfile {
        use mcp_harness_policy::{NameFilter, PatternKind};
        let all = |kind| NameFilter::new(None, Vec::new(), kind).expect("filter");
        let deny = deny.iter().map(|d| d.to_string()).collect();
        mcp_harness_runtime::ClientProfile {
            name: "p".into(),
            auth: mcp_harness_runtime::ProfileAuth::Bearer {
                token_env: "T".into(),
            },
            servers: all(PatternKind::Server),
            tools: all(PatternKind::Name),
            prompts: all(PatternKind::Name),
            resources: NameFilter::new(None, deny, PatternKind::Uri).expect("filter"),
            permissions: Default::default(),
            max_sessions: None,
        }
    }

    /// A resource a profile may not read is not listed to it either, whatever its spelling.
    #[test]
    fn a_resource_denied_in_any_spelling_is_not_listed() {
        use mcp_harness_runtime::catalog::ResourceEntry;
        let profile = profile_denying(&["secret://**"]);
        let mut b = SnapshotBuilder::new();
        b.server(
            ServerStatus::new("alpha", "stdio", ServerState::Connected),
            Some(Arc::new(ServerCatalog {
                resources: ["SECRET://a/upper", "Secret://a/x", "open://a"]
                    .iter()
                    .map(|uri| ResourceEntry {
                        server: "alpha".into(),
                        resource: Arc::new(rmcp::model::Resource::new(*uri, "r")),
                    })
                    .collect(),
                templates: vec![TemplateEntry {
                    server: "alpha".into(),
                    template: Arc::new(ResourceTemplate::new("SECRET://{id}/up", "t")),
                }],
                ..Default::default()
            })),
        );
        let view = ResourceView::new(&b.build(1), Prefix::Server, Some(&profile));
        let listed: Vec<&str> = view.resources.iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(listed, ["open://a"]);
        assert!(view.templates.is_empty(), "{:?}", view.templates);
    }

    /// A template hidden by its pattern hides what it expands to: neither another, less
    /// specific template nor the one-server fallback serves it; a listed resource and a more
    /// specific visible template still do.
    #[test]
    fn a_hidden_templates_expansions_are_hidden_too() {
        use mcp_harness_runtime::catalog::ResourceEntry;
        let profile = profile_denying(&["files://{path}"]);
        let templates = |server: &str, patterns: &[&str]| {
            patterns
                .iter()
                .map(|t| TemplateEntry {
                    server: server.into(),
                    template: Arc::new(ResourceTemplate::new(*t, "t")),
                })
                .collect()
        };
        let snapshot = |with_beta: bool| {
            let mut b = SnapshotBuilder::new();
            b.server(
                ServerStatus::new("alpha", "stdio", ServerState::Connected),
                Some(Arc::new(ServerCatalog {
                    resources: vec![ResourceEntry {
                        server: "alpha".into(),
                        resource: Arc::new(rmcp::model::Resource::new("files://readme", "r")),
                    }],
                    templates: templates("alpha", &["files://{path}"]),
                    ..Default::default()
                })),
            );
            if with_beta {
                b.server(
                    ServerStatus::new("beta", "stdio", ServerState::Connected),
                    Some(Arc::new(ServerCatalog {
                        templates: templates("beta", &["{+any}", "files://public/{name}"]),
                        ..Default::default()
                    })),
                );
            }
            b.build(1)
        };
        let alone = ResourceView::new(&snapshot(false), Prefix::Server, Some(&profile));
        assert!(alone.templates.is_empty());
        assert_eq!(alone.owner("files://etc"), None, "the one-server fallback");
        assert_eq!(alone.route("files://etc"), None);
        assert!(!alone.claims("files://etc"));
        assert_eq!(alone.owner("files://readme"), Some("alpha"), "listed");
        // A URI too long to match within the budget is hidden all the same (fail closed).
        let long = format!("files://{}", "e".repeat(1 << 20));
        assert_eq!(alone.owner(&long), None, "a long URI");
        assert_eq!(alone.route(&long), None, "a long URI");
        // What the hidden template does not match as written may still be its expansion to
        // the server (`FILES://etc`, `files://etc?x`): nothing unclaimed goes to the one server
        // while a template is hidden.
        for uri in ["FILES://etc", "files://etc?x", "files://etc#x", "other://x"] {
            assert_eq!(alone.owner(uri), None, "{uri}");
            assert_eq!(alone.route(uri), None, "{uri}");
        }
        let two = ResourceView::new(&snapshot(true), Prefix::Server, Some(&profile));
        assert_eq!(two.owner("files://etc"), None, "a less specific template");
        assert_eq!(two.route("files://etc"), None);
        assert!(!two.claims("files://etc"));
        assert_eq!(two.owner("files://public/x"), Some("beta"), "more specific");
        assert_eq!(two.owner("other://x"), Some("beta"));
        // A glob that happens to match the pattern's text names no template: the template is
        // not listed, and each URI is judged as it is (`files://*` stays in one segment).
        let glob = profile_denying(&["files://*"]);
        let alone = ResourceView::new(&snapshot(false), Prefix::Server, Some(&glob));
        assert!(alone.templates.is_empty());
        assert_eq!(
            alone.owner("files://etc"),
            None,
            "denied by the glob itself"
        );
        assert_eq!(alone.owner("files://public/a"), Some("alpha"));
        // Without the profile, the template is alpha's again.
        let open = ResourceView::new(&snapshot(true), Prefix::Server, None);
        assert_eq!(open.owner("files://etc"), Some("alpha"));
    }

    /// A skill listed under another scheme than `skill://` is read from the server that listed
    /// it, though no resource listing names its file.
    #[test]
    fn a_skill_file_of_another_scheme_routes_to_its_server() {
        use rmcp::model::{Skill, SkillFrontmatter, SkillResource, SkillResources};
        let uri = "file:///x/other-scheme/SKILL.md";
        let skill = Skill::new(
            uri,
            SkillFrontmatter::new("other-scheme", "A skill under file://"),
            SkillResources::Files(vec![SkillResource::from_bytes(uri, b"---\n---\n")]),
        );
        let (skills, invalid) =
            mcp_harness_runtime::catalog::skills::entries_from_listing("sk", vec![skill]);
        assert!(invalid.is_empty(), "{invalid:?}");
        let mut b = SnapshotBuilder::new();
        for (server, skills) in [("sk", skills), ("zz", Vec::new())] {
            b.server(
                ServerStatus::new(server, "stdio", ServerState::Connected),
                Some(Arc::new(ServerCatalog {
                    skills: skills.into_iter().map(Arc::new).collect(),
                    templates: vec![TemplateEntry {
                        server: server.to_string(),
                        template: Arc::new(ResourceTemplate::new(
                            format!("{server}://{{id}}"),
                            "t",
                        )),
                    }],
                    ..Default::default()
                })),
            );
        }
        let view = ResourceView::new(&b.build(1), Prefix::Server, None);
        assert_eq!(view.owner(uri), Some("sk"));
    }
}
