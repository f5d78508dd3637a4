//! Body matchers. Each needs a body prefix; a matcher answers `NoMatch` only when what it has
//! seen settles the question, and `Unknown` otherwise (not read, cut short, unparseable).

use crate::{BodyMatch, GraphqlOperation};

use super::content_type::{FORM, MULTIPART, media_type};
use super::graphql;
use super::json::{Doc, entries, parse_doc, value_text};
use super::matchers::{Tri, glob_exact};
use super::packument::packument;
use super::payload::{Body, form_fields_as};
use super::pktline;
use super::prepared::Prepared;

#[derive(Debug, Clone)]
pub(crate) enum Matcher {
    Graphql(GraphqlOperation),
    /// A top-level JSON field with a value matching the glob (any occurrence).
    JsonField(String, String),
    /// Anything but a body whose top-level objects all have this field with exactly this
    /// value (every occurrence): "not surely a download".
    JsonFieldOtherThan(String, String),
    /// A top-level JSON field holding a non-empty object, array or string.
    JsonNonEmpty(String),
    FormField(String, String),
    /// `true`: receive-pack commands present; `false`: none.
    Pktline(bool),
    Exact(Vec<u8>),
    /// An npm packument write (`true`: with a tarball attached); see [`packument`].
    Packument(bool),
    /// A form field, where the request is a form (a form `Content-Type`, or none and a
    /// multipart-looking body): a PyPI upload on any host.
    UploadForm(String, String),
}

/// The matchers a user's `body:` stands for (all must hold).
pub(crate) fn from_policy(m: &BodyMatch) -> Vec<Matcher> {
    let mut out = Vec::new();
    if let Some(op) = m.graphql_operation {
        out.push(Matcher::Graphql(op));
    }
    for (k, v) in &m.json_field {
        out.push(Matcher::JsonField(k.clone(), v.clone()));
    }
    for (k, v) in &m.form_field {
        out.push(Matcher::FormField(k.clone(), v.clone()));
    }
    if let Some(b) = m.pktline_commands {
        out.push(Matcher::Pktline(b));
    }
    if let Some(text) = &m.body_exact {
        out.push(Matcher::Exact(text.as_bytes().to_vec()));
    }
    out
}

impl Matcher {
    pub fn eval(&self, req: &Prepared<'_>) -> Tri {
        let body = req.body;
        match self {
            Matcher::Graphql(op) => match graphql::operations(&req.query, body, req.content_type) {
                Ok(ops) => Tri::from_bool(ops.iter().any(|o| o.kind == *op)),
                Err(why) => Tri::Unknown(format!("GraphQL: {why}")),
            },
            Matcher::JsonField(name, want) => json_any(body, &|fields| {
                fields
                    .iter()
                    .any(|(k, v)| k == name && glob_exact(want, &value_text(v)))
            }),
            Matcher::JsonFieldOtherThan(name, value) => json_any(body, &|fields| {
                let mut found = entries(fields, name).peekable();
                found.peek().is_none() || found.any(|v| value_text(v) != *value)
            }),
            Matcher::JsonNonEmpty(name) => json_any(body, &|fields| {
                fields.iter().any(|(k, v)| {
                    k == name
                        && match v {
                            serde_json::Value::Object(m) => !m.is_empty(),
                            serde_json::Value::Array(a) => !a.is_empty(),
                            serde_json::Value::String(s) => !s.is_empty(),
                            _ => false,
                        }
                })
            }),
            Matcher::FormField(name, want) => form_field(body, req.content_type, name, want),
            Matcher::Pktline(want) => pktline_commands(body, *want),
            Matcher::Exact(want) => exact(body, want),
            Matcher::Packument(attachments) => packument(body, *attachments),
            Matcher::UploadForm(name, want) => match media_type(req.content_type).as_deref() {
                Some(FORM | MULTIPART) => form_field(body, req.content_type, name, want),
                Some(_) => Tri::NoMatch,
                None => match body.bytes {
                    Some(b) if !b.starts_with(b"--") => Tri::NoMatch,
                    _ => form_field(body, None, name, want),
                },
            },
        }
    }
}

type Fields = [(String, serde_json::Value)];

/// Does any top-level object (or object in a top-level array) satisfy `test`?
fn json_any(body: Body<'_>, test: &dyn Fn(&Fields) -> bool) -> Tri {
    fn walk(doc: &Doc, test: &dyn Fn(&Fields) -> bool) -> bool {
        match doc {
            Doc::Object(fields) => test(fields),
            Doc::Array(items) => items.iter().any(|d| walk(d, test)),
            Doc::Other => false,
        }
    }
    let doc = match body.whole() {
        Ok(bytes) => parse_doc(bytes),
        Err(why) => return Tri::Unknown(format!("JSON: {why}")),
    };
    match doc {
        Ok(doc) => Tri::from_bool(walk(&doc, test)),
        Err(why) => Tri::Unknown(format!("JSON: {why}")),
    }
}

fn pktline_commands(body: Body<'_>, want: bool) -> Tri {
    let Some(bytes) = body.bytes else {
        return Tri::Unknown("body not read".to_owned());
    };
    let head = match pktline::read_head(bytes) {
        Ok(head) => head,
        Err(why) => return Tri::Unknown(format!("pkt-line: {why}")),
    };
    if head.has_commands() {
        return Tri::from_bool(want);
    }
    // No command before the flush: only an exact, complete `0000` settles it.
    if head.ended && body.complete && head.trailing == 0 {
        Tri::from_bool(!want)
    } else {
        Tri::Unknown("pkt-line: no command in the inspected prefix".to_owned())
    }
}

fn exact(body: Body<'_>, want: &[u8]) -> Tri {
    let Some(bytes) = body.bytes else {
        return Tri::Unknown("body not read".to_owned());
    };
    if body.complete {
        return Tri::from_bool(bytes == want);
    }
    // The body is longer than `bytes`: equal only if `want` is longer still and agrees so far.
    if bytes.len() >= want.len() || !want.starts_with(bytes) {
        Tri::NoMatch
    } else {
        Tri::Unknown("body larger than the inspected prefix".to_owned())
    }
}

/// A form field, urlencoded or `multipart/form-data` (the boundary is read from the first
/// line, as the body has no headers here).
fn form_field(body: Body<'_>, content_type: Option<&str>, name: &str, want: &str) -> Tri {
    let Some(bytes) = body.bytes else {
        return Tri::Unknown("body not read".to_owned());
    };
    match form_fields_as(bytes, body.complete, content_type) {
        Err(why) => Tri::Unknown(format!("form: {why}")),
        Ok((fields, _)) if fields.iter().any(|(k, v)| k == name && glob_exact(want, v)) => {
            Tri::Match
        }
        Ok((_, true)) => Tri::NoMatch,
        Ok((_, false)) => Tri::Unknown("form: field not in the inspected prefix".to_owned()),
    }
}
