#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The run's cgroups are made when `envgit run` starts (the sandbox process-to-be moves into
//! them while envgit sets up the rest), so they must go away however the run ends: after the
//! command, and when envgit fails before any sandbox started.

mod support;

use std::path::{Path, PathBuf};

use support::Env;

/// Directories named `envgit-PID-…` below the cgroup mounts (a few levels: the run's cgroup
/// sits below envgit's own).
fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("envgit-{pid}-");
    let mut found = Vec::new();
    let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                found.push(e.path());
            } else if depth < 6 {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    found
}

/// Whether this machine gives envgit a pids cgroup to limit a run with: without one there is
/// nothing to leave behind (the step then notes "RLIMIT_NPROC only").
fn cgroups_available(env: &Env) -> bool {
    env.init();
    env.envgit(&["run", "--", "true"]);
    let steps = env.log_json();
    let notes = steps[0]["notes"].to_string();
    !notes.contains("RLIMIT_NPROC only")
}

fn run_and_wait(env: &Env, dir: &Path, args: &[&str]) -> u32 {
    let child = env
        .cmd(dir)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    child.wait_with_output().unwrap();
    pid
}

#[test]
fn a_run_leaves_no_cgroup_behind_whether_it_ran_or_failed_first() {
    let env = Env::new();
    if !cgroups_available(&env) {
        eprintln!("SKIPPED: no cgroup envgit can limit a run with on this machine");
        return;
    }
    let pid = run_and_wait(&env, &env.project, &["run", "--", "true"]);
    assert_eq!(cgroups_of(pid), Vec::<PathBuf>::new(), "after a run");
    // Outside any project: envgit fails after it made the run's cgroups and before any
    // sandbox started.
    let elsewhere = tempfile::tempdir().unwrap();
    let pid = run_and_wait(&env, elsewhere.path(), &["run", "--", "true"]);
    assert_eq!(cgroups_of(pid), Vec::<PathBuf>::new(), "after a failed run");
}

/// A run cgroup left by an envgit killed with `-9` (nothing could remove it) is removed by
/// the next run: only when empty, and only when its envgit is gone.
#[test]
fn a_cgroup_left_by_a_killed_envgit_is_removed_by_the_next_run() {
    let env = Env::new();
    if !cgroups_available(&env) {
        eprintln!("SKIPPED: no cgroup envgit can limit a run with on this machine");
        return;
    }
    // Where the run's cgroup is made: the pids hierarchy's path the command sees itself in.
    let out = env.envgit(&["run", "--", "cat", "/proc/self/cgroup"]);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains(":pids:") || l.starts_with("0::"))
        .unwrap_or_else(|| panic!("no cgroup line in {}{}", out.stdout, out.stderr))
        .to_owned();
    let rel = line.splitn(3, ':').nth(2).unwrap().trim_start_matches('/');
    let mount = if line.contains(":pids:") {
        "/sys/fs/cgroup/pids"
    } else {
        "/sys/fs/cgroup"
    };
    let run_dir = Path::new(mount).join(rel);
    let parent = run_dir.parent().unwrap();
    // A pid above any pid_max (2^22) cannot be alive.
    let left = parent.join("envgit-4194999-1");
    std::fs::create_dir(&left).unwrap();
    env.envgit(&["run", "--", "true"]);
    assert!(!left.exists(), "{} is still there", left.display());
}
