//! The Streamable HTTP transport downstream: many clients at `http://ADDR/mcp`.
//!
//! Invariants:
//! - every accepted socket has TCP_NODELAY (a response written in pieces is not held back by
//!   Nagle's algorithm against the client's delayed ACK);
//! - `Host` must be one the server was told to accept (loopback by default) and, when origins
//!   are configured, a browser `Origin` must be one of them: DNS rebinding gets 403 — on `/mcp`
//!   always, and on `/metrics` and the metadata (they name servers, tools and clients) while
//!   the gateway listens on loopback;
//! - shutting the server down refuses new requests at once, answers the admitted ones within
//!   the drain deadline ([`crate::drain`]), then closes every session and stream;
//! - with client profiles, no request reaches `/mcp` without proving one (401 with a
//!   `WWW-Authenticate` challenge naming the protected-resource metadata, or 403
//!   `insufficient_scope`), and a request on a session opened by another profile is refused
//!   (403): a session serves only the client that opened it;
//! - `subscriptions/listen` streams take at most half of `--max-connections` (and a profile
//!   with `maxSessions` at most that many): one more is 429 ([`listens`]).

mod listens;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use mcp_harness_runtime::catalog::Snapshot;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};

use crate::sealed::{SealedSessionManager, SealedStore, Sealer, SessionKeys};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::{Clients, Identity, Refusal, origin};
use crate::drain::{self, Drain};
use crate::hold::HoldClock;
use crate::in_session::{InSession, Rebinding};
use crate::session::{Session, Shared};
use crate::traced::Traced;
use listens::ListenLimit;

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listening address could not be bound.
    #[error("cannot listen on {addr}: {source} (choose another address with `--http HOST:PORT`)")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The client's `initialize` failed.
    #[error("the client's initialize failed: {0}")]
    Initialize(String),
    /// The session ended with an error.
    #[error("the session ended with an error: {0}")]
    Session(String),
}

/// Where and how to serve Streamable HTTP.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The address to listen on (port 0 picks one). Loopback unless the user says otherwise.
    pub addr: SocketAddr,
    /// Extra `Host` values to accept besides loopback names (a public deployment's hostnames).
    pub allowed_hosts: Vec<String>,
    /// Browser origins to accept (`https://app.example:443`); empty: requests with an `Origin`
    /// header are accepted only from loopback origins.
    pub allowed_origins: Vec<String>,
    /// At most this many open sessions; an `initialize` beyond gets 429 with `Retry-After`.
    pub max_sessions: usize,
    /// At most this many open HTTP connections; one accepted beyond gets 503 with
    /// `Retry-After` and is closed.
    pub max_connections: usize,
    /// A connection with no request in progress for this long is closed (a client's next
    /// request opens another).
    pub connection_idle: Duration,
    /// A session with no request for this long is closed here (a later request with its id
    /// restores it from the id).
    pub idle_timeout: Duration,
    /// The gateway's URL as clients reach it (its `/mcp` endpoint): the audience an access
    /// token must name. Default: `http://ADDR/mcp` of the bound address.
    pub public_url: Option<String>,
    /// The keys that seal session ids; `None`: a random key made at start (ids then open on
    /// this process only, so replicas cannot share sessions).
    pub session_keys: Option<Arc<SessionKeys>>,
    /// How long a session id stays valid after it was last re-sealed.
    pub session_ttl: Duration,
    /// A comment line is sent on every open event stream (a call's, the GET stream) after this
    /// long without a message, so proxies with an idle timeout keep it open.
    pub sse_ping: Duration,
    /// Returns freed heap memory to the system; called after many sessions closed, at most once
    /// per tick, never on a request path. Default [`release_freed_memory`] (glibc's
    /// `malloc_trim`); a binary with its own global allocator passes that allocator's.
    pub release_memory: fn(),
    /// Serve the common requests of established sessions on the gateway's own POST path (its
    /// `in_session` module: rmcp's checks, a decode by method). `false` hands every request to
    /// rmcp's handler: for comparison, or to rule the own path out when something looks off.
    pub own_posts: bool,
}

/// The default bound of open HTTP sessions.
pub const DEFAULT_MAX_SESSIONS: usize = 1000;
/// The default bound of open HTTP connections (under the common soft limit of 1024 open
/// files with room for the upstreams': a refusal in words instead of `accept` failing).
pub const DEFAULT_MAX_CONNECTIONS: usize = 900;
/// The default time a connection may stay open with no request in progress: longer than the
/// idle time of common HTTP clients' connection pools (reqwest's 90 s, undici's 4 s), so a
/// client does not send its next request into a connection the gateway is closing.
pub const DEFAULT_CONNECTION_IDLE: Duration = Duration::from_secs(120);
/// The default idle time after which a session is closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The default time without a message after which an event stream gets a ping (well under
/// the 60 s idle timeout of common proxies and load balancers).
pub const DEFAULT_SSE_PING: Duration = Duration::from_secs(15);

impl HttpOptions {
    /// Loopback-only serving at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connection_idle: DEFAULT_CONNECTION_IDLE,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            public_url: None,
            session_keys: None,
            session_ttl: crate::sealed::DEFAULT_SESSION_TTL,
            sse_ping: DEFAULT_SSE_PING,
            release_memory: release_freed_memory,
            own_posts: true,
        }
    }
}

/// Returns freed heap memory to the system: glibc's `malloc_trim` (nothing elsewhere). glibc
/// keeps the freed memory of many small allocations in its arenas: measured, 10,000 abandoned
/// sessions left the resident size at 225 MB after every one was closed, 35 MB after a trim.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks and releases the allocator's own free lists.
        let released = unsafe { libc::malloc_trim(0) };
        tracing::debug!(
            released,
            "returned freed memory to the system after sessions closed"
        );
    }
}

/// A running HTTP server.
pub struct HttpServer {
    addr: SocketAddr,
    /// Stops accepting connections (axum's graceful shutdown).
    accept: CancellationToken,
    /// Closes every session and stream (rmcp's cancellation token), after the drain.
    stop: CancellationToken,
    /// Cuts the calls still running at the drain deadline (each is answered that it was cut).
    cut: CancellationToken,
    drain: Arc<Drain>,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Runs until the server stops (it stops only on [`HttpServer::shutdown`] or a listener
    /// failure).
    pub async fn wait(&mut self) {
        let _ = (&mut self.task).await;
    }

    /// Drains, then stops: new requests are refused at once (503 with `Retry-After`, and no
    /// new connection is accepted), requests already admitted are answered for at most
    /// `drain` (a call's result still reaches its client), then every session and stream is
    /// closed and the server task ends (it is aborted if it does not within a second).
    /// Returns whether every admitted request was answered within `drain`.
    pub async fn shutdown(self, drain: Duration) -> bool {
        self.shutdown_until(drain, std::future::pending()).await
    }

    /// [`HttpServer::shutdown`], whose drain also ends when `cut` completes (a second stop
    /// signal: the operator will not wait).
    pub async fn shutdown_until(
        mut self,
        drain: Duration,
        cut: impl std::future::Future<Output = ()>,
    ) -> bool {
        self.drain.close();
        self.accept.cancel();
        let drained = tokio::select! {
            drained = self.drain.wait_idle(drain) => drained,
            () = cut => false,
        };
        if !drained {
            tracing::warn!(
                ?drain,
                "requests still in flight at the drain deadline are cut"
            );
            // Each call cut is answered so, when its answer can go out within the grace.
            self.cut.cancel();
            self.drain.wait_idle(CUT_GRACE).await;
        }
        self.stop.cancel();
        if tokio::time::timeout(Duration::from_secs(1), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
        drained
    }
}

pub(crate) async fn serve(
    shared: Arc<Shared>,
    options: HttpOptions,
) -> Result<HttpServer, ServeError> {
    let listener = TcpListener::bind(options.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: options.addr,
        source,
    })?;
    let stop = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        // A stateless request (2026-07-28) whose first message is its answer gets that answer
        // as one JSON body, not a one-event stream (a notification or request first: a stream).
        .with_json_response(true);
    if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
        config.allowed_hosts.push(addr.ip().to_string());
    }
    config
        .allowed_hosts
        .extend(options.allowed_hosts.iter().cloned());
    let mut origins = options.allowed_origins.clone();
    if origins.is_empty() {
        origins = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
            .map(String::from)
            .to_vec();
    }
    config.allowed_origins = origins;
    config.sse_keep_alive = Some(options.sse_ping);
    let keys = options.session_keys.clone().unwrap_or_else(|| {
        tracing::info!(
            "no session keys configured ({} or `gateway.sessionKeys`): made a random session key; session ids from this process open nowhere else, so replicas cannot share sessions and sessions end at restart",
            crate::sealed::SESSION_KEYS_ENV
        );
        Arc::new(SessionKeys::generate())
    });
    shared.task_ids.use_keys(keys.clone());
    let sealer = Sealer::new(keys, options.session_ttl);
    config.session_store = Some(Arc::new(SealedStore::new(sealer.clone())));
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(options.idle_timeout);
    let sessions = Arc::new(SealedSessionManager::new(
        manager,
        sealer.clone(),
        shared.sidecars.clone(),
        shared.held.calls.clone(),
    ));
    shared.held.calls.stop_with(stop.clone());
    let drain = Arc::new(Drain::default());
    let resource = options
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{addr}/mcp"));
    let metadata_url = format!("{}/.well-known/oauth-protected-resource", origin(&resource));
    let mut ops = Ops {
        hosts: None,
        shared: shared.clone(),
        sessions: sessions.clone(),
        max_sessions: options.max_sessions.max(1),
        max_body: config.max_request_body_bytes,
        drain: drain.clone(),
        listens: Arc::new(ListenLimit::new(options.max_connections.max(1))),
        guard: shared.clients.clone().map(|clients| {
            Arc::new(Guard {
                clients,
                resource,
                metadata_url,
                owners: dashmap::DashMap::new(),
                opening: dashmap::DashMap::new(),
            })
        }),
    };
    tokio::spawn(drain::trim_after_sessions_close(
        shared.clone(),
        sessions.clone(),
        TRIM_TICK,
        options.release_memory,
        stop.clone(),
    ));
    let front = shared.clone();
    let cut = CancellationToken::new();
    let cut_calls = cut.clone();
    let max_body = config.max_request_body_bytes;
    let posts = InSession {
        sessions: sessions.clone(),
        keep_alive: config.sse_keep_alive,
        cancel: config.cancellation_token.clone(),
        max_body: config.max_request_body_bytes,
        own_posts: options.own_posts && config.legacy_session_mode,
        rebinding: Rebinding::default(),
        shared: shared.clone(),
        direct: options.own_posts
            && config.legacy_session_mode
            && std::env::var_os(DIRECT_ENV).is_none_or(|value| value != "0"),
        replays: Arc::default(),
        retry: config.sse_retry,
        touch_every: options.idle_timeout / 4,
        service: StreamableHttpService::new(
            move || {
                let tracer = shared.tracer.clone();
                Ok(Traced::new(
                    Session::new(shared.clone(), cut_calls.clone()),
                    tracer,
                ))
            },
            sessions,
            config,
        ),
    };
    // rmcp's `Service::call` clones the whole service, config and all (its host and origin
    // lists, its cancellation token), for every request, and axum clones the route's service
    // once more: calling `handle` through an `Arc` costs a pointer copy instead.
    let posts = Arc::new(posts);
    // On loopback the threat is a browser page rebound to it: every route checks. Elsewhere the
    // operational routes answer by any name (a load balancer's or a scraper's).
    if addr.ip().is_loopback() {
        ops.hosts = Some(posts.clone());
    }
    let lean = std::env::var_os(crate::lean::LEAN_ENV)
        .is_none_or(|value| value != "0")
        .then(|| {
            Arc::new(crate::lean::Lean {
                drain: drain.clone(),
                guarded: ops.guard.is_some(),
                max_sessions: ops.max_sessions,
                sealer: sealer.clone(),
                shared: front.clone(),
                posts: posts.clone(),
            })
        });
    // Boxed as it is made: every layer and axum's route wrap the answer's future in their own
    // (and move it) — a pointer then, instead of the whole future each time.
    let mcp = move |request: Request| -> futures::future::BoxFuture<'static, Response> {
        let posts = posts.clone();
        Box::pin(async move { posts.handle(request).await.into_response() })
    };
    // The gates every route passes. While draining, nothing is authenticated or opened any
    // more.
    let gates = axum::middleware::from_fn_with_state(ops.clone(), gates);
    // `/mcp`'s middleware, outermost first, stacked as one service: a `Router::layer` boxes the
    // route once per layer, and every request then cloned each box (and `from_fn` each inner
    // one again), ~50 allocations per request. Unboxed, cloning the stack copies its states'
    // pointers; the router boxes it once.
    let mcp = tower::ServiceBuilder::new()
        .layer(gates.clone())
        // SEP-1686 wire fields rmcp drops, for 2025-11-25 clients (`session::augmented_front`).
        .layer(axum::middleware::from_fn_with_state(
            front,
            crate::session::augmented_front::layer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            sealer,
            crate::sealed::layer,
        ))
        .service(axum::handler::Handler::with_state(mcp, ()));
    let router = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(resource_metadata_at),
        )
        .fallback(not_found)
        // The same gates for the routes above and the fallback (only the drain gate acts on
        // them).
        .layer(gates)
        // Added after the layers above: not wrapped in them again. Not `nest_service`: the
        // path stays whole for the middleware, which reads it, and rmcp ignores it. Only
        // `/mcp` itself: every session, listen and drain gate is keyed on that one path.
        .route_service("/mcp", mcp)
        .with_state(ops);
    let accept = CancellationToken::new();
    let limits = crate::h1::Limits {
        head_timeout: HEADER_READ_TIMEOUT,
        idle_timeout: options.connection_idle,
        max_body,
    };
    let own_h1 = std::env::var_os(OWN_H1_ENV).is_none_or(|value| value != "0");
    let task = tokio::spawn(accept_loop(
        listener,
        crate::lean::Front { router, lean },
        accept.clone(),
        Connections {
            max: options.max_connections.max(1),
            limits,
            own: own_h1,
        },
    ));
    tracing::info!(url = %format!("http://{addr}/mcp"), "serving Streamable HTTP");
    Ok(HttpServer {
        addr,
        accept,
        stop,
        cut,
        drain,
        task,
    })
}

/// Set to `0`, every `tools/call` goes through rmcp's session worker instead of being served
/// as a direct call on the task that read it (see `crate::in_session::direct`): the
/// comparison in the benchmarks, and a way back should a direct call misbehave.
pub(crate) const DIRECT_ENV: &str = "MCP_HARNESS_DIRECT";

/// Set to `0`, connections are served by hyper's HTTP/1.1 server instead of the gateway's own
/// ([`crate::h1`]): the comparison in the benchmarks, and a way back should the own one
/// misbehave.
pub(crate) const OWN_H1_ENV: &str = "MCP_HARNESS_OWN_H1";

/// How long a client may take to send a request's head (request line and headers) once it
/// started one, before its connection is closed: a client that opens connections and never
/// finishes a request would otherwise hold each open for good.
/// How long the calls cut at the drain deadline get to send their answers before every
/// session and stream is closed.
const CUT_GRACE: Duration = Duration::from_secs(1);

const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How connections are served.
struct Connections {
    /// At most this many open at once.
    max: usize,
    /// What each may do (the own server's; hyper's keeps its header read timeout).
    limits: crate::h1::Limits,
    /// Served by the gateway's own HTTP/1.1 server, else by hyper's.
    own: bool,
}

/// At most this many connections turned away are still being closed at once (each reads what
/// its client still sends for a moment, so the refusal is read instead of a reset); beyond, a
/// connection turned away is closed at once.
const TURNING_AWAY: usize = 64;

/// Serves HTTP/1.1 connections from `listener` until `stop`: each accepted socket with
/// TCP_NODELAY (a response written in pieces must not wait for the client's delayed ACK) and
/// [`HEADER_READ_TIMEOUT`], on the gateway's own HTTP/1.1 server with its limits, else on
/// hyper's with the same body limits (`h1::read_whole`) and the same service; a connection
/// beyond `max` open ones gets 503 and is closed; at `stop` no connection is accepted any
/// more, each open one closes after the request it is serving, and this returns when all have.
async fn accept_loop(
    listener: TcpListener,
    front: crate::lean::Front,
    stop: CancellationToken,
    served: Connections,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut connections = tokio::task::JoinSet::new();
    let mut turning_away = tokio::task::JoinSet::new();
    let mut at_limit = false;
    loop {
        let (socket, _) = tokio::select! {
            () = stop.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            Some(_) = turning_away.join_next(), if !turning_away.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, say: wait a moment rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if let Err(error) = socket.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set on an accepted socket");
        }
        // Ended ones are not counted (the join branch above may not have run yet).
        while connections.try_join_next().is_some() {}
        if connections.len() >= served.max {
            // Said once each time the limit is reached: a flood of connections is not a flood
            // of log lines.
            if at_limit {
                tracing::debug!(max = served.max, "a connection was turned away");
            } else {
                at_limit = true;
                tracing::warn!(
                    max = served.max,
                    "connections are being turned away: too many open (serve --max-connections)"
                );
            }
            if turning_away.len() < TURNING_AWAY {
                let why = format!(
                    "the gateway has {} connections open, its limit; retry shortly, or raise `serve --max-connections`",
                    served.max
                );
                turning_away.spawn(crate::h1::turn_away(socket, served.limits, why));
            }
            continue;
        }
        at_limit = false;
        if served.own {
            connections.spawn(crate::h1::serve(
                socket,
                front.clone(),
                served.limits,
                stop.clone(),
            ));
            continue;
        }
        // The connection's hold timer, for each of its answers (see `hold`).
        let clock = Arc::new(HoldClock::new());
        // Each body read whole under the own server's limits and rate, then the same service
        // (the lean entry included): the two servers differ in the connection only.
        let (front, limits) = (front.clone(), served.limits);
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let (mut front, clock) = (front.clone(), clock.clone());
            async move {
                let (mut parts, body) = request.into_parts();
                parts.extensions.insert(clock);
                let answer = match crate::h1::read_whole(body, limits).await {
                    Ok(body) => {
                        let request = Request::from_parts(parts, ());
                        crate::h1::Service::call(&mut front, request, body).await
                    }
                    Err(refused) => refused,
                };
                Ok::<_, std::convert::Infallible>(answer)
            }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(socket), service));
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "an HTTP connection ended with an error");
            }
        });
    }
    // Closed now, not when the last connection has drained: a new connection is refused at
    // once (a load balancer's next check fails) instead of waiting in the backlog.
    drop(listener);
    graceful.shutdown().await;
    turning_away.abort_all();
    while connections.join_next().await.is_some() {}
}

/// What the operational routes and the session limit read.
#[derive(Clone)]
struct Ops {
    /// The `/mcp` service whose `Host`/`Origin` check the other routes pass too (`None`: they
    /// do not; the gateway listens beyond loopback).
    hosts: Option<Arc<InSession>>,
    shared: Arc<Shared>,
    sessions: Arc<SealedSessionManager>,
    max_sessions: usize,
    /// The largest request body (rmcp's limit, which a body read here keeps).
    max_body: usize,
    drain: Arc<Drain>,
    /// Open `subscriptions/listen` streams.
    listens: Arc<ListenLimit>,
    /// The client profiles' check (`None`: no profiles, no authentication).
    guard: Option<Arc<Guard>>,
}

/// Authentication of `/mcp` requests against the client profiles.
struct Guard {
    clients: Arc<Clients>,
    /// The gateway's public URL (the audience of its tokens, the metadata's `resource`).
    resource: String,
    /// Where the protected-resource metadata is served.
    metadata_url: String,
    /// Session id → the profile that opened it.
    owners: dashmap::DashMap<String, String>,
    /// Profile → sessions of it being opened now (see [`profile_session_limit`]).
    opening: dashmap::DashMap<String, usize>,
}

/// The answer to a request without valid credentials.
fn refused(refusal: &Refusal, metadata_url: &str) -> Response {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::UNAUTHORIZED);
    // As the challenge: without a token there is no `error` (RFC 6750 §3.1).
    let body = match refusal.error {
        Some(error) => serde_json::json!({
            "error": error,
            "error_description": refusal.description,
        }),
        None => serde_json::json!({ "error_description": refusal.description }),
    };
    let mut response = (status, body.to_string()).into_response();
    if let Ok(value) = HeaderValue::from_str(&refusal.challenge(metadata_url)) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The gates every route passes, in this order: the drain gate ([`drain::admit`]), the client
/// profiles ([`authenticate`]), the session limits ([`session_limit`],
/// [`profile_session_limit`]), the listen limit ([`listens`]). One middleware, not
/// three: each `from_fn` layer clones its state and boxes the rest of the stack per request.
async fn gates(State(ops): State<Ops>, request: Request, next: Next) -> Response {
    let Some(admitted) = drain::admit(&ops.drain, &request) else {
        return drain::shutting_down();
    };
    if let Some(posts) = &ops.hosts
        && names_the_gateway(request.uri().path())
        && !posts.host_allowed(request.uri(), request.headers()).await
    {
        tracing::info!(
            path = request.uri().path(),
            "refused a request by its Host or Origin"
        );
        return (
            StatusCode::FORBIDDEN,
            "Forbidden: this request's Host or Origin is not one the gateway serves (DNS \
             rebinding protection); `serve --allow-host` / `--allow-origin` add one\n",
        )
            .into_response();
    }
    // Boxed, and only with profiles: inline, its state (a JWKS fetch's) would be part of every
    // request's future, which is moved whole.
    let (request, owner) = if ops.guard.is_some() {
        match Box::pin(authenticate(&ops, request)).await {
            Ok(passed) => passed,
            Err(refusal) => return refusal,
        }
    } else {
        (request, None)
    };
    let (request, opens) = match opens_session(request, ops.max_body).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    // A session this replica does not run now (ended idle, or run by another replica) is
    // started again from its id: one more session, under the same limits as a new one.
    let opens = opens || restores_session(&ops, restorable(&request)).await;
    if opens && let Some(refusal) = session_limit(&ops).await {
        return refusal;
    }
    // Held until the answer is recorded (the session's owner with it).
    let _opening = match opens {
        true => match profile_session_limit(&ops, request.extensions().get::<Identity>()).await {
            Ok(opening) => opening,
            Err(refusal) => return refusal,
        },
        false => None,
    };
    let listening = match ops.listens.admit(&request) {
        Ok(listening) => listening,
        Err(refusal) => return drain::too_many(refusal),
    };
    let admitted = match listening {
        Some(_) => admitted.uncounted(),
        None => admitted,
    };
    let mut response = next.run(request).await;
    if let Some(listening) = listening {
        response = drain::held_until_sent(response, listening);
    }
    if let Some(owner) = owner {
        // Read before awaiting: a response is not `Sync`.
        let succeeded = response.status().is_success();
        let opened = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|id| ops.sessions.identity(id));
        owner.record(&ops, succeeded, opened).await;
    }
    admitted.counted(response)
}

/// Whether `path` is the MCP endpoint's (rmcp's service makes its own `Host`/`Origin` check).
fn is_mcp(path: &str) -> bool {
    path == "/mcp"
}

/// Any other path: 404, saying where the endpoint is when the client added to it (a trailing
/// `/`, a sub-path).
async fn not_found(uri: axum::http::Uri) -> Response {
    let text = if uri.path().starts_with("/mcp") {
        "not found: the MCP endpoint is /mcp exactly (no trailing slash, no sub-path); point \
         the client at http://HOST:PORT/mcp\n"
    } else {
        "not found: this gateway serves /mcp (and /healthz, /readyz, /metrics)\n"
    };
    (StatusCode::NOT_FOUND, text).into_response()
}

/// Whether a route other than `/mcp` answers with what the gateway serves (`/metrics`: servers,
/// tools, clients; the protected-resource metadata), so a page rebound to a loopback gateway
/// must not read it. The probes answer `ok`/`ready` to anything: a load balancer's check
/// (HAProxy's `httpchk` sends no `Host`) must pass.
fn names_the_gateway(path: &str) -> bool {
    !is_mcp(path) && path != "/healthz" && path != "/readyz"
}

/// With profiles: proves the request's profile (or refuses it), checks that a session is used
/// only by the profile that opened it, and hands the profile to the session's handler. What is
/// left to do once the request is answered comes back with it.
async fn authenticate(
    ops: &Ops,
    mut request: Request,
) -> Result<(Request, Option<Owner>), Response> {
    let Some(guard) = ops.guard.clone() else {
        return Ok((request, None));
    };
    if !is_mcp(request.uri().path()) {
        return Ok((request, None));
    }
    let authorization = match request.headers().get(header::AUTHORIZATION) {
        None => None,
        Some(value) => match value.to_str() {
            Ok(value) => Some(value),
            Err(_) => {
                let refusal = Refusal::invalid(
                    "the Authorization header is not visible ASCII text (a token never is)",
                );
                return Err(refused(&refusal, &guard.metadata_url));
            }
        },
    };
    let proven = match guard
        .clients
        .authenticate(authorization, &guard.resource)
        .await
    {
        Ok(proven) => proven,
        Err(refusal) => {
            tracing::info!(status = refusal.status, reason = %refusal.description, "request refused");
            return Err(refused(&refusal, &guard.metadata_url));
        }
    };
    // Keyed by the session's identity inside its sealed id: every re-sealed id of a session
    // is the same session. The profile sealed into the id holds on every replica and after a
    // restart; the table, for an id sealed before its profile was.
    let opened = request
        .headers()
        .get(&crate::SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(|id| ops.sessions.identity_and_profile(id));
    let (session, sealed_owner) = opened.unzip();
    // The owner is the profile, and with an access token naming its user (`sub`), that user:
    // another user of the same profile does not get into the session either.
    let name = proven.owner();
    let owned_by_another = match (&session, sealed_owner.flatten()) {
        (_, Some(owner)) => owner != name,
        // Sealed without a profile (by a replica serving without client profiles): only the
        // client this replica saw open it may go on with it, never every profile.
        (Some(id), None) => guard.owners.get(id).is_none_or(|owner| *owner != name),
        (None, None) => false,
    };
    let profile = proven.profile;
    if owned_by_another {
        tracing::warn!(client = %profile.name, "a request on another client's session was refused");
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": -32600,
                "message": "this session was opened by another client (or another user of this client); initialize a session of your own"
            }
        });
        let mut response = (StatusCode::FORBIDDEN, body.to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return Err(response);
    }
    let deleting = request.method() == axum::http::Method::DELETE;
    // Sealed into the id of a session this request opens (`crate::sealed::layer`).
    request
        .extensions_mut()
        .insert(crate::sealed::SessionProfile(name.clone()));
    request.extensions_mut().insert(Identity(profile));
    let owner = Owner {
        guard,
        session,
        deleting,
        name,
    };
    Ok((request, Some(owner)))
}

/// An authenticated `/mcp` request's session and profile, for the owners' table once it is
/// answered.
struct Owner {
    guard: Arc<Guard>,
    /// The identity of the session the request named.
    session: Option<String>,
    deleting: bool,
    /// The owner ([`crate::auth::Proven::owner`]).
    name: String,
}

impl Owner {
    /// A session deleted (`succeeded`) is forgotten; a session opened (`opened`: the identity
    /// of the one the answer names) is its profile's.
    async fn record(self, ops: &Ops, succeeded: bool, opened: Option<String>) {
        let Owner {
            guard,
            session,
            deleting,
            name,
        } = self;
        match session {
            Some(id) if deleting && succeeded => {
                guard.owners.remove(&id);
            }
            Some(_) => {}
            None => {
                if let Some(id) = opened {
                    if guard.owners.len() >= ops.max_sessions.saturating_mul(2) {
                        // Forget the sessions that closed (idle, deleted, ended).
                        let known: Vec<String> =
                            guard.owners.iter().map(|e| e.key().clone()).collect();
                        for identity in known {
                            if !ops.sessions.holds(&identity).await {
                                guard.owners.remove(&identity);
                            }
                        }
                    }
                    guard.owners.insert(id, name);
                }
            }
        }
    }
}

/// The metadata at its path-inserted address (RFC 9728 §3.1): only the gateway's own path
/// after the well-known prefix (`/.well-known/oauth-protected-resource/mcp` for
/// `https://gw.example/mcp`); another path names another resource, which this is not.
async fn resource_metadata_at(
    State(ops): State<Ops>,
    axum::extract::Path(path): axum::extract::Path<String>,
) -> Response {
    let own = ops.guard.as_ref().map(|guard| {
        let resource = guard.resource.as_str();
        let after_origin = &resource[origin(resource).len()..];
        after_origin.trim_matches('/').to_string()
    });
    match own {
        Some(own) if own == path.trim_matches('/') => resource_metadata(State(ops)).await,
        Some(_) => (
            StatusCode::NOT_FOUND,
            "no protected resource at this path; the gateway's metadata is at \
             /.well-known/oauth-protected-resource\n",
        )
            .into_response(),
        None => resource_metadata(State(ops)).await,
    }
}

/// RFC 9728 protected-resource metadata (404 without client profiles).
async fn resource_metadata(State(ops): State<Ops>) -> Response {
    let Some(guard) = &ops.guard else {
        return (StatusCode::NOT_FOUND, "no client profiles are configured\n").into_response();
    };
    let body = serde_json::json!({
        "resource": guard.resource,
        "authorization_servers": guard.clients.authorization_servers(),
        "scopes_supported": guard.clients.scopes(),
        "bearer_methods_supported": ["header"],
        "resource_name": ops.shared.options.name,
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// How often the open-session count is looked at for [`drain::trim_after_sessions_close`].
const TRIM_TICK: Duration = Duration::from_secs(5);

/// 200 once the first catalog was published and every upstream settled (connected, failed or
/// waiting for a login: a dead upstream costs only its own entries), else 503 naming the
/// servers still starting. Once ready, it stays ready until the gateway drains: a server
/// pending later (restarting, or replaced by a config edit) costs only its own entries, as a
/// failed one does, and must not take the whole replica out of a load balancer.
async fn readyz(State(ops): State<Ops>) -> Response {
    use std::sync::atomic::Ordering;
    if ops.drain.closing() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response();
    }
    if ops.shared.settled_once.load(Ordering::Relaxed) {
        return (StatusCode::OK, "ready\n").into_response();
    }
    match starting(&ops.shared.runtime.snapshot()) {
        None => {
            ops.shared.settled_once.store(true, Ordering::Relaxed);
            (StatusCode::OK, "ready\n").into_response()
        }
        Some(starting) => {
            let body = format!("starting: {}\n", starting.join(", "));
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
    }
}

/// The servers of `snapshot` still starting, or `None` when it is a published catalog with
/// every server settled.
pub(crate) fn starting(snapshot: &Snapshot) -> Option<Vec<&str>> {
    // A server pending again after a failure (a remote one probed in the background between
    // its retries) has had its say: it costs only its own entries, as a failed one does.
    let starting: Vec<&str> = snapshot
        .servers
        .iter()
        .filter(|(_, status)| !status.state.is_settled() && status.attempts == 0)
        .map(|(name, _)| name.as_str())
        .collect();
    (snapshot.revision == 0 || !starting.is_empty()).then_some(starting)
}

/// The Prometheus text exposition.
async fn metrics(State(ops): State<Ops>) -> Response {
    let http_sessions = ops.sessions.len().await;
    let mut body = ops.shared.metrics.render(
        &ops.shared.runtime.snapshot(),
        ops.shared.sessions.len(),
        http_sessions,
    );
    if let Some(tracer) = &ops.shared.tracer {
        tracer.render(&mut body);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// Whether `request` opens a session — an `initialize` POSTed to `/mcp` without
/// `Mcp-Session-Id`, whatever protocol its header names (it is answered at one that has
/// sessions) — with the request back, the body of a POST without a session id read (at most
/// `max_body` bytes, else 413). No other sessionless request opens one: at 2026-07-28 it is
/// stateless, and at an earlier protocol (named by `MCP-Protocol-Version`) it is refused here,
/// 400 "send `initialize` first" — rmcp served one carrying 2026-07-28-style `_meta` without a
/// session, unchecked, at a protocol that has none, and it counted against the session limits.
async fn opens_session(request: Request, max_body: usize) -> Result<(Request, bool), Response> {
    let new = request.uri().path() == "/mcp"
        && request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    if !new {
        return Ok((request, false));
    }
    let legacy = request
        .headers()
        .get("mcp-protocol-version")
        .is_some_and(|v| LEGACY_VERSIONS.contains(&v.as_bytes()));
    /// The one field looked at; the rest of the message is skipped, not kept.
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    let (parts, body) = request.into_parts();
    let bytes = crate::in_session::read_body(body, max_body)
        .await
        .map_err(|answer| answer.map(axum::body::Body::new))?;
    let method = serde_json::from_slice::<Method<'_>>(&bytes)
        .ok()
        .and_then(|m| m.method.map(|m| m.into_owned()));
    let initialize = method.as_deref() == Some("initialize");
    if legacy && method.is_some() && !initialize {
        return Err(crate::in_session::initialize_first(&bytes).map(axum::body::Body::new));
    }
    Ok((
        Request::from_parts(parts, axum::body::Body::from(bytes)),
        initialize,
    ))
}

/// The protocol versions that have sessions (`initialize`, `Mcp-Session-Id`).
const LEGACY_VERSIONS: [&[u8]; 4] = [b"2024-11-05", b"2025-03-26", b"2025-06-18", b"2025-11-25"];

/// The session id of a request to `/mcp` that would start its session again if this replica
/// did not run it (any but a DELETE).
fn restorable(request: &Request) -> Option<String> {
    if request.uri().path() != "/mcp" || request.method() == axum::http::Method::DELETE {
        return None;
    }
    let id = request.headers().get("mcp-session-id")?.to_str().ok()?;
    Some(id.to_string())
}

/// Whether session `id` (from [`restorable`]; an id that opens) is one this replica does not
/// run now, which answering its request starts again from the id.
async fn restores_session(ops: &Ops, id: Option<String>) -> bool {
    match id.and_then(|id| ops.sessions.identity(&id)) {
        Some(identity) => !ops.sessions.holds(&identity).await,
        None => false,
    }
}

/// Refuses a new session when `max_sessions` are open: 429 with `Retry-After` and a JSON-RPC
/// error body.
async fn session_limit(ops: &Ops) -> Option<Response> {
    drain::sessions_full(&ops.sessions, ops.max_sessions).await
}

/// A session being opened by a profile with `maxSessions`, counted until dropped.
struct Opening {
    guard: Arc<Guard>,
    profile: String,
}

impl Drop for Opening {
    fn drop(&mut self) {
        if let Some(mut opening) = self.guard.opening.get_mut(&self.profile) {
            *opening = opening.saturating_sub(1);
        }
    }
}

/// Refuses a new session of a profile with `gateway.clients.NAME.maxSessions` that has that many
/// open on this replica (or being opened: two at once do not both pass); otherwise the opening,
/// counted until the answer is recorded.
async fn profile_session_limit(
    ops: &Ops,
    identity: Option<&Identity>,
) -> Result<Option<Opening>, Response> {
    let (Some(guard), Some(Identity(profile))) = (&ops.guard, identity) else {
        return Ok(None);
    };
    let Some(max) = profile.max_sessions else {
        return Ok(None);
    };
    let name = profile.name.clone();
    let before = {
        let mut opening = guard.opening.entry(name.clone()).or_default();
        *opening += 1;
        *opening - 1
    };
    let opening = Opening {
        guard: guard.clone(),
        profile: name.clone(),
    };
    let theirs: Vec<String> = guard
        .owners
        .iter()
        .filter(|owner| crate::auth::owned_by_profile(owner.value(), &name))
        .map(|owner| owner.key().clone())
        .collect();
    let mut open = 0;
    for identity in &theirs {
        if ops.sessions.holds(identity).await {
            open += 1;
        }
    }
    if open + before >= max {
        tracing::info!(client = %name, max, "a session over the client's own limit was refused");
        return Err(drain::too_many(format!(
            "client `{name}` has {max} open sessions, its limit \
             (`gateway.clients.{name}.maxSessions`); close one (DELETE) or retry later"
        )));
    }
    Ok(Some(opening))
}
