//! Client mode for the official MCP conformance suite: one Streamable HTTP server at the URL the
//! suite gives, driven through the same public runtime API a user gets. The scenario name only
//! chooses what to do (which tool to call, which skill to load), never how the protocol behaves.

use std::time::Duration;

use mcp_harness_runtime::{Config, Runtime, RuntimeBuilder};

/// Name the suite's server gets in the harness.
const SERVER: &str = "conformance";

/// The SEP-2640 client scenarios (an extension: run without `--spec-version`, or with `--force`).
const SKILL_SCENARIOS: [&str; 4] = [
    "sep-2640-client-no-prefetch",
    "sep-2640-client-verify-digest",
    "sep-2640-client-verify-size",
    "sep-2640-client-verify-frontmatter",
];

pub(crate) fn build(url: &str) -> Result<Runtime, String> {
    // Tokens of a test run never touch the user's store. The suite's authorization server
    // redirects at once: the same stand-in for the user that logs in (see `authorize`) also
    // approves a step-up when a request needs more scope.
    let auth = mcp_harness_transport::auth::AuthContext::in_dir(store_dir()).with_step_up_browser(
        std::sync::Arc::new(mcp_harness_transport::auth::NoFollowBrowser),
    );
    let config = config(url, None)?;
    // The suite's server is the only one and the test run trusts it with every call.
    let mut builder = RuntimeBuilder::new(config)
        .auth_context(auth)
        .callbacks(std::sync::Arc::new(AcceptDefaults))
        .approver(std::sync::Arc::new(mcp_harness_policy::AllowAll));
    if let Ok(version) = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION") {
        builder = builder.protocol_version(&version);
    }
    builder.start().map_err(|e| e.to_string())
}

fn store_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("mcp-harness-conformance-{}", std::process::id()))
}

/// The configuration a user would write for the suite's server: a Streamable HTTP server, with
/// `oauth` when it is given (read through the ordinary config parser, secrets as `${VAR}`).
fn config(
    url: &str,
    oauth: Option<(serde_json::Value, Vec<(String, String)>)>,
) -> Result<Config, String> {
    let mut server = serde_json::json!({
        "type": "http",
        "url": url,
        "startupTimeoutSec": 20,
        "toolTimeoutSec": 20,
    });
    let mut vars = Vec::new();
    if let Some((oauth, secrets)) = oauth {
        server["oauth"] = oauth;
        vars = secrets;
    }
    let text = serde_json::json!({"mcpServers": {SERVER: server}}).to_string();
    Config::parse(&text, std::path::Path::new("conformance.json"), &|name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .map_err(|e| e.to_string())
}

/// Runs the scenario, then removes the run's private store (tokens, id tokens): one
/// directory per scenario process would otherwise pile up in the temp dir.
pub(crate) async fn run(runtime: &Runtime, url: &str) -> Result<(), String> {
    let result = scenario(runtime, url).await;
    let _ = std::fs::remove_dir_all(store_dir());
    result
}

async fn scenario(runtime: &Runtime, url: &str) -> Result<(), String> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let mut snapshot = runtime.wait_settled(Duration::from_secs(25)).await;
    // What a user does on needs-auth: log in, then the server connects with the tokens. A server
    // that rejects them (its authorization server changed, say) is needs-auth again: log in
    // again, at most three times in all — unless the server refused a token authorized for the
    // scopes it asked for, which the message says no login can fix.
    let store = runtime.auth_context().store(SERVER, url);
    for _ in 0..3 {
        let needs_auth = snapshot
            .servers
            .get(SERVER)
            .is_some_and(|s| s.state.label() == "needs-auth");
        let futile = runtime
            .auth_context()
            .last_refusal(&store)
            .is_some_and(|r| !r.needs_login());
        if !needs_auth || futile {
            break;
        }
        authorize(runtime, url).await?;
        snapshot = wait_connected(runtime, Duration::from_secs(8)).await;
    }
    let status = snapshot
        .servers
        .get(SERVER)
        .ok_or("the conformance server is not configured")?;
    if status.state.label() != "connected" {
        return Err(format!(
            "server {SERVER} is {}: {}",
            status.state.label(),
            status.last_error.clone().unwrap_or_default()
        ));
    }
    if SKILL_SCENARIOS.contains(&scenario.as_str()) {
        return skills(runtime, &scenario).await;
    }
    for (tool, args) in calls_for(&scenario, &snapshot)? {
        let name = mcp_harness_catalog::qualify(SERVER, &tool);
        let result = runtime
            .call_tool(&name, args.as_object().cloned())
            .await
            .map_err(|e| format!("{tool}: {e}"))?;
        if result.is_error() {
            return Err(format!(
                "{tool} reported an error: {:?}",
                result.result.content
            ));
        }
    }
    Ok(())
}

/// The tool calls a scenario asks for: which tools, with which arguments. Everything else
/// (headers, `_meta`, reconnection, elicitation defaults) is the runtime's ordinary behaviour.
fn calls_for(
    scenario: &str,
    snapshot: &mcp_harness_catalog::Snapshot,
) -> Result<Vec<(String, serde_json::Value)>, String> {
    use serde_json::json;
    let calls = match scenario {
        "tools_call" => vec![("add_numbers".to_string(), json!({"a": 5, "b": 3}))],
        "elicitation-sep1034-client-defaults" => {
            vec![("test_client_elicitation_defaults".to_string(), json!({}))]
        }
        "sse-retry" => vec![("test_reconnection".to_string(), json!({}))],
        "sep-2322-client-request-state" => [
            "test_mrtr_echo_state",
            "test_mrtr_unrelated",
            "test_mrtr_no_state",
            "test_mrtr_no_result_type",
        ]
        .iter()
        .map(|t| (t.to_string(), json!({})))
        .collect(),
        "http-invalid-tool-headers" => {
            vec![("valid_tool".to_string(), json!({"region": "us-west1"}))]
        }
        "json-schema-2020-12-preservation" => {
            let tool = snapshot
                .tool(&mcp_harness_catalog::qualify(
                    SERVER,
                    "json_schema_2020_12_tool",
                ))
                .ok_or("json_schema_2020_12_tool is not in the catalog")?;
            let schema = serde_json::Value::Object((*tool.tool.input_schema).clone());
            vec![("json_schema_echo".to_string(), json!({"schema": schema}))]
        }
        // The authorization scenarios' server has one tool; their reference client lists the
        // tools and calls it, which is where a scope step-up happens.
        s if s.starts_with("auth/")
            && snapshot
                .tool(&mcp_harness_catalog::qualify(SERVER, "test-tool"))
                .is_some() =>
        {
            vec![("test-tool".to_string(), json!({}))]
        }
        // The suite passes the calls to make in its context.
        _ => match std::env::var("MCP_CONFORMANCE_CONTEXT") {
            Ok(context) => {
                let context: serde_json::Value = serde_json::from_str(&context)
                    .map_err(|e| format!("MCP_CONFORMANCE_CONTEXT is not JSON: {e}"))?;
                context
                    .get("toolCalls")
                    .and_then(|c| c.as_array())
                    .map(|calls| {
                        calls
                            .iter()
                            .filter_map(|c| {
                                Some((
                                    c.get("name")?.as_str()?.to_string(),
                                    c.get("arguments").cloned().unwrap_or(json!({})),
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            }
            Err(_) => Vec::new(),
        },
    };
    Ok(calls)
}

/// Answers a form elicitation the way a user who accepts the proposed values does: accept,
/// changing nothing (the runtime then fills in every schema default, SEP-1034).
struct AcceptDefaults;

impl mcp_harness_transport::ClientCallbacks for AcceptDefaults {
    fn supports(&self) -> mcp_harness_transport::Supported {
        mcp_harness_transport::Supported {
            elicitation_form: true,
            ..Default::default()
        }
    }

    fn elicit(
        &self,
        _server: &str,
        _request: rmcp::model::ElicitRequestParams,
    ) -> mcp_harness_transport::CallbackFuture<rmcp::model::ElicitResult> {
        Box::pin(async {
            serde_json::from_value(serde_json::json!({"action": "accept", "content": {}}))
                .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
        })
    }
}

/// The SEP-2640 scenarios. The runtime lists skills at connection and never fetches a skill file
/// ahead of need, so `no-prefetch` only checks that the listing happened; the `verify-*`
/// scenarios load the one listed skill the way a user would (`mcp-harness` loads skills only
/// through `Runtime::load_skill`). A rejected skill is an error (non-zero exit, which these
/// scenarios allow); its message says which server, skill and file, and what differed.
async fn skills(runtime: &Runtime, scenario: &str) -> Result<(), String> {
    let snapshot = runtime.snapshot();
    let catalog = snapshot
        .catalogs
        .get(SERVER)
        .ok_or("the conformance server has no catalog")?;
    let names: Vec<&str> = catalog.skills.iter().map(|s| s.name.as_str()).collect();
    emitln!("listed skills: {}", names.join(", "));
    if scenario == "sep-2640-client-no-prefetch" {
        return Ok(());
    }
    let [skill] = names.as_slice() else {
        return Err(format!(
            "expected exactly one listed skill to load, found {}",
            names.len()
        ));
    };
    let loaded = runtime
        .load_skill(SERVER, skill)
        .await
        .map_err(|e| format!("skill rejected: {e}"))?;
    emitln!(
        "loaded skill {skill} from {}: {} bytes of instructions",
        loaded.entry.uri,
        loaded.body.len()
    );
    Ok(())
}

/// The client metadata document URL the suite's authorization server accepts as a client id
/// (SEP-991); where the suite supports it, the harness is configured with it, as a user would
/// configure `oauth.clientMetadataUrl`.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// The redirect URI the harness registers; the suite never connects to it: its authorization
/// endpoint redirects at once, and [`NoFollowBrowser`](mcp_harness_transport::auth::NoFollowBrowser)
/// reads the redirect instead of following it (the only stand-in for a user here).
const REDIRECT_URI: &str = "http://127.0.0.1:33418/callback";

/// What a user does about a needs-auth server, with the suite's credentials (from
/// `MCP_CONFORMANCE_CONTEXT`) as the ones the user was given: when the authorization server
/// offers no authorization code grant, configure the server for the grant it offers that the
/// credentials fit — the JWT bearer grant with an ID token and an identity provider
/// (`oauth.grant: "enterprise_managed"`) or with a workload's JWT (`"jwt_bearer"`), or client
/// credentials (`"client_credentials"`), JWTs and keys in 0600 files, secrets as `${VAR}` — and
/// let the runtime get its token; else log in the way `mcp-harness login` does, the credentials
/// standing in for `oauth.clientId`/`clientSecret`.
async fn authorize(runtime: &Runtime, url: &str) -> Result<(), String> {
    use mcp_harness_transport::auth;
    let context: serde_json::Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or_default();
    let text = |key: &str| {
        context
            .get(key)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let grants = auth::client_credentials::authorization_server_grants(url)
        .await
        .unwrap_or_default();
    let offers = |grant: &str| grants.iter().any(|g| g == grant);
    let interactive = grants.is_empty() || offers("authorization_code");
    let jwt_bearer = !interactive && offers(auth::jwt_bearer::JWT_BEARER);
    let configure = |oauth: serde_json::Value, secrets: Vec<(String, String)>| async move {
        runtime.set_config(config(url, Some((oauth, secrets)))?);
        runtime
            .refresh_if_dirty()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    if jwt_bearer
        && let (Some(endpoint), Some(id_token)) = (text("idp_token_endpoint"), text("idp_id_token"))
    {
        let file = store_dir().join("id-token.jwt");
        write_private(&file, &id_token)?;
        let mut oauth = serde_json::json!({
            "grant": "enterprise_managed",
            "idpTokenEndpoint": endpoint,
            "idTokenFile": file.to_string_lossy(),
        });
        let mut secrets = Vec::new();
        if let Some(id) = text("idp_client_id") {
            oauth["idpClientId"] = id.into();
        }
        if let Some(id) = text("client_id") {
            oauth["clientId"] = id.into();
        }
        if let Some(secret) = text("client_secret") {
            oauth["clientSecret"] = "${CONFORMANCE_CLIENT_SECRET}".into();
            secrets.push(("CONFORMANCE_CLIENT_SECRET".to_string(), secret));
        }
        return configure(oauth, secrets).await;
    }
    // The suite names the workload's own token `valid_jwt` (beside deliberately bad ones).
    if jwt_bearer && let Some(jwt) = text("valid_jwt") {
        let file = store_dir().join("workload.jwt");
        write_private(&file, &jwt)?;
        let mut oauth =
            serde_json::json!({"grant": "jwt_bearer", "assertionFile": file.to_string_lossy()});
        if let Some(id) = text("client_id") {
            oauth["clientId"] = id.into();
        }
        return configure(oauth, Vec::new()).await;
    }
    let m2m = !interactive && offers("client_credentials");
    if m2m && let Some(client_id) = text("client_id") {
        let mut oauth = serde_json::json!({"grant": "client_credentials", "clientId": client_id});
        let mut secrets = Vec::new();
        if let Some(secret) = text("client_secret") {
            oauth["clientSecret"] = "${CONFORMANCE_CLIENT_SECRET}".into();
            secrets.push(("CONFORMANCE_CLIENT_SECRET".to_string(), secret));
        } else if let Some(pem) = text("private_key_pem") {
            let file = store_dir().join("client-key.pem");
            write_private(&file, &pem)?;
            oauth["privateKeyFile"] = file.to_string_lossy().into_owned().into();
            if let Some(alg) = text("signing_algorithm") {
                oauth["signingAlgorithm"] = alg.into();
            }
        } else {
            return Err("the context has a client id but neither a secret nor a key".into());
        }
        return configure(oauth, secrets).await;
    }
    let settings = auth::OAuthSettings {
        client_id: text("client_id"),
        client_secret: text("client_secret"),
        client_metadata_url: Some(CLIENT_METADATA_URL.into()),
        redirect_uri: REDIRECT_URI.into(),
        ..Default::default()
    };
    auth::login(
        runtime.auth_context(),
        SERVER,
        url,
        &settings,
        &auth::NoFollowBrowser,
    )
    .await
    .map_err(|e| e.to_string())?;
    runtime.restart(SERVER).map_err(|e| e.to_string())
}

/// Writes `text` to a new file only this user can read.
fn write_private(path: &std::path::Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Polls until the server is connected, at most `deadline`; then the snapshot as it is.
async fn wait_connected(
    runtime: &Runtime,
    deadline: Duration,
) -> std::sync::Arc<mcp_harness_catalog::Snapshot> {
    let end = tokio::time::Instant::now() + deadline;
    loop {
        let snapshot = runtime.snapshot();
        let connected = snapshot
            .servers
            .get(SERVER)
            .is_some_and(|s| s.state.label() == "connected");
        if connected || tokio::time::Instant::now() >= end {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
