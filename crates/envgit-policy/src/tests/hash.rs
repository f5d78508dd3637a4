use super::design_example::EXAMPLE_POLICY;
use crate::Policy;

fn hash(text: &str) -> String {
    Policy::parse("envgit.yaml", text).unwrap().hash()
}

#[test]
fn hash_ignores_comments_layout_key_order_and_spelled_out_defaults() {
    let base = hash(EXAMPLE_POLICY);
    assert_eq!(base.len(), 64);
    assert!(base.chars().all(|c| c.is_ascii_hexdigit()));

    let reordered = r#"
# the same policy, written differently
mcp:
  tools: { "github.create_*": ask, "github.list_*": allow }
  servers:
    github:
      args: [stdio]
      command: github-mcp-server
snapshot: { budget: 20GiB, max_file_size: 536870912, exclude: ["node_modules/.cache/**"] }
version: 1
shell: [ { deny: [git push, npm publish] } ]
filesystem: { deny_read: [~/.ssh, ~/.aws, "**/.env"] }
irreversible:
  - { preset: default, action: deny }
  - action: ask
    net: { path: "/repos/*/*/issues", method: [post], host: API.github.com }
network:
  l7: { api.github.com: { methods: [GET] } }
  allow: [api.github.com:443, registry.npmjs.org]
env: { pass: [GH_HOST] }
approvers: { terminal: true, socket: true, mcp_elicitation: false, timeout: 120 }
"#;
    assert_eq!(hash(reordered), base);
}

#[test]
fn hash_changes_with_meaning() {
    let base = hash(EXAMPLE_POLICY);
    for (from, to) in [
        ("action: ask", "action: deny"),
        ("methods: [GET]", "methods: [GET, HEAD]"),
        ("max_file_size: 512MiB", "max_file_size: 512MB"),
        ("\"GH_HOST\"", "\"GH_TOKEN\""),
        ("\"github.list_*\": allow", "\"github.list_*\": ask"),
        ("- preset: default ", "- preset: default\n    action: ask "),
    ] {
        assert!(EXAMPLE_POLICY.contains(from), "{from}");
        let changed = EXAMPLE_POLICY.replace(from, to);
        assert_ne!(hash(&changed), base, "{from} -> {to}");
    }
    // Rule order is meaning: the first match decides.
    let a = "version: 1\nirreversible:\n  - preset: default\n  - net: { host: a.com }\n    action: allow\n";
    let b = "version: 1\nirreversible:\n  - net: { host: a.com }\n    action: allow\n  - preset: default\n";
    assert_ne!(hash(a), hash(b));
    assert_eq!(Policy::default().hash(), hash("version: 1"));
}
