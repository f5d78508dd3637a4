//! A typo in a glob or a method is a load error at its `line:col`, never a rule that silently
//! matches nothing.

use crate::Policy;

fn err(text: &str) -> String {
    match Policy::parse("envgit.yaml", text) {
        Ok(p) => panic!("{text:?} parsed as {p:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_deny_read_glob() {
    assert_eq!(
        err("version: 1\nfilesystem:\n  deny_read: [\"~/.ssh/[id\"]\n"),
        "envgit.yaml:3:15: invalid glob `~/.ssh/[id` in `filesystem.deny_read[0]`: unclosed character class; missing ']'; close the `[` or write `[[]` for a literal `[`"
    );
}

#[test]
fn bad_allow_write_glob() {
    assert_eq!(
        err("version: 1\nfilesystem:\n  allow_write:\n    - /tmp/ok\n    - \"/tmp/{a,b\"\n"),
        "envgit.yaml:5:7: invalid glob `/tmp/{a,b` in `filesystem.allow_write[1]`: unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?); close the `{` or write `[{]` for a literal `{`"
    );
}

#[test]
fn bad_snapshot_exclude_glob() {
    assert_eq!(
        err("version: 1\nsnapshot:\n  exclude: [node_modules/, \"!build/[x\"]\n"),
        "envgit.yaml:3:28: invalid glob `!build/[x` in `snapshot.exclude[1]`: unclosed character class; missing ']'; close the `[` or write `[[]` for a literal `[`"
    );
}

#[test]
fn bad_rule_path_glob() {
    assert_eq!(
        err(
            "version: 1\nirreversible:\n  - net: { host: a.com, method: POST, path: \"/repos/{a,b}/x\" }\n    action: deny\n"
        ),
        "envgit.yaml:3:45: invalid glob `/repos/{a,b}/x` in `irreversible[0].net.path`: `{` is not glob syntax here (only `*` within a segment and `**` across segments are); write one rule per path"
    );
}

#[test]
fn bad_l7_path_glob() {
    assert_eq!(
        err("version: 1\nnetwork:\n  l7:\n    a.com: { paths: [\"/x/?\"] }\n"),
        "envgit.yaml:4:22: invalid glob `/x/?` in `network.l7.a.com.paths`: `?` is not glob syntax here (only `*` within a segment and `**` across segments are); write one rule per path"
    );
}

#[test]
fn bad_mcp_tool_glob() {
    assert_eq!(
        err("version: 1\nmcp:\n  tools:\n    \"github.[cd]*\": deny\n"),
        "envgit.yaml:4:5: invalid glob `github.[cd]*` in `mcp.tools`: `[` is not glob syntax here (only `*`, matching any run of characters, is); write one entry per tool name"
    );
}

#[test]
fn bad_host_glob() {
    let e = err("version: 1\nnetwork:\n  allow: [\"a.*.com\"]\n");
    assert!(
        e.starts_with("envgit.yaml:3:11: invalid host `a.*.com`"),
        "{e}"
    );
}

#[test]
fn unknown_method_lists_the_known_ones() {
    assert_eq!(
        err(
            "version: 1\nirreversible:\n  - net: { host: a.com, method: [GET, PSOT] }\n    action: deny\n"
        ),
        "envgit.yaml:3:39: unknown method `PSOT` in `irreversible[0].net.method`; known methods: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, CONNECT, TRACE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK"
    );
    assert!(
        Policy::parse(
            "envgit.yaml",
            "version: 1\nnetwork:\n  l7:\n    a.com: { methods: [get, propfind] }\n"
        )
        .is_ok()
    );
}

#[test]
fn good_globs_still_load() {
    Policy::parse(
        "envgit.yaml",
        "version: 1\nfilesystem:\n  deny_read: [\"~/.aws/**\", \"~/*.pem\"]\nsnapshot:\n  exclude: [node_modules/, \"/target\", \"!keep.log\", \"*.log\"]\nmcp:\n  tools:\n    \"github.*\": ask\n",
    )
    .unwrap();
}

#[test]
fn a_shadowing_allowance_names_programs_not_paths() {
    assert_eq!(
        err("version: 1\nfilesystem:\n  allow_shadowing: [tsc, node_modules/.bin/tsc]\n"),
        "envgit.yaml:3:26: `node_modules/.bin/tsc` in `filesystem.allow_shadowing[1]` is not a file name; write a program's name as you type it (`tsc`), without a directory"
    );
    let p = crate::Policy::parse(
        "envgit.yaml",
        "version: 1\nfilesystem:\n  allow_shadowing: [tsc]\n",
    )
    .unwrap();
    assert_eq!(p.filesystem.allow_shadowing, ["tsc"]);
}
