use crate::{Action, GraphqlOperation, IrreversibleEntry, Policy, Preset, ShellAction};

/// A policy that uses every section of the schema.
pub(super) const EXAMPLE_POLICY: &str = r#"version: 1
env:
  pass: ["GH_HOST"]             # variables let into the sandbox beside the safe defaults
network:
  allow: ["api.github.com:443", "registry.npmjs.org"]
  l7:
    api.github.com: { methods: [GET] }
irreversible:
  - preset: default      # git push, npm publish, PyPI, crates.io, image pushes, GitHub/GitLab API writes
  - net: { host: "api.github.com", method: POST, path: "/repos/*/*/issues" }
    action: ask
filesystem:
  deny_read: ["~/.ssh", "~/.aws", "**/.env"]
shell:
  - deny: ["git push", "npm publish"]   # a courtesy: command-line match, gives an early readable refusal
snapshot:
  exclude: ["node_modules/.cache/**"]   # nothing is excluded unless listed
  max_file_size: 512MiB                 # larger files are recorded as markers
  budget: 20GiB                         # gc keeps the store under this
mcp:
  servers:
    github: { command: "github-mcp-server", args: ["stdio"] }
  tools:
    "github.list_*": allow
    "github.create_*": ask
"#;

#[test]
fn design_example_parses() {
    let p = Policy::parse("envgit.yaml", EXAMPLE_POLICY).unwrap();
    assert_eq!(p.version, 1);
    assert_eq!(p.env.pass, ["GH_HOST"]);
    assert_eq!(
        p.network.allow,
        ["api.github.com:443", "registry.npmjs.org"]
    );
    assert_eq!(p.network.l7["api.github.com"].methods, ["GET"]);
    assert!(p.network.l7["api.github.com"].paths.is_empty());
    assert_eq!(p.irreversible.len(), 2);
    assert_eq!(
        p.irreversible[0],
        IrreversibleEntry::Preset {
            preset: Preset::Default,
            action: Action::Deny
        }
    );
    let IrreversibleEntry::Net { rule, action, id } = &p.irreversible[1] else {
        panic!("{:?}", p.irreversible[1]);
    };
    assert_eq!(rule.host, "api.github.com");
    assert_eq!(rule.methods, ["POST"]);
    assert_eq!(rule.path.as_deref(), Some("/repos/*/*/issues"));
    assert_eq!(*action, Action::Ask);
    assert_eq!(*id, None);
    assert_eq!(p.filesystem.deny_read, ["~/.ssh", "~/.aws", "**/.env"]);
    assert_eq!(p.shell.len(), 1);
    assert_eq!(p.shell[0].action, ShellAction::Deny);
    assert_eq!(p.shell[0].prefixes, ["git push", "npm publish"]);
    assert_eq!(p.snapshot.exclude, ["node_modules/.cache/**"]);
    assert_eq!(p.snapshot.max_file_size, 512 << 20);
    assert_eq!(p.snapshot.budget, 20 << 30);
    assert_eq!(p.mcp.servers["github"].command, "github-mcp-server");
    assert_eq!(p.mcp.servers["github"].args, ["stdio"]);
    assert_eq!(p.mcp.tools["github.list_*"], Action::Allow);
    assert_eq!(p.mcp.tools["github.create_*"], Action::Ask);
    // Sections left out keep their defaults.
    assert_eq!(p.approvers, crate::ApproversSection::default());
}

#[test]
fn only_version_means_default() {
    for text in ["version: 1\n", "version: 1\nenv:\nnetwork: {}\nsnapshot:\n"] {
        assert_eq!(
            Policy::parse("envgit.yaml", text).unwrap(),
            Policy::default(),
            "{text}"
        );
    }
}

#[test]
fn defaults() {
    let p = Policy::default();
    assert_eq!(p.snapshot.max_file_size, 100 << 20);
    assert_eq!(p.snapshot.budget, 20 << 30);
    assert!(p.snapshot.exclude.is_empty());
    assert_eq!(
        p.irreversible,
        [IrreversibleEntry::Preset {
            preset: Preset::Default,
            action: Action::Deny
        }]
    );
    assert!(p.approvers.terminal && p.approvers.socket && !p.approvers.mcp_elicitation);
}

#[test]
fn explicit_empty_irreversible_switches_the_preset_off() {
    let p = Policy::parse("envgit.yaml", "version: 1\nirreversible: []\n").unwrap();
    assert!(p.irreversible.is_empty());
}

#[test]
fn value_forms() {
    let text = r#"version: 1
network:
  allow: ["API.GitHub.com", "[::1]:5432", "127.0.0.1:8080", "*.pythonhosted.org"]
  l7:
    uploads.example.com: { methods: post, paths: ["/**/upload"] }
irreversible:
  - net:
      host: example.com:8443
      method: [put, DELETE]
      query: { force: true, per_page: 100 }
      body: { graphql_operation: mutation, json_field: { draft: true, n: 2.5 } }
    action: allow
    id: example.write
  - preset: default
    action: ask
approvers: { terminal: false, timeout: 30 }
shell:
  - ask: ["docker run"]
snapshot: { max_file_size: 4096, budget: "1.5GiB" }
mcp:
  servers:
    s: { command: srv, env: { PORT: 8080 } }
    remote: { url: "https://mcp.example.com/mcp" }
"#;
    let p = Policy::parse("envgit.yaml", text).unwrap();
    assert_eq!(p.network.allow[0], "api.github.com");
    assert_eq!(p.network.l7["uploads.example.com"].methods, ["POST"]);
    let IrreversibleEntry::Net { rule, action, id } = &p.irreversible[0] else {
        panic!();
    };
    assert_eq!(rule.methods, ["PUT", "DELETE"]);
    assert_eq!(rule.query["force"], "true");
    assert_eq!(rule.query["per_page"], "100");
    let body = rule.body.as_ref().unwrap();
    assert_eq!(body.graphql_operation, Some(GraphqlOperation::Mutation));
    assert_eq!(body.json_field["draft"], "true");
    assert_eq!(body.json_field["n"], "2.5");
    assert_eq!(
        (*action, id.as_deref()),
        (Action::Allow, Some("example.write"))
    );
    assert_eq!(
        p.irreversible[1],
        IrreversibleEntry::Preset {
            preset: Preset::Default,
            action: Action::Ask
        }
    );
    assert!(!p.approvers.terminal && p.approvers.socket);
    assert_eq!(p.approvers.timeout, 30);
    assert_eq!(p.shell[0].action, ShellAction::Ask);
    assert_eq!(p.snapshot.max_file_size, 4096);
    assert_eq!(p.snapshot.budget, 3 << 29);
    assert_eq!(p.mcp.servers["s"].env["PORT"], "8080");
    assert_eq!(p.mcp.servers["s"].url, None);
    let remote = &p.mcp.servers["remote"];
    assert_eq!(remote.url.as_deref(), Some("https://mcp.example.com/mcp"));
    assert_eq!(remote.describe(), "https://mcp.example.com/mcp");
}
