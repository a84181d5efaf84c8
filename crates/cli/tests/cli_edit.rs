//! Config editing through the built binary (issue 17 point 3): `add`, `add-json`, `remove`,
//! `get`, `list`, `enable`/`disable` (a server and one tool), and `config import --from HOST`.
//! Every run gets its own HOME and XDG_CONFIG_HOME (`common::run_in`), so the files written are
//! this test's own, found where the config merge looks for them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

mod common;

use common::{bin, run_in};

const SECRET: &str = "s3cret-VALUE-9931";
/// A key written into a server's `args` after a flag that names it.
const ARG_SECRET: &str = "sk-live-arg-secret-4242";
const QUERY_SECRET: &str = "qs-VALUE-5150";

fn temp_dir(tag: &str) -> PathBuf {
    common::temp_home("edit", tag)
}

fn user_config(dir: &Path) -> PathBuf {
    dir.join("xdg/mcp-harness/config.json")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Position of `needle` in `text` (panics when absent).
fn at(text: &str, needle: &str) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("{needle} missing: {text}"))
}

#[test]
fn add_get_list_remove_round_trip_without_showing_secrets() {
    let dir = temp_dir("round");
    let env = format!("API_KEY={SECRET}");
    let (code, out, err) = run_in(
        &dir,
        &[
            "add",
            "--env",
            &env,
            "local",
            "--",
            "my-server",
            "--port",
            "7",
            "--api-key",
            ARG_SECRET,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("added stdio server \"local\""), "{out}");
    let header = format!("Authorization: Bearer {SECRET}");
    let url = format!("https://mcp.example.test/mcp?key={QUERY_SECRET}");
    // Options may follow the URL, as with `claude mcp add`.
    let (code, _, err) = run_in(
        &dir,
        &[
            "add",
            "--transport",
            "http",
            "web",
            &url,
            "--header",
            &header,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_in(
        &dir,
        &[
            "add-json",
            "viajson",
            r#"{"type": "sse", "url": "https://sse.example.test/sse"}"#,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");

    // Written where the merge reads it: `config` sees all three.
    let written = json(&read(&user_config(&dir)));
    assert_eq!(
        written["mcpServers"]["local"]["args"],
        json(&format!(r#"["--port", "7", "--api-key", "{ARG_SECRET}"]"#))
    );
    assert_eq!(written["mcpServers"]["local"]["env"]["API_KEY"], SECRET);
    assert_eq!(written["mcpServers"]["web"]["type"], "http");
    assert_eq!(
        written["mcpServers"]["web"]["headers"]["Authorization"],
        format!("Bearer {SECRET}")
    );
    let (code, out, err) = run_in(&dir, &["config", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let names: Vec<String> = json(&out)["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names, ["local", "viajson", "web"]);

    for name in ["local", "web"] {
        for args in [vec!["get", name], vec!["get", name, "--json"]] {
            let (code, out, err) = run_in(&dir, &args, &[]);
            assert_eq!(code, 0, "{err}");
            assert!(out.contains(name), "{out}");
            assert!(
                !out.contains(SECRET)
                    && !out.contains(QUERY_SECRET)
                    && !out.contains(ARG_SECRET)
                    && !err.contains(SECRET),
                "`get` printed a secret: {out}{err}"
            );
            assert!(out.contains("[redacted]"), "{out}");
        }
    }
    let (_, out, _) = run_in(&dir, &["get", "web"], &[]);
    assert!(
        out.contains("Authorization") && out.contains("key="),
        "names stay: {out}"
    );

    let (code, out, err) = run_in(&dir, &["list"], &[]);
    assert_eq!(code, 0, "{err}");
    for needle in [
        "local",
        "my-server --port 7 --api-key [redacted]",
        "web",
        "https://mcp.example.test/mcp",
        "sse",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    assert!(
        !out.contains(SECRET) && !out.contains(QUERY_SECRET) && !out.contains(ARG_SECRET),
        "{out}"
    );
    let (code, out, _) = run_in(&dir, &["list", "--json"], &[]);
    assert_eq!(code, 0);
    let listed = json(&out);
    assert_eq!(listed.as_array().map(Vec::len), Some(3), "{out}");
    assert!(
        !out.contains(SECRET) && !out.contains(QUERY_SECRET),
        "{out}"
    );

    let (code, out, err) = run_in(&dir, &["remove", "local"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("removed server \"local\""), "{out}");
    let (_, out, _) = run_in(&dir, &["list", "--json"], &[]);
    assert_eq!(json(&out).as_array().map(Vec::len), Some(2), "{out}");
    let (code, _, err) = run_in(&dir, &["remove", "local"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no server \"local\"") && err.contains("xdg/mcp-harness/config.json"),
        "{err}"
    );
}

#[test]
fn an_add_keeps_unknown_keys_key_order_and_permissions() {
    let dir = temp_dir("order");
    let path = user_config(&dir);
    std::fs::write(
        &path,
        r#"{
  "permissions": {"deny": ["mcp__zz__drop"]},
  "mcpServers": {
    "zz": {"toolTimeoutSec": 9, "command": "zz-mcp", "args": ["b", "a"]},
    "aa": {"url": "https://aa.example.test/mcp", "type": "http"}
  },
  "exposure": {"maxTools": 40}
}
"#,
    )
    .expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let (code, _, err) = run_in(&dir, &["add", "new", "--", "new-mcp"], &[]);
    assert_eq!(code, 0, "{err}");
    let text = read(&path);
    assert!(
        at(&text, "\"permissions\"") < at(&text, "\"mcpServers\""),
        "{text}"
    );
    assert!(
        at(&text, "\"mcpServers\"") < at(&text, "\"exposure\""),
        "{text}"
    );
    assert!(at(&text, "\"zz\"") < at(&text, "\"aa\""), "{text}");
    assert!(at(&text, "\"aa\"") < at(&text, "\"new\""), "{text}");
    assert!(
        at(&text, "\"toolTimeoutSec\"") < at(&text, "\"zz-mcp\""),
        "{text}"
    );
    assert!(at(&text, "\"url\"") < at(&text, "\"type\""), "{text}");
    let v = json(&text);
    assert_eq!(v["permissions"]["deny"][0], "mcp__zz__drop");
    assert_eq!(v["exposure"]["maxTools"], 40);
    assert_eq!(v["mcpServers"]["zz"]["args"], json(r#"["b", "a"]"#));
    let mode = std::fs::metadata(&path).map(|m| m.permissions().mode() & 0o777);
    assert_eq!(mode.ok(), Some(0o640), "the file's permissions are kept");
    // No temp file left beside it.
    let left: Vec<String> = std::fs::read_dir(dir.join("xdg/mcp-harness"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // A file with comments is read (JSONC) but never rewritten: its comments would be lost.
    let commented = "{\n  // mine\n  \"mcpServers\": {\"zz\": {\"command\": \"zz-mcp\"}}\n}\n";
    std::fs::write(&path, commented).expect("write");
    let (code, _, err) = run_in(&dir, &["add", "other", "--", "x"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("comments") && err.contains("config.json"),
        "{err}"
    );
    assert_eq!(read(&path), commented);
    let (code, out, _) = run_in(&dir, &["list"], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("zz-mcp"), "{out}");
    // A pair without its separator may be the value alone: it is not echoed.
    let (code, _, err) = run_in(
        &dir,
        &[
            "add",
            "tok",
            "--env",
            "A=1",
            "--env",
            "ghp_CANARY_TOKEN",
            "--",
            "x",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--env number 2 has no `=`"), "{err}");
    assert!(!err.contains("CANARY"), "{err}");
}

#[test]
fn adding_an_existing_name_needs_force_and_invalid_servers_are_refused() {
    let dir = temp_dir("force");
    let path = user_config(&dir);
    let (code, _, err) = run_in(&dir, &["add", "dup", "--", "first"], &[]);
    assert_eq!(code, 0, "{err}");
    let before = read(&path);
    let (code, _, err) = run_in(&dir, &["add", "dup", "--", "second"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("already exists") && err.contains("mcpServers.dup") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(read(&path), before, "nothing written");
    let (code, out, err) = run_in(&dir, &["add", "--force", "dup", "--", "second"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replaced"), "{out}");
    assert_eq!(json(&read(&path))["mcpServers"]["dup"]["command"], "second");

    // What the config would refuse is refused before writing, naming the key.
    let (code, _, err) = run_in(
        &dir,
        &["add-json", "bad", r#"{"command": "x", "colour": 1}"#],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("colour") && err.contains("bad"), "{err}");
    let (code, _, err) = run_in(&dir, &["add", "a__b", "--", "x"], &[]);
    assert_eq!(code, 2, "{err}");
    // `--config` means "read only this file"; edits write the scopes' files, and say so.
    let (code, _, err) = run_in(&dir, &["add", "--config", "x.json", "n", "--", "x"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--scope"), "{err}");
    assert!(json(&read(&path))["mcpServers"].get("bad").is_none());

    // A config that is not UTF-8 is refused, not written back with its bytes replaced.
    let good = std::fs::read(&path).expect("read");
    let mut bad = br#"{"mcpServers": {"c": {"command": "caf"#.to_vec();
    bad.extend_from_slice(b"\xe9\"}}}");
    std::fs::write(&path, &bad).expect("write");
    let (code, _, err) = run_in(&dir, &["add", "n", "--", "x"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not UTF-8"), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), bad, "left as it was");
    std::fs::write(&path, good).expect("restore");

    // `--scope user|project` or a last `--force` after a stdio command without `--` can only
    // be ours (they would be the command's arguments, in the wrong scope): refused. `-e` and
    // `--header` are servers' own too (`docker run -e VAR`, `mcp-remote URL --header …`):
    // written as arguments, with a note; the value never quoted.
    let before = read(&path);
    for words in [
        &["add", "fs", "npx", "-y", "server-fs", "--scope", "project"][..],
        &["add", "fs", "npx", "-y", "server-fs", "--force"],
    ] {
        let (code, out, err) = run_in(&dir, words, &[]);
        assert_eq!(code, 2, "{words:?}: {out}{err}");
        assert!(
            err.contains("after the command") && err.contains(" -- COMMAND"),
            "{err}"
        );
    }
    assert_eq!(read(&path), before, "nothing written");
    assert!(!dir.join(".mcp-harness.json").exists());
    let (code, out, err) = run_in(
        &dir,
        &[
            "add",
            "dk",
            "docker",
            "run",
            "-e",
            "API_KEY=sk-LEAK23",
            "img",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("note: `-e` after the command"), "{out}");
    assert!(
        !out.contains("sk-LEAK23") && !err.contains("sk-LEAK23"),
        "{out}{err}"
    );
    let (code, _, err) = run_in(&dir, &["add", "py", "python", "-s", "-m", "server"], &[]);
    assert_eq!(code, 0, "`-s` of python is python's: {err}");
    // After `--` they are the command's own.
    let (code, _, err) = run_in(&dir, &["add", "own", "--", "tool", "-s", "x"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&read(&path))["mcpServers"]["own"]["args"],
        serde_json::json!(["-s", "x"])
    );
}

/// An `add` whose server is a duplicate of one already configured (the same command, args,
/// env and cwd) says which of the two the merge leaves out, instead of knocking out a working
/// server without a word.
#[test]
fn an_add_that_duplicates_a_server_says_which_is_left_out() {
    let dir = temp_dir("duplicate");
    let (code, out, err) = run_in(&dir, &["add", "fx", "--", "fixture", "--flag"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("note:"), "{out}");
    let (code, out, err) = run_in(
        &dir,
        &[
            "add-json",
            "a-copy",
            r#"{"command": "fixture", "args": ["--flag"]}"#,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("note: server \"fx\" is not loaded: a duplicate")
            && out.contains("as \"a-copy\""),
        "{out}"
    );
    let (code, out, err) = run_in(&dir, &["add", "other", "--", "fixture", "--other"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("note:"), "an unrelated add: {out}");
}

/// `list --server NAME` shows only those servers (a name not configured is an error listing
/// the configured ones); `--server` on an edit and `--connect` on any of these commands are
/// refused with what to use instead, nothing written.
#[test]
fn list_server_filters_and_flags_that_do_not_apply_are_refused() {
    let dir = temp_dir("flags");
    let path = user_config(&dir);
    for name in ["alpha", "beta"] {
        let (code, _, err) = run_in(&dir, &["add", name, "--", "x"], &[]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, err) = run_in(&dir, &["list", "--server", "beta", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let names: Vec<String> = json(&out)
        .as_array()
        .map(|servers| {
            servers
                .iter()
                .filter_map(|s| s["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, ["beta"], "{out}");
    let (code, _, err) = run_in(&dir, &["list", "--server", "gamma"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("gamma") && err.contains("alpha, beta"),
        "{err}"
    );

    let before = read(&path);
    let (code, _, err) = run_in(&dir, &["remove", "alpha", "--server", "beta"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("drop --server"), "{err}");
    let (code, _, err) = run_in(&dir, &["--connect", "http://127.0.0.1:9/mcp", "list"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("servers") && err.contains("drop --connect"),
        "{err}"
    );
    assert_eq!(read(&path), before, "nothing written");
}

/// The qualified names `tools --json` lists.
fn tools(dir: &Path) -> Vec<String> {
    let (code, out, err) = run_in(dir, &["tools", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    json(&out)
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn enable_and_disable_change_what_tools_lists() {
    let dir = temp_dir("toggle");
    let marker = format!("cli-edit-toggle-{}", std::process::id());
    let (code, _, err) = run_in(
        &dir,
        &[
            "add",
            "fx",
            "--",
            bin(),
            "fixture-server",
            "--name",
            &marker,
            "--tools",
            "1",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let has = |names: &[String], n: &str| names.iter().any(|t| t == n);
    let all = tools(&dir);
    assert!(
        has(&all, "mcp__fx__echo") && has(&all, "mcp__fx__tool_0"),
        "{all:?}"
    );

    // One tool, by qualified name: the server's `excludeTools`.
    let (code, out, err) = run_in(&dir, &["disable", "mcp__fx__echo"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("excludeTools"), "{out}");
    assert_eq!(
        json(&read(&user_config(&dir)))["mcpServers"]["fx"]["excludeTools"],
        json(r#"["echo"]"#)
    );
    let now = tools(&dir);
    assert!(
        !has(&now, "mcp__fx__echo") && has(&now, "mcp__fx__tool_0"),
        "{now:?}"
    );
    let (code, _, err) = run_in(&dir, &["enable", "fx", "echo"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        json(&read(&user_config(&dir)))["mcpServers"]["fx"]
            .get("excludeTools")
            .is_none()
    );
    assert!(has(&tools(&dir), "mcp__fx__echo"));

    // The whole server: `"enabled": false`.
    let (code, _, err) = run_in(&dir, &["disable", "fx"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&read(&user_config(&dir)))["mcpServers"]["fx"]["enabled"],
        false
    );
    let now = tools(&dir);
    assert!(!now.iter().any(|t| t.starts_with("mcp__fx__")), "{now:?}");
    let (code, _, err) = run_in(&dir, &["enable", "fx"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(has(&tools(&dir), "mcp__fx__echo"));

    // A server the scope does not have: the error names the file and the scope that has it.
    let (code, _, err) = run_in(&dir, &["disable", "fx", "--scope", "project"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--scope user") && err.contains(".mcp-harness.json"),
        "{err}"
    );
}

/// `disable` asks the server for its tools first: a qualified name whose tool part is the raw
/// name sanitised writes the raw name (the one `excludeTools` matches), a name the server does
/// not list is refused with nothing written, and a server that cannot be asked (disabled) gets
/// the name as given with a note saying it was not checked.
#[test]
fn disabling_a_tool_checks_the_server_lists_it() {
    let dir = temp_dir("toggle-check");
    let (code, _, err) = run_in(
        &dir,
        &["add", "fx", "--", bin(), "fixture-server", "--hostile"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let listed = tools(&dir);
    let sanitised = listed
        .iter()
        .find(|t| t.starts_with("mcp__fx__path_like_name_with_spaces"))
        .unwrap_or_else(|| panic!("{listed:?}"))
        .clone();

    let (code, out, err) = run_in(&dir, &["disable", &sanitised], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"path/like.name with spaces\""), "{out}");
    assert_eq!(
        json(&read(&user_config(&dir)))["mcpServers"]["fx"]["excludeTools"],
        json(r#"["path/like.name with spaces"]"#)
    );
    assert!(!tools(&dir).contains(&sanitised));
    // Enabled by the same qualified name: its raw name leaves `excludeTools`.
    let (code, out, err) = run_in(&dir, &["enable", &sanitised], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("enabled tool"), "{out}");
    assert!(tools(&dir).contains(&sanitised));
    let (code, _, err) = run_in(&dir, &["disable", &sanitised], &[]);
    assert_eq!(code, 0, "{err}");
    // An enable of a name the server does not have is refused too (it read as enabled).
    let (code, _, err) = run_in(&dir, &["enable", "fx", "nosuch"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no tool \"nosuch\""), "{err}");

    // A typo: refused, naming the tools the server has; the file is untouched.
    let before = read(&user_config(&dir));
    let (code, _, err) = run_in(&dir, &["disable", "fx", "ech"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("has no tool \"ech\"") && err.contains("echo"),
        "{err}"
    );
    assert_eq!(read(&user_config(&dir)), before, "nothing written");

    // A disabled server is not started for the check: written as given, with a note.
    let (code, _, err) = run_in(&dir, &["disable", "fx"], &[]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_in(&dir, &["disable", "fx", "nope"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("not checked") && out.contains("is disabled"),
        "{out}"
    );
    assert_eq!(
        json(&read(&user_config(&dir)))["mcpServers"]["fx"]["excludeTools"][1],
        "nope"
    );
}

/// A host's own `"disabled": true` in `.mcp.json` (Cursor, Cline write it; the config load
/// reads it as disabled) is what `list`, `enable` and `disable` read too: `enable` removes it
/// (it said "already enabled" and changed nothing), and `disable` of an entry with a
/// `disabled` key sets that key, in the host's style.
#[test]
fn enable_and_disable_read_a_hosts_disabled_key() {
    let dir = temp_dir("host-disabled");
    let project = dir.join(".mcp.json");
    std::fs::write(
        &project,
        r#"{"mcpServers": {"off": {"command": "off-mcp", "disabled": true},
                            "on": {"command": "on-mcp", "disabled": false}}}"#,
    )
    .expect("write");
    let (code, out, err) = run_in(&dir, &["list", "--server", "off"], &[]);
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("off"))
        .unwrap_or_default();
    assert!(row.contains(" no "), "{out}");
    let (code, out, err) = run_in(&dir, &["enable", "off", "--scope", "project"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("enabled server \"off\""), "{out}");
    let written = json(&read(&project));
    assert_eq!(
        written["mcpServers"]["off"].get("disabled"),
        None,
        "{written}"
    );
    assert_eq!(
        written["mcpServers"]["off"].get("enabled"),
        None,
        "{written}"
    );
    let (code, out, err) = run_in(&dir, &["disable", "on", "--scope", "project"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("`mcpServers.on.disabled`"), "{out}");
    // Claude Code reads the file too, and not these keys: said.
    assert!(
        out.contains("note: Claude Code") && out.contains("disabledMcpjsonServers"),
        "{out}"
    );
    let written = json(&read(&project));
    assert_eq!(written["mcpServers"]["on"]["disabled"], true, "{written}");
    assert_eq!(
        written["mcpServers"]["on"].get("enabled"),
        None,
        "{written}"
    );
    // A remote server replaced in `.mcp.json` gets the `type` Claude Code needs, and keys
    // only mcp-harness reads are named.
    let definition = r#"{"url": "http://127.0.0.1:9/mcp", "toolTimeoutSec": 30}"#;
    let (code, out, err) = run_in(
        &dir,
        &[
            "add-json", "on", definition, "--scope", "project", "--force",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ignores `toolTimeoutSec`"), "{out}");
    assert_eq!(json(&read(&project))["mcpServers"]["on"]["type"], "http");
}

/// An edit of a definition another file shadows says so: the trusted project `.mcp.json`'s
/// server of a name takes effect over the user config's, so `disable` of the user's changes
/// nothing that runs; `remove` from the project leaves the user's, which takes effect now.
#[test]
fn an_edit_of_a_shadowed_definition_names_the_one_in_effect() {
    let dir = temp_dir("shadowed");
    std::fs::write(
        dir.join(".mcp.json"),
        r#"{"mcpServers": {"both": {"command": "project-both"}}}"#,
    )
    .expect("write");
    let (code, _, err) = run_in(&dir, &["trust", ".mcp.json"], &[]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_in(&dir, &["add", "both", "--", "user-both"], &[]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_in(&dir, &["disable", "both"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("takes effect is the one in ./.mcp.json") && out.contains("`--scope project`"),
        "{out}"
    );
    let (code, out, err) = run_in(&dir, &["remove", "both", "--scope", "project"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("still defined in ./xdg/mcp-harness/config.json")
            && out.contains("`--scope user`"),
        "{out}"
    );
    // Nothing shadows it now: no note.
    let (code, out, err) = run_in(&dir, &["enable", "both"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("note:"), "{out}");
}

/// A server a plugin folder brings is not in any file the edit commands write: `remove` says
/// where it comes from, not to look at `list` (which shows the files' servers).
#[test]
fn removing_a_plugins_server_names_the_plugin_file() {
    let dir = temp_dir("plugin");
    let plugin = dir.join("xdg/mcp-harness/plugins/tools");
    std::fs::create_dir_all(&plugin).expect("mkdir");
    std::fs::write(
        plugin.join(".mcp.json"),
        r#"{"mcpServers": {"plugsrv": {"command": "plug-mcp"}}}"#,
    )
    .expect("write");
    let (code, _, err) = run_in(&dir, &["remove", "plugsrv"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("plugins/tools/.mcp.json (plugin)") && err.contains("does not edit"),
        "{err}"
    );
}

#[test]
fn project_scope_writes_the_project_file_and_keeps_it_trusted() {
    let dir = temp_dir("project");
    let (code, _, err) = run_in(
        &dir,
        &["add", "--scope", "project", "proj", "--", "p-mcp"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&read(&dir.join(".mcp-harness.json")))["mcpServers"]["proj"]["command"],
        "p-mcp"
    );
    assert!(!user_config(&dir).exists(), "the user config is untouched");
    // Created by the user's own command: trusted, so its server would start.
    let (code, out, err) = run_in(&dir, &["config", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let server = &json(&out)["servers"][0];
    assert_eq!(server["name"], "proj");
    assert_eq!(server["scope"], "project");
    assert_eq!(server["untrusted"], serde_json::Value::Null, "{out}");
}

#[test]
fn import_from_claude_desktop_asks_skips_existing_names_and_imports() {
    let dir = temp_dir("import-desktop");
    // Claude Desktop on Linux: $XDG_CONFIG_HOME/Claude/claude_desktop_config.json.
    let desktop = dir.join("xdg/Claude/claude_desktop_config.json");
    std::fs::create_dir_all(desktop.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &desktop,
        format!(
            r#"{{"globalShortcut": "Ctrl+Space",
                "mcpServers": {{
                  "files": {{"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]}},
                  "kept": {{"command": "theirs"}},
                  "api": {{"command": "api-mcp", "env": {{"API_KEY": "{SECRET}"}}}}}}}}"#
        ),
    )
    .expect("write");
    let (code, _, err) = run_in(&dir, &["add", "kept", "--", "mine"], &[]);
    assert_eq!(code, 0, "{err}");

    // Not a terminal and no --yes: the plan, exit 2, nothing written.
    let before = read(&user_config(&dir));
    let (code, out, err) = run_in(&dir, &["config", "import", "--from", "claude-desktop"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("--yes"), "{err}");
    for needle in ["files", "api", "add", "skip: exists in"] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    assert!(!out.contains(SECRET) && !err.contains(SECRET), "{out}{err}");
    assert_eq!(read(&user_config(&dir)), before);

    let (code, out, err) = run_in(
        &dir,
        &["config", "import", "--from", "claude-desktop", "--yes"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("imported 2 servers") && out.contains("1 skipped"),
        "{out}"
    );
    assert!(!out.contains(SECRET), "{out}");
    let v = json(&read(&user_config(&dir)));
    assert_eq!(
        v["mcpServers"]["kept"]["command"], "mine",
        "an existing name is kept"
    );
    assert_eq!(v["mcpServers"]["files"]["command"], "npx");
    assert_eq!(v["mcpServers"]["api"]["env"]["API_KEY"], SECRET);
    assert!(
        v.get("globalShortcut").is_none(),
        "host settings are not ours"
    );

    let (code, out, err) = run_in(
        &dir,
        &[
            "config",
            "import",
            "--from",
            "claude-desktop",
            "--yes",
            "--force",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replace"), "{out}");
    assert_eq!(
        json(&read(&user_config(&dir)))["mcpServers"]["kept"]["command"],
        "theirs"
    );
}

#[test]
fn import_from_codex_and_gemini_reads_their_home_files() {
    let dir = temp_dir("import-codex");
    let codex = dir.join("home/.codex/config.toml");
    std::fs::create_dir_all(codex.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &codex,
        "model = \"o3\"\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\nargs = [\"--stdio\"]\n",
    )
    .expect("write");
    let (code, out, err) = run_in(&dir, &["config", "import", "--from", "codex", "--yes"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("docs") && out.contains("imported 1 server "),
        "{out}"
    );
    let v = json(&read(&user_config(&dir)));
    assert_eq!(v["mcpServers"]["docs"]["args"], json(r#"["--stdio"]"#));

    let gemini = dir.join("home/.gemini/settings.json");
    std::fs::create_dir_all(gemini.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &gemini,
        r#"{"theme": "dark", "mcpServers": {"remote": {"httpUrl": "https://g.example.test/mcp"}}}"#,
    )
    .expect("write");
    let (code, out, err) = run_in(
        &dir,
        &["config", "import", "--from", "gemini", "--yes"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("remote"), "{out}");
    let v = json(&read(&user_config(&dir)));
    assert_eq!(
        v["mcpServers"]["remote"]["url"],
        "https://g.example.test/mcp"
    );
    assert_eq!(
        v["mcpServers"]["docs"]["command"], "docs-mcp",
        "the earlier import stays"
    );

    // A host with no file: exit 2, naming where it looked.
    let (code, _, err) = run_in(
        &dir,
        &["config", "import", "--from", "cursor", "--yes"],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(".cursor/mcp.json"), "{err}");
}

#[test]
fn import_from_claude_code_cursor_and_vscode_reads_their_home_files() {
    let dir = temp_dir("import-editors");
    let put = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
    };
    // Claude Code's whole settings file: only `mcpServers` is ours.
    put(
        "home/.claude.json",
        r#"{"numStartups": 3, "mcpServers": {"cc": {"type": "stdio", "command": "cc-mcp"}}}"#,
    );
    put(
        "home/.cursor/mcp.json",
        r#"{"mcpServers": {"cur": {"url": "https://cursor.example.test/mcp"}}}"#,
    );
    // VS Code on Linux: $XDG_CONFIG_HOME/Code/User/mcp.json, `servers`.
    put(
        "xdg/Code/User/mcp.json",
        r#"{"servers": {"vs": {"type": "stdio", "command": "vs-mcp", "args": ["--x"]}}}"#,
    );
    for (host, server) in [("claude-code", "cc"), ("cursor", "cur"), ("vscode", "vs")] {
        let (code, out, err) = run_in(&dir, &["config", "import", "--from", host, "--yes"], &[]);
        assert_eq!(code, 0, "{host}: {err}");
        assert!(
            out.contains(server) && out.contains("imported 1 server "),
            "{host}: {out}"
        );
    }
    let v = json(&read(&user_config(&dir)));
    assert_eq!(v["mcpServers"]["cc"]["command"], "cc-mcp");
    assert_eq!(
        v["mcpServers"]["cur"]["url"],
        "https://cursor.example.test/mcp"
    );
    assert_eq!(v["mcpServers"]["vs"]["args"], json(r#"["--x"]"#));
    assert!(v.get("numStartups").is_none());
    // And what was written is a config every command loads.
    let (code, out, err) = run_in(&dir, &["config", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&out)["servers"].as_array().map(Vec::len),
        Some(3),
        "{out}"
    );
}

/// Runs the CLI in `dir` (private HOME/XDG as `run_in`) on a pseudo-terminal (stdin, stdout and
/// stderr), typing `answer` and a newline once `[y/N]` appears; returns the exit status and
/// everything the terminal showed.
fn run_answering(dir: &Path, args: &[&str], answer: &str) -> (i32, String) {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let (master, slave) = common::open_pty();
    let mut child = {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .current_dir(dir)
            .env("NO_COLOR", "1")
            .env("HOME", dir.join("home"))
            .env("XDG_CONFIG_HOME", dir.join("xdg"))
            .env_remove("RUST_LOG")
            .stdin(Stdio::from(slave.try_clone().expect("dup")))
            .stdout(Stdio::from(slave.try_clone().expect("dup")))
            .stderr(Stdio::from(slave));
        cmd.spawn().expect("run mcp-harness")
        // Our copies of the slave go with `cmd`: the reader sees the end once the CLI exits.
    };
    let mut writer = std::fs::File::from(master.try_clone().expect("dup"));
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut master = std::fs::File::from(master);
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut shown = Vec::new();
    let mut answered = false;
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(bytes) => shown.extend(bytes),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !answered && String::from_utf8_lossy(&shown).contains("[y/N]") {
            writer
                .write_all(format!("{answer}\n").as_bytes())
                .expect("type the answer");
            answered = true;
        }
    }
    let status = child.wait().expect("wait");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&shown).into_owned(),
    )
}

#[test]
fn import_on_a_terminal_asks_before_writing() {
    let dir = temp_dir("import-ask");
    let gemini = dir.join("home/.gemini/settings.json");
    std::fs::create_dir_all(gemini.parent().expect("parent")).expect("mkdir");
    std::fs::write(&gemini, r#"{"mcpServers": {"g": {"command": "g-mcp"}}}"#).expect("write");

    let (code, shown) = run_answering(&dir, &["config", "import", "--from", "gemini"], "n");
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("Write 1 server to") && shown.contains("nothing written"),
        "{shown}"
    );
    assert!(!user_config(&dir).exists(), "a no writes nothing");

    let (code, shown) = run_answering(&dir, &["config", "import", "--from", "gemini"], "y");
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("imported 1 server"), "{shown}");
    assert_eq!(
        json(&read(&user_config(&dir)))["mcpServers"]["g"]["command"],
        "g-mcp"
    );
}

/// Edits at once (two terminals, a script) take turns on the folder's lock: none is lost.
#[test]
fn concurrent_adds_lose_nothing() {
    const RUNS: usize = 3;
    const AT_ONCE: usize = 12;
    for run in 0..RUNS {
        let dir = temp_dir(&format!("race-{run}"));
        // Without the lock, most of these adds were lost (each read the file before another's rename).
        let (code, _, err) = run_in(&dir, &["add", "base", "--", "x"], &[]);
        assert_eq!(code, 0, "{err}");
        let children: Vec<std::process::Child> = (0..AT_ONCE)
            .map(|i| {
                std::process::Command::new(bin())
                    .args(["add", &format!("s{i}"), "--", "cmd"])
                    .current_dir(&dir)
                    .env("HOME", dir.join("home"))
                    .env("XDG_CONFIG_HOME", dir.join("xdg"))
                    .env_remove("RUST_LOG")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        for mut child in children {
            assert!(child.wait().expect("wait").success());
        }
        let v = json(&read(&user_config(&dir)));
        let servers = v["mcpServers"].as_object().cloned().unwrap_or_default();
        assert_eq!(
            servers.len(),
            AT_ONCE + 1,
            "run {run}: {:?}",
            servers.keys()
        );
    }
}
