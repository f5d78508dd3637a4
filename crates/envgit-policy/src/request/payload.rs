//! The request body as the gate hands it over (a prefix, or all of it), and the form
//! encodings read from it (`application/x-www-form-urlencoded`, `multipart/form-data`), which
//! the body matchers, the GraphQL reader, method overrides and summaries all need.

use super::form_error::FormError;
use super::matchers::form_decode;

/// The body as the caller has it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Body<'a> {
    pub bytes: Option<&'a [u8]>,
    pub complete: bool,
}

impl<'a> Body<'a> {
    /// The whole body, or why it is not available.
    pub(crate) fn whole(&self) -> Result<&'a [u8], Unavailable> {
        match self.bytes {
            None => Err(Unavailable::NotRead),
            Some(_) if !self.complete => Err(Unavailable::Partial),
            Some(b) => Ok(b),
        }
    }
}

/// Why a matcher that needs the whole body does not have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unavailable {
    #[error("body not read")]
    NotRead,
    #[error("body larger than the inspected prefix")]
    Partial,
}

/// The fields readable from the prefix, and whether that is all of them.
pub(crate) fn form_fields(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<(String, String)>, bool), FormError> {
    if bytes.starts_with(b"--") {
        multipart_fields(bytes, complete)
    } else {
        urlencoded_fields(bytes, complete)
    }
}

fn urlencoded_fields(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<(String, String)>, bool), FormError> {
    let text = std::str::from_utf8(bytes).map_err(|_| FormError::NotText)?;
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
fn multipart_fields(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<(String, String)>, bool), FormError> {
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
pub(crate) fn multipart_parts(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<Part>, bool), FormError> {
    let first_end = find(bytes, b"\r\n").ok_or(FormError::NoBoundaryLine)?;
    let boundary = &bytes[..first_end];
    if boundary.len() < 3 || boundary.len() > 72 {
        return Err(FormError::BadBoundary);
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
            .map_err(|_| FormError::BadPartHeaders)?;
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
            Some(_) => return Err(FormError::BadPartDelimiter),
            None => return cut(out, complete),
        }
    }
}

fn cut(out: Vec<Part>, complete: bool) -> Result<(Vec<Part>, bool), FormError> {
    if complete {
        Err(FormError::EndsEarly)
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
