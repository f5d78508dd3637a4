//! The store's budget at step time, against the real binary: a step that writes more than
//! `snapshot.budget` allows is recorded, the files that do not fit are markers named in a
//! warning and a note, `fsck` is clean and the store stays under its budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::Env;

const BUDGET: u64 = 2 << 20;

fn store_bytes(env: &Env) -> u64 {
    let dir = env.store_dir();
    let mut total = std::fs::metadata(dir.join("journal")).unwrap().len();
    for e in std::fs::read_dir(dir.join("packs")).unwrap() {
        total += e.unwrap().metadata().unwrap().len();
    }
    total
}

#[test]
fn a_step_past_the_budget_keeps_the_files_that_do_not_fit_as_markers() {
    let env = Env::new();
    env.write("README.md", "a small project\n");
    env.init();
    let yaml = env
        .read("envgit.yaml")
        .replace("  # budget: 20GiB", "  budget: 2MiB");
    assert!(yaml.contains("  budget: 2MiB"), "{yaml}");
    env.write("envgit.yaml", &yaml);
    env.record();
    // 10 MiB of random data in four files.
    let r = env.envgit(&[
        "run",
        "sh",
        "-c",
        "for i in 1 2 3 4; do head -c 2621440 /dev/urandom > r$i.bin; done; echo wrote",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("wrote"), "{}", r.stdout);
    let all: Vec<String> = (1..=4).map(|i| format!("r{i}.bin")).collect();
    // Every file is there on disk, untouched.
    for f in &all {
        assert_eq!(std::fs::metadata(env.path(f)).unwrap().len(), 2_621_440);
    }
    let show = env.envgit(&["show", "@", "--json"]).ok().json();
    let markers: Vec<String> = show["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["entry"] == "marker")
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    // 2.5 MiB files against 2 MiB: none fits.
    assert_eq!(markers, all, "{show}");
    for f in &markers {
        assert!(
            r.stderr.contains(f.as_str()),
            "the warning names {f}: {}",
            r.stderr
        );
    }
    assert!(
        r.stderr
            .contains("not stored: the store would pass snapshot.budget (2.0 MiB"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("envgit gc"), "{}", r.stderr);
    let notes = show["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| {
            let n = n.as_str().unwrap();
            n.contains("snapshot.budget") && all.iter().all(|f| n.contains(f.as_str()))
        }),
        "{notes:?}"
    );
    let text = env.envgit(&["show", "@"]).ok().stdout;
    assert!(text.contains("snapshot.budget"), "{text}");
    env.envgit(&["fsck"]).ok();
    let used = store_bytes(&env);
    assert!(
        used <= BUDGET + (64 << 10),
        "the store holds {used} bytes against a budget of {BUDGET}"
    );

    // Markers are left alone by a rewind, and said so.
    let r = env.envgit(&["rewind", "@-"]).ok();
    assert!(
        r.stderr
            .contains("r1.bin (not stored: over snapshot.budget or the disk's free space)"),
        "{}",
        r.stderr
    );
    assert!(env.path("r1.bin").exists());

    // A smaller file still fits beside them; every step says again what it could not store.
    let r = env
        .envgit(&["run", "sh", "-c", "echo hello > small.txt"])
        .ok();
    assert!(
        r.stderr.contains("4 file(s), 10.0 MiB, not stored"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("small.txt"), "{}", r.stderr);
    let show = env.envgit(&["show", "@", "--json"]).ok().json();
    assert!(
        show["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "small.txt" && c["entry"] == "file"),
        "{show}"
    );
    env.envgit(&["fsck"]).ok();
    assert!(store_bytes(&env) <= BUDGET + (64 << 10));
}
