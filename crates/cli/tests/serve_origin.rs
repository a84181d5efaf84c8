//! `mcp-harness serve --http` with two clients calling the same upstream at once: an upstream's
//! elicitation reaches the client whose call it belongs to, and only it.
//! - a Streamable HTTP upstream (the fixture's `--client-requests` tools) elicits on each call's
//!   response stream: each client gets exactly its own call's elicitation, also when the other
//!   client's call started later (the case a "latest caller" rule gets wrong);
//! - a stdio upstream's request names no call: with two clients in flight it is refused
//!   ("cannot be attributed to one caller") rather than sent to either; with one, it reaches it.
//!
//! Everything asked of a client for a call — the gateway's approval, the upstream's forwarded
//! request — comes on that call's own response stream (SEP-2260), never only on the session's
//! GET stream: alice opens no GET stream at all, as the spec lets a client do, and still gets
//! her elicitations. Both calls are held in flight by a top-level `ask` rule: the gateway asks
//! each caller's approval (an elicitation of its own) before the upstream is called, so the test
//! decides the order in which the upstream's requests happen.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::gateway::{Served, Sse, Stateless, accept, http_fixture};
use common::{bin, temp_home};
use serde_json::{Value, json};

const ALICE: &str = "alice-origin-token-1234567890";
const BOB: &str = "bob-origin-token-1234567890";
const CAROL: &str = "carol-origin-token-1234567890";

/// The gateway in front of `upstream` (as server `up`), `ask_form` under a top-level `ask`
/// rule, with clients alice and bob.
fn gateway(tag: &str, upstream: Value) -> Served {
    let dir = temp_home("serve-origin", tag);
    let config = dir.join("gateway.json");
    let document = json!({
        "mcpServers": {"up": upstream},
        "permissions": {"allow": ["mcp__up__ask_roots", "mcp__up__ask_url"],
                        "ask": ["mcp__up__ask_form"]},
        "gateway": {"clients": {
            "alice": {"auth": {"type": "bearer", "tokenEnv": "GW_ALICE"}},
            "bob": {"auth": {"type": "bearer", "tokenEnv": "GW_BOB"}},
            "carol": {"auth": {"type": "bearer", "tokenEnv": "GW_CAROL"},
                      "permissions": {"ask": ["mcp__up__ask_roots"]}}
        }}
    });
    std::fs::write(&config, document.to_string()).expect("write config");
    let stderr = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let served = Served::start_with_env(
        &dir,
        &config,
        &["--prefix", "none"],
        Stdio::from(stderr),
        &[("GW_ALICE", ALICE), ("GW_BOB", BOB), ("GW_CAROL", CAROL)],
    );
    // The upstream connects in the background: wait (bounded) until its tools are listed.
    let alice = Stateless::new(&served.addr, Some(ALICE), json!({}));
    let start = Instant::now();
    while !alice
        .request("tools/list", json!({}), None)
        .to_string()
        .contains("ask_form")
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the upstream's tools never appeared"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    served
}

/// A 2025-11-25 session of one client declaring elicitation; bob keeps its GET stream open
/// (held, never read: nothing of a call may land only there), alice opens none.
struct Client<'a> {
    name: &'static str,
    session: common::gateway::Session<'a>,
    _events: Option<Sse>,
}

impl<'a> Client<'a> {
    fn open(addr: &'a str, name: &'static str, token: &str) -> Self {
        let capabilities = json!({"elicitation": {}});
        let (session, _) = common::gateway::Session::open(addr, token, capabilities, name);
        let events = (name != "alice").then(|| Sse::get(&session));
        Self {
            name,
            session,
            _events: events,
        }
    }

    /// Starts `tools/call ask_form` with `message` (what the upstream will ask): its stream.
    fn call(&self, message: &str) -> Sse {
        self.call_tool(1, "ask_form", json!({"message": message}))
    }

    /// Starts `tools/call` `id` of `tool` with `arguments`: its stream.
    fn call_tool(&self, id: u64, tool: &str, arguments: Value) -> Sse {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        Sse::post(&self.session, &body)
    }

    /// Answers the elicitation `request` with `answer`.
    fn answer(&self, request: &Value, answer: Value) {
        let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": answer});
        let (status, _, body) = self.session.post(&reply);
        assert_eq!(status, 202, "{}'s answer: {body}", self.name);
    }
}

/// The next request of `stream` (notifications skipped), which must be an elicitation: it and
/// its message text.
fn elicitation(who: &str, stream: &mut Sse) -> (Value, String) {
    let message = (0..100)
        .map_while(|_| stream.next())
        .find(|m| m.get("id").is_some())
        .unwrap_or_else(|| panic!("{who}'s stream ended before an elicitation reached it"));
    assert_eq!(message["method"], "elicitation/create", "{who}: {message}");
    let text = message["params"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (message, text)
}

/// The text of the call's result, the next message of `stream`.
fn result(who: &str, stream: &mut Sse) -> String {
    let message = stream
        .next()
        .unwrap_or_else(|| panic!("{who}'s call stream ended before its result"));
    assert_eq!(message["id"], 1, "{who} got another message: {message}");
    message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{who}: no text result: {message}"))
        .to_string()
}

#[test]
fn each_client_gets_its_own_calls_elicitation_from_an_http_upstream() {
    let (_fixture, url) = http_fixture(&["--client-requests"]);
    let served = gateway("http", json!({"url": url}));
    let alice = Client::open(&served.addr, "alice", ALICE);
    let bob = Client::open(&served.addr, "bob", BOB);

    // Alice's call waits for her approval; Bob's call starts after hers and runs first.
    let mut alice_call = alice.call("for alice");
    let (alice_approval, text) = elicitation("alice", &mut alice_call);
    assert!(text.starts_with("Allow `mcp__up__ask_form`"), "{text}");
    let mut bob_call = bob.call("for bob");
    let (bob_approval, text) = elicitation("bob", &mut bob_call);
    assert!(text.starts_with("Allow `mcp__up__ask_form`"), "{text}");
    bob.answer(&bob_approval, accept(json!({})));
    let (bob_asked, text) = elicitation("bob", &mut bob_call);
    assert_eq!(text, "for bob", "bob got another call's elicitation");

    // Alice's call reaches the upstream while both calls are in flight, Bob's the later one.
    alice.answer(&alice_approval, accept(json!({})));
    let (alice_asked, text) = elicitation("alice", &mut alice_call);
    assert_eq!(text, "for alice", "alice got another call's elicitation");

    alice.answer(&alice_asked, accept(json!({"name": "Alice"})));
    bob.answer(&bob_asked, accept(json!({"name": "Bob"})));
    let alice_result = result("alice", &mut alice_call);
    assert!(alice_result.contains("Alice"), "{alice_result}");
    assert!(!alice_result.contains("Bob"), "{alice_result}");
    let bob_result = result("bob", &mut bob_call);
    assert!(bob_result.contains("Bob"), "{bob_result}");
    assert!(!bob_result.contains("Alice"), "{bob_result}");
}

#[test]
fn a_stdio_upstreams_request_with_two_callers_is_refused_not_guessed() {
    let upstream = json!({"command": bin(), "args": ["fixture-server", "--client-requests"]});
    let served = gateway("stdio", upstream);
    let alice = Client::open(&served.addr, "alice", ALICE);
    let bob = Client::open(&served.addr, "bob", BOB);

    let mut alice_call = alice.call("for alice");
    let (alice_approval, _) = elicitation("alice", &mut alice_call);
    let mut bob_call = bob.call("for bob");
    let (bob_approval, _) = elicitation("bob", &mut bob_call);

    // Two calls in flight on a stdio upstream: its elicitation names neither, so neither gets it.
    bob.answer(&bob_approval, accept(json!({})));
    let refused = result("bob", &mut bob_call);
    assert!(
        refused.contains("cannot be attributed to one caller"),
        "{refused}"
    );

    // Bob's call is over: Alice's is the only one in flight, and the elicitation is hers.
    alice.answer(&alice_approval, accept(json!({})));
    let (asked, text) = elicitation("alice", &mut alice_call);
    assert_eq!(text, "for alice");
    alice.answer(&asked, accept(json!({"name": "Alice"})));
    let done = result("alice", &mut alice_call);
    assert!(done.contains("Alice"), "{done}");
}

/// A client profile's own `ask` rule is asked of the calling client (an elicitation on its
/// call's stream; accepted, the call runs), and refused naming the profile's `allow` for a
/// session that declared no elicitation.
#[test]
fn a_profiles_ask_rule_is_asked_of_its_caller() {
    let (_fixture, url) = http_fixture(&["--client-requests"]);
    let served = gateway("profile-ask", json!({"url": url}));
    let carol = Client::open(&served.addr, "carol", CAROL);
    let mut call = carol.call_tool(1, "ask_roots", json!({}));
    let (approval, text) = elicitation("carol", &mut call);
    assert!(
        text.starts_with("Allow `mcp__up__ask_roots`") && text.contains("carol.permissions.ask"),
        "{text}"
    );
    carol.answer(&approval, accept(json!({})));
    let message = call.next().expect("the call's result");
    assert_eq!(message["id"], 1, "{message}");
    assert_eq!(message["result"]["isError"], false, "{message}");

    // Cancelled while asked: the call ends then, unsent, and a late yes runs nothing.
    let mut call = carol.call_tool(1, "ask_roots", json!({}));
    let (approval, _) = elicitation("carol", &mut call);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "changed my mind"}});
    let (status, _, said) = carol.session.post(&cancel);
    assert_eq!(status, 202, "{said}");
    let message = (0..10)
        .map_while(|_| call.next())
        .find(|m| m["id"] == 1)
        .expect("the cancelled call's answer");
    assert!(
        message.to_string().contains("while its approval was asked"),
        "{message}"
    );
    let (status, _, _) = carol
        .session
        .post(&json!({"jsonrpc": "2.0", "id": approval["id"],
        "result": accept(json!({}))}));
    assert!(status < 500, "a late answer: {status}");

    let (unasked, _) = common::gateway::Session::open(&served.addr, CAROL, json!({}), "carol");
    let refused = unasked.request("tools/call", json!({"name": "ask_roots", "arguments": {}}));
    let said = refused["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        said.contains("gateway.clients.carol.permissions.allow"),
        "{refused}"
    );
}

/// An upstream's sampling request for a client that declared no sampling is refused at once
/// (a client may ignore a request it does not know, and the call would wait out its timeout).
#[test]
fn sampling_is_not_asked_of_a_client_that_did_not_declare_it() {
    let (_fixture, url) = http_fixture(&["--client-requests"]);
    let served = gateway("no-sampling", json!({"url": url}));
    let alice = Client::open(&served.addr, "alice", ALICE);
    let mut call = alice.call_tool(1, "ask_sample", json!({}));
    let started = Instant::now();
    // Bounded: an approval, if the rules ask one, then the result.
    let answer = (0..10)
        .map_while(|_| call.next())
        .find_map(|message| {
            if message["method"] == "elicitation/create" {
                alice.answer(&message, accept(json!({})));
                return None;
            }
            (message["id"] == 1).then_some(message)
        })
        .expect("the call's answer");
    assert!(started.elapsed() < Duration::from_secs(10), "waited");
    assert!(
        answer
            .to_string()
            .contains("does not support sampling (server"),
        "{answer}"
    );
}

/// One client's calls side by side on a stdio upstream (a host running calls in parallel): the
/// upstream's requests name no call, but every call in flight there is that client's, so each
/// elicitation reaches it (on the stream of its first call in flight) instead of being refused
/// as "2 clients".
#[test]
fn one_clients_calls_side_by_side_on_a_stdio_upstream_are_asked_not_refused() {
    let upstream = json!({"command": bin(), "args": ["fixture-server", "--client-requests"]});
    let served = gateway("stdio-one-client", upstream);
    let alice = Client::open(&served.addr, "alice", ALICE);
    let mut first = alice.call("first");
    let (approval, _) = elicitation("alice", &mut first);
    let mut second = alice.call_tool(2, "ask_form", json!({"message": "second"}));
    let (approval_2, _) = elicitation("alice", &mut second);
    alice.answer(&approval, accept(json!({})));
    alice.answer(&approval_2, accept(json!({})));
    // The first call waits for its elicitation's answer: both upstream elicitations arrive
    // while it is in flight, on its stream; each is answered with its own message.
    let mut asked = Vec::new();
    while asked.len() < 2 {
        let (request, text) = elicitation("alice", &mut first);
        asked.push(text.clone());
        alice.answer(&request, accept(json!({"name": format!("to {text}")})));
    }
    asked.sort();
    assert_eq!(asked, ["first", "second"]);
    let done = result("alice", &mut first);
    assert!(done.contains("to first"), "{done}");
    let done = (0..100)
        .map_while(|_| second.next())
        .find(|m| m["id"] == 2)
        .expect("the second call's result");
    assert!(done.to_string().contains("to second"), "{done}");
}

/// A URL-mode elicitation's completion (`notifications/elicitation/complete`, sent by the
/// upstream once the out-of-band flow ended) reaches the client that was asked, on its
/// session's stream: it was dropped at the gateway.
#[test]
fn a_url_elicitations_completion_reaches_the_client_asked() {
    let upstream = json!({"command": bin(), "args": ["fixture-server", "--client-requests"]});
    let served = gateway("url-complete", upstream);
    let capabilities = json!({"elicitation": {"url": {}}});
    let (alice, _) = common::gateway::Session::open(&served.addr, ALICE, capabilities, "alice");
    let mut events = Sse::get(&alice);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "ask_url", "arguments": {}}});
    let mut call = Sse::post(&alice, &body);
    let (asked, _) = elicitation("alice", &mut call);
    assert_eq!(asked["params"]["mode"], "url", "{asked}");
    let reply = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}});
    let (status, _, answer) = alice.post(&reply);
    assert_eq!(status, 202, "{answer}");
    let text = result("alice", &mut call);
    assert!(text.contains("accept"), "{text}");
    let complete = (0..100)
        .map_while(|_| events.next())
        .find(|m| m["method"] == "notifications/elicitation/complete")
        .expect("the completion, on alice's stream");
    assert_eq!(
        complete["params"]["elicitationId"], asked["params"]["elicitationId"],
        "{complete}"
    );
}
