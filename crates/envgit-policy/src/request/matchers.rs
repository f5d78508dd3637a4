//! The pieces a rule is made of: methods, path globs, query parameters. Each answers with a
//! [`Tri`], so that "cannot tell" is never silently read as "no".

use crate::glob::{Case, star_match};
use crate::request::form_error::FormError;
use crate::request::normalize::PathError;

/// The answer of one matcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tri {
    Match,
    NoMatch,
    /// Cannot be evaluated (body missing, cut short or unparseable; the readings of an
    /// ambiguous path disagree). A `deny`/`ask` rule counts it as a match, an `allow` rule
    /// and an `l7` permission as no match.
    Unknown(String),
}

impl Tri {
    pub fn from_bool(b: bool) -> Tri {
        if b { Tri::Match } else { Tri::NoMatch }
    }

    /// Both must hold: any `NoMatch` wins, then any `Unknown`.
    pub fn and(self, other: impl FnOnce() -> Tri) -> Tri {
        match self {
            Tri::NoMatch => Tri::NoMatch,
            Tri::Match => other(),
            Tri::Unknown(why) => match other() {
                Tri::NoMatch => Tri::NoMatch,
                _ => Tri::Unknown(why),
            },
        }
    }

    /// Either may hold: any `Match` wins, then any `Unknown`.
    pub fn or(self, other: impl FnOnce() -> Tri) -> Tri {
        match self {
            Tri::Match => Tri::Match,
            Tri::NoMatch => other(),
            Tri::Unknown(why) => match other() {
                Tri::Match => Tri::Match,
                _ => Tri::Unknown(why),
            },
        }
    }
}

/// A set of methods, compared case-insensitively.
#[derive(Debug, Clone)]
pub(crate) enum Methods {
    Any,
    Only(Vec<String>),
    /// Every method but these (e.g. "not GET, HEAD or OPTIONS").
    Except(Vec<String>),
}

impl Methods {
    pub fn matches(&self, method: &str) -> bool {
        let listed = |list: &[String]| list.iter().any(|m| m.eq_ignore_ascii_case(method));
        match self {
            Methods::Any => true,
            Methods::Only(list) => listed(list),
            Methods::Except(list) => !listed(list),
        }
    }
}

/// `*` within a segment (any run of characters, possibly empty), ASCII case-insensitive.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    star_match(pattern, text, Case::AsciiFold)
}

/// A path pattern split into segments: `**` is any number of segments (zero included), other
/// segments are [`glob`]s within one segment. A trailing `/` is not a segment.
pub(crate) fn pattern_segments(pattern: &str) -> Vec<String> {
    pattern
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Does the path (as segments) match the pattern? Dynamic programming, so `**` never
/// backtracks exponentially on long attacker-chosen paths.
pub(crate) fn path_matches(pattern: &[String], path: &[String]) -> bool {
    // reach[j]: the first i pattern segments can consume the first j path segments.
    let mut reach = vec![false; path.len() + 1];
    reach[0] = true;
    for seg in pattern {
        let mut next = vec![false; path.len() + 1];
        if seg == "**" {
            let mut any = false;
            for j in 0..=path.len() {
                any |= reach[j];
                next[j] = any;
            }
        } else {
            for j in 0..path.len() {
                if reach[j] && glob(seg, &path[j]) {
                    next[j + 1] = true;
                }
            }
        }
        reach = next;
        if !reach.iter().any(|&r| r) {
            return false;
        }
    }
    reach[path.len()]
}

/// Path patterns (any may match) against every reading of the request path: `Match` when
/// all readings match, `NoMatch` when none does, `Unknown` otherwise (and for an unreadable
/// path).
pub(crate) fn path_tri(
    patterns: &[Vec<String>],
    views: &Result<Vec<Vec<String>>, PathError>,
) -> Tri {
    let views = match views {
        Ok(views) => views,
        Err(why) => return Tri::Unknown(why.to_string()),
    };
    let hits = views
        .iter()
        .filter(|v| patterns.iter().any(|p| path_matches(p, v)))
        .count();
    if hits == views.len() {
        Tri::Match
    } else if hits == 0 {
        Tri::NoMatch
    } else {
        Tri::Unknown(
            "ambiguous path: its readings (and any path a header routes it by) match differently"
                .to_owned(),
        )
    }
}

/// `a=1&b=2` decoded (`+` is a space); `Err` for an invalid `%` escape.
pub(crate) fn parse_query(raw: &str) -> Result<Vec<(String, String)>, FormError> {
    raw.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((form_decode(name)?, form_decode(value)?))
        })
        .collect()
}

/// Percent-decoding with `+` as a space (`application/x-www-form-urlencoded`).
pub(crate) fn form_decode(text: &str) -> Result<String, FormError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let byte = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or(FormError::InvalidEscape)?;
                out.push(byte);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Every `(name, value glob)` must be present (some occurrence of the name matching).
/// Names and values compare exactly (values may hold `*`).
pub(crate) fn query_tri(
    wanted: &[(String, String)],
    query: &Result<Vec<(String, String)>, FormError>,
) -> Tri {
    if wanted.is_empty() {
        return Tri::Match;
    }
    let pairs = match query {
        Ok(pairs) => pairs,
        Err(why) => return Tri::Unknown(format!("query: {why}")),
    };
    Tri::from_bool(
        wanted
            .iter()
            .all(|(name, value)| pairs.iter().any(|(n, v)| n == name && glob_exact(value, v))),
    )
}

/// [`glob`], but case-sensitive.
pub(crate) fn glob_exact(pattern: &str, text: &str) -> bool {
    star_match(pattern, text, Case::Exact)
}
