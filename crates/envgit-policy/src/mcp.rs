//! `mcp.tools`: which downstream tool (`server.tool`) the `execute` REPL may call.

use crate::glob::{Case, star_match};
use crate::schema::{Action, McpSection};

/// The rule id recorded when no `mcp.tools` glob matches a tool.
pub const RULE_MCP_DEFAULT: &str = "mcp.default";

impl McpSection {
    /// The action for `server.tool` and the glob that decided it (`None`: no glob matched, and
    /// a tool of a server listed in `mcp.servers` is allowed).
    ///
    /// In a glob `*` matches any run of characters, dots included. When several globs match,
    /// the most specific one decides (the most characters other than `*`); between equally
    /// specific ones, the strictest action (deny, then ask, then allow).
    pub fn decide_tool(&self, server: &str, tool: &str) -> (Action, Option<String>) {
        let name = format!("{server}.{tool}");
        let mut best: Option<(usize, u8, &str, Action)> = None;
        for (glob, action) in &self.tools {
            if !star_match(glob, &name, Case::Exact) {
                continue;
            }
            let specificity = glob.chars().filter(|c| *c != '*').count();
            let strictness = match action {
                Action::Deny => 2,
                Action::Ask => 1,
                Action::Allow => 0,
            };
            let better = match best {
                None => true,
                Some((s, st, _, _)) => (specificity, strictness) > (s, st),
            };
            if better {
                best = Some((specificity, strictness, glob.as_str(), *action));
            }
        }
        match best {
            Some((_, _, glob, action)) => (action, Some(glob.to_string())),
            None => (Action::Allow, None),
        }
    }
}

/// A server name the REPL can use as a global: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_server_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `http://` or `https://` (any case), then a non-empty host before any port, path or query.
pub(crate) fn is_server_url(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !host.is_empty()
        && !host.starts_with(':')
        && !url.chars().any(char::is_whitespace)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn most_specific_glob_decides_then_strictest() {
        let mut m = McpSection::default();
        m.tools.insert("gh.*".into(), Action::Deny);
        m.tools.insert("gh.list_*".into(), Action::Allow);
        m.tools.insert("gh.create_issue".into(), Action::Ask);
        m.tools.insert("*.delete*".into(), Action::Deny);
        m.tools.insert("*.delete_*".into(), Action::Allow);
        let table = [
            ("gh", "list_issues", Action::Allow, Some("gh.list_*")),
            ("gh", "create_issue", Action::Ask, Some("gh.create_issue")),
            ("gh", "merge", Action::Deny, Some("gh.*")),
            ("fs", "read", Action::Allow, None),
            ("fs", "delete_file", Action::Allow, Some("*.delete_*")),
            ("fs", "deletex", Action::Deny, Some("*.delete*")),
        ];
        for (server, tool, action, rule) in table {
            let (a, r) = m.decide_tool(server, tool);
            assert_eq!((a, r.as_deref()), (action, rule), "{server}.{tool}");
        }
    }

    #[test]
    fn server_names_are_javascript_names_with_a_position() {
        let err = crate::Policy::parse(
            "envgit.yaml",
            "version: 1\nmcp:\n  servers:\n    my-server: { command: x }\n",
        )
        .unwrap_err();
        assert_eq!((err.line, err.column), (4, 5), "{err}");
        assert!(err.message.contains("`my-server`"), "{err}");
        assert!(err.message.contains("my_server"), "{err}");
        assert!(
            crate::Policy::parse(
                "envgit.yaml",
                "version: 1\nmcp:\n  servers:\n    my_server2: { command: x }\n"
            )
            .is_ok()
        );
    }

    #[test]
    fn glob() {
        let glob_match = |p: &str, s: &str| star_match(p, s, Case::Exact);
        assert!(glob_match("a*c", "abbbc"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*c", "abcd"));
        assert!(glob_match("a.*.c", "a.x.y.c"));
    }
}
