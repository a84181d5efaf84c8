//! JSON that is not a message rmcp reads, told apart: a request refused with what is wrong
//! (and its id when usable), an answer or a notification of a shape MCP does not have. The
//! stdio transport and the HTTP endpoint answer alike from it.
//!
//! Invariant: nothing here quotes the message (it may carry secrets), and a hostile member
//! (`params`, `result`, `error`) is skipped without being held in memory.

use std::fmt;

use rmcp::model::{ErrorData, RequestId};
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The top-level members of a JSON object that is not a message rmcp reads.
#[derive(Deserialize)]
struct Envelope {
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Kind>,
    result: Option<Kind>,
    error: Option<Kind>,
}

/// A member present (even `null`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Whether a value is an object, its content skipped (a hostile `params` costs no memory).
#[derive(PartialEq, Eq)]
enum Kind {
    Object,
    Other,
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Kind::Object)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Kind::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Kind, E> {
        Ok(Kind::Other)
    }

    fn visit_unit<E>(self) -> Result<Kind, E> {
        Ok(Kind::Other)
    }
}

/// What is wrong with JSON that rmcp's message types do not read.
pub(crate) enum Unfit {
    /// A request, or what cannot be told apart from one: refused with this error, with the
    /// request's id when it has a usable one.
    Refused(Option<RequestId>, ErrorData),
    /// An answer (`result` or `error`, no `method`) of a shape MCP does not have.
    Answer,
    /// A notification (`method`, no `id`) of a shape MCP does not have.
    Notification,
}

/// What is wrong with `body`, JSON that rmcp's message types do not read (see [`Unfit`]).
pub(crate) fn unfit(body: &[u8]) -> Unfit {
    let refused =
        |id, what: &str| Unfit::Refused(id, ErrorData::invalid_request(what.to_string(), None));
    let Ok(envelope) = serde_json::from_slice::<Envelope>(body) else {
        let what = match body.trim_ascii_start().first() {
            Some(b'[') => "a batch (a JSON array) is not taken: send one message at a time",
            Some(b'{') => "the object does not fit a JSON-RPC message (a member given twice?)",
            _ => "a JSON-RPC message is a JSON object",
        };
        return refused(None, what);
    };
    let Some(method) = &envelope.method else {
        if envelope.result.is_some() || envelope.error.is_some() {
            return Unfit::Answer;
        }
        return refused(
            None,
            "a message needs `method` (a request or notification) or `result` or `error` (an \
             answer)",
        );
    };
    let Some(id) = &envelope.id else {
        return Unfit::Notification;
    };
    let id = serde_json::from_value::<RequestId>(id.clone()).ok();
    let what = if envelope.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        "`jsonrpc` must be \"2.0\""
    } else if !method.is_string() {
        "`method` must be a string"
    } else if id.is_none() {
        "`id` must be a string or an integer"
    } else if envelope.params.is_some_and(|params| params != Kind::Object) {
        "`params` must be an object"
    } else {
        "the request does not fit MCP's schema"
    };
    refused(id, what)
}
