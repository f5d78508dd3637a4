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
        let starts_object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        return if starts_object {
            Tri::Unknown("body larger than the inspected prefix".to_owned())
        } else {
            Tri::NoMatch
        };
    }
    let Ok(Doc::Object(fields)) = parse_doc(bytes) else {
        return Tri::NoMatch;
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
