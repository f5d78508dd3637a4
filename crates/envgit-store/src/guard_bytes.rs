//! How the protected copy (`guard/*/copy.json`) writes a file's content: one base64 string.
//! It was a JSON array of numbers, four to five bytes of JSON per byte, serialized one number
//! at a time (`perf`: ~0.3 ms of every step for a fresh repository's 30 KB of
//! `.git/hooks/*.sample`, on the way to the command's start). A copy an older envgit left
//! behind (it crashed, then was upgraded) is still read: either shape is accepted.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&STANDARD.encode(bytes))
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    d.deserialize_any(Content)
}

struct Content;

impl<'de> Visitor<'de> for Content {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a base64 string or an array of bytes")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        STANDARD.decode(v).map_err(E::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct File {
        #[serde(with = "super")]
        content: Vec<u8>,
    }

    #[test]
    fn content_is_written_as_base64_and_read_in_either_shape() {
        let f = File {
            content: b"#!/bin/sh\n\xff\x00 exit 1\n".to_vec(),
        };
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, r#"{"content":"IyEvYmluL3NoCv8AIGV4aXQgMQo="}"#);
        assert_eq!(serde_json::from_str::<File>(&json).unwrap(), f);
        // What an older envgit wrote.
        let old =
            r#"{"content":[35,33,47,98,105,110,47,115,104,10,255,0,32,101,120,105,116,32,49,10]}"#;
        assert_eq!(serde_json::from_str::<File>(old).unwrap(), f);
        assert!(serde_json::from_str::<File>(r#"{"content":"not base64!"}"#).is_err());
        assert!(serde_json::from_str::<File>(r#"{"content":[256]}"#).is_err());
    }
}
