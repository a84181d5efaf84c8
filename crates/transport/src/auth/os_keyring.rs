//! The OS keyring behind the token store: the Secret Service API (GNOME Keyring, KeePassXC,
//! KWallet's bridge) on the D-Bus session bus, and the choice between it and the plain file.
//!
//! Invariants: every call runs on a thread of its own, never on a tokio worker (zbus's blocking
//! calls start a runtime of their own, which panics inside another), one call at a time, and
//! each wait for it is bounded (`PROBE_TIMEOUT`, [`CALL_TIMEOUT`]: a keyring that asks its
//! user to unlock it gets that long); `MCP_HARNESS_TOKEN_STORE=file` never reaches this
//! module's D-Bus code; the secrets are sent encrypted (the session's DH key exchange, AES) and
//! no error message here quotes one (D-Bus errors name methods and objects, never values).
//! The probe's answer and the one-call-at-a-time lock are the only process-wide state of `auth`,
//! on purpose: they guard the user session's one Secret Service, whichever `AuthContext` asks.

use std::time::Duration;

/// The environment variable that chooses where tokens go.
pub const MODE_VAR: &str = "MCP_HARNESS_TOKEN_STORE";

/// The Secret Service items' `service` attribute; their `account` attribute is the server key.
pub const SERVICE: &str = "mcp-harness";

/// How long `auto` waits for a Secret Service to answer before it keeps tokens in files.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one read, write or delete may take (including the keyring's own unlock prompt).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the OS keyring could not be used. Never carries a secret (D-Bus errors name methods and
/// objects, never values).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// A call did not return within its wait (an unlock prompt no one answers, say).
    #[error("the OS keyring did not answer within {} s ({what}; is it locked?)", .timeout.as_secs())]
    NoAnswer {
        /// What was being done (`probe`, `read`, `write`, `delete`).
        what: &'static str,
        /// How long it was waited for.
        timeout: Duration,
    },
    /// No thread could be started for the call.
    #[error("could not start a thread for the OS keyring: {0}")]
    Thread(String),
    /// The Secret Service (or its absence) said no, in words.
    #[error("{0}")]
    Service(String),
    /// `MCP_HARNESS_TOKEN_STORE=keyring`, and the keyring cannot be used.
    #[error("{MODE_VAR}=keyring, but the OS keyring cannot be used: {0}")]
    Required(Box<KeyringError>),
}

/// Where tokens go, as `MCP_HARNESS_TOKEN_STORE` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// The OS keyring when a Secret Service answers within `PROBE_TIMEOUT`, else the file;
    /// only for the user's own store (a store put elsewhere, by `AuthContext::in_dir` or `in_dir`,
    /// keeps its tokens in its files).
    Auto,
    /// The OS keyring, always; an error when none answers.
    Keyring,
    /// The file, always; D-Bus is never touched.
    File,
}

impl StoreMode {
    /// The mode a value of [`MODE_VAR`] names: unset or empty is `auto`.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim).unwrap_or("") {
            "" | "auto" => Ok(Self::Auto),
            "keyring" => Ok(Self::Keyring),
            "file" => Ok(Self::File),
            other => Err(format!(
                "{MODE_VAR}=`{other}` is not a token store: use auto, keyring or file"
            )),
        }
    }

    /// The mode of this process's environment.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(MODE_VAR) {
            Ok(v) => Self::parse(Some(&v)),
            Err(std::env::VarError::NotPresent) => Self::parse(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!(
                "{MODE_VAR} is not valid UTF-8: use auto, keyring or file"
            )),
        }
    }
}

/// Where one store keeps its secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A 0600 file in the token directory.
    File,
    /// The OS keyring (Secret Service); the file only marks it.
    Keyring,
}

/// The backend of `mode` for a store in the user's own directory or not; `probe` (whether a
/// Secret Service answers) is asked only when the answer depends on it.
pub fn select(
    mode: StoreMode,
    user_dir: bool,
    probe: impl FnOnce() -> Result<(), KeyringError>,
) -> Result<Backend, KeyringError> {
    match mode {
        StoreMode::File => Ok(Backend::File),
        StoreMode::Auto if !user_dir => Ok(Backend::File),
        StoreMode::Auto => Ok(probe().map_or(Backend::File, |()| Backend::Keyring)),
        StoreMode::Keyring => probe()
            .map(|()| Backend::Keyring)
            .map_err(|why| KeyringError::Required(Box::new(why))),
    }
}

/// Whether a Secret Service answers (asked once per process; the answer is kept).
pub fn available() -> Result<(), KeyringError> {
    // Process-wide on purpose: the Secret Service is the user session's, not one runtime's
    // (an `AuthContext` holds everything else); asking it once serves every context.
    static ANSWER: std::sync::OnceLock<Result<(), KeyringError>> = std::sync::OnceLock::new();
    ANSWER.get_or_init(imp::probe).clone()
}

/// The secret of `account`; `None` when there is no item.
pub fn get(account: &str) -> Result<Option<Vec<u8>>, KeyringError> {
    let account = account.to_string();
    on_own_thread(CALL_TIMEOUT, "read", move || imp::get(&account))?.map_err(KeyringError::Service)
}

/// Stores `secret` as the item of `account` (replacing it), labelled `label`.
pub fn set(account: &str, label: &str, secret: Vec<u8>) -> Result<(), KeyringError> {
    let (account, label) = (account.to_string(), label.to_string());
    on_own_thread(CALL_TIMEOUT, "write", move || {
        imp::set(&account, &label, &secret)
    })?
    .map_err(KeyringError::Service)
}

/// Deletes the item of `account`; `true` when there was one.
pub fn delete(account: &str) -> Result<bool, KeyringError> {
    let account = account.to_string();
    on_own_thread(CALL_TIMEOUT, "delete", move || imp::delete(&account))?
        .map_err(KeyringError::Service)
}

/// Runs `f` on a new thread, after the calls before it, and waits at most `timeout` for it. A
/// call that outlives its wait (an unlock prompt no one answers) keeps its thread; the ones
/// after it wait for it and time out too.
fn on_own_thread<T: Send + 'static>(
    timeout: Duration,
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, KeyringError> {
    // Process-wide on purpose: it guards the one Secret Service connection of the user session
    // whichever `AuthContext` calls, so an unanswered prompt holds up every caller alike.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("mcp-harness-keyring".into())
        .spawn(move || {
            let _turn = ONE_AT_A_TIME
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = tx.send(f());
        })
        .map_err(|e| KeyringError::Thread(e.to_string()))?;
    rx.recv_timeout(timeout)
        .map_err(|_| KeyringError::NoAnswer { what, timeout })
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::HashMap;

    use secret_service::blocking::{Item, SecretService};
    use secret_service::{EncryptionType, Error};

    /// What went wrong, in words that never carry a secret.
    fn describe(e: Error) -> String {
        match e {
            Error::Zbus(e) => format!("D-Bus: {e}"),
            Error::ZbusFdo(e) => format!("D-Bus: {e}"),
            Error::Zvariant(_) => "a D-Bus message could not be decoded".into(),
            Error::Crypto(what) => format!("the session encryption failed ({what})"),
            Error::Locked => "the keyring is locked".into(),
            Error::NoResult => "the Secret Service has no default collection (keyring)".into(),
            Error::Prompt => "the keyring's unlock prompt was dismissed".into(),
            Error::Unavailable => "no Secret Service on the D-Bus session bus (or no bus)".into(),
            _ => "the Secret Service failed".into(),
        }
    }

    fn attributes(account: &str) -> HashMap<&str, &str> {
        HashMap::from([("service", super::SERVICE), ("account", account)])
    }

    fn connect() -> Result<SecretService<'static>, String> {
        SecretService::connect(EncryptionType::Dh).map_err(describe)
    }

    /// A Secret Service answers on the session bus and has a default collection.
    pub(super) fn probe() -> Result<(), super::KeyringError> {
        super::on_own_thread(super::PROBE_TIMEOUT, "probe", || {
            connect()?.get_default_collection().map_err(describe)?;
            Ok(())
        })?
        .map_err(super::KeyringError::Service)
    }

    fn items<'a>(ss: &'a SecretService<'a>, account: &str) -> Result<Vec<Item<'a>>, String> {
        let found = ss.search_items(attributes(account)).map_err(describe)?;
        Ok(found.unlocked.into_iter().chain(found.locked).collect())
    }

    pub(super) fn get(account: &str) -> Result<Option<Vec<u8>>, String> {
        let ss = connect()?;
        let Some(item) = items(&ss, account)?.into_iter().next() else {
            return Ok(None);
        };
        item.ensure_unlocked().map_err(describe)?;
        item.get_secret().map(Some).map_err(describe)
    }

    pub(super) fn set(account: &str, label: &str, secret: &[u8]) -> Result<(), String> {
        let ss = connect()?;
        let collection = ss.get_default_collection().map_err(describe)?;
        collection.ensure_unlocked().map_err(describe)?;
        collection
            .create_item(label, attributes(account), secret, true, "application/json")
            .map_err(describe)?;
        Ok(())
    }

    pub(super) fn delete(account: &str) -> Result<bool, String> {
        let ss = connect()?;
        let found = items(&ss, account)?;
        let any = !found.is_empty();
        for item in found {
            item.delete().map_err(describe)?;
        }
        Ok(any)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    const NONE: &str = "the OS keyring is supported on Linux (Secret Service) only";

    pub fn probe() -> Result<(), super::KeyringError> {
        Err(super::KeyringError::Service(NONE.into()))
    }

    pub fn get(_: &str) -> Result<Option<Vec<u8>>, String> {
        Err(NONE.into())
    }

    pub fn set(_: &str, _: &str, _: &[u8]) -> Result<(), String> {
        Err(NONE.into())
    }

    pub fn delete(_: &str) -> Result<bool, String> {
        Err(NONE.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_auto_unless_set_and_unknown_values_are_refused() {
        assert_eq!(StoreMode::parse(None), Ok(StoreMode::Auto));
        assert_eq!(StoreMode::parse(Some("")), Ok(StoreMode::Auto));
        assert_eq!(StoreMode::parse(Some(" auto ")), Ok(StoreMode::Auto));
        assert_eq!(StoreMode::parse(Some("keyring")), Ok(StoreMode::Keyring));
        assert_eq!(StoreMode::parse(Some("file")), Ok(StoreMode::File));
        let err = StoreMode::parse(Some("vault")).unwrap_err();
        assert!(
            err.contains(MODE_VAR)
                && err.contains("`vault`")
                && err.contains("auto, keyring or file"),
            "{err}"
        );
    }

    fn no_probe() -> Result<(), KeyringError> {
        panic!("the Secret Service was asked")
    }

    #[test]
    fn file_mode_and_private_dirs_in_auto_never_ask_the_secret_service() {
        assert_eq!(select(StoreMode::File, true, no_probe), Ok(Backend::File));
        assert_eq!(select(StoreMode::File, false, no_probe), Ok(Backend::File));
        assert_eq!(select(StoreMode::Auto, false, no_probe), Ok(Backend::File));
    }

    #[test]
    fn auto_takes_the_keyring_when_one_answers_else_the_file() {
        assert_eq!(
            select(StoreMode::Auto, true, || Ok(())),
            Ok(Backend::Keyring)
        );
        assert_eq!(
            select(StoreMode::Auto, true, || Err(KeyringError::Service(
                "no bus".into()
            ))),
            Ok(Backend::File)
        );
    }

    #[test]
    fn keyring_mode_fails_clearly_without_a_secret_service_in_any_dir() {
        assert_eq!(
            select(StoreMode::Keyring, true, || Ok(())),
            Ok(Backend::Keyring)
        );
        assert_eq!(
            select(StoreMode::Keyring, false, || Ok(())),
            Ok(Backend::Keyring)
        );
        let err = select(StoreMode::Keyring, true, || {
            Err(KeyringError::Service("no bus".into()))
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("MCP_HARNESS_TOKEN_STORE=keyring") && err.contains("no bus"),
            "{err}"
        );
    }

    #[test]
    fn a_call_that_does_not_return_in_time_is_an_error_and_later_calls_still_run() {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let err = on_own_thread(Duration::from_millis(50), "write", move || {
            let _ = wait.recv();
        })
        .unwrap_err();
        assert!(matches!(err, KeyringError::NoAnswer { what: "write", .. }));
        let err = err.to_string();
        assert!(
            err.contains("did not answer") && err.contains("write"),
            "{err}"
        );
        release.send(()).unwrap();
        // The stuck call is released; the next one runs after it.
        assert_eq!(on_own_thread(Duration::from_secs(60), "read", || 7), Ok(7));
    }
}
