//! Is a `PUT` body an npm packument write? On the npm registry every write is judged by
//! path; on other hosts a `PUT` to a package-shaped path is only an npm write when its body
//! says so, so that other services' `PUT`s are not refused.

use super::json::{Doc, entries, parse_doc};
use super::matchers::Tri;
use super::payload::Body;

/// `attachments`: a publish (a non-empty `_attachments`); otherwise any packument write
/// (`versions` with `name` or `_id`: a deprecation, or a publish).
pub(crate) fn packument(body: Body<'_>, attachments: bool) -> Tri {
    let Some(bytes) = body.bytes else {
        return Tri::Unknown("body not read".to_owned());
    };
    if !body.complete {
        // npm writes `versions` and `_attachments` after a few short keys, but a prefix of a
        // JSON object cannot settle it; anything else is no packument.
        return if opens_object(bytes) {
            Tri::Unknown("body larger than the inspected prefix".to_owned())
        } else {
            Tri::NoMatch
        };
    }
    let fields = match parse_doc(bytes) {
        Ok(Doc::Object(fields)) => fields,
        Ok(_) => return Tri::NoMatch,
        // A registry's own JSON reader may take what serde_json refuses (nesting past its
        // 128 levels, a lone surrogate, a number past f64, a byte-order mark, UTF-16): an object
        // it may read cannot be settled here.
        Err(why) if opens_object(bytes) => {
            return Tri::Unknown(format!("packument: {why}"));
        }
        Err(_) => return Tri::NoMatch,
    };
    let non_empty = |key: &str| {
        entries(&fields, key).any(|v| match v {
            serde_json::Value::Object(m) => !m.is_empty(),
            serde_json::Value::String(s) => !s.is_empty(),
            _ => false,
        })
    };
    if attachments {
        Tri::from_bool(non_empty("_attachments"))
    } else {
        Tri::from_bool(non_empty("versions") && (non_empty("name") || non_empty("_id")))
    }
}

/// Does the body open a JSON object, after whitespace and any byte-order mark, in UTF-8,
/// UTF-16 or UTF-32 (the encodings a registry's JSON reader may accept)?
fn opens_object(bytes: &[u8]) -> bool {
    bytes
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(bytes)
        .iter()
        .take(1024)
        .find(|&&b| !b.is_ascii_whitespace() && !matches!(b, 0 | 0xFE | 0xFF))
        == Some(&b'{')
}
