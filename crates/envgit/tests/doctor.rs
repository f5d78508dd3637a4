//! `envgit doctor` with the real binary: it passes on this machine (live probe included), names
//! `envgit.yaml:LINE:COL` for a broken policy, and says how to fix a store envgit cannot use.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;
use support::Env;

struct Doctor {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `envgit doctor` in `dir`, with HOME and ENVGIT_HOME inside the test's temporary directory.
fn doctor(env: &Env, dir: &Path, json: bool) -> Doctor {
    let mut c = env.cmd(dir);
    c.env("HOME", env.user_home())
        .env_remove("XDG_DATA_HOME")
        .arg("doctor");
    if json {
        c.arg("--json");
    }
    let o = c.output().unwrap();
    Doctor {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn checks(v: &Value) -> &Vec<Value> {
    v["checks"].as_array().unwrap()
}

fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    checks(v)
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {v:#}"))
}

fn failed_required(v: &Value) -> Vec<String> {
    checks(v)
        .iter()
        .filter(|c| c["required"] == true && c["ok"] != true)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn doctor_passes_on_this_machine() {
    let env = Env::new();

    // Outside a project: the project lines are skipped, and the report says so.
    let d = doctor(&env, &env.project, true);
    assert_eq!(d.code, 0, "{}\n{}", d.stdout, d.stderr);
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v:#}");
    assert!(failed_required(&v).is_empty(), "{v:#}");
    for name in [
        "kernel",
        "user namespaces",
        "Landlock",
        "seccomp",
        "store location",
        "store free space",
        "git",
        "sandboxed `true`",
        "selftest (quick)",
    ] {
        let c = check(&v, name);
        assert_eq!(c["required"], true, "{c:#}");
        assert_eq!(c["ok"], true, "{c:#}");
        assert!(c.get("fix").is_none(), "{c:#}");
    }
    assert!(
        check(&v, "project")["detail"]
            .as_str()
            .unwrap()
            .contains("skipped")
    );
    let gated = check(&v, "selftest (quick)")["detail"].as_str().unwrap();
    assert!(
        gated.ends_with("tried for real in the sandbox and gate; all held"),
        "{gated}"
    );
    for name in ["claude", "codex", "copilot", "/dev/kvm", "inotify watches"] {
        assert_eq!(check(&v, name)["required"], false, "{v:#}");
    }
    // This machine's limit, as the kernel says it.
    let limit = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches").unwrap();
    let watches = check(&v, "inotify watches")["detail"].as_str().unwrap();
    assert!(
        watches.starts_with(&format!("{} per user", limit.trim())),
        "{watches}"
    );

    // Inside a project: its policy parses and its store passes fsck; human output.
    env.init();
    let d = doctor(&env, &env.project, false);
    assert_eq!(d.code, 0, "{}\n{}", d.stdout, d.stderr);
    let required = d.stdout.split("Optional").next().unwrap();
    assert!(!required.contains('✗'), "{}", d.stdout);
    assert!(required.contains("✓ policy"), "{}", d.stdout);
    assert!(
        required.contains("fsck: ") && required.contains("clean"),
        "{}",
        d.stdout
    );
    assert!(
        d.stdout.contains("all required checks pass"),
        "{}",
        d.stdout
    );
}

#[test]
fn a_broken_policy_fails_with_its_line_and_column() {
    let env = Env::new();
    env.init();
    env.write("envgit.yaml", "version: 1\nsnapshot:\n  exclud: []\n");
    let sub = env.path("src");
    std::fs::create_dir_all(&sub).unwrap();

    // From a subdirectory: the project is found upward, as other commands find it.
    let d = doctor(&env, &sub, true);
    assert_eq!(d.code, 1, "{}\n{}", d.stdout, d.stderr);
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(failed_required(&v), ["policy"], "{v:#}");
    let policy = check(&v, "policy");
    let detail = policy["detail"].as_str().unwrap();
    assert!(detail.contains("envgit.yaml:3:3"), "{detail}");
    assert!(detail.contains("exclud"), "{detail}");
    assert!(policy["fix"].as_str().unwrap().contains("line 3, column 3"));

    let d = doctor(&env, &env.project, false);
    assert_eq!(d.code, 1);
    assert!(d.stdout.contains("✗ policy"), "{}", d.stdout);
    assert!(d.stdout.contains("envgit.yaml:3:3"), "{}", d.stdout);
    assert!(
        d.stdout.contains("1 required check(s) failed"),
        "{}",
        d.stdout
    );
}

/// Puts the store's mode back so the temporary directory can be removed, even on a panic.
struct Restore<'a>(&'a Path);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(self.0, std::fs::Permissions::from_mode(0o700));
    }
}

#[test]
fn an_unusable_store_fails_with_the_fix() {
    let env = Env::new();
    std::fs::create_dir_all(&env.home).unwrap();
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o000)).unwrap();
    let _restore = Restore(&env.home);
    let home = env.home.display().to_string();

    // Root reads and writes a mode-000 directory anyway; the check is on the mode, so it fails
    // the same for root and for anyone else.
    let d = doctor(&env, &env.project, false);
    assert_eq!(d.code, 1, "{}\n{}", d.stdout, d.stderr);
    assert!(
        d.stdout.contains(&format!(
            "store directory {home} has mode 000: envgit cannot use it"
        )),
        "{}",
        d.stdout
    );
    assert!(
        d.stdout.contains(&format!("fix: chmod 700 {home}")),
        "{}",
        d.stdout
    );

    let d = doctor(&env, &env.project, true);
    assert_eq!(d.code, 1);
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let perms = check(&v, "store permissions");
    assert_eq!(perms["ok"], false);
    assert_eq!(perms["fix"], format!("chmod 700 {home}"));
    // Nothing else is wrong: the live probe uses a store of its own.
    let failed = failed_required(&v);
    assert!(
        failed
            .iter()
            .all(|n| n == "store permissions" || n == "store access"),
        "{failed:?}"
    );

    // A store that others can read is refused too, with the same fix.
    std::fs::set_permissions(&env.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = doctor(&env, &env.project, true);
    assert_eq!(d.code, 1);
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    let perms = check(&v, "store permissions");
    assert!(
        perms["detail"]
            .as_str()
            .unwrap()
            .contains("other users can read"),
        "{perms:#}"
    );
    assert_eq!(perms["fix"], format!("chmod 700 {home}"));
}

/// Steps keep their sockets and trust files on tmpfs; a directory someone else could enter
/// there is never used (the steps fall back to `$ENVGIT_HOME/rt-UID`) and doctor says why.
#[test]
fn doctor_says_where_steps_keep_their_files_and_why_not_on_tmpfs() {
    let env = Env::new();
    env.init();
    let shm_is_tmpfs = std::process::Command::new("stat")
        .args(["-f", "-c", "%T", "/dev/shm"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "tmpfs");
    let v: Value = serde_json::from_str(&doctor(&env, &env.project, true).stdout).unwrap();
    let c = check(&v, "step files");
    assert_eq!(c["required"], false, "{c}");
    if !shm_is_tmpfs {
        assert_eq!(c["ok"], false, "{c}");
        return;
    }
    assert_eq!(c["ok"], true, "{c}");
    let detail = c["detail"].as_str().unwrap();
    let dir = Path::new(detail.strip_suffix(" (tmpfs)").unwrap()).to_path_buf();
    assert!(dir.starts_with("/dev/shm") && dir.is_dir(), "{detail}");
    // Made first with a mode others may enter: not used, and doctor says why.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let v: Value = serde_json::from_str(&doctor(&env, &env.project, true).stdout).unwrap();
    let c = check(&v, "step files");
    assert_eq!(c["ok"], false, "{c}");
    assert!(
        c["detail"]
            .as_str()
            .unwrap()
            .contains("not a directory of this user alone"),
        "{c}"
    );
    let mut step = env
        .cmd(&env.project)
        .args([
            "run",
            "sh",
            "-c",
            "touch started; while [ ! -e go ]; do sleep 0.05; done",
        ])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !env.path("started").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the step never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let in_shm = std::fs::read_dir(&dir).unwrap().count();
    let uid = env.sh("id -u").ok().stdout.trim().to_owned();
    let on_disk: Vec<String> = std::fs::read_dir(env.home.join(format!("rt-{uid}")))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{}-", step.id())))
        .collect();
    env.write("go", "");
    assert!(step.wait().unwrap().success());
    assert_eq!(in_shm, 0, "a step used the directory others may enter");
    assert_eq!(
        on_disk.len(),
        1,
        "the step's directory is not under rt-{uid}"
    );
    std::fs::remove_dir(&dir).unwrap();
}

/// A person who is not root runs `doctor`: its temporary projects and stores leave nothing
/// behind, in their `TMPDIR` or on tmpfs. The home overlay's work directory in such a store is
/// one the kernel makes with mode 0, which only root's override lets a plain recursive removal
/// into.
#[test]
fn as_a_user_doctor_leaves_nothing_behind() {
    let env = Env::new();
    let Some((out, left)) = env.as_a_user_in_own_tmpdir(&["doctor", "--json"]) else {
        eprintln!("skipped: needs root (to run envgit as another user)");
        return;
    };
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    // The live probe ran a sandboxed step in its temporary project (else it made no overlay).
    assert_eq!(check(&v, "sandboxed `true`")["ok"], true, "{v:#}");
    assert_eq!(check(&v, "selftest (quick)")["ok"], true, "{v:#}");
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// What the person's own settings make read-only in the sandbox is named with the setting, so
/// a tool that fails with "read-only file system" on it has its reason.
#[test]
fn the_project_files_the_persons_settings_name_are_listed() {
    let env = Env::new();
    env.init();
    std::fs::create_dir_all(env.user_home()).unwrap();
    std::fs::write(
        env.user_home().join(".gitconfig"),
        "[core]\n\thooksPath = .githooks\n[alias]\n\tst = !./tools/st.sh\n",
    )
    .unwrap();
    let plain = doctor(&env, &env.project, true);
    let v: Value = serde_json::from_str(&plain.stdout).unwrap();
    let listed = check(&v, "read-only by your settings");
    assert_eq!(listed["required"], false, "{listed:#}");
    let detail = listed["detail"].as_str().unwrap();
    assert!(
        detail.contains(".githooks (git's core.hookspath)")
            && detail.contains("tools/st.sh (git's alias.st)"),
        "{detail}"
    );
    let pnp = env.path(".pnp.cjs").display().to_string();
    let d = env
        .cmd(&env.project)
        .env("HOME", env.user_home())
        .env_remove("XDG_DATA_HOME")
        .env("NODE_OPTIONS", format!("--require {pnp}"))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&d.stdout).unwrap();
    let detail = check(&v, "read-only by your settings")["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.contains(".pnp.cjs (NODE_OPTIONS)"), "{detail}");
}
