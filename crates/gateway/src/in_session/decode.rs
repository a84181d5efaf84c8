//! A request body decoded by its `method` instead of by trial.
//!
//! rmcp decodes every POST body as a `ClientJsonRpcMessage`: it buffers the message, checks
//! its shape, then tries each `ClientRequest` variant in turn until one fits. A `tools/call`
//! is the fourteenth; each of the thirteen before it builds and formats a serde error. Here
//! the body is read once, in order: when its `method` comes before its `params` (as every SDK
//! writes them), the params are decoded straight into the one variant that method names, with
//! rmcp's own types (its `_meta` handling included).
//!
//! Invariant: [`decode`] returns a message only when rmcp's decode of the same bytes gives
//! that same message: same variant, same id, same params, same `_meta`. It returns `None` for
//! everything else — a method not in its table, a malformed body, a stray `result`, a key
//! twice, `params` before `method` — and the caller then hands the bytes to rmcp, which
//! decides. The parity tests below check this against rmcp's decoder, case by case and on
//! generated bodies.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequest, ClientRequest, CompleteRequest, ConstString as _, GetPromptRequest,
    JsonRpcRequest, JsonRpcVersion2_0, ListPromptsRequest, ListResourceTemplatesRequest,
    ListResourcesRequest, ListToolsRequest, PingRequest, ReadResourceRequest, RequestId,
};
use serde::de::value::{StrDeserializer, UnitDeserializer};
use serde::de::{Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// The request in `bytes` when it is one of the methods decoded here; `None`: let rmcp decode.
pub(crate) fn decode(bytes: &[u8]) -> Option<JsonRpcRequest<ClientRequest>> {
    let mut json = serde_json::Deserializer::from_slice(bytes);
    let request = json.deserialize_map(MessageVisitor).ok()??;
    json.end().ok()?;
    Some(request)
}

/// The methods decoded here: the requests a session sends most.
#[derive(Clone, Copy)]
enum Kind {
    CallTool,
    ListTools,
    ReadResource,
    ListResources,
    ListResourceTemplates,
    GetPrompt,
    ListPrompts,
    Ping,
    Complete,
}

impl Kind {
    fn of(method: &str) -> Option<Self> {
        use rmcp::model as m;
        Some(match method {
            m::CallToolRequestMethod::VALUE => Self::CallTool,
            m::ListToolsRequestMethod::VALUE => Self::ListTools,
            m::ReadResourceRequestMethod::VALUE => Self::ReadResource,
            m::ListResourcesRequestMethod::VALUE => Self::ListResources,
            m::ListResourceTemplatesRequestMethod::VALUE => Self::ListResourceTemplates,
            m::GetPromptRequestMethod::VALUE => Self::GetPrompt,
            m::ListPromptsRequestMethod::VALUE => Self::ListPrompts,
            m::PingRequestMethod::VALUE => Self::Ping,
            m::CompleteRequestMethod::VALUE => Self::Complete,
            _ => return None,
        })
    }

    /// The request of this kind with `method` and `params` (`None`: the body had none), decoded
    /// by rmcp's type for it: as rmcp decodes the `method` and `params` of a message.
    fn decode<'de, D: Deserializer<'de>>(
        self,
        method: &str,
        params: Option<D>,
    ) -> Result<ClientRequest, D::Error> {
        let pair = Pair {
            method,
            params,
            next: 0,
        };
        Ok(match self {
            Self::CallTool => ClientRequest::CallToolRequest(CallToolRequest::deserialize(pair)?),
            Self::ListTools => {
                ClientRequest::ListToolsRequest(ListToolsRequest::deserialize(pair)?)
            }
            Self::ReadResource => {
                ClientRequest::ReadResourceRequest(ReadResourceRequest::deserialize(pair)?)
            }
            Self::ListResources => {
                ClientRequest::ListResourcesRequest(ListResourcesRequest::deserialize(pair)?)
            }
            Self::ListResourceTemplates => ClientRequest::ListResourceTemplatesRequest(
                ListResourceTemplatesRequest::deserialize(pair)?,
            ),
            Self::GetPrompt => {
                ClientRequest::GetPromptRequest(GetPromptRequest::deserialize(pair)?)
            }
            Self::ListPrompts => {
                ClientRequest::ListPromptsRequest(ListPromptsRequest::deserialize(pair)?)
            }
            Self::Ping => ClientRequest::PingRequest(PingRequest::deserialize(pair)?),
            Self::Complete => ClientRequest::CompleteRequest(CompleteRequest::deserialize(pair)?),
        })
    }
}

/// The top-level keys read here; any other is skipped (rmcp ignores it too).
enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    /// `result` or `error`: not a request (rmcp classifies the message by these keys).
    Answer,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "jsonrpc" => Key::Jsonrpc,
                    "id" => Key::Id,
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "result" | "error" => Key::Answer,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// A method name, borrowed from the body unless it holds escapes.
struct Method<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Method<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MethodVisitor;
        impl<'de> Visitor<'de> for MethodVisitor {
            type Value = Method<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a method name")
            }
            fn visit_borrowed_str<E>(self, method: &'de str) -> Result<Method<'de>, E> {
                Ok(Method(Cow::Borrowed(method)))
            }
            fn visit_str<E>(self, method: &str) -> Result<Method<'de>, E> {
                Ok(Method(Cow::Owned(method.to_owned())))
            }
        }
        deserializer.deserialize_str(MethodVisitor)
    }
}

/// The message, read once; `Ok(None)` as soon as it is clear rmcp must decide.
struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Option<JsonRpcRequest<ClientRequest>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut jsonrpc: Option<JsonRpcVersion2_0> = None;
        let mut id: Option<RequestId> = None;
        let mut method: Option<(Cow<'de, str>, Kind)> = None;
        let mut request: Option<ClientRequest> = None;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Jsonrpc if jsonrpc.is_none() => jsonrpc = Some(map.next_value()?),
                Key::Id if id.is_none() => id = Some(map.next_value()?),
                Key::Method if method.is_none() => {
                    let Method(name) = map.next_value()?;
                    let Some(kind) = Kind::of(&name) else {
                        return Ok(None);
                    };
                    method = Some((name, kind));
                }
                Key::Params if request.is_none() => {
                    // Params before the method: their type is not known yet.
                    let Some((name, kind)) = &method else {
                        return Ok(None);
                    };
                    let seed = Params {
                        method: name,
                        kind: *kind,
                    };
                    request = Some(map.next_value_seed(seed)?);
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
                // A key twice, or an answer's: rmcp decides.
                _ => return Ok(None),
            }
        }
        let (Some(jsonrpc), Some(id), Some((name, kind))) = (jsonrpc, id, method) else {
            return Ok(None);
        };
        let request = match request {
            Some(request) => request,
            None => match kind.decode::<UnitDeserializer<A::Error>>(&name, None) {
                Ok(request) => request,
                // A method whose params are required, without them.
                Err(_) => return Ok(None),
            },
        };
        Ok(Some(JsonRpcRequest {
            jsonrpc,
            id,
            request,
        }))
    }
}

/// The `params` value, decoded with the method already read.
struct Params<'m> {
    method: &'m str,
    kind: Kind,
}

impl<'de> DeserializeSeed<'de> for Params<'_> {
    type Value = ClientRequest;

    fn deserialize<D: Deserializer<'de>>(self, params: D) -> Result<ClientRequest, D::Error> {
        self.kind.decode(self.method, Some(params))
    }
}

/// The map `{"method": method, "params": params}` (without `params` when `None`), as rmcp's
/// request types read a message's two fields.
struct Pair<'m, D> {
    method: &'m str,
    params: Option<D>,
    /// The next entry: 0 `method`, 1 `params`, 2 none.
    next: u8,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Pair<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de, D: Deserializer<'de>> MapAccess<'de> for Pair<'_, D> {
    type Error = D::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, D::Error> {
        let key = match (self.next, &self.params) {
            (0, _) => "method",
            (1, Some(_)) => "params",
            _ => return Ok(None),
        };
        seed.deserialize(StrDeserializer::new(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, D::Error> {
        self.next += 1;
        match self.next {
            1 => seed.deserialize(StrDeserializer::new(self.method)),
            _ => match self.params.take() {
                Some(params) => seed.deserialize(params),
                None => Err(serde::de::Error::custom("no params")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rmcp::model::ClientJsonRpcMessage;
    use serde_json::{Value, json};

    /// Whether `decode` and rmcp agree on `bytes`: when `decode` gives a message, rmcp's
    /// decode gives the same variant with the same JSON (its `_meta` included).
    fn agrees(bytes: &[u8]) -> Result<bool, String> {
        let Some(ours) = decode(bytes).map(ClientJsonRpcMessage::Request) else {
            return Ok(false);
        };
        let theirs = serde_json::from_slice::<ClientJsonRpcMessage>(bytes).map_err(|error| {
            format!(
                "decoded here, refused by rmcp ({error}): {}",
                String::from_utf8_lossy(bytes)
            )
        })?;
        let (ClientJsonRpcMessage::Request(a), ClientJsonRpcMessage::Request(b)) = (&ours, &theirs)
        else {
            return Err(format!(
                "rmcp made another kind of message: {}",
                String::from_utf8_lossy(bytes)
            ));
        };
        if std::mem::discriminant(&a.request) != std::mem::discriminant(&b.request) {
            return Err(format!(
                "rmcp chose another variant ({}): {}",
                b.request.method(),
                String::from_utf8_lossy(bytes)
            ));
        }
        let (a, b) = (
            serde_json::to_value(&ours).expect("serialises"),
            serde_json::to_value(&theirs).expect("serialises"),
        );
        if a != b {
            return Err(format!("differ: ours {a}, rmcp's {b}"));
        }
        Ok(true)
    }

    /// Every method of the table, as clients send it: each must be decoded here (or the
    /// parity checks below would pass by decoding nothing) and agree with rmcp.
    #[test]
    fn every_method_of_the_table_is_decoded_as_rmcp_decodes_it() {
        let bodies = [
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi","n":1.5,"big":18446744073709551615u64,"neg":-3,"nested":{"a":[1,null,true]}}}}),
            json!({"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"name":"echo","_meta":{"progressToken":7,"other":{"x":1}}}}),
            json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
            json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"c1","_meta":{"k":"v"}}}),
            json!({"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///a"}}),
            json!({"jsonrpc":"2.0","id":4,"method":"resources/list","params":{}}),
            json!({"jsonrpc":"2.0","id":5,"method":"resources/templates/list"}),
            json!({"jsonrpc":"2.0","id":6,"method":"prompts/get","params":{"name":"p","arguments":{"a":"b"}}}),
            json!({"jsonrpc":"2.0","id":7,"method":"prompts/list"}),
            json!({"jsonrpc":"2.0","id":8,"method":"ping"}),
            json!({"jsonrpc":"2.0","id":9,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"x"}}}),
        ];
        for body in bodies {
            let bytes = body.to_string().into_bytes();
            assert_eq!(agrees(&bytes), Ok(true), "{body}");
        }
        // Keys in another order, escapes in keys and values, an unknown top-level field.
        for text in [
            r#"{"method":"tools/call","params":{"arguments":{},"name":"e\u0063ho"},"id":-1,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","\u0069d":1,"meth\u006fd":"tools\/call","params":{"name":"echo"},"extra":[1,2]}"#,
            r#"  {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":1,"a":2}}}  "#,
        ] {
            assert_eq!(agrees(text.as_bytes()), Ok(true), "{text}");
        }
    }

    /// What is not one of the table's requests is left to rmcp, whatever rmcp makes of it.
    #[test]
    fn anything_else_is_left_to_rmcp() {
        for text in [
            // Params before the method (their type is not known when they are read).
            r#"{"jsonrpc":"2.0","id":1,"params":{"name":"echo"},"method":"tools/call"}"#,
            // Notifications, answers, a request with a stray answer field.
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e"},"result":{}}"#,
            // Methods not in the table: rmcp's own, custom ones, the task front's rewrite.
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"mcp-harness/sep-1686/tools/call","params":{"name":"e"}}"#,
            // Params that do not fit the method (rmcp makes these a CustomRequest).
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":7}}"#,
            // Not JSON-RPC 2.0, no usable id, a method twice or not a string, not JSON.
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"} {}"#,
            "not json",
            "",
        ] {
            assert_eq!(agrees(text.as_bytes()), Ok(false), "{text}");
        }
    }

    /// One JSON value of a few kinds, for the generated bodies.
    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z/\\u{e9}\"\\\\]{0,6}".prop_map(Value::from),
        ]
        .prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{1,5}", inner, 0..3)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// A message of fields drawn from what clients send and what they get wrong, in any order,
    /// sometimes one twice.
    fn message() -> impl Strategy<Value = String> {
        let method = prop_oneof![
            Just(json!("tools/call")),
            Just(json!("tools/list")),
            Just(json!("resources/read")),
            Just(json!("prompts/get")),
            Just(json!("ping")),
            Just(json!("logging/setLevel")),
            Just(json!("initialize")),
            Just(json!("x/custom")),
            value(),
        ];
        let meta = prop_oneof![
            Just(json!({"progressToken": 1})),
            Just(
                json!({"progressToken": "t", "io.modelcontextprotocol/protocolVersion": "2025-11-25"})
            ),
            Just(json!({"io.modelcontextprotocol/protocolVersion": 3})),
            value(),
        ];
        let params = prop_oneof![
            (value(), prop::option::of(meta.clone())).prop_map(|(arguments, meta)| {
                let mut p = json!({"name": "echo", "arguments": arguments});
                if let Some(meta) = meta {
                    p["_meta"] = meta;
                }
                p
            }),
            Just(json!({"uri": "file:///x"})),
            Just(json!({"level": "info"})),
            Just(json!({"name": "p"})),
            prop::option::of(meta).prop_map(|meta| match meta {
                Some(meta) => json!({"cursor": "c", "_meta": meta}),
                None => json!({}),
            }),
            value(),
        ];
        let id = prop_oneof![
            any::<i64>().prop_map(Value::from),
            "[a-z0-9]{0,4}".prop_map(Value::from),
            value(),
        ];
        let field = prop_oneof![
            4 => Just(("jsonrpc", json!("2.0"))),
            1 => value().prop_map(|v| ("jsonrpc", v)),
            4 => id.prop_map(|v| ("id", v)),
            4 => method.prop_map(|v| ("method", v)),
            4 => params.prop_map(|v| ("params", v)),
            1 => value().prop_map(|v| ("result", v)),
            1 => value().prop_map(|v| ("error", v)),
            1 => value().prop_map(|v| ("other", v)),
        ];
        (prop::collection::vec(field, 0..6), any::<bool>()).prop_map(|(fields, complete)| {
            let mut parts: Vec<String> = fields
                .iter()
                .map(|(key, value)| format!("{}:{value}", json!(key)))
                .collect();
            // Often the fields every request has, where none was drawn: many bodies are
            // requests, so the decode is exercised, not only its refusals.
            if complete {
                for (key, value) in [
                    ("jsonrpc", json!("2.0")),
                    ("id", json!(1)),
                    ("method", json!("tools/call")),
                    ("params", json!({"name": "echo"})),
                ] {
                    if !fields.iter().any(|(k, _)| *k == key) {
                        parts.push(format!("{}:{value}", json!(key)));
                    }
                }
            }
            format!("{{{}}}", parts.join(","))
        })
    }

    /// On generated bodies, `decode` either leaves one to rmcp or gives exactly rmcp's message;
    /// and it decodes a good share of them (the check is not passed by decoding nothing).
    #[test]
    fn never_differs_from_rmcp() {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(3000));
        let decoded = std::sync::atomic::AtomicUsize::new(0);
        runner
            .run(&message(), |body| {
                match agrees(body.as_bytes()) {
                    Ok(true) => {
                        decoded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(false) => {}
                    Err(difference) => prop_assert!(false, "{}", difference),
                }
                Ok(())
            })
            .unwrap();
        let decoded = decoded.into_inner();
        assert!(
            decoded >= 300,
            "only {decoded} of 3000 bodies were decoded here"
        );
    }
}
