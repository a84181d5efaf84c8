//! `gateway_floor_*`: the least any gateway in front of the same upstream adds on this machine,
//! measured with the same client, upstream and workload as `gateway_echo_http`.
//!
//! Two forwarders that do nothing an MCP gateway must do (no JSON, no session, no catalog, no
//! policy), started in this process on loopback ports:
//! - `gateway_floor_tcp[_p99]`: a TCP relay (each accepted connection copied byte for byte to
//!   its own upstream connection, TCP_NODELAY on both): one more loopback hop and two copies;
//! - `gateway_floor_http[_p99]`: an HTTP/1.1 forwarder (axum receives each request, reqwest
//!   sends it on a pooled keep-alive connection, the answer streams back): what any HTTP
//!   gateway's server and client sides cost before it looks at a message;
//! - `gateway_floor_http_throughput_32`: that forwarder at saturation, 32 clients, as
//!   `gateway_throughput_32`.
//!
//! Each is against the same client direct to the fixture, chunks alternating; the added latency
//! of a floor (its p50 − direct p50) bounds from below what `gateway_echo_http` can reach here.
//!
//! Both also run as processes of their own (`xtask bench-forwarder`, [`main`]), with a third, a
//! hand-written HTTP/1.1 relay (`relay_h1.rs`), which the `serve` group measures beside
//! `serve --threads N` and HAProxy: `serve_floor_rust_*` for the HTTP forwarder (the floor of a
//! gateway built on our HTTP stack), `serve_floor_h1_*` for the hand-written relay (the floor of
//! an HTTP layer of our own), `serve_floor_tcp_*` for the TCP relay (the floor of any middle
//! process on tokio). A fourth is not a floor: the hand-written relay with a `tools/call`'s MCP
//! work on top (`relay_mcp.rs`, `serve_proto_mcp_*`), a prototype of an MCP path of our own. The
//! `instructions` group counts all but the TCP relay
//! (`serve_floor_{rust,h1}_instructions_per_call`, `serve_proto_mcp_instructions_per_call`).

use std::future::{Future, IntoFuture as _};
use std::process::ExitCode;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::gateway::{CHUNK, alternating, connect, latencies, saturate};
use super::report::Metric;
use super::{Bench, CALL_TIMEOUT};

/// A forwarder on a loopback port; dropping it stops it (every task aborted).
struct Forwarder {
    port: u16,
    _tasks: JoinSet<()>,
}

impl Forwarder {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// A TCP relay to `upstream`.
    async fn tcp(upstream: u16) -> Result<Self, String> {
        let listener = bind().await?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let mut tasks = JoinSet::new();
        tasks.spawn(relay_tcp(listener, upstream));
        Ok(Self {
            port,
            _tasks: tasks,
        })
    }

    /// An HTTP/1.1 forwarder to `upstream`.
    async fn http(upstream: u16) -> Result<Self, String> {
        let listener = bind().await?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let served = serve_http(listener, upstream)?;
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let _ = served.await;
        });
        Ok(Self {
            port,
            _tasks: tasks,
        })
    }
}

async fn bind() -> Result<TcpListener, String> {
    TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("no loopback port for a forwarder: {e}"))
}

/// The TCP relay to `upstream` on `listener`: each accepted connection copied byte for byte to
/// a connection of its own to `upstream` (TCP_NODELAY on both), until the future is dropped.
async fn relay_tcp(listener: TcpListener, upstream: u16) {
    let mut relays = JoinSet::new();
    while let Ok((mut down, _)) = listener.accept().await {
        relays.spawn(async move {
            let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                return;
            };
            let _ = down.set_nodelay(true);
            let _ = up.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
        });
    }
}

/// The HTTP/1.1 forwarder to `upstream` on `listener` (TCP_NODELAY on every accepted socket and
/// on the pooled upstream connections), until the future is dropped.
fn serve_http(
    listener: TcpListener,
    upstream: u16,
) -> Result<impl Future<Output = std::io::Result<()>>, String> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("the forwarder's HTTP client: {e}"))?;
    // The URL of every request the bench sends, parsed once.
    let mcp = reqwest::Url::parse(&format!("http://127.0.0.1:{upstream}/mcp"))
        .map_err(|e| format!("the forwarder's upstream URL: {e}"))?;
    let app = axum::Router::new()
        .fallback(forward)
        .with_state((client, upstream, mcp));
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    Ok(axum::serve(listener, app).into_future())
}

/// This program, which runs the forwarder as a process (in the bench's measuring process: the
/// release xtask).
pub(super) fn this_program() -> Result<std::path::PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("the bench's own binary: {e}"))
}

/// What a forwarder process does with each connection.
#[derive(Debug, Clone, Copy)]
pub(super) enum Relay {
    /// Copies its bytes to an upstream connection of its own (see [`relay_tcp`]).
    Tcp,
    /// Forwards each HTTP request through axum and reqwest (see [`serve_http`]).
    Http,
    /// Relays each HTTP/1.1 request and answer by hand (see `relay_h1.rs`).
    H1,
    /// The same, decoding, checking and re-encoding each `tools/call` (see `relay_mcp.rs`).
    Mcp,
}

impl Relay {
    /// Every relay, in the order the `serve` group measures them.
    pub(super) const ALL: [Relay; 4] = [Relay::Http, Relay::H1, Relay::Tcp, Relay::Mcp];

    /// Its value of `--relay`.
    pub(super) fn arg(self) -> &'static str {
        match self {
            Relay::Tcp => "tcp",
            Relay::Http => "http",
            Relay::H1 => "h1",
            Relay::Mcp => "mcp",
        }
    }

    /// The start of its metrics' names: `serve_floor_{name}` for the floors, `serve_proto_mcp`
    /// for the prototype, which is not a floor.
    pub(super) fn metric(self) -> &'static str {
        match self {
            Relay::Http => "serve_floor_rust",
            Relay::H1 => "serve_floor_h1",
            Relay::Tcp => "serve_floor_tcp",
            Relay::Mcp => "serve_proto_mcp",
        }
    }

    /// The echo tool's name through it (the prototype serves the fixture's tools as `serve`
    /// does, under `mcp__fx__`).
    pub(super) fn tool(self) -> &'static str {
        match self {
            Relay::Mcp => "mcp__fx__echo",
            _ => "echo",
        }
    }

    /// What it is, for the metrics' descriptions.
    pub(super) fn what(self) -> &'static str {
        match self {
            Relay::Http => "an axum + reqwest HTTP/1.1 forwarder (the floor of our HTTP stack)",
            Relay::H1 => {
                "a hand-written HTTP/1.1 relay on tokio (httparse; the floor of an HTTP layer of our own)"
            }
            Relay::Tcp => "a tokio TCP relay (the floor of anything on tokio)",
            Relay::Mcp => {
                "the hand-written HTTP/1.1 relay decoding, validating and re-encoding each tools/call (a prototype of an MCP path of our own)"
            }
        }
    }

    /// Relays the connections accepted on `listener` to `upstream`; returns only when
    /// accepting fails.
    async fn serve(self, listener: TcpListener, upstream: u16) -> Result<(), String> {
        match self {
            Relay::Tcp => relay_tcp(listener, upstream).await,
            Relay::H1 => super::relay_h1::relay(listener, upstream).await,
            Relay::Mcp => return super::relay_mcp::relay(listener, upstream).await,
            Relay::Http => {
                return serve_http(listener, upstream)?
                    .await
                    .map_err(|e| format!("serving: {e}"));
            }
        }
        Err("the listener failed".to_string())
    }
}

/// A forwarder (`relay`) to the fixture at `upstream` as a process of its own on `threads`
/// threads: `program` (this xtask, or valgrind running it; the forwarder's arguments are
/// appended), carrying `tag` so the bench's check for leftovers sees it.
pub(super) async fn process(
    mut program: tokio::process::Command,
    relay: Relay,
    upstream: u16,
    threads: usize,
    tag: &str,
) -> Result<super::peers::Peer, String> {
    let port = super::peers::free_port()?;
    program
        .arg("bench-forwarder")
        .args(["--relay", relay.arg()])
        .args(["--listen", &port.to_string()])
        .args(["--upstream", &upstream.to_string()])
        .args(["--threads", &threads.to_string()])
        .args(["--name", tag]);
    super::peers::start("the bench's forwarder", program, port).await
}

/// `xtask bench-forwarder [--relay tcp|http|h1|mcp] --listen PORT --upstream PORT [--threads N]
/// [--name TAG]`: the HTTP/1.1 forwarder (`http`, the default), the TCP relay (`tcp`), the
/// hand-written HTTP/1.1 relay (`h1`, see `relay_h1.rs`) or the MCP relay prototype on it
/// (`mcp`, see `relay_mcp.rs`) as a process of its own, on one thread
/// (a current-thread runtime, as `serve --threads 1` has) or on N tokio workers (as
/// `serve --threads N`), so the `serve` and `instructions` groups can
/// measure it as they measure `serve`: the floor of a gateway built on the same HTTP stack as
/// ours (hyper under axum, reqwest) that reads no JSON, and of anything on tokio that parses
/// nothing at all. It serves on 127.0.0.1 until it is killed.
pub(crate) fn main(args: &[String]) -> ExitCode {
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let number = |name: &str| value(name).and_then(|p| p.parse::<u16>().ok());
    let relay = match value("--relay") {
        None => Relay::Http,
        Some(arg) => match Relay::ALL.into_iter().find(|relay| relay.arg() == arg) {
            Some(relay) => relay,
            None => return usage(),
        },
    };
    let (Some(listen), Some(upstream)) = (number("--listen"), number("--upstream")) else {
        return usage();
    };
    let threads = number("--threads").map_or(1, usize::from);
    let mut builder = match threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if threads > 1 {
        builder.worker_threads(threads);
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("xtask bench-forwarder: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", listen))
            .await
            .map_err(|e| format!("cannot listen on 127.0.0.1:{listen}: {e}"))?;
        relay.serve(listener, upstream).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench-forwarder: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: xtask bench-forwarder [--relay tcp|http|h1|mcp] --listen PORT --upstream PORT [--threads N]"
    );
    ExitCode::from(2)
}

/// One request forwarded as it came (method, path, headers but `Host`, body); the answer
/// streamed back as it comes. The URL of `/mcp`, the only path the bench asks for, is parsed
/// once, as `serve`'s upstream POST parses its own.
async fn forward(
    State((client, upstream, mcp)): State<(reqwest::Client, u16, reqwest::Url)>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let failed = |e: String| {
        Response::builder()
            .status(502)
            .body(Body::from(e))
            .unwrap_or_default()
    };
    let Ok(body) = axum::body::to_bytes(body, 16 << 20).await else {
        return failed("request body".into());
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = parts.headers;
    headers.remove(axum::http::header::HOST);
    let url = if path == "/mcp" {
        mcp.clone()
    } else {
        match reqwest::Url::parse(&format!("http://127.0.0.1:{upstream}{path}")) {
            Ok(url) => url,
            Err(e) => return failed(e.to_string()),
        }
    };
    let sent = client
        .request(parts.method, url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    let mut answer = match sent {
        Ok(answer) => answer,
        Err(e) => return failed(e.to_string()),
    };
    let mut response = Response::builder().status(answer.status());
    if let Some(headers) = response.headers_mut() {
        *headers = std::mem::take(answer.headers_mut());
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|e| failed(e.to_string()))
}

impl Bench {
    /// The floors, against the client `direct` to the fixture at `port`.
    pub(super) async fn gateway_floors(
        &self,
        port: u16,
        direct: &super::gateway::Client,
    ) -> Result<Vec<Metric>, String> {
        let direct_url = format!("http://127.0.0.1:{port}/mcp");
        let tcp = Forwarder::tcp(port).await?;
        let http = Forwarder::http(port).await?;
        let mut metrics = Vec::new();
        for (name, what, forwarder) in [
            ("gateway_floor_tcp", "a TCP relay", &tcp),
            (
                "gateway_floor_http",
                "an HTTP/1.1 forwarder (axum + reqwest)",
                &http,
            ),
        ] {
            let (through, _changes) = connect(&forwarder.url()).await?;
            let sides = async {
                latencies(&through, "echo", CHUNK).await?;
                let (mut h, mut b) = (Vec::new(), Vec::new());
                let total = self.options.calls.min(2000);
                while h.len() < total {
                    h.extend(latencies(&through, "echo", CHUNK).await?);
                    b.extend(latencies(direct, "echo", CHUNK).await?);
                }
                Ok::<_, String>((h, b))
            };
            let measured = tokio::time::timeout(CALL_TIMEOUT * 10, sides).await;
            let _ = through.cancel().await;
            let (h, b) = measured.map_err(|_| format!("{name} took too long"))??;
            let metric = Metric {
                per_call: true,
                ..Metric::new(
                    name,
                    format!(
                        "sequential 1 KiB echo through {what} vs the same client direct to the fixture (per call): the least a gateway adds here"
                    ),
                    h,
                    b,
                )
            };
            metrics.push(metric.p99());
            metrics.push(metric);
        }
        let forwarder = http.url();
        let rounds = self.options.rounds.min(3);
        let (th, tb) = alternating(
            rounds,
            (&forwarder, "echo"),
            (&direct_url, "echo"),
            saturate,
        )
        .await?;
        metrics.push(Metric {
            per_call: true,
            ..Metric::new(
                "gateway_floor_http_throughput_32",
                "wall time per call, 32 concurrent clients, through the HTTP/1.1 forwarder vs direct",
                th,
                tb,
            )
        });
        drop((tcp, http));
        // Let the aborted relays' sockets close before the next measurement.
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(metrics)
    }
}
