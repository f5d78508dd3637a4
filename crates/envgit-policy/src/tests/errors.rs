use crate::Policy;

/// (file text, line, column, fragments the message must contain)
const CASES: &[(&str, usize, usize, &[&str])] = &[
    // Missing or wrong version.
    ("", 1, 1, &["missing `version: 1`"]),
    ("# just a comment\n", 1, 1, &["missing `version: 1`"]),
    ("env: {}\n", 1, 1, &["missing `version: 1`"]),
    (
        "version: 2\n",
        1,
        10,
        &["unsupported version `2`", "only valid version is 1"],
    ),
    (
        "version: \"1\"\n",
        1,
        10,
        &["`version` must be the number 1, found a string"],
    ),
    // Unknown keys, at every level, name the key, where it is, and the valid keys.
    (
        "version: 1\nnetwrok: {}\n",
        2,
        1,
        &[
            "unknown key `netwrok` at the top level",
            "valid keys: version, env, network, irreversible",
        ],
    ),
    (
        "version: 1\nenv:\n  pass: []\nnetwork:\n  alow: [x.com]\n",
        5,
        3,
        &["unknown key `alow` in `network`; valid keys: allow, l7, passthrough"],
    ),
    (
        "version: 1\nnetwork:\n  l7:\n    a.com: { method: [GET] }\n",
        4,
        14,
        &["unknown key `method` in `network.l7.a.com`; valid keys: methods, paths"],
    ),
    (
        "version: 1\nirreversible:\n  - prest: default\n",
        3,
        5,
        &["unknown key `prest` in `irreversible[0]`; valid keys: preset, net, action, id"],
    ),
    (
        "version: 1\nirreversible:\n  - preset: default\n    id: x\n",
        4,
        5,
        &["unknown key `id` in `irreversible[0]`; valid keys: preset, action"],
    ),
    (
        "version: 1\nirreversible:\n  - net: { host: a.com, verb: POST }\n    action: ask\n",
        3,
        25,
        &[
            "unknown key `verb` in `irreversible[0].net`; valid keys: host, method, path, query, body",
        ],
    ),
    (
        "version: 1\napprovers:\n  email: true\n",
        3,
        3,
        &[
            "unknown key `email` in `approvers`; valid keys: terminal, socket, mcp_elicitation, timeout",
        ],
    ),
    (
        "version: 1\nshell:\n  - allow: [ls]\n",
        3,
        5,
        &["unknown key `allow` in `shell[0]`; valid keys: deny, ask"],
    ),
    (
        "version: 1\nsnapshot:\n  max_size: 1\n",
        3,
        3,
        &["valid keys: exclude, max_file_size, budget"],
    ),
    (
        "version: 1\nmcp:\n  servers:\n    gh: { cmd: x }\n",
        4,
        11,
        &["unknown key `cmd` in `mcp.servers.gh`; valid keys: command, args, env, url"],
    ),
    (
        "version: 1\nfilesystem:\n  deny: []\n",
        3,
        3,
        &["valid keys: deny_read, allow_write, allow_shadowing, preset"],
    ),
    // Enum values list the valid ones.
    (
        "version: 1\nirreversible:\n  - net: { host: a.com }\n    action: maybe\n",
        4,
        13,
        &["invalid action `maybe` in `irreversible[0].action`; valid actions: deny, ask, allow"],
    ),
    (
        "version: 1\nirreversible:\n  - preset: strict\n",
        3,
        13,
        &["invalid preset `strict`", "valid presets: default"],
    ),
    (
        "version: 1\nfilesystem: { preset: none }\n",
        2,
        23,
        &["valid presets: default"],
    ),
    (
        "version: 1\nmcp:\n  tools:\n    \"gh.*\": yes\n",
        4,
        13,
        &["invalid action `yes` in `mcp.tools.gh.*`; valid actions: deny, ask, allow"],
    ),
    // Missing required keys point at the mapping that lacks them.
    (
        "version: 1\nirreversible:\n  - net: { host: a.com }\n",
        3,
        5,
        &["`irreversible[0]` is missing `action`", "deny, ask, allow"],
    ),
    (
        "version: 1\nirreversible:\n  - net: { path: /x }\n    action: deny\n",
        3,
        10,
        &["missing `host`"],
    ),
    (
        "version: 1\nirreversible:\n  - action: deny\n",
        3,
        5,
        &["needs `preset: default` or `net:"],
    ),
    (
        "version: 1\nirreversible:\n  - preset: default\n    net: { host: a.com }\n",
        3,
        5,
        &["both `preset` and `net`"],
    ),
    (
        "version: 1\nmcp:\n  servers:\n    gh: { args: [] }\n",
        4,
        9,
        &["missing `command`"],
    ),
    (
        "version: 1\nmcp:\n  servers:\n    gh: { url: \"ftp://x\" }\n",
        4,
        16,
        &["must be an http:// or https:// URL with a host", "ftp://x"],
    ),
    (
        "version: 1\nmcp:\n  servers:\n    gh: { url: \"https://x/mcp\", command: c }\n",
        4,
        42,
        &["takes no command, args or env"],
    ),
    (
        "version: 1\nshell:\n  - {}\n",
        3,
        5,
        &["exactly one of `deny` or `ask`"],
    ),
    // Wrong types.
    (
        "version: 1\nenv: [GH_HOST]\n",
        2,
        6,
        &["`env` must be a mapping with keys pass, found a list"],
    ),
    (
        "version: 1\nenv:\n  pass: GH_HOST\n",
        3,
        9,
        &["`env.pass` must be a list of strings, found a string"],
    ),
    (
        "version: 1\nnetwork:\n  allow: [a.com, 443]\n",
        3,
        18,
        &[
            "`network.allow[1]` must be a host string or a mapping { host, raw, websocket }, found a number",
        ],
    ),
    (
        "version: 1\nirreversible: {preset: default}\n",
        2,
        15,
        &["`irreversible` must be a list of rules"],
    ),
    (
        "version: 1\nshell: \"git push\"\n",
        2,
        8,
        &["`shell` must be a list of rules"],
    ),
    (
        "version: 1\napprovers: { terminal: 1 }\n",
        2,
        24,
        &["`approvers.terminal` must be true or false, found a number"],
    ),
    (
        "version: 1\napprovers: { timeout: -5 }\n",
        2,
        23,
        &["whole number"],
    ),
    ("version: 1\n- a\n", 2, 3, &["invalid YAML"]),
    ("- version\n", 1, 1, &["the top level must be a mapping"]),
    // Values that are strings but not valid.
    (
        "version: 1\nnetwork: { allow: [\"https://a.com\"] }\n",
        2,
        20,
        &["invalid host `https://a.com`", "no scheme"],
    ),
    (
        "version: 1\nnetwork: { allow: [\"a.com:99999\"] }\n",
        2,
        20,
        &["port must be a number from 1 to 65535"],
    ),
    (
        "version: 1\nnetwork: { allow: [\"::1\"] }\n",
        2,
        20,
        &["IPv6 address in brackets"],
    ),
    (
        "version: 1\nnetwork: { allow: [\"a.*.com\"] }\n",
        2,
        20,
        &["only allowed as the first label"],
    ),
    (
        "version: 1\nirreversible:\n  - net: { host: a.com, path: repos/x }\n    action: deny\n",
        3,
        31,
        &["invalid path `repos/x`", "starts with `/`"],
    ),
    (
        "version: 1\nirreversible:\n  - net: { host: a.com, method: [GET, \"PO ST\"] }\n    action: deny\n",
        3,
        39,
        &["unknown method `PO ST`", "known methods: GET, HEAD"],
    ),
    (
        "version: 1\nenv: { pass: [\"GH-HOST\"] }\n",
        2,
        15,
        &["invalid variable name `GH-HOST`"],
    ),
    // Sizes.
    (
        "version: 1\nsnapshot:\n  budget: 20 GB!\n",
        3,
        11,
        &["`snapshot.budget`: invalid size `20 GB!`", "512MiB"],
    ),
    (
        "version: 1\nsnapshot:\n  max_file_size: 1.5\n",
        3,
        18,
        &["not a whole number of bytes"],
    ),
    (
        "version: 1\nsnapshot:\n  max_file_size: [1]\n",
        3,
        18,
        &["must be a size like"],
    ),
    // YAML-level problems keep the parser's position.
    (
        "version: 1\nirreversible:\n  - net: { host: a.com, body: [[[[[[[[[[[[[[1]]]]]]]]]]]]]] }\n    action: deny\n",
        3,
        43,
        &["nested too deeply", "at most 16 levels"],
    ),
    (
        "version: 1\n---\nversion: 1\n",
        3,
        1,
        &["invalid YAML", "single YAML document"],
    ),
    (
        "version: 1\nversion: 1\n",
        2,
        1,
        &["invalid YAML", "duplicate"],
    ),
    ("version: 1\nenv:\n\tpass: []\n", 3, 2, &["invalid YAML"]),
    ("version: 1\nenv: { pass: [\n", 2, 14, &["invalid YAML"]),
];

#[test]
fn each_error_has_position_and_valid_choices() {
    let mut failures = Vec::new();
    for (text, line, column, fragments) in CASES {
        let err = match Policy::parse("envgit.yaml", text) {
            Ok(p) => {
                failures.push(format!("{text:?}: parsed as {p:?}"));
                continue;
            }
            Err(e) => e,
        };
        let shown = err.to_string();
        let position_ok = (err.line, err.column) == (*line, *column);
        let fragments_ok = fragments.iter().all(|f| err.message.contains(f));
        if !position_ok || !fragments_ok || !shown.starts_with("envgit.yaml:") {
            failures.push(format!(
                "{text:?}\n  want {line}:{column} {fragments:?}\n  got  {shown}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn display_is_file_line_col_message() {
    let err = Policy::parse("/p/envgit.yaml", "version: 1\nnetwork:\n  alow: []\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/p/envgit.yaml:3:3: unknown key `alow` in `network`; valid keys: allow, l7, passthrough"
    );
    let _: &dyn std::error::Error = &err;
}
