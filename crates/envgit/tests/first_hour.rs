//! The first hour of a real user: the README's own `fork N ../dir`, a broken `envgit.yaml`
//! that must not lock anyone out of the history, and rewinds and forks that say what they did
//! not restore.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::symlink;

use support::Env;

/// A project with two steps: init (1) and a record (2).
fn two_steps() -> Env {
    let env = Env::new();
    env.write("f.txt", "one");
    env.init();
    env.write("f.txt", "two");
    env.record();
    env
}

#[test]
fn fork_into_a_relative_sibling_works() {
    let env = two_steps();
    let r = env.envgit(&["fork", "2", "../x"]);
    assert_eq!(r.code, 0, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let x = env.tmp.path().join("x");
    assert_eq!(std::fs::read_to_string(x.join("f.txt")).unwrap(), "two");
    env.envgit_in(&x, &["log", "--json"]).ok();
}

#[test]
fn a_symlink_outside_pointing_into_the_project_is_refused() {
    let env = two_steps();
    std::fs::create_dir_all(env.path("sub")).unwrap();
    let link = env.tmp.path().join("link");
    symlink(env.path("sub"), &link).unwrap();
    let target = link.join("new");
    let r = env.envgit(&["fork", "2", target.to_str().unwrap()]);
    assert_eq!(r.code, 2, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("inside the project"), "{}", r.stderr);
    assert!(
        !env.path("sub/new").exists(),
        "the fork landed inside the project"
    );
    // The link itself, an empty directory in the project.
    let r = env.envgit(&["fork", "2", link.to_str().unwrap()]);
    assert_eq!(r.code, 2, "stderr:\n{}", r.stderr);
    assert!(r.stderr.contains("inside the project"), "{}", r.stderr);
    assert!(!env.path("sub/f.txt").exists());
}

#[test]
fn a_file_target_is_not_a_directory() {
    let env = two_steps();
    let file = env.tmp.path().join("afile");
    std::fs::write(&file, "x").unwrap();
    let r = env.envgit(&["fork", "2", file.to_str().unwrap()]);
    assert_eq!(r.code, 2, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("not a directory"), "{}", r.stderr);
    assert!(r.stderr.contains("afile"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    // Below a file, too.
    let below = file.join("sub");
    let r = env.envgit(&["fork", "2", below.to_str().unwrap()]);
    assert_eq!(r.code, 2, "stderr:\n{}", r.stderr);
    assert!(r.stderr.contains("not a directory"), "{}", r.stderr);
}

#[test]
fn a_target_in_the_store_is_refused() {
    let env = two_steps();
    let inside = env.home.join("forkhere");
    let r = env.envgit(&["fork", "2", inside.to_str().unwrap()]);
    assert_eq!(r.code, 2, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("store"), "{}", r.stderr);
    assert!(!inside.exists());
    // Through `..` from a path outside it.
    let sneaky = env.tmp.path().join("elsewhere/../home/forkhere2");
    let r = env.envgit(&["fork", "2", sneaky.to_str().unwrap()]);
    assert_eq!(r.code, 2, "stderr:\n{}", r.stderr);
    assert!(!env.home.join("forkhere2").exists());
}

#[test]
fn a_broken_policy_never_locks_you_out_of_the_history() {
    let env = two_steps();
    let good = env.read("envgit.yaml");
    env.write("envgit.yaml", "snapshot:\n  exclude: [unclosed\n");
    let r = env.envgit(&["log", "--json"]);
    assert_eq!(r.code, 0, "log:\n{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.json().as_array().unwrap().len(), 2);
    assert!(r.stderr.contains("envgit.yaml:"), "{}", r.stderr);
    assert_eq!(
        r.stderr.lines().count(),
        1,
        "one warning line: {}",
        r.stderr
    );
    for args in [
        &["show", "1"][..],
        &["diff", "2"],
        &["diff", "1"],
        &["fsck"],
    ] {
        let r = env.envgit(args);
        assert_eq!(r.code, 0, "{args:?}:\n{}\n{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("broken"), "{args:?}: {}", r.stderr);
    }
    // Without --restore-policy a rewind refuses and says what to do.
    let r = env.envgit(&["rewind", "1"]);
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("--restore-policy"), "{}", r.stderr);
    assert_eq!(
        env.read("f.txt"),
        "two",
        "a refused rewind changed the tree"
    );
    // With it, the policy of step 1 comes back and parses.
    let r = env.envgit(&["rewind", "1", "--restore-policy"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(env.read("envgit.yaml"), good);
    assert_eq!(env.read("f.txt"), "one");
    let r = env.envgit(&["log"]).ok();
    assert!(!r.stderr.contains("broken"), "{}", r.stderr);
    env.record();
}
