//! A JSON value that keeps the order of object keys as written: what `add`, `remove`,
//! `enable`/`disable` and `config import` edit, so a config file keeps its key order and every key
//! the editor does not know about.
//!
//! Invariant: reading a document into [`Json`] and writing it back changes no key, no value and no
//! order, only whitespace (written as two-space indented JSON). The workspace's `serde_json` is
//! built without `preserve_order` (its `Map` sorts keys); turning that feature on would change the
//! order of every map in every crate of the build, so the order is kept here instead.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value whose objects keep their key order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number, as `serde_json` reads it.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, keys in file order.
    Object(Object),
}

/// An object's members in order; a key appears at most once (a later duplicate replaces the
/// value in place, as `serde_json` does).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Object(Vec<(String, Json)>);

impl Object {
    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value of `key`, to change in place.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key`: in place when present (its position kept), else appended.
    pub(crate) fn insert(&mut self, key: &str, value: Json) {
        match self.get_mut(key) {
            Some(slot) => *slot = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    /// Removes `key`, keeping the order of the others.
    pub(crate) fn remove(&mut self, key: &str) -> Option<Json> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(i).1)
    }

    /// Whether `key` is present.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The members in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Json)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// How many members.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

impl Json {
    /// Parses strict JSON text, keeping key order.
    pub(crate) fn parse(text: &str) -> Result<Json, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The object inside, if this is one.
    pub(crate) fn as_object(&self) -> Option<&Object> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The object inside, to change in place.
    pub(crate) fn as_object_mut(&mut self) -> Option<&mut Object> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The string inside, if this is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// Two-space indented text with a final newline.
    pub(crate) fn pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The same value as a `serde_json::Value` (whose objects sort their keys).
    pub(crate) fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl From<&serde_json::Value> for Json {
    fn from(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Json::Null,
            serde_json::Value::Bool(b) => Json::Bool(*b),
            serde_json::Value::Number(n) => Json::Number(n.clone()),
            serde_json::Value::String(s) => Json::String(s.clone()),
            serde_json::Value::Array(a) => Json::Array(a.iter().map(Json::from).collect()),
            serde_json::Value::Object(o) => Json::Object(Object(
                o.iter().map(|(k, v)| (k.clone(), Json::from(v))).collect(),
            )),
        }
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Self {
        Json::String(s.to_string())
    }
}

impl FromIterator<(String, Json)> for Object {
    fn from_iter<I: IntoIterator<Item = (String, Json)>>(iter: I) -> Self {
        let mut out = Object::default();
        for (k, v) in iter {
            out.insert(&k, v);
        }
        out
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(o) => {
                let mut map = s.serialize_map(Some(o.len()))?;
                for (k, v) in o.iter() {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(n)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_string()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        // Indexed while read, so a file of 100k servers reads in linear time (a key given
        // twice keeps its first place and its last value, as `insert` does).
        let mut entries: Vec<(String, Json)> = Vec::new();
        let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            match at.get(&k) {
                Some(&i) => entries[i].1 = v,
                None => {
                    at.insert(k.clone(), entries.len());
                    entries.push((k, v));
                }
            }
        }
        Ok(Json::Object(Object(entries)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_keeps_key_order_and_values() {
        let text = r#"{"zeta": 1, "alpha": {"y": [1, 2.5, -3], "b": null, "a": true}, "mid": "s"}"#;
        let doc = Json::parse(text).expect("valid");
        let back = serde_json::to_string(&doc).expect("serialises");
        assert_eq!(back, text.replace(", ", ",").replace(": ", ":"));
    }

    #[test]
    fn insert_keeps_position_and_remove_keeps_the_rest_in_order() {
        let mut doc = Json::parse(r#"{"c": 1, "a": 2, "b": 3}"#).expect("valid");
        let o = doc.as_object_mut().expect("object");
        o.insert("a", Json::Bool(false));
        o.insert("d", Json::Null);
        assert!(o.remove("c").is_some());
        let keys: Vec<&String> = o.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b", "d"]);
        assert_eq!(o.get("a"), Some(&Json::Bool(false)));
    }
}
