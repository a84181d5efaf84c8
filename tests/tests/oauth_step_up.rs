//! Step-up authorization end to end (R33) against a local authorization server + protected MCP
//! server (the fixture behind a bearer check that requires scopes per method): a 403
//! `insufficient_scope` on a tool call re-authorizes with the union of the granted and the
//! challenged scopes and runs the call once; a server that keeps raising the bar gets at most
//! three step-ups, then a permission error naming the server and what to do; without anyone to
//! authorize, the call fails asking for a login, and that login asks for the union.

mod common;

use common::auth_server::{AuthOptions, AuthServer, Scopes};

use std::sync::Arc;
use std::time::Duration;

use mcp_harness_runtime::transport::auth;
use mcp_harness_runtime::{CallError, ErrorClass, Runtime};
use serde_json::json;

/// The authorization server (code grant, no refresh) with the MCP server requiring `scopes`.
async fn start_server(scopes: Scopes) -> AuthServer {
    AuthServer::start(AuthOptions {
        scopes,
        ..AuthOptions::authorization_code(false, 3600)
    })
    .await
}

/// An auth context with a store of its own and `NoFollowBrowser` authorizing step-ups.
fn with_browser() -> auth::AuthContext {
    common::auth_server::temp_auth("step-up").with_step_up_browser(Arc::new(auth::NoFollowBrowser))
}

async fn login(ctx: &auth::AuthContext, server: &str, url: &str) {
    let settings = auth::OAuthSettings {
        redirect_uri: "http://127.0.0.1:33418/callback".into(),
        ..Default::default()
    };
    auth::login(ctx, server, url, &settings, &auth::NoFollowBrowser)
        .await
        .expect("login succeeds");
}

/// Starts a runtime with `server` at `url`, logs in at needs-auth, and waits for its tools.
async fn connected(ctx: &auth::AuthContext, server: &str, url: &str) -> Runtime {
    let runtime =
        common::auth_server::start_with_auth(vec![common::server(server, common::http(url))], ctx);
    let snap = runtime.wait_settled(common::SETTLE).await;
    assert_eq!(snap.servers[server].state.label(), "needs-auth");
    login(ctx, server, url).await;
    runtime.restart(server).unwrap();
    wait_for_tools(&runtime, server, snap.revision).await;
    runtime
}

/// Waits until `server` is connected with its tools in a revision after `after`.
async fn wait_for_tools(runtime: &Runtime, server: &str, after: u64) {
    let deadline = tokio::time::Instant::now() + common::SETTLE;
    loop {
        let s = runtime.snapshot();
        if s.revision > after
            && s.servers[server].state.label() == "connected"
            && s.catalogs.get(server).is_some_and(|c| !c.tools.is_empty())
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server never connected: {:?}",
            s.servers[server].last_error
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn echo(runtime: &Runtime, server: &str, message: &str) -> Result<String, CallError> {
    let name = mcp_harness_catalog::qualify(server, "echo");
    let result = runtime
        .call_tool(&name, json!({"message": message}).as_object().cloned())
        .await?;
    assert!(!result.is_error());
    Ok(common::text(&result))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_403_insufficient_scope_authorizes_the_union_and_runs_the_call_once() {
    let ctx = with_browser();
    let st = start_server(Scopes::NeedsWrite).await;
    let url = st.url();
    let runtime = connected(&ctx, "files", &url).await;
    assert_eq!(st.state().authorized(), ["mcp:tools"]);

    let text = echo(&runtime, "files", "hello")
        .await
        .expect("call succeeds");
    assert!(text.contains("hello"), "{text}");
    {
        let st = st.state();
        assert_eq!(
            st.authorized(),
            ["mcp:tools", "mcp:tools mcp:write"],
            "the step-up asks for the granted scope plus the challenged one"
        );
        assert_eq!(st.refusals, 1);
        assert_eq!(
            st.calls_run, 1,
            "the refused call ran once, after the step-up"
        );
    }

    // The new grant holds: the next call needs no authorization.
    echo(&runtime, "files", "again")
        .await
        .expect("call succeeds");
    {
        let st = st.state();
        assert_eq!(st.authorized().len(), 2);
        assert_eq!(st.refusals, 1);
        assert_eq!(st.calls_run, 2);
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_three_step_ups_per_server_then_a_permission_error_saying_what_to_do() {
    let ctx = with_browser();
    let st = start_server(Scopes::RaisingBar).await;
    let url = st.url();
    let runtime = connected(&ctx, "raising", &url).await;

    // Each call: refused, one step-up, the retry refused again (the bar went up).
    for i in 1..=3 {
        let e = echo(&runtime, "raising", "x").await.expect_err("refused");
        let text = e.to_string();
        assert_eq!(e.class(), ErrorClass::Permission, "{text}");
        assert!(!e.retryable(), "{text}");
        assert!(text.contains("server `raising`"), "{text}");
        assert!(text.contains("mcp-harness login raising"), "{text}");
        assert!(!text.contains("secret"), "no token in errors: {text}");
        let st = st.state();
        assert_eq!(st.authorized().len(), 1 + i, "one step-up per call");
        assert_eq!(st.refusals, 2 * i as u64, "each call sent twice, no more");
    }
    // The budget is spent: refused at once, with no authorization and no retry.
    let e = echo(&runtime, "raising", "x").await.expect_err("refused");
    let text = e.to_string();
    assert_eq!(e.class(), ErrorClass::Permission, "{text}");
    assert!(text.contains("after 3 step-up authorizations"), "{text}");
    {
        let st = st.state();
        assert_eq!(st.authorized().len(), 4, "login + 3 step-ups");
        assert_eq!(st.refusals, 7);
        assert_eq!(st.calls_run, 0);
        // Each step-up asked for everything granted so far plus the new scope.
        assert_eq!(
            st.authorized()[3],
            "mcp:tools mcp:level1 mcp:level3 mcp:level5"
        );
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_anyone_to_authorize_the_call_asks_for_a_login_which_asks_for_the_union() {
    let ctx = common::auth_server::temp_auth("step-up");
    let st = start_server(Scopes::NeedsWrite).await;
    let url = st.url();
    let runtime = connected(&ctx, "files", &url).await;

    let e = echo(&runtime, "files", "x").await.expect_err("refused");
    let text = e.to_string();
    assert_eq!(e.class(), ErrorClass::Permission, "{text}");
    assert!(
        text.contains("run `mcp-harness login files`"),
        "says what to do: {text}"
    );
    assert!(
        text.contains("mcp:tools mcp:write"),
        "names the scopes: {text}"
    );
    assert_eq!(st.state().authorized().len(), 1);

    // The login asks for the scopes the refused call needed; then the call runs.
    login(&ctx, "files", &url).await;
    assert_eq!(
        st.state().authorized(),
        ["mcp:tools", "mcp:tools mcp:write"]
    );
    let before = runtime.snapshot().revision;
    runtime.restart("files").unwrap();
    wait_for_tools(&runtime, "files", before).await;
    echo(&runtime, "files", "after login")
        .await
        .expect("call succeeds");
    assert_eq!(st.state().calls_run, 1);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_up_refused_while_connecting_is_needs_auth_not_a_reconnect_loop() {
    let ctx = common::auth_server::temp_auth("step-up");
    let st = start_server(Scopes::AdminEverywhere).await;
    let url = st.url();
    let runtime = common::auth_server::start_with_auth(
        vec![common::server("admin", common::http(&url))],
        &ctx,
    );
    let snap = runtime.wait_settled(common::SETTLE).await;
    assert_eq!(snap.servers["admin"].state.label(), "needs-auth");
    login(&ctx, "admin", &url).await;
    // The login's grant lacks `mcp:admin`: initialize is refused for lack of scope, nobody can
    // step up, so the server needs a login (not a reconnection with backoff).
    runtime.restart("admin").unwrap();
    let deadline = tokio::time::Instant::now() + common::SETTLE;
    let status = loop {
        let s = runtime.snapshot().servers["admin"].clone();
        if st.state().refusals > 0 && s.state.label() != "pending" {
            break s;
        }
        assert!(tokio::time::Instant::now() < deadline, "{s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.state.label(), "needs-auth", "{status:?}");
    let reason = status.last_error.clone().unwrap_or_default();
    assert!(reason.contains("mcp:tools mcp:admin"), "{reason}");
    assert!(reason.contains("mcp-harness login admin"), "{reason}");
    // Not probed while it waits.
    let refused = st.state().refusals;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(st.state().refusals, refused, "retried while needs-auth");

    // The next login asks for the union, and the server connects by itself.
    let before = runtime.snapshot().revision;
    login(&ctx, "admin", &url).await;
    assert_eq!(
        st.state().authorized().last().map(String::as_str),
        Some("mcp:tools mcp:admin")
    );
    wait_for_tools(&runtime, "admin", before).await;
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_login_in_another_process_renews_the_step_up_budget() {
    let ctx = with_browser();
    let st = start_server(Scopes::RaisingBar).await;
    let url = st.url();
    let runtime = connected(&ctx, "raising", &url).await;
    for _ in 0..4 {
        let _ = echo(&runtime, "raising", "x").await.expect_err("refused");
    }
    assert_eq!(st.state().authorized().len(), 4, "login + 3 step-ups");
    let e = echo(&runtime, "raising", "x").await.expect_err("refused");
    assert!(
        e.to_string().contains("after 3 step-up authorizations"),
        "{e}"
    );
    assert_eq!(st.state().authorized().len(), 4, "the budget is spent");

    // Another process logs in: it writes a new grant, with a new login id, to the shared file
    // (written here the way that process's `login` writes it; this process's own `login` would
    // renew the budget directly).
    let other_process = auth::AuthContext::in_dir(ctx.dir().to_path_buf());
    let store = other_process.store("raising", &url);
    store
        .update(|f| f.login = Some("another-process-login".into()))
        .unwrap();
    let _ = echo(&runtime, "raising", "x").await.expect_err("refused");
    assert_eq!(
        st.state().authorized().len(),
        5,
        "a step-up again after the other login"
    );
    runtime.shutdown().await;
}

/// An authorization endpoint of another scheme than https (or http to loopback) is never
/// opened: `file:` or a desktop handler's scheme would go to whatever handles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_endpoint_of_another_scheme_is_never_opened() {
    struct Recording(std::sync::Mutex<Vec<String>>);
    impl auth::Browser for Recording {
        fn authorize(&self, url: &str) -> futures::future::BoxFuture<'_, Result<String, String>> {
            self.0.lock().unwrap().push(url.to_string());
            Box::pin(async { Err("not opened".to_string()) })
        }
    }
    for endpoint in [
        "file:///tmp/evil.desktop",
        "smb://198.51.100.7/share/run.desktop",
        "http://198.51.100.7/authorize",
    ] {
        let st = AuthServer::start(AuthOptions {
            metadata: Some(json!({"authorization_endpoint": endpoint})),
            ..AuthOptions::authorization_code(false, 3600)
        })
        .await;
        let ctx = common::auth_server::temp_auth("scheme");
        let browser = Recording(Default::default());
        let settings = auth::OAuthSettings {
            redirect_uri: "http://127.0.0.1:33419/callback".into(),
            ..Default::default()
        };
        let err = auth::login(&ctx, "hostile", &st.url(), &settings, &browser)
            .await
            .expect_err("refused");
        let said = err.to_string();
        assert!(
            said.contains("`authorization_endpoint`") && said.contains("is not https"),
            "{endpoint}: {said}"
        );
        assert!(browser.0.lock().unwrap().is_empty(), "{endpoint}: opened");
    }
}
