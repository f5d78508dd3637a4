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
