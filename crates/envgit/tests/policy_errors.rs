//! A policy typo never weakens it silently: a bad glob stops `envgit run` with its position,
//! while the history stays readable. And root-level protected patterns (`*.code-workspace`)
//! plus `.devcontainer.json` written by a step are removed after it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::Env;

fn project() -> Env {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.envgit(&["init"]).ok();
    env
}

#[test]
fn a_bad_glob_stops_run_with_its_position_and_log_still_works() {
    let env = project();
    let out = env.envgit(&["run", "true"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    env.write(
        "envgit.yaml",
        "version: 1\nfilesystem:\n  deny_read: [\"~/.ssh/[id\"]\n",
    );
    let out = env.envgit(&["run", "true"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("envgit.yaml:3:15: invalid glob `~/.ssh/[id` in `filesystem.deny_read[0]`"),
        "{}",
        out.stderr
    );
    let log = env.envgit(&["log"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(log.stdout.contains("true"), "{}", log.stdout);
}

#[test]
fn editor_files_created_at_the_root_are_removed_and_flagged() {
    let env = project();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "echo '{\"tasks\":1}' > evil.code-workspace && \
         echo '{\"initializeCommand\":\"x\"}' > .devcontainer.json && echo planted",
    ]);
    let out = out.ran_to("planted");
    assert!(!env.path("evil.code-workspace").exists(), "{}", out.stderr);
    assert!(!env.path(".devcontainer.json").exists(), "{}", out.stderr);
    assert!(out.stderr.contains("evil.code-workspace"), "{}", out.stderr);
    let step = &env.log_json()[0];
    assert!(
        step["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "protected_restored"),
        "{step}"
    );
}
