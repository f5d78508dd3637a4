//! Star globs: the glob of request rules (path segments, query and body values) and of
//! `mcp.tools`, where only `*` is special (any run of characters, `/` and `.` included).
//! Matching is globset's; every other character, `?`, `[`, `{` and `\` included, is escaped
//! so it stays literal, as the policy documents.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use globset::{GlobBuilder, GlobMatcher};

/// How letters compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Case {
    /// Byte for byte.
    Exact,
    /// ASCII letters fold (URL paths); other characters compare byte for byte, so `K` never
    /// matches the Kelvin sign as Unicode folding would.
    AsciiFold,
}

/// A compiled star glob.
#[derive(Debug, Clone)]
pub(crate) struct StarGlob {
    matcher: Option<GlobMatcher>,
    /// The pattern as compiled (folded when `AsciiFold`), for the fallback below.
    pattern: String,
    case: Case,
}

impl StarGlob {
    pub(crate) fn new(pattern: &str, case: Case) -> StarGlob {
        let pattern = match case {
            Case::Exact => pattern.to_owned(),
            Case::AsciiFold => pattern.to_ascii_lowercase(),
        };
        // A run of stars is one star (globset reserves `**` for whole path components).
        let escaped = pattern
            .split('*')
            .filter(|piece| !piece.is_empty())
            .map(globset::escape)
            .collect::<Vec<_>>();
        let mut glob = String::new();
        if pattern.starts_with('*') {
            glob.push('*');
        }
        glob.push_str(&escaped.join("*"));
        if pattern.ends_with('*') && !glob.ends_with('*') {
            glob.push('*');
        }
        let matcher = GlobBuilder::new(&glob)
            .literal_separator(false)
            .backslash_escape(false)
            .build()
            .ok()
            .map(|g| g.compile_matcher());
        StarGlob {
            matcher,
            pattern,
            case,
        }
    }

    pub(crate) fn is_match(&self, text: &str) -> bool {
        let folded;
        let text = match self.case {
            Case::Exact => text,
            Case::AsciiFold => {
                folded = text.to_ascii_lowercase();
                &folded
            }
        };
        match &self.matcher {
            Some(m) => m.is_match(text),
            // Escaped input always compiles; should it not, only the literal text matches.
            None => self.pattern == text,
        }
    }
}

/// Patterns come from the policy and the presets only, so the set stays small; the bound
/// is a backstop, not an eviction policy.
const CACHE_LIMIT: usize = 4096;

thread_local! {
    static COMPILED: RefCell<HashMap<Case, HashMap<String, Rc<StarGlob>>>> = RefCell::default();
}

/// Does `text` match the star glob `pattern`? Compiled once per thread and pattern, since
/// rules are evaluated per request from the policy's text. Most segments of request rules
/// are plain words or a lone `*`; those are answered without a regex (same answers).
pub(crate) fn star_match(pattern: &str, text: &str, case: Case) -> bool {
    if !pattern.contains('*') {
        return match case {
            Case::Exact => pattern == text,
            Case::AsciiFold => pattern.eq_ignore_ascii_case(text),
        };
    }
    if pattern.bytes().all(|b| b == b'*') {
        return true;
    }
    let glob = COMPILED.with(|cache| {
        let mut cache = cache.borrow_mut();
        let cache = cache.entry(case).or_default();
        if let Some(g) = cache.get(pattern) {
            return Rc::clone(g);
        }
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        let g = Rc::new(StarGlob::new(pattern, case));
        cache.insert(pattern.to_owned(), Rc::clone(&g));
        g
    });
    glob.is_match(text)
}
