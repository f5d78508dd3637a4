//! Reading the history: steps named relative to the newest (`@`, `@-`, `@~N`), `-- PATH`
//! filters, project files before `.git` on big steps, and the pager on a terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::Env;

/// Steps 1 (import, a=1), 2 (a=2), 3 (a=3, b=1).
fn three_steps() -> Env {
    let env = Env::new();
    env.write("a.txt", "1\n");
    env.init();
    env.write("a.txt", "2\n");
    env.record();
    env.write("a.txt", "3\n");
    env.write("src/b.txt", "1\n");
    env.record();
    env
}

#[test]
fn at_names_the_newest_step_and_its_parents() {
    let env = three_steps();
    let num = |r: &str| env.envgit(&["show", r, "--json"]).ok().json()["number"].as_u64();
    assert_eq!(num("@"), Some(3));
    assert_eq!(num("@-"), Some(2));
    assert_eq!(num("@--"), Some(1));
    assert_eq!(num("@~2"), Some(1));
    assert_eq!(num("2"), Some(2));
    let d = env.envgit(&["diff", "@~2", "@", "--stat"]).ok().stdout;
    assert!(d.contains("M a.txt") && d.contains("A src/b.txt"), "{d}");
    env.envgit(&["rewind", "@-"]).ok();
    assert_eq!(env.read("a.txt"), "2\n");
    // The rewind is step 4, whose parent is step 3.
    env.envgit(&["rewind", "@-"]).ok();
    assert_eq!(env.read("a.txt"), "3\n");
}

#[test]
fn too_far_back_says_how_many_steps_there_are() {
    let env = three_steps();
    let r = env.envgit(&["show", "@~99"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("@~99: there are only 3 steps"),
        "{}",
        r.stderr
    );
    let r = env.envgit(&["rewind", "@x"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`@x` is not a step"), "{}", r.stderr);
}

#[test]
fn path_filters_are_relative_to_the_current_directory() {
    let env = three_steps();
    let d = env
        .envgit(&["diff", "@", "--stat", "--", "src"])
        .ok()
        .stdout;
    assert_eq!(d, "A src/b.txt\n");
    let src = env.path("src");
    let d = env
        .envgit_in(&src, &["diff", "@", "--stat", "--", "../a.txt"])
        .ok()
        .stdout;
    assert_eq!(d, "M a.txt\n");
    let s = env
        .envgit_in(&src, &["show", "@", "--json", "--", "b.txt"])
        .ok()
        .json();
    let paths: Vec<&str> = s["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["src/b.txt"]);
}

#[test]
fn a_big_git_step_still_names_its_project_files_first() {
    let env = Env::new();
    env.sh("git init -q . && mkdir many && for i in $(seq 1 300); do echo $i > many/f$i; done")
        .ok();
    env.init();
    // One step: 300 new objects under .git, and one project file.
    env.sh("git add many && echo z > zz.txt").ok();
    env.record();
    let log = env.envgit(&["log", "-n", "1"]).ok().stdout;
    assert!(log.contains("+zz.txt"), "{log}");
    let step = &env.log_json()[0];
    assert_eq!(step["changes_truncated"], true);
    assert_eq!(step["changes"][0]["path"], "zz.txt", "{step}");
    let kept = step["changes"].as_array().unwrap().len() as u64;
    let total = step["changes_total"]["added"].as_u64().unwrap()
        + step["changes_total"]["modified"].as_u64().unwrap()
        + step["changes_total"]["deleted"].as_u64().unwrap();
    assert_eq!(step["changes_omitted"].as_u64(), Some(total - kept));
    let diff = env.envgit(&["diff", "@", "--stat"]).ok().stdout;
    assert!(diff.starts_with("A zz.txt\n"), "{diff}");
}

/// `envgit ARGS` on a real pty with PAGER a script that records its call.
fn on_pty(env: &Env, args: &[&str]) -> (String, bool) {
    let mark = env.tmp.path().join("pager-called");
    let _ = std::fs::remove_file(&mark);
    let pager = format!("touch {} && cat", mark.display());
    let out = env
        .on_terminal("never-asked", "", args)
        .env_remove("ENVGIT_PAGER")
        .env("PAGER", pager)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        mark.exists(),
    )
}

#[test]
fn log_on_a_terminal_goes_through_the_pager_unless_told_not_to() {
    let env = three_steps();
    let (shown, called) = on_pty(&env, &["log"]);
    assert!(called, "{shown}");
    assert!(
        shown.contains("import") && shown.contains("EXIT=0"),
        "{shown}"
    );
    let (shown, called) = on_pty(&env, &["--no-pager", "log"]);
    assert!(!called, "{shown}");
    assert!(shown.contains("import"), "{shown}");
}
