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
    let text = common::authenticate_text(&runtime, "secure").await;
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

/// `mcp-harness login SERVER --no-browser`, as over SSH: the CLI prints the authorization URL,
/// the user opens it on another machine (here: one GET, whose redirect goes nowhere) and pastes
/// back just the code; the CLI pairs it with its own `state`, finishes the login and stores
/// the tokens, which a later command then uses — the loopback callback is never reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_without_a_browser_takes_the_code_pasted_on_stdin() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

    let st = AuthServer::start(AuthOptions::authorization_code(true, 300)).await;
    let url = st.url();
    let home = std::env::temp_dir().join(format!("mcp-harness-paste-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&home).expect("home");
    let config = home.join("mcp.json");
    let servers = json!({"mcpServers": {"secure": {"type": "http", "url": url}}});
    std::fs::write(&config, servers.to_string()).expect("config");
    let cli = std::env::current_exe()
        .expect("test binary")
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("mcp-harness");
    assert!(
        cli.exists(),
        "{} is not built: run the tests with --workspace (or `cargo build -p mcp-harness`)",
        cli.display()
    );
    let command = |args: &[&str]| {
        let mut c = tokio::process::Command::new(&cli);
        c.arg("--config")
            .arg(&config)
            .args(args)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &home)
            .env("MCP_HARNESS_TOKEN_STORE", "file")
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .kill_on_drop(true);
        c
    };

    let mut login = command(&["login", "secure", "--no-browser", "--port", "0"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("login starts");
    let mut stderr = tokio::io::BufReader::new(login.stderr.take().expect("stderr")).lines();
    let authorize = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = stderr.next_line().await.expect("stderr line") {
            if let Some(at) = line.find("http://") {
                let found = line[at..].trim().to_string();
                if found.contains("/authorize?") {
                    return found;
                }
            }
        }
        panic!("login ended without printing an authorization URL");
    })
    .await
    .expect("the authorization URL within 20 s");

    // "Open it in a browser": the authorization server redirects to the loopback callback of
    // the machine that runs the login, which this browser cannot reach; the user copies the code.
    let target = authorize
        .strip_prefix(&format!("{}/", url.trim_end_matches("/mcp")))
        .expect("the URL is the test's authorization server");
    let origin = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let mut browser = tokio::net::TcpStream::connect(origin)
        .await
        .expect("connect");
    browser
        .write_all(
            format!("GET /{target} HTTP/1.1\r\nHost: {origin}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("request");
    let mut answer = String::new();
    browser.read_to_string(&mut answer).await.expect("answer");
    let location = answer
        .lines()
        .find_map(|l| {
            l.strip_prefix("location: ")
                .or_else(|| l.strip_prefix("Location: "))
        })
        .expect("a redirect")
        .trim()
        .to_string();
    assert!(location.starts_with("http://127.0.0.1:"), "{location}");
    let code = location
        .split(['?', '&'])
        .find_map(|p| p.strip_prefix("code="))
        .expect("a code")
        .to_string();

    let mut stdin = login.stdin.take().expect("stdin");
    stdin
        .write_all(format!("{code}\n").as_bytes())
        .await
        .expect("paste");
    let rest = tokio::time::timeout(Duration::from_secs(20), async {
        let mut rest = String::new();
        while let Some(line) = stderr.next_line().await.expect("stderr line") {
            rest.push_str(&line);
            rest.push('\n');
        }
        rest
    })
    .await
    .expect("login ends after the paste");
    let status = login.wait().await.expect("login exits");
    let mut stdout = String::new();
    login
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .await
        .expect("stdout");
    assert!(status.success(), "login: {status}\n{stdout}\n{rest}");
    assert!(
        format!("{stdout}{rest}").contains("Logged in to `secure`"),
        "{stdout}\n{rest}"
    );
    {
        let state = st.state();
        assert_eq!(state.authorize_queries.len(), 1, "one authorization");
    }
    // Issued tokens end in `-secret`: none reaches the terminal.
    assert!(
        !format!("{stdout}{rest}").contains("-secret"),
        "{stdout}\n{rest}"
    );

    // The stored tokens are the ones a later command uses: the real catalog, not authenticate.
    let tools = command(&["tools"]).output().await.expect("tools runs");
    let listed = String::from_utf8_lossy(&tools.stdout);
    assert!(
        tools.status.success(),
        "{listed}\n{}",
        String::from_utf8_lossy(&tools.stderr)
    );
    assert!(listed.contains("mcp__secure__echo"), "{listed}");
    assert!(!listed.contains("-secret"), "{listed}");
    assert!(!listed.contains("mcp__secure__authenticate"), "{listed}");
    let _ = std::fs::remove_dir_all(&home);
}
