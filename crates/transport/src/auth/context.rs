//! The auth context: what the OAuth of one runtime shares between its connections — the token
//! store's directory, the copies of keyring items its stores read, who authorizes a step-up and
//! each server's step-up state. A cheap handle (an `Arc` inside): its clones share all of it.
//!
//! Invariant: two contexts made apart share nothing, so two runtimes in one process, each with
//! its own, never see each other's tokens (given different directories), browser or step-up
//! budget. The only process-wide state left in `auth` guards the OS keyring itself, which is
//! one per user session whoever asks ([`os_keyring`](super::os_keyring)'s one-call-at-a-time
//! lock and its one probe).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::browser::Browser;
use super::step_up::{Refusal, StepUps};
use super::store::{FileCredentialStore, KeyringCache, default_store_dir};

/// The OAuth state of one runtime (see the module doc); `mcp_harness_runtime::RuntimeBuilder::auth_context` in the
/// runtime crate takes it. `Default` is [`AuthContext::new`].
#[derive(Clone)]
pub struct AuthContext {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where the token files live.
    dir: PathBuf,
    /// `dir` is the user's own (the default): only then does `auto` use the OS keyring.
    user_dir: bool,
    /// The keyring items the stores of this context read or wrote last.
    keyring: Arc<KeyringCache>,
    /// The step-up browser and states.
    step_ups: StepUps,
}

impl std::fmt::Debug for AuthContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthContext")
            .field("dir", &self.inner.dir)
            .field("step_up_browser", &self.inner.step_ups.has_browser())
            .finish_non_exhaustive()
    }
}

impl Default for AuthContext {
    fn default() -> Self {
        Self::new()
    }
}

impl AuthContext {
    /// The user's own token store ([`default_store_dir`], the OS keyring where `auto` finds
    /// one) and no step-up browser: a request refused for scope fails, asking for a `login`.
    pub fn new() -> Self {
        Self::make(default_store_dir(), true, None)
    }

    /// A token store of its own in `dir` (tests, the conformance client: tokens that never
    /// touch the user's store; `auto` keeps them in files), and no step-up browser.
    pub fn in_dir(dir: PathBuf) -> Self {
        Self::make(dir, false, None)
    }

    /// This context's directory with `browser` authorizing step-ups (an interactive browser for
    /// a user, or a stand-in that follows redirects itself for test servers). Meant while
    /// building: the result starts with no step-up history and no keyring copies of its own.
    pub fn with_step_up_browser(self, browser: Arc<dyn Browser>) -> Self {
        Self::make(self.inner.dir.clone(), self.inner.user_dir, Some(browser))
    }

    fn make(dir: PathBuf, user_dir: bool, browser: Option<Arc<dyn Browser>>) -> Self {
        Self {
            inner: Arc::new(Inner {
                dir,
                user_dir,
                keyring: Arc::default(),
                step_ups: StepUps::new(browser),
            }),
        }
    }

    /// Where this context's token files live.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The token store of `server` at `url` in this context.
    pub fn store(&self, server: &str, url: &str) -> FileCredentialStore {
        FileCredentialStore::in_context(
            self.inner.dir.clone(),
            self.inner.user_dir,
            self.inner.keyring.clone(),
            server,
            url,
        )
    }

    /// The step-up browser and states of this context.
    pub fn step_ups(&self) -> &StepUps {
        &self.inner.step_ups
    }

    /// Why the last step-up of the server behind `store` was refused in this context, if one
    /// was since its last login ([`Refusal::needs_login`]: whether a login can help).
    pub fn last_refusal(&self, store: &FileCredentialStore) -> Option<Refusal> {
        self.inner.step_ups.last_refusal(store)
    }
}
