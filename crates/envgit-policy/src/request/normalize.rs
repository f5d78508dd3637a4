//! Request paths as rules see them: percent-decoding of unreserved characters,
//! dot segments resolved, repeated slashes collapsed.
//!
//! A path that servers may read in more than one way is *ambiguous*: an encoded `/` or `\`
//! (`%2F`, `%5C`), a raw `\`, a dot segment written with `%2e`, a double encoding (`%252F`),
//! `..` above the root. [`normalize_path`] refuses those. For matching, [`path_views`] instead
//! returns every reading a server might make, so a rule can still be decided when all readings
//! agree (`/api/v4/projects/group%2Fproject/issues` is not a git push however it is read).

/// Why a request path is refused (it cannot be judged, or servers may read it more than one
/// way); the text is the reason recorded and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path does not start with `/`")]
    NotAbsolute,
    #[error("the path contains a control character or NUL")]
    ControlCharacter,
    #[error("the path contains an encoded NUL (`%00`)")]
    EncodedNul,
    #[error("the path contains an invalid `%` escape")]
    BadEscape,
    #[error("the path is not valid UTF-8")]
    NotUtf8,
    #[error("path longer than {MAX_PATH} bytes")]
    TooLong,
    #[error("ambiguous path: a double percent-encoding (`%25xx`)")]
    DoubleEncoding,
    #[error("ambiguous path: an encoded `/` or a `\\`")]
    EncodedSlash,
    #[error("ambiguous path: a dot segment written with `%2e`")]
    EncodedDot,
    #[error("ambiguous path: `..` above the root")]
    AboveRoot,
}

/// Normalized path: percent-decoding of unreserved characters only (other escapes kept,
/// upper-cased), dot segments resolved, repeated slashes collapsed, a trailing `/` kept.
/// `Err` (with the reason) for a path that is not absolute, contains a control character or
/// NUL, an invalid `%` escape, or is ambiguous (see the module docs); callers fail closed.
pub fn normalize_path(raw: &str) -> Result<String, PathError> {
    let found = scan(raw)?;
    if found.double {
        return Err(PathError::DoubleEncoding);
    }
    if found.slash {
        return Err(PathError::EncodedSlash);
    }
    let plain = read(raw, Reading::default())?;
    if found.dots
        && read(
            raw,
            Reading {
                dots: true,
                ..Reading::default()
            },
        )?
        .segments
            != plain.segments
    {
        return Err(PathError::EncodedDot);
    }
    if plain.above_root {
        return Err(PathError::AboveRoot);
    }
    let mut out = String::with_capacity(raw.len().max(1));
    for segment in &plain.segments {
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() || plain.trailing_slash {
        out.push('/');
    }
    Ok(out)
}

/// Longest path judged segment by segment (real servers refuse far shorter ones); a longer
/// one cannot be evaluated and fails closed.
const MAX_PATH: usize = 64 * 1024;

/// Every way a server might split `raw` into segments (at most 16, deduplicated; one for an
/// unambiguous path). A trailing `/` is not a segment. `Err` as for [`normalize_path`], except
/// that ambiguity is not an error here.
pub(crate) fn path_views(raw: &str) -> Result<Vec<Vec<String>>, PathError> {
    if raw.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    let found = scan(raw)?;
    let mut views: Vec<Vec<String>> = Vec::new();
    for bits in 0u8..16 {
        let reading = Reading {
            double: bits & 1 != 0,
            slash: bits & 2 != 0,
            dots: bits & 4 != 0,
            params: bits & 8 != 0,
        };
        if (reading.double && !found.double)
            || (reading.slash && !found.slash)
            || (reading.dots && !found.dots)
            || (reading.params && !found.params)
        {
            continue;
        }
        let segments = read(raw, reading)?.segments;
        if !views.contains(&segments) {
            views.push(segments);
        }
    }
    Ok(views)
}

/// [`path_views`] of a request's own path and of every path a header has a server route it
/// by (`overrides`): a rule matches only when it matches all of them, and an unreadable one
/// leaves the request unreadable.
pub(crate) fn request_path_views(
    path: &str,
    overrides: &[&str],
) -> Result<Vec<Vec<String>>, PathError> {
    let mut views = path_views(path)?;
    for other in overrides {
        for view in path_views(other)? {
            if !views.contains(&view) {
                views.push(view);
            }
        }
    }
    Ok(views)
}

/// Which optional readings a path admits.
#[derive(Debug, Default)]
struct Found {
    /// `%25` followed by two hex digits (a server that decodes twice sees another escape).
    double: bool,
    /// `\`, `%2F` or `%5C`: a separator for some servers, a character for others.
    slash: bool,
    /// `%2e`: a segment written with it may be a dot segment for some servers.
    dots: bool,
    /// `;` (path parameters, stripped from each segment by some Java servers).
    params: bool,
}

/// One way of reading a path: which of the optional interpretations apply.
#[derive(Debug, Default, Clone, Copy)]
struct Reading {
    /// Decode `%25xx` to `%xx` before anything else.
    double: bool,
    /// `\`, `%2F` and `%5C` separate segments.
    slash: bool,
    /// Segments that decode to `.` or `..` are dot segments.
    dots: bool,
    /// Everything from `;` to the end of a segment is dropped.
    params: bool,
}

struct Read {
    segments: Vec<String>,
    trailing_slash: bool,
    above_root: bool,
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Hard errors, and which readings the path admits (also after one level of decoding `%25`).
fn scan(raw: &str) -> Result<Found, PathError> {
    let mut found = scan_once(raw)?;
    if found.double {
        let again = scan_once(&undouble(raw))?;
        found.slash |= again.slash;
        found.dots |= again.dots;
        found.params |= again.params;
    }
    Ok(found)
}

fn scan_once(raw: &str) -> Result<Found, PathError> {
    if !raw.is_empty() && !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let bytes = raw.as_bytes();
    let mut found = Found::default();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b if b < 0x20 || b == 0x7f => {
                return Err(PathError::ControlCharacter);
            }
            b'\\' => found.slash = true,
            b';' => found.params = true,
            b'%' => {
                let byte = escape_at(bytes, i)?;
                match byte {
                    0 => return Err(PathError::EncodedNul),
                    b'/' | b'\\' => found.slash = true,
                    b'%' if hex2(bytes, i + 3) => found.double = true,
                    b'.' => found.dots = true,
                    _ => {}
                }
                i += 2;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(found)
}

/// Two hex digits at `i`.
fn hex2(bytes: &[u8], i: usize) -> bool {
    matches!((bytes.get(i), bytes.get(i + 1)), (Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some())
}

/// The byte a `%xx` escape at `i` stands for.
fn escape_at(bytes: &[u8], i: usize) -> Result<u8, PathError> {
    match (bytes.get(i), bytes.get(i + 1), bytes.get(i + 2)) {
        (Some(b'%'), Some(&h), Some(&l)) => match (hex(h), hex(l)) {
            (Some(h), Some(l)) => Ok(h << 4 | l),
            _ => Err(PathError::BadEscape),
        },
        _ => Err(PathError::BadEscape),
    }
}

/// `Some(n)` when the raw segment decodes to exactly `n` dots (`.`, `%2e`, `.%2E`, …).
fn decode_dots(seg: &[u8]) -> Option<usize> {
    let mut n = 0;
    let mut i = 0;
    while i < seg.len() {
        if seg[i] == b'.' {
            i += 1;
        } else if seg[i..].len() >= 3
            && seg[i] == b'%'
            && seg[i + 1] == b'2'
            && seg[i + 2] | 0x20 == b'e'
        {
            i += 3;
        } else {
            return None;
        }
        n += 1;
    }
    Some(n)
}

fn read(raw: &str, reading: Reading) -> Result<Read, PathError> {
    let undoubled;
    let text = if reading.double {
        undoubled = undouble(raw);
        undoubled.as_str()
    } else {
        raw
    };
    let bytes = text.as_bytes();
    // Split into raw segments at the separators this reading recognises.
    let mut raw_segments: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let sep_len = match bytes[i] {
            b'/' => 1,
            b'\\' if reading.slash => 1,
            b'%' if reading.slash && matches!(escape_at(bytes, i), Ok(b'/' | b'\\')) => 3,
            _ => 0,
        };
        if sep_len > 0 {
            raw_segments.push(&bytes[start..i]);
            i += sep_len;
            start = i;
        } else {
            i += 1;
        }
    }
    raw_segments.push(&bytes[start..]);
    // The first piece is what precedes the leading `/`: empty.
    let mut out = Read {
        segments: Vec::new(),
        trailing_slash: false,
        above_root: false,
    };
    for seg in raw_segments.into_iter().skip(1) {
        let seg = if reading.params {
            seg.split(|&b| b == b';').next().unwrap_or_default()
        } else {
            seg
        };
        let dots = if seg.iter().all(|&b| b == b'.') || reading.dots {
            decode_dots(seg)
        } else {
            None
        };
        out.trailing_slash = matches!(dots, Some(0..=2));
        match dots {
            Some(0 | 1) => {}
            Some(2) => {
                if out.segments.pop().is_none() {
                    out.above_root = true;
                }
            }
            _ => out.segments.push(decode_segment(seg)?),
        }
    }
    Ok(out)
}

/// `%25xx` → `%xx` (one level of a double encoding).
fn undouble(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if escape_at(bytes, i) == Ok(b'%') && hex2(bytes, i + 3) {
            out.push(b'%');
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Decodes escapes of unreserved characters; keeps every other escape, upper-cased.
fn decode_segment(seg: &[u8]) -> Result<String, PathError> {
    let mut out = Vec::with_capacity(seg.len());
    let mut i = 0;
    while i < seg.len() {
        if seg[i] == b'%' {
            let b = escape_at(seg, i)?;
            if is_unreserved(b) {
                out.push(b);
            } else {
                out.extend_from_slice(format!("%{b:02X}").as_bytes());
            }
            i += 3;
        } else {
            out.push(seg[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| PathError::NotUtf8)
}
