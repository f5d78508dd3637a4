//! The stat index (the store's `stat.cache`: the last tree's paths with their `lstat` data)
//! lets one-shot commands skip reading files that did not change. It must never hide an edit
//! nobody recorded, and a damaged or foreign index is ignored, never trusted: the tree is the
//! one a scan without it gives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::Env;

const OLD: &str = "2020-01-02 03:04:05";

/// A project whose files are old enough for the index to vouch for them, initialised and
/// recorded once (the index now holds every file).
fn project() -> Env {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.write("src/b.txt", "two\n");
    env.sh(&format!("touch -d '{OLD}' a.txt src/b.txt")).ok();
    env.init();
    env.record();
    env
}

/// Rewrites `rel` with content of the same size and sets its mtime back: only its ctime says
/// it changed.
fn sneaky_edit(env: &Env, rel: &str, content: &str) {
    assert_eq!(env.read(rel).len(), content.len());
    std::fs::write(env.path(rel), content).unwrap();
    env.sh(&format!("touch -d '{OLD}' {rel}")).ok();
}

fn changed_paths(step: &serde_json::Value) -> Vec<String> {
    step["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

fn index_path(env: &Env) -> std::path::PathBuf {
    env.store_dir().join("stat.cache")
}

#[test]
fn record_notices_a_same_size_edit_with_the_mtime_set_back() {
    let env = project();
    assert!(index_path(&env).is_file(), "record saves the index");
    sneaky_edit(&env, "a.txt", "ONE\n");
    let step = env.envgit(&["record", "--json"]).ok().json();
    assert_eq!(changed_paths(&step), ["a.txt"]);
    // Unchanged since: the next record changes nothing.
    let again = env.envgit(&["record", "--json"]).ok().json();
    assert!(changed_paths(&again).is_empty(), "{again}");
}

#[test]
fn rewind_records_an_edit_nobody_recorded_before_it_rewinds() {
    let env = project();
    let first = env.log_json().last().unwrap()["number"].as_u64().unwrap();
    env.write("c.txt", "three\n");
    env.record();
    sneaky_edit(&env, "src/b.txt", "TWO\n");
    let r = env
        .envgit(&["rewind", &first.to_string(), "--json"])
        .ok()
        .json();
    let recorded = &r["recorded_first"];
    assert_eq!(changed_paths(recorded), ["src/b.txt"], "{r}");
    assert_eq!(env.read("src/b.txt"), "two\n");
    assert!(!env.path("c.txt").exists());
    // The edit is in history: rewinding to the step that recorded it brings it back.
    let n = recorded["number"].as_u64().unwrap().to_string();
    env.envgit(&["rewind", &n]).ok();
    assert_eq!(env.read("src/b.txt"), "TWO\n");
    assert_eq!(env.read("c.txt"), "three\n");
}

#[test]
fn a_damaged_or_foreign_index_is_ignored() {
    let env = project();
    let good = std::fs::read(index_path(&env)).unwrap();
    assert!(good.len() > 64);
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let mut other_version = good.clone();
    other_version[..8].copy_from_slice(b"EGSTAT01");
    let damaged: [(&str, Vec<u8>); 5] = [
        ("garbage", b"not an index at all".repeat(50)),
        ("one byte flipped", flipped),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("another version", other_version),
        ("empty", Vec::new()),
    ];
    for (i, (what, bytes)) in damaged.into_iter().enumerate() {
        let content = if i % 2 == 0 { "ONE\n" } else { "one\n" };
        sneaky_edit(&env, "a.txt", content);
        std::fs::write(index_path(&env), &bytes).unwrap();
        let step = env.envgit(&["record", "--json"]).ok().json();
        assert_eq!(changed_paths(&step), ["a.txt"], "{what}: {step}");
        // The same tree as a scan with no index at all.
        std::fs::remove_file(index_path(&env)).unwrap();
        let cold = env.envgit(&["record", "--json"]).ok().json();
        assert_eq!(step["tree"], cold["tree"], "{what}");
        assert!(changed_paths(&cold).is_empty(), "{what}: {cold}");
    }
}

/// The paths step `n` changed, as `envgit show N --json` lists them.
fn step_changes(env: &Env, n: u64) -> Vec<String> {
    let shown = env.envgit(&["show", &n.to_string(), "--json"]).ok().json();
    changed_paths(&shown)
}

fn newest_step(env: &Env) -> u64 {
    env.log_json()[0]["number"].as_u64().unwrap()
}

#[test]
fn a_runs_snapshot_after_the_command_is_the_tree_a_full_walk_gives() {
    // `envgit run` watches the project from before its first walk and, after the command,
    // reads only what inotify reported. Every kind of change, made inside the sandbox, must be
    // in the run's own step: a `record` right after finds nothing left.
    let env = project();
    env.write("old/x.txt", "x\n");
    env.write("old/deep/y.txt", "y\n");
    env.write("mv/from.txt", "from\n");
    env.write("mvdir/inner/z.txt", "z\n");
    env.write("mode.sh", "echo\n");
    env.write("becomes_dir", "file\n");
    env.record();
    let script = format!(
        "set -e
         mkdir -p new/a/b && echo n > new/a/b/n.txt && echo m > new/m.txt
         rm -r old/deep
         mv mv/from.txt src/to.txt
         mv mvdir renamed
         chmod +x mode.sh
         ln -s a.txt link
         rm becomes_dir && mkdir becomes_dir && echo d > becomes_dir/d.txt
         printf 'TWO\\n' > src/b.txt && touch -d '{OLD}' src/b.txt"
    );
    env.envgit(&["run", "--", "sh", "-c", &script]).ok();
    assert_eq!(env.read("src/b.txt"), "TWO\n");
    let got = step_changes(&env, newest_step(&env));
    for p in [
        "becomes_dir/d.txt",
        "link",
        "mode.sh",
        "mv/from.txt",
        "mvdir/inner/z.txt",
        "new/a/b/n.txt",
        "new/m.txt",
        "old/deep/y.txt",
        "renamed/inner/z.txt",
        "src/b.txt",
        "src/to.txt",
    ] {
        assert!(
            got.iter().any(|g| g == p),
            "{p} missing from the run's step: {got:?}"
        );
    }
    let after = env.envgit(&["record", "--json"]).ok().json();
    assert!(changed_paths(&after).is_empty(), "left for record: {after}");
}

#[test]
fn a_write_through_a_shared_mapping_is_never_lost() {
    // inotify does not report writes through a shared mmap, so a run's own snapshot may miss
    // one; the next walk (a record, or the next run's walk before its command) finds it by its
    // stat data, so history always holds the content.
    let env = project();
    let script = "import mmap\n\
                  f = open('a.txt', 'r+b')\n\
                  m = mmap.mmap(f.fileno(), 0)\n\
                  m[0:3] = b'MAP'\n\
                  m.flush()\n";
    env.envgit(&["run", "--", "python3", "-c", script]).ok();
    assert_eq!(env.read("a.txt"), "MAP\n");
    let run = newest_step(&env);
    let recorded = env.envgit(&["record", "--json"]).ok().json();
    let in_history = step_changes(&env, run).contains(&"a.txt".to_string())
        || changed_paths(&recorded) == ["a.txt"];
    assert!(in_history, "the mapped write is in no step: {recorded}");
    let fork = env.path("../fork");
    env.envgit(&[
        "fork",
        &recorded["number"].to_string(),
        fork.to_str().unwrap(),
    ])
    .ok();
    assert_eq!(
        std::fs::read_to_string(fork.join("a.txt")).unwrap(),
        "MAP\n"
    );
}
