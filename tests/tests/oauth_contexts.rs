//! Two runtimes in one process, each with an `AuthContext` of its own, against the one local
//! authorization server (`common::auth_server`, step-up on `tools/call`): runtime A has its own
//! token directory and a step-up browser, runtime B another directory and none. Tokens A's login
//! saves are not B's (B stays needs-auth, its directory holds no tokens); A's step-up is A's;
//! B's refused step-up uses neither A's browser nor A's step-up state, and is recorded in B's
//! context and store only.

mod common;

use common::auth_server::{AuthOptions, AuthServer, Scopes, start_with_auth, temp_auth};

use std::sync::Arc;
use std::time::Duration;

use mcp_harness_runtime::transport::auth;
use mcp_harness_runtime::{CallError, ErrorClass, Runtime};
use serde_json::json;

const SERVER: &str = "files";

async fn login(ctx: &auth::AuthContext, url: &str) {
    let settings = auth::OAuthSettings {
        redirect_uri: "http://127.0.0.1:33418/callback".into(),
        ..Default::default()
    };
    auth::login(ctx, SERVER, url, &settings, &auth::NoFollowBrowser)
        .await
        .expect("login succeeds");
}

/// Restarts `runtime`'s server and waits until it is connected with its tools in a newer
/// revision.
async fn reconnected(runtime: &Runtime) {
    let after = runtime.snapshot().revision;
    runtime.restart(SERVER).unwrap();
    let deadline = tokio::time::Instant::now() + common::SETTLE;
    loop {
        let s = runtime.snapshot();
        if s.revision > after
            && s.servers[SERVER].state.label() == "connected"
            && s.catalogs.get(SERVER).is_some_and(|c| !c.tools.is_empty())
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server never connected: {:?}",
            s.servers[SERVER].last_error
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn echo(runtime: &Runtime, message: &str) -> Result<String, CallError> {
    let name = mcp_harness_catalog::qualify(SERVER, "echo");
    let result = runtime
        .call_tool(&name, json!({"message": message}).as_object().cloned())
        .await?;
    assert!(!result.is_error());
    Ok(common::text(&result))
}

/// The tokens `ctx` has for the server (the access token's text, if any).
fn access_token(ctx: &auth::AuthContext, url: &str) -> Option<String> {
    let file = ctx.store(SERVER, url).read().expect("store readable")?;
    let token = serde_json::to_value(file.credentials?.token_response?).ok()?;
    token["access_token"].as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_runtimes_with_their_own_auth_contexts_do_not_disturb_each_other() {
    let st = AuthServer::start(AuthOptions {
        scopes: Scopes::NeedsWrite,
        ..AuthOptions::authorization_code(false, 3600)
    })
    .await;
    let url = st.url();
    let ctx_a = temp_auth("ctx-a").with_step_up_browser(Arc::new(auth::NoFollowBrowser));
    let ctx_b = temp_auth("ctx-b");
    assert_ne!(ctx_a.dir(), ctx_b.dir());
    let config = || vec![common::server(SERVER, common::http(&url))];
    let a = start_with_auth(config(), &ctx_a);
    let b = start_with_auth(config(), &ctx_b);
    assert_eq!(
        a.wait_settled(common::SETTLE).await.servers[SERVER]
            .state
            .label(),
        "needs-auth"
    );
    assert_eq!(
        b.wait_settled(common::SETTLE).await.servers[SERVER]
            .state
            .label(),
        "needs-auth"
    );

    // A logs in: A connects with the tokens; B neither sees nor uses them.
    login(&ctx_a, &url).await;
    reconnected(&a).await;
    assert!(
        access_token(&ctx_a, &url).is_some(),
        "A's tokens in A's store"
    );
    assert_eq!(
        access_token(&ctx_b, &url),
        None,
        "A's tokens seen in B's store"
    );
    let refused = st.state().unauthorized;
    b.restart(SERVER).unwrap();
    let deadline = tokio::time::Instant::now() + common::SETTLE;
    let b_state = loop {
        let label = b.snapshot().servers[SERVER].state.label().to_string();
        // B's fresh attempt was refused with a 401 (no token), or B connected (with A's).
        if label == "connected" || (st.state().unauthorized > refused && label == "needs-auth") {
            break label;
        }
        assert!(tokio::time::Instant::now() < deadline, "B: {label}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(b_state, "needs-auth", "B connected with A's tokens");

    // A's call needs more scope: A's browser steps up, the call runs.
    let text = echo(&a, "from A").await.expect("A's call succeeds");
    assert!(text.contains("from A"), "{text}");
    assert_eq!(
        st.state().authorized(),
        ["mcp:tools", "mcp:tools mcp:write"]
    );

    // B logs in with its own grant (the union A stepped up to is A's business).
    login(&ctx_b, &url).await;
    assert_eq!(st.state().authorized().len(), 3, "B's login");
    assert_eq!(
        st.state().authorized()[2],
        "mcp:tools",
        "B's login asked for A's scopes"
    );
    assert_ne!(access_token(&ctx_a, &url), access_token(&ctx_b, &url));
    reconnected(&b).await;

    // B's call needs more scope: B has nobody to authorize, so it fails asking for a login —
    // A's browser is not used, and A's step-up state is not consulted or touched.
    let e = echo(&b, "from B")
        .await
        .expect_err("B has no step-up browser");
    let text = e.to_string();
    assert_eq!(e.class(), ErrorClass::Permission, "{text}");
    assert!(text.contains("mcp-harness login files"), "{text}");
    assert_eq!(
        st.state().authorized().len(),
        3,
        "a step-up was authorized for B"
    );
    let (store_a, store_b) = (ctx_a.store(SERVER, &url), ctx_b.store(SERVER, &url));
    assert!(
        matches!(
            ctx_b.last_refusal(&store_b),
            Some(auth::Refusal::NoAuthorizer { .. })
        ),
        "{:?}",
        ctx_b.last_refusal(&store_b)
    );
    assert_eq!(
        ctx_a.last_refusal(&store_a),
        None,
        "B's refusal in A's state"
    );
    let needed = |store: &auth::FileCredentialStore| store.read().unwrap().unwrap().step_up_scopes;
    assert_eq!(needed(&store_b), ["mcp:tools", "mcp:write"]);
    assert!(needed(&store_a).is_empty(), "B's refusal in A's store");

    // A keeps its grant: its next call needs no authorization.
    echo(&a, "A again").await.expect("A's call succeeds");
    assert_eq!(st.state().authorized().len(), 3);
    assert_eq!(st.state().calls_run, 2, "A's two calls ran, B's none");
    a.shutdown().await;
    b.shutdown().await;
    for ctx in [&ctx_a, &ctx_b] {
        let _ = std::fs::remove_dir_all(ctx.dir());
    }
}
