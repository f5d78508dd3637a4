#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The run's cgroups are made when `envgit run` starts (the sandbox process-to-be moves into
//! them while envgit sets up the rest), so they must go away however the run ends: after the
//! command, and when envgit fails before any sandbox started. The same holds for the
//! processes the sandbox process-to-be forks before the step's spec exists (it enters its
//! namespaces early and forks the relay while envgit opens the store).

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

/// [`cgroups_of`] once they are gone, or after 20 s (a bound, not a measure).
fn cgroups_left_by(pid: u32) -> Vec<PathBuf> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut left = cgroups_of(pid);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        left = cgroups_of(pid);
    }
    left
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
    // A run leaves its cgroups to a child that removes them once the sandbox's PID 1 has left
    // them, after envgit exits: bounded, not timed.
    assert_eq!(cgroups_left_by(pid), Vec::<PathBuf>::new(), "after a run");
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

/// Processes whose environment holds `marker` (a process's first environment, which a fork
/// keeps: the zygote and the relay it forks carry envgit's).
fn processes_marked(marker: &str) -> Vec<String> {
    let needle = marker.as_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let environ = std::fs::read(e.path().join("environ")).ok()?;
            environ
                .windows(needle.len())
                .any(|w| w == needle)
                .then(|| std::fs::read_to_string(e.path().join("cmdline")).unwrap_or_default())
        })
        .collect()
}

/// Refused during its set-up (after the sandbox process-to-be entered its namespaces and
/// forked the relay): no process of the run is left, and no cgroup.
#[test]
fn a_run_refused_during_its_set_up_leaves_no_process_and_no_cgroup() {
    let env = Env::new();
    env.init();
    // More hard links to files outside the project than the sandbox can bind read-only: the
    // run is refused once the project's facts are gathered, long after envgit started.
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(env.project.join("linked")).unwrap();
    for i in 0..4100 {
        let o = outside.path().join(format!("f{i}"));
        std::fs::write(&o, "x").unwrap();
        std::fs::hard_link(&o, env.project.join(format!("linked/f{i}"))).unwrap();
    }
    let since_ms = now_ms();
    let marker = format!("ENVGIT_TEST_RUN_MARK={}-{}", std::process::id(), line!());
    let (name, value) = marker.split_once('=').unwrap();
    let child = env
        .cmd(&env.project)
        .args(["run", "--", "echo", "ran"])
        .env(name, value)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("refusing to run"), "{stderr}");
    // A killed process is gone once its parent reaped it; the relay, whose parent was killed,
    // ends by its parent-death signal, which the kernel delivers as that parent exits. Wait
    // for that, boundedly.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut left = processes_marked(&marker);
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        left = processes_marked(&marker);
    }
    assert_eq!(
        left,
        Vec::<String>::new(),
        "processes of the refused run left"
    );
    assert_eq!(
        cgroups_of(pid),
        Vec::<PathBuf>::new(),
        "cgroups of the refused run left"
    );
    // Its step directory (gate sockets, trust files, the staging mount point the zygote
    // built the root's base in) is removed too, not left for a later step to sweep.
    assert_eq!(
        step_dirs_of(&env, pid, since_ms),
        Vec::<PathBuf>::new(),
        "the refused run's step directory left"
    );
}

/// The step directories of the envgit process `pid`: `PID-*` in any of the places steps keep
/// them (`/dev/shm/envgit-*` and `$ENVGIT_HOME/rt-*`).
fn step_dirs_of(env: &Env, pid: u32, since_ms: u128) -> Vec<PathBuf> {
    let named = |dir: &Path, prefix: &str| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .map(|e| e.path())
            .collect()
    };
    named(Path::new("/dev/shm"), "envgit-")
        .into_iter()
        .chain(named(&env.home, "rt-"))
        .flat_map(|base| named(&base, &format!("{pid}-")))
        .filter(|dir| made_since(dir, since_ms))
        .collect()
}

/// A step directory is named `PID-MS`, MS when it was made: one made before the test began
/// belongs to an earlier process that had the same PID (PIDs wrap), not to this run.
fn made_since(dir: &Path, since_ms: u128) -> bool {
    dir.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split_once('-'))
        .and_then(|(_, ms)| ms.parse::<u128>().ok())
        .is_none_or(|ms| ms >= since_ms)
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}
