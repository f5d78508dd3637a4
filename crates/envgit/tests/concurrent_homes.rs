//! Two sandboxes of one project at once (an agent's parallel tool calls, a server left running
//! in one step while the next runs) never mount the home's overlay over the same upper
//! directory: overlayfs leaves two mounts sharing an upper or work directory undefined ("accessing
//! files from both mounts will result in undefined behavior"), and one mount's set-up of the
//! work directory can break the other's (`overlay on HOME: Invalid argument`). The step that
//! starts while another holds the home sees the home as it is, through an upper of its own;
//! what it writes there is not kept, and its step says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{Env, Run};

/// The `upperdir=` of the overlay mounted at the sandbox's `$HOME`, as the command printed it.
fn home_upper(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("upper: "))
        .unwrap_or_else(|| panic!("no home overlay line in:\n{stdout}"))
        .to_string()
}

/// Prints the home overlay's upper directory as `upper: DIR` (from the sandbox's mount table).
const PRINT_UPPER: &str = r#"awk -v h="$HOME" '$5 == h { for (i = 1; i <= NF; i++) if ($i ~ /upperdir=/) { n = split($i, o, ","); for (j = 1; j <= n; j++) if (o[j] ~ /^upperdir=/) print "upper: " substr(o[j], 10) } }' /proc/self/mountinfo"#;

/// Waits for `path` to exist (written by a sandboxed command): an event, bounded only so a
/// broken run fails instead of hanging.
fn wait_for(path: &Path, what: &str) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{what}: {} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `envgit ARGS` in the project, its store home at `envgit_home`.
fn envgit(env: &Env, envgit_home: &Path, args: &[&str]) -> Command {
    let mut c = env.cmd(&env.project);
    c.env("ENVGIT_HOME", envgit_home).args(args);
    c
}

fn run(env: &Env, envgit_home: &Path, args: &[&str]) -> Run {
    Run::from(envgit(env, envgit_home, args).output().unwrap()).ok()
}

fn notes_of(env: &Env, envgit_home: &Path, step: u64) -> Vec<String> {
    let shown = run(env, envgit_home, &["show", &step.to_string(), "--json"]).json();
    shown["notes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// A step started while another runs: both succeed, over different upper directories; the
/// second's home writes are not kept and its step says so; the first's are kept.
fn beside_a_running_step(env: &Env, envgit_home: &Path, sees_shared: bool) {
    env.write("a.txt", "a\n");
    run(env, envgit_home, &["init"]);
    // The holder: writes in the home, says it is running, and waits for `go` (a file the test
    // writes once the second step is over).
    let script = format!(
        "echo one > ~/first && {PRINT_UPPER} && touch running && \
         while [ ! -e go ]; do sleep 0.02; done && echo kept > ~/kept"
    );
    let holder = envgit(env, envgit_home, &["run", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&env.path("running"), "the first step");

    let beside = run(
        env,
        envgit_home,
        &[
            "run",
            "sh",
            "-c",
            &format!(
                "(cat ~/first 2>/dev/null || echo no-first) && {PRINT_UPPER} && \
                 echo two > ~/second && echo wrote"
            ),
        ],
    );
    assert!(
        beside.stdout.contains("wrote"),
        "{}{}",
        beside.stdout,
        beside.stderr
    );
    let seen = if sees_shared { "one\n" } else { "no-first\n" };
    assert!(beside.stdout.contains(seen), "{seen:?}: {}", beside.stdout);

    env.write("go", "");
    let held = Run::from(holder.wait_with_output().unwrap()).ok();
    assert_ne!(
        home_upper(&held.stdout),
        home_upper(&beside.stdout),
        "two live sandboxes mounted the home over the same upper directory"
    );

    let steps = run(env, envgit_home, &["log", "--json"]).json();
    let steps = steps.as_array().unwrap();
    let number_of = |needle: &str| {
        steps
            .iter()
            .find(|s| s["summary"].as_str().is_some_and(|t| t.contains(needle)))
            .and_then(|s| s["number"].as_u64())
            .unwrap_or_else(|| panic!("no step running {needle:?}: {steps:#?}"))
    };
    let beside_notes = notes_of(env, envgit_home, number_of("echo two"));
    assert!(
        beside_notes
            .iter()
            .any(|n| n.contains("home") && n.contains("not kept")),
        "the step beside says its home writes were not kept: {beside_notes:?}"
    );
    let held_notes = notes_of(env, envgit_home, number_of("echo kept"));
    assert!(
        !held_notes.iter().any(|n| n.contains("not kept")),
        "{held_notes:?}"
    );

    // The holder's writes stay for the next step; the one beside it left nothing there.
    let after = run(
        env,
        envgit_home,
        &[
            "run",
            "sh",
            "-c",
            "cat ~/first ~/kept && test ! -e ~/second && echo second-gone",
        ],
    );
    assert!(
        after.stdout.contains("one\nkept\nsecond-gone"),
        "{}{}",
        after.stdout,
        after.stderr
    );
    let projects = envgit_home.join("projects");
    for store in std::fs::read_dir(&projects).unwrap().flatten() {
        let homes = store.path().join("homes");
        let left: Vec<_> = std::fs::read_dir(&homes)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "private homes left in {}: {left:?}",
            homes.display()
        );
    }
}

/// The store outside the home: the step beside sees the shared home through its own layer.
#[test]
fn a_step_beside_a_running_one_gets_a_home_of_its_own() {
    let env = Env::new();
    let envgit_home = env.project.parent().unwrap().join("envgit-home");
    beside_a_running_step(&env, &envgit_home, true);
}

/// The store inside the home, as by default (`~/.local/share/envgit`): overlayfs refuses a
/// lower layer inside another, so the step beside sees the host's home under its own layer.
#[test]
fn a_step_beside_a_running_one_gets_a_home_of_its_own_when_the_store_is_in_the_home() {
    let env = Env::new();
    let envgit_home = env.user_home().join(".local/share/envgit");
    beside_a_running_step(&env, &envgit_home, false);
}

/// A step started after another has ended takes the shared home again: its writes are kept.
#[test]
fn steps_one_after_another_share_the_home() {
    let env = Env::new();
    env.init();
    env.envgit(&["run", "sh", "-c", "echo one > ~/first"]).ok();
    let second = env.envgit(&["run", "sh", "-c", "cat ~/first"]).ok();
    assert!(
        second.stdout.contains("one"),
        "{}{}",
        second.stdout,
        second.stderr
    );
    for step in env.log_json() {
        let n = step["number"].as_u64().unwrap();
        assert!(
            !notes_of(&env, &env.home, n)
                .iter()
                .any(|t| t.contains("not kept")),
            "step {n}: {step:#}"
        );
    }
}

/// A run killed while it had a home of its own leaves that upper behind; the next run of the
/// project sends it to the trash (its lock is no longer held).
#[test]
fn a_home_left_by_a_killed_run_goes_with_the_next() {
    let env = Env::new();
    let envgit_home = env.project.parent().unwrap().join("envgit-home");
    run(&env, &envgit_home, &["init"]);
    let spawn = |script: &str| {
        envgit(&env, &envgit_home, &["run", "sh", "-c", script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let holder = spawn("touch holding && while [ ! -e go ]; do sleep 0.02; done");
    wait_for(&env.path("holding"), "the first step");
    let mut beside = spawn("touch beside && while [ ! -e never ]; do sleep 0.02; done");
    wait_for(&env.path("beside"), "the step beside");
    let store = std::fs::read_dir(envgit_home.join("projects"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let homes = store.join("homes");
    let listed = |dir: &Path| -> Vec<std::ffi::OsString> {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        listed(&homes).len(),
        1,
        "the step beside has a home of its own"
    );
    beside.kill().unwrap();
    beside.wait().unwrap();
    assert_eq!(
        listed(&homes).len(),
        1,
        "a killed run leaves its home behind"
    );

    env.write("go", "");
    Run::from(holder.wait_with_output().unwrap()).ok();
    run(&env, &envgit_home, &["run", "true"]);
    assert!(listed(&homes).is_empty(), "left: {:?}", listed(&homes));
}
