//! JSON bodies read so that duplicate keys are kept: servers disagree on which of two
//! `"operation"` keys wins, so a matcher looks at every one.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A JSON document whose top-level objects (and those of a top-level array) keep every key
/// in order, duplicates included. Deeper values are plain [`Value`]s.
#[derive(Debug)]
pub(crate) enum Doc {
    Object(Vec<(String, Value)>),
    Array(Vec<Doc>),
    /// A string, number, boolean or null.
    Other,
}

/// A body that is not JSON; `category` is serde_json's short name for why (`syntax error`,
/// `cut short`, …), enough for a reason without echoing the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not JSON ({category})")]
pub(crate) struct NotJson {
    pub category: &'static str,
}

/// Parses a complete JSON body; `Err` with a short reason otherwise.
pub(crate) fn parse_doc(body: &[u8]) -> Result<Doc, NotJson> {
    serde_json::from_slice(body).map_err(|e: serde_json::Error| NotJson {
        category: e.classify_name(),
    })
}

/// The values of every `key` entry, in order.
pub(crate) fn entries<'a>(
    fields: &'a [(String, Value)],
    key: &'a str,
) -> impl Iterator<Item = &'a Value> + 'a {
    fields.iter().filter(move |(k, _)| k == key).map(|(_, v)| v)
}

/// A JSON value as a matcher compares it: a string as itself, anything else as JSON text.
pub(crate) fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected data",
            serde_json::error::Category::Eof => "cut short",
        }
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut out = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            out.push((k, v));
        }
        Ok(Doc::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element::<Doc>()? {
            out.push(item);
        }
        Ok(Doc::Array(out))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Doc, E> {
        Ok(Doc::Other)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Doc, E> {
        Ok(Doc::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Doc, E> {
        Ok(Doc::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Doc, E> {
        Ok(Doc::Other)
    }
    fn visit_str<E>(self, _: &str) -> Result<Doc, E> {
        Ok(Doc::Other)
    }
    fn visit_unit<E>(self) -> Result<Doc, E> {
        Ok(Doc::Other)
    }
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Doc, D::Error> {
        d.deserialize_any(DocVisitor)
    }
}
