//! `mcp-harness serve --http` serving SEP-2640 skills, driven over raw HTTP, in front of two
//! fixtures in `--skills` mode (`fx` and `sk`): the gateway declares the skills extension with
//! `directoryRead`; `skills/list` shows both servers' skills under `skill://SERVER/…` (names,
//! digests and sizes the upstream's); `skills/get` answers the listed entry; every file of a
//! manifest read through the gateway verifies against its listed digest and size, and the read
//! reaches the owning upstream only (its `skill_reads` counts it, the other's does not);
//! `resources/directory/read` lists a skill's children under gateway URIs. A profile that may
//! not see `sk` gets none of its skills, `-32602` for `skills/get` and the directory, an error
//! for the read, and no `list_changed` when `sk` adds a skill, while the full client is told.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::gateway::{EventStream, free_addr, http, message};
use common::{bin, temp_home};
use rmcp::model::{Skill, SkillResources};
use serde_json::{Value, json};

const FULL_TOKEN: &str = "full-skills-token-1234567890";
const NARROW_TOKEN: &str = "narrow-skills-token-1234567890";
const PARTIAL_TOKEN: &str = "partial-skills-token-1234567890";

/// A session of one bearer token over raw Streamable HTTP.
struct Client<'a> {
    session: common::gateway::Session<'a>,
    next: u64,
}

impl<'a> Client<'a> {
    /// Opens a session (initialize + initialized): the client and the initialize result.
    fn open(addr: &'a str, token: &str) -> (Self, Value) {
        let (session, info) = common::gateway::Session::open(addr, token, json!({}), "skills-test");
        (Self { session, next: 0 }, info)
    }

    /// A request in this session: its JSON-RPC response (result or error).
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let (status, head, body) = self
            .session
            .post(&json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}));
        assert_eq!(status, 200, "{method}: {head}\n{body}");
        message(&body)
    }

    fn skills(&mut self) -> Vec<Skill> {
        let listed = self.request("skills/list", json!({}));
        serde_json::from_value(listed["result"]["skills"].clone())
            .unwrap_or_else(|e| panic!("skills/list: {e}: {listed}"))
    }

    /// The `skill_reads` counts of upstream `server`'s fixture.
    fn reads(&mut self, server: &str) -> Value {
        let called = self.request(
            "tools/call",
            json!({"name": format!("mcp__{server}__skill_reads"), "arguments": {}}),
        );
        called["result"]["structuredContent"].clone()
    }
}

/// `serve --http` with `config`; stopped (SIGTERM, then killed) on drop.
struct Gateway {
    child: Child,
    addr: String,
}

impl Gateway {
    fn start(dir: &Path, config: &Value) -> Self {
        let file = dir.join("gateway.json");
        std::fs::write(&file, config.to_string()).expect("write config");
        let addr = free_addr();
        let stderr = std::fs::File::create(dir.join("serve.log")).expect("log");
        let child = Command::new(bin())
            .arg("--config")
            .arg(&file)
            .args(["serve", "--http", &addr])
            .env("HOME", dir.join("home"))
            .env("XDG_CONFIG_HOME", dir.join("xdg"))
            .env("GW_FULL_TOKEN", FULL_TOKEN)
            .env("GW_NARROW_TOKEN", NARROW_TOKEN)
            .env("GW_PARTIAL_TOKEN", PARTIAL_TOKEN)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start mcp-harness serve");
        let gateway = Self { child, addr };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if std::net::TcpStream::connect(&gateway.addr).is_ok()
                && http(&gateway.addr, "GET", "/readyz", &[], "").0 == 200
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        gateway
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none()
            && start.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not a JSON-RPC error: {response}"))
}

fn uris(skills: &[Skill]) -> Vec<&str> {
    skills.iter().map(|s| s.uri.as_str()).collect()
}

#[test]
fn skills_are_served_under_server_uris_routed_to_their_owner_and_hidden_per_profile() {
    let dir = temp_home("serve-skills", "views");
    let marker = format!(
        "gw-skills-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let fixture =
        json!({"command": bin(), "args": ["fixture-server", "--skills", "--name", &marker]});
    let config = json!({
        "mcpServers": {"fx": fixture, "sk": fixture},
        "permissions": {"allow": ["mcp__fx__*", "mcp__sk__*"]},
        "gateway": {"clients": {
            "full": {"auth": {"type": "bearer", "tokenEnv": "GW_FULL_TOKEN"}},
            "narrow": {"auth": {"type": "bearer", "tokenEnv": "GW_NARROW_TOKEN"},
                       "servers": {"deny": ["sk"]}},
            "partial": {"auth": {"type": "bearer", "tokenEnv": "GW_PARTIAL_TOKEN"},
                        "resources": {"deny": ["skill://sk/pdf-processing/SKILL.md"]}}
        }}
    });
    let gateway = Gateway::start(&dir, &config);
    let addr = gateway.addr.clone();
    let (mut full, info) = Client::open(&addr, FULL_TOKEN);
    assert_eq!(
        info["capabilities"]["extensions"]["io.modelcontextprotocol/skills"],
        json!({"directoryRead": true}),
        "{info}"
    );

    let skills = full.skills();
    let pdf = "skill://sk/pdf-processing/SKILL.md";
    for uri in [
        "skill://fx/pdf-processing/SKILL.md",
        "skill://fx/release-notes/SKILL.md",
        pdf,
        "skill://sk/release-notes/SKILL.md",
    ] {
        assert!(uris(&skills).contains(&uri), "{uri}: {:?}", uris(&skills));
    }
    let listed = skills.iter().find(|s| s.uri == pdf).expect("listed");
    assert_eq!(listed.frontmatter.name, "pdf-processing");
    assert!(
        listed.frontmatter.extra.contains_key("metadata"),
        "{listed:?}"
    );
    let got = full.request("skills/get", json!({"uri": pdf}));
    let got: Skill = serde_json::from_value(got["result"]["skill"].clone()).expect("skills/get");
    assert_eq!(&got, listed);

    // Every file of the manifest, read through the gateway, is the bytes the listing describes,
    // and only `sk` was asked for it.
    let SkillResources::Files(files) = &listed.resources else {
        panic!("a manifest: {listed:?}")
    };
    assert_eq!(files.len(), 2, "{files:?}");
    for file in files {
        assert!(
            file.uri.starts_with("skill://sk/pdf-processing/"),
            "{file:?}"
        );
        let read = full.request("resources/read", json!({"uri": file.uri}));
        let contents = &read["result"]["contents"][0];
        assert_eq!(contents["uri"], json!(file.uri), "{read}");
        let text = contents["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{read}"));
        assert_eq!(file.verify(text.as_bytes()), Ok(()), "{}", file.uri);
    }
    let upstream = "skill://pdf-processing/SKILL.md";
    assert_eq!(full.reads("sk")[upstream], json!(1));
    assert_eq!(full.reads("fx")[upstream], json!(0));

    let directory = full.request(
        "resources/directory/read",
        json!({"uri": "skill://sk/pdf-processing"}),
    );
    let children: Vec<(String, String)> = directory["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{directory}"))
        .iter()
        .map(|c| {
            let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (field("uri"), field("mimeType"))
        })
        .collect();
    assert!(
        children.contains(&(pdf.into(), "text/markdown".into()))
            && children.contains(&(
                "skill://sk/pdf-processing/references".into(),
                "inode/directory".into()
            )),
        "{children:?}"
    );
    let not_a_directory = full.request("resources/directory/read", json!({"uri": pdf}));
    assert_eq!(error_code(&not_a_directory), -32602, "{not_a_directory}");

    // A profile denied one file: the directory's listing leaves it out, and a path that walks
    // back into it with `..` (which an upstream might resolve) is refused too.
    let (mut partial, _) = Client::open(&addr, PARTIAL_TOKEN);
    let directory = partial.request(
        "resources/directory/read",
        json!({"uri": "skill://sk/pdf-processing"}),
    );
    let listed: Vec<&str> = directory["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{directory}"))
        .iter()
        .filter_map(|c| c["uri"].as_str())
        .collect();
    assert!(!listed.contains(&pdf), "{listed:?}");
    assert!(
        listed.contains(&"skill://sk/pdf-processing/references"),
        "{listed:?}"
    );
    for walked in [
        "skill://sk/release-notes/../pdf-processing/SKILL.md",
        "skill://sk/release-notes/%2E%2E/pdf-processing/SKILL.md",
    ] {
        let refused = partial.request("resources/read", json!({"uri": walked}));
        assert!(refused.get("error").is_some(), "{walked}: {refused}");
    }
    assert_eq!(
        full.reads("sk")[upstream],
        json!(1),
        "a denied read reached sk"
    );

    // The narrow profile may not see `sk`: none of its skills, and nothing of it resolves.
    let (mut narrow, _) = Client::open(&addr, NARROW_TOKEN);
    let seen = narrow.skills();
    assert!(
        uris(&seen).contains(&"skill://fx/pdf-processing/SKILL.md"),
        "{:?}",
        uris(&seen)
    );
    assert!(
        !uris(&seen).iter().any(|u| u.starts_with("skill://sk/")),
        "{:?}",
        uris(&seen)
    );
    let hidden = narrow.request("skills/get", json!({"uri": pdf}));
    assert_eq!(error_code(&hidden), -32602, "{hidden}");
    let hidden = narrow.request(
        "resources/directory/read",
        json!({"uri": "skill://sk/pdf-processing"}),
    );
    assert_eq!(error_code(&hidden), -32602, "{hidden}");
    let hidden = narrow.request("resources/read", json!({"uri": pdf}));
    assert!(hidden.get("error").is_some(), "{hidden}");
    assert_eq!(
        full.reads("sk")[upstream],
        json!(1),
        "the hidden read reached sk"
    );

    // A skill `sk` adds reaches the full client (resources/list_changed: skills have no
    // list_changed of their own) and its listing; the narrow client is not told. Its first
    // notification is the tool `fx` adds afterwards, which both see.
    full.request("resources/list", json!({}));
    narrow.request("resources/list", json!({}));
    let mut full_stream =
        EventStream::open(full.session.addr, &full.session.token, &full.session.id);
    let mut narrow_stream = EventStream::open(
        narrow.session.addr,
        &narrow.session.token,
        &narrow.session.id,
    );
    let added = full.request(
        "tools/call",
        json!({"name": "mcp__sk__add_skill", "arguments": {"name": "new-skill", "description": "Added now"}}),
    );
    assert_eq!(added["result"]["isError"], json!(false), "{added}");
    assert_eq!(
        full_stream.next_method().as_deref(),
        Some("notifications/resources/list_changed")
    );
    // Skills are re-listed after the resources they ride on (the same or a later revision).
    let start = Instant::now();
    while !uris(&full.skills()).contains(&"skill://sk/new-skill/SKILL.md") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the added skill was never listed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let added = full.request(
        "tools/call",
        json!({"name": "mcp__fx__add_tool", "arguments": {"name": "after_skill"}}),
    );
    assert_eq!(added["result"]["isError"], json!(false), "{added}");
    assert_eq!(
        narrow_stream.next_method().as_deref(),
        Some("notifications/tools/list_changed")
    );
    drop(gateway);
    assert_eq!(
        common::wait_gone(&marker),
        Vec::<u32>::new(),
        "upstreams left"
    );
}
