//! The commented `envgit.yaml` that `envgit init` writes.

/// Live keys: `version`, the default irreversible preset, and the usual regenerable
/// directories as snapshot excludes. Every other setting is shown as a commented example.
/// Convention the tests rely on: an example line is `# ` followed by `key:`, `- ` or
/// indentation; prose comments start with a capital letter or punctuation.
pub const INIT_TEMPLATE: &str = r#"# envgit.yaml: the policy for this project. Every envgit command reads it.
# Unknown keys are errors, and every error names the line and column.
# Commented lines like `# key: value` are examples: uncomment them to use them.

version: 1

# Variables let into the sandbox beside the safe defaults (PATH, LANG, TERM, ...).
# env:
#   pass: ["GH_HOST"]

# Hosts reachable from the sandbox; nothing else is. A name without a port allows 443 and 80.
# A glob `*.example.com` matches subdomains, not the bare domain.
# Loopback and private addresses need an explicit port, e.g. "127.0.0.1:5432".
# An entry may also be a map with options. `raw: true` lets raw TCP through, uninspected (a
# database; valid only on a loopback or private `host:port`); without it a connection is TLS
# or HTTP, judged per request. `websocket: true` lets WebSocket upgrades through.
# network:
#   allow: ["api.github.com:443", "registry.npmjs.org", "*.pythonhosted.org",
#           { host: "127.0.0.1:5432", raw: true }, { host: "chat.example.com", websocket: true }]
#   l7:                          # restrict a host further: requests not listed are denied
#     api.github.com: { methods: [GET, HEAD], paths: ["/repos/**"] }
#   passthrough: ["pypi.org"]    # tunnelled without TLS inspection, logged as uninspected

# Requests that no snapshot can undo. Rules are checked in order and the first match decides.
# A preset expands in place, each of its rules with action `deny` unless it says `action:`.
# A rule written above the preset therefore overrides it for what that rule matches.
# Actions: deny (refused, naming the rule), ask (held until a person answers; denied after
# `approvers.timeout` seconds), allow (let out, and the step is marked).
# A `net` rule matches host (any port unless `host:port`), method (one or a list), path glob
# (`*` within a segment, `**` across segments), query parameters, and later body matchers.
irreversible:
  # - net: { host: "api.github.com", method: POST, path: "/repos/*/*/issues" }
  #   action: ask
  #   id: github.open-issue
  - preset: default   # git push, npm publish, PyPI, crates.io, image pushes, GitHub/GitLab API writes

# Who may answer `ask`, and how long a request waits before it is denied.
# approvers:
#   terminal: true           # a prompt on envgit's own terminal, when no agent UI owns it
#   socket: true             # `envgit approve` / `envgit deny` from another terminal
#   mcp_elicitation: false   # the agent's MCP client asks you; never for irreversible rules
#   timeout: 120             # seconds

# Beyond the built-in masks (~/.ssh, ~/.aws, cloud and agent credentials, .env files, ...).
# filesystem:
#   deny_read: ["~/.config/some-tool", "**/*.pem"]
#   allow_write: ["~/.cache/pip"]   # the host's own pip then reads what steps wrote there
#   allow_shadowing: ["tsc"]        # a program steps may put ahead of the host's on your PATH

# Command-line prefixes refused or asked about before they run (an early, readable refusal).
# This is a courtesy: the gate is what actually stops a request.
# shell:
#   - deny: ["git push", "npm publish"]
#   - ask: ["docker run"]

# The snapshot taken after every step. Nothing is excluded unless listed here
# (gitignore-style patterns); delete an entry to capture that directory too.
snapshot:
  exclude: ["target/", "node_modules/", ".venv/", "__pycache__/"]
  # max_file_size: 100MiB   # larger files are recorded as markers, never silently skipped
  # budget: 20GiB           # gc keeps the store under this

# MCP servers started under `envgit mcp`, and which of their tools the agent may call
# (`server.tool` globs, each deny, ask or allow).
# mcp:
#   servers:
#     github: { command: "github-mcp-server", args: ["stdio"], env: { GITHUB_TOOLSETS: "repos" } }
#   tools:
#     "github.list_*": allow
#     "github.create_*": ask
"#;

#[cfg(test)]
mod tests {
    use super::INIT_TEMPLATE;
    use crate::{Action, IrreversibleEntry, Policy, Preset, SnapshotSection};

    #[test]
    fn template_has_exactly_the_live_values() {
        let p = Policy::parse("envgit.yaml", INIT_TEMPLATE).unwrap();
        let want = Policy {
            irreversible: vec![IrreversibleEntry::Preset {
                preset: Preset::Default,
                action: Action::Deny,
            }],
            snapshot: SnapshotSection {
                exclude: ["target/", "node_modules/", ".venv/", "__pycache__/"]
                    .map(String::from)
                    .to_vec(),
                ..SnapshotSection::default()
            },
            ..Policy::default()
        };
        assert_eq!(p, want);
    }

    /// `# key: ...`, `# - ...` and `#   ...` are examples; anything else is prose.
    fn uncomment(line: &str) -> String {
        let indent = line.len() - line.trim_start().len();
        let Some(rest) = line.trim_start().strip_prefix("# ") else {
            return line.to_owned();
        };
        let is_key = rest.split_once(':').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        });
        if rest.starts_with(' ') || rest.starts_with("- ") || is_key {
            format!("{}{rest}", &line[..indent])
        } else {
            line.to_owned()
        }
    }

    #[test]
    fn every_commented_example_is_valid() {
        let all: String = INIT_TEMPLATE.lines().map(|l| uncomment(l) + "\n").collect();
        let p = Policy::parse("envgit.yaml", &all).unwrap_or_else(|e| panic!("{e}\n{all}"));
        assert_eq!(p.env.pass, ["GH_HOST"]);
        assert_eq!(p.network.allow.len(), 5);
        assert!(p.network.allow_options["127.0.0.1:5432"].raw);
        assert!(p.network.allow_options["chat.example.com"].websocket);
        assert_eq!(p.network.l7["api.github.com"].methods, ["GET", "HEAD"]);
        assert_eq!(p.network.passthrough, ["pypi.org"]);
        assert_eq!(p.irreversible.len(), 2);
        assert!(matches!(
            &p.irreversible[0],
            IrreversibleEntry::Net { action: Action::Ask, id: Some(id), .. } if id == "github.open-issue"
        ));
        assert_eq!(p.approvers.timeout, 120);
        assert_eq!(p.filesystem.allow_write, ["~/.cache/pip"]);
        assert_eq!(p.filesystem.allow_shadowing, ["tsc"]);
        assert_eq!(p.shell.len(), 2);
        assert_eq!(p.snapshot.max_file_size, 100 << 20);
        assert_eq!(p.snapshot.budget, 20 << 30);
        assert_eq!(p.mcp.servers["github"].env["GITHUB_TOOLSETS"], "repos");
        assert_eq!(p.mcp.tools.len(), 2);
        // Uncommented defaults mean what the commented ones said.
        assert_eq!(p.approvers, crate::ApproversSection::default());
    }
}
