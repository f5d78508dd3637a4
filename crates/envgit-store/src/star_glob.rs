//! The `*`-only globs of the protected list (`lefthook.*`, `*.code-workspace`), matched
//! against one name: by the guard's copy and put-back, and by the git layer's look at an
//! index's entries.

/// `*`-only glob over a whole name, without allocating: the part before the first `*` and
/// after the last anchor it, the parts between are found in order, each leftmost.
pub(crate) fn matches(pattern: &[u8], name: &[u8]) -> bool {
    let Some(first) = pattern.iter().position(|&b| b == b'*') else {
        return pattern == name;
    };
    let last = pattern.iter().rposition(|&b| b == b'*').unwrap_or(first);
    let (head, tail) = (&pattern[..first], &pattern[last + 1..]);
    if name.len() < head.len() + tail.len() || !name.starts_with(head) || !name.ends_with(tail) {
        return false;
    }
    let mut rest = &name[head.len()..name.len() - tail.len()];
    let middle: &[u8] = if last > first {
        &pattern[first + 1..last]
    } else {
        &[]
    };
    for part in middle.split(|&b| b == b'*').filter(|p| !p.is_empty()) {
        match rest.windows(part.len()).position(|w| w == part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchored_at_both_ends_with_the_middle_parts_in_order() {
        for (pattern, name, expected) in [
            ("lefthook.*", "lefthook.yml", true),
            ("lefthook.*", "lefthook", false),
            ("*.code-workspace", "a.code-workspace", true),
            ("*.code-workspace", ".code-workspace", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("a*bc*bc", "abc", false),
            ("a*", "a", true),
            ("*", "", true),
            ("x", "x", true),
        ] {
            assert_eq!(
                matches(pattern.as_bytes(), name.as_bytes()),
                expected,
                "{pattern} {name}"
            );
        }
    }
}
