//! The request body as the gate hands it over (a prefix, or all of it), and the form
//! encodings read from it (`application/x-www-form-urlencoded`, `multipart/form-data`), which
//! the body matchers, the GraphQL reader, method overrides and summaries all need.

use super::content_type::{FORM, is_multipart_form, media_type};
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

/// The fields readable from the prefix, and whether that is all of them; the encoding is
/// told from the body (`--` opens a multipart body), for summaries.
pub(crate) fn form_fields(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<(String, String)>, bool), FormError> {
    form_fields_as(bytes, complete, None)
}

/// [`form_fields`], read as a server reads the request: the encoding its `Content-Type`
/// declares (`multipart/form-data`, or a multipart type Rack reads as a form, with the
/// boundary it names), else told from the body.
pub(crate) fn form_fields_as(
    bytes: &[u8],
    complete: bool,
    content_type: Option<&str>,
) -> Result<(Vec<(String, String)>, bool), FormError> {
    match media_type(content_type).as_deref() {
        Some(t) if is_multipart_form(t) => {
            let boundary = header_boundary(content_type).ok_or(FormError::BadBoundary)?;
            multipart_fields(bytes, complete, Some(&boundary))
        }
        Some(FORM) => urlencoded_fields(bytes, complete),
        _ if bytes.starts_with(b"--") => multipart_fields(bytes, complete, None),
        _ => urlencoded_fields(bytes, complete),
    }
}

/// The `boundary` parameter of a `Content-Type` (quoted or not, the name in any case).
fn header_boundary(content_type: Option<&str>) -> Option<Vec<u8>> {
    let params = params(content_type?.split_once(';')?.1).ok()?;
    let mut found = params.into_iter().filter(|(k, _)| k == "boundary");
    let (_, value) = found.next()?;
    (found.next().is_none() && !value.is_empty()).then(|| value.into_bytes())
}

/// `a=1; b="x;y"` → `[("a","1"), ("b","x;y")]`: names lower-cased, space around `=` and `;`
/// allowed, quoted strings unescaped (`\"`), as Python's `cgi.parse_header` and Rack read
/// them. A parameter in RFC 2231's `name*=` form is an error: parsers disagree on it.
fn params(text: &str) -> Result<Vec<(String, String)>, FormError> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        if rest.is_empty() {
            return Ok(out);
        }
        let eq = rest.find(['=', ';']).unwrap_or(rest.len());
        let name = rest[..eq].trim().to_ascii_lowercase();
        if name.ends_with('*') {
            return Err(FormError::BadPartHeaders);
        }
        if !rest[eq..].starts_with('=') {
            out.push((name, String::new()));
            rest = &rest[eq..];
            continue;
        }
        let value = rest[eq + 1..].trim_start();
        if let Some(quoted) = value.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => v.extend(chars.next().map(|(_, c)| c)),
                    Some((i, '"')) => break i + 1,
                    Some((_, c)) => v.push(c),
                    None => return Err(FormError::BadPartHeaders),
                }
            };
            out.push((name, v));
            rest = &quoted[end..];
            let next = rest.trim_start();
            if !next.is_empty() && !next.starts_with(';') {
                return Err(FormError::BadPartHeaders);
            }
        } else {
            let end = value.find(';').unwrap_or(value.len());
            out.push((name, value[..end].trim().to_owned()));
            rest = &value[end..];
        }
    }
}

fn urlencoded_fields(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<(String, String)>, bool), FormError> {
    let text = std::str::from_utf8(bytes).map_err(|_| FormError::NotText)?;
    let mut out: Vec<(String, String)> = Vec::new();
    // Some servers (bottle, older Python) also split at `;`: both readings count.
    for separators in [&['&'][..], &['&', ';'][..]] {
        let mut pairs: Vec<&str> = text.split(separators).collect();
        if !complete {
            pairs.pop(); // the last pair may be cut short
        }
        for pair in pairs.into_iter().filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let field = (form_decode(k)?, form_decode(v)?);
            if !out.contains(&field) {
                out.push(field);
            }
        }
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
    boundary: Option<&[u8]>,
) -> Result<(Vec<(String, String)>, bool), FormError> {
    let (parts, all) = multipart_parts_with(bytes, complete, boundary)?;
    let fields = parts
        .into_iter()
        .filter(|p| p.whole)
        .filter_map(|p| Some((p.name?, p.value)))
        .collect();
    Ok((fields, all))
}

/// `--boundary\r\n` headers `\r\n\r\n` value `\r\n--boundary` … `--boundary--`. A part
/// whose headers are in the prefix but whose value is cut short is returned with
/// `whole: false` (its file name is known before its bytes). The boundary is the body's first
/// line.
pub(crate) fn multipart_parts(
    bytes: &[u8],
    complete: bool,
) -> Result<(Vec<Part>, bool), FormError> {
    multipart_parts_with(bytes, complete, None)
}

/// [`multipart_parts`] with the boundary the `Content-Type` names, if it names one (a
/// preamble before its first delimiter line is skipped, as servers skip it). What lenient
/// parsers read differently from this strict one is an error, never a guess: a line that
/// opens with the delimiter but is not one here (a bare-LF line end, trailing characters), a
/// bare LF or CR in part headers, folded or repeated `Content-Disposition`, a `name*=`.
pub(crate) fn multipart_parts_with(
    bytes: &[u8],
    complete: bool,
    boundary: Option<&[u8]>,
) -> Result<(Vec<Part>, bool), FormError> {
    let (boundary, mut pos) = match boundary {
        Some(b) => {
            let mut dash = b"--".to_vec();
            dash.extend_from_slice(b);
            // The first line that opens with the delimiter: it must be exactly it.
            let first = line_starts(bytes, &dash).next();
            match first {
                Some(at) if bytes[at + dash.len()..].starts_with(b"\r\n") => {
                    let pos = at + dash.len() + 2;
                    (dash, pos)
                }
                Some(_) => return Err(FormError::BadPartDelimiter),
                None => return cut(Vec::new(), complete),
            }
        }
        None => {
            let first_end = find(bytes, b"\r\n").ok_or(FormError::NoBoundaryLine)?;
            (bytes[..first_end].to_vec(), first_end + 2)
        }
    };
    if boundary.len() < 3 || boundary.len() > 72 {
        return Err(FormError::BadBoundary);
    }
    // Every line that opens with the delimiter, as a lenient parser finds them; each must be
    // one of the delimiters read below.
    let mut lenient: Vec<usize> = line_starts(bytes, &boundary).collect();
    let mut strict: Vec<usize> = vec![pos - boundary.len() - 2];
    let mut delimiter = b"\r\n".to_vec();
    delimiter.extend_from_slice(&boundary);
    let mut out = Vec::new();
    let result = loop {
        let Some(head_end) = find(&bytes[pos..], b"\r\n\r\n") else {
            break cut(out, complete);
        };
        let headers = std::str::from_utf8(&bytes[pos..pos + head_end])
            .map_err(|_| FormError::BadPartHeaders)?;
        let value_start = pos + head_end + 4;
        let (name, filename) = disposition(headers)?;
        let Some(value_len) = find(&bytes[value_start..], &delimiter) else {
            out.push(Part {
                name,
                filename,
                value: String::from_utf8_lossy(&bytes[value_start..]).into_owned(),
                whole: false,
            });
            break cut(out, complete);
        };
        let value = &bytes[value_start..value_start + value_len];
        out.push(Part {
            name,
            filename,
            value: String::from_utf8_lossy(value).into_owned(),
            whole: true,
        });
        pos = value_start + value_len + delimiter.len();
        strict.push(pos - boundary.len());
        match bytes.get(pos..pos + 2) {
            // The close delimiter ends its line (else a lenient parser reads on).
            Some(b"--") => match bytes.get(pos + 2..pos + 4) {
                None | Some(b"\r\n") => break Ok((out, true)),
                _ => return Err(FormError::BadPartDelimiter),
            },
            Some(b"\r\n") => pos += 2,
            Some(_) => return Err(FormError::BadPartDelimiter),
            None => break cut(out, complete),
        }
    };
    lenient.retain(|at| !strict.contains(at));
    if !lenient.is_empty() {
        return Err(FormError::BadPartDelimiter);
    }
    result
}

/// Offsets of the lines (at the start, or after an LF) that open with `dash`.
fn line_starts<'a>(bytes: &'a [u8], dash: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    (0..bytes.len())
        .filter(move |&i| (i == 0 || bytes[i - 1] == b'\n') && bytes[i..].starts_with(dash))
}

/// The `name` and `filename` of a part's `Content-Disposition`, read as servers read them;
/// an error where they may read it otherwise (see [`multipart_parts_with`]).
fn disposition(headers: &str) -> Result<(Option<String>, Option<String>), FormError> {
    if headers.replace("\r\n", "").contains(['\r', '\n']) {
        return Err(FormError::BadPartHeaders);
    }
    if headers.split("\r\n").any(|l| l.starts_with([' ', '\t'])) {
        return Err(FormError::BadPartHeaders);
    }
    let mut found = headers.split("\r\n").filter_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-disposition")
            .then_some(value)
    });
    let Some(value) = found.next() else {
        return Ok((None, None));
    };
    if found.next().is_some() {
        return Err(FormError::BadPartHeaders);
    }
    let params = params(value.split_once(';').map_or("", |(_, p)| p))?;
    let one = |key: &str| -> Result<Option<String>, FormError> {
        let mut values = params
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone());
        let first = values.next();
        if values.next().is_some() {
            return Err(FormError::BadPartHeaders);
        }
        Ok(first)
    };
    Ok((one("name")?, one("filename")?))
}

fn cut(out: Vec<Part>, complete: bool) -> Result<(Vec<Part>, bool), FormError> {
    if complete {
        Err(FormError::EndsEarly)
    } else {
        Ok((out, false))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
