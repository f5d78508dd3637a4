//! JSON bodies read so that duplicate keys are kept: servers disagree on which of two
//! `"operation"` keys wins, so a matcher looks at every one.

use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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

/// The string values of a top-level object's keys that `wanted` picks (every occurrence, in
/// order; none for another top-level value), as PHP frameworks read `_method` from a JSON
/// body. Other values are skipped unparsed: serde_json skips without recursion or range
/// checks, so no nesting depth or number PHP accepts makes the body unreadable here.
pub(crate) fn top_level_strings(
    body: &[u8],
    wanted: fn(&str) -> bool,
) -> Result<Vec<String>, NotJson> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let classify = |e: serde_json::Error| NotJson {
        category: e.classify_name(),
    };
    let found = de.deserialize_any(TopLevel { wanted }).map_err(classify)?;
    de.end().map_err(classify)?;
    Ok(found)
}

struct TopLevel {
    wanted: fn(&str) -> bool,
}

impl<'de> Visitor<'de> for TopLevel {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if (self.wanted)(&key) {
                out.extend(map.next_value_seed(StringOrSkip)?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Vec::new())
    }

    fn visit_bool<E>(self, _: bool) -> Result<Vec<String>, E> {
        Ok(Vec::new())
    }
    fn visit_i64<E>(self, _: i64) -> Result<Vec<String>, E> {
        Ok(Vec::new())
    }
    fn visit_u64<E>(self, _: u64) -> Result<Vec<String>, E> {
        Ok(Vec::new())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Vec<String>, E> {
        Ok(Vec::new())
    }
    fn visit_str<E>(self, _: &str) -> Result<Vec<String>, E> {
        Ok(Vec::new())
    }
    fn visit_unit<E>(self) -> Result<Vec<String>, E> {
        Ok(Vec::new())
    }
}

/// A value that is kept when it is a string and skipped unparsed otherwise (a method named by
/// anything but a string is ignored by the frameworks).
struct StringOrSkip;

impl<'de> DeserializeSeed<'de> for StringOrSkip {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StringOrSkip {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, s: &str) -> Result<Option<String>, E> {
        Ok(Some(s.to_owned()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<String>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Option<String>, E> {
        Ok(None)
    }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::top_level_strings;

    fn is_method(key: &str) -> bool {
        key.eq_ignore_ascii_case("_method")
    }

    /// Any JSON value, its objects sometimes holding a `_method` of their own.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-zA-Z_\"\\\\ é{}\\[\\],:]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("(_method|_METHOD|[a-z]{1,4})", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Every top-level `_method` string is found, wherever it stands among the other keys
        /// and however many there are; none from inside another value.
        #[test]
        fn top_level_method_keys_are_found_and_nested_ones_are_not(
            fields in prop::collection::vec(("[a-z]{1,4}", value()), 0..6),
            named in prop::collection::vec(("(_method|_METHOD|_Method)", "[A-Z]{1,7}"), 0..3),
            places in prop::collection::vec(any::<prop::sample::Index>(), 3),
        ) {
            // Written by hand, so that repeated keys stay repeated.
            let mut members: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
                .collect();
            for ((key, method), place) in named.iter().zip(&places) {
                let at = place.index(members.len() + 1);
                members.insert(at, format!("{}:{}", Value::from(key.as_str()), Value::from(method.as_str())));
            }
            let body = format!("{{{}}}", members.join(","));
            let mut got = top_level_strings(body.as_bytes(), is_method).unwrap();
            let mut want: Vec<String> = named.iter().map(|(_, m)| m.clone()).collect();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want, "{}", body);
        }
    }
}
