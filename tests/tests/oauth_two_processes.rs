//! Two harness processes sharing one token store refresh safely (issue 6): both hold the same
//! stored tokens for one OAuth-protected server, the access token expires, both call a tool at
//! the same moment, and exactly one refresh reaches the authorization server. The other process
//! waits on the store's lock and then uses the rotated tokens from the file; it neither spends
//! the old refresh token (the authorization server here is strict: a refresh token is good once,
//! a spent one gets `invalid_grant`) nor the new one (a second refresh).
//!
//! The second process is this test binary run again with only [`child_process_role`] selected
//! and [`CHILD_ENV`] set; without that variable the role is a no-op. The two processes meet at
//! barriers kept by the test's server (nothing waits on a clock to line them up), every wait is
//! bounded, everything listens on 127.0.0.1, and the child is killed if it is still running when
//! the test ends.
//!
//! Expiry is made to happen between two barriers instead of by waiting: the authorization server
//! stops accepting the access token and the test moves the stored `token_received_at` back by
//! two lifetimes, exactly what the clock does to a token (rmcp reads it from the store on every
//! request). To make sure the refreshes really overlap, the authorization server holds its
//! answer to the first refresh until it sees the other process blocked on the store's lock (in
//! `/proc/locks`) or a second refresh request, whichever comes first.

mod common;

use common::auth_server::{AuthOptions, AuthServer};

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::routing::post;
use mcp_harness_runtime::Runtime;
use mcp_harness_runtime::transport::auth;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Set (to the server's base URL) in the child process: it plays the second harness.
const CHILD_ENV: &str = "MCP_HARNESS_OAUTH_TWO_PROCESSES_CHILD";
/// The token store directory, in the child.
const CHILD_DIR_ENV: &str = "MCP_HARNESS_OAUTH_TWO_PROCESSES_DIR";
/// The name of the child's test, run with `--exact`.
const CHILD_TEST: &str = "child_process_role";

/// Lifetime of issued access tokens: long, so no refresh happens before the test expires the
/// token itself.
const TOKEN_SECS: u64 = 3600;
/// Concurrent tool calls per process after expiry.
const CALLS: usize = 4;
/// Bound of every wait of this test (barriers, connecting, the child's exit).
const WAIT: Duration = Duration::from_secs(60);

/// What this test keeps beside the authorization server's own record.
#[derive(Default)]
struct Meeting {
    /// The token store directory (its `*.lock` files are looked up in `/proc/locks`).
    store_dir: PathBuf,
    /// What ended the hold of the first refresh: ("lock", holder pid, waiter pid) or
    /// ("second refresh", 0, 0).
    contention: Option<(&'static str, u32, u32)>,
    /// Barrier name → who arrived.
    barriers: HashMap<String, HashSet<String>>,
    /// The child's report: its calls' outcomes.
    reports: Vec<String>,
}

/// The test's side of the meeting: its record, and a signal for every arrival.
#[derive(Clone)]
struct AppState {
    meeting: Arc<Mutex<Meeting>>,
    changed: Arc<tokio::sync::watch::Sender<u64>>,
}

/// Inodes of the store's lock files.
fn lock_inodes(dir: &Path) -> HashSet<u64> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".lock"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.ino())
                .collect()
        })
        .unwrap_or_default()
}

/// (holder pid, waiter pid) of an flock on one of the store's lock files that someone is
/// blocked on, from `/proc/locks` (`1: FLOCK ADVISORY WRITE <pid> <maj:min:inode> 0 EOF`, and
/// `1: -> FLOCK ...` for a waiter).
fn lock_contention(dir: &Path) -> Option<(u32, u32)> {
    let inodes = lock_inodes(dir);
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let mut holders = HashMap::new();
    let mut waiters = Vec::new();
    for line in locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (waiting, rest) = match fields.get(1) {
            Some(&"->") => (true, &fields[2..]),
            Some(_) => (false, &fields[1..]),
            None => continue,
        };
        // FLOCK ADVISORY WRITE pid dev:inode start end
        if rest.len() < 5 || rest[0] != "FLOCK" {
            continue;
        }
        let Ok(pid) = rest[3].parse::<u32>() else {
            continue;
        };
        let Some(inode) = rest[4]
            .rsplit(':')
            .next()
            .and_then(|i| i.parse::<u64>().ok())
        else {
            continue;
        };
        if !inodes.contains(&inode) {
            continue;
        }
        if waiting {
            waiters.push((inode, pid));
        } else {
            holders.insert(inode, pid);
        }
    }
    waiters
        .into_iter()
        .find_map(|(inode, waiter)| holders.get(&inode).map(|holder| (*holder, waiter)))
}

/// Holds the first refresh's answer until the other process is seen contending: blocked on
/// the store's lock, or (without the lock) refreshing too. Bounded: without either, the test
/// fails on `contention`.
async fn hold_until_contention(server: AuthServer, meeting: Arc<Mutex<Meeting>>) {
    let mut changed = server.changed.subscribe();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let dir = {
            let mut m = meeting.lock().unwrap();
            if m.contention.is_none() && server.state().refresh_requests >= 2 {
                m.contention = Some(("second refresh", 0, 0));
            }
            if m.contention.is_some() {
                break;
            }
            m.store_dir.clone()
        };
        if let Some((holder, waiter)) = lock_contention(&dir) {
            meeting.lock().unwrap().contention = Some(("lock", holder, waiter));
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        // A second refresh request wakes this at once; the lock table is polled.
        let _ = tokio::time::timeout(Duration::from_millis(20), changed.changed()).await;
    }
}

/// Records `who` at barrier `name` and waits (bounded) until both processes are there.
async fn arrive(app: &AppState, name: &str, who: &str) -> bool {
    let mut changed = app.changed.subscribe();
    {
        let mut st = app.meeting.lock().unwrap();
        st.barriers
            .entry(name.to_string())
            .or_default()
            .insert(who.to_string());
    }
    app.changed.send_modify(|n| *n += 1);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if app.meeting.lock().unwrap().barriers[name].len() >= 2 {
            return true;
        }
        match tokio::time::timeout_at(deadline, changed.changed()).await {
            Ok(Ok(())) => {}
            _ => return false,
        }
    }
}

/// The authorization server (code grant, refresh with rotation, long-lived tokens) holding
/// its first refresh until contention, with the test's barrier and report routes beside it.
async fn start_server(store_dir: PathBuf) -> (AuthServer, AppState) {
    let app = AppState {
        meeting: Arc::new(Mutex::new(Meeting {
            store_dir,
            ..Default::default()
        })),
        changed: Arc::new(tokio::sync::watch::channel(0).0),
    };
    let meeting = app.meeting.clone();
    let options = AuthOptions {
        hold_first_refresh: Some(Arc::new(move |server| {
            Box::pin(hold_until_contention(server, meeting.clone()))
        })),
        ..AuthOptions::authorization_code(true, TOKEN_SECS)
    };
    let extra = axum::Router::new()
        .route(
            "/barrier/{name}",
            post(
                |State(app): State<AppState>, UrlPath(name): UrlPath<String>, who: String| async move {
                    if arrive(&app, &name, &who).await {
                        StatusCode::OK
                    } else {
                        StatusCode::GATEWAY_TIMEOUT
                    }
                },
            ),
        )
        .route(
            "/report",
            post(|State(app): State<AppState>, body: String| async move {
                app.meeting.lock().unwrap().reports.push(body);
                StatusCode::OK
            }),
        )
        .with_state(app.clone());
    (AuthServer::start_with(options, extra).await, app)
}

/// A POST on the test's server with a plain HTTP/1.1 client (loopback, bounded); the status.
async fn post_plain(base: &str, path: &str, body: &str) -> u16 {
    let addr = base.trim_start_matches("http://").to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(&addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(WAIT + Duration::from_secs(5), exchange)
        .await
        .expect("the test server answers")
        .expect("the test server answers");
    let response = String::from_utf8_lossy(&response);
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Waits (bounded) until `secure` is connected with its catalog.
async fn connected(runtime: &Runtime) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let s = runtime.snapshot();
        // The server shows in the snapshot once the runtime has started it.
        let state = s.servers.get("secure").map(|s| s.state.label());
        if state == Some("connected")
            && s.catalogs
                .get("secure")
                .is_some_and(|c| !c.tools.is_empty())
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server never connected: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `CALLS` concurrent calls of `echo`; the failures, as text.
async fn call_concurrently(runtime: &Runtime, who: &str) -> Vec<String> {
    let name = mcp_harness_catalog::qualify("secure", "echo");
    let calls = (0..CALLS).map(|i| {
        let name = name.clone();
        async move {
            let message = format!("{who}-{i}");
            match runtime
                .call_tool(&name, json!({"message": message}).as_object().cloned())
                .await
            {
                Ok(r) if !r.is_error() && common::text(&r).contains(&message) => None,
                Ok(r) => Some(format!("{message}: tool error: {}", common::text(&r))),
                Err(e) => Some(format!("{message}: {e}")),
            }
        }
    });
    futures::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The child process, killed (and reaped) if still running when dropped.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The second harness process: this binary, running only [`child_process_role`].
fn spawn_child(base: &str, dir: &Path) -> ChildGuard {
    let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, base)
        .env(CHILD_DIR_ENV, dir)
        .stdin(std::process::Stdio::null());
    // SAFETY: prctl only, between fork and exec. The child dies with the thread that spawned it
    // (this test's thread) even if the test process is killed before the guard runs.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    ChildGuard(command.spawn().expect("the child process starts"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_sharing_the_store_refresh_once() {
    let dir = mcp_harness_fixture::scratch::dir("oauth-2p-test").join("tokens");
    let ctx = auth::AuthContext::in_dir(dir.clone());
    let (server, app) = start_server(dir.clone()).await;
    let (base, url) = (server.base.clone(), server.url());

    // One login: the tokens both processes share.
    let settings = auth::OAuthSettings {
        redirect_uri: "http://127.0.0.1:33418/callback".into(),
        ..Default::default()
    };
    let store = ctx.store("secure", &url);
    auth::login(&ctx, "secure", &url, &settings, &auth::NoFollowBrowser)
        .await
        .expect("login succeeds");

    let mut child = spawn_child(&base, &dir);
    let child_pid = child.0.id();
    let runtime = common::auth_server::start_with_auth(
        vec![common::server("secure", common::http(&url))],
        &ctx,
    );
    connected(&runtime).await;
    assert!(
        arrive(&app, "connected", "parent").await,
        "the child never connected (see its output above)"
    );

    // Both are connected with the tokens of the login. Now the access token expires: the
    // authorization server no longer accepts it, and for the clients its lifetime is over (they
    // read `token_received_at` from the store on every request).
    {
        let mut st = server.state();
        assert_eq!(st.refresh_requests, 0, "no refresh before expiry");
        st.access.clear();
    }
    store
        .update(|f| {
            let creds = f.credentials.as_mut().expect("stored credentials");
            let at = creds.token_received_at.expect("token_received_at");
            creds.token_received_at = Some(at - 2 * TOKEN_SECS);
        })
        .expect("store updated");

    // Both processes call at the same moment.
    assert!(
        arrive(&app, "go", "parent").await,
        "the child never came to `go`"
    );
    let failures = call_concurrently(&runtime, "parent").await;

    // The child reports its calls and exits (bounded; the guard kills it otherwise).
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("child status") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    runtime.shutdown().await;

    assert!(failures.is_empty(), "this process's calls: {failures:?}");
    let st = server.state();
    let meeting = app.meeting.lock().unwrap();
    assert_eq!(
        meeting.reports,
        vec!["ok".to_string()],
        "the child's calls (child exit: {status})"
    );
    assert!(status.success(), "child exit: {status}");
    assert_eq!(st.invalid_grants, 0, "a spent refresh token was presented");
    assert_eq!(
        st.refresh_requests, 1,
        "exactly one refresh reaches the authorization server (contention seen: {:?})",
        meeting.contention
    );
    // The overlap really happened: the other process was blocked on the store's lock while the
    // refresh was in flight.
    let Some((what, holder, waiter)) = meeting.contention else {
        panic!("the processes never contended for the refresh");
    };
    assert_eq!(what, "lock", "contention seen as {what}");
    let pids = [std::process::id(), child_pid];
    assert!(
        holder != waiter && pids.contains(&holder) && pids.contains(&waiter),
        "lock held by {holder}, waited on by {waiter}; processes {pids:?}"
    );

    // The file ends with the newest rotated refresh token, and the spent one is gone.
    let newest = st.issued_refresh.last().cloned().expect("issued");
    assert_eq!(newest, "rt-2-secret");
    let text = std::fs::read_to_string(store.path()).expect("token file");
    assert!(text.contains(&newest), "rotated refresh token kept");
    assert!(!text.contains("rt-1-secret"), "spent refresh token dropped");
    drop((st, meeting));
}

/// The second process of [`two_processes_sharing_the_store_refresh_once`]; a no-op unless run
/// by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn child_process_role() {
    let Some(base) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let base = base.to_string_lossy().into_owned();
    let dir = PathBuf::from(std::env::var_os(CHILD_DIR_ENV).expect("store dir"));
    let ctx = auth::AuthContext::in_dir(dir);
    let url = format!("{base}/mcp");
    let runtime = common::auth_server::start_with_auth(
        vec![common::server("secure", common::http(&url))],
        &ctx,
    );
    connected(&runtime).await;
    assert_eq!(post_plain(&base, "/barrier/connected", "child").await, 200);
    assert_eq!(post_plain(&base, "/barrier/go", "child").await, 200);
    let failures = call_concurrently(&runtime, "child").await;
    let report = if failures.is_empty() {
        "ok".to_string()
    } else {
        failures.join("\n")
    };
    assert_eq!(post_plain(&base, "/report", &report).await, 200);
    runtime.shutdown().await;
    assert!(failures.is_empty(), "{failures:?}");
}
