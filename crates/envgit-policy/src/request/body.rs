//! Body matchers. Each needs a body prefix; a matcher answers `NoMatch` only when what it has
//! seen settles the question, and `Unknown` otherwise (not read, cut short, unparseable).

use crate::{BodyMatch, GraphqlOperation};

use super::content_type::{FORM, MULTIPART, media_type};
use super::graphql;
use super::json::{Doc, entries, parse_doc, value_text};
use super::matchers::{Tri, form_decode, glob_exact};
use super::packument::packument;
use super::pktline;
use super::rule::Prepared;

/// The body as the caller has it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Body<'a> {
    pub bytes: Option<&'a [u8]>,
    pub complete: bool,
}

impl<'a> Body<'a> {
    /// The whole body, or why it is not available.
    pub(crate) fn whole(&self) -> Result<&'a [u8], String> {
        match self.bytes {
            None => Err("body not read".to_owned()),
            Some(_) if !self.complete => Err("body larger than the inspected prefix".to_owned()),
            Some(b) => Ok(b),
        }
    }
}

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
            Matcher::FormField(name, want) => form_field(body, name, want),
            Matcher::Pktline(want) => pktline_commands(body, *want),
            Matcher::Exact(want) => exact(body, want),
            Matcher::Packument(attachments) => packument(body, *attachments),
            Matcher::UploadForm(name, want) => match media_type(req.content_type).as_deref() {
                Some(FORM | MULTIPART) => form_field(body, name, want),
                Some(_) => Tri::NoMatch,
                None => match body.bytes {
                    Some(b) if !b.starts_with(b"--") => Tri::NoMatch,
                    _ => form_field(body, name, want),
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
    match body.whole().and_then(parse_doc) {
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
fn form_field(body: Body<'_>, name: &str, want: &str) -> Tri {
    let Some(bytes) = body.bytes else {
        return Tri::Unknown("body not read".to_owned());
    };
    match form_fields(bytes, body.complete) {
        Err(why) => Tri::Unknown(format!("form: {why}")),
        Ok((fields, _)) if fields.iter().any(|(k, v)| k == name && glob_exact(want, v)) => {
            Tri::Match
        }
        Ok((_, true)) => Tri::NoMatch,
        Ok((_, false)) => Tri::Unknown("form: field not in the inspected prefix".to_owned()),
    }
}

/// The fields readable from the prefix, and whether that is all of them.
pub(crate) fn form_fields(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<(String, String)>, bool), String> {
    if bytes.starts_with(b"--") {
        multipart_fields(bytes, complete)
    } else {
        urlencoded_fields(bytes, complete)
    }
}

fn urlencoded_fields(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<(String, String)>, bool), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not text".to_owned())?;
    let mut pairs: Vec<&str> = text.split('&').collect();
    if !complete {
        pairs.pop(); // the last pair may be cut short
    }
    let mut out = Vec::new();
    for pair in pairs.into_iter().filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((form_decode(k)?, form_decode(v)?));
    }
    Ok((out, complete))
}

/// One part of a `multipart/form-data` body.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub name: Option<String>,
    /// The `filename` parameter, for a file part.
    pub filename: Option<String>,
    /// The value as far as the prefix holds it.
    pub value: String,
    /// `false` when the prefix ends inside the value.
    pub whole: bool,
}

/// The fields readable from the prefix (complete values only), and whether that is all.
fn multipart_fields(bytes: &[u8], complete: bool) -> Result<(Vec<(String, String)>, bool), String> {
    let (parts, all) = multipart_parts(bytes, complete)?;
    let fields = parts
        .into_iter()
        .filter(|p| p.whole)
        .filter_map(|p| Some((p.name?, p.value)))
        .collect();
    Ok((fields, all))
}

/// `--boundary\r\n` headers `\r\n\r\n` value `\r\n--boundary` … `--boundary--`. A part
/// whose headers are in the prefix but whose value is cut short is returned with
/// `whole: false` (its file name is known before its bytes).
pub(crate) fn multipart_parts(bytes: &[u8], complete: bool) -> Result<(Vec<Part>, bool), String> {
    let first_end = find(bytes, b"\r\n").ok_or("no boundary line")?;
    let boundary = &bytes[..first_end];
    if boundary.len() < 3 || boundary.len() > 72 {
        return Err("bad boundary".to_owned());
    }
    let mut delimiter = b"\r\n".to_vec();
    delimiter.extend_from_slice(boundary);
    let mut out = Vec::new();
    let mut pos = first_end + 2;
    loop {
        let Some(head_end) = find(&bytes[pos..], b"\r\n\r\n") else {
            return cut(out, complete);
        };
        let headers = std::str::from_utf8(&bytes[pos..pos + head_end])
            .map_err(|_| "bad part headers".to_owned())?;
        let value_start = pos + head_end + 4;
        let (name, filename) = (part_name(headers), part_filename(headers));
        let Some(value_len) = find(&bytes[value_start..], &delimiter) else {
            out.push(Part {
                name,
                filename,
                value: String::from_utf8_lossy(&bytes[value_start..]).into_owned(),
                whole: false,
            });
            return cut(out, complete);
        };
        let value = &bytes[value_start..value_start + value_len];
        out.push(Part {
            name,
            filename,
            value: String::from_utf8_lossy(value).into_owned(),
            whole: true,
        });
        pos = value_start + value_len + delimiter.len();
        match bytes.get(pos..pos + 2) {
            Some(b"--") => return Ok((out, true)),
            Some(b"\r\n") => pos += 2,
            Some(_) => return Err("bad part delimiter".to_owned()),
            None => return cut(out, complete),
        }
    }
}

fn cut(out: Vec<Part>, complete: bool) -> Result<(Vec<Part>, bool), String> {
    if complete {
        Err("multipart body ends early".to_owned())
    } else {
        Ok((out, false))
    }
}

/// `Content-Disposition: form-data; name="x"` → `x`.
fn part_name(headers: &str) -> Option<String> {
    let line = headers
        .split("\r\n")
        .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))?;
    let at = line.find("name=\"")?;
    let rest = &line[at + 6..];
    // `filename="…"` also contains `name="`; take the `name` parameter proper.
    if at > 0 && line.as_bytes()[at - 1].is_ascii_alphabetic() {
        let later = rest.find("name=\"").map(|i| &rest[i..])?;
        return part_name(&format!("content-disposition: {later}"));
    }
    Some(rest.split('"').next()?.to_owned())
}

/// `Content-Disposition: form-data; name="content"; filename="x.whl"` → `x.whl`.
fn part_filename(headers: &str) -> Option<String> {
    let line = headers
        .split("\r\n")
        .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))?;
    let at = line.to_ascii_lowercase().find("filename=\"")?;
    Some(line[at + 10..].split('"').next()?.to_owned())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
