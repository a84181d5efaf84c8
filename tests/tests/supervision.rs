//! Supervision (R5, R7): a remote server that goes away is noticed (even though rmcp keeps a
//! dead HTTP session open), reconnected with backoff while its tools are withdrawn, and failed
//! after the attempts run out; connection queues keep hanging servers from holding up the rest.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use mcp_harness_catalog::ServerState;
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::ReconnectPolicy;
use mcp_harness_runtime::RuntimeBuilder;
use serde_json::json;

fn quick_policy(max_attempts: u32) -> ReconnectPolicy {
    ReconnectPolicy {
        max_attempts,
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(400),
        health_interval: Duration::from_millis(200),
        stable_after: Duration::from_secs(30),
        ping_timeout: Duration::from_millis(300),
    }
}

async fn serve_at(addr: SocketAddr) -> tokio::task::JoinHandle<()> {
    // The port was just released by the previous server; binding may need a moment.
    for _ in 0..50 {
        if let Ok((_, task)) =
            mcp_harness_fixture::serve_http(FixtureOptions::default(), addr).await
        {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not bind {addr} again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_that_comes_back_is_reconnected() {
    let (addr, task) = mcp_harness_fixture::serve_http(
        FixtureOptions::default(),
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await
    .expect("serve");
    let runtime = RuntimeBuilder::new(config(vec![server(
        "web",
        http(&format!("http://{addr}/mcp")),
    )]))
    .reconnect(quick_policy(20))
    .start()
    .expect("start");
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(s.servers["web"].state, ServerState::Connected);

    task.abort();
    let s = runtime
        .wait_for(SETTLE, |s| s.servers["web"].attempts > 0)
        .await;
    let web = &s.servers["web"];
    assert_eq!(web.state, ServerState::Pending, "reconnecting: {web:?}");
    assert!(
        web.next_retry.is_some() && web.last_error.is_some(),
        "{web:?}"
    );
    assert!(
        !s.catalogs.contains_key("web"),
        "no tools while the server is away"
    );
    let err = runtime
        .call_tool("mcp__web__echo", args(json!({"message": "x"})))
        .await
        .expect_err("away");
    assert!(err.needs_rebind() || err.retryable(), "{err}");

    let task = serve_at(addr).await;
    let s = runtime
        .wait_for(SETTLE, |s| s.servers["web"].state == ServerState::Connected)
        .await;
    assert_eq!(s.servers["web"].state, ServerState::Connected);
    assert_eq!(s.servers["web"].attempts, 0);
    let echo = runtime
        .call_tool("mcp__web__echo", args(json!({"message": "back"})))
        .await
        .expect("echo");
    assert_eq!(text(&echo), "back");
    runtime.shutdown().await;
    task.abort();
}

/// A server that connects and is lost at once, again and again, backs off: each short-lived
/// connection is one more attempt of the run that made it, so the attempts grow and the server
/// is failed (then probed at `max_delay`) — before, a connection reset the count and such a
/// server was reconnected at the first delay forever, its tools flipping in and out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_lost_right_after_connecting_backs_off() {
    let (addr, mut task) = mcp_harness_fixture::serve_http(
        FixtureOptions::default(),
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await
    .expect("serve");
    let runtime = RuntimeBuilder::new(config(vec![server(
        "flap",
        http(&format!("http://{addr}/mcp")),
    )]))
    .reconnect(quick_policy(3))
    .start()
    .expect("start");
    let s = runtime.wait_settled(SETTLE).await;
    assert_eq!(s.servers["flap"].state, ServerState::Connected);
    let mut seen = Vec::new();
    for _ in 0..4 {
        task.abort();
        let s = runtime
            .wait_for(SETTLE, |s| {
                let flap = &s.servers["flap"];
                flap.attempts > 0 || matches!(flap.state, ServerState::Failed { .. })
            })
            .await;
        let flap = &s.servers["flap"];
        seen.push(flap.attempts);
        if matches!(flap.state, ServerState::Failed { .. }) {
            break;
        }
        task = serve_at(addr).await;
        let s = runtime
            .wait_for(SETTLE, |s| {
                s.servers["flap"].state == ServerState::Connected
            })
            .await;
        assert_eq!(s.servers["flap"].state, ServerState::Connected, "{seen:?}");
    }
    assert_eq!(
        seen,
        [1, 2, 3, 4],
        "one more attempt per short-lived connection"
    );
    let s = runtime.snapshot();
    let ServerState::Failed { error } = &s.servers["flap"].state else {
        panic!("failed after the attempts: {:?}", s.servers["flap"]);
    };
    assert!(error.contains("probing again"), "{error}");
    runtime.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_that_stays_away_is_failed_after_the_attempts() {
    let (addr, task) = mcp_harness_fixture::serve_http(
        FixtureOptions::default(),
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await
    .expect("serve");
    let runtime = RuntimeBuilder::new(config(vec![server(
        "gone",
        http(&format!("http://{addr}/mcp")),
    )]))
    .reconnect(quick_policy(3))
    .start()
    .expect("start");
    runtime.wait_settled(SETTLE).await;
    task.abort();
    let s = runtime
        .wait_for(SETTLE, |s| {
            matches!(s.servers["gone"].state, ServerState::Failed { .. })
        })
        .await;
    let ServerState::Failed { error } = &s.servers["gone"].state else {
        panic!("{:?}", s.servers["gone"])
    };
    assert!(
        error.contains("3 reconnect attempts failed") && error.contains("probing again"),
        "{error}"
    );
    assert!(s.tools().all(|t| t.server != "gone"));
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_servers_do_not_hold_up_the_queue() {
    let mut servers = Vec::new();
    for i in 0..5 {
        let mut hung = server(&format!("hung{i}"), fixture_stdio(&["--hang-at-start"]));
        hung.startup_timeout = Duration::from_secs(120);
        servers.push(hung);
    }
    for i in 0..45 {
        servers.push(server(&format!("ok{i:02}"), fixture_stdio(&[])));
    }
    let runtime = RuntimeBuilder::new(config(servers))
        .connection_slots(3, 20)
        .start()
        .expect("start");
    let ready = |s: &mcp_harness_catalog::Snapshot| {
        (0..45).all(|i| {
            s.servers
                .get(&format!("ok{i:02}"))
                .is_some_and(|st| st.state == ServerState::Connected)
        })
    };
    let s = runtime.wait_for(Duration::from_secs(100), ready).await;
    assert!(ready(&s), "all 45 responsive servers connected");
    for i in 0..5 {
        assert_eq!(
            s.servers[&format!("hung{i}")].state,
            ServerState::Pending,
            "the hung ones are still within their 120 s"
        );
    }
    runtime.shutdown().await;
}

/// The fixture as a program serving Streamable HTTP on loopback `port` (retried while the port
/// is still held by the previous one); killed when dropped.
async fn fixture_process(port: u16, extra: &[&str]) -> tokio::process::Child {
    for _ in 0..50 {
        let mut child = tokio::process::Command::new(fixture_bin())
            .args(["--transport", "http", "--port", &port.to_string()])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the fixture");
        for _ in 0..100 {
            if let Ok(Some(_)) = child.try_wait() {
                break; // could not bind yet
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return child;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.kill().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the fixture could not serve on port {port}");
}

/// A killed HTTP server is noticed through its broken stream and refused requests, not the
/// pings (an hour apart here); after the fast attempts it is failed, says when the next probe
/// is, and comes back by itself when the server returns on the same port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_http_server_is_noticed_at_once_and_comes_back_by_itself() {
    let port = free_port();
    let mut fixture = fixture_process(port, &[]).await;
    let runtime = RuntimeBuilder::new(config(vec![server(
        "web",
        http(&format!("http://127.0.0.1:{port}/mcp")),
    )]))
    .reconnect(ReconnectPolicy {
        max_attempts: 2,
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(400),
        health_interval: Duration::from_secs(3600),
        stable_after: Duration::from_secs(30),
        ping_timeout: Duration::from_secs(10),
    })
    .start()
    .expect("start");
    settled_connected(&runtime, "web").await;

    fixture.kill().await.expect("kill the fixture");
    let s = runtime
        .wait_for(SETTLE, |s| s.servers["web"].state != ServerState::Connected)
        .await;
    let web = &s.servers["web"];
    assert_ne!(web.state, ServerState::Connected, "never noticed: {web:?}");
    assert!(!s.catalogs.contains_key("web"), "no tools once it is gone");

    let failed = |s: &mcp_harness_catalog::Snapshot| {
        matches!(s.servers["web"].state, ServerState::Failed { .. })
    };
    let s = runtime.wait_for(SETTLE, failed).await;
    let web = &s.servers["web"];
    let ServerState::Failed { error } = &web.state else {
        panic!("not failed after the fast attempts: {web:?}")
    };
    assert!(error.contains("probing again"), "{error}");
    assert!(web.next_retry.is_some(), "the next probe is shown: {web:?}");

    let _fixture = fixture_process(port, &[]).await;
    let s = runtime
        .wait_for(SETTLE, |s| s.servers["web"].state == ServerState::Connected)
        .await;
    assert_eq!(
        s.servers["web"].state,
        ServerState::Connected,
        "{:?}",
        s.servers["web"]
    );
    let echo = runtime
        .call_tool("mcp__web__echo", args(json!({"message": "back"})))
        .await
        .expect("echo");
    assert_eq!(text(&echo), "back");
    runtime.shutdown().await;
}

/// Nothing listens at the URL: the server is failed on the first attempt (not after the fast
/// attempts), with a message that names the URL without its query, says what happened and
/// what to check, and holds no Rust type name; probing goes on in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_at_startup_fails_at_once_and_says_why() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp?api_key=SECRET-IN-QUERY");
    let runtime = start(vec![server("nothing", http(&url))]);
    let s = runtime.wait_settled(SETTLE).await;
    let status = &s.servers["nothing"];
    let ServerState::Failed { error } = &status.state else {
        panic!("{status:?}")
    };
    assert!(
        error.contains(&format!("http://127.0.0.1:{port}/mcp"))
            && error.contains("connection refused")
            && error.contains("`url`"),
        "{error}"
    );
    for leak in [
        "SECRET-IN-QUERY",
        "Transport [",
        "rmcp::",
        "reqwest",
        "hyper",
    ] {
        assert!(!error.contains(leak), "{leak} in: {error}");
    }
    assert!(
        !error.contains("reconnect attempts failed"),
        "failed without the fast attempts: {error}"
    );
    assert!(status.next_retry.is_some(), "still probed: {status:?}");
    runtime.shutdown().await;
}

/// `startupTimeoutSec` bounds all startup attempts together: a server that answers every
/// request with 503 is failed when it runs out, however many fast attempts remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_timeout_is_the_budget_of_all_attempts() {
    let (addr, task) = mcp_harness_fixture::serve_http(
        FixtureOptions {
            fail_http: u64::MAX,
            ..Default::default()
        },
        "127.0.0.1:0".parse().expect("addr"),
    )
    .await
    .expect("serve");
    let mut busy = server("busy", http(&format!("http://{addr}/mcp")));
    busy.startup_timeout = Duration::from_secs(2);
    let runtime = RuntimeBuilder::new(config(vec![busy]))
        .reconnect(ReconnectPolicy {
            max_attempts: 10_000,
            initial_delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(100),
            ..ReconnectPolicy::default()
        })
        .start()
        .expect("start");
    let s = runtime.wait_settled(SETTLE).await;
    let status = &s.servers["busy"];
    let ServerState::Failed { error } = &status.state else {
        panic!("still starting: {status:?}")
    };
    assert!(
        error.contains("startupTimeoutSec") && error.contains("503"),
        "{error}"
    );
    runtime.shutdown().await;
    task.abort();
}
