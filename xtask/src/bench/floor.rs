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
        tasks.spawn(async move {
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
        });
        Ok(Self {
            port,
            _tasks: tasks,
        })
    }

    /// An HTTP/1.1 forwarder to `upstream`.
    async fn http(upstream: u16) -> Result<Self, String> {
        let listener = bind().await?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .map_err(|e| format!("the forwarder's HTTP client: {e}"))?;
        let app = axum::Router::new()
            .fallback(forward)
            .with_state((client, upstream));
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, app).await;
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

/// One request forwarded as it came (method, path, headers but `Host`, body); the answer
/// streamed back as it comes.
async fn forward(
    State((client, upstream)): State<(reqwest::Client, u16)>,
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
    let sent = client
        .request(parts.method, format!("http://127.0.0.1:{upstream}{path}"))
        .headers(headers)
        .body(body)
        .send()
        .await;
    let answer = match sent {
        Ok(answer) => answer,
        Err(e) => return failed(e.to_string()),
    };
    let mut response = Response::builder().status(answer.status());
    if let Some(headers) = response.headers_mut() {
        *headers = answer.headers().clone();
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
