//! The file token store: one JSON file per server under the user's config dir,
//! `$XDG_CONFIG_HOME/mcp-harness/tokens/<server-hash>.json` (else `~/.config/...`).
//!
//! Invariants: the directory is created 0700 and every file is written 0600 through a temporary
//! file renamed into place (a reader never sees half a file, another user never reads one); a
//! refresh holds an exclusive `flock` on `<server-hash>.lock`, so two harness processes sharing
//! the store never spend the same refresh token twice, and a token found due is looked at again
//! under that lock before it is refreshed ([`FileCredentialStore::refresh_if_due`]), so one
//! refresh serves them all; nothing here prints a token (the store's `Debug` shows the path only,
//! errors name the server and the file, never its contents).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, CredentialRefreshGuard,
    CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};
use sha2::Digest;

tokio::task_local! {
    /// The lock file the current task holds already ([`FileCredentialStore::refresh_if_due`]):
    /// the refresh it runs takes no second lock (a second `flock` would wait for the first).
    static HELD_LOCK: PathBuf;
}

/// A stored token counts as due this much earlier than rmcp's own rule says, so that the check
/// of [`FileCredentialStore::refresh_if_due`] is never later than the one rmcp makes after it.
const DUE_MARGIN_SECS: u64 = 2;

/// Set once (tests, the conformance client) to keep tokens out of the user's config dir.
static DIR_OVERRIDE: OnceLock<PathBuf> = OnceLock::new();

/// Makes every store of this process live under `dir` instead of the user's config dir. Only the
/// first call has an effect; it returns whether this call set it.
pub fn set_store_dir(dir: PathBuf) -> bool {
    DIR_OVERRIDE.set(dir).is_ok()
}

/// Where token files live: the override, else `$XDG_CONFIG_HOME/mcp-harness/tokens`, else
/// `$HOME/.config/mcp-harness/tokens`.
pub fn store_dir() -> PathBuf {
    if let Some(dir) = DIR_OVERRIDE.get() {
        return dir.clone();
    }
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
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
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
    pub server: String,
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<AuthorizationMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `ClientRecord` and rmcp's `StoredCredentials` redact their secrets themselves.
        f.debug_struct("TokenFile")
            .field("server", &self.server)
            .field("url", &self.url)
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
    pub server: String,
    pub path: PathBuf,
    pub action: &'static str,
    pub reason: String,
}

impl From<StoreError> for AuthError {
    fn from(e: StoreError) -> Self {
        AuthError::CredentialStoreError(e.to_string())
    }
}

/// rmcp's [`CredentialStore`] on one server's token file.
#[derive(Clone)]
pub struct FileCredentialStore {
    server: String,
    url: String,
    dir: PathBuf,
    key: String,
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
    /// The store of `server` at `url` in [`store_dir`].
    pub fn for_server(server: &str, url: &str) -> Self {
        Self::in_dir(store_dir(), server, url)
    }

    /// The store of `server` at `url` in `dir`.
    pub fn in_dir(dir: PathBuf, server: &str, url: &str) -> Self {
        Self {
            server: server.to_string(),
            url: url.to_string(),
            key: server_key(server, url),
            dir,
        }
    }

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
    pub fn read(&self) -> Result<Option<TokenFile>, StoreError> {
        let path = self.path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error(&path, "read", e)),
        };
        // serde_json's messages quote no input, only positions.
        let file: TokenFile = serde_json::from_slice(&bytes)
            .map_err(|e| self.error(&path, "parse (delete it with `mcp-harness logout`)", e))?;
        if file.server != self.server || file.url != self.url {
            return Ok(None);
        }
        Ok(Some(file))
    }

    /// Replaces the file atomically (temporary file, 0600, fsync, rename).
    pub fn write(&self, file: &TokenFile) -> Result<(), StoreError> {
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
        let json =
            serde_json::to_vec_pretty(file).map_err(|e| self.error(&path, "serialise", e))?;
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&json)?;
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

    /// Deletes the file (and its lock file); `true` when there was one.
    pub fn remove(&self) -> Result<bool, StoreError> {
        let path = self.path();
        let _ = std::fs::remove_file(self.lock_path());
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
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
        Ok(self.read()?.and_then(|f| f.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.update(|f| f.credentials = Some(credentials)))
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))??;
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        if self.read()?.is_some() {
            self.update(|f| f.credentials = None)?;
        }
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
