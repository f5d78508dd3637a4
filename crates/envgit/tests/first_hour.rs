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
    // A fork too: it needs `--restore-policy` to take step 1's policy instead.
    let r = env.envgit(&["fork", "1", "../nofork"]);
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("--restore-policy"), "{}", r.stderr);
    assert!(!env.tmp.path().join("nofork").exists());
    let r = env.envgit(&["fork", "1", "../forked", "--restore-policy"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let forked = env.tmp.path().join("forked");
    assert_eq!(
        std::fs::read_to_string(forked.join("envgit.yaml")).unwrap(),
        good
    );
    env.envgit_in(&forked, &["record"]).ok();
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

/// node_modules (excluded by init's template) and big.bin (over a 1 KiB limit).
fn with_exclude_and_marker() -> Env {
    let env = Env::new();
    env.write("small.txt", "s");
    env.write("big.bin", &"x".repeat(4096));
    env.write("node_modules/pkg/index.js", "module");
    env.init();
    let yaml = env
        .read("envgit.yaml")
        .replace("  # max_file_size: 100MiB", "  max_file_size: 1KiB");
    env.write("envgit.yaml", &yaml);
    env.record(); // 2: big.bin is a marker
    env
}

fn not_restored(json: &serde_json::Value) -> Vec<String> {
    json["not_restored"]
        .as_array()
        .unwrap_or_else(|| panic!("no not_restored list: {json}"))
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn fork_names_what_it_did_not_restore() {
    let env = with_exclude_and_marker();
    let r = env.envgit(&["fork", "2", "../forked"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("envgit: node_modules/ is excluded and was not restored: run npm install"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("envgit: big.bin (over snapshot.max_file_size) was not restored"),
        "{}",
        r.stderr
    );
    let r = env.envgit(&["fork", "2", "../forked2", "--json"]).ok();
    let j = r.json();
    assert_eq!(j["kind"], "fork", "the step is still there: {j}");
    let mut paths = not_restored(&j);
    paths.sort();
    assert_eq!(paths, ["big.bin", "node_modules"]);
}

#[test]
fn rewind_names_what_it_did_not_restore() {
    let env = with_exclude_and_marker();
    std::fs::remove_dir_all(env.path("node_modules")).unwrap();
    env.write("big.bin", &"y".repeat(5000));
    env.write("small.txt", "changed");
    env.record(); // 3
    let r = env.envgit(&["rewind", "2"]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(env.read("small.txt"), "s");
    assert!(
        r.stderr
            .contains("envgit: node_modules/ is excluded and was not restored: run npm install"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("envgit: big.bin (over snapshot.max_file_size) was not restored"),
        "{}",
        r.stderr
    );
    env.write("small.txt", "again");
    env.record();
    let r = env.envgit(&["rewind", "2", "--json"]).ok();
    let j = r.json();
    let mut paths = not_restored(&j);
    paths.sort();
    assert_eq!(paths, ["big.bin", "node_modules"], "{}", r.stdout);
    let entry = j["not_restored"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "node_modules")
        .unwrap();
    assert_eq!(entry["hint"], "run npm install", "{entry}");
}

/// Changed paths of step `n`, from `show --json`.
fn changed_paths(env: &Env, n: u64) -> Vec<String> {
    let r = env.envgit(&["show", &n.to_string(), "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_hand_edit_between_steps_is_its_own_step_and_survives_rewinding_the_next() {
    let env = two_steps();
    // The user edits a file by hand, then the agent runs a command.
    env.write("README.md", "my own words");
    let r = env.envgit(&["run", "--", "sh", "-c", "echo agent > agent.txt"]);
    assert_eq!(r.code, 0, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("your edits since step 2"), "{}", r.stderr);
    // Step 3 holds the hand edit, flagged; step 4 only what the command wrote.
    let log = env.envgit(&["log", "--json"]).ok();
    let steps: serde_json::Value = serde_json::from_str(&log.stdout).unwrap();
    let steps = steps.as_array().unwrap();
    let by_number = |n: u64| {
        steps
            .iter()
            .find(|s| s["number"] == n)
            .unwrap_or_else(|| panic!("no step {n} in {steps:?}"))
    };
    assert_eq!(by_number(3)["kind"], "record");
    assert!(
        by_number(3)["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "outside"),
        "{:?}",
        by_number(3)
    );
    assert_eq!(changed_paths(&env, 3), vec!["README.md".to_owned()]);
    assert_eq!(changed_paths(&env, 4), vec!["agent.txt".to_owned()]);
    // Rewinding the agent's step keeps the user's edit.
    env.envgit(&["rewind", "3"]).ok();
    assert_eq!(
        std::fs::read_to_string(env.path("README.md")).unwrap(),
        "my own words"
    );
    assert!(!env.path("agent.txt").exists());
    // No edit since: the next run records no outside step.
    let before = steps.len();
    let r = env.envgit(&["run", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("your edits"), "{}", r.stderr);
    let log = env.envgit(&["log", "--json"]).ok();
    let after: serde_json::Value = serde_json::from_str(&log.stdout).unwrap();
    // rewind (1) + run (1)
    assert_eq!(after.as_array().unwrap().len(), before + 2);
}

/// `envgit du` says where the history went, and where a file a tool wrote under `~` inside
/// the sandbox (npm's logs, say) is on the host.
#[test]
fn du_shows_the_store_and_where_the_sandboxs_home_writes_went() {
    let env = Env::new();
    env.write("a.txt", "a\n");
    env.init();
    let r = env.envgit(&[
        "run",
        "sh",
        "-c",
        "mkdir -p ~/.npm/_logs && head -c 20000 /dev/urandom > ~/.npm/_logs/debug.log && echo wrote",
    ]);
    assert!(r.stdout.contains("wrote"), "{}{}", r.stdout, r.stderr);
    let text = env.envgit(&["du"]).ok().stdout;
    let usage = env.envgit(&["du", "--json"]).ok().json();
    let parts = usage[0]["parts"].as_array().unwrap();
    let part = |name: &str| parts.iter().find(|p| p["name"] == name).unwrap().clone();
    assert!(part("packs")["bytes"].as_u64().unwrap() > 0, "{usage:#}");
    let home = part("home");
    assert!(home["bytes"].as_u64().unwrap() >= 20000, "{usage:#}");
    let log = std::path::Path::new(home["path"].as_str().unwrap()).join(".npm/_logs/debug.log");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 20000);
    assert!(
        text.contains(&log.parent().unwrap().display().to_string()),
        "{text}"
    );
}
