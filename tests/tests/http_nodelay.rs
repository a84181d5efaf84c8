//! The fixture's Streamable HTTP server sets `TCP_NODELAY` on the connections it accepts
//! (`mcp_harness_transport::http_server::serve_nodelay`): without it every request on a
//! keep-alive connection waits for a delayed ACK (~40 ms; `cargo xtask bench --only http`).
//!
//! The option is read on the server's own socket: the server runs in this process, so its end
//! of the connection is found through `/proc/self/net/tcp{,6}` (the socket's inode, by the two
//! ports) and `/proc/self/fd`, and asked with `getsockopt`. Linux only, as the harness is.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use mcp_harness_fixture::{FixtureOptions, serve_http};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// `getsockopt(fd, IPPROTO_TCP, TCP_NODELAY)`.
fn nodelay_of(fd: RawFd) -> bool {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid for writes of the sizes given; a bad fd is an error
    // return, not undefined behaviour.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(
        rc,
        0,
        "getsockopt(TCP_NODELAY) on fd {fd}: {}",
        std::io::Error::last_os_error()
    );
    value != 0
}

/// The inode of this process's TCP socket whose local port is `local` and remote port `remote`.
fn socket_inode(local: u16, remote: u16) -> Option<String> {
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = |field: &str| {
                let hex = field.rsplit(':').next()?;
                u16::from_str_radix(hex, 16).ok()
            };
            if fields.len() > 9 && port(fields[1]) == Some(local) && port(fields[2]) == Some(remote)
            {
                return Some(fields[9].to_string());
            }
        }
    }
    None
}

/// The fd of this process that holds socket `inode`.
fn fd_of_socket(inode: &str) -> Option<RawFd> {
    let wanted = format!("socket:[{inode}]");
    std::fs::read_dir("/proc/self/fd")
        .ok()?
        .filter_map(Result::ok)
        .find(|entry| {
            std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy() == wanted)
        })
        .and_then(|entry| entry.file_name().to_str()?.parse().ok())
}

/// The server's end of the connection `client` made to `server`.
fn server_end(server: SocketAddr, client: &TcpStream) -> RawFd {
    let client_port = client.local_addr().expect("client address").port();
    let inode = socket_inode(server.port(), client_port)
        .expect("the accepted socket is listed in /proc/self/net/tcp");
    fd_of_socket(&inode).expect("the accepted socket is an fd of this process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_http_server_sets_nodelay_on_every_accepted_socket() {
    let (addr, task) = serve_http(FixtureOptions::default(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("serve http");
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut client = TcpStream::connect(addr).await.expect("connect");
        // One answered request: the server has accepted (and set up) its end by then.
        client
            .write_all(b"GET /not-mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .expect("write");
        let mut status = String::new();
        let mut reader = BufReader::new(&mut client);
        tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut status))
            .await
            .expect("an answer in time")
            .expect("read");
        assert!(status.starts_with("HTTP/1.1 "), "{status:?}");
        clients.push(client);
    }
    for client in &clients {
        // The control: our own client end never had the option set, and reads as such.
        assert!(!client.nodelay().expect("client's nodelay"));
        let fd = server_end(addr, client);
        assert!(
            nodelay_of(fd),
            "the server's end of the connection from port {} has no TCP_NODELAY",
            client.local_addr().expect("client address").port()
        );
    }
    task.abort();
}
