//! envgit as root on a project another user owns (a container's root with the repository
//! bind-mounted from the host): the command runs as the project's owner, writes what they can
//! and nothing only root could; what it leaves setuid is not; `doctor` and the first `run`
//! say when project files are not writable by the command's user. These tests need root
//! (they run as root here and in CI) and say so when skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use support::{Env, Run};

const OWNER: u32 = 1001;

fn is_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

fn chown_r(path: &Path, spec: &str) {
    let ok = Command::new("chown")
        .args(["-R", spec])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chown -R {spec} {}", path.display());
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// A project owned by uid 1001 (`chown -R`), initialized by root.
fn owned_project() -> Env {
    let env = Env::new();
    env.write("sub/a.txt", "a\n");
    env.write("README", "hello\n");
    chown_r(&env.project, &format!("{OWNER}:{OWNER}"));
    env.init();
    env
}

/// The newest step (`log --json` lists newest first).
fn newest(env: &Env) -> serde_json::Value {
    env.log_json().first().unwrap().clone()
}

fn run(env: &Env, script: &str) -> Run {
    env.envgit(&["run", "sh", "-c", script])
}

#[test]
fn the_command_runs_as_the_projects_owner_and_its_files_stay_theirs() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = owned_project();
    let r = run(
        &env,
        "echo x > sub/newfile && touch sub && id -u && id -g && id -G && \
         echo h > \"$HOME/.h\" && mkdir -p \"$HOME/.cache/t\" && echo \"home=$HOME user=$USER\"",
    )
    .ok();
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        &lines[..3],
        &[OWNER.to_string(), OWNER.to_string(), OWNER.to_string()],
        "uid, gid and groups inside (no group of root's):\n{}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.stdout.contains(&format!("home=/home/envgit-{OWNER} ")),
        "{}",
        r.stdout
    );
    let newfile = env.path("sub/newfile");
    assert_eq!(std::fs::read_to_string(&newfile).unwrap(), "x\n");
    let meta = std::fs::metadata(&newfile).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (OWNER, OWNER));
    // envgit init left its policy file the owner's too.
    assert_eq!(
        std::fs::metadata(env.path("envgit.yaml")).unwrap().uid(),
        OWNER
    );
    // The step says who it ran as.
    let notes = newest(&env)["notes"].to_string();
    assert!(notes.contains(&format!("ran as uid {OWNER}")), "{notes}");

    // The owner's home persists between steps (like the home overlay of a run by the owner).
    run(&env, "cat \"$HOME/.h\" && test -d \"$HOME/.cache/t\"").ok();

    // Rewind, as root, restores what was deleted as the owner's, not root's.
    std::fs::remove_file(&newfile).unwrap();
    env.envgit(&["rewind", "2"]).ok();
    let meta = std::fs::metadata(&newfile).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (OWNER, OWNER));
}

#[test]
fn root_only_files_stay_out_of_reach() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = owned_project();
    // A directory the view shows (read-only, under /opt) holding a root-only file: the owner
    // must not read it, as on the host.
    let shown = tempfile::Builder::new()
        .prefix("envgit-test-")
        .tempdir_in("/opt")
        .unwrap();
    set_mode(shown.path(), 0o755);
    let secret = shown.path().join("root-secret");
    std::fs::write(&secret, "ROOT-ONLY-CANARY\n").unwrap();
    set_mode(&secret, 0o600);
    let public = shown.path().join("public");
    std::fs::write(&public, "PUBLIC\n").unwrap();
    set_mode(&public, 0o644);
    // Root's home (envgit's $HOME here) is not the command's home, and not in its view.
    std::fs::write(env.user_home().join("root-note"), "ROOT-HOME-CANARY\n").unwrap();
    let r = run(
        &env,
        &format!(
            "cat {}; cat {}; cat {}; echo END",
            public.display(),
            secret.display(),
            env.user_home().join("root-note").display()
        ),
    );
    assert!(r.stdout.contains("PUBLIC"), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("END"), "{}\n{}", r.stdout, r.stderr);
    assert!(
        !r.stdout.contains("ROOT-ONLY-CANARY"),
        "a root-only file was read:\n{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("ROOT-HOME-CANARY"),
        "root's home was read:\n{}",
        r.stdout
    );
}

/// Checks that a step cannot make a file setuid, then that rewind and fork keep one plain.
fn setuid_is_cleared(env: &Env, owner: u32) {
    let r = run(
        env,
        "cp /bin/true ./t && chmod u+s ./t; ls -l ./t; \
         grep -q \" $PWD .*nosuid\" /proc/self/mountinfo && echo NOSUID; true",
    )
    .ok();
    // Refused at the source (seccomp): the bit is never set, inside or out.
    assert!(
        !r.stdout.contains("rws") && r.stderr.contains("Operation not permitted"),
        "the bit was set inside: {}{}",
        r.stdout,
        r.stderr
    );
    let t = env.path("t");
    assert_eq!(
        mode(&t) & 0o6000,
        0,
        "setuid left on the host after the step"
    );
    assert_eq!(std::fs::metadata(&t).unwrap().uid(), owner);
    // Inside, the project is mounted nosuid.
    assert!(r.stdout.contains("NOSUID"), "{}", r.stdout);
    let step = newest(env)["number"].as_u64().unwrap();

    // A bit set outside envgit (a step of an older version, say) does not survive a rewind.
    set_mode(&t, 0o4755);
    env.envgit(&["rewind", &step.to_string()]).ok();
    assert_eq!(mode(&t) & 0o6000, 0, "setuid left after rewind");

    let forked = env.tmp.path().join("fork");
    env.envgit(&["fork", &step.to_string(), forked.to_str().unwrap()])
        .ok();
    let ft = forked.join("t");
    assert!(ft.exists());
    assert_eq!(mode(&ft) & 0o6000, 0, "setuid in the fork");
}

#[test]
fn a_setuid_file_written_inside_is_not_setuid_outside() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    // Root's own project: the command runs as root, so this would be a setuid-root file.
    let env = Env::new();
    env.write("README", "hello\n");
    env.init();
    setuid_is_cleared(&env, 0);
    // Another user's project: the command runs as them.
    let env = owned_project();
    setuid_is_cleared(&env, OWNER);
}

#[test]
fn doctor_and_the_first_run_name_files_the_command_cannot_write() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = owned_project();
    // Left by an earlier run as root: a directory the owner cannot write.
    let egg = env.path("src/requests.egg-info");
    std::fs::create_dir_all(&egg).unwrap();
    std::fs::write(egg.join("PKG-INFO"), "x").unwrap();
    chown_r(&env.path("src"), &format!("{OWNER}:{OWNER}"));
    chown_r(&egg, "0:0");
    set_mode(&egg, 0o755);

    let d = env.envgit(&["doctor", "--json"]);
    let v = d.json();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "project files")
        .unwrap_or_else(|| panic!("no project files check: {v:#}"))
        .clone();
    assert_eq!(check["ok"], false, "{check:#}");
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("src/requests.egg-info"), "{detail}");
    assert!(detail.contains(&format!("uid {OWNER}")), "{detail}");
    let fix = check["fix"].as_str().unwrap();
    assert!(
        fix.starts_with(&format!("chown -R {OWNER}:{OWNER} ")),
        "{fix}"
    );
    assert_ne!(d.code, 0, "a required check failed");

    // The first run says so; the command cannot write there indeed; the next run is quiet.
    let r = run(&env, "touch src/requests.egg-info/x || echo REFUSED");
    assert!(r.stdout.contains("REFUSED"), "{}", r.stdout);
    assert!(
        r.stderr.contains("src/requests.egg-info") && r.stderr.contains("chown -R"),
        "{}",
        r.stderr
    );
    let r = run(&env, "true").ok();
    assert!(!r.stderr.contains("chown"), "{}", r.stderr);

    // Fixed: doctor passes the check.
    chown_r(&env.project, &format!("{OWNER}:{OWNER}"));
    let v = env.envgit(&["doctor", "--json"]).json();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "project files")
        .unwrap()
        .clone();
    assert_eq!(check["ok"], true, "{check:#}");
}

#[test]
fn as_the_owner_doctor_names_files_they_cannot_write() {
    if !is_root() {
        eprintln!("skipped: needs root (to set up files another user owns)");
        return;
    }
    let env = Env::new();
    env.write("sub/a.txt", "a\n");
    env.init();
    // The project is the owner's, but for one directory root made; the owner runs envgit.
    chown_r(env.tmp.path(), &format!("{OWNER}:{OWNER}"));
    std::fs::create_dir_all(env.path("build")).unwrap();
    set_mode(&env.path("build"), 0o755);
    let out = env
        .cmd_of("setpriv", &env.project)
        .args([
            &format!("--reuid={OWNER}"),
            &format!("--regid={OWNER}"),
            "--clear-groups",
        ])
        .arg(support::envgit_bin())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let d = Run::from(out);
    let v = d.json();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "project files")
        .unwrap_or_else(|| panic!("no project files check: {v:#}"))
        .clone();
    assert_eq!(check["ok"], false, "{check:#}");
    assert!(
        check["detail"].as_str().unwrap().contains("build"),
        "{check:#}"
    );
    assert!(
        check["fix"]
            .as_str()
            .unwrap()
            .starts_with(&format!("sudo chown -R {OWNER}:{OWNER} ")),
        "{check:#}"
    );
}

/// A file of the owner's `node_modules/` hard-linked to their pnpm store: envgit (root) makes
/// it the project's own copy, still the owner's, so the command (the owner) can write it and
/// the store's file stays as it was.
#[test]
fn a_linked_file_of_the_owners_becomes_their_own_copy() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = Env::new();
    env.write("README", "hello\n");
    let store = env.tmp.path().join("pnpm-store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("index.js"), "module.exports = 1;\n").unwrap();
    std::fs::create_dir_all(env.path("node_modules/left-pad")).unwrap();
    std::fs::hard_link(
        store.join("index.js"),
        env.path("node_modules/left-pad/index.js"),
    )
    .unwrap();
    chown_r(&env.project, &format!("{OWNER}:{OWNER}"));
    env.init();
    let r = run(
        &env,
        "echo 'process.exit(1)' >> node_modules/left-pad/index.js; echo wrote=$?",
    );
    assert!(r.stdout.contains("wrote=0\n"), "{}{}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(store.join("index.js")).unwrap(),
        "module.exports = 1;\n"
    );
    let copy = std::fs::metadata(env.path("node_modules/left-pad/index.js")).unwrap();
    assert_eq!((copy.uid(), copy.gid(), copy.nlink()), (OWNER, OWNER, 1));
    assert_eq!(mode(&env.path("node_modules/left-pad/index.js")), 0o644);
}
