//! OAuth end to end against a local authorization server + protected MCP server (the fixture
//! behind a bearer check): needs-auth at 401 → login (discovery, dynamic registration, PKCE,
//! `resource`) → the real catalog in a new revision → refresh before expiry with the rotated
//! refresh token kept, single-flight under concurrent calls; tokens in a 0600 file.

mod common;

use common::auth_server::{AuthOptions, AuthServer};

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use mcp_harness_runtime::transport::auth;
use serde_json::json;

/// Lifetime of issued access tokens: short, so the harness must refresh during the test.
const TOKEN_SECS: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn needs_auth_then_login_then_refresh_with_rotation() {
    let ctx = common::auth_server::temp_auth("oauth");
    let dir = ctx.dir().to_path_buf();
    let st = AuthServer::start(AuthOptions::authorization_code(true, TOKEN_SECS)).await;
    let url = st.url();
    // Health pings far apart: only the failed call itself can notice a lost authorization.
    let runtime = mcp_harness_runtime::RuntimeBuilder::new(common::config(vec![common::server(
        "secure",
        common::http(&url),
    )]))
    .reconnect(mcp_harness_runtime::ReconnectPolicy {
        health_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .auth_context(ctx.clone())
    .start()
    .expect("runtime starts");

    // 401 at initialize without a token: needs-auth, no catalog.
    let snap = runtime.wait_settled(common::SETTLE).await;
    assert_eq!(snap.servers["secure"].state.label(), "needs-auth");
    let before = snap.revision;

    // R4: the model sees only an authenticate tool for it, which says what the user must do.
    let authenticate = mcp_harness_catalog::qualify("secure", "authenticate");
    let step = runtime.bind_step(&[]).await.expect("step");
    let names: Vec<String> = step.tools().iter().map(|t| t.name.clone()).collect();
    assert!(names.contains(&authenticate), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("mcp__secure__") && *n != authenticate),
        "{names:?}"
    );
    let told = step
        .prepare_call(&authenticate)
        .expect("shown")
        .call(None)
        .await
        .expect("answered by the harness");
    assert!(!told.is_error());
    let text = common::text(&told);
    assert!(text.contains("mcp-harness login secure"), "{text}");
    assert!(text.contains("--no-browser"), "{text}");
    // Not probed while it waits (R4): no request reaches the server for a while.
    let refused = st.state().unauthorized;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(st.state().unauthorized, refused, "probed while needs-auth");

    // Login: discovery from the challenge, dynamic registration, PKCE S256, `resource`.
    let settings = auth::OAuthSettings {
        redirect_uri: "http://127.0.0.1:33418/callback".into(),
        ..Default::default()
    };
    let store = ctx.store("secure", &url);
    auth::login(&ctx, "secure", &url, &settings, &auth::NoFollowBrowser)
        .await
        .expect("login succeeds");
    {
        let st = st.state();
        let reg = &st.registrations[0];
        assert!(
            reg["grant_types"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g == "refresh_token"),
            "dynamic registration asks for refresh_token: {reg}"
        );
        let q = &st.authorize_queries[0];
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(q["resource"], url);
        assert_eq!(q["scope"], "mcp:tools");
        assert_eq!(
            st.requests[0].0.get("resource").map(String::as_str),
            Some(url.as_str())
        );
    }

    // The token file: 0600 in a 0700 directory, no token in its Debug output.
    let path = store.path();
    assert_eq!(path.parent().unwrap(), dir);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dmode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(dmode, 0o700);
    assert!(!format!("{store:?}").contains("secret"));

    // After login the server connects by itself (its stored credentials changed) and its real
    // catalog comes in a new revision, replacing the authenticate tool.
    let deadline = tokio::time::Instant::now() + common::SETTLE;
    let snap = loop {
        let s = runtime.snapshot();
        if s.servers["secure"].state.label() == "connected"
            && s.catalogs
                .get("secure")
                .is_some_and(|c| !c.tools.is_empty())
        {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server never connected"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(snap.revision > before);
    let step = runtime.bind_step(&[]).await.expect("step");
    let names: Vec<String> = step.tools().iter().map(|t| t.name.clone()).collect();
    assert!(!names.contains(&authenticate), "{names:?}");
    assert!(
        names.contains(&mcp_harness_catalog::qualify("secure", "echo")),
        "{names:?}"
    );

    // Let the access token come close to expiry; 20 concurrent calls refresh exactly once.
    tokio::time::sleep(Duration::from_secs(TOKEN_SECS - 1)).await;
    let name = mcp_harness_catalog::qualify("secure", "echo");
    let calls = (0..20).map(|i| {
        let runtime = &runtime;
        let name = name.clone();
        async move {
            runtime
                .call_tool(
                    &name,
                    json!({"message": format!("m{i}")}).as_object().cloned(),
                )
                .await
        }
    });
    for result in futures::future::join_all(calls).await {
        let result = result.expect("call succeeds after refresh");
        assert!(!result.is_error());
    }
    let (refreshes, newest_refresh) = {
        let st = st.state();
        (st.refreshes, st.issued_refresh.last().cloned().unwrap())
    };
    assert_eq!(refreshes, 1, "single-flight refresh");
    // The rotated refresh token is what the store keeps now.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(&newest_refresh), "rotated refresh token kept");
    assert!(!text.contains("rt-1-secret"), "spent refresh token dropped");

    // The authorization server revokes the grant (all tokens): once the access token is due,
    // the refresh is rejected and the server goes to needs-auth (its authenticate tool again),
    // not to retries.
    st.state().revoke_all();
    let refused = runtime
        .call_tool(&name, json!({"message": "revoked"}).as_object().cloned())
        .await;
    assert!(
        refused.is_err(),
        "a call with a revoked grant fails: {refused:?}"
    );
    let snap = runtime
        .wait_for(common::SETTLE, |s| {
            s.servers["secure"].state.label() == "needs-auth"
        })
        .await;
    assert_eq!(
        snap.servers["secure"].state.label(),
        "needs-auth",
        "{:?}",
        snap.servers["secure"]
    );
    let step = runtime.bind_step(&[]).await.expect("step");
    assert!(
        step.tools().iter().any(|t| t.name == authenticate),
        "the authenticate tool is back"
    );

    runtime.shutdown().await;
}
