//! The data-only import with real git: a copy of the repository stands in for the sandbox's
//! view, and the files that differ from the host's `.git` for the overlay's upper layer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh(cmd: &str) {
    assert!(
        Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .status()
            .unwrap()
            .success(),
        "{cmd}"
    );
}

/// Files of `view` that differ from `host` (links kept as links), like an overlay's upper.
fn upper_of(host: &Path, view: &Path, upper: &Path) {
    sh(&format!(
        "cd {v} && find . \\( -type f -o -type l \\) | while read f; do \
         if [ -L \"$f\" ] || ! cmp -s \"$f\" {h}/\"$f\"; then mkdir -p {u}/$(dirname \"$f\"); cp -a \"$f\" {u}/\"$f\"; fi; done",
        v = view.display(),
        h = host.display(),
        u = upper.display()
    ));
}

#[test]
fn commits_and_allowed_config_cross_code_does_not() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    let marker = t.path().join("marker");
    std::fs::create_dir(&host).unwrap();
    git(&host, &["init", "-q", "-b", "main"]);
    std::fs::write(host.join("a"), "a\n").unwrap();
    git(&host, &["add", "a"]);
    git(&host, &["commit", "-qm", "one"]);
    let pre = envgit_store::GitPreStep::capture(&host.join(".git")).unwrap();

    // The step, in its view of the repository.
    let view = t.path().join("view");
    sh(&format!("cp -a {} {}", host.display(), view.display()));
    std::fs::write(view.join("b"), "b\n").unwrap();
    git(&view, &["add", "b"]);
    git(&view, &["commit", "-qm", "from the step"]);
    git(&view, &["config", "user.name", "Agent Name"]);
    let m = marker.display();
    git(
        &view,
        &[
            "config",
            "core.fsmonitor",
            &format!("echo pwned >> {m}; false"),
        ],
    );
    git(&view, &["config", "core.hooksPath", "/tmp/evil"]);
    git(&view, &["config", "include.path", "/tmp/evil.cfg"]);
    let g = view.join(".git");
    std::fs::write(
        g.join("hooks/pre-commit"),
        format!("#!/bin/sh\necho pwned >> {m}\n"),
    )
    .unwrap();
    sh(&format!("chmod +x {}/hooks/pre-commit", g.display()));
    std::fs::write(g.join("commondir"), "/tmp/agent\n").unwrap();
    std::fs::write(g.join("config.worktree"), "[core]\nfsmonitor = x\n").unwrap();
    std::fs::write(g.join("objects/info/alternates"), "/tmp/agent/objects\n").unwrap();
    std::fs::create_dir_all(g.join("rebase-merge")).unwrap();
    std::fs::write(
        g.join("rebase-merge/git-rebase-todo"),
        format!("exec echo pwned >> {m}\n"),
    )
    .unwrap();
    std::fs::remove_file(g.join("COMMIT_EDITMSG")).unwrap();
    std::os::unix::fs::symlink(&marker, g.join("COMMIT_EDITMSG")).unwrap();

    let upper = t.path().join("upper");
    std::fs::create_dir(&upper).unwrap();
    upper_of(&host.join(".git"), &g, &upper);
    let mut pre = pre;
    let rep = envgit_store::git_import(&host.join(".git"), &upper, &mut pre).unwrap();
    let dropped: Vec<&str> = rep.dropped.iter().map(|d| d.path.as_str()).collect();
    for p in [
        "hooks/pre-commit",
        "commondir",
        "config.worktree",
        "objects/info/alternates",
        "rebase-merge/git-rebase-todo",
        "COMMIT_EDITMSG",
        "config core.fsmonitor",
        "config core.hookspath",
        "config include.path",
    ] {
        assert!(dropped.contains(&p), "{p} not dropped: {rep:?}");
    }
    assert!(
        rep.imported.iter().any(|p| p == "config user.name"),
        "{rep:?}"
    );
    assert!(rep.conflicts.is_empty(), "{rep:?}");

    // Idempotent: a second import changes nothing.
    let again = envgit_store::git_import(&host.join(".git"), &upper, &mut pre).unwrap();
    assert!(
        again.imported.is_empty() && again.conflicts.is_empty(),
        "{again:?}"
    );

    // The host's own git: the commit is there, nothing the step planted runs.
    assert!(git(&host, &["log", "--format=%s"]).contains("from the step"));
    git(&host, &["status"]);
    std::fs::write(host.join("c"), "c\n").unwrap();
    git(&host, &["add", "c"]);
    git(&host, &["commit", "-qm", "the user's"]);
    assert_eq!(
        git(&host, &["config", "--file", ".git/config", "user.name"]).trim(),
        "Agent Name"
    );
    assert!(!marker.exists(), "code from the step ran on the host");
    assert!(!host.join(".git/hooks/pre-commit").exists());
    assert!(!host.join(".git/commondir").exists());
}

#[test]
fn a_ref_the_host_moved_during_the_step_keeps_the_hosts_value() {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    std::fs::create_dir(&host).unwrap();
    git(&host, &["init", "-q", "-b", "main"]);
    git(&host, &["commit", "-q", "--allow-empty", "-m", "one"]);
    let mut pre = envgit_store::GitPreStep::capture(&host.join(".git")).unwrap();
    let view = t.path().join("view");
    sh(&format!("cp -a {} {}", host.display(), view.display()));
    git(&view, &["commit", "-q", "--allow-empty", "-m", "step"]);
    // The user commits on the host meanwhile.
    git(&host, &["commit", "-q", "--allow-empty", "-m", "user"]);
    let users = git(&host, &["rev-parse", "main"]);
    let upper = t.path().join("upper");
    std::fs::create_dir(&upper).unwrap();
    upper_of(&host.join(".git"), &view.join(".git"), &upper);
    let rep = envgit_store::git_import(&host.join(".git"), &upper, &mut pre).unwrap();
    assert_eq!(git(&host, &["rev-parse", "main"]), users);
    assert!(
        rep.conflicts.iter().any(|c| c.path == "refs/heads/main"),
        "{rep:?}"
    );
    git(&host, &["status"]);
}

/// A temporary directory holding an empty git repository (`host`) and a store directory.
fn repository_and_store() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let host = t.path().join("host");
    let store = t.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::create_dir(&host).unwrap();
    git(&host, &["init", "-q", "-b", "main"]);
    (t, host, store)
}

/// A layer left by a killed envgit after its imports is recovered from the state its last
/// changing import saved: nothing is imported or refused twice (a dropped hook is said once),
/// though an import that found nothing new saved nothing.
#[test]
fn a_layer_left_after_its_imports_is_recovered_from_their_state() {
    let (t, host, store) = repository_and_store();
    std::fs::write(host.join("a"), "a\n").unwrap();
    git(&host, &["add", "a"]);
    git(&host, &["commit", "-qm", "one"]);
    let layer = envgit_store::GitLayer::open(&store, &host)
        .unwrap()
        .unwrap();

    // The step commits in its view; what differs lands in the layer's upper directory.
    let view = t.path().join("view");
    sh(&format!("cp -a {} {}", host.display(), view.display()));
    std::fs::write(view.join("b"), "b\n").unwrap();
    git(&view, &["add", "b"]);
    git(&view, &["commit", "-qm", "from the step"]);
    std::fs::write(view.join(".git/hooks/post-commit"), "#!/bin/sh\n").unwrap();
    upper_of(&host.join(".git"), &view.join(".git"), &layer.upper());
    let first = layer.import().unwrap();
    assert!(first.conflicts.is_empty(), "{first:?}");
    let dropped: Vec<&str> = first.dropped.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(dropped, ["hooks/post-commit"], "{first:?}");
    assert!(git(&host, &["log", "--format=%s"]).contains("from the step"));
    let second = layer.import().unwrap();
    assert!(
        second.imported.is_empty() && second.conflicts.is_empty(),
        "{second:?}"
    );

    // Killed: the lock goes with the process, the layer's directory stays.
    drop(layer);
    let recovered = envgit_store::recover_git_layers(&store, &host).unwrap();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert!(
        recovered[0].imported.is_empty()
            && recovered[0].conflicts.is_empty()
            && recovered[0].dropped.is_empty(),
        "{recovered:?}"
    );
    assert_eq!(git(&host, &["log", "--format=%s"]), "from the step\none\n");
}

/// Short enough for a test; what the production margin (two seconds) guards is the same.
const MARGIN_NS: i64 = 100_000_000;

/// Until every file written so far has been still for the margin.
fn settle() {
    std::thread::sleep(std::time::Duration::from_nanos(
        MARGIN_NS as u64 + 20_000_000,
    ));
}

/// A repository with one commit on `main`, settled, and its `.git` captured.
fn host_captured(t: &Path) -> (std::path::PathBuf, envgit_store::GitPreStep) {
    let host = t.join("host");
    std::fs::create_dir(&host).unwrap();
    git(&host, &["init", "-q", "-b", "main"]);
    std::fs::write(host.join("a"), "a\n").unwrap();
    git(&host, &["add", "a"]);
    git(&host, &["commit", "-qm", "one"]);
    settle();
    let pre = envgit_store::GitPreStep::capture_still_for(&host.join(".git"), MARGIN_NS).unwrap();
    (host, pre)
}

/// The step's commit, made in a copy of the host, as the overlay's upper directory holds it.
fn step_commits(t: &Path, host: &Path) -> std::path::PathBuf {
    let view = t.join("view");
    let upper = t.join("upper");
    std::fs::create_dir(&upper).unwrap();
    sh(&format!("cp -a {} {}", host.display(), view.display()));
    git(&view, &["commit", "-q", "--allow-empty", "-m", "step"]);
    upper_of(&host.join(".git"), &view.join(".git"), &upper);
    upper
}

/// Refs and the index the host left alone for the margin are known by their stat data, not
/// read; a file changed just before the step (git's racy case: it could change again in the
/// same clock tick with the same stamps) by its content.
#[test]
fn still_files_are_known_by_their_stat_data_and_fresh_ones_by_content() {
    let t = tempfile::tempdir().unwrap();
    let (host, pre) = host_captured(t.path());
    for rel in ["HEAD", "index", "refs/heads/main"] {
        let mark = pre.hashes.get(rel).map_or("", String::as_str);
        assert!(mark.starts_with("stat:"), "{rel}: {mark}");
    }
    git(&host, &["commit", "-q", "--allow-empty", "-m", "two"]);
    let pre = envgit_store::GitPreStep::capture(&host.join(".git")).unwrap();
    let mark = &pre.hashes["refs/heads/main"];
    assert!(!mark.starts_with("stat:") && mark.len() == 64, "{mark}");
}

#[test]
fn a_still_ref_the_host_left_alone_takes_the_steps_commit() {
    let t = tempfile::tempdir().unwrap();
    let (host, mut pre) = host_captured(t.path());
    let upper = step_commits(t.path(), &host);
    let rep = envgit_store::git_import(&host.join(".git"), &upper, &mut pre).unwrap();
    assert!(rep.conflicts.is_empty(), "{rep:?}");
    assert_eq!(git(&host, &["log", "-1", "--format=%s"]).trim(), "step");
}

/// The host's git moved a still ref during the step (a new inode, by its lock and rename), or
/// something rewrote it in place with the same size (only its stamps say it): the host's value
/// is kept either way.
#[test]
fn a_still_ref_the_host_changed_during_the_step_keeps_the_hosts_value() {
    for in_place in [false, true] {
        let t = tempfile::tempdir().unwrap();
        let (host, mut pre) = host_captured(t.path());
        let upper = step_commits(t.path(), &host);
        let main = host.join(".git/refs/heads/main");
        let users = if in_place {
            let old = std::fs::read_to_string(&main).unwrap();
            git(&host, &["commit", "-q", "--allow-empty", "-m", "user"]);
            let users = std::fs::read_to_string(&main).unwrap();
            git(&host, &["update-ref", "refs/heads/main", old.trim()]);
            settle();
            pre =
                envgit_store::GitPreStep::capture_still_for(&host.join(".git"), MARGIN_NS).unwrap();
            settle();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&main)
                .and_then(|mut f| std::io::Write::write_all(&mut f, users.as_bytes()))
                .unwrap();
            users
        } else {
            git(&host, &["commit", "-q", "--allow-empty", "-m", "user"]);
            git(&host, &["rev-parse", "main"])
        };
        let rep = envgit_store::git_import(&host.join(".git"), &upper, &mut pre).unwrap();
        assert!(
            rep.conflicts.iter().any(|c| c.path == "refs/heads/main"),
            "in place {in_place}: {rep:?}"
        );
        assert_eq!(git(&host, &["rev-parse", "main"]).trim(), users.trim());
    }
}

/// Another run between making its layer's directory and taking the layer's lock (or whose
/// layer went to the trash since the listing) is not this one's to judge: recovering neither
/// removes the directory, which would fail that run, nor fails itself.
#[test]
fn a_layer_being_made_by_another_run_is_left_alone() {
    let (_t, host, store) = repository_and_store();
    let making = store.join("gitlayer").join("4242-1");
    std::fs::create_dir_all(&making).unwrap();
    let recovered = envgit_store::recover_git_layers(&store, &host).unwrap();
    assert!(recovered.is_empty(), "{recovered:?}");
    assert!(
        making.is_dir(),
        "recovering removed a layer another run was making"
    );
    assert!(
        !making.join("lock").exists(),
        "recovering made the other run's lock"
    );
}
