//! A prototype, for the bench only (`xtask bench-forwarder --relay mcp`): the hand-written
//! HTTP/1.1 relay of `relay_h1.rs` with the per-call MCP work of a gateway on top, to count and
//! time what an MCP path of our own would cost beside `serve`'s rmcp stacks.
//!
//! At start it lists the upstream's tools (its own session, through reqwest) and serves each as
//! `mcp__fx__{name}` with its input schema compiled (jsonschema, as the runtime compiles it).
//! Then each downstream connection gets one upstream connection of its own, and:
//! - a `tools/call` is decoded into rmcp's own types, its tool looked up, its arguments
//!   validated, and re-encoded upstream under the upstream's name and an id of the relay's; the
//!   answer is read whole (chunked framing and event stream undone), the message that answers
//!   that id decoded as rmcp's `CallToolResult`, and re-encoded downstream as one JSON body under
//!   the client's id. An unknown tool, invalid arguments or an undecodable request get a
//!   JSON-RPC error at once and never reach the upstream;
//! - everything else (`initialize`, notifications, listings) is relayed as `relay_h1` relays it.
//!
//! What a real gateway does besides, and this prototype does not: sessions of its own (here
//! the client's session is the upstream's, one connection each), permission rules, revision
//! binding, progress, cancellation and the server's requests during a call (an answer's stream
//! is read whole, so those would wait), output budgets, auth, metrics, audit and traces. Its
//! figures are therefore a lower bound of such a path, not a design.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, ListToolsResult, NumberOrString};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::relay_h1::{Body, HEADERS, LIMIT, READ, invalid, read_more, read_request, relay_answer};

/// How the relay serves an upstream tool's name.
const PREFIX: &str = "mcp__fx__";

/// A tool as the relay serves it.
struct Tool {
    /// Its name upstream.
    upstream: String,
    /// Its input schema, compiled.
    input: jsonschema::Validator,
}

/// The tools by the name the relay serves them under; read only after start.
type Tools = Arc<HashMap<String, Tool>>;

/// A `tools/call` request, decoded in one pass (the bench's client writes `method` first).
#[derive(Deserialize)]
struct Call {
    id: NumberOrString,
    method: String,
    params: CallToolRequestParams,
}

/// A request re-encoded for the upstream.
#[derive(Serialize)]
struct Outgoing<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'static str,
    params: &'a CallToolRequestParams,
}

/// A message of the upstream's answer, decoded as the answer to a `tools/call`.
#[derive(Deserialize)]
struct Answer {
    id: Option<NumberOrString>,
    result: Option<CallToolResult>,
    error: Option<Value>,
}

/// The answer sent downstream.
#[derive(Serialize)]
struct Reply<'a> {
    jsonrpc: &'static str,
    id: Option<&'a NumberOrString>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a CallToolResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
}

/// Lists the upstream's tools, then relays every connection accepted on `listener` to
/// `upstream` until the future is dropped.
pub(super) async fn relay(listener: TcpListener, upstream: u16) -> Result<(), String> {
    let tools: Tools = Arc::new(list_tools(upstream).await?);
    let mut connections = JoinSet::new();
    while let Ok((down, _)) = listener.accept().await {
        let tools = tools.clone();
        connections.spawn(async move {
            if let Err(e) = connection(down, upstream, &tools).await {
                eprintln!("xtask bench-forwarder (mcp): a connection ended: {e}");
            }
        });
    }
    Err("the listener failed".to_string())
}

/// The buffers of one connection, reused from call to call.
#[derive(Default)]
struct Buffers {
    /// The downstream request being read.
    request: Vec<u8>,
    /// What goes out next (head and body, one write).
    out: Vec<u8>,
    /// An encoded body, before its head is written.
    body: Vec<u8>,
    /// The upstream's answer as it came.
    raw: Vec<u8>,
    /// That answer's body with its chunked framing undone.
    events: Vec<u8>,
}

/// One downstream connection, until its client closes it.
async fn connection(mut down: TcpStream, upstream: u16, tools: &Tools) -> std::io::Result<()> {
    let mut up = TcpStream::connect(("127.0.0.1", upstream)).await?;
    down.set_nodelay(true)?;
    up.set_nodelay(true)?;
    let mut buffers = Buffers::default();
    let mut head = Vec::with_capacity(4096);
    let mut read = vec![0; READ];
    let mut next_id = 0u64;
    while let Some((length, total)) = read_request(&mut down, &mut buffers.request).await? {
        let body = &buffers.request[length..total];
        if memchr::memmem::find(body, b"\"tools/call\"").is_some() {
            next_id += 1;
            call(
                &mut down,
                &mut up,
                tools,
                &mut buffers,
                length,
                total,
                next_id,
            )
            .await?;
        } else {
            up.write_all(&buffers.request[..total]).await?;
            relay_answer(&mut up, &mut down, &mut head, &mut read).await?;
        }
        buffers.request.drain(..total);
    }
    Ok(())
}

/// One `tools/call` (the request's head is `request[..length]`, its body up to `total`),
/// governed and forwarded as upstream request `id`, its answer written downstream.
async fn call(
    down: &mut TcpStream,
    up: &mut TcpStream,
    tools: &Tools,
    buffers: &mut Buffers,
    length: usize,
    total: usize,
    id: u64,
) -> std::io::Result<()> {
    let Buffers {
        request,
        out,
        body,
        raw,
        events,
    } = buffers;
    let mut call = match serde_json::from_slice::<Call>(&request[length..total]) {
        Ok(call) if call.method == "tools/call" => call,
        Ok(_) | Err(_) => {
            let error = serde_json::json!({"code": -32600, "message": "not a tools/call this prototype decodes"});
            return reply(down, out, body, None, None, Some(&error)).await;
        }
    };
    let Some(tool) = tools.get(call.params.name.as_ref()) else {
        let error = serde_json::json!({"code": -32602, "message": "unknown tool"});
        return reply(down, out, body, Some(&call.id), None, Some(&error)).await;
    };
    let arguments = Value::Object(call.params.arguments.take().unwrap_or_default());
    if !tool.input.is_valid(&arguments) {
        let error = serde_json::json!({"code": -32602, "message": "arguments do not match the tool's input schema"});
        return reply(down, out, body, Some(&call.id), None, Some(&error)).await;
    }
    if let Value::Object(arguments) = arguments {
        call.params.arguments = Some(arguments);
    }
    call.params.name = tool.upstream.clone().into();
    body.clear();
    serde_json::to_writer(
        &mut *body,
        &Outgoing {
            jsonrpc: "2.0",
            id,
            method: "tools/call",
            params: &call.params,
        },
    )
    .map_err(invalid)?;
    request_head(&request[..length], body.len(), out)?;
    out.extend_from_slice(body);
    up.write_all(out).await?;
    let stream = read_answer(up, raw, events).await?;
    let answer = find_answer(events, stream, id)?;
    reply(
        down,
        out,
        body,
        Some(&call.id),
        answer.result.as_ref(),
        answer.error.as_ref(),
    )
    .await
}

/// The request head in `head` written again into `out` for a body of `length` bytes: its
/// request line and headers, `Content-Length` replaced.
fn request_head(head: &[u8], length: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut headers = [httparse::EMPTY_HEADER; HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    parsed.parse(head).map_err(invalid)?;
    out.clear();
    write!(
        out,
        "{} {} HTTP/1.1\r\n",
        parsed.method.unwrap_or("POST"),
        parsed.path.unwrap_or("/mcp")
    )?;
    for header in parsed.headers.iter() {
        if !header.name.eq_ignore_ascii_case("content-length") {
            out.extend_from_slice(header.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(header.value);
            out.extend_from_slice(b"\r\n");
        }
    }
    write!(out, "Content-Length: {length}\r\n\r\n")
}

/// Reads `up`'s answer whole into `raw`, its body (chunked framing undone) into `body`;
/// whether it is an event stream.
async fn read_answer(
    up: &mut TcpStream,
    raw: &mut Vec<u8>,
    body: &mut Vec<u8>,
) -> std::io::Result<bool> {
    raw.clear();
    let mut framing = None::<(Body, usize, bool, bool)>;
    let mut fed = 0;
    loop {
        if read_more(up, raw).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if framing.is_none() {
            let mut headers = [httparse::EMPTY_HEADER; HEADERS];
            let mut answer = httparse::Response::new(&mut headers);
            match answer.parse(raw).map_err(invalid)? {
                httparse::Status::Complete(length) => {
                    if answer.code != Some(200) {
                        return Err(invalid(format!(
                            "the upstream answered a call with {:?}",
                            answer.code
                        )));
                    }
                    let header = |name: &str| {
                        answer
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case(name))
                            .map(|h| h.value)
                    };
                    let stream =
                        header("content-type").is_some_and(|v| v.starts_with(b"text/event-stream"));
                    let chunked = header("transfer-encoding").is_some();
                    framing = Some((Body::of(&answer)?, length, stream, chunked));
                    fed = length;
                }
                httparse::Status::Partial if raw.len() > LIMIT => {
                    return Err(invalid("an answer head over the relay's limit"));
                }
                httparse::Status::Partial => continue,
            }
        }
        let Some((framed, start, stream, chunked)) = &mut framing else {
            continue;
        };
        let done = framed.feed(&raw[fed..])?;
        fed = raw.len();
        if raw.len() > LIMIT * 16 {
            return Err(invalid("an answer over the relay's limit"));
        }
        if done {
            body.clear();
            if *chunked {
                dechunk(&raw[*start..], body)?;
            } else {
                body.extend_from_slice(&raw[*start..]);
            }
            return Ok(*stream);
        }
    }
}

/// The data of the complete chunked body `framed`, appended to `out`.
fn dechunk(mut framed: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    loop {
        let line = memchr::memchr(b'\n', framed).ok_or_else(|| invalid("a cut chunk size"))?;
        let size = framed[..line]
            .split(|&b| b == b';' || b == b'\r')
            .next()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| usize::from_str_radix(hex.trim(), 16).ok())
            .ok_or_else(|| invalid("a bad chunk size"))?;
        framed = &framed[line + 1..];
        if size == 0 {
            return Ok(());
        }
        let data = framed.get(..size).ok_or_else(|| invalid("a cut chunk"))?;
        out.extend_from_slice(data);
        framed = framed
            .get(size + 2..)
            .ok_or_else(|| invalid("a cut chunk"))?;
    }
}

/// The message of `body` (an event stream's `data:` lines, or one JSON body) that answers `id`.
fn find_answer(body: &[u8], stream: bool, id: u64) -> std::io::Result<Answer> {
    let wanted = NumberOrString::Number(id as i64);
    let decode = |json: &[u8]| serde_json::from_slice::<Answer>(json).ok();
    if !stream {
        return decode(body)
            .filter(|a| a.id.as_ref() == Some(&wanted))
            .ok_or_else(|| invalid("no answer to the call in the upstream's body"));
    }
    for line in body.split(|&b| b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        let data = data.strip_suffix(b"\r").unwrap_or(data);
        if let Some(answer) = decode(data.trim_ascii_start())
            && answer.id.as_ref() == Some(&wanted)
        {
            return Ok(answer);
        }
    }
    Err(invalid(
        "no answer to the call in the upstream's event stream",
    ))
}

/// Writes one JSON-RPC answer to `down` as one `application/json` body (`id` null for a
/// request that could not be read).
async fn reply(
    down: &mut TcpStream,
    out: &mut Vec<u8>,
    body: &mut Vec<u8>,
    id: Option<&NumberOrString>,
    result: Option<&CallToolResult>,
    error: Option<&Value>,
) -> std::io::Result<()> {
    use std::io::Write as _;
    body.clear();
    serde_json::to_writer(
        &mut *body,
        &Reply {
            jsonrpc: "2.0",
            id,
            result,
            error,
        },
    )
    .map_err(invalid)?;
    out.clear();
    write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )?;
    out.extend_from_slice(body);
    down.write_all(out).await
}

/// The upstream's tools, listed in a session of the relay's own, by the names it serves.
async fn list_tools(upstream: u16) -> Result<HashMap<String, Tool>, String> {
    let url = format!("http://127.0.0.1:{upstream}/mcp");
    // Bounded: a relay that cannot list would leave its clients waiting on their first call.
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| format!("listing the upstream's tools: {e}"))?;
    let post = async |session: Option<&str>, body: Value| {
        let mut request = client
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(session) = session {
            request = request
                .header("Mcp-Session-Id", session)
                .header("Mcp-Protocol-Version", "2025-06-18");
        }
        let answer = request
            .send()
            .await
            .map_err(|e| format!("listing the upstream's tools: {e}"))?;
        let session = answer
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = answer
            .text()
            .await
            .map_err(|e| format!("listing the upstream's tools: {e}"))?;
        Ok::<_, String>((session, text))
    };
    let (session, _) = post(
        None,
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "xtask-bench-relay-mcp", "version": "1"}}}),
    )
    .await?;
    let session = session.ok_or("the upstream opened no session")?;
    post(
        Some(&session),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await?;
    let (_, listed) = post(
        Some(&session),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await?;
    let json = listed
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim_start)
        .find(|data| data.contains("\"tools\""))
        .unwrap_or(&listed);
    let message: Value =
        serde_json::from_str(json).map_err(|e| format!("the upstream's tools/list: {e}"))?;
    let result: ListToolsResult = serde_json::from_value(message["result"].clone())
        .map_err(|e| format!("the upstream's tools/list result: {e}"))?;
    let mut tools = HashMap::new();
    for tool in result.tools {
        let schema = Value::Object((*tool.input_schema).clone());
        let input = jsonschema::validator_for(&schema)
            .map_err(|e| format!("tool `{}`: its input schema: {e}", tool.name))?;
        tools.insert(
            format!("{PREFIX}{}", tool.name),
            Tool {
                upstream: tool.name.to_string(),
                input,
            },
        );
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_event_stream_gives_back_the_answer_to_its_id() {
        let events = "id: 0\nretry: 3000\ndata: \n\n\
            data: {\"jsonrpc\":\"2.0\",\"id\":6,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}}\n\n\
            data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}\n\n";
        let (a, b) = events.split_at(40);
        let framed = format!(
            "{:x}\r\n{a}\r\n{:x};e=1\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        let mut body = Vec::new();
        dechunk(framed.as_bytes(), &mut body).unwrap();
        assert_eq!(body, events.as_bytes());
        let answer = find_answer(&body, true, 7).unwrap();
        let text = serde_json::to_string(&answer.result.unwrap().content).unwrap();
        assert!(text.contains("\"hi\""), "{text}");
        assert!(find_answer(&body, true, 8).is_err());
        assert!(dechunk(b"5\r\nab", &mut Vec::new()).is_err());
    }

    #[test]
    fn a_request_head_keeps_its_headers_with_the_new_length() {
        let head =
            b"POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nMcp-Session-Id: s\r\n\r\n";
        let mut out = Vec::new();
        request_head(head, 42, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "POST /mcp HTTP/1.1\r\nHost: h\r\nMcp-Session-Id: s\r\nContent-Length: 42\r\n\r\n"
        );
    }
}
