//! The task ids the gateway hands its clients for tasks its upstreams run (SEP-2663
//! pass-through): each one carries, encrypted and authenticated (AES-256-GCM under the session
//! keys), the server that owns the task and that server's own id, and is bound to the client
//! that created it.
//!
//! Invariants:
//! - a later `tasks/*` request is routed from its id alone, with no table to lose or share:
//!   any replica holding the same keys opens it (a gateway without configured keys uses one
//!   made at start, so its ids open only there);
//! - the client's identity ([`Owner`]) is authenticated with the id, never stored in it: an
//!   id opened for another client fails exactly as a forged, truncated or unknown one does, so
//!   no client learns anything about another's tasks;
//! - an upstream id never reaches a client, and a client's id never reaches an upstream;
//! - a SEP-1686 task (MCP 2025-11-25, [`TaskKind::Augmented`]) gets an id of its own kind:
//!   sealed under other additional data and marked with [`AUGMENTED_PREFIX`], so it opens
//!   only as that kind (a SEP-2663 request about it, or the reverse, finds no task) and the
//!   gateway's front can tell which protocol a `tasks/get` or `tasks/cancel` speaks from the
//!   id alone;
//! - the one table kept ([`Routes`], for SEP-1686 status notifications only) serves no
//!   request: it says which live session a status notification goes to, is bounded by
//!   [`MAX_ROUTES`], and losing it costs notifications, never a task.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use mcp_harness_runtime::catalog::{ServerState, Snapshot};

use crate::sealed::SessionKeys;
use crate::sync::lock;

/// The most SEP-1686 tasks whose status notifications are routed at once; past it the oldest
/// route is forgotten (its task's later notifications are not forwarded; polling still works).
pub(crate) const MAX_ROUTES: usize = 4096;

/// Authenticated with every task id (followed by the owner): a token sealed for another
/// purpose under the same key, a session id say, does not open as a task id.
const AAD: &[u8] = b"mcp-harness task id v1\n";

/// Authenticated with every SEP-1686 task id instead of [`AAD`].
const AAD_AUGMENTED: &[u8] = b"mcp-harness sep-1686 task id v1\n";

/// How a SEP-1686 task id starts (a character outside the sealed token's base64url alphabet
/// ends it, so no SEP-2663 id has it).
pub(crate) const AUGMENTED_PREFIX: &str = "t1686.";

/// Which task protocol an id belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskKind {
    /// The tasks extension (SEP-2663).
    Extension,
    /// Task-augmented requests of MCP 2025-11-25 (SEP-1686).
    Augmented,
}

/// Who a task belongs to: the client's profile (when it proved one) and its session (when it
/// has one). Clients with neither — unauthenticated requests without a session, or the one
/// stdio client — are one client to the gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) profile: Option<String>,
    pub(crate) session: Option<String>,
}

impl Owner {
    /// The additional data a task id of this kind and owner is sealed with.
    fn aad(&self, kind: TaskKind) -> Vec<u8> {
        let mut aad = match kind {
            TaskKind::Extension => AAD.to_vec(),
            TaskKind::Augmented => AAD_AUGMENTED.to_vec(),
        };
        for part in [&self.profile, &self.session] {
            match part {
                // Length-prefixed, so no two owners give the same bytes.
                Some(text) => {
                    aad.extend_from_slice(format!("{}:", text.len()).as_bytes());
                    aad.extend_from_slice(text.as_bytes());
                }
                None => aad.push(b'-'),
            }
            aad.push(b'\n');
        }
        aad
    }
}

/// An upstream task: the server that runs it, its id there, and the tool it runs (raw name;
/// absent from ids sealed before it was kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UpstreamTask {
    #[serde(rename = "s")]
    pub(crate) server: String,
    #[serde(rename = "t")]
    pub(crate) task_id: String,
    #[serde(rename = "n", default, skip_serializing_if = "Option::is_none")]
    pub(crate) tool: Option<String>,
    /// The connection that made it, for a server whose tasks end with its connection (a stdio
    /// server's process): [`generation`] when the task was created. A task of an earlier
    /// connection is gone, and its id may name another client's task on the new one.
    #[serde(rename = "g", default, skip_serializing_if = "Option::is_none")]
    pub(crate) generation: Option<u64>,
}

/// Which connection of `server` is up in `snapshot`, for a server whose tasks end with its
/// connection (stdio: the process; in-process: the handler); `None` for another (a remote server's tasks may outlive a
/// connection) and for one not connected.
pub(crate) fn generation(snapshot: &Snapshot, server: &str) -> Option<u64> {
    let status = snapshot.servers.get(server)?;
    // A stdio server's process and an in-process server's handler end with the connection.
    if !matches!(status.transport.as_str(), "stdio" | "in-process")
        || status.state != ServerState::Connected
    {
        return None;
    }
    // When it connected: the connected state lasts as long as the connection.
    let since = status.since.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
}

impl UpstreamTask {
    /// Whether the connection that made the task is gone (the task with it).
    pub(crate) fn outlived(&self, snapshot: &Snapshot) -> bool {
        self.generation
            .is_some_and(|made| Some(made) != generation(snapshot, &self.server))
    }

    /// The error for a client's task whose connection is gone.
    pub(crate) fn gone(&self) -> rmcp::ErrorData {
        rmcp::ErrorData::invalid_params(
            format!(
                "the task is gone: server \"{}\" restarted (or is not connected) since the task \
                 was created, and a stdio server's tasks end with its process; call the tool again",
                self.server
            ),
            None,
        )
    }
}

/// Seals and opens task ids (see the module doc).
#[derive(Default)]
pub(crate) struct TaskIds {
    keys: OnceLock<Arc<SessionKeys>>,
    /// Where the status notifications of SEP-1686 tasks go.
    pub(crate) routes: Routes,
}

/// Where a task's status notifications go: the gateway session that created it, under the id
/// that session was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// The gateway's own number of the session (not the client's session id).
    pub(crate) session: u64,
    /// The sealed id the session holds for the task.
    pub(crate) id: String,
}

/// The SEP-1686 tasks handed out and still running, (server, upstream id) → [`Route`].
///
/// Invariants: at most [`MAX_ROUTES`] entries (the oldest goes first); an entry leaves when
/// its task's terminal status is routed, when its session ends ([`Routes::forget_session`]),
/// or when it is the oldest past the cap; a lookup never creates one.
#[derive(Default)]
pub(crate) struct Routes {
    inner: Mutex<RouteTable>,
    /// Told after each [`Routes::insert`]: the forwarder then sends what it held for the task.
    pub(crate) inserted: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct RouteTable {
    /// (server, upstream id) → (insertion number, route, the task's
    /// [`UpstreamTask::generation`]: a status from a later connection of the server is another
    /// task's, whatever its id).
    by_task: HashMap<(String, String), (u64, Route, Option<u64>)>,
    /// Insertion number → key, oldest first.
    order: BTreeMap<u64, (String, String)>,
    next: u64,
    /// Session → how many routes go to it: a session that ended holding none (every stateless
    /// request's) is forgotten without a scan of the table.
    per_session: HashMap<u64, usize>,
}

impl RouteTable {
    fn remove(&mut self, key: &(String, String)) -> Option<Route> {
        let (seq, route, _) = self.by_task.remove(key)?;
        self.order.remove(&seq);
        self.uncount(route.session);
        Some(route)
    }

    /// Forgets the route of `key` when it is a task of another connection than `now`.
    fn forget_outlived(&mut self, key: &(String, String), now: Option<u64>) {
        let outlived = self
            .by_task
            .get(key)
            .is_some_and(|(_, _, made)| made.is_some_and(|made| Some(made) != now));
        if outlived {
            self.remove(key);
        }
    }

    fn uncount(&mut self, session: u64) {
        if let std::collections::hash_map::Entry::Occupied(mut held) =
            self.per_session.entry(session)
        {
            *held.get_mut() -= 1;
            if *held.get() == 0 {
                held.remove();
            }
        }
    }
}

impl Routes {
    /// Routes `task`'s status notifications to `route` (replacing an earlier route of it).
    pub(crate) fn insert(&self, task: &UpstreamTask, route: Route) {
        let key = (task.server.clone(), task.task_id.clone());
        let mut table = lock(&self.inner);
        table.remove(&key);
        while table.by_task.len() >= MAX_ROUTES {
            let Some((_, oldest)) = table.order.pop_first() else {
                break;
            };
            if let Some((_, evicted, _)) = table.by_task.remove(&oldest) {
                table.uncount(evicted.session);
            }
        }
        let seq = table.next;
        table.next += 1;
        table.order.insert(seq, key.clone());
        *table.per_session.entry(route.session).or_default() += 1;
        table.by_task.insert(key, (seq, route, task.generation));
        drop(table);
        self.inserted.notify_one();
    }

    /// Whether task `task_id` on `server`'s connection `now` ([`generation`]) has a route; a
    /// route of an earlier connection's task of that id is forgotten.
    pub(crate) fn has(&self, server: &str, task_id: &str, now: Option<u64>) -> bool {
        let key = (server.to_string(), task_id.to_string());
        let mut table = lock(&self.inner);
        table.forget_outlived(&key, now);
        table.by_task.contains_key(&key)
    }

    /// Where a status of task `task_id` on `server`'s connection `now` goes; `terminal`: the
    /// task ended, so the route is forgotten as it is given.
    pub(crate) fn route(
        &self,
        server: &str,
        task_id: &str,
        terminal: bool,
        now: Option<u64>,
    ) -> Option<Route> {
        let key = (server.to_string(), task_id.to_string());
        let mut table = lock(&self.inner);
        table.forget_outlived(&key, now);
        if terminal {
            table.remove(&key)
        } else {
            table.by_task.get(&key).map(|(_, route, _)| route.clone())
        }
    }

    /// Forgets every route to `session` (it ended).
    pub(crate) fn forget_session(&self, session: u64) {
        let mut table = lock(&self.inner);
        if !table.per_session.contains_key(&session) {
            return;
        }
        let gone: Vec<_> = table
            .by_task
            .iter()
            .filter(|(_, (_, route, _))| route.session == session)
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            table.remove(&key);
        }
    }

    /// How many routes are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.inner).by_task.len()
    }
}

impl TaskIds {
    /// Seals with `keys` from now on (the HTTP gateway's session keys, so replicas sharing
    /// sessions share tasks too); without a call, a key made on first use. Keys once in use
    /// stay.
    pub(crate) fn use_keys(&self, keys: Arc<SessionKeys>) {
        let _ = self.keys.set(keys);
    }

    fn keys(&self) -> &SessionKeys {
        self.keys.get_or_init(|| Arc::new(SessionKeys::generate()))
    }

    /// The id `owner` sees for `task`.
    pub(crate) fn issue(&self, task: &UpstreamTask, owner: &Owner) -> String {
        self.issue_kind(TaskKind::Extension, task, owner)
    }

    /// The id `owner` sees for `task` of protocol `kind`.
    pub(crate) fn issue_kind(&self, kind: TaskKind, task: &UpstreamTask, owner: &Owner) -> String {
        let data = serde_json::to_vec(task).expect("an upstream task always serialises");
        let sealed = self.keys().seal_bytes(&owner.aad(kind), data);
        match kind {
            TaskKind::Extension => sealed,
            TaskKind::Augmented => format!("{AUGMENTED_PREFIX}{sealed}"),
        }
    }

    /// The upstream task behind `id` when `owner` was given it; `None` for anything else
    /// (malformed, forged, sealed for another client or under a key no longer configured).
    pub(crate) fn open(&self, id: &str, owner: &Owner) -> Option<UpstreamTask> {
        self.open_kind(TaskKind::Extension, id, owner)
    }

    /// As [`Self::open`], for an id of protocol `kind`.
    pub(crate) fn open_kind(
        &self,
        kind: TaskKind,
        id: &str,
        owner: &Owner,
    ) -> Option<UpstreamTask> {
        let sealed = match kind {
            TaskKind::Extension => id,
            TaskKind::Augmented => id.strip_prefix(AUGMENTED_PREFIX)?,
        };
        let plain = self.keys().open_bytes(&owner.aad(kind), sealed).ok()?;
        serde_json::from_slice(&plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(profile: Option<&str>, session: Option<&str>) -> Owner {
        Owner {
            profile: profile.map(str::to_string),
            session: session.map(str::to_string),
        }
    }

    #[test]
    fn an_id_opens_for_its_owner_only() {
        let ids = TaskIds::default();
        let task = UpstreamTask {
            server: "fx".into(),
            task_id: "abc-123".into(),
            tool: Some("slow".into()),
            generation: None,
        };
        let alice = owner(Some("alice"), Some("s1"));
        let id = ids.issue(&task, &alice);
        assert!(!id.contains("abc-123"), "the upstream id is not readable");
        assert_eq!(ids.open(&id, &alice), Some(task));
        for other in [
            owner(Some("bob"), Some("s1")),
            owner(Some("alice"), Some("s2")),
            owner(Some("alice"), None),
            owner(None, None),
            // The length prefix keeps a shifted boundary from matching.
            owner(Some("alice\n5:s1"), None),
        ] {
            assert_eq!(ids.open(&id, &other), None, "{other:?}");
        }
        assert_eq!(
            ids.open("tasks-conformance-nonexistent-12345", &alice),
            None
        );
        assert_eq!(ids.open(&id[..id.len() - 2], &alice), None);
    }

    #[test]
    fn an_id_opens_as_its_own_kind_only() {
        let ids = TaskIds::default();
        let task = UpstreamTask {
            server: "everything".into(),
            task_id: "t-1".into(),
            tool: None,
            generation: None,
        };
        let alice = owner(Some("alice"), Some("s1"));
        let augmented = ids.issue_kind(TaskKind::Augmented, &task, &alice);
        assert!(augmented.starts_with(AUGMENTED_PREFIX), "{augmented}");
        assert_eq!(
            ids.open_kind(TaskKind::Augmented, &augmented, &alice),
            Some(task.clone())
        );
        assert_eq!(ids.open(&augmented, &alice), None);
        let stripped = &augmented[AUGMENTED_PREFIX.len()..];
        assert_eq!(
            ids.open(stripped, &alice),
            None,
            "sealed for the other kind"
        );
        let extension = ids.issue(&task, &alice);
        let disguised = format!("{AUGMENTED_PREFIX}{extension}");
        assert_eq!(ids.open_kind(TaskKind::Augmented, &disguised, &alice), None);
        let bob = owner(Some("bob"), Some("s1"));
        assert_eq!(ids.open_kind(TaskKind::Augmented, &augmented, &bob), None);
    }

    #[test]
    fn an_id_opens_on_another_gateway_with_the_same_keys() {
        const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let one = TaskIds::default();
        one.use_keys(Arc::new(SessionKeys::parse(KEY).expect("key")));
        let two = TaskIds::default();
        two.use_keys(Arc::new(SessionKeys::parse(KEY).expect("key")));
        let task = UpstreamTask {
            server: "fx".into(),
            task_id: "t".into(),
            tool: None,
            generation: None,
        };
        let id = one.issue(&task, &Owner::default());
        assert_eq!(two.open(&id, &Owner::default()), Some(task));
        assert_eq!(TaskIds::default().open(&id, &Owner::default()), None);
    }

    /// A route of a task made on an earlier connection (a stdio server restarted, numbering
    /// its tasks afresh) routes no status of the new connection's task of that id.
    #[test]
    fn a_route_of_an_earlier_connection_is_forgotten() {
        let routes = Routes::default();
        let task = UpstreamTask {
            server: "up".into(),
            task_id: "T1".into(),
            tool: None,
            generation: Some(7),
        };
        let route = Route {
            session: 1,
            id: "sealed".into(),
        };
        routes.insert(&task, route.clone());
        assert!(routes.has("up", "T1", Some(7)));
        assert_eq!(routes.route("up", "T1", false, Some(7)), Some(route));
        assert!(!routes.has("up", "T1", Some(8)), "another connection's T1");
        assert_eq!(routes.route("up", "T1", false, Some(7)), None, "forgotten");
        assert!(lock(&routes.inner).per_session.is_empty());
    }

    #[test]
    fn routes_are_bounded_and_leave_with_their_task_or_session() {
        let routes = Routes::default();
        let task = |n: usize| UpstreamTask {
            server: "ev".into(),
            task_id: format!("t{n}"),
            tool: None,
            generation: None,
        };
        let to = |session: u64, n: usize| Route {
            session,
            id: format!("sealed-{n}"),
        };
        routes.insert(&task(0), to(1, 0));
        routes.insert(&task(1), to(2, 1));
        assert_eq!(routes.route("ev", "t0", false, None), Some(to(1, 0)));
        assert_eq!(routes.route("other", "t0", false, None), None);
        assert_eq!(routes.route("ev", "t0", true, None), Some(to(1, 0)));
        assert_eq!(
            routes.route("ev", "t0", false, None),
            None,
            "gone once terminal"
        );
        routes.forget_session(2);
        assert_eq!(
            routes.route("ev", "t1", false, None),
            None,
            "gone with its session"
        );
        for n in 0..MAX_ROUTES + 10 {
            routes.insert(&task(n), to(3, n));
        }
        assert_eq!(routes.len(), MAX_ROUTES);
        assert_eq!(
            routes.route("ev", "t9", false, None),
            None,
            "the oldest went first"
        );
        assert_eq!(routes.route("ev", "t10", false, None), Some(to(3, 10)));
        routes.insert(&task(10), to(4, 10));
        assert_eq!(
            routes.len(),
            MAX_ROUTES,
            "a task routed again is not counted twice"
        );
        assert_eq!(routes.route("ev", "t10", false, None), Some(to(4, 10)));
        routes.forget_session(3);
        assert_eq!(routes.len(), 1, "session 3's routes went with it, not 4's");
        routes.forget_session(4);
        assert_eq!(routes.len(), 0);
        assert!(
            lock(&routes.inner).per_session.is_empty(),
            "no count outlives its routes"
        );
    }
}
