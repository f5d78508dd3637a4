//! The history commands on real projects with real git: init, record, log, show, diff, rewind,
//! fork, and what they must refuse.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::{PermissionsExt, symlink};

use support::Env;

fn git_project() -> Env {
    let env = Env::new();
    env.sh("git init -q . && echo one > a.txt && git add . && git commit -qm first && echo 'console.log(1)' > greet.js && git add . && git commit -qm 'add greet'")
        .ok();
    env
}

#[test]
fn seed_scenario_rewind_brings_back_a_destroyed_commit() {
    let env = git_project();
    env.init();
    let before = env.sh("git log --oneline").ok().stdout;
    let step = env.record();
    env.sh("git reset -q --hard HEAD~1 && git reflog expire --expire=now --all && git gc -q --prune=now")
        .ok();
    assert!(!env.path("greet.js").exists());
    assert!(
        !env.sh("git log --oneline")
            .ok()
            .stdout
            .contains("add greet")
    );
    env.record();
    let r = env.envgit(&["rewind", &step.to_string()]).ok();
    assert_eq!(
        r.stdout.trim(),
        format!("rewound to step {step} (1 step(s) undone)")
    );
    assert_eq!(env.sh("git log --oneline").ok().stdout, before);
    assert_eq!(env.read("greet.js"), "console.log(1)\n");
    env.sh("git fsck --no-progress").ok();
    env.envgit(&["fsck"]).ok();
}

#[test]
fn init_writes_only_envgit_yaml_and_a_private_store() {
    let env = Env::new();
    env.write("src/main.rs", "fn main() {}\n");
    let r = env.init();
    assert!(r.stderr.contains("step 1 import"), "{}", r.stderr);
    let mut names: Vec<String> = std::fs::read_dir(&env.project)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["envgit.yaml", "src"]);
    let yaml = env.read("envgit.yaml");
    assert!(
        yaml.contains("version: 1")
            && yaml.contains("preset: default")
            && yaml.contains("node_modules/")
    );
    let mode = std::fs::metadata(env.store_dir())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
    let log = env.log_json();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["number"], 1);
    assert_eq!(log[0]["kind"], "import");
}

#[test]
fn rewind_of_a_rewind_and_rewind_is_a_step() {
    let env = Env::new();
    env.write("f.txt", "v1");
    env.init(); // 1
    env.write("f.txt", "v2");
    env.record(); // 2
    env.write("f.txt", "v3");
    env.record(); // 3
    let r = env.envgit(&["rewind", "1"]).ok(); // 4
    assert_eq!(r.stdout.trim(), "rewound to step 1 (2 step(s) undone)");
    assert_eq!(env.read("f.txt"), "v1");
    // The rewind's own snapshot is exactly step 1 again.
    assert_eq!(
        env.envgit(&["diff", "1", "4", "--json"]).ok().json(),
        serde_json::json!([])
    );
    let r = env.envgit(&["rewind", "3"]).ok(); // 5
    assert_eq!(r.stdout.trim(), "rewound to step 3 (1 step(s) undone)");
    assert_eq!(env.read("f.txt"), "v3");
    env.envgit(&["rewind", "4"]).ok();
    assert_eq!(env.read("f.txt"), "v1");
    let log = env.log_json();
    assert_eq!(log[0]["kind"], "rewind");
    assert_eq!(log[0]["target"], 4);
    assert_eq!(log.len(), 6);
}

#[test]
fn rewind_records_unsaved_changes_first_so_nothing_is_lost() {
    let env = Env::new();
    env.write("f.txt", "v1");
    env.init();
    env.write("f.txt", "unsaved");
    let r = env.envgit(&["rewind", "1"]).ok();
    assert!(
        r.stderr
            .contains("recorded the current state first as step 2"),
        "{}",
        r.stderr
    );
    assert_eq!(env.read("f.txt"), "v1");
    env.envgit(&["rewind", "2"]).ok();
    assert_eq!(env.read("f.txt"), "unsaved");
}

#[test]
fn rewind_keeps_the_current_policy_and_protected_files_unless_asked() {
    let env = Env::new();
    env.write("f.txt", "v1");
    env.write(".vscode/settings.json", "{\"old\": true}");
    env.init();
    let yaml = env.read("envgit.yaml");
    let tightened = format!("{yaml}\n# tightened\n");
    env.write("envgit.yaml", &tightened);
    env.write(".vscode/settings.json", "{\"new\": true}");
    env.write("f.txt", "v2");
    env.record();
    let r = env.envgit(&["rewind", "1"]).ok();
    assert!(r.stderr.contains("kept envgit.yaml"), "{}", r.stderr);
    assert_eq!(env.read("f.txt"), "v1");
    assert_eq!(env.read("envgit.yaml"), tightened);
    assert_eq!(env.read(".vscode/settings.json"), "{\"new\": true}");
    env.envgit(&["rewind", "1", "--restore-policy"]).ok();
    assert_eq!(env.read("envgit.yaml"), yaml);
    assert_eq!(env.read(".vscode/settings.json"), "{\"old\": true}");
}

#[test]
fn fork_then_diverge_in_both() {
    let env = Env::new();
    env.write("f.txt", "base");
    env.write("dir/g.txt", "g");
    env.init();
    env.write("f.txt", "after");
    env.record();
    let fork_dir = env.tmp.path().join("forked");
    let r = env.envgit(&["fork", "1", fork_dir.to_str().unwrap()]).ok();
    assert!(r.stdout.contains("forked step 1"), "{}", r.stdout);
    assert_eq!(
        std::fs::read_to_string(fork_dir.join("f.txt")).unwrap(),
        "base"
    );
    assert_eq!(
        std::fs::read_to_string(fork_dir.join("dir/g.txt")).unwrap(),
        "g"
    );
    let flog = env.envgit_in(&fork_dir, &["log", "--json"]).ok().json();
    let first = &flog.as_array().unwrap()[0];
    assert_eq!(first["kind"], "fork");
    assert_eq!(first["origin"]["step"], 1);
    assert_eq!(
        first["origin"]["project"].as_str().unwrap(),
        env.project.canonicalize().unwrap().to_str().unwrap()
    );
    // Diverge: each side records its own step 3 / step 2 and never sees the other's.
    std::fs::write(fork_dir.join("f.txt"), "fork side").unwrap();
    env.write("f.txt", "origin side");
    env.envgit_in(&fork_dir, &["record"]).ok();
    env.record();
    env.envgit_in(&fork_dir, &["rewind", "1"]).ok();
    assert_eq!(
        std::fs::read_to_string(fork_dir.join("f.txt")).unwrap(),
        "base"
    );
    assert_eq!(env.read("f.txt"), "origin side");
    env.envgit_in(&fork_dir, &["rewind", "2"]).ok();
    assert_eq!(
        std::fs::read_to_string(fork_dir.join("f.txt")).unwrap(),
        "fork side"
    );
    assert_eq!(env.log_json().len(), 3);
    env.envgit_in(&fork_dir, &["fsck"]).ok();
}

#[test]
fn a_symlink_out_of_the_project_is_kept_as_a_link_and_never_followed() {
    let env = Env::new();
    let outside = env.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "outside secret").unwrap();
    symlink(&outside, env.path("ext")).unwrap();
    symlink(outside.join("secret.txt"), env.path("link.txt")).unwrap();
    env.init();
    let log = env.log_json();
    let paths: Vec<&str> = log[0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"ext") && paths.contains(&"link.txt"),
        "{paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p.starts_with("ext/")),
        "walked through a symlink: {paths:?}"
    );
    let shown = env.envgit(&["diff", "1"]).ok().stdout;
    assert!(
        !shown.contains("outside secret"),
        "read through a symlink:\n{shown}"
    );
    // The agent swaps the links for real content; the rewind brings the links back.
    std::fs::remove_file(env.path("ext")).unwrap();
    std::fs::remove_file(env.path("link.txt")).unwrap();
    env.write("ext/new.txt", "x");
    env.write("link.txt", "plain");
    env.record();
    env.envgit(&["rewind", "1"]).ok();
    assert_eq!(std::fs::read_link(env.path("ext")).unwrap(), outside);
    assert_eq!(
        std::fs::read_link(env.path("link.txt")).unwrap(),
        outside.join("secret.txt")
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        1,
        "rewind wrote outside the project"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "outside secret"
    );
}

#[test]
fn a_directory_swapped_for_a_symlink_is_not_written_through_on_rewind() {
    let env = Env::new();
    let outside = env.tmp.path().join("victim");
    std::fs::create_dir_all(&outside).unwrap();
    env.write("d/file.txt", "mine");
    env.init();
    // The agent replaces d/ by a link to a directory outside; rewind must restore d/ as a
    // directory and never create d/file.txt inside the victim.
    std::fs::remove_dir_all(env.path("d")).unwrap();
    symlink(&outside, env.path("d")).unwrap();
    env.record();
    env.envgit(&["rewind", "1"]).ok();
    assert!(env.path("d").symlink_metadata().unwrap().is_dir());
    assert_eq!(env.read("d/file.txt"), "mine");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[test]
fn file_to_directory_and_back() {
    let env = Env::new();
    env.write("x", "a file");
    env.init(); // 1: x is a file
    std::fs::remove_file(env.path("x")).unwrap();
    env.write("x/inner.txt", "inside");
    env.record(); // 2: x is a directory
    env.envgit(&["rewind", "1"]).ok();
    assert_eq!(env.read("x"), "a file");
    env.envgit(&["rewind", "2"]).ok();
    assert_eq!(env.read("x/inner.txt"), "inside");
}

#[test]
fn executable_bit_and_empty_directories() {
    let env = Env::new();
    env.write("run.sh", "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(env.path("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(env.path("empty/nested")).unwrap();
    env.init();
    std::fs::set_permissions(env.path("run.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::remove_dir_all(env.path("empty")).unwrap();
    let step = env.record();
    let changes = env
        .envgit(&["show", &step.to_string(), "--json"])
        .ok()
        .json();
    let paths: Vec<&str> = changes["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"run.sh") && paths.contains(&"empty/nested"),
        "{paths:?}"
    );
    env.envgit(&["rewind", "1"]).ok();
    assert_eq!(
        std::fs::metadata(env.path("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    assert!(env.path("empty/nested").is_dir());
    assert_eq!(env.sh("./run.sh").ok().stdout, "hi\n");
}

#[test]
fn files_over_the_size_limit_are_markers_and_never_touched() {
    let env = Env::new();
    env.write("small.txt", "s");
    env.write("big.bin", &"x".repeat(4096));
    env.write("node_modules/pkg/index.js", "module");
    env.init();
    let yaml = env
        .read("envgit.yaml")
        .replace("  # max_file_size: 100MiB", "  max_file_size: 1KiB");
    env.write("envgit.yaml", &yaml);
    env.record(); // 2: big.bin becomes a marker
    let show = env.envgit(&["show", "2", "--json"]).ok().json();
    let big = show["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "big.bin")
        .cloned();
    assert_eq!(big.unwrap()["entry"], "marker");
    env.write("big.bin", &"y".repeat(5000));
    env.write("node_modules/pkg/index.js", "changed module");
    env.write("small.txt", "changed");
    env.record(); // 3
    env.envgit(&["rewind", "2"]).ok();
    assert_eq!(env.read("small.txt"), "s");
    assert_eq!(
        env.read("big.bin"),
        "y".repeat(5000),
        "rewind touched a marker path"
    );
    assert_eq!(
        env.read("node_modules/pkg/index.js"),
        "changed module",
        "rewind touched an excluded path"
    );
    // A diff names what was not captured instead of dropping it silently.
    let d = env.envgit(&["diff", "1", "2"]).ok().stdout;
    assert!(d.contains("over snapshot.max_file_size"), "{d}");
}

#[test]
fn log_lines_show_five_paths_git_last_and_json_has_records() {
    let env = git_project();
    env.init();
    for i in 0..7 {
        env.write(&format!("f{i}.txt"), "x");
    }
    env.sh("git add . && git commit -qm more").ok();
    env.envgit(&["record", "--kind", "tool", "--summary", "Write files"])
        .ok();
    let out = env.envgit(&["log"]).ok().stdout;
    let first = out.lines().next().unwrap();
    assert!(
        first.contains("tool") && first.contains("Write files"),
        "{first}"
    );
    assert!(
        first.contains("+f0.txt, +f1.txt, +f2.txt, +f3.txt, (+3 more), .git (+"),
        "{first}"
    );
    let log = env.log_json();
    assert_eq!(log[0]["kind"], "tool");
    assert_eq!(log[0]["number"], 2);
    assert!(log[0]["changes_total"]["added"].as_u64().unwrap() >= 7);
    let v = env.envgit(&["log", "-v"]).ok().stdout;
    assert!(v.contains("+ f6.txt") && v.contains("tree: "), "{v}");
}

#[test]
fn diff_shows_unified_text_and_summarizes_binary() {
    let env = Env::new();
    env.write("t.txt", "line1\nline2\n");
    std::fs::write(env.path("b.bin"), [0u8, 1, 2, 3]).unwrap();
    env.init();
    env.write("t.txt", "line1\nchanged\n");
    std::fs::write(env.path("b.bin"), [0u8, 9, 9]).unwrap();
    env.record();
    let d = env.envgit(&["diff", "2"]).ok().stdout;
    assert!(
        d.contains("--- a/t.txt") && d.contains("-line2") && d.contains("+changed"),
        "{d}"
    );
    assert!(d.contains("binary files differ"), "{d}");
    let d = env.envgit(&["diff", "1", "2", "--json"]).ok().json();
    assert_eq!(d.as_array().unwrap().len(), 2);
}

#[test]
fn bad_input_is_refused_with_exit_2_and_changes_nothing() {
    let env = Env::new();
    let r = env.envgit(&["log"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("run `envgit init`"), "{}", r.stderr);
    env.write("f.txt", "v1");
    env.init();
    let r = env.envgit(&["init"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("already an envgit project"),
        "{}",
        r.stderr
    );
    for args in [
        &["rewind", "9"][..],
        &["show", "9"],
        &["diff", "9"],
        &["fork", "9", "/nonexistent-envgit-test"],
    ] {
        let r = env.envgit(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("step 9 does not exist"),
            "{args:?}: {}",
            r.stderr
        );
    }
    let full = env.tmp.path().join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("keep.txt"), "mine").unwrap();
    let r = env.envgit(&["fork", "1", full.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1);
    let r = env.envgit(&["frobnicate"]);
    assert_eq!(r.code, 2);
    // A broken policy names file:line:col.
    let yaml = env.read("envgit.yaml");
    env.write("envgit.yaml", "version: 1\nsnapshot:\n  exclud: []\n");
    let r = env.envgit(&["record"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("envgit.yaml:3:3"), "{}", r.stderr);
    env.write("envgit.yaml", &yaml);
    assert_eq!(env.log_json().len(), 1);
    assert_eq!(env.read("f.txt"), "v1");
}

#[test]
fn every_command_has_help() {
    let env = Env::new();
    for cmd in [
        "init", "record", "log", "show", "diff", "rewind", "fork", "fsck", "gc",
    ] {
        let r = env.envgit(&[cmd, "--help"]).ok();
        assert!(r.stdout.contains("Usage: envgit"), "{cmd}: {}", r.stdout);
    }
}
