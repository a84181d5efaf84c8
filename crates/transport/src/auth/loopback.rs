//! Where a user logs in: a [`Browser`] that opens the authorization URL in the system browser
//! (or only prints it) and takes the redirect either on a loopback listener
//! (`http://127.0.0.1:PORT/callback`) or pasted on stdin (the whole redirect URL, or just the
//! code), whichever comes first.
//!
//! Invariants: the listener binds 127.0.0.1 only and answers only the callback path; a pasted
//! bare code is paired with the `state` of the URL this process generated, so a redirect for
//! another login is never accepted; the URL and prompts go to stderr, never a token.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::flow::Browser;
use crate::connector::BoxFuture;

/// How long a login waits for the user.
pub const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// The system browser + loopback callback + paste fallback.
pub struct LoopbackBrowser {
    listener: tokio::sync::Mutex<Option<TcpListener>>,
    redirect_uri: String,
    open_browser: bool,
}

impl LoopbackBrowser {
    /// Binds `127.0.0.1:port` (0: any free port). With `open_browser` false the URL is only
    /// printed (headless machines, SSH sessions).
    pub async fn bind(port: u16, open_browser: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let port = listener.local_addr()?.port();
        Ok(Self {
            listener: tokio::sync::Mutex::new(Some(listener)),
            redirect_uri: format!("http://127.0.0.1:{port}/callback"),
            open_browser,
        })
    }

    /// The redirect URI to register and send.
    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }
}

/// Opens `url` with the platform's opener; `false` when there is none.
fn open_system_browser(url: &str) -> bool {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    if std::env::var_os("DISPLAY").is_none()
        && std::env::var_os("WAYLAND_DISPLAY").is_none()
        && !cfg!(target_os = "macos")
    {
        return false;
    }
    std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}

/// A pasted line as a redirect URL: a URL as is, a bare code paired with our `state`.
pub fn pasted_redirect(line: &str, redirect_uri: &str, auth_url: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    if line.starts_with("http://") || line.starts_with("https://") {
        return Some(line.to_string());
    }
    let state = reqwest::Url::parse(auth_url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())?;
    let mut url = reqwest::Url::parse(redirect_uri).ok()?;
    url.query_pairs_mut()
        .append_pair("code", line)
        .append_pair("state", &state);
    Some(url.to_string())
}

/// Reads one request from `stream`; the redirect URL when it is the callback.
async fn callback(mut stream: tokio::net::TcpStream, redirect_uri: &str) -> Option<String> {
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    while len < buf.len() {
        let n = stream.read(&mut buf[len..]).await.ok()?;
        if n == 0 {
            break;
        }
        len += n;
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let target = head.lines().next()?.split_whitespace().nth(1)?.to_string();
    let is_callback = target.starts_with("/callback");
    let body = if is_callback {
        "Authorization received. You can close this window and return to mcp-harness."
    } else {
        "Not found"
    };
    let status = if is_callback {
        "200 OK"
    } else {
        "404 Not Found"
    };
    let _ = stream
        .write_all(
            format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await;
    let base = redirect_uri.trim_end_matches("/callback");
    is_callback.then(|| format!("{base}{target}"))
}

impl Browser for LoopbackBrowser {
    fn authorize(&self, url: &str) -> BoxFuture<'_, Result<String, String>> {
        let url = url.to_string();
        Box::pin(async move {
            let listener = self
                .listener
                .lock()
                .await
                .take()
                .ok_or("this login already used its callback listener")?;
            let opened = self.open_browser && open_system_browser(&url);
            eprintln!(
                "{}\n\n  {url}\n\nWaiting for the redirect to {} — or paste the URL the browser was \
                 sent to (or just its code) here and press Enter.",
                if opened {
                    "Opened your browser to log in. If it did not open, visit:"
                } else {
                    "Open this URL in a browser to log in:"
                },
                self.redirect_uri
            );
            let redirect_uri = self.redirect_uri.clone();
            let from_listener = async {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    if let Some(redirect) = callback(stream, &redirect_uri).await {
                        return redirect;
                    }
                }
            };
            // A detached thread, not tokio's blocking pool: a read still pending when the login
            // ends must not keep the process from exiting.
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            std::thread::spawn(move || {
                let mut line = String::new();
                while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                    if tx.send(std::mem::take(&mut line)).is_err() {
                        return;
                    }
                }
            });
            let from_stdin = async {
                loop {
                    match rx.recv().await {
                        Some(line) => {
                            if let Some(r) = pasted_redirect(&line, &redirect_uri, &url) {
                                return r;
                            }
                        }
                        // No stdin (closed or not readable): wait for the listener alone.
                        None => std::future::pending::<()>().await,
                    }
                }
            };
            let wait = async {
                tokio::select! {
                    r = from_listener => r,
                    r = from_stdin => r,
                }
            };
            tokio::time::timeout(LOGIN_WAIT, wait).await.map_err(|_| {
                format!(
                    "no redirect within {} s; run the login again",
                    LOGIN_WAIT.as_secs()
                )
            })
        })
    }
}
