//! Serving HTTP (axum) with `TCP_NODELAY` on every accepted connection (feature `http-server`).
//!
//! Invariant: every socket a [`NodelayListener`] hands to the server has `TCP_NODELAY` set before
//! the first byte is read from it (a socket where the kernel refuses it is still served, and the
//! failure is logged at `debug`).
//!
//! Why: neither axum nor hyper nor rmcp's `StreamableHttpService` sets it, and hyper writes a
//! response in more than one segment (head, then body chunks; an SSE answer is several). With
//! Nagle's algorithm on, the second small segment waits for the ACK of the first, and the client
//! delays that ACK (40 ms on Linux): each MCP request over a keep-alive connection then takes
//! ~40 ms instead of well under a millisecond (rust-sdk issues #789 / #790; measured on our
//! fixture by `cargo xtask bench --only http`). Serve through [`serve_nodelay`] (or hand a
//! [`NodelayListener`] to `axum::serve`) wherever MCP is served over HTTP.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// A [`TcpListener`] whose accepted sockets have `TCP_NODELAY` set: give it to `axum::serve`.
#[derive(Debug)]
pub struct NodelayListener {
    inner: TcpListener,
}

impl NodelayListener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener) -> Self {
        Self { inner }
    }

    /// The address the listener is bound to (useful after binding port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl axum::serve::Listener for NodelayListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    /// Accepts as axum's own `TcpListener` does (an accept error is logged and retried after a
    /// pause), then sets `TCP_NODELAY` on the socket.
    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        let (stream, peer) = axum::serve::Listener::accept(&mut self.inner).await;
        if let Err(error) = stream.set_nodelay(true) {
            // The connection still works, only with Nagle's delays; usually the peer is gone.
            tracing::debug!(%peer, %error, "could not set TCP_NODELAY on an accepted connection");
        }
        (stream, peer)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// `axum::serve(listener, router)` with `TCP_NODELAY` on every accepted socket.
///
/// Await it to serve until an I/O error, or chain `.with_graceful_shutdown(signal)` first, as
/// with `axum::serve`:
///
/// ```no_run
/// # async fn run(router: axum::Router) -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// mcp_harness_transport::http_server::serve_nodelay(listener, router).await
/// # }
/// ```
pub fn serve_nodelay(
    listener: TcpListener,
    router: axum::Router,
) -> axum::serve::Serve<NodelayListener, axum::Router, axum::Router> {
    axum::serve(NodelayListener::new(listener), router)
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The server's end of an accepted connection has `TCP_NODELAY`, where a plain accept
    /// (Linux: the option is not inherited from the listener) does not.
    #[tokio::test]
    async fn accepted_sockets_have_nodelay() {
        let plain = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = plain.local_addr().expect("addr");
        let _client = TcpStream::connect(addr).await.expect("connect");
        let (server_end, _) = plain.accept().await.expect("accept");
        assert!(
            !server_end.nodelay().expect("getsockopt"),
            "a plain accepted socket starts without TCP_NODELAY, so the check below means something"
        );

        let mut listener =
            NodelayListener::new(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
        let addr = listener.local_addr().expect("addr");
        for _ in 0..3 {
            let _client = TcpStream::connect(addr).await.expect("connect");
            let (server_end, _) = listener.accept().await;
            assert!(server_end.nodelay().expect("getsockopt"));
        }
    }

    /// [`serve_nodelay`] serves the router (the sockets it accepts are the ones above).
    #[tokio::test]
    async fn serve_nodelay_serves_the_router() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
        let server = tokio::spawn(async move { serve_nodelay(listener, router).await });
        let mut client = TcpStream::connect(addr).await.expect("connect");
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut response = String::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            client.read_to_string(&mut response),
        )
        .await
        .expect("an answer in time")
        .expect("read");
        server.abort();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("hello"), "{response}");
    }
}
