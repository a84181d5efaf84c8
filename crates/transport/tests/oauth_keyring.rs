//! The token store against a real Secret Service: a private D-Bus session bus (`dbus-daemon`
//! with a config of its own: no service activation) and `gnome-keyring-daemon` (secrets only,
//! its login keyring made and unlocked with a password on stdin), both in a temporary HOME.
//!
//! Invariants: the store runs in child processes of this test binary, each given the private
//! bus's address and a mode (`MCP_HARNESS_TOKEN_STORE`), so nothing else ever sees the bus and
//! no environment variable is set in a running process; this file holds one test (tests of one
//! binary run in parallel threads). Every wait is bounded, and both daemons are killed and reaped
//! when the test ends, passed or failed. Needs `dbus-daemon` and `gnome-keyring-daemon`
//! (`.ci/install-peers.sh` installs them).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mcp_harness_transport::auth::os_keyring;
use mcp_harness_transport::auth::{AuthContext, FileCredentialStore, TokenLocation, server_key};
use rmcp::transport::auth::{CredentialStore, OAuthTokenResponse, StoredCredentials};

const TEST: &str = "tokens_live_in_a_real_secret_service_and_the_file_only_marks_them";
/// Set in a child: the phase it runs.
const PHASE_VAR: &str = "MCP_HARNESS_KEYRING_TEST_PHASE";
/// In the daemons' command lines (their files are under it): `cargo xtask ci` looks for it.
const MARKER: &str = "mcp-harness-keyring-test";

const SERVER: &str = "kr-srv";
const URL: &str = "https://mcp.example.com/mcp";
const OLD_ACCESS: &str = "old-access-SECRET-1";
const OLD_REFRESH: &str = "old-refresh-SECRET-2";
const ACCESS: &str = "access-SECRET-3";
const REFRESH: &str = "refresh-SECRET-4";
const SECRETS: [&str; 4] = [OLD_ACCESS, OLD_REFRESH, ACCESS, REFRESH];

fn credentials(access: &str, refresh: &str) -> StoredCredentials {
    let token: OAuthTokenResponse = serde_json::from_value(serde_json::json!({
        "access_token": access, "token_type": "Bearer", "expires_in": 3600,
        "refresh_token": refresh
    }))
    .unwrap();
    StoredCredentials::new("client-1".into(), Some(token), vec!["mcp".into()], Some(1))
}

fn tokens(store: &FileCredentialStore) -> Option<(String, String)> {
    let creds = store.read().unwrap()?.credentials?;
    let token = serde_json::to_value(creds.token_response?).unwrap();
    Some((
        token["access_token"].as_str()?.to_string(),
        token["refresh_token"].as_str()?.to_string(),
    ))
}

fn pair(access: &str, refresh: &str) -> Option<(String, String)> {
    Some((access.to_string(), refresh.to_string()))
}

/// One phase, in a child process whose environment points at the private bus.
fn phase(name: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ctx = AuthContext::new();
    let store = ctx.store(SERVER, URL);
    match name {
        "probe" => os_keyring::available().expect("a Secret Service answers"),
        // MCP_HARNESS_TOKEN_STORE=file: a token file as every version before the keyring wrote.
        "legacy" => {
            rt.block_on(store.save(credentials(OLD_ACCESS, OLD_REFRESH)))
                .unwrap();
            store.update(|f| f.login = Some("login-1".into())).unwrap();
            assert_eq!(store.location().unwrap(), Some(TokenLocation::File));
        }
        // auto: the old file is read as it is; the next write moves the secrets.
        "migrate" => {
            assert_eq!(store.location().unwrap(), Some(TokenLocation::File));
            assert_eq!(tokens(&store), pair(OLD_ACCESS, OLD_REFRESH));
            rt.block_on(store.save(credentials(ACCESS, REFRESH)))
                .unwrap();
            assert_eq!(
                store.location().unwrap(),
                Some(TokenLocation::Keyring {
                    account: server_key(SERVER, URL)
                })
            );
            let loaded = rt.block_on(store.load()).unwrap().expect("stored");
            assert_eq!(loaded.client_id, "client-1");
            assert_eq!(tokens(&store), pair(ACCESS, REFRESH));
            // What the file held besides the tokens went along (the login id of step-up).
            assert_eq!(
                store.read().unwrap().unwrap().login.as_deref(),
                Some("login-1")
            );
            // Another store of the same server in this context.
            let again = ctx.store(SERVER, URL);
            assert_eq!(tokens(&again), pair(ACCESS, REFRESH));
            let debug = format!("{store:?} {:?}", store.read().unwrap());
            assert!(!SECRETS.iter().any(|s| debug.contains(s)), "{debug}");
        }
        // keyring, a new process: nothing cached, the item is read over D-Bus.
        "second" => {
            assert_eq!(tokens(&store), pair(ACCESS, REFRESH));
            // The refresh lock still works on the marker's directory.
            let guard = rt.block_on(store.acquire_refresh_guard()).unwrap();
            assert!(guard.is_some());
            drop(guard);
            store.update(|f| f.login = Some("login-2".into())).unwrap();
            assert_eq!(
                store.read().unwrap().unwrap().login.as_deref(),
                Some("login-2")
            );
        }
        // file: the marker is refused clearly, the secrets are not quoted.
        "file-mode" => {
            let err = store.read().unwrap_err().to_string();
            assert!(
                err.contains("OS keyring") && err.contains("MCP_HARNESS_TOKEN_STORE=file"),
                "{err}"
            );
            assert!(!SECRETS.iter().any(|s| err.contains(s)), "{err}");
            let err = store.remove().unwrap_err().to_string();
            assert!(err.contains("OS keyring"), "{err}");
        }
        // auto: logout's `remove` deletes the item and the marker.
        "remove" => {
            assert_eq!(
                store.read().unwrap().unwrap().login.as_deref(),
                Some("login-2")
            );
            assert!(store.remove().unwrap());
            assert_eq!(store.location().unwrap(), None);
            assert!(store.read().unwrap().is_none());
            assert!(!store.remove().unwrap());
        }
        // keyring, a new process: no item is left.
        "gone" => {
            let account = server_key(SERVER, URL);
            let item = os_keyring::get(&account).unwrap();
            assert!(item.is_none(), "the keyring item is left");
            assert!(!os_keyring::delete(&account).unwrap());
            assert!(store.read().unwrap().is_none());
        }
        other => panic!("unknown phase {other}"),
    }
}

/// The private bus and keyring; killed, reaped and removed on drop.
struct Daemons {
    root: PathBuf,
    address: String,
    bus: Child,
    keyring: Option<Child>,
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for child in self
            .keyring
            .iter_mut()
            .chain(std::iter::once(&mut self.bus))
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn private_dir(path: &Path) {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
}

fn log_file(path: &Path) -> Stdio {
    Stdio::from(std::fs::File::create(path).unwrap())
}

fn tail(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Daemons {
    fn start() -> Self {
        for tool in ["dbus-daemon", "gnome-keyring-daemon"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                found,
                "`{tool}` is missing: run `bash .ci/install-peers.sh`"
            );
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let root = std::env::temp_dir().join(format!("{MARKER}-{}-{nanos}", std::process::id()));
        for sub in ["home", "data", "config", "run", "control"] {
            private_dir(&root.join(sub));
        }
        let socket = root.join("bus");
        let config = root.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let mut bus = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file(&root.join("bus.log")))
            .spawn()
            .expect("start dbus-daemon");
        // The address is printed once the bus listens.
        let stdout = bus.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
            let _ = tx.send(line);
        });
        let mut daemons = Daemons {
            address: String::new(),
            bus,
            keyring: None,
            root,
        };
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        assert!(
            line.starts_with("unix:"),
            "dbus-daemon printed no address: {line:?}; log: {}",
            tail(&daemons.root.join("bus.log"))
        );
        daemons.address = line.trim().to_string();

        let root = &daemons.root;
        let mut keyring = Command::new("gnome-keyring-daemon")
            .args(["--foreground", "--components=secrets", "--unlock"])
            .arg(format!(
                "--control-directory={}",
                root.join("control").display()
            ))
            .env("DBUS_SESSION_BUS_ADDRESS", &daemons.address)
            .env("HOME", root.join("home"))
            .env("XDG_DATA_HOME", root.join("data"))
            .env("XDG_CONFIG_HOME", root.join("config"))
            .env("XDG_RUNTIME_DIR", root.join("run"))
            .env_remove("GNOME_KEYRING_CONTROL")
            .stdin(Stdio::piped())
            .stdout(log_file(&root.join("keyring.out")))
            .stderr(log_file(&root.join("keyring.log")))
            .spawn()
            .expect("start gnome-keyring-daemon");
        // The login keyring's password; closing stdin ends it.
        let mut stdin = keyring.stdin.take().unwrap();
        stdin.write_all(b"test-password").unwrap();
        drop(stdin);
        daemons.keyring = Some(keyring);
        daemons
    }

    /// Runs `phase` in a child of this test binary with `mode`; its output on failure.
    fn run(&self, phase: &str, mode: &str) -> Result<(), String> {
        let out = self.root.join(format!("{phase}.out"));
        let log = std::fs::File::create(&out).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(PHASE_VAR, phase)
            .env("MCP_HARNESS_TOKEN_STORE", mode)
            .env("DBUS_SESSION_BUS_ADDRESS", &self.address)
            .env("HOME", self.root.join("home"))
            .env("XDG_CONFIG_HOME", self.root.join("config"))
            .env("XDG_RUNTIME_DIR", self.root.join("run"))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start a phase");
        let deadline = Instant::now() + Duration::from_secs(90);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("phase `{phase}` did not end: {}", tail(&out)));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "phase `{phase}` ({mode}) failed ({status}):\n{}",
                tail(&out)
            ))
        }
    }

    fn token_dir(&self) -> PathBuf {
        self.root.join("config/mcp-harness/tokens")
    }
}

#[test]
fn tokens_live_in_a_real_secret_service_and_the_file_only_marks_them() {
    if let Ok(name) = std::env::var(PHASE_VAR) {
        return phase(&name);
    }
    let daemons = Daemons::start();
    // The keyring daemon owns its bus name and its login keyring a moment after it starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = daemons.run("probe", "keyring") {
        assert!(
            Instant::now() < deadline,
            "no Secret Service answered: {e}\nkeyring log: {}",
            tail(&daemons.root.join("keyring.log"))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let file = daemons
        .token_dir()
        .join(format!("{}.json", server_key(SERVER, URL)));

    daemons.run("legacy", "file").unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(OLD_REFRESH), "a plain token file: {text}");

    daemons.run("migrate", "auto").unwrap();
    let marker = |file: &Path| -> serde_json::Value {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            !SECRETS.iter().any(|s| text.contains(s)),
            "secrets in the file: {text}"
        );
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        serde_json::from_str(&text).unwrap()
    };
    let first = marker(&file);
    assert_eq!(first["server"], SERVER);
    assert_eq!(first["url"], URL);
    assert_eq!(first["storage"], "keyring");
    assert_eq!(
        first.as_object().unwrap().len(),
        4,
        "server, url, storage, revision only: {first}"
    );

    daemons.run("second", "keyring").unwrap();
    let second = marker(&file);
    assert_ne!(
        first["revision"], second["revision"],
        "a write changes the marker"
    );

    daemons.run("file-mode", "file").unwrap();
    assert_eq!(marker(&file), second, "file mode left the marker alone");

    daemons.run("remove", "auto").unwrap();
    assert!(!file.exists());
    daemons.run("gone", "keyring").unwrap();
    // Nothing is left in the token dir but the (empty) lock file, which stays: another
    // process may hold it, and one made anew would let two refreshes run at once.
    let left: Vec<_> = std::fs::read_dir(daemons.token_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
