//! Star globs: the glob of request rules (path segments, query and body values), of
//! `mcp.tools` and of protected names, where only `*` is special (any run of characters, `/`
//! and `.` included) and every other character, `?`, `[`, `{` and `\` included, is literal, as
//! the policy documents.
//!
//! Matched directly, with no regex: each pattern used to be compiled by globset into a regex
//! once per thread, and a step's threads each met a few (a protected name on the guard
//! thread, request rules on the gate's): ~0.2 ms of a step's CPU went to compiling them and to
//! the regex pool's `available_parallelism`, which reads the cgroup files.

/// How letters compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Case {
    /// Byte for byte.
    Exact,
    /// ASCII letters fold (URL paths); other characters compare byte for byte, so `K` never
    /// matches the Kelvin sign as Unicode folding would.
    AsciiFold,
}

/// Does `text` match the star glob `pattern` (whole, not a part of it)?
pub(crate) fn star_match(pattern: &str, text: &str, case: Case) -> bool {
    match case {
        Case::Exact => stars(pattern, text),
        Case::AsciiFold => stars(&pattern.to_ascii_lowercase(), &text.to_ascii_lowercase()),
    }
}

/// `*`-only matching: the text starts with the part before the first star and ends with the
/// part after the last, and holds the parts between in order. Each middle part is taken at its
/// leftmost place, which leaves the most text for the rest: if any placement matches, that one
/// does. Parts are whole strings, so every cut falls on a character boundary.
fn stars(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No star: the text is the pattern.
        return rest.is_empty();
    };
    for part in middle.iter().filter(|p| !p.is_empty()) {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::{Case, star_match};
    use proptest::prelude::*;

    /// The definition, tried every way (exponential, for short strings only).
    fn reference(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| reference(rest, &t[i..])),
            Some((c, rest)) => t.first() == Some(c) && reference(rest, &t[1..]),
        }
    }

    #[test]
    fn these_match_as_the_policy_says() {
        for (pattern, text, want) in [
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("a*", "a/b.c", true),
            ("*.js", ".js", true),
            ("a*b*c", "abbc", true),
            ("a*b*c", "acb", false),
            ("a*a", "a", false),
            ("*a*a*", "aa", true),
            ("a?[b]{c}\\", "a?[b]{c}\\", true),
            ("a?", "ab", false),
            ("ü*ß", "ü--ß", true),
            ("**", "x", true),
        ] {
            assert_eq!(
                star_match(pattern, text, Case::Exact),
                want,
                "{pattern:?} {text:?}"
            );
        }
        assert!(star_match(
            "/Repos/*/PULLS",
            "/repos/o/pulls",
            Case::AsciiFold
        ));
        assert!(!star_match("/Repos/*", "/repos/o", Case::Exact));
        // ASCII folding only: the Kelvin sign is not `k`.
        assert!(!star_match("k*", "\u{212A}x", Case::AsciiFold));
    }

    proptest! {
        #[test]
        fn it_agrees_with_the_definition(
            pattern in "[ab*ü.]{0,7}",
            text in "[abü./]{0,9}",
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let t: Vec<char> = text.chars().collect();
            prop_assert_eq!(star_match(&pattern, &text, Case::Exact), reference(&p, &t));
        }
    }
}
