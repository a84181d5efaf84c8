//! Supervision (R5, R7): a remote server that goes away is noticed (even though rmcp keeps a
//! dead HTTP session open), reconnected with backoff while its tools are withdrawn, and failed
//! after the attempts run out; connection queues keep hanging servers from holding up the rest.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use mcp_harness_catalog::ServerState;
use mcp_harness_fixture::FixtureOptions;
use mcp_harness_runtime::RuntimeBuilder;
use mcp_harness_runtime::supervision::ReconnectPolicy;
use serde_json::json;

fn quick_policy(max_attempts: u32) -> ReconnectPolicy {
    ReconnectPolicy {
        max_attempts,
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(400),
        health_interval: Duration::from_millis(200),
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
        error.contains("gave up after 3 reconnect attempts"),
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
