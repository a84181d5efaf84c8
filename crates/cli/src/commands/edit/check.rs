//! Before `enable`/`disable` writes a tool's name, the server is asked which tools it has.
//!
//! `excludeTools` holds raw names, and a qualified name's tool part is the raw name sanitised
//! (`mcp__fs__read_file` may be the raw `read.file`): written unchecked, a typo or a sanitised
//! name disabled nothing while the command said it had.
//!
//! Invariant: what is written is a raw name the server listed (a qualified name becomes its raw
//! name); a name the server does not list is refused, naming the ones it does; when the server
//! cannot be asked (disabled, untrusted, failing, needing a login), the name is written as given
//! and the output says it was not checked. The check starts only that server, with its tool
//! filters cleared (an excluded tool is still one of its tools), and closes it before the edit.

use std::time::Duration;

use super::EditError;

/// What the server said about the tool.
pub(super) enum Checked {
    /// The raw name to write.
    Listed(String),
    /// Not asked; why (written as given).
    Unchecked(String),
}

/// Asks `server` (as the merged config defines it) whether it has `tool`, a raw name or the tool
/// part of a qualified name.
pub(super) async fn tool(server: &str, tool: &str) -> Result<Checked, EditError> {
    // The merged config as every command reads it (a project file's servers held until it is
    // trusted; nothing asked).
    let mut config = match crate::sources::shared().merge() {
        Ok(merged) => merged.config,
        Err(e) => return Ok(Checked::Unchecked(format!("the config did not load: {e}"))),
    };
    let Some(mut definition) = config.servers.remove(server) else {
        return Ok(Checked::Unchecked(format!(
            "server \"{server}\" is not in the merged config (shadowed, or left out)"
        )));
    };
    if let Some(why) = &definition.untrusted {
        return Ok(Checked::Unchecked(format!(
            "server \"{server}\" was not started: {why}"
        )));
    }
    if let Some(why) = &definition.unusable {
        return Ok(Checked::Unchecked(why.clone()));
    }
    if !definition.enabled {
        return Ok(Checked::Unchecked(format!(
            "server \"{server}\" is disabled, so it was not started"
        )));
    }
    definition.include_tools = None;
    definition.exclude_tools.clear();
    let deadline = definition.startup_timeout + Duration::from_secs(5);
    config.servers.clear();
    config.servers.insert(server.to_string(), definition);
    let runtime = match mcp_harness_runtime::RuntimeBuilder::new(config).start() {
        Ok(runtime) => runtime,
        Err(e) => return Ok(Checked::Unchecked(e.to_string())),
    };
    let snapshot = crate::progress::settle(&runtime, deadline).await;
    runtime.shutdown().await;
    let Some(catalog) = snapshot.catalogs.get(server) else {
        let why = match snapshot.servers.get(server) {
            Some(status) => crate::explain::server_down(status),
            None => format!("server \"{server}\" did not start"),
        };
        return Ok(Checked::Unchecked(why));
    };
    let qualified = format!("mcp__{server}__{tool}");
    let listed = catalog
        .tools
        .iter()
        .find(|t| t.raw_name == tool)
        .or_else(|| catalog.tools.iter().find(|t| t.qualified_name == qualified));
    if let Some(entry) = listed {
        return Ok(Checked::Listed(entry.raw_name.clone()));
    }
    // A server's names are its own text: shown without control characters.
    let mut names: Vec<String> = catalog
        .tools
        .iter()
        .map(|t| t.raw_name.chars().filter(|c| !c.is_control()).collect())
        .collect();
    names.sort_unstable();
    let shown = match names.len() {
        0 => "it lists no tools".to_string(),
        n if n <= 20 => format!("its tools: {}", names.join(", ")),
        n => format!(
            "{n} tools, `mcp-harness --server {server} tools` lists them; first: {}",
            names[..20].join(", ")
        ),
    };
    Err(EditError::Usage(format!(
        "server \"{server}\" has no tool {tool:?} ({shown}); nothing was written"
    )))
}
