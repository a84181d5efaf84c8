//! The token store: one JSON file per server under the user's config dir,
//! `$XDG_CONFIG_HOME/mcp-harness/tokens/<server-hash>.json` (else `~/.config/...`), and, where a
//! Secret Service answers, the OS keyring ([`os_keyring`]): the server's JSON
//! document (which holds the secrets) is then the keyring item of service `mcp-harness` and
//! account `<server-hash>`, and the file is a marker without secrets,
//! `{"server", "url", "storage": "keyring", "revision"}`, still 0600 — the lock target and what
//! a running harness watches, as before. `MCP_HARNESS_TOKEN_STORE=auto|keyring|file` chooses
//! ([`StoreMode`]); a file with the secrets in it is read in any mode, and the next write in
//! keyring mode moves them into the keyring.
//!
//! Invariants: the directory is created 0700 and every file is written 0600 through a temporary
//! file renamed into place (a reader never sees half a file, another user never reads one), and
//! a file found readable by others is made 0600 when read, with a warning; a
//! refresh holds an exclusive `flock` on `<server-hash>.lock`, so two harness processes sharing
//! the store never spend the same refresh token twice, and a token found due is looked at again
//! under that lock before it is refreshed ([`FileCredentialStore::refresh_if_due`]), so one
//! refresh serves them all; nothing here prints a token (the store's `Debug` shows the path only,
//! errors name the server and the file, never its contents). The keyring item is written before
//! the marker that points at it (its `revision` is a hash of the item), so a reader that sees a
//! new marker finds the new item; a process keeps the last item it read for as long as the
//! marker's revision stays the same, so a request costs no D-Bus call. Which directory, and whose
//! copies of the keyring items, is the auth context's (`AuthContext`, which makes the stores):
//! this module keeps no process-wide state of its own.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, CredentialRefreshGuard,
    CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use sha2::Digest;

pub use super::os_keyring::StoreMode;
use super::os_keyring::{self, Backend};

tokio::task_local! {
    /// The lock file the current task holds already ([`FileCredentialStore::refresh_if_due`]):
    /// the refresh it runs takes no second lock (a second `flock` would wait for the first).
    static HELD_LOCK: PathBuf;
}

/// A stored token counts as due this much earlier than rmcp's own rule says, so that the check
/// of [`FileCredentialStore::refresh_if_due`] is never later than the one rmcp makes after it.
const DUE_MARGIN_SECS: u64 = 2;

/// The user's own token directory: `$XDG_CONFIG_HOME/mcp-harness/tokens`, else
/// `$HOME/.config/mcp-harness/tokens` (what a default `AuthContext` uses).
pub fn default_store_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from(".config"));
    base.join("mcp-harness").join("tokens")
}

/// The file name stem of `server` at `url`: a hash, so neither name nor URL leaks into paths and a
/// server whose URL changed never reuses tokens issued for the old one.
pub fn server_key(server: &str, url: &str) -> String {
    let digest = sha2::Sha256::digest(format!("{server}\n{url}").as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The OAuth client this harness is for one server: what a refresh needs besides the tokens.
#[derive(Clone, Serialize, Deserialize)]
pub struct ClientRecord {
    /// The client id.
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The client secret, for a confidential client.
    pub client_secret: Option<String>,
    /// The redirect URI the client registered.
    pub redirect_uri: String,
}

impl std::fmt::Debug for ClientRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientRecord")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[REDACTED]"),
            )
            .field("redirect_uri", &self.redirect_uri)
            .finish()
    }
}

/// One server's file.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct TokenFile {
    /// The server's name.
    pub server: String,
    /// The server's URL.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The registered client.
    pub client: Option<ClientRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The authorization server's metadata.
    pub metadata: Option<AuthorizationMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The tokens.
    pub credentials: Option<StoredCredentials>,
    /// The last 401 `WWW-Authenticate` challenge the server sent (a public header): `login`
    /// takes its scopes and metadata URL when its own probe is let through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
    /// Scopes a refused step-up needed (the union with the grant): `login` asks for them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_up_scopes: Vec<String>,
    /// A new id at each `login` (not at refreshes or step-ups): a process that sees it change
    /// knows the grant is new and renews the server's step-up budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// The server's DPoP key (base64url PKCS#8, [`DpopKey`](super::dpop::DpopKey)) when its
    /// authorization server binds tokens to one: made at `login`, used by every refresh and
    /// request until the next login. As secret as the tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_key: Option<String>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `ClientRecord` and rmcp's `StoredCredentials` redact their secrets themselves.
        f.debug_struct("TokenFile")
            .field("server", &self.server)
            .field("url", &crate::redact::Url(&self.url))
            .field("client", &self.client)
            .field("credentials", &self.credentials)
            .field("challenge", &self.challenge)
            .field("step_up_scopes", &self.step_up_scopes)
            .field("login", &self.login)
            .finish_non_exhaustive()
    }
}

/// Why the store could not be read or written. Names the server and the file, never a token.
#[derive(Debug, thiserror::Error)]
#[error("server `{server}`: token store {}: could not {action}: {reason}", .path.display())]
pub struct StoreError {
    /// The server's name.
    pub server: String,
    /// The file involved.
    pub path: PathBuf,
    /// What was being done (`read`, `write`, ...).
    pub action: &'static str,
    /// Why it failed.
    pub reason: String,
}

/// The action of a file that is not a token file (JSON that does not parse as one).
const UNPARSABLE: &str = "parse (delete it with `mcp-harness logout`)";

impl StoreError {
    /// Whether the file is there but is no token file (truncated, edited by hand): what a
    /// `login` replaces and a `logout` deletes.
    pub fn is_unparsable(&self) -> bool {
        self.action == UNPARSABLE
    }
}

/// This server's refresh lock, held until dropped ([`FileCredentialStore::lock`]): closing the
/// file releases the `flock`.
#[derive(Debug)]
pub struct StoreLock {
    _file: std::fs::File,
}

impl From<StoreError> for AuthError {
    fn from(e: StoreError) -> Self {
        AuthError::CredentialStoreError(e.to_string())
    }
}

/// The `storage` of a marker file.
const KEYRING: &str = "keyring";

/// The token file of a server whose tokens are in the OS keyring.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    server: String,
    url: String,
    storage: String,
    /// A hash of the keyring item's content: changes with every write.
    revision: String,
}

/// What every token file has: a marker has a `storage`, a file with the tokens in it none.
#[derive(Deserialize)]
struct Head {
    server: String,
    url: String,
    #[serde(default)]
    storage: Option<String>,
    #[serde(default)]
    revision: Option<String>,
}

/// Where a server's tokens are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenLocation {
    /// In the token file itself (0600).
    File,
    /// In the OS keyring: the item of service `mcp-harness` and this account; the token file
    /// only points at it.
    Keyring {
        /// The keyring item's account name.
        account: String,
    },
}

/// The revision of a keyring item's content.
fn revision_of(content: &[u8]) -> String {
    let digest = sha2::Sha256::digest(content);
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The keyring items one auth context read or wrote last, by account: (revision, document).
/// Shared by every store of that context (a clone shares it); two contexts never share one.
#[derive(Default)]
pub(crate) struct KeyringCache(Mutex<std::collections::HashMap<String, (String, TokenFile)>>);

impl KeyringCache {
    /// The document of `account` when the cached copy has `revision`.
    fn get(&self, account: &str, revision: &str) -> Option<TokenFile> {
        let cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (rev, file) = cache.get(account)?;
        (rev == revision).then(|| file.clone())
    }

    /// Keeps `entry` for `account` (`None`: forgets it).
    fn put(&self, account: &str, entry: Option<(String, TokenFile)>) {
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match entry {
            Some(entry) => cache.insert(account.to_string(), entry),
            None => cache.remove(account),
        };
    }
}

/// rmcp's [`CredentialStore`] on one server's token file (and, where it is used, its item in
/// the OS keyring).
#[derive(Clone)]
pub struct FileCredentialStore {
    server: String,
    url: String,
    dir: PathBuf,
    key: String,
    /// In the user's own token directory (a default auth context's, not one given with
    /// `AuthContext::in_dir` or `in_dir`): only such a store goes to the OS keyring in `auto`
    /// mode.
    user_dir: bool,
    /// The copies of keyring items of the auth context this store belongs to.
    keyring: Arc<KeyringCache>,
}

impl std::fmt::Debug for FileCredentialStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCredentialStore")
            .field("server", &self.server)
            .field("path", &self.path())
            .finish()
    }
}

impl FileCredentialStore {
    /// The store of `server` at `url` in `dir`, on its own: its copies of keyring items are
    /// its own (an auth context's stores share theirs: `AuthContext::store`).
    pub fn in_dir(dir: PathBuf, server: &str, url: &str) -> Self {
        Self::in_context(dir, false, Arc::default(), server, url)
    }

    /// The store of `server` at `url` in `dir` (`user_dir`: the user's own), with the keyring
    /// copies `keyring` of its auth context.
    pub(crate) fn in_context(
        dir: PathBuf,
        user_dir: bool,
        keyring: Arc<KeyringCache>,
        server: &str,
        url: &str,
    ) -> Self {
        Self {
            server: server.to_string(),
            url: url.to_string(),
            key: server_key(server, url),
            dir,
            user_dir,
            keyring,
        }
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The token file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.key))
    }

    fn lock_path(&self) -> PathBuf {
        self.dir.join(format!("{}.lock", self.key))
    }

    /// The account of this server's keyring item: the server key, and for a store outside the
    /// user's token directory a hash of that directory too (two such stores never share one).
    pub fn keyring_account(&self) -> String {
        if self.user_dir {
            return self.key.clone();
        }
        let dir = revision_of(self.dir.as_os_str().as_encoded_bytes());
        format!("{}.{}", self.key, &dir[..8])
    }

    /// The mode and the backend it picks for this store.
    fn backend(&self) -> Result<(StoreMode, Backend), StoreError> {
        let path = self.path();
        let mode =
            StoreMode::from_env().map_err(|e| self.error(&path, "choose the token store", e))?;
        let backend = os_keyring::select(mode, self.user_dir, os_keyring::available)
            .map_err(|e| self.error(&path, "use the OS keyring", e))?;
        Ok((mode, backend))
    }

    /// Why a marker file cannot be followed to the keyring in `mode`.
    fn keyring_unused(&self, mode: StoreMode) -> String {
        match mode {
            StoreMode::Auto if !self.user_dir => format!(
                "its tokens are in the OS keyring, which `auto` does not use for a token \
                 directory of its own: set {}=keyring",
                os_keyring::MODE_VAR
            ),
            StoreMode::File => format!(
                "its tokens are in the OS keyring, which {}=file keeps away from: set it to auto \
                 or keyring (`mcp-harness logout` then deletes them)",
                os_keyring::MODE_VAR
            ),
            _ => format!(
                "its tokens are in the OS keyring, which does not answer here ({}); log in \
                 again where it does, or with {}=file",
                os_keyring::available()
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
                os_keyring::MODE_VAR
            ),
        }
    }

    /// Where the tokens are now: `None` when there is no token file.
    pub fn location(&self) -> Result<Option<TokenLocation>, StoreError> {
        let path = self.path();
        let Some((_, head)) = self.read_bytes(&path)? else {
            return Ok(None);
        };
        Ok(Some(match head.storage {
            Some(_) => TokenLocation::Keyring {
                account: self.keyring_account(),
            },
            None => TokenLocation::File,
        }))
    }

    /// The file's bytes and what they are; `None` without a file.
    fn read_bytes(&self, path: &Path) -> Result<Option<(Vec<u8>, Head)>, StoreError> {
        let mut file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error(path, "read", e)),
        };
        self.keep_private(path, &file);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes)
            .map_err(|e| self.error(path, "read", e))?;
        // serde_json's messages quote no input, only positions.
        let head: Head =
            serde_json::from_slice(&bytes).map_err(|e| self.error(path, UNPARSABLE, e))?;
        if let Some(storage) = head.storage.as_deref().filter(|s| *s != KEYRING) {
            let reason = format!("unknown storage `{storage}` (written by a newer mcp-harness?)");
            return Err(self.error(path, "read", reason));
        }
        Ok(Some((bytes, head)))
    }

    /// A token file others may read (copied in by hand, or its mode widened) is made 0600
    /// again, and the user told; where that fails, told what to run.
    fn keep_private(&self, path: &Path, file: &std::fs::File) {
        let Ok(mode) = file.metadata().map(|m| m.permissions().mode() & 0o777) else {
            return;
        };
        if mode & 0o077 == 0 {
            return;
        }
        let server = &self.server;
        match file.set_permissions(std::fs::Permissions::from_mode(0o600)) {
            Ok(()) => tracing::warn!(
                path = %path.display(),
                "the token file of server \"{server}\" was readable by others (mode {mode:o}); made it 0600"
            ),
            Err(error) => tracing::warn!(
                path = %path.display(),
                %error,
                "the token file of server \"{server}\" is readable by others (mode {mode:o}) and could not be made 0600: run `chmod 600` on it"
            ),
        }
    }

    fn error(&self, path: &Path, action: &'static str, reason: impl ToString) -> StoreError {
        StoreError {
            server: self.server.clone(),
            path: path.to_path_buf(),
            action,
            reason: reason.to_string(),
        }
    }

    fn ensure_dir(&self) -> Result<(), StoreError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| self.error(&self.dir, "create the directory", e))?;
        // An existing directory may be wider; tokens never sit in one others can list.
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| self.error(&self.dir, "restrict the directory to 0700", e))
    }

    /// The whole file; `None` when there is none. A file for another server or URL (a hash
    /// collision or a hand-copied file) is treated as absent.
    ///
    /// A marker file is followed to the keyring item (a missing item is no tokens); a file with
    /// the tokens in it is read in any mode.
    pub fn read(&self) -> Result<Option<TokenFile>, StoreError> {
        let path = self.path();
        let Some((bytes, head)) = self.read_bytes(&path)? else {
            return Ok(None);
        };
        if head.server != self.server || head.url != self.url {
            return Ok(None);
        }
        if head.storage.is_some() {
            return self.read_keyring(&path, head.revision.as_deref().unwrap_or_default());
        }
        let file: TokenFile =
            serde_json::from_slice(&bytes).map_err(|e| self.error(&path, UNPARSABLE, e))?;
        Ok(Some(file))
    }

    /// The document of the keyring item a marker of `revision` points at.
    fn read_keyring(&self, path: &Path, revision: &str) -> Result<Option<TokenFile>, StoreError> {
        let (mode, backend) = self.backend()?;
        if backend == Backend::File {
            return Err(self.error(path, "read the tokens", self.keyring_unused(mode)));
        }
        let account = self.keyring_account();
        if let Some(file) = self.keyring.get(&account, revision) {
            return Ok(Some(file));
        }
        let Some(content) = os_keyring::get(&account)
            .map_err(|e| self.error(path, "read the tokens from the OS keyring", e))?
        else {
            return Ok(None);
        };
        let file: TokenFile = serde_json::from_slice(&content).map_err(|e| {
            let action = "parse the OS keyring's item (delete it with `mcp-harness logout`)";
            self.error(path, action, e)
        })?;
        if file.server != self.server || file.url != self.url {
            return Ok(None);
        }
        let revision_now = revision_of(&content);
        if revision_now == revision {
            self.keyring
                .put(&account, Some((revision_now, file.clone())));
        }
        Ok(Some(file))
    }

    /// Replaces the tokens: in the OS keyring (and the file by a marker) where the mode says
    /// so, else in the file. In `auto` mode a keyring that refuses them sends them to the file.
    pub fn write(&self, file: &TokenFile) -> Result<(), StoreError> {
        let path = self.path();
        let json =
            serde_json::to_vec_pretty(file).map_err(|e| self.error(&path, "serialise", e))?;
        let (mode, backend) = self.backend()?;
        if backend == Backend::Keyring {
            match self.write_keyring(&path, file, json.clone()) {
                Ok(()) => return Ok(()),
                Err(e) if mode == StoreMode::Auto => tracing::warn!(
                    server = %self.server,
                    "the OS keyring did not take the tokens ({}); they are kept in {} (0600)",
                    e.reason,
                    path.display()
                ),
                Err(e) => return Err(e),
            }
        }
        self.write_file(&json)
    }

    /// The document into the keyring item, then the marker that points at it.
    fn write_keyring(
        &self,
        path: &Path,
        file: &TokenFile,
        json: Vec<u8>,
    ) -> Result<(), StoreError> {
        let account = self.keyring_account();
        let revision = revision_of(&json);
        let label = format!(
            "mcp-harness tokens: server `{}` ({})",
            self.server, self.url
        );
        // Whatever happens next, this context's copy is stale.
        self.keyring.put(&account, None);
        os_keyring::set(&account, &label, json)
            .map_err(|e| self.error(path, "write the tokens to the OS keyring", e))?;
        let marker = Marker {
            server: self.server.clone(),
            url: self.url.clone(),
            storage: KEYRING.into(),
            revision: revision.clone(),
        };
        let bytes =
            serde_json::to_vec_pretty(&marker).map_err(|e| self.error(path, "serialise", e))?;
        self.write_file(&bytes)?;
        self.keyring.put(&account, Some((revision, file.clone())));
        Ok(())
    }

    /// Replaces the file with `json` atomically (temporary file, 0600, fsync, rename).
    fn write_file(&self, json: &[u8]) -> Result<(), StoreError> {
        self.ensure_dir()?;
        let path = self.path();
        let tmp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            self.key,
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(json)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(self.error(&path, "write", e));
        }
        Ok(())
    }

    /// Changes the file under the read-modify-write of one call.
    pub fn update(&self, change: impl FnOnce(&mut TokenFile)) -> Result<(), StoreError> {
        let mut file = self.read()?.unwrap_or_else(|| TokenFile {
            server: self.server.clone(),
            url: self.url.clone(),
            ..Default::default()
        });
        change(&mut file);
        self.write(&file)
    }

    /// [`Self::update`] off the runtime's threads and under this server's refresh lock (unless
    /// this task holds it, refreshing): a write outside a refresh — a kept challenge, a
    /// step-up's scopes — never writes back tokens another process's refresh replaced between
    /// its read and its write. Waits while another process refreshes.
    pub async fn update_outside_refresh(
        &self,
        change: impl FnOnce(&mut TokenFile) + Send + 'static,
    ) -> Result<(), StoreError> {
        let held = HELD_LOCK
            .try_with(|held| *held == self.lock_path())
            .unwrap_or(false);
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let _lock = if held { None } else { Some(this.lock()?) };
            this.update(change)
        })
        .await
        .unwrap_or_else(|e| Err(self.error(&self.path(), "write", e)))
    }

    /// [`Self::update`] under this server's refresh lock (no other process's refresh lands in
    /// between and writes back what it read before), a file that is no token file replaced:
    /// what a `login` writes. Blocks while another process refreshes.
    pub fn update_locked(&self, change: impl FnOnce(&mut TokenFile)) -> Result<(), StoreError> {
        let _lock = self.lock()?;
        let mut file = match self.read() {
            Ok(file) => file,
            Err(e) if e.is_unparsable() => {
                tracing::warn!(server = %self.server, "{e}; replacing it");
                None
            }
            Err(e) => return Err(e),
        }
        .unwrap_or_else(|| TokenFile {
            server: self.server.clone(),
            url: self.url.clone(),
            ..Default::default()
        });
        change(&mut file);
        self.write(&file)
    }

    /// Takes this server's refresh lock (blocking while another process refreshes): what
    /// reads, revokes and deletes the tokens (`logout`) holds, so a refresh under way ends
    /// first and its new tokens are the ones revoked.
    pub fn lock(&self) -> Result<StoreLock, StoreError> {
        self.lock_blocking().map(|file| StoreLock { _file: file })
    }

    /// Deletes the tokens: the keyring item where the keyring is used, then the file; `true`
    /// when there was either. A marker whose item cannot be deleted stays. The lock file stays:
    /// another process may hold it, and one made anew would let two refreshes run at once.
    pub fn remove(&self) -> Result<bool, StoreError> {
        let path = self.path();
        // A file that does not parse is deleted all the same.
        let marker = std::fs::read(&path).ok().is_some_and(|bytes| {
            serde_json::from_slice::<Head>(&bytes).is_ok_and(|h| h.storage.is_some())
        });
        let (mode, backend) = self.backend()?;
        let mut item = false;
        if backend == Backend::Keyring {
            let account = self.keyring_account();
            self.keyring.put(&account, None);
            match os_keyring::delete(&account) {
                Ok(found) => item = found,
                // An item left over from a write the keyring refused in `auto` mode.
                Err(e) if !marker && mode == StoreMode::Auto => tracing::warn!(
                    server = %self.server,
                    "could not look for tokens in the OS keyring ({e})"
                ),
                Err(e) => {
                    return Err(self.error(&path, "delete the tokens from the OS keyring", e));
                }
            }
        } else if marker {
            return Err(self.error(&path, "delete the tokens", self.keyring_unused(mode)));
        }
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(item),
            Err(e) => Err(self.error(&path, "delete", e)),
        }
    }

    /// Blocks until this process holds the exclusive lock of this server's refresh.
    fn lock_blocking(&self) -> Result<std::fs::File, StoreError> {
        self.ensure_dir()?;
        let path = self.lock_path();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| self.error(&path, "open the lock", e))?;
        use std::os::fd::AsRawFd;
        loop {
            // SAFETY: flock on a file descriptor this function owns.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(file);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(self.error(&path, "lock", err));
            }
        }
    }

    /// Whether the stored access token is due for a refresh: rmcp's rule (less than
    /// min(30 s, half its lifetime) left), [`DUE_MARGIN_SECS`] earlier.
    fn refresh_due(&self) -> bool {
        let Ok(Some(TokenFile {
            credentials: Some(creds),
            ..
        })) = self.read()
        else {
            return false;
        };
        let expires_in = creds
            .token_response
            .as_ref()
            .and_then(|t| serde_json::to_value(t).ok())
            .and_then(|t| t.get("expires_in").and_then(|e| e.as_u64()));
        let (Some(expires_in), Some(received_at)) = (expires_in, creds.token_received_at) else {
            return false;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let remaining = expires_in.saturating_sub(now.saturating_sub(received_at));
        remaining < 30.min(expires_in / 2).max(1) + DUE_MARGIN_SECS
    }

    /// Before rmcp's client looks at the token for a request: when it is due, refreshes it
    /// through `manager` under this server's lock, taken before the token is read again.
    ///
    /// rmcp takes the lock ([`CredentialStore::acquire_refresh_guard`]) only after it found the
    /// token due, then refreshes whatever it reads: a process that found it due while another
    /// one was refreshing it waited, read the rotated tokens and refreshed once more (every
    /// process sharing the store spent a refresh, and each one's new token replaced the others').
    /// Here the token is read again under the lock, so whoever comes second finds it fresh and
    /// uses it. Lock order as in rmcp: the manager, then the file. Any failure is left to rmcp's
    /// own refresh, which reports it.
    pub async fn refresh_if_due(&self, manager: &tokio::sync::Mutex<AuthorizationManager>) {
        let this = self.clone();
        if !matches!(
            tokio::task::spawn_blocking(move || this.refresh_due()).await,
            Ok(true)
        ) {
            return;
        }
        let manager = manager.lock().await;
        let this = self.clone();
        let Ok(Ok(lock)) = tokio::task::spawn_blocking(move || this.lock_blocking()).await else {
            return;
        };
        // Refreshes only if the token is still due now that no one else is refreshing it.
        let _ = HELD_LOCK
            .scope(self.lock_path(), manager.get_access_token())
            .await;
        drop(lock);
    }
}

#[async_trait::async_trait]
impl CredentialStore for FileCredentialStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        // Off the runtime's threads: a keyring read may wait for D-Bus.
        let this = self.clone();
        let file = tokio::task::spawn_blocking(move || this.read())
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))??;
        Ok(file.and_then(|f| f.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.update(|f| f.credentials = Some(credentials)))
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))??;
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            if this.read()?.is_some() {
                this.update(|f| f.credentials = None)?;
            }
            Ok::<_, StoreError>(())
        })
        .await
        .map_err(|e| AuthError::CredentialStoreError(e.to_string()))??;
        Ok(())
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        if HELD_LOCK
            .try_with(|held| *held == self.lock_path())
            .unwrap_or(false)
        {
            // Inside `refresh_if_due`, which holds the lock for this refresh.
            return Ok(Some(CredentialRefreshGuard::new(())));
        }
        let this = self.clone();
        let file = tokio::task::spawn_blocking(move || this.lock_blocking())
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))??;
        // Closing the file releases the lock.
        Ok(Some(CredentialRefreshGuard::new(file)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        std::env::temp_dir()
            .join(format!(
                "mcp-harness-marker-{name}-{}-{nanos}",
                std::process::id()
            ))
            .join("tokens")
    }

    /// Removes the folder `temp_dir` made around `tokens`; called at a test's end, so a failed
    /// test's folder stays to be looked at.
    fn remove_temp(tokens: &Path) {
        if let Some(parent) = tokens.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }

    #[test]
    fn the_marker_holds_no_secret_and_is_told_from_a_token_file() {
        let marker = Marker {
            server: "srv".into(),
            url: "https://example.com/mcp".into(),
            storage: KEYRING.into(),
            revision: revision_of(b"{}"),
        };
        let value = serde_json::to_value(&marker).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["revision", "server", "storage", "url"]);
        assert_eq!(value["storage"], "keyring");
        assert_eq!(value["revision"].as_str().unwrap().len(), 32);

        let head: Head = serde_json::from_value(value).unwrap();
        assert_eq!(head.storage.as_deref(), Some(KEYRING));
        // A token file (every file written before the keyring) has no `storage`.
        let plain = TokenFile {
            server: "srv".into(),
            url: "https://example.com/mcp".into(),
            login: Some("l-1".into()),
            ..Default::default()
        };
        let head: Head = serde_json::from_slice(&serde_json::to_vec(&plain).unwrap()).unwrap();
        assert_eq!(head.storage, None);
        assert_ne!(revision_of(b"a"), revision_of(b"b"));
    }

    #[test]
    fn a_marker_in_a_private_dir_is_refused_clearly_and_kept_in_auto_mode() {
        // `in_dir` is never the user's own directory: `auto` keeps it off D-Bus.
        let dir = temp_dir("private");
        let store = FileCredentialStore::in_dir(dir.clone(), "srv", "https://example.com/mcp");
        let marker = Marker {
            server: "srv".into(),
            url: "https://example.com/mcp".into(),
            storage: KEYRING.into(),
            revision: revision_of(b"{}"),
        };
        store
            .write_file(&serde_json::to_vec(&marker).unwrap())
            .unwrap();
        assert_eq!(
            store.location().unwrap(),
            Some(TokenLocation::Keyring {
                account: store.keyring_account()
            })
        );
        let err = store.read().unwrap_err().to_string();
        assert!(
            err.contains("`srv`") && err.contains("OS keyring") && err.contains("=keyring"),
            "{err}"
        );
        let err = store.remove().unwrap_err().to_string();
        assert!(err.contains("OS keyring"), "{err}");
        assert!(store.path().exists(), "a marker whose item stays is kept");
        remove_temp(&dir);
    }

    #[test]
    fn a_token_file_is_read_and_removed_in_auto_mode_without_the_keyring() {
        let dir = temp_dir("plain");
        let store = FileCredentialStore::in_dir(dir.clone(), "srv", "https://example.com/mcp");
        assert_eq!(store.location().unwrap(), None);
        store.update(|f| f.login = Some("l-1".into())).unwrap();
        assert_eq!(store.location().unwrap(), Some(TokenLocation::File));
        assert_eq!(store.read().unwrap().unwrap().login.as_deref(), Some("l-1"));
        assert!(store.remove().unwrap());
        assert!(!store.remove().unwrap());
        remove_temp(&dir);
    }

    /// A token file others may read (copied in with a wide mode) is read, and made 0600.
    #[test]
    fn a_token_file_readable_by_others_is_made_private_when_read() {
        let dir = temp_dir("wide");
        let store = FileCredentialStore::in_dir(dir.clone(), "srv", "https://example.com/mcp");
        store.update(|f| f.login = Some("l-1".into())).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(mode(&store.path()), 0o644);
        assert_eq!(store.read().unwrap().unwrap().login.as_deref(), Some("l-1"));
        assert_eq!(mode(&store.path()), 0o600);
        remove_temp(&dir);
    }

    #[test]
    fn an_unknown_storage_is_an_error_not_an_empty_store() {
        let dir = temp_dir("unknown");
        let store = FileCredentialStore::in_dir(dir.clone(), "srv", "https://example.com/mcp");
        let text = r#"{"server":"srv","url":"https://example.com/mcp","storage":"vault"}"#;
        store.write_file(text.as_bytes()).unwrap();
        let err = store.read().unwrap_err().to_string();
        assert!(err.contains("unknown storage `vault`"), "{err}");
        remove_temp(&dir);
    }

    #[tokio::test]
    async fn a_write_outside_a_refresh_waits_for_the_refresh_and_keeps_its_tokens() {
        let dir = temp_dir("outside");
        let store = FileCredentialStore::in_dir(dir.clone(), "srv", "https://example.com/mcp");
        store.update(|f| f.login = Some("before".into())).unwrap();
        // Another process's refresh: holds the lock, then writes what it refreshed.
        let refresh = store.lock().unwrap();
        let write = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .update_outside_refresh(|f| f.step_up_scopes = vec!["admin".into()])
                    .await
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(
            !write.is_finished(),
            "the write waits for the refresh's lock"
        );
        store
            .update(|f| f.login = Some("refreshed".into()))
            .unwrap();
        drop(refresh);
        write.await.unwrap().unwrap();
        let file = store.read().unwrap().unwrap();
        assert_eq!(
            file.login.as_deref(),
            Some("refreshed"),
            "nothing written back"
        );
        assert_eq!(file.step_up_scopes, vec!["admin".to_string()]);
        remove_temp(&dir);
    }

    #[test]
    fn stores_in_different_dirs_never_share_a_keyring_item() {
        let a = FileCredentialStore::in_dir(temp_dir("a"), "srv", "https://example.com/mcp");
        let b = FileCredentialStore::in_dir(temp_dir("b"), "srv", "https://example.com/mcp");
        let key = server_key("srv", "https://example.com/mcp");
        assert_ne!(a.keyring_account(), b.keyring_account());
        assert!(a.keyring_account().starts_with(&key));
        let mut user = a.clone();
        user.user_dir = true;
        assert_eq!(user.keyring_account(), key);
    }
}
