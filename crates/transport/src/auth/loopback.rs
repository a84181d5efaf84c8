//! Where a user logs in: a [`Browser`] that opens the authorization URL in the system browser
//! (or only prints it) and takes the redirect either on a loopback listener
//! (`http://127.0.0.1:PORT/callback`) or pasted on stdin (the whole redirect URL, or just the
//! code), whichever comes first.
//!
//! Invariants: the listener binds 127.0.0.1 only and takes only a callback carrying this
//! login's `state` (any other request is answered and the wait goes on); a pasted
//! bare code is paired with the `state` of the URL this process generated, so a redirect for
//! another login is never accepted; the URL and prompts go to stderr, never a token.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::browser::Browser;
use futures::future::BoxFuture;

/// How long a login waits for the user.
pub(crate) const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// The system browser + loopback callback + paste fallback.
pub struct LoopbackBrowser {
    listener: tokio::sync::Mutex<Option<TcpListener>>,
    redirect_uri: String,
    open_browser: bool,
    /// Whether a redirect URL pasted on stdin is accepted too (a `login`; not a step-up in the
    /// middle of a command, whose stdin belongs to the command).
    paste: bool,
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
            paste: true,
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
    let state = query_param(auth_url, "state")?;
    let mut url = reqwest::Url::parse(redirect_uri).ok()?;
    url.query_pairs_mut()
        .append_pair("code", line)
        .append_pair("state", &state);
    Some(url.to_string())
}

/// The longest one connection to the callback listener is read for.
const CALLBACK_READ: Duration = Duration::from_secs(10);
/// The most connections to the callback listener read at once (others are dropped).
const MAX_CALLBACK_READS: usize = 16;

/// The value of query parameter `name` of `url`.
pub(crate) fn query_param(url: &str, name: &str) -> Option<String> {
    reqwest::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Reads one request from `stream`; the redirect URL when it is the callback of this login (its
/// `state` is `state`). Any other request — another path, or a callback with another `state`
/// (a stale tab, another process probing the port) — is answered and does not end the wait.
async fn callback(
    mut stream: tokio::net::TcpStream,
    redirect_uri: &str,
    state: Option<&str>,
) -> Option<String> {
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
    let base = redirect_uri.trim_end_matches("/callback");
    let redirect = format!("{base}{target}");
    // `/callback` itself, with or without a query: not `/callbackxyz`.
    let on_path = target
        .strip_prefix("/callback")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('?'));
    let ours =
        on_path && state.is_none_or(|s| query_param(&redirect, "state").as_deref() == Some(s));
    let (status, body) = match (on_path, ours) {
        (_, true) => (
            "200 OK",
            "Authorization received. You can close this window and return to mcp-harness.",
        ),
        (true, false) => (
            "400 Bad Request",
            "This redirect is not for the login in progress (its state does not match); it was ignored.",
        ),
        (false, _) => ("404 Not Found", "Not found"),
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
    ours.then_some(redirect)
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
                "{}\n\n  {url}\n\nWaiting for the redirect to {}{}",
                if opened {
                    "Opened your browser to log in. If it did not open, visit:"
                } else {
                    "Open this URL in a browser to log in:"
                },
                self.redirect_uri,
                if self.paste {
                    " — or paste the URL the browser was sent to (or just its code) here and \
                     press Enter."
                } else {
                    "."
                }
            );
            let redirect_uri = self.redirect_uri.clone();
            let state = query_param(&url, "state");
            // Connections are read side by side, each for at most `CALLBACK_READ`: one that
            // sends nothing (a browser's speculative connection) does not hold up the redirect.
            let from_listener = async {
                use futures::StreamExt as _;
                let mut reading = futures::stream::FuturesUnordered::new();
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted
                                && reading.len() < MAX_CALLBACK_READS
                            {
                                reading.push(tokio::time::timeout(
                                    CALLBACK_READ,
                                    callback(stream, &redirect_uri, state.as_deref()),
                                ));
                            }
                        }
                        Some(read) = reading.next(), if !reading.is_empty() => {
                            if let Ok(Some(redirect)) = read {
                                return redirect;
                            }
                        }
                    }
                }
            };
            // A detached thread, not tokio's blocking pool: a read still pending when the login
            // ends must not keep the process from exiting.
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let paste = self.paste;
            std::thread::spawn(move || {
                if !paste {
                    return;
                }
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

/// The step-up approver of an interactive session (R33): each step-up is a login of its own,
/// through the browser, taking the redirect on the loopback port of the redirect URI the client
/// registered (read from the authorization URL). It never reads stdin, which belongs to the
/// command that is running.
pub struct LoopbackStepUp;

/// The port of `auth_url`'s `redirect_uri` when that is a loopback `http://…/callback`.
pub(crate) fn loopback_callback_port(auth_url: &str) -> Option<u16> {
    let redirect = reqwest::Url::parse(auth_url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == "redirect_uri")
        .map(|(_, v)| v.into_owned())?;
    let redirect = reqwest::Url::parse(&redirect).ok()?;
    let loopback = matches!(
        redirect.host_str(),
        Some("127.0.0.1" | "localhost" | "[::1]")
    );
    (redirect.scheme() == "http" && loopback && redirect.path() == "/callback")
        .then(|| redirect.port_or_known_default())
        .flatten()
}

impl Browser for LoopbackStepUp {
    fn authorize(&self, url: &str) -> BoxFuture<'_, Result<String, String>> {
        let url = url.to_string();
        Box::pin(async move {
            let port = loopback_callback_port(&url).ok_or(
                "the client's redirect URI is not a loopback callback \
                 (http://127.0.0.1:PORT/callback), so the redirect cannot be taken here",
            )?;
            let browser = LoopbackBrowser {
                paste: false,
                ..LoopbackBrowser::bind(port, true).await.map_err(|e| {
                    format!("cannot listen on 127.0.0.1:{port} for the callback: {e}")
                })?
            };
            eprintln!("The server asks for more scope: authorize it in the browser (step-up).");
            browser.authorize(&url).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_up_port_is_the_registered_loopback_callback() {
        let auth = |redirect: &str| {
            let mut u = reqwest::Url::parse("https://as.example/authorize?state=s").unwrap();
            u.query_pairs_mut().append_pair("redirect_uri", redirect);
            u.to_string()
        };
        assert_eq!(
            loopback_callback_port(&auth("http://127.0.0.1:33418/callback")),
            Some(33418)
        );
        assert_eq!(
            loopback_callback_port(&auth("http://localhost:9000/callback")),
            Some(9000)
        );
        assert_eq!(
            loopback_callback_port(&auth("https://app.example/callback")),
            None
        );
        assert_eq!(
            loopback_callback_port(&auth("http://127.0.0.1:1/other")),
            None
        );
        assert_eq!(
            loopback_callback_port("https://as.example/authorize?state=s"),
            None
        );
    }

    #[tokio::test]
    async fn a_step_up_takes_the_redirect_on_the_registered_port() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut url = reqwest::Url::parse("https://as.example/authorize?state=abc").unwrap();
        url.query_pairs_mut()
            .append_pair("redirect_uri", &format!("http://127.0.0.1:{port}/callback"));
        let url = url.to_string();
        let browser = LoopbackStepUp;
        let waiting = browser.authorize(&url);
        let redirect = async {
            // The user's browser, sent back by the authorization server.
            loop {
                if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                    s.write_all(b"GET /callback?code=c1&state=abc HTTP/1.1\r\nhost: x\r\n\r\n")
                        .await
                        .unwrap();
                    let mut answer = String::new();
                    let _ = s.read_to_string(&mut answer).await;
                    return answer;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        let (got, answer) = tokio::join!(waiting, redirect);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert_eq!(
            got.unwrap(),
            format!("http://127.0.0.1:{port}/callback?code=c1&state=abc")
        );
    }
}
