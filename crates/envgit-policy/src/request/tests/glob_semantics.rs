//! What a glob in a request rule or an `mcp.tools` entry matches, pinned row by row so that
//! a change of matcher cannot quietly widen or narrow a rule. Only `*` is special in these
//! globs (the policy refuses `?`, `[` and `{` in request rules; in `mcp.tools` they are
//! literal); `**` is special only as a whole path segment.

use crate::request::matchers::{glob, glob_exact, path_matches, pattern_segments};
use crate::request::normalize::path_views;
use crate::{Action, McpSection};

/// One path segment, ASCII case-insensitive: (pattern, text, matches).
const SEGMENT: &[(&str, &str, bool)] = &[
    ("*", "", true),
    ("*", "anything", true),
    ("*", ".hidden", true),
    ("abc", "abc", true),
    ("abc", "ABC", true),
    ("abc", "abcd", false),
    ("abc", "ab", false),
    ("*.git", "repo.git", true),
    ("*.git", "repo.GIT", true),
    ("*.git", ".git", true),
    ("*.git", "repo.gitx", false),
    ("a*", "a", true),
    ("*a", "a", true),
    ("a*b*c", "aXXbYYc", true),
    ("a*b*c", "abc", true),
    ("a*b*c", "aXXbYY", false),
    ("a**b", "aXb", true),
    ("a**b", "ab", true),
    ("**", "x", true),
    ("x", "xy", false),
    ("*x*", "axb", true),
    ("*x*", "ab", false),
    // no other glob syntax: taken literally
    ("?", "a", false),
    ("?", "?", true),
    ("[ab]", "a", false),
    ("[ab]", "[ab]", true),
    ("{a,b}", "a", false),
    ("{a,b}", "{a,b}", true),
    ("a\\*", "a\\b", true),
    ("a\\*", "a*", false),
    ("a.b", "aXb", false),
    ("a+b", "a+b", true),
    ("(a)", "(a)", true),
    ("^a$", "^a$", true),
    // ASCII case folding only
    ("é", "É", false),
    ("é", "é", true),
    ("k", "\u{212A}", false),
    ("s", "\u{17F}", false),
    ("straße", "STRAßE", true),
    // a decoded segment may hold a `/` (from %2F): `*` takes it like any character
    ("a*", "a/b", true),
];

#[test]
fn segment_globs_match_exactly_these() {
    for (pattern, text, want) in SEGMENT {
        assert_eq!(
            glob(pattern, text),
            *want,
            "segment {pattern:?} vs {text:?}"
        );
    }
}

/// Query and body values: case-sensitive, `*` crosses anything.
const VALUE: &[(&str, &str, bool)] = &[
    ("*.tar.gz", "x.tar.gz", true),
    ("*.tar.gz", "x.TAR.gz", false),
    ("*", "", true),
    ("*", "a/b/c", true),
    ("a*c", "a/b/c", true),
    ("refs/heads/*", "refs/heads/main", true),
    ("refs/heads/*", "refs/heads/a/b", true),
    ("refs/heads/*", "refs/tags/v1", false),
    ("v?", "v1", false),
    ("v?", "v?", true),
    ("[x]", "x", false),
    ("exact", "exact", true),
    ("exact", "Exact", false),
    ("", "", true),
    ("", "x", false),
];

#[test]
fn value_globs_match_exactly_these() {
    for (pattern, text, want) in VALUE {
        assert_eq!(
            glob_exact(pattern, text),
            *want,
            "value {pattern:?} vs {text:?}"
        );
    }
}

/// Whole paths: `**` is any number of segments (zero included), `*` stays in its segment,
/// empty segments and a trailing `/` do not count, the comparison is ASCII case-insensitive.
const PATH: &[(&str, &str, bool)] = &[
    ("/", "/", true),
    ("/", "/a", false),
    ("/*", "/a", true),
    ("/*", "/", false),
    ("/*", "/a/b", false),
    ("/**", "/", true),
    ("/**", "/a/b/c", true),
    ("**", "/a", true),
    ("**/x", "/x", true),
    ("**/x", "/a/b/x", true),
    ("**/x", "/a/x/b", false),
    ("/**/x", "/x", true),
    ("/a/**", "/a", true),
    ("/a/**", "/a/", true),
    ("/a/**", "/a/b/c", true),
    ("/a/**", "/ab", false),
    ("/a/**/b", "/a/b", true),
    ("/a/**/b", "/a/x/y/b", true),
    ("/a/**/b", "/a/x/y/c", false),
    ("/a/*/b", "/a/b", false),
    ("/a/*/b", "/a/x/b", true),
    ("/a/*/b", "/a/x/y/b", false),
    ("/A/B", "/a/b", true),
    ("/a/b", "/A/B", true),
    ("/a/b/", "/a/b", true),
    ("/a//b", "/a/b", true),
    ("a/b", "/a/b", true),
    ("/*/config", "/.git/config", true),
    ("/.git/*", "/.git/HEAD", true),
    ("/**/.env", "/app/.env", true),
    ("/**/*.pem", "/k/server.pem", true),
    ("/**/*.pem", "/k/server.pem.bak", false),
    ("/repos/*/*/issues", "/repos/o/r/issues", true),
    ("/repos/*/*/issues", "/repos/o/issues", false),
    ("/v2/**/blobs/uploads/**", "/v2/a/b/blobs/uploads/", true),
    ("/v2/**/manifests/*", "/v2/a/b/manifests", false),
    ("/a**/b", "/ax/b", true),
    ("/a**/b", "/a/x/b", false),
    ("/**/**", "/a", true),
    ("/**/a/**", "/a", true),
    ("/**/a/**", "/b", false),
    ("/?", "/a", false),
    ("/x.*", "/x.json", true),
    ("/x.*", "/x", false),
];

#[test]
fn path_globs_match_exactly_these() {
    for (pattern, path, want) in PATH {
        let views = path_views(path).unwrap_or_default();
        assert_eq!(views.len(), 1, "{path} reads one way");
        assert_eq!(
            path_matches(&pattern_segments(pattern), &views[0]),
            *want,
            "path {pattern:?} vs {path:?}"
        );
    }
}

/// `mcp.tools` globs against `server.tool`: case-sensitive, `*` crosses dots.
const TOOL: &[(&str, &str, &str, bool)] = &[
    ("gh.*", "gh", "list_issues", true),
    ("gh.*", "gh2", "x", false),
    ("gh.*", "GH", "x", false),
    ("*", "a", "b", true),
    ("*.delete*", "fs", "delete_file", true),
    ("*.delete*", "fs", "undelete", false),
    ("a.*.c", "a", "x.y.c", true),
    ("gh.list_*", "gh", "list_", true),
    ("gh.list_*", "gh", "LIST_x", false),
    ("gh.get?", "gh", "getx", false),
    ("gh.get?", "gh", "get?", true),
    ("gh.[ab]", "gh", "a", false),
    ("gh.[ab]", "gh", "[ab]", true),
    ("gh.{a,b}", "gh", "a", false),
    ("gh.tool", "gh", "tool", true),
    ("gh.tool", "gh", "tools", false),
];

#[test]
fn tool_globs_match_exactly_these() {
    for (pattern, server, tool, want) in TOOL {
        let mut m = McpSection::default();
        m.tools.insert((*pattern).to_owned(), Action::Deny);
        let (action, rule) = m.decide_tool(server, tool);
        assert_eq!(
            (action == Action::Deny, rule.is_some()),
            (*want, *want),
            "tool {pattern:?} vs {server}.{tool}"
        );
    }
}
