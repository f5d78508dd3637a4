//! The escape suite: each test runs a real attack inside `envgit run` and asserts that it
//! failed and that its target is unchanged. Tests make their own HOME, canaries and servers
//! (loopback only). And the positive side: what must keep working inside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Read;
use std::path::Path;
use std::process::Command;

use support::{Env, RAN, Run};

const CANARY: &str = "CANARY-7f3a9c-secret-key-material";
const PY: &str = "/usr/bin/python3";

fn project() -> Env {
    let env = Env::new();
    let home = env.user_home();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), CANARY).unwrap();
    std::fs::create_dir_all(home.join("other")).unwrap();
    std::fs::write(home.join("other/.env"), CANARY).unwrap();
    std::fs::write(home.join(".netrc"), CANARY).unwrap();
    env.write(".env", CANARY);
    env.write(".env.example", "EXAMPLE=1");
    env.write("src/main.txt", "hello");
    env.sh("git init -q . && git add -A && git commit -qm init")
        .ok();
    env.write(".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n");
    env.init();
    env
}

fn run(env: &Env, script: &str) -> Run {
    env.envgit(&["run", "sh", "-c", script])
}

/// A directory on the host that the sandbox sees (read-only) and that is not under its
/// private /tmp: canaries and targets there are really within its reach.
fn visible_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("envgit-test-")
        .tempdir_in("/opt")
        .unwrap()
}

/// A directory on the host that the sandbox should not see at all (the rest of /var).
fn var_lib_dir() -> tempfile::TempDir {
    std::fs::create_dir_all("/var/lib").unwrap();
    tempfile::Builder::new()
        .prefix("envgit-test-")
        .tempdir_in("/var/lib")
        .unwrap()
}

#[test]
fn secrets_in_the_home_are_unreadable() {
    let env = project();
    let r = env.attack(
        "echo HOME=$HOME; cat ~/.ssh/id_ed25519; echo cat=$?; ls -la ~/.ssh; echo ls=$?; \
         cat ~/.netrc; echo netrc=$?; cat ~/other/.env; echo dotenv=$?; \
         grep -r CANARY ~ 2>/dev/null; cat /etc/shadow; echo shadow=$?",
    );
    // The planted home is the one the command sees, so the canaries were within its reach.
    assert!(
        r.stdout
            .contains(&format!("HOME={}\n", env.user_home().display())),
        "{}",
        r.stdout
    );
    for what in ["cat", "ls", "netrc", "dotenv", "shadow"] {
        assert!(
            !r.stdout.contains(&format!("{what}=0\n")),
            "{what} succeeded: {}{}",
            r.stdout,
            r.stderr
        );
    }
    assert!(!r.stdout.contains("id_ed25519"), "{}", r.stdout);
    r.assert_lacks(CANARY);
    assert_eq!(
        std::fs::read_to_string(env.user_home().join(".ssh/id_ed25519")).unwrap(),
        CANARY
    );
}

#[test]
fn env_files_in_the_project_are_unreadable_but_examples_are_not() {
    let env = project();
    let r = env.attack("cat .env; echo cat=$?");
    assert!(!r.stdout.contains("cat=0\n"), "{}{}", r.stdout, r.stderr);
    r.assert_lacks(CANARY);
    let r = run(&env, "cat .env.example").ok();
    assert_eq!(r.stdout, "EXAMPLE=1");
    assert_eq!(env.read(".env"), CANARY);
}

/// The zygote masks what only root may read in `/etc` while envgit opens the store, before the
/// step's binds exist: a directory the policy makes writable (bound read-write after) must not
/// uncover such a file below it.
#[test]
fn a_writable_directory_does_not_uncover_a_private_file_below_it() {
    let env = project();
    let dir = tempfile::Builder::new()
        .prefix("envgit-test-")
        .tempdir_in("/etc")
        .unwrap();
    let key = dir.path().join("private.key");
    std::fs::write(&key, CANARY).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let yaml = env.read("envgit.yaml").replace(
        "# filesystem:\n#   deny_read:",
        &format!(
            "filesystem:\n  allow_write: [\"{}\"]\n#   deny_read:",
            dir.path().display()
        ),
    );
    env.write("envgit.yaml", &yaml);
    let r = env.attack(&format!(
        "cat {k}; echo key=$?; touch {d}/made; echo made=$?",
        k = key.display(),
        d = dir.path().display()
    ));
    r.assert_lacks(CANARY);
    // The directory is writable inside (the bind happened), and the key is still masked.
    assert!(r.stdout.contains("made=0\n"), "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("key=1\n"), "{}{}", r.stdout, r.stderr);
}

#[test]
fn links_to_a_secret_do_not_reach_it() {
    let env = project();
    let canary = env.user_home().join(".ssh/id_ed25519");
    // A secret outside home and project, where the sandbox sees the host read-only.
    let outside = visible_dir();
    let secret = outside.path().join("secret.key");
    std::fs::write(&secret, CANARY).unwrap();
    let yaml = env.read("envgit.yaml").replace(
        "# filesystem:\n#   deny_read:",
        &format!(
            "filesystem:\n  deny_read: [\"{}\"]\n#   deny_read:",
            secret.display()
        ),
    );
    env.write("envgit.yaml", &yaml);
    std::os::unix::fs::symlink(&canary, env.path("planted")).unwrap();
    std::os::unix::fs::symlink(&secret, env.path("planted2")).unwrap();
    let r = env.attack(&format!(
        "cat planted; echo planted=$?; cat planted2; echo planted2=$?; \
             ln -s {c} made; cat made; echo made=$?; ln {c} hard; echo hard=$?; cat hard; \
             ln {s} hard2; echo hard2=$?; cat hard2; cat {s}; echo direct=$?",
        c = canary.display(),
        s = secret.display()
    ));
    r.assert_lacks(CANARY);
    for what in ["planted", "planted2", "made", "hard", "hard2", "direct"] {
        assert!(
            !r.stdout.contains(&format!("{what}=0\n")),
            "{what} succeeded: {}{}",
            r.stdout,
            r.stderr
        );
    }
    assert!(
        !env.path("hard").exists(),
        "a hard link to the secret was made"
    );
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), CANARY);
}

#[test]
fn a_hard_link_to_a_file_outside_the_project_is_read_only_inside() {
    let env = project();
    // The user linked a file from outside into the project (`ln ~/somefile project/x`, a
    // pnpm store, `git clone --local`): same filesystem, outside the project, and not in
    // the sandbox's view (the test's temporary directory is under the host's /tmp).
    let outside = env.tmp.path().join("outside.txt");
    std::fs::write(&outside, "original\n").unwrap();
    std::fs::hard_link(&outside, env.path("linked.txt")).unwrap();
    // Two links of one file, both in the project: nothing outside to protect.
    env.write("pair-a.txt", "pair\n");
    std::fs::hard_link(env.path("pair-a.txt"), env.path("pair-b.txt")).unwrap();
    env.write("normal.txt", "normal\n");
    let r = env.envgit(&["run", "sh", "-c", "echo pwned >> linked.txt; echo ran"]);
    assert!(r.stdout.contains("ran"), "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("Read-only file system") || r.stderr.contains("Permission denied"),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "original\n");
    // Every other way to write through it fails too; the project's own files stay writable.
    let r = env.attack(
        "echo pwned > linked.txt; echo trunc=$?; chmod 600 linked.txt; echo chmod=$?; \
         true > linked.txt; echo empty=$?; \
         echo more >> normal.txt; echo normal=$?; echo more >> pair-b.txt; echo pair=$?",
    );
    for what in ["trunc", "empty"] {
        assert!(
            r.stdout.contains(&format!("{what}=")) && !r.stdout.contains(&format!("{what}=0\n")),
            "{what} succeeded: {}{}",
            r.stdout,
            r.stderr
        );
    }
    assert!(r.stdout.contains("normal=0\n"), "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("pair=0\n"), "{}{}", r.stdout, r.stderr);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "original\n");
    assert_eq!(env.read("normal.txt"), "normal\nmore\n");
    assert_eq!(env.read("pair-a.txt"), "pair\nmore\n");
}

#[test]
fn objects_hard_linked_by_git_clone_local_stay_intact_and_git_still_works() {
    let env = Env::new();
    let source = env.tmp.path().join("source");
    std::fs::create_dir_all(&source).unwrap();
    env.git(&source, &["init", "-q", "-b", "main"]);
    std::fs::write(source.join("a.txt"), "a\n").unwrap();
    env.git(&source, &["add", "-A"]);
    env.git(&source, &["commit", "-q", "-m", "a"]);
    std::fs::remove_dir_all(&env.project).unwrap();
    // `--local` hard-links the source's objects into the clone.
    env.git(
        env.tmp.path(),
        &[
            "clone",
            "-q",
            "--local",
            source.to_str().unwrap(),
            "project",
        ],
    );
    env.git(&env.project, &["config", "user.name", "agent"]);
    env.git(
        &env.project,
        &["config", "user.email", "agent@example.invalid"],
    );
    env.init();
    let head = support::head_of(&source);
    let object = format!(".git/objects/{}/{}", &head[..2], &head[2..]);
    let source_object = source.join(&object);
    let before = std::fs::read(&source_object).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::nlink(&std::fs::metadata(&source_object).unwrap()),
        2,
        "the clone did not hard-link its objects"
    );
    let r = env.attack(&format!(
        "echo b > b.txt && git add b.txt && git commit -qm b && echo commit=$?; \
             chmod u+w {object}; echo chmod=$?; echo junk >> {object}; echo write=$?"
    ));
    // The write lands in the run's layer over `.git` (inside, the object was copied up):
    // neither the repository it was cloned from nor the project's own object changes.
    assert!(r.stdout.contains("commit=0\n"), "{}{}", r.stdout, r.stderr);
    assert_eq!(std::fs::read(&source_object).unwrap(), before);
    assert_eq!(std::fs::read(env.path(&object)).unwrap(), before);
    assert!(
        r.stderr.contains("objects are never rewritten"),
        "{}",
        r.stderr
    );
    let fsck = Command::new("git")
        .args(["fsck", "--strict"])
        .current_dir(&source)
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
}

#[test]
fn more_hard_links_to_outside_than_can_be_bound_refuse_the_run() {
    let env = project();
    let outside = env.tmp.path().join("store");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(env.path("linked")).unwrap();
    for i in 0..4100 {
        let o = outside.join(format!("f{i}"));
        std::fs::write(&o, "x").unwrap();
        std::fs::hard_link(&o, env.path(&format!("linked/f{i}"))).unwrap();
    }
    let r = run(&env, "echo ran");
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("ran"), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("4100 files in the project are hard links to files outside it"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("refusing to run"), "{}", r.stderr);
    // Refused during its set-up, before anything ran: no step is left to be recorded as
    // interrupted by the next command.
    env.record();
    let log = env.log_json();
    assert!(
        log.iter().all(|s| !s.to_string().contains("interrupted")),
        "{log:#?}"
    );
}

#[test]
fn env_files_at_any_depth_and_in_excluded_directories_are_unreadable() {
    let env = project();
    let deep = "a/b/c/d/e/f/g/h/i/j/.env";
    env.write(deep, CANARY);
    env.write("node_modules/x/.env", CANARY);
    env.write("node_modules/x/y/z/w/.env.production", CANARY);
    env.write("target/debug/.npmrc", CANARY);
    env.write("node_modules/x/.env.example", "EXAMPLE=1");
    let r = env.attack(&format!(
        "cat {deep}; echo deep=$?; cat node_modules/x/.env; echo nm=$?; \
             cat node_modules/x/y/z/w/.env.production; echo nmdeep=$?; \
             cat target/debug/.npmrc; echo npmrc=$?; grep -r CANARY . 2>/dev/null; \
             cat node_modules/x/.env.example; echo example=$?"
    ));
    for what in ["deep", "nm", "nmdeep", "npmrc"] {
        assert!(
            r.stdout.contains(&format!("{what}=")) && !r.stdout.contains(&format!("{what}=0\n")),
            "{what} succeeded: {}{}",
            r.stdout,
            r.stderr
        );
    }
    r.assert_lacks(CANARY);
    assert!(r.stdout.contains("EXAMPLE=1"), "{}", r.stdout);
    assert_eq!(env.read(deep), CANARY);
}

#[test]
fn writes_outside_the_project_fail() {
    let env = project();
    let dir = visible_dir();
    let outside = dir.path().join("outside.txt");
    let home_file = env.user_home().join("written.txt");
    let r = env.attack(&format!(
        "echo pwned > {}; echo outside=$?; echo pwned > /usr/pwned; echo usr=$?; \
             echo pwned > /etc/pwned; echo etc=$?; echo ok > ~/written.txt; echo home=$?; \
             cat ~/written.txt; echo ok > /tmp/scratch; echo tmp=$?",
        outside.display()
    ));
    for what in ["outside", "usr", "etc"] {
        assert!(
            r.stdout.contains(&format!("{what}=")) && !r.stdout.contains(&format!("{what}=0\n")),
            "the write to {what} succeeded: {}{}",
            r.stdout,
            r.stderr
        );
    }
    assert_eq!(
        r.stderr.matches("Read-only file system").count(),
        3,
        "{}",
        r.stderr
    );
    assert!(!outside.exists());
    assert!(!Path::new("/usr/pwned").exists() && !Path::new("/etc/pwned").exists());
    // The home is writable through a private overlay: the command wrote and read it back,
    // and the real home is unchanged.
    assert!(
        r.stdout.contains("home=0\nok\n") && r.stdout.contains("tmp=0\n"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert!(!home_file.exists());
}

#[test]
fn protected_files_are_read_only() {
    let env = project();
    let yaml = env.read("envgit.yaml");
    let config = env.read(".git/config");
    let r = env.attack(
        "echo 'version: 2' > envgit.yaml; echo yaml=$?; echo evil > .git/hooks/pre-commit; \
         echo hook=$?; echo '[core] fsmonitor = evil' >> .git/config; echo config=$?",
    );
    // The policy and the hooks are read-only inside; `.git/config` is writable inside (git
    // works), but only allow-listed keys reach the host's, and `core.fsmonitor` is not one.
    assert!(
        r.stdout.contains("yaml=2") && r.stdout.contains("hook=2"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("Read-only file system").count(),
        2,
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("config=0"), "{}", r.stdout);
    assert!(
        r.stderr.contains("core.fsmonitor") && r.stderr.contains("rule git.data-only"),
        "{}",
        r.stderr
    );
    assert_eq!(env.read("envgit.yaml"), yaml);
    assert_eq!(env.read(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n");
    assert_eq!(env.read(".git/config"), config);
}

#[test]
fn renaming_a_protected_parent_is_put_back_and_flagged() {
    let env = project();
    let config = env.read(".git/config");
    env.write(".github/hooks/hooks.json", "{}");
    let r = env.attack(
        "mv .git .g; echo mv-git=$?; \
         mv .github .gh && mkdir -p .github/hooks && echo evil > .github/hooks/hooks.json; \
         echo mv-github=$?; mkdir -p .claude && echo '{\"hooks\":1}' > .claude/settings.json",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // `.git` is a mount point inside (its overlay): it cannot be renamed at all.
    assert!(
        r.stdout.contains("mv-git=1") && r.stderr.contains("Device or resource busy"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    // Any other protected path's parent can be: the put-back brings it back.
    assert!(r.stdout.contains("mv-github=0"), "{}", r.stdout);
    assert!(r.stderr.contains("put back"), "{}", r.stderr);
    assert_eq!(env.read(".github/hooks/hooks.json"), "{}");
    assert_eq!(env.read(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n");
    assert_eq!(env.read(".git/config"), config);
    assert!(!env.path(".claude/settings.json").exists());
    let log = env.log_json();
    assert!(
        log[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "protected_restored"),
        "{:?}",
        log[0]
    );
}

#[test]
fn the_store_and_envgit_state_are_invisible() {
    let env = project();
    let store = env.store_dir();
    let journal_before = std::fs::read(store.join("journal")).unwrap();
    let r = env.attack(&format!(
        "ls {s}; echo ls=$?; cat {s}/journal; echo cat=$?; echo x >> {s}/journal; \
             echo append=$?; ls {h}; echo home=$?",
        s = store.display(),
        h = env.home.display()
    ));
    for what in ["ls", "cat", "append", "home"] {
        assert!(
            !r.stdout.contains(&format!("{what}=0\n")),
            "{what} succeeded: {}{}",
            r.stdout,
            r.stderr
        );
    }
    assert!(
        !r.stdout.contains("journal") && !r.stdout.contains("projects"),
        "{}",
        r.stdout
    );
    assert!(
        std::fs::read(store.join("journal"))
            .unwrap()
            .starts_with(&journal_before)
    );
    env.envgit(&["fsck"]).ok();
}

/// A host process (a `sleep` with a secret in its environment, working in a directory with a
/// secret file) and envgit's own processes: inside, their environments, working directories,
/// roots and memory are out of reach, signals do not reach them and `ptrace` is refused. The
/// secret in envgit's own environment is not one the policy lets in, so the sandbox's PID 1,
/// a fork of envgit, must not show it either.
#[test]
fn processes_outside_cannot_be_seen_signalled_or_traced() {
    let env = project();
    let canary_dir = visible_dir();
    std::fs::write(canary_dir.path().join("secret.txt"), "CANARY-CWD-FILE").unwrap();
    let mut host = Command::new("sleep")
        .arg("600")
        .current_dir(canary_dir.path())
        .env("CANARY_SECRET", "CANARY-HOST-ENV")
        .spawn()
        .unwrap();
    let pid = host.id();
    let me = std::process::id();
    let script = format!(
        "for p in {pid} {me} 1 2 3; do \
           cat /proc/$p/environ; ls /proc/$p/cwd/; cat /proc/$p/cwd/secret.txt; \
           ls /proc/$p/root/; head -c 65536 /proc/$p/mem; done 2>/dev/null | tr '\\0' '\\n'; \
         kill -9 {pid}; echo kill=$?; kill -9 {me}; \
         {PY} -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); print(\"ptrace\", l.ptrace(16, 1, 0, 0), ctypes.get_errno())'"
    );
    let r = Run::from(
        env.cmd(&env.project)
            .args(["run", "sh", "-c", &format!("{script}\necho {RAN}")])
            .env("ENVGIT_TEST_SECRET", "CANARY-ENVGIT-ENV")
            .output()
            .unwrap(),
    );
    let alive = host.try_wait().unwrap().is_none();
    let _ = host.kill();
    let _ = host.wait();
    assert!(r.stdout.contains(RAN), "{}{}", r.stdout, r.stderr);
    assert!(alive, "the host process was killed from inside");
    assert!(r.stdout.contains("kill=1"), "{}", r.stdout);
    for canary in [
        "CANARY-HOST-ENV",
        "CANARY-CWD-FILE",
        "CANARY-ENVGIT-ENV",
        "ENVGIT_HOME",
    ] {
        assert!(
            !r.stdout.contains(canary),
            "{canary} seen inside: {}",
            r.stdout
        );
    }
    assert!(
        r.stdout.contains("ptrace -1 1"),
        "ptrace was not refused with EPERM: {}{}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn unix_sockets_on_the_host_are_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let env = project();
    let name = format!("envgit-test-{}", std::process::id());
    let abs =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    abs.set_nonblocking(true).unwrap();
    // Where Docker's socket really lives (/var/run is /run), and a rootless one in the home.
    let var = var_lib_dir();
    let docker = var.path().join("docker.sock");
    let path_sock = UnixListener::bind(&docker).unwrap();
    path_sock.set_nonblocking(true).unwrap();
    let home_docker = env.user_home().join(".docker/run/docker.sock");
    std::fs::create_dir_all(home_docker.parent().unwrap()).unwrap();
    let home_sock = UnixListener::bind(&home_docker).unwrap();
    home_sock.set_nonblocking(true).unwrap();
    let script = format!(
        "{PY} - <<'PY'\nimport socket\nfor addr in ['\\0{name}', '{d}', '{h}']:\n    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect(addr); print('CONNECTED', addr)\n    except OSError as e:\n        print('refused', e.errno)\nPY",
        d = docker.display(),
        h = home_docker.display()
    );
    let r = env.attack(&script);
    assert!(!r.stdout.contains("CONNECTED"), "{}{}", r.stdout, r.stderr);
    // ECONNREFUSED (abstract name in another network namespace), ENOENT or EACCES.
    let errnos: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("refused "))
        .collect();
    assert_eq!(errnos.len(), 3, "{}{}", r.stdout, r.stderr);
    for e in errnos {
        assert!(["111", "2", "13"].contains(&e), "errno {e}: {}", r.stdout);
    }
    assert!(abs.accept().is_err() && path_sock.accept().is_err() && home_sock.accept().is_err());
}

#[test]
fn io_uring_tiocsti_mount_unshare_setns_clone_newuser_are_refused() {
    let env = project();
    let script = format!(
        r#"{PY} - <<'PY'
import ctypes, fcntl, termios
l = ctypes.CDLL(None, use_errno=True)
for name, nr, args in [('io_uring_setup', 425, (1, 0)), ('setns', 308, (0, 0)), ('unshare_user', 272, (0x10000000,)), ('mount', 165, (0, 0, 0, 0, 0)), ('clone_newuser', 56, (0x10000000 | 17, 0, 0, 0, 0)), ('clone3', 435, (0, 0))]:
    r = l.syscall(nr, *args)
    print(name, r, ctypes.get_errno())
try:
    fcntl.ioctl(0, termios.TIOCSTI, b'x')
    print('tiocsti ok')
except OSError as e:
    print('tiocsti', e.errno)
PY
unshare -U true; echo unshare=$?"#
    );
    let r = env.attack(&script);
    for name in [
        "io_uring_setup",
        "setns",
        "unshare_user",
        "mount",
        "clone_newuser",
    ] {
        assert!(
            r.stdout.contains(&format!("{name} -1 1\n")),
            "{name} not refused with EPERM: {}{}",
            r.stdout,
            r.stderr
        );
    }
    // clone3's flags are in memory seccomp cannot read: it is refused whole, as absent
    // (unfiltered, a null argument would be EFAULT or EINVAL), and libc falls back to clone.
    assert!(r.stdout.contains("clone3 -1 38\n"), "{}", r.stdout);
    assert!(r.stdout.contains("tiocsti 1\n"), "{}", r.stdout);
    assert!(r.stdout.contains("unshare=1"), "{}", r.stdout);
}

/// The per-number rules are written for x86_64's numbers. A syscall made through another ABI,
/// x32's (its numbers with bit 30 set) or i386's (`int $0x80`, where numbers differ), would
/// slip past them: each kills the process before any rule is read. `io_uring_setup` (425 in
/// both) is the one tried; on the host the same program reaches the kernel with it.
#[test]
#[cfg(target_arch = "x86_64")]
fn syscalls_through_the_x32_and_i386_abis_kill_the_process() {
    let env = project();
    env.write(
        "abi.c",
        r#"#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    long r;
    if (!strcmp(argv[1], "x32")) {
        r = syscall(0x40000000L | 425, 1, 0L);
    } else {
        __asm__ volatile("int $0x80" : "=a"(r) : "a"(425L), "b"(1L), "c"(0L) : "memory");
    }
    printf("survived %s %ld\n", argv[1], r);
    return 0;
}
"#,
    );
    let cc = std::process::Command::new("cc")
        .args(["-O1", "-o", "abi", "abi.c"])
        .current_dir(&env.project)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    // Outside, each call comes back from the kernel (i386's with its own error number).
    for abi in ["x32", "i386"] {
        let host = std::process::Command::new(env.project.join("abi"))
            .arg(abi)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&host.stdout);
        assert!(said.starts_with(&format!("survived {abi} ")), "{said}");
    }
    let r = env.attack("./abi x32; echo \"x32 exit=$?\"; ./abi i386; echo \"i386 exit=$?\"");
    assert!(!r.stdout.contains("survived"), "{}{}", r.stdout, r.stderr);
    for abi in ["x32", "i386"] {
        // SIGSYS (31): seccomp's kill.
        let killed = format!("{abi} exit=159");
        assert!(r.stdout.contains(&killed), "{}{}", r.stdout, r.stderr);
    }
}

#[test]
fn the_network_is_only_loopback_of_its_own() {
    let env = project();
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(true).unwrap();
    let port = server.local_addr().unwrap().port();
    let script = format!(
        r#"{PY} - <<'PY'
import socket
for host, p in [('127.0.0.1', {port}), ('1.2.3.4', 80), ('127.0.0.1', 22)]:
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, p))
        print('CONNECTED', host, p)
    except OSError as e:
        print('failed', host, p)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b'x', ('8.8.8.8', 53))
    print('SENT udp')
except OSError as e:
    print('failed udp')
try:
    socket.getaddrinfo('example.com', 443, socket.AF_INET)
    print('RESOLVED unlisted')
except socket.gaierror:
    print('unlisted name unknown')
print('resolved', socket.getaddrinfo('app.localhost', 443, socket.AF_INET)[0][4][0])
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    r.sendto(b'x', ('9.9.9.9', 53))
    print('SENT dns')
except OSError:
    print('failed dns')
PY"#
    );
    let r = env.attack(&script);
    assert!(
        !r.stdout.contains("CONNECTED") && !r.stdout.contains("SENT"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        r.stdout.matches("failed").count(),
        5,
        "{}{}",
        r.stdout,
        r.stderr
    );
    // Names resolve only to the relay's fake loopback addresses, and only names the policy
    // could allow (or loopback names); no query leaves.
    assert!(r.stdout.contains("resolved 127.1."), "{}", r.stdout);
    assert!(r.stdout.contains("unlisted name unknown"), "{}", r.stdout);
    assert!(
        server.accept().is_err(),
        "the host's server saw a connection"
    );
}

#[test]
fn a_token_in_the_callers_environment_stays_outside() {
    let env = project();
    let out = env
        .cmd(&env.project)
        .args([
            "run",
            "sh",
            "-c",
            &format!("env; echo env=$?; cat /proc/1/environ 2>&1; echo {RAN}"),
        ])
        .env("GITHUB_TOKEN", CANARY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{all}");
    // `env` ran and printed the environment the command really has.
    assert!(
        stdout.contains("env=0\n") && stdout.contains("\nPATH=") && stdout.contains(RAN),
        "{all}"
    );
    assert!(!all.contains(CANARY), "{all}");
}

#[test]
fn tools_work_inside_and_results_land() {
    let env = project();
    let r = run(
        &env,
        &format!(
            "git --version && git status --short >/dev/null && {PY} -c 'print(6*7)' && \
             python3 -c 'print(\"python3 on PATH\")' && node -e 'console.log(\"node ok\")' && \
             RUSTUP_HOME=/root/.rustup cargo --version >/dev/null && echo written > out.txt && echo cargo ok"
        ),
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("42")
            && r.stdout.contains("python3 on PATH")
            && r.stdout.contains("node ok")
            && r.stdout.contains("cargo ok"),
        "{}",
        r.stdout
    );
    assert_eq!(env.read("out.txt"), "written\n");
    let log = env.log_json();
    assert_eq!(log[0]["kind"], "run");
    assert_eq!(log[0]["exit_code"], 0);
    assert_eq!(
        log[0]["cwd"].as_str().unwrap(),
        env.project.canonicalize().unwrap().to_str().unwrap()
    );
    assert!(log[0]["ended_at_ms"].as_u64().unwrap() >= log[0]["started_at_ms"].as_u64().unwrap());
    assert!(
        log[0]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "out.txt")
    );
}

#[test]
fn a_server_inside_is_reachable_inside() {
    let env = project();
    let script = format!(
        "{PY} -m http.server 18731 --bind 127.0.0.1 >/dev/null 2>&1 & \
         for i in 1 2 3 4 5 6 7 8 9 10; do {PY} -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:18731/src/\").status)' 2>/dev/null && break; sleep 0.3; done"
    );
    let r = run(&env, &script);
    assert!(r.stdout.contains("200"), "{}{}", r.stdout, r.stderr);
}

#[test]
fn exit_codes_and_signals_propagate() {
    let env = project();
    assert_eq!(run(&env, "exit 7").code, 7);
    assert_eq!(run(&env, "kill -TERM $$").code, 128 + 15);
    let r = env.envgit(&["run", "definitely-not-a-command"]);
    assert_eq!(r.code, 127);
    assert!(r.stderr.contains("command not found"), "{}", r.stderr);
    // Background processes die with the step.
    let r = run(&env, "(sleep 30; echo late > late.txt) & echo started");
    assert_eq!(r.code, 0);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!env.path("late.txt").exists());
}

/// No process of a step outlives it: a background writer appending without pause is killed
/// with the step (PID 1 kills and reaps the whole namespace before it reports the exit code,
/// and only then may the sandbox's namespaces be torn down off the step's path), so the next
/// step finds busy.txt as the last one recorded it, with no edit made outside the steps.
#[test]
fn nothing_of_a_step_writes_after_its_record() {
    let env = project();
    let r = run(
        &env,
        "(while :; do echo x >> busy.txt; done) & \
         while [ ! -s busy.txt ]; do :; done; echo started",
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("started"), "{}", r.stdout);
    let r = env.envgit(&["run", "true"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        !r.stderr.contains("your edits since"),
        "busy.txt was written after its step was recorded: {}",
        r.stderr
    );
}

#[test]
fn a_shell_rule_refuses_before_anything_runs() {
    let env = project();
    env.deny_push_and_publish();
    let r = run(&env, "touch ran.txt && git push origin main");
    assert_eq!(r.code, 126);
    assert!(
        r.stderr.contains(
            "envgit: denied command touch ran.txt && git push origin main (rule shell.deny)"
        ),
        "{}",
        r.stderr
    );
    assert!(!env.path("ran.txt").exists());
    let log = env.log_json();
    assert_eq!(log[0]["refusals"][0]["rule"], "shell.deny");
}

#[test]
fn a_host_without_user_namespaces_gets_the_setting_and_the_fix() {
    let env = project();
    let bin = support::envgit_bin();
    let script = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && cd '{p}' && ENVGIT_HOME='{h}' HOME='{u}' '{bin}' run true",
        p = env.project.display(),
        h = env.home.display(),
        u = env.user_home().display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-Ur", "sh", "-c", &script])
        .output()
        .unwrap();
    let mut stderr = String::new();
    out.stderr.as_slice().read_to_string(&mut stderr).unwrap();
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("user.max_user_namespaces") && stderr.contains("sysctl -w"),
        "{stderr}"
    );
}

#[test]
fn a_listed_host_port_is_reachable_and_the_rest_is_refused_by_rule() {
    let env = project();
    let serve = |body: &'static str| {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().take(4) {
                let Ok(mut s) = s else { continue };
                let mut buf = [0u8; 2048];
                let _ = std::io::Read::read(&mut s, &mut buf);
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = std::io::Write::write_all(&mut s, resp.as_bytes());
            }
        });
        port
    };
    let listed = serve("listed-ok");
    let unlisted = serve("SHOULD-NOT-BE-SEEN");
    let yaml = env.read("envgit.yaml").replace(
        "# network:\n#   allow:",
        &format!("network:\n  allow: [\"127.0.0.1:{listed}\"]\n#   allow:"),
    );
    env.write("envgit.yaml", &yaml);
    let r = run(
        &env,
        &format!(
            "curl -s -m 5 http://127.0.0.1:{listed}/; echo; \
             curl -s -m 5 --noproxy '' http://127.0.0.1:{unlisted}/; echo; \
             curl -s -m 5 http://127.0.0.1:{unlisted}/; echo rc=$?; \
             curl -s -m 5 https://example.invalid/; echo rc=$?"
        ),
    );
    assert!(r.stdout.contains("listed-ok"), "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("SHOULD-NOT-BE-SEEN"), "{}", r.stdout);
    assert!(
        r.stderr.contains(&format!(
            "envgit: denied GET 127.0.0.1:{unlisted}/ (rule network.private)"
        )),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("envgit: denied CONNECT example.invalid:443 (rule network.allow)"),
        "{}",
        r.stderr
    );
    let v = env.envgit(&["log", "-v", "-n", "1"]).ok().stdout;
    assert!(
        v.contains(&format!("allowed CONNECT 127.0.0.1:{listed}")),
        "{v}"
    );
    assert!(
        v.contains("denied CONNECT example.invalid:443 rule=network.allow"),
        "{v}"
    );
}

/// Waits (bounded) until `f` holds, polling; panics with `what` when it never does.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn the_control_socket_cannot_be_reached_or_used_from_inside() {
    let env = project();
    // The runtime directories the agent would glob point inside the project.
    let tmpdir = env.path("rt/tmp");
    let xdg = env.path("rt/xdg");
    std::fs::create_dir_all(&tmpdir).unwrap();
    std::fs::create_dir_all(&xdg).unwrap();
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in server.incoming().take(4) {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let _ = std::io::Write::write_all(
                &mut s,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            );
        }
    });
    let yaml = env
        .read("envgit.yaml")
        .replace(
            "# network:\n#   allow:",
            &format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n#   allow:"),
        )
        .replace(
            "irreversible:\n",
            "irreversible:\n  - net: { host: \"127.0.0.1\", method: POST, path: \"/send\" }\n    action: ask\n    id: local.send\n",
        );
    env.write(
        "envgit.yaml",
        &format!("{yaml}\napprovers:\n  terminal: false\n  socket: true\n  timeout: 120\n"),
    );
    let attack = format!(
        r#"curl -s -m 150 -X POST -d payload http://127.0.0.1:{port}/send > curl.out 2>&1 &
while [ ! -e go ]; do sleep 0.1; done
{PY} - <<'PY' > attack.out 2>&1
import glob, json, os, socket
found = set()
for pat in [os.environ.get('TMPDIR', '/tmp') + '/envgit*/*/control.sock',
            os.environ.get('XDG_RUNTIME_DIR', '/run') + '/envgit*/*/control.sock',
            '/tmp/envgit*/*/control.sock', '/run/user/*/envgit/*/control.sock',
            '/dev/shm/envgit*/*/control.sock', '/dev/shm/*/*/control.sock']:
    found.update(glob.glob(pat))
for top in ['/']:
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if os.path.join(d, x) not in ('/proc', '/sys', '/dev', '/usr')]
        for f in files:
            if f == 'control.sock':
                found.add(os.path.join(d, f))
print('sockets', len(found))
for p in sorted(found):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p)
        s.sendall(json.dumps({{"op": "approve", "id": None, "by": "alice@terminal"}}).encode() + b'\n')
        print('ANSWERED', p, s.recv(4096))
    except OSError as e:
        print('refused', p, e.errno)
print('attack done')
PY
wait
echo {RAN}"#
    );
    let child = env
        .cmd(&env.project)
        .args(["run", "sh", "-c", &attack])
        .env("TMPDIR", &tmpdir)
        .env("XDG_RUNTIME_DIR", &xdg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = || {
        env.cmd(&env.project)
            .args(["status", "--json"])
            .env("TMPDIR", &tmpdir)
            .env("XDG_RUNTIME_DIR", &xdg)
            .output()
            .unwrap()
    };
    let pending = || -> Vec<serde_json::Value> {
        let out = status();
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };
    wait_for("the POST to be held for an answer", || {
        !pending().is_empty()
    });
    env.write("go", "");
    wait_for("the attack inside to finish", || {
        env.path("attack.out").exists() && env.read("attack.out").contains("attack done")
    });
    let report = env.read("attack.out");
    println!("attack from inside:\n{report}");
    assert!(!report.contains("ANSWERED"), "{report}");
    // The ask is still waiting: nothing inside answered it.
    assert_eq!(pending().len(), 1, "{report}");
    // The person outside refuses it.
    let deny = env
        .cmd(&env.project)
        .args(["deny"])
        .env("TMPDIR", &tmpdir)
        .env("XDG_RUNTIME_DIR", &xdg)
        .output()
        .unwrap();
    assert!(deny.status.success(), "{deny:?}");
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(125), "{stdout}{stderr}");
    assert!(stdout.contains(RAN), "{stdout}{stderr}");
    assert!(
        !env.read("curl.out").contains("ok"),
        "{}",
        env.read("curl.out")
    );
    let step = env.log_json().into_iter().next().unwrap();
    let approvals = step["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{step}");
    assert_eq!(approvals[0]["answer"], "refused", "{step}");
    let by = approvals[0]["approver"].as_str().unwrap();
    assert!(!by.contains("alice"), "{step}");
    assert!(by.contains("envgit approve/deny"), "{step}");
}

#[test]
fn only_what_the_command_needs_is_visible() {
    let env = project();
    // Canaries where the old view (the host's whole `/` read-only) reached them.
    let var = var_lib_dir();
    std::fs::write(var.path().join("secret"), CANARY).unwrap();
    let mut dirs = vec![var.path().to_path_buf()];
    let mut made = Vec::new();
    for top in ["/srv", "/mnt", "/media", "/home", "/root"] {
        std::fs::create_dir_all(top).unwrap();
        let d = tempfile::Builder::new()
            .prefix("envgit-test-")
            .tempdir_in(top)
            .unwrap();
        std::fs::write(d.path().join("secret"), CANARY).unwrap();
        dirs.push(d.path().to_path_buf());
        made.push(d);
    }
    // A file only root may read under /etc (like an ssh host key).
    let etc = tempfile::Builder::new()
        .prefix("envgit-test-")
        .tempdir_in("/etc")
        .unwrap();
    let key = etc.path().join("ssh_host_test_key");
    std::fs::write(&key, CANARY).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut script = String::new();
    for (i, d) in dirs.iter().enumerate() {
        script.push_str(&format!(
            "cat {d}/secret; echo read{i}=$?; ls -d {d}; echo seen{i}=$?\n",
            d = d.display()
        ));
    }
    script.push_str(&format!(
        "cat {k}; echo key=$?; cat /etc/shadow; echo shadow=$?; ls /var; \
         echo var-tmp > /var/tmp/envgit-test-marker; echo vartmp=$?; echo etc-ok; cat /etc/passwd >/dev/null; echo passwd=$?\n",
        k = key.display()
    ));
    let r = env.attack(&script);
    r.assert_lacks(CANARY);
    for (i, dir) in dirs.iter().enumerate() {
        for what in ["read", "seen"] {
            assert!(
                r.stdout.contains(&format!("{what}{i}="))
                    && !r.stdout.contains(&format!("{what}{i}=0\n")),
                "{} is visible inside: {}{}",
                dir.display(),
                r.stdout,
                r.stderr
            );
        }
    }
    assert!(
        r.stdout.contains("key=1\n") && r.stdout.contains("shadow=1\n"),
        "{}",
        r.stdout
    );
    // /etc itself is there; /var/tmp is private (the host's is unchanged).
    assert!(
        r.stdout.contains("passwd=0\n") && r.stdout.contains("vartmp=0\n"),
        "{}",
        r.stdout
    );
    assert!(!Path::new("/var/tmp/envgit-test-marker").exists());
    assert!(
        !r.stdout.contains("\nlib\n") && !r.stdout.contains("\ncache\n"),
        "{}",
        r.stdout
    );
}

#[test]
fn no_host_unix_socket_is_reachable() {
    use std::os::unix::net::UnixListener;
    let env = project();
    // At least two listeners of our own: one in the rest of /var, one inside the project.
    let var = var_lib_dir();
    let a = UnixListener::bind(var.path().join("service.sock")).unwrap();
    let b = UnixListener::bind(env.path("dev.sock")).unwrap();
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let mut paths: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|p| p.starts_with('/'))
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths.dedup();
    assert!(paths.len() >= 2, "{paths:?}");
    let list = paths
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let script = format!(
        "{PY} - <<'PY'\nimport socket\nfor p in [{list}]:\n    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET):\n        s = socket.socket(socket.AF_UNIX, kind)\n        try:\n            s.connect(p); print('CONNECTED', p, kind)\n        except OSError as e:\n            print('refused', e.errno, p)\nPY"
    );
    let r = env.attack(&script);
    println!("{} host sockets tried:\n{}", paths.len(), r.stdout);
    assert!(!r.stdout.contains("CONNECTED"), "{}{}", r.stdout, r.stderr);
    let refused: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("refused "))
        .collect();
    assert_eq!(refused.len(), paths.len() * 3, "{}{}", r.stdout, r.stderr);
    for l in refused {
        let errno = l.split_whitespace().nth(1).unwrap();
        // ENOENT, EACCES, ECONNREFUSED (and EPROTOTYPE for a socket of another type).
        assert!(["2", "13", "111", "91"].contains(&errno), "{l}");
    }
    assert!(a.accept().is_err() && b.accept().is_err());
}

/// A host service listening on a socket the host's `/proc/net/unix` does not show at its
/// path: one bound by a relative name from the project (`gunicorn --bind unix:app.sock`), one
/// bound in another network namespace (a container's socket directory mounted into the
/// project or the home), one bound through a symbolic link into the project. Each is a way
/// out the gate never judges; inside, none may be reached.
#[test]
fn host_sockets_bound_in_ways_proc_net_unix_hides_are_unreachable() {
    let env = project();
    let home = env.user_home();
    std::fs::create_dir_all(env.path("node_modules/.cache")).unwrap();
    std::fs::create_dir_all(env.path("sub")).unwrap();
    std::fs::create_dir_all(env.path("libs/z/.git")).unwrap();
    std::fs::create_dir_all(home.join("run")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env.path(""), outside.path().join("link")).unwrap();
    // Binds each path given, says so, and reports any connection once its input closes.
    let listen = "import socket, sys\nsocks = []\nfor p in sys.argv[1:]:\n    s = socket.socket(socket.AF_UNIX)\n    s.bind(p); s.listen(); s.setblocking(False); socks.append((p, s))\nprint('ready', flush=True)\nsys.stdin.read()\nfor p, s in socks:\n    try:\n        s.accept(); print('ACCEPTED', p)\n    except BlockingIOError:\n        pass\n";
    let start = |cmd: &mut std::process::Command| {
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "ready\n", "a listener did not start");
        child
    };
    let relative = start(
        std::process::Command::new(PY)
            .args(["-c", listen, "rel.sock"])
            .current_dir(env.path("")),
    );
    let other_namespace = start(
        std::process::Command::new("unshare").args([
            "-n",
            PY,
            "-c",
            listen,
            env.path("node_modules/.cache/other-ns.sock")
                .to_str()
                .unwrap(),
            home.join("run/other-ns.sock").to_str().unwrap(),
            // A daemon's in a nested repository's `.git`, bound in with the project.
            env.path("libs/z/.git/daemon.sock").to_str().unwrap(),
        ]),
    );
    let through_link = start(
        std::process::Command::new(PY).args([
            "-c",
            listen,
            outside
                .path()
                .join("link/sub/linked.sock")
                .to_str()
                .unwrap(),
        ]),
    );
    let targets = [
        env.path("rel.sock"),
        env.path("node_modules/.cache/other-ns.sock"),
        home.join("run/other-ns.sock"),
        env.path("sub/linked.sock"),
        env.path("libs/z/.git/daemon.sock"),
    ];
    let list = targets
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect::<Vec<_>>()
        .join(", ");
    let script = format!(
        "{PY} - <<'PY'\nimport socket\nfor p in [{list}]:\n    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect(p); s.send(b'x'); print('CONNECTED', p)\n    except OSError as e:\n        print('refused', e.errno, p)\nPY"
    );
    let r = env.attack(&script);
    let mut accepted = String::new();
    for mut child in [relative, other_namespace, through_link] {
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        accepted.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    assert!(
        !r.stdout.contains("CONNECTED") && !accepted.contains("ACCEPTED"),
        "{}{}{accepted}",
        r.stdout,
        r.stderr
    );
    let refused = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("refused "))
        .count();
    assert_eq!(refused, targets.len(), "{}{}", r.stdout, r.stderr);
}

#[test]
fn every_home_credential_file_is_masked() {
    let env = project();
    let home = env.user_home();
    // The list itself, plus the files it must hold whatever becomes of it.
    let required = [
        ".pgpass",
        ".vault-token",
        ".config/containers/auth.json",
        ".terraform.d/credentials.tfrc.json",
        ".m2/settings.xml",
        ".gradle/gradle.properties",
        ".gem/credentials",
        ".bash_history",
        ".zsh_history",
        ".python_history",
        ".node_repl_history",
        ".config/rclone/rclone.conf",
        ".cache/huggingface/token",
        ".huggingface/token",
        ".yarnrc.yml",
        ".config/pip/pip.conf",
        ".pip/pip.conf",
    ];
    let mut all: Vec<&str> = envgit_sandbox::plan::HOME_DENIES.to_vec();
    all.extend(
        required
            .iter()
            .filter(|r| !all.contains(r))
            .collect::<Vec<_>>(),
    );
    for rel in &all {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        if !p.exists() {
            std::fs::write(&p, CANARY).unwrap();
        }
    }
    let script: String = all
        .iter()
        .enumerate()
        .map(|(i, rel)| format!("cat ~/{rel} 2>/dev/null; echo m{i}=$?\n"))
        .collect();
    let r = env.attack(&script);
    r.assert_lacks(CANARY);
    for (i, rel) in all.iter().enumerate() {
        assert!(
            r.stdout.contains(&format!("m{i}=")) && !r.stdout.contains(&format!("m{i}=0\n")),
            "~/{rel} is readable inside: {}",
            r.stdout
        );
    }
}

/// The person's environment moves credentials out of the places the home's list names: a
/// service account key (`GOOGLE_APPLICATION_CREDENTIALS`), AWS's, kubectl's, Docker's, GnuPG's,
/// Cargo's, the GitHub CLI's directory, and everything under a relocated `XDG_CONFIG_HOME`.
/// Where they point (here: directories of the home the default list does not name), the
/// sandbox must not read them.
#[test]
fn credentials_the_persons_environment_moves_elsewhere_are_masked() {
    let env = project();
    let home = env.user_home();
    let file = |rel: &str| {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, CANARY).unwrap();
        p.display().to_string()
    };
    let dir = |rel: &str, inner: &str| {
        file(&format!("{rel}/{inner}"));
        home.join(rel).display().to_string()
    };
    let vars = [
        ("GOOGLE_APPLICATION_CREDENTIALS", file("keys/gcp-sa.json")),
        ("AWS_SHARED_CREDENTIALS_FILE", file("work/aws/credentials")),
        (
            "KUBECONFIG",
            format!("{}:{}", file("work/kube/a.yaml"), file("work/kube/b.yaml")),
        ),
        ("DOCKER_CONFIG", dir("work/docker", "config.json")),
        ("GNUPGHOME", dir("work/gnupg", "private-keys-v1.d/key.key")),
        ("CARGO_HOME", dir("tools/cargo", "credentials.toml")),
        ("GH_CONFIG_DIR", dir("work/gh", "hosts.yml")),
        (
            "XDG_CONFIG_HOME",
            dir("dotfiles/config", "glab-cli/config.yml"),
        ),
    ];
    let targets = [
        "keys/gcp-sa.json",
        "work/aws/credentials",
        "work/kube/a.yaml",
        "work/kube/b.yaml",
        "work/docker/config.json",
        "work/gnupg/private-keys-v1.d/key.key",
        "tools/cargo/credentials.toml",
        "work/gh/hosts.yml",
        "dotfiles/config/glab-cli/config.yml",
    ];
    let script: String = targets
        .iter()
        .enumerate()
        .map(|(i, rel)| format!("cat ~/{rel} 2>/dev/null; echo m{i}=$?\n"))
        .collect();
    let mut cmd = env.cmd(&env.project);
    for (k, v) in &vars {
        cmd.env(k, v);
    }
    let r = Run::from(
        cmd.args(["run", "sh", "-c", &format!("{script}echo {RAN}")])
            .output()
            .unwrap(),
    )
    .ran_to(RAN);
    r.assert_lacks(CANARY);
    for (i, rel) in targets.iter().enumerate() {
        assert!(
            !r.stdout.contains(&format!("m{i}=0\n")),
            "~/{rel} is readable inside: {}",
            r.stdout
        );
    }
}

/// git's `store` credential helper keeps passwords in plain text where the person's
/// configuration says (`store --file ~/secrets/git-credentials`): the step must not read it.
#[test]
fn a_git_credential_store_the_person_moved_is_masked() {
    let env = project();
    let home = env.user_home();
    std::fs::create_dir_all(home.join("secrets")).unwrap();
    std::fs::write(home.join("secrets/git-credentials"), CANARY).unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        "[credential]\n\thelper = store --file ~/secrets/git-credentials\n",
    )
    .unwrap();
    let r = env.attack("cat ~/secrets/git-credentials; echo m=$?");
    r.assert_lacks(CANARY);
    assert!(!r.stdout.contains("m=0\n"), "{}", r.stdout);
}

#[test]
fn project_credential_and_env_files_are_masked_in_every_directory() {
    let env = project();
    let planted = [
        ".npmrc",
        ".pypirc",
        ".envrc",
        "packages/web/.npmrc",
        "node_modules/pkg/.env",
        "target/debug/.env.local",
        ".venv/.env",
        "deep/a/b/c/.env.production",
    ];
    for rel in planted {
        env.write(rel, CANARY);
    }
    env.write("node_modules/pkg/.env.example", "EXAMPLE=2");
    let script: String = planted
        .iter()
        .enumerate()
        .map(|(i, rel)| format!("cat {rel} 2>/dev/null; echo m{i}=$?\n"))
        .chain(std::iter::once(
            "cat node_modules/pkg/.env.example; echo\n".to_owned(),
        ))
        .collect();
    let r = env.attack(&script);
    r.assert_lacks(CANARY);
    for (i, rel) in planted.iter().enumerate() {
        assert!(
            r.stdout.contains(&format!("m{i}=")) && !r.stdout.contains(&format!("m{i}=0\n")),
            "{rel} is readable inside: {}",
            r.stdout
        );
    }
    assert!(r.stdout.contains("EXAMPLE=2"), "{}", r.stdout);
    for rel in planted {
        assert_eq!(env.read(rel), CANARY, "{rel}");
    }
}

#[test]
fn a_fork_bomb_ends_at_the_runs_process_limit() {
    let env = project();
    let started = std::time::Instant::now();
    // Bounded on purpose: at most 2000 sleeping children, whatever the limit.
    let script = format!(
        r#"{PY} - <<'PY'
import os, time
n, err = 0, None
for i in range(2000):
    try:
        p = os.fork()
    except OSError as e:
        err = e.errno
        break
    if p == 0:
        time.sleep(120)
        os._exit(0)
    n += 1
print('forked', n, 'errno', err)
PY"#
    );
    let out = env
        .cmd(&env.project)
        .args(["run", "sh", "-c", &format!("{script}\necho {RAN}")])
        .env("ENVGIT_PIDS_MAX", "200")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(125), "{stdout}{stderr}");
    assert!(stdout.contains(RAN), "{stdout}{stderr}");
    let forked: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("forked "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}{stderr}"));
    println!("{stdout}");
    assert!(forked < 200, "the limit did not hold: {stdout}");
    assert!(stdout.contains("errno 11"), "not EAGAIN: {stdout}");
    // The children died with the step (PID 1 ends everything), quickly.
    assert!(started.elapsed() < std::time::Duration::from_secs(100));
    // The step says what is not limited: memory, where no cgroup v2 controller is delegated.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let v2_mount = mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        right
            .starts_with("cgroup2 ")
            .then(|| left.split_whitespace().nth(4).unwrap().to_owned())
    });
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own_v2 = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/");
    let memory_v2 = v2_mount.is_some_and(|m| {
        let control = Path::new(&m)
            .join(own_v2.trim_start_matches('/'))
            .join("cgroup.subtree_control");
        std::fs::read_to_string(control)
            .unwrap_or_default()
            .split_whitespace()
            .any(|c| c == "memory")
    });
    let notes = env.log_json()[0]["notes"].to_string();
    assert_eq!(notes.contains("memory not limited"), !memory_v2, "{notes}");
    assert!(!notes.contains("RLIMIT_NPROC only"), "{notes}");
}

/// The walk of `/etc` for what only root may read is taken from its cache while `/etc` is
/// unchanged; a file made private since (a `chmod` changes no directory) is masked at the very
/// next step all the same, and so is a private file that appears.
#[test]
fn an_etc_file_made_private_since_the_cached_walk_is_masked() {
    let env = project();
    let etc = tempfile::Builder::new()
        .prefix("envgit-test-")
        .tempdir_in("/etc")
        .unwrap();
    let conf = etc.path().join("app.conf");
    std::fs::write(&conf, CANARY).unwrap();
    // The cache is trusted once `/etc` has been still for its racy margin (2 s).
    std::thread::sleep(std::time::Duration::from_millis(2_200));
    let read = format!("cat {}; echo conf=$?", conf.display());
    let timed = |script: &str| {
        Run::from(
            env.cmd(&env.project)
                .env("ENVGIT_TIMINGS", "1")
                .args(["run", "sh", "-c", script])
                .output()
                .unwrap(),
        )
    };
    let first = timed(&read);
    assert!(
        first.stdout.contains("conf=0"),
        "{}{}",
        first.stdout,
        first.stderr
    );
    // Another test may change `/etc` meanwhile (a directory of its own there): the walk then
    // runs again, and the cache is trusted once `/etc` is still again (bounded).
    for tries in 1.. {
        let again = timed(&read);
        if again
            .stderr
            .contains("the walk of /etc taken from its cache")
        {
            break;
        }
        assert!(tries < 10, "the cache was never taken: {}", again.stderr);
        std::thread::sleep(std::time::Duration::from_millis(2_200));
    }
    // A chmod, in a directory that did not change.
    std::fs::set_permissions(&conf, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let r = env.attack(&read);
    r.assert_lacks(CANARY);
    assert!(r.stdout.contains("conf=1\n"), "{}{}", r.stdout, r.stderr);
    // A new private file.
    let key = etc.path().join("new.key");
    std::fs::write(&key, CANARY).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let r = env.attack(&format!("cat {}; echo key=$?", key.display()));
    r.assert_lacks(CANARY);
    assert!(r.stdout.contains("key=1\n"), "{}{}", r.stdout, r.stderr);
}
