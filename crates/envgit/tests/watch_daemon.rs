//! `envgit watch`: a daemon keeps inotify watches on the project, and `envgit run` asks it what
//! changed instead of walking the project. The daemon may only make a step cheaper, never
//! different: after every run the step's snapshot, materialised by `envgit fork`, is the
//! project byte for byte, whatever was changed outside or by the command; a daemon that is
//! killed, stale or started with another configuration is never trusted; its socket is out of
//! the sandbox's reach.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use support::{Env, Run};

fn project() -> Env {
    let env = Env::new();
    env.write("a.txt", "one\n");
    env.write("src/b.txt", "two\n");
    env.write("src/deep/c.txt", "three\n");
    env.init();
    env
}

/// `envgit run` with the phases on stderr; whether it asked the daemon.
fn run(env: &Env, script: &str) -> (Run, bool) {
    let out = env
        .cmd(&env.project)
        .env("ENVGIT_TIMINGS", "1")
        .args(["run", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let r = Run::from(out).ok();
    let asked = r.stderr.contains("timing: watching daemon asked");
    (r, asked)
}

fn newest_step(env: &Env) -> u64 {
    env.log_json()[0]["number"].as_u64().unwrap()
}

/// The newest step's snapshot, forked into a new directory, is the project (`envgit.yaml`
/// aside, which a fork writes afresh): every path, type, mode and byte.
fn assert_snapshot_is_the_project(env: &Env, context: &str) {
    let n = newest_step(env).to_string();
    let to = env.tmp.path().join(format!("fork-{n}"));
    env.envgit(&["fork", &n, to.to_str().unwrap()]).ok();
    let diff = std::process::Command::new("diff")
        .args(["-r", "--no-dereference", "-x", "envgit.yaml"])
        .arg(&env.project)
        .arg(&to)
        .output()
        .unwrap();
    let modes = |root: &Path| {
        let out = std::process::Command::new("find")
            .arg(".")
            .args(["-not", "-name", "envgit.yaml", "-printf", "%p %M\n"])
            .current_dir(root)
            .output()
            .unwrap();
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    assert!(
        diff.status.success(),
        "{context}: step {n}'s snapshot differs from the project:\n{}",
        String::from_utf8_lossy(&diff.stdout)
    );
    assert_eq!(modes(&env.project), modes(&to), "{context}: modes");
}

fn status(env: &Env) -> serde_json::Value {
    env.envgit(&["watch", "status", "--json"]).ok().json()
}

/// `envgit doctor`'s line about the daemon.
fn doctor_line(env: &Env) -> serde_json::Value {
    let report = env.envgit(&["doctor", "--json"]).json();
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "watch daemon")
        .cloned()
        .expect("a watch daemon line")
}

#[test]
fn runs_fed_by_the_daemon_snapshot_exactly_what_a_walk_would() {
    let env = project();
    assert_eq!(status(&env)["running"], false);
    let line = doctor_line(&env);
    assert!(
        line["detail"].as_str().unwrap().contains("not running"),
        "{line}"
    );
    let started = env.envgit(&["watch", "start"]).ok();
    assert!(started.stdout.contains("watching"), "{}", started.stdout);
    assert_eq!(status(&env)["running"], true);
    let line = doctor_line(&env);
    assert_eq!(
        (&line["ok"], &line["required"]),
        (&true.into(), &false.into()),
        "{line}"
    );
    assert!(
        line["detail"]
            .as_str()
            .unwrap()
            .contains("directories watched"),
        "{line}"
    );
    // The first run has no token yet: it reads everything, and saves one.
    let (_, asked) = run(&env, "true");
    assert!(asked, "the run asked the daemon");
    assert!(env.store_dir().join("stat.watch").is_file());
    let steps: &[(&str, &str)] = &[
        (
            "an edit outside, one by the command",
            "echo more >> src/b.txt",
        ),
        (
            "new nested directories",
            "mkdir -p n/m/o && echo x > n/m/o/f && echo y > n/g",
        ),
        (
            "a directory moved",
            "mv src/deep src/moved && echo z > src/moved/new",
        ),
        (
            "a directory replaced by a file",
            "rm -r n/m && echo file > n/m",
        ),
        (
            "a file replaced by a directory",
            "rm a.txt && mkdir a.txt && echo in > a.txt/x",
        ),
        (
            "modes and a symlink",
            "chmod 755 src/b.txt && ln -s ../src n/link",
        ),
        ("removals", "rm -r src/moved && rm n/g"),
    ];
    let mut outside = 0;
    for (what, script) in steps {
        // Also an edit nobody recorded, between the steps, of the same size with the mtime
        // set back: only inotify (or reading the file) tells.
        outside += 1;
        env.write("outside.txt", &format!("outside {outside}\n"));
        env.sh("touch -d '2020-01-02 03:04:05' outside.txt").ok();
        let (_, asked) = run(&env, script);
        assert!(asked, "{what}: the run asked the daemon");
        assert_snapshot_is_the_project(&env, what);
    }
    env.envgit(&["watch", "stop"]).ok();
    assert_eq!(status(&env)["running"], false);
    // Without the daemon, the next run walks again and agrees.
    env.write("after.txt", "after\n");
    let (_, asked) = run(&env, "echo last > last.txt");
    assert!(!asked);
    assert_snapshot_is_the_project(&env, "after the daemon stopped");
}

#[test]
fn rewind_asks_the_daemon_and_still_records_an_edit_nobody_recorded() {
    let env = project();
    env.envgit(&["watch", "start"]).ok();
    run(&env, "echo 1 > one.txt");
    let target = newest_step(&env);
    run(&env, "mkdir -p d/e && echo 2 > d/e/two.txt && rm src/b.txt");
    env.write("src/outside.txt", "nobody recorded this\n");
    let out = env
        .cmd(&env.project)
        .env("ENVGIT_TIMINGS", "1")
        .args(["rewind", &target.to_string(), "--json"])
        .output()
        .unwrap();
    let r = Run::from(out).ok();
    assert!(
        r.stderr.contains("timing: watching daemon asked"),
        "{}",
        r.stderr
    );
    let json = r.json();
    let recorded: Vec<&str> = json["recorded_first"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(recorded, ["src/outside.txt"], "{json}");
    assert!(!env.path("src/outside.txt").exists());
    assert!(!env.path("d").exists());
    assert_eq!(env.read("src/b.txt"), "two\n");
    assert_snapshot_is_the_project(&env, "after the rewind");
    // The next run, fed by the daemon from the rewind's token, agrees too.
    let (_, asked) = run(&env, "echo after > after.txt");
    assert!(asked);
    assert_snapshot_is_the_project(&env, "a run after the rewind");
    env.envgit(&["watch", "stop"]).ok();
}

#[test]
fn a_killed_daemon_or_a_stale_token_is_never_trusted() {
    let env = project();
    env.envgit(&["watch", "start"]).ok();
    run(&env, "true");
    let pid = status(&env)["daemon"]["pid"].as_u64().unwrap();
    // Killed: edits made while nothing watches are still found (its socket is left behind,
    // refusing connections).
    env.sh(&format!("kill -9 {pid}")).ok();
    env.write("src/while-dead.txt", "nobody watched\n");
    let (r, asked) = run(&env, "echo x > src/by-command.txt");
    assert!(!asked);
    // Nothing answers on that socket: the run knows no daemon watches.
    assert!(
        r.stderr.contains("no watching daemon answered"),
        "{}",
        r.stderr
    );
    assert_snapshot_is_the_project(&env, "the daemon killed");
    // A new daemon: the token saved with the index is another daemon's, so the first run
    // reads everything, even an edit made before it started.
    env.write("src/before-restart.txt", "before\n");
    env.envgit(&["watch", "start"]).ok();
    let (_, asked) = run(&env, "true");
    assert!(asked);
    assert_snapshot_is_the_project(&env, "a new daemon");
    // The index rewritten by a command that did not ask the daemon (`record`) voids the token.
    env.write("src/recorded.txt", "recorded\n");
    env.record();
    env.write("src/after-record.txt", "after\n");
    let (_, asked) = run(&env, "true");
    assert!(asked);
    assert_snapshot_is_the_project(&env, "after a record");
    env.envgit(&["watch", "stop"]).ok();
}

/// The sockets of this test's watching daemons (`$ENVGIT_HOME/rt-UID/watch-*.sock`).
fn daemon_sockets(env: &Env) -> Vec<std::path::PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    std::fs::read_dir(env.home.join(format!("rt-{uid}")))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".sock"))
                .collect()
        })
        .unwrap_or_default()
}

/// A daemon killed leaves its socket; `watch stop` removes it and says so, and only then.
#[test]
fn watch_stop_removes_the_socket_a_killed_daemon_left() {
    let env = project();
    env.envgit(&["watch", "start"]).ok();
    let sockets = daemon_sockets(&env);
    assert_eq!(sockets.len(), 1, "{sockets:?}");
    let pid = status(&env)["daemon"]["pid"].as_u64().unwrap();
    env.sh(&format!("kill -9 {pid}")).ok();
    // The kernel closes the listening socket as the process exits: wait for that, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&sockets[0]).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not die"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        sockets[0].exists(),
        "the kill left no socket: nothing to test"
    );
    let stop = env.envgit(&["watch", "stop"]).ok();
    assert!(
        stop.stdout
            .contains("removed the socket one that was killed left behind"),
        "{}",
        stop.stdout
    );
    assert!(daemon_sockets(&env).is_empty());
    let again = env.envgit(&["watch", "stop"]).ok();
    assert_eq!(again.stdout, "no daemon was watching this project\n");
    assert_eq!(status(&env)["running"], false);
}

/// Every command connects to the daemon as it opens the store; one with nothing to ask it (a
/// `record`, a run its policy refuses) closes the connection unused, which the daemon takes as
/// nothing wrong: its log stays empty.
#[test]
fn a_command_that_asks_the_daemon_nothing_leaves_its_log_clean() {
    let env = project();
    env.deny_push_and_publish();
    env.envgit(&["watch", "start"]).ok();
    env.write("src/recorded.txt", "recorded\n");
    env.record();
    let refused = env
        .cmd(&env.project)
        .args(["run", "--", "npm", "publish"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(126), "{refused:?}");
    let (_, asked) = run(&env, "true");
    assert!(asked);
    env.envgit(&["watch", "stop"]).ok();
    let log = std::fs::read_to_string(env.store_dir().join("watch.log")).unwrap_or_default();
    assert!(!log.contains("a client"), "{log}");
}

#[test]
fn a_daemon_started_with_other_excludes_is_not_taken_at_its_word() {
    let env = project();
    env.envgit(&["watch", "start"]).ok();
    run(&env, "true");
    // `snapshot.exclude` changes: the daemon watches by the old configuration.
    let policy = env.read("envgit.yaml");
    let edited = policy.replacen("  exclude: [", "  exclude: [\"cache/\", ", 1);
    assert_ne!(policy, edited, "envgit.yaml has a snapshot.exclude line");
    std::fs::write(env.path("envgit.yaml"), edited).unwrap();
    env.write("src/new.txt", "new\n");
    let (r, asked) = run(&env, "true");
    assert!(!asked);
    assert!(
        r.stderr.contains("envgit watch stop && envgit watch start"),
        "{}",
        r.stderr
    );
    assert_snapshot_is_the_project(&env, "other excludes");
    let line = doctor_line(&env);
    assert_eq!(line["ok"], false, "{line}");
    assert_eq!(
        line["fix"], "envgit watch stop && envgit watch start",
        "{line}"
    );
    env.envgit(&["watch", "stop"]).ok();
}

#[test]
fn the_sandbox_cannot_reach_the_daemons_socket() {
    let env = project();
    env.envgit(&["watch", "start"]).ok();
    let uid = env.sh("id -u").ok().stdout.trim().to_owned();
    let rt = env.home.join(format!("rt-{uid}"));
    let socket = std::fs::read_dir(&rt)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("watch-")
        })
        .expect("the daemon's socket");
    let probe = format!(
        "test -e {s} && echo visible; python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"{s}\"); print(\"connected\")' 2>/dev/null; true",
        s = socket.display()
    );
    let (r, _) = run(&env, &probe);
    assert!(!r.stdout.contains("visible"), "{}", r.stdout);
    assert!(!r.stdout.contains("connected"), "{}", r.stdout);
    env.envgit(&["watch", "stop"]).ok();
}

/// With the daemon, a step takes the listing of `node_modules/` (excluded from snapshots,
/// searched only for `.env` files to mask) as cached while the daemon saw no event there.
/// A secret that appears there (made, moved, in a new directory, deep) is masked in the next
/// step all the same, and so is one made while no daemon watched.
#[test]
fn a_secret_made_where_the_scan_does_not_go_is_masked_at_the_next_step() {
    let env = Env::new();
    env.write("src/main.js", "x\n");
    env.write("node_modules/pkg/lib/index.js", "module.exports = 1\n");
    env.init();
    assert!(
        env.read("envgit.yaml").contains("node_modules/"),
        "the default policy no longer excludes node_modules/"
    );
    env.envgit(&["watch", "start"]).ok();
    let daemon = &status(&env)["daemon"];
    assert_eq!(daemon["excluded_counted"], true, "{daemon}");
    // node_modules, pkg, lib.
    assert_eq!(daemon["excluded_watches"], 3, "{daemon}");
    const VOUCHED: &str = "listing taken on the daemon's word";
    // The first step lists and saves what it found with the daemon's count; the next takes it.
    run(&env, "true");
    let (r, _) = run(&env, "cat node_modules/pkg/lib/index.js");
    assert!(r.stderr.contains(VOUCHED), "never vouched: {}", r.stderr);
    let masked = |what: &str, rel: &str| {
        let (r, asked) = run(&env, &format!("cat {rel} || echo unreadable"));
        assert!(asked, "{what}: the daemon was not asked");
        assert!(
            !r.stdout.contains("SECRET") && r.stdout.contains("unreadable"),
            "{what}: {rel} readable inside: {}",
            r.stdout
        );
        assert!(
            !r.stderr.contains(VOUCHED),
            "{what}: vouched after a change"
        );
        // Nothing changed since: the next step takes the listing again, still masking it.
        let (r, _) = run(&env, &format!("cat {rel} || echo unreadable"));
        assert!(r.stderr.contains(VOUCHED), "{what}: not vouched again");
        assert!(
            !r.stdout.contains("SECRET"),
            "{what}: readable once vouched"
        );
    };
    env.write("node_modules/pkg/lib/.env", "SECRET=1\n");
    masked("made deep inside", "node_modules/pkg/lib/.env");
    // A directory made there is watched too: a secret made in it once the listing is vouched
    // for again is seen.
    std::fs::create_dir_all(env.path("node_modules/new/deeper")).unwrap();
    run(&env, "true");
    let (r, _) = run(&env, "true");
    assert!(r.stderr.contains(VOUCHED), "not vouched: {}", r.stderr);
    env.write("node_modules/new/deeper/.env.local", "SECRET=2\n");
    masked(
        "made in a new directory",
        "node_modules/new/deeper/.env.local",
    );
    std::fs::rename(env.path("node_modules/pkg"), env.path("node_modules/moved")).unwrap();
    masked("moved with its directory", "node_modules/moved/lib/.env");
    // And a moved one, where it is now.
    env.write(
        "node_modules/moved/lib/.npmrc",
        "//registry/:_authToken=SECRET\n",
    );
    masked("made in a moved directory", "node_modules/moved/lib/.npmrc");
    // Made while no daemon watched: a new daemon's count is never the saved one.
    env.envgit(&["watch", "stop"]).ok();
    env.write("node_modules/new/.env", "SECRET=3\n");
    env.envgit(&["watch", "start"]).ok();
    masked("made while no daemon watched", "node_modules/new/.env");
    env.envgit(&["watch", "stop"]).ok();
}

/// With the daemon, a step that leaves the excluded directories alone does not list them
/// again after it (the daemon counted no event there); one that makes a repository there
/// moves the count, so the repository is found and its code taken as without a daemon.
#[test]
fn a_repository_made_where_the_scan_does_not_go_is_found_with_the_daemon() {
    let env = Env::new();
    env.write("src/main.js", "x\n");
    env.write("node_modules/pkg/lib/index.js", "module.exports = 1\n");
    env.init();
    env.envgit(&["watch", "start"]).ok();
    const UNCHANGED: &str = "excluded directories unchanged on the daemon's word";
    run(&env, "true");
    let (r, asked) = run(&env, "echo quiet > src/main.js");
    assert!(asked, "the daemon was not asked: {}", r.stderr);
    assert!(r.stderr.contains(UNCHANGED), "listed again: {}", r.stderr);
    let marker = env.tmp.path().join("MARKER");
    let (r, _) = run(
        &env,
        &format!(
            "git init -q node_modules/pkg && \
             git -C node_modules/pkg config core.fsmonitor 'touch {}; false'",
            marker.display()
        ),
    );
    assert!(!r.stderr.contains(UNCHANGED), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("node_modules/pkg/.git/config core.fsmonitor"),
        "{}",
        r.stderr
    );
    let _ = env
        .host_git(&env.path("node_modules/pkg"))
        .arg("status")
        .output()
        .unwrap();
    assert!(!marker.exists(), "the host's git ran the step's fsmonitor");
    env.envgit(&["watch", "stop"]).ok();
}
