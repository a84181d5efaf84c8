//! `mcp-harness serve --http` in front of the fixture's conformance mode reached at 2026-07-28,
//! whose SEP-2322 tools answer `input_required` instead of asking mid-call:
//! - a 2026-07-28 client gets the `InputRequiredResult` with the upstream's `requestState` as
//!   made (a signed state the upstream verifies on the retry; an altered one is refused by the
//!   upstream, its error passed through) and its retries with `inputResponses` and
//!   `requestState` reach the final result, over one and over two rounds (and a prompt's
//!   round the same way);
//! - a retry is governed like any call: a client for whom the tool is hidden gets it refused as
//!   unknown, one under a `deny` or `ask` rule gets it refused by that rule — a valid
//!   `requestState` obtained by another client opens nothing;
//! - a 2025-11-25 client calling the same tools gets the rounds as `elicitation/create`
//!   requests on its call's stream and, answering them, the final result;
//! - so does its `prompts/get` and `resources/read` (an elicitation round, then a `roots/list`
//!   round for the resource); a declined or cancelled elicitation reaches the upstream as such
//!   and its refusal (-32602 naming the action) comes back; a client that declared no
//!   elicitation is refused at once, never left waiting;
//! - the rounds of one session's request go to that session only, even while another session
//!   of the same profile has its own rounds open on the same upstream.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::gateway::{Served, Sse, Stateless, accept};
use common::{bin, temp_home};
use serde_json::{Value, json};

const ALICE: &str = "alice-rounds-token-1234567890";
const BOB: &str = "bob-rounds-token-1234567890";
const CAROL: &str = "carol-rounds-token-1234567890";
const DAVE: &str = "dave-rounds-token-1234567890";

const SIGNED: &str = "test_input_required_result_tampered_state";
const MULTI: &str = "test_input_required_result_multi_round";
const PROMPT: &str = "test_input_required_result_prompt";
const RESOURCE: &str = "test://input-required-resource";

/// The gateway in front of the conformance fixture (at 2026-07-28), with four profiles: alice
/// sees everything; bob does not see [`SIGNED`]; carol has it denied, dave under `ask`.
fn gateway(tag: &str) -> Served {
    let dir = temp_home("serve-rounds", tag);
    let config = dir.join("gateway.json");
    let fixture = json!({"command": bin(), "args": ["fixture-server", "--conformance"],
                         "protocolVersion": "2026-07-28"});
    let signed = format!("mcp__conf__{SIGNED}");
    let document = json!({
        "mcpServers": {"conf": fixture},
        "permissions": {"allow": ["mcp__conf__*"]},
        "gateway": {"clients": {
            "alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}},
            "bob": {"auth": {"type": "bearer", "tokenEnv": "GW_BOB"},
                    "tools": {"deny": [signed]}},
            "carol": {"auth": {"type": "bearer", "tokenEnv": "GW_CAROL"},
                      "permissions": {"deny": [signed]}},
            "dave": {"auth": {"type": "bearer", "tokenEnv": "GW_DAVE"},
                     "permissions": {"ask": [signed]}}
        }}
    });
    std::fs::write(&config, document.to_string()).expect("write config");
    let stderr = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let served = Served::start_with_env(
        &dir,
        &config,
        &["--prefix", "none"],
        Stdio::from(stderr),
        &[
            ("GW_ALICE", ALICE),
            ("GW_BOB", BOB),
            ("GW_CAROL", CAROL),
            ("GW_DAVE", DAVE),
        ],
    );
    // The upstream connects in the background: wait (bounded) until its tools are listed.
    let alice = Stateless::new(&served.addr, Some(ALICE), json!({}));
    let start = Instant::now();
    while !alice
        .request("tools/list", json!({}), None)
        .to_string()
        .contains(SIGNED)
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the upstream's tools never appeared"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    served
}

/// A stateless client of `token` declaring elicitation.
fn stateless<'a>(addr: &'a str, token: &str) -> Stateless<'a> {
    Stateless::new(addr, Some(token), json!({"elicitation": {}}))
}

/// A retry of `tool` with `responses` and `state`: the JSON-RPC answer.
fn retry(client: &Stateless<'_>, tool: &str, responses: Value, state: &str) -> Value {
    let params = json!({"name": tool, "arguments": {}, "inputResponses": responses,
                        "requestState": state});
    client.request("tools/call", params, Some(tool))
}

/// The text of a tool result's first content block.
fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// The `InputRequiredResult` of an answer (asserted) and its `requestState`.
fn input_required(answer: &Value, key: &str) -> String {
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    assert_eq!(
        result["inputRequests"][key]["method"], "elicitation/create",
        "{answer}"
    );
    result["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("no requestState: {answer}"))
        .to_string()
}

#[test]
fn a_2026_client_answers_the_upstreams_rounds_itself() {
    let served = gateway("pass");
    let alice = stateless(&served.addr, ALICE);

    // One round, with a state the upstream signed: it comes back as made, and only as made.
    let first = alice.call(SIGNED, json!({}));
    let state = input_required(&first, "confirm");
    let outer: Value = serde_json::from_str(&state).expect("the fixture's state is JSON");
    assert!(
        outer["tag"].as_str().is_some_and(|t| t.len() == 16) && outer["data"].is_string(),
        "not the upstream's signed state: {state}"
    );
    let done = retry(
        &alice,
        SIGNED,
        json!({"confirm": accept(json!({"ok": true}))}),
        &state,
    );
    assert_eq!(text(&done), "integrity-ok: state verified", "{done}");
    let altered = state.replacen("tamper-test", "tamper-tesT", 1);
    assert_ne!(altered, state);
    let refused = retry(
        &alice,
        SIGNED,
        json!({"confirm": accept(json!({"ok": true}))}),
        &altered,
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("requestState integrity check failed")),
        "the upstream's refusal was not passed through: {refused}"
    );

    // Two rounds: the second state carries what the first answer said.
    let first = alice.call(MULTI, json!({}));
    let state = input_required(&first, "step1");
    let second = retry(
        &alice,
        MULTI,
        json!({"step1": accept(json!({"name": "Ada"}))}),
        &state,
    );
    let state = input_required(&second, "step2");
    let done = retry(
        &alice,
        MULTI,
        json!({"step2": accept(json!({"color": "blue"}))}),
        &state,
    );
    assert_eq!(
        text(&done),
        "Multi-round complete for Ada who likes blue",
        "{done}"
    );

    // A prompt's round, the same way.
    let get = |params: Value| alice.request("prompts/get", params, Some(PROMPT));
    let first = get(json!({"name": PROMPT}));
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert!(
        first["result"]["inputRequests"]["user_context"].is_object(),
        "{first}"
    );
    let done = get(json!({"name": PROMPT,
        "inputResponses": {"user_context": accept(json!({"context": "rounds"}))}}));
    assert_eq!(
        done["result"]["messages"][0]["content"]["text"], "Prompt with context: rounds",
        "{done}"
    );
}

#[test]
fn a_retry_cannot_pass_the_view_or_the_permissions() {
    let served = gateway("governed");
    let addr = served.addr.as_str();
    let alice = stateless(addr, ALICE);
    let state = input_required(&alice.call(SIGNED, json!({})), "confirm");
    let answers = json!({"confirm": accept(json!({"ok": true}))});

    // Hidden from bob: his retry with alice's valid state is refused like a tool that does not
    // exist.
    let bob = stateless(addr, BOB);
    let listed = bob.request("tools/list", json!({}), None);
    assert!(listed.to_string().contains(MULTI), "{listed}");
    assert!(!listed.to_string().contains(SIGNED), "{listed}");
    let unknown = retry(&bob, "no_such_tool", answers.clone(), &state);
    let hidden = retry(&bob, SIGNED, answers.clone(), &state);
    assert!(
        hidden.get("result").is_none(),
        "bob ran a hidden tool: {hidden}"
    );
    assert_eq!(
        hidden["error"]["code"], unknown["error"]["code"],
        "{hidden}"
    );
    assert_eq!(
        hidden["error"]["message"]
            .as_str()
            .map(|m| m.replace(SIGNED, "no_such_tool")),
        unknown["error"]["message"].as_str().map(String::from),
        "{hidden}"
    );

    // Denied to carol, asked of dave (who cannot be asked): refused by the rule, never run.
    for (token, key) in [
        (CAROL, "carol.permissions.deny"),
        (DAVE, "dave.permissions.ask"),
    ] {
        let client = stateless(addr, token);
        let refused = retry(&client, SIGNED, answers.clone(), &state);
        // A permission refusal is a tool result flagged as an error, naming the rule.
        assert_eq!(refused["result"]["isError"], true, "{key}: ran: {refused}");
        assert!(
            text(&refused).contains(key) && text(&refused).contains("was not run"),
            "{key}: not refused by the rule: {refused}"
        );
    }

    // The state itself was good all along.
    let done = retry(&alice, SIGNED, answers, &state);
    assert_eq!(text(&done), "integrity-ok: state verified", "{done}");
}

#[test]
fn a_2025_client_gets_the_rounds_as_elicitations() {
    let served = gateway("elicit");
    let session = Session::open(&served.addr, ALICE);
    let mut call = session.post_streaming(&json!({"jsonrpc": "2.0", "id": 7,
        "method": "tools/call", "params": {"name": MULTI, "arguments": {}}}));
    let mut asked = Vec::new();
    let answer = loop {
        let message = call
            .next()
            .unwrap_or_else(|| panic!("the call's stream ended; asked: {asked:?}"));
        if message["id"] == 7 {
            break message;
        }
        assert_eq!(message["method"], "elicitation/create", "{message}");
        let prompt = message["params"]["message"].as_str().unwrap_or_default();
        let content = if prompt.contains("name") {
            json!({"name": "Ada"})
        } else {
            json!({"color": "blue"})
        };
        asked.push(prompt.to_string());
        let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": accept(content)});
        let (status, _, body) = session.post(&reply);
        assert_eq!(status, 202, "the elicitation's answer: {body}");
        assert!(asked.len() <= 4, "asked again and again: {asked:?}");
    };
    assert_eq!(
        asked,
        [
            "Step 1: What is your name?",
            "Step 2: What is your favorite color?"
        ],
        "{answer}"
    );
    assert_eq!(
        text(&answer),
        "Multi-round complete for Ada who likes blue",
        "{answer}"
    );
}

/// Roots a client answers `roots/list` with: `n` of them.
fn roots(n: usize) -> Value {
    let roots: Vec<Value> = (0..n)
        .map(|i| json!({"uri": format!("file:///tmp/root{i}"), "name": format!("root{i}")}))
        .collect();
    json!({"roots": roots})
}

/// The method (and, for an elicitation, the message) of a request the gateway sent.
fn asked(request: &Value) -> String {
    match request["params"]["message"].as_str() {
        Some(message) => format!("{}: {message}", request["method"].as_str().unwrap_or("?")),
        None => request["method"].as_str().unwrap_or("?").to_string(),
    }
}

/// Runs the 2025-11-25 request `method(params)` as id `id` in `session`, answering each request
/// the gateway sends on its stream with `answer(request)`: what was asked (see [`asked`]) and
/// the request's own answer.
fn with_rounds(
    session: &Session<'_>,
    id: u64,
    method: &str,
    params: Value,
    mut answer: impl FnMut(&Value) -> Value,
) -> (Vec<String>, Value) {
    let mut stream = session.post_streaming(&json!({"jsonrpc": "2.0", "id": id,
        "method": method, "params": params}));
    let mut seen = Vec::new();
    loop {
        let message = stream
            .next()
            .unwrap_or_else(|| panic!("{method}: the stream ended; asked: {seen:?}"));
        if message["id"] == id && message.get("method").is_none() {
            return (seen, message);
        }
        answer_request(session, &message, &mut answer, &mut seen);
    }
}

/// Answers `request` (one the gateway sent in `session`) with `answer(request)`, noting it.
fn answer_request(
    session: &Session<'_>,
    request: &Value,
    answer: &mut impl FnMut(&Value) -> Value,
    seen: &mut Vec<String>,
) {
    assert!(request["method"].is_string(), "not a request: {request}");
    seen.push(asked(request));
    assert!(seen.len() <= 4, "asked again and again: {seen:?}");
    let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": answer(request)});
    let (status, _, body) = session.post(&reply);
    assert_eq!(status, 202, "the answer to {request}: {body}");
}

const ASK_CONTEXT: &str = "elicitation/create: What context should the prompt use?";
const ASK_SECTION: &str = "elicitation/create: Which section should the resource show?";

#[test]
fn a_2025_clients_prompt_and_resource_take_their_rounds_through_it() {
    let served = gateway("elicit-read");
    let session = Session::open(&served.addr, ALICE);

    let (seen, done) = with_rounds(&session, 3, "prompts/get", json!({"name": PROMPT}), |_| {
        accept(json!({"context": "rounds"}))
    });
    assert_eq!(seen, [ASK_CONTEXT], "{done}");
    assert_eq!(
        done["result"]["messages"][0]["content"]["text"], "Prompt with context: rounds",
        "{done}"
    );

    let (seen, done) = with_rounds(
        &session,
        4,
        "resources/read",
        json!({"uri": RESOURCE}),
        |r| match r["method"].as_str() {
            Some("roots/list") => roots(2),
            _ => accept(json!({"section": "intro"})),
        },
    );
    assert_eq!(seen, [ASK_SECTION, "roots/list"], "{done}");
    assert_eq!(
        done["result"]["contents"][0]["text"], "Section intro of 2 root(s)",
        "{done}"
    );
}

#[test]
fn a_declined_or_cancelled_round_is_refused_by_the_upstream_and_an_unasked_client_at_once() {
    let served = gateway("decline");
    let session = Session::open(&served.addr, ALICE);
    for (id, method, params, action) in [
        (5, "prompts/get", json!({"name": PROMPT}), "decline"),
        (6, "resources/read", json!({"uri": RESOURCE}), "cancel"),
    ] {
        let (seen, refused) =
            with_rounds(&session, id, method, params, |_| json!({"action": action}));
        assert_eq!(seen.len(), 1, "{method}: {seen:?}");
        assert!(refused.get("result").is_none(), "{method}: {refused}");
        // The upstream's own refusal, passed through: the action reached it as given.
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("the elicitation was answered {action}")),
            "{method}: {refused}"
        );
    }

    // A client that declared no elicitation: refused, with the reason, on the request itself.
    let mute = Session::open_with(&served.addr, ALICE, json!({}));
    for (id, method, params) in [
        (7, "prompts/get", json!({"name": PROMPT})),
        (8, "resources/read", json!({"uri": RESOURCE})),
    ] {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let refused = mute
            .post_streaming(&request)
            .next()
            .unwrap_or_else(|| panic!("{method}: no answer"));
        assert_eq!(refused["id"], id, "{method}: asked anyway: {refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("does not support elicitation"),
            "{method}: not refused for its capabilities: {refused}"
        );
    }
}

#[test]
fn a_rounds_request_goes_only_to_the_session_whose_request_it_is() {
    let served = gateway("two");
    let (one, two) = (
        Session::open(&served.addr, ALICE),
        Session::open(&served.addr, ALICE),
    );
    // One's call asks its first question; then two's read asks its own (two's is now the
    // latest request in flight on the upstream); then one's second question comes.
    let mut call = one.post_streaming(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": MULTI, "arguments": {}}}));
    let first_one = call.next().expect("one's first question");
    let mut read = two.post_streaming(&json!({"jsonrpc": "2.0", "id": 9,
        "method": "resources/read", "params": {"uri": RESOURCE}}));
    let first_two = read.next().expect("two's first question");
    let (mut seen_one, mut seen_two) = (Vec::new(), Vec::new());
    let mut answer_one = |r: &Value| {
        let prompt = r["params"]["message"].as_str().unwrap_or_default();
        accept(if prompt.contains("name") {
            json!({"name": "Ada"})
        } else {
            json!({"color": "blue"})
        })
    };
    let mut answer_two = |r: &Value| match r["method"].as_str() {
        Some("roots/list") => roots(3),
        _ => accept(json!({"section": "two"})),
    };
    answer_request(&one, &first_one, &mut answer_one, &mut seen_one);
    let second_one = call.next().expect("one's second question, on one's stream");
    answer_request(&one, &second_one, &mut answer_one, &mut seen_one);
    let done_one = call.next().expect("one's answer");
    answer_request(&two, &first_two, &mut answer_two, &mut seen_two);
    let roots_two = read.next().expect("two's roots/list, on two's stream");
    answer_request(&two, &roots_two, &mut answer_two, &mut seen_two);
    let done_two = read.next().expect("two's answer");

    assert_eq!(
        seen_one,
        [
            "elicitation/create: Step 1: What is your name?",
            "elicitation/create: Step 2: What is your favorite color?"
        ]
    );
    assert_eq!(
        text(&done_one),
        "Multi-round complete for Ada who likes blue",
        "{done_one}"
    );
    assert_eq!(seen_two, [ASK_SECTION, "roots/list"]);
    assert_eq!(
        done_two["result"]["contents"][0]["text"], "Section two of 3 root(s)",
        "{done_two}"
    );
}

/// A 2025-11-25 session of one bearer token (declaring elicitation and roots unless opened
/// with other capabilities).
struct Session<'a>(common::gateway::Session<'a>);

impl<'a> Session<'a> {
    fn open(addr: &'a str, token: &str) -> Self {
        Self::open_with(addr, token, json!({"elicitation": {}, "roots": {}}))
    }

    /// A session declaring `capabilities`.
    fn open_with(addr: &'a str, token: &str, capabilities: Value) -> Self {
        Self(common::gateway::Session::open(addr, token, capabilities, "rounds-session-test").0)
    }

    fn post(&self, body: &Value) -> (u16, String, String) {
        self.0.post(body)
    }

    /// A POST whose SSE answer is read as it comes (the server's requests on it can be answered
    /// before it ends).
    fn post_streaming(&self, body: &Value) -> Sse {
        Sse::post(&self.0, body)
    }
}
