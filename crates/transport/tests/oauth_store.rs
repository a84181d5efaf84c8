//! The file token store: 0600 files in a 0700 directory, atomic replacement, no token in any
//! error or `Debug` output, and a refresh lock that excludes a second holder (another process or
//! another store on the same file).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use mcp_harness_transport::auth::{FileCredentialStore, server_key};
use rmcp::transport::auth::{CredentialStore, OAuthTokenResponse, StoredCredentials};

const ACCESS: &str = "access-SECRET-123";
const REFRESH: &str = "refresh-SECRET-456";

/// Removes a test's folder when the test ends, unless it failed (then it is kept to look at).
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A `tokens` folder not made yet, inside a fresh folder that goes with the returned guard.
fn temp_dir() -> (Scratch, std::path::PathBuf) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let parent =
        std::env::temp_dir().join(format!("mcp-harness-store-{}-{nanos}", std::process::id()));
    let tokens = parent.join("tokens");
    (Scratch(parent), tokens)
}

fn credentials() -> StoredCredentials {
    let token: OAuthTokenResponse = serde_json::from_value(serde_json::json!({
        "access_token": ACCESS, "token_type": "Bearer", "expires_in": 3600,
        "refresh_token": REFRESH
    }))
    .unwrap();
    StoredCredentials::new("client-1".into(), Some(token), vec!["mcp".into()], Some(1))
}

#[tokio::test]
async fn saves_0600_in_0700_and_round_trips() {
    let (_scratch, dir) = temp_dir();
    let store = FileCredentialStore::in_dir(dir.clone(), "srv", "https://example.com/mcp");
    assert!(store.load().await.unwrap().is_none());
    store.save(credentials()).await.unwrap();

    let mode = std::fs::metadata(store.path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let dmode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(dmode, 0o700);
    // The file name is a hash: neither the server name nor the URL shows in the path.
    let name = store
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        name,
        format!("{}.json", server_key("srv", "https://example.com/mcp"))
    );
    assert!(!name.contains("srv") && !name.contains("example"));

    let loaded = store.load().await.unwrap().expect("stored");
    assert_eq!(loaded.client_id, "client-1");
    let token = loaded.token_response.unwrap();
    assert_eq!(
        serde_json::to_value(&token).unwrap()["refresh_token"],
        REFRESH
    );
    // No temporary files are left behind.
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(entries.len(), 1, "only the token file: {entries:?}");

    store.clear().await.unwrap();
    assert!(store.load().await.unwrap().is_none());
    assert!(store.remove().unwrap());
    assert!(!store.remove().unwrap());
}

#[tokio::test]
async fn a_store_for_another_server_or_url_sees_nothing() {
    let (_scratch, dir) = temp_dir();
    let store = FileCredentialStore::in_dir(dir.clone(), "srv", "https://a.example/mcp");
    store.save(credentials()).await.unwrap();
    let moved = FileCredentialStore::in_dir(dir.clone(), "srv", "https://b.example/mcp");
    assert!(moved.load().await.unwrap().is_none());
    let other = FileCredentialStore::in_dir(dir, "other", "https://a.example/mcp");
    assert!(other.load().await.unwrap().is_none());
}

#[tokio::test]
async fn no_token_in_errors_or_debug() {
    let (_scratch, dir) = temp_dir();
    let store = FileCredentialStore::in_dir(dir.clone(), "srv", "https://example.com/mcp");
    store.save(credentials()).await.unwrap();
    let debug = format!("{store:?} {:?}", store.load().await.unwrap());
    assert!(!debug.contains("SECRET"), "{debug}");

    // A corrupt file: the error names the server and the file, not what is in it.
    let mut text = std::fs::read_to_string(store.path()).unwrap();
    text.push_str("} trailing");
    std::fs::write(store.path(), &text).unwrap();
    let error = store.load().await.unwrap_err();
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("srv"), "{shown}");
    assert!(!shown.contains("SECRET"), "{shown}");
    let direct = store.read().unwrap_err();
    let shown = format!("{direct} {direct:?}");
    assert!(
        shown.contains("`srv`") && shown.contains(".json"),
        "{shown}"
    );
    assert!(!shown.contains("SECRET"), "{shown}");
}

#[tokio::test]
async fn refresh_guard_excludes_a_second_holder() {
    let (_scratch, dir) = temp_dir();
    let a = FileCredentialStore::in_dir(dir.clone(), "srv", "https://example.com/mcp");
    let b = FileCredentialStore::in_dir(dir, "srv", "https://example.com/mcp");
    let guard = a.acquire_refresh_guard().await.unwrap();
    let second = tokio::spawn(async move { b.acquire_refresh_guard().await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !second.is_finished(),
        "second holder waits while the first holds the lock"
    );
    drop(guard);
    tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("second holder proceeds once released")
        .unwrap()
        .unwrap();
}
