//! OpenTelemetry traces: the W3C trace context a request continues (`_meta.traceparent` with
//! `_meta.tracestate`, else the HTTP `traceparent` / `tracestate` headers), spans, and their
//! export over OTLP/HTTP with JSON bodies when the standard `OTEL_*` environment variables name
//! an endpoint. Which spans the gateway records, and how they are named, is
//! [`crate::spans`]' and [`crate::traced`]'s business.
//!
//! Invariants:
//! - without a configured endpoint there is no [`Tracer`]: nothing is recorded, queued or sent;
//! - recording a span never blocks a call nor waits on the collector: finished spans go into a
//!   bounded queue that one task drains in batches; when the queue is full or an export fails,
//!   the spans are dropped and counted (`mcp_harness_trace_spans_dropped_total`), never retried
//!   into unbounded memory;
//! - a span carries names, URIs, ids, the client's profile, outcomes, times and the trace's
//!   well-formed `tracestate` only: never arguments, results, tokens, other header values or
//!   raw session ids; the export's own headers (collector credentials) are never logged.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Where and how spans are exported: OTLP over HTTP with JSON bodies (`http/json`).
#[derive(Clone)]
pub struct TraceExport {
    /// The URL spans are POSTed to (a collector's `…/v1/traces`).
    pub endpoint: String,
    /// Headers sent with each export (a collector's API key, say); never logged.
    pub headers: Vec<(String, String)>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// The longest a finished span waits before it is sent.
    pub schedule_delay: Duration,
    /// At most this many finished spans wait to be sent; more are dropped and counted.
    pub max_queue: usize,
    /// At most this many spans per export request.
    pub max_batch: usize,
    /// How long one export request may take.
    pub timeout: Duration,
}

impl fmt::Debug for TraceExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceExport")
            .field("endpoint", &redacted_url(&self.endpoint))
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("service_name", &self.service_name)
            .field("schedule_delay", &self.schedule_delay)
            .field("max_queue", &self.max_queue)
            .field("max_batch", &self.max_batch)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why the `OTEL_*` environment cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TraceExportError {
    /// A variable holds something this exporter does not do or cannot read.
    #[error("{variable}: {problem}")]
    Variable {
        /// The environment variable.
        variable: &'static str,
        /// What is wrong and what to change.
        problem: String,
    },
}

fn bad(variable: &'static str, problem: impl Into<String>) -> TraceExportError {
    TraceExportError::Variable {
        variable,
        problem: problem.into(),
    }
}

impl TraceExport {
    /// The export the standard OpenTelemetry environment variables describe, read through
    /// `var`: `None` when no endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as
    /// is, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`), or when `OTEL_SDK_DISABLED=true`
    /// or `OTEL_TRACES_EXPORTER=none`. Also read: `OTEL_EXPORTER_OTLP[_TRACES]_HEADERS`,
    /// `_PROTOCOL` (only `http/json`), `_TIMEOUT`; `OTEL_SERVICE_NAME`;
    /// `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`.
    pub fn from_env(
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, TraceExportError> {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if let Some(exporter) = set("OTEL_TRACES_EXPORTER") {
            if exporter.eq_ignore_ascii_case("none") {
                return Ok(None);
            }
            if !exporter.eq_ignore_ascii_case("otlp") {
                return Err(bad(
                    "OTEL_TRACES_EXPORTER",
                    format!(
                        "`{exporter}` is not supported: the gateway exports traces over OTLP only; set it to `otlp` or `none`, or unset it"
                    ),
                ));
            }
        }
        let endpoint = match (
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(traces), _) => traces,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(bad(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "the endpoint must be an http:// or https:// URL (the collector's OTLP/HTTP receiver, port 4318 by default)",
            ));
        }
        let protocol = [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ]
        .into_iter()
        .find_map(|variable| set(variable).map(|protocol| (variable, protocol)));
        if let Some((variable, protocol)) = protocol
            && protocol != "http/json"
        {
            return Err(bad(
                variable,
                format!(
                    "`{protocol}` is not supported: the gateway exports OTLP over HTTP with JSON bodies; set it to `http/json` (or unset it) and point the endpoint at the collector's OTLP/HTTP receiver (port 4318 by default)"
                ),
            ));
        }
        let mut headers = Vec::new();
        for variable in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            let Some(list) = set(variable) else { continue };
            for entry in list.split(',').filter(|e| !e.trim().is_empty()) {
                let Some((name, value)) = entry.split_once('=') else {
                    return Err(bad(
                        variable,
                        "every entry must be `name=value` (comma-separated, values percent-encoded)",
                    ));
                };
                let name = name.trim().to_ascii_lowercase();
                let value = percent_decode(value.trim()).ok_or_else(|| {
                    bad(
                        variable,
                        format!("the value of `{name}` is not valid percent-encoding"),
                    )
                })?;
                headers.retain(|(known, _): &(String, String)| *known != name);
                headers.push((name, value));
            }
        }
        let number = |variable: &'static str, default: u64| -> Result<u64, TraceExportError> {
            match set(variable) {
                None => Ok(default),
                Some(text) => text
                    .parse()
                    .map_err(|_| bad(variable, format!("`{text}` is not a whole number"))),
            }
        };
        let timeout = match set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
            Some(_) => number("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 10_000)?,
            None => number("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?,
        };
        Ok(Some(Self {
            endpoint,
            headers,
            service_name: set("OTEL_SERVICE_NAME").unwrap_or_else(|| "mcp-harness".into()),
            schedule_delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5_000)?.max(1)),
            max_queue: number("OTEL_BSP_MAX_QUEUE_SIZE", 2_048)?.clamp(1, 1 << 20) as usize,
            max_batch: number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)?.clamp(1, 1 << 16) as usize,
            timeout: Duration::from_millis(timeout.max(1)),
        }))
    }
}

/// `%XX` sequences decoded; `None` when one is malformed or the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `scheme://host[:port]/path` of `url`: no user info, query or fragment (they may hold
/// credentials).
fn redacted_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority.rsplit('@').next().unwrap_or(authority);
    format!("{scheme}://{host}{path}")
}

/// The W3C trace context a span continues: its trace, its parent span, whether it is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceContext {
    pub(crate) trace_id: u128,
    pub(crate) span_id: u64,
    pub(crate) sampled: bool,
}

impl TraceContext {
    /// Parses a `traceparent` value (version `00`, or a later version read as `00`); `None`
    /// for anything malformed or with an all-zero id, which starts a new trace.
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        let mut parts = value.split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(version, 2)
            || version == "ff"
            || !hex(trace, 32)
            || !hex(span, 16)
            || !hex(flags, 2)
        {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let span_id = u64::from_str_radix(span, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        (trace_id != 0 && span_id != 0).then_some(Self {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The `traceparent` header value naming this span.
    pub(crate) fn header(&self) -> String {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            self.span_id,
            u8::from(self.sampled)
        )
    }
}

/// W3C `tracestate`: vendor entries that travel with a trace, passed on unchanged. Holds only
/// a well-formed value (at most [`TraceState::MAX_MEMBERS`] list members and
/// [`TraceState::MAX_LEN`] characters, each key and value as the W3C grammar allows, no key
/// twice); anything else is dropped, never trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceState(Arc<str>);

impl TraceState {
    /// At most this many list members.
    pub(crate) const MAX_MEMBERS: usize = 32;
    /// At most this many characters (the length W3C asks every platform to pass on).
    pub(crate) const MAX_LEN: usize = 512;

    /// The value with optional whitespace around members removed, or `None` when it is
    /// malformed, too long, has too many members, repeats a key, or holds no member.
    pub(crate) fn parse(value: &str) -> Option<Self> {
        if value.len() > Self::MAX_LEN * 2 {
            return None;
        }
        let mut members: Vec<&str> = Vec::new();
        for member in value.split(',') {
            let member = member.trim_matches([' ', '\t']);
            if member.is_empty() {
                continue;
            }
            let (key, val) = member.split_once('=')?;
            if !valid_key(key) || !valid_value(val) {
                return None;
            }
            if members.len() == Self::MAX_MEMBERS
                || members
                    .iter()
                    .any(|m| m.split_once('=').map(|(k, _)| k) == Some(key))
            {
                return None;
            }
            members.push(member);
        }
        let joined = members.join(",");
        (!joined.is_empty() && joined.len() <= Self::MAX_LEN).then(|| Self(joined.into()))
    }

    /// The value, as it goes on.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// A `tracestate` key: `lcalpha *255(keychar)`, or `tenant@system` (`(lcalpha / DIGIT)
/// *240(keychar) "@" lcalpha *13(keychar)`).
fn valid_key(key: &str) -> bool {
    let keychar = |b: u8| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*' | b'/');
    let part = |s: &str, max: usize, digit_first: bool| {
        let bytes = s.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= max
            && (bytes[0].is_ascii_lowercase() || (digit_first && bytes[0].is_ascii_digit()))
            && bytes.iter().all(|b| keychar(*b))
    };
    match key.split_once('@') {
        None => part(key, 256, false),
        Some((tenant, system)) => part(tenant, 241, true) && part(system, 14, false),
    }
}

/// A `tracestate` value: 1 to 256 printable ASCII characters but `,` and `=`, not ending in a
/// space.
fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

/// What a span continues: the W3C trace context and the `tracestate` that came with it.
#[derive(Debug, Clone)]
pub(crate) struct Parent {
    pub(crate) context: TraceContext,
    pub(crate) state: Option<TraceState>,
}

/// The trace context a request continues: its `_meta.traceparent` (with `_meta.tracestate`),
/// else its HTTP `traceparent` header (with the `tracestate` headers); `None` when neither is
/// there or well-formed. A malformed `tracestate` is dropped, the `traceparent` kept.
pub(crate) fn incoming(
    meta: &rmcp::model::RequestMetaObject,
    extensions: &rmcp::model::Extensions,
) -> Option<Parent> {
    if let Some(context) = meta.get_traceparent().and_then(TraceContext::parse) {
        let state = meta.get_tracestate().and_then(TraceState::parse);
        return Some(Parent { context, state });
    }
    let headers = &extensions.get::<axum::http::request::Parts>()?.headers;
    let context = headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .and_then(TraceContext::parse)?;
    // Several `tracestate` fields are one list, joined in order (RFC 9110 §5.3).
    let mut fields = headers.get_all("tracestate").iter();
    let state = match (fields.next(), fields.next()) {
        (None, _) => None,
        (Some(one), None) => one.to_str().ok().and_then(TraceState::parse),
        (Some(first), Some(second)) => {
            let all: Option<Vec<&str>> = [first, second]
                .into_iter()
                .chain(fields)
                .map(|v| v.to_str().ok())
                .collect();
            all.and_then(|all| TraceState::parse(&all.join(",")))
        }
    };
    Some(Parent { context, state })
}

/// What kind of span (OTLP's `SpanKind`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A request the gateway serves.
    Server = 2,
    /// A request the gateway sends upstream.
    Client = 3,
}

/// A finished span, as queued for export.
struct Finished {
    context: TraceContext,
    state: Option<TraceState>,
    parent: Option<u64>,
    kind: Kind,
    name: String,
    start_ns: u128,
    end_ns: u128,
    attributes: Vec<(&'static str, String)>,
    error: bool,
}

/// Records spans and hands them to the exporter task. One per gateway, only when an export is
/// configured.
pub(crate) struct Tracer {
    queue: mpsc::Sender<Finished>,
    /// Asks the exporter to send what it holds now; it answers on the enclosed sender.
    flushes: mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
    counts: Arc<Counts>,
    ids: AtomicU64,
}

/// What happened to the spans.
#[derive(Default)]
struct Counts {
    exported: AtomicU64,
    dropped: AtomicU64,
}

impl Tracer {
    /// Starts the exporter task (it ends when the tracer is dropped, after sending what is
    /// queued). Must run inside a tokio runtime.
    pub(crate) fn start(export: TraceExport) -> Arc<Self> {
        let (queue, rx) = mpsc::channel(export.max_queue);
        let counts = Arc::new(Counts::default());
        let mut seed = [0u8; 8];
        let seed = match ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
        {
            Ok(()) => u64::from_le_bytes(seed),
            Err(_) => SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
        };
        tracing::info!(endpoint = %redacted_url(&export.endpoint), "exporting traces over OTLP/HTTP (JSON)");
        let (flushes, flush_rx) = mpsc::channel(4);
        tokio::spawn(run_exporter(rx, flush_rx, export, counts.clone()));
        Arc::new(Self {
            queue,
            flushes,
            counts,
            ids: AtomicU64::new(seed),
        })
    }

    /// A fresh non-zero span id (SplitMix64 over a randomly seeded counter).
    fn next_id(&self) -> u64 {
        let mut z = self
            .ids
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).max(1)
    }

    /// Starts a span: a child of `parent` (same trace, sampled as it is, its `tracestate`
    /// carried on), else the root of a new sampled trace.
    pub(crate) fn span(
        self: &Arc<Self>,
        parent: Option<&Parent>,
        kind: Kind,
        name: String,
    ) -> Span {
        let context = TraceContext {
            trace_id: parent.map_or_else(
                || (u128::from(self.next_id()) << 64) | u128::from(self.next_id()),
                |p| p.context.trace_id,
            ),
            span_id: self.next_id(),
            sampled: parent.is_none_or(|p| p.context.sampled),
        };
        Span {
            tracer: self.clone(),
            context,
            state: parent.and_then(|p| p.state.clone()),
            parent: parent.map(|p| p.context.span_id),
            kind,
            name,
            start_ns: unix_nanos(),
            started: Instant::now(),
            attributes: Vec::new(),
        }
    }

    /// Sends the finished spans now (at shutdown), waiting at most `limit`.
    pub(crate) async fn flush(&self, limit: Duration) {
        let (done, answered) = tokio::sync::oneshot::channel();
        if self.flushes.try_send(done).is_ok() {
            let _ = tokio::time::timeout(limit, answered).await;
        }
    }

    /// The exporter's counters in the Prometheus text format.
    pub(crate) fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        out.push_str(
            "# HELP mcp_harness_trace_spans_exported_total Spans the OTLP collector accepted.\n",
        );
        out.push_str("# TYPE mcp_harness_trace_spans_exported_total counter\n");
        let _ = writeln!(
            out,
            "mcp_harness_trace_spans_exported_total {}",
            self.counts.exported.load(Ordering::Relaxed)
        );
        out.push_str("# HELP mcp_harness_trace_spans_dropped_total Spans dropped: queue full or export failed.\n");
        out.push_str("# TYPE mcp_harness_trace_spans_dropped_total counter\n");
        let _ = writeln!(
            out,
            "mcp_harness_trace_spans_dropped_total {}",
            self.counts.dropped.load(Ordering::Relaxed)
        );
    }
}

/// A span being recorded; [`Span::end`] queues it (when sampled).
pub(crate) struct Span {
    tracer: Arc<Tracer>,
    context: TraceContext,
    state: Option<TraceState>,
    parent: Option<u64>,
    kind: Kind,
    name: String,
    start_ns: u128,
    started: Instant,
    attributes: Vec<(&'static str, String)>,
}

impl Span {
    /// This span's context (what a child continues, what goes upstream as `traceparent`).
    pub(crate) fn context(&self) -> TraceContext {
        self.context
    }

    /// What a child of this span continues: its context and `tracestate`.
    pub(crate) fn as_parent(&self) -> Parent {
        Parent {
            context: self.context,
            state: self.state.clone(),
        }
    }

    /// The `tracestate` this span carries on.
    pub(crate) fn state(&self) -> Option<&TraceState> {
        self.state.as_ref()
    }

    /// Sets a string attribute (at most 256 characters of `value`).
    pub(crate) fn set(&mut self, key: &'static str, value: &str) {
        let value: String = value.chars().take(256).collect();
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((key, value)),
        }
    }

    /// Ends the span (`error`: its status is ERROR) and queues it without waiting: a full
    /// queue drops it (counted).
    pub(crate) fn end(self, error: bool) {
        if !self.context.sampled {
            return;
        }
        let finished = Finished {
            context: self.context,
            state: self.state,
            parent: self.parent,
            kind: self.kind,
            name: self.name,
            start_ns: self.start_ns,
            end_ns: self.start_ns + self.started.elapsed().as_nanos(),
            attributes: self.attributes,
            error,
        };
        if self.tracer.queue.try_send(finished).is_err() {
            self.tracer.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Sends the queued spans in batches of at most `max_batch`, at least every `schedule_delay`;
/// a failed export drops its batch (counted). Ends when the queue closes.
async fn run_exporter(
    mut rx: mpsc::Receiver<Finished>,
    mut flushes: mpsc::Receiver<tokio::sync::oneshot::Sender<()>>,
    export: TraceExport,
    counts: Arc<Counts>,
) {
    let client = match reqwest::Client::builder().timeout(export.timeout).build() {
        Ok(client) => Some(client),
        Err(error) => {
            tracing::warn!(%error, "the OTLP exporter could not be built; spans are dropped");
            None
        }
    };
    let mut batch: Vec<Finished> = Vec::with_capacity(export.max_batch);
    let mut tick = tokio::time::interval(export.schedule_delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        let mut answer = None;
        let (flush, closed) = tokio::select! {
            span = rx.recv() => match span {
                Some(span) => {
                    batch.push(span);
                    (batch.len() >= export.max_batch, false)
                }
                None => (true, true),
            },
            _ = tick.tick() => (true, false),
            Some(done) = flushes.recv() => {
                answer = Some(done);
                (true, false)
            }
        };
        if flush {
            // What is queued now goes in this export too: after a slow export the tick is
            // due at once, and a batch of only the spans `select!` happened to take one by
            // one first would leave the rest to fill the queue and be dropped.
            while batch.len() < export.max_batch {
                match rx.try_recv() {
                    Ok(span) => batch.push(span),
                    Err(_) => break,
                }
            }
        }
        if flush && !batch.is_empty() {
            let spans = std::mem::take(&mut batch);
            let count = spans.len() as u64;
            let sent = match &client {
                Some(client) => send(client, &export, &spans).await,
                None => Err("no HTTP client".into()),
            };
            match sent {
                Ok(()) => {
                    counts.exported.fetch_add(count, Ordering::Relaxed);
                    if failing {
                        tracing::info!("traces are exported again");
                    }
                    failing = false;
                }
                Err(problem) => {
                    counts.dropped.fetch_add(count, Ordering::Relaxed);
                    if !failing {
                        tracing::warn!(
                            endpoint = %redacted_url(&export.endpoint),
                            %problem,
                            "traces could not be exported; spans are dropped (counted in mcp_harness_trace_spans_dropped_total) until the collector answers"
                        );
                    }
                    failing = true;
                }
            }
        }
        if let Some(done) = answer {
            let _ = done.send(());
        }
        if closed {
            return;
        }
    }
}

/// One OTLP/HTTP JSON export request.
async fn send(
    client: &reqwest::Client,
    export: &TraceExport,
    spans: &[Finished],
) -> Result<(), String> {
    let body = json!({"resourceSpans": [{
        "resource": {"attributes": [attribute("service.name", &export.service_name)]},
        "scopeSpans": [{
            "scope": {"name": "mcp-harness-gateway", "version": env!("CARGO_PKG_VERSION")},
            "spans": spans.iter().map(span_json).collect::<Vec<_>>(),
        }],
    }]});
    let mut request = client
        .post(&export.endpoint)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in &export.headers {
        request = request.header(name, value);
    }
    let response = request.send().await.map_err(|e| {
        // reqwest's error names the URL; say only what kind of failure it was.
        if e.is_timeout() {
            "the collector did not answer in time".to_string()
        } else if e.is_connect() {
            "the collector could not be reached".to_string()
        } else {
            "the request failed".to_string()
        }
    })?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("the collector answered HTTP {}", response.status()))
    }
}

fn attribute(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

fn span_json(span: &Finished) -> Value {
    let mut out = json!({
        "traceId": format!("{:032x}", span.context.trace_id),
        "spanId": format!("{:016x}", span.context.span_id),
        "name": span.name,
        "kind": span.kind as u8,
        "startTimeUnixNano": span.start_ns.to_string(),
        "endTimeUnixNano": span.end_ns.to_string(),
        "attributes": span.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
        "status": {"code": if span.error { 2 } else { 1 }},
    });
    if let Some(parent) = span.parent {
        out["parentSpanId"] = Value::String(format!("{parent:016x}"));
    }
    if let Some(state) = &span.state {
        out["traceState"] = Value::String(state.as_str().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn traceparent_is_parsed_strictly() {
        let ok = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        assert_eq!(ok.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(ok.span_id, 0x00f067aa0ba902b7);
        assert!(ok.sampled);
        assert_eq!(
            ok.header(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
        let future =
            TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more")
                .expect("a later version is read as 00");
        assert!(!future.sampled);
    }

    #[test]
    fn tracestate_is_kept_only_when_well_formed() {
        let ok = TraceState::parse(" congo=t61rcWkgMzE ,\trojo=00f067aa0ba902b7,, a@b=x ")
            .expect("valid");
        assert_eq!(ok.as_str(), "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,a@b=x");
        let members: Vec<String> = (0..32).map(|i| format!("k{i}=v")).collect();
        assert!(TraceState::parse(&members.join(",")).is_some());
        let long = format!("k={}", "v".repeat(257));
        for bad in [
            "",
            "Congo=1",
            "congo",
            "congo=a=b",
            "congo=1,congo=2",
            "congo=é",
            "1abc=1",
            "a@B=1",
            long.as_str(),
        ] {
            assert_eq!(TraceState::parse(bad), None, "{bad}");
        }
        let too_many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(TraceState::parse(&too_many.join(",")), None);
        let too_long: Vec<String> = (0..30)
            .map(|i| format!("k{i}={}", "v".repeat(20)))
            .collect();
        assert_eq!(
            TraceState::parse(&too_long.join(",")),
            None,
            "over 512 characters"
        );
    }

    #[test]
    fn env_configures_the_export_or_nothing() {
        assert!(TraceExport::from_env(&env(&[])).unwrap().is_none());
        let export = TraceExport::from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "Api-Key=s%3Dcret,x=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x=2"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]))
        .unwrap()
        .expect("configured");
        assert_eq!(export.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(
            export.headers,
            vec![
                ("api-key".to_string(), "s=cret".to_string()),
                ("x".to_string(), "2".to_string())
            ]
        );
        assert_eq!(export.schedule_delay, Duration::from_millis(100));
        assert!(!format!("{export:?}").contains("cret"), "{export:?}");
        let traces = TraceExport::from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4318/custom"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(traces.endpoint, "http://b:4318/custom");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let export =
                TraceExport::from_env(&env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"), off]));
            assert!(export.unwrap().is_none(), "{off:?}");
        }
        let grpc = TraceExport::from_env(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]));
        assert!(grpc.unwrap_err().to_string().contains("http/json"));
    }

    /// A collector slower than the schedule delay gets what waits in each export: after a
    /// slow export the tick is due at once, and `select!` (random among ready branches) often
    /// took one span before it, so every other export carried one span while the rest waited
    /// (and, from a busier gateway, filled the queue and were dropped).
    #[tokio::test]
    async fn a_slow_collector_gets_what_waits_in_each_export() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let batches = Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
        let seen = batches.clone();
        // Bounded: at most 100 exports are answered, each after 200 ms.
        tokio::spawn(async move {
            for _ in 0..100 {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 64 * 1024];
                    let body = loop {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&request).to_lowercase();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break request[end + 4..].to_vec();
                        }
                    };
                    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
                        .as_array()
                        .map_or(0, Vec::len);
                    seen.lock().expect("batches").push(spans);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let _ = socket
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                });
            }
        });
        let tracer = Tracer::start(TraceExport {
            endpoint: format!("http://{addr}/v1/traces"),
            headers: Vec::new(),
            service_name: "test".into(),
            schedule_delay: Duration::from_millis(20),
            max_queue: 2048,
            max_batch: 512,
            timeout: Duration::from_secs(10),
        });
        // 12 spans every 10 ms for 1.5 s: spans always wait while an export runs.
        for round in 0..150 {
            for n in 0..12 {
                let name = format!("span {round}.{n}");
                tracer.span(None, Kind::Server, name).end(false);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Bounded: 5 s.
        let start = std::time::Instant::now();
        while tracer.counts.exported.load(Ordering::Relaxed) < 1800 {
            assert!(start.elapsed() < Duration::from_secs(5), "{batches:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(tracer.counts.dropped.load(Ordering::Relaxed), 0);
        let batches = batches.lock().expect("batches").clone();
        // Every export but the first and the last found a slow export's worth waiting.
        let middle = &batches[1..batches.len().saturating_sub(1).max(1)];
        assert!(middle.iter().all(|&n| n >= 20), "{batches:?}");
    }

    #[test]
    fn urls_lose_credentials_when_shown() {
        assert_eq!(
            redacted_url("https://user:pw@collector:4318/v1/traces?key=abc"),
            "https://collector:4318/v1/traces"
        );
    }
}
