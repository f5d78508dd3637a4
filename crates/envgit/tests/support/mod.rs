//! Shared fixtures for the integration tests: a temporary project with its own store, the real
//! `envgit` binary, and real git.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Printed by every attack script as its last line: the attack ran to its end inside.
pub const RAN: &str = "ATTACK-SCRIPT-RAN-TO-ITS-END";

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub project: PathBuf,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(o: Output) -> Self {
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
    /// No stream of the step holds `secret`.
    pub fn assert_lacks(&self, secret: &str) {
        assert!(
            !self.stdout.contains(secret) && !self.stderr.contains(secret),
            "leaked:\n{}\n{}",
            self.stdout,
            self.stderr
        );
    }
    /// An attack's step: envgit did not fail on its own (125) and the script reached the
    /// line that prints `last` (so each earlier command ran).
    pub fn ran_to(self, last: &str) -> Self {
        assert_ne!(
            self.code, 125,
            "envgit itself failed:\n{}\n{}",
            self.stdout, self.stderr
        );
        assert!(
            self.stdout.contains(last),
            "the attack did not run to its end:\n{}\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }
}

pub fn envgit_bin() -> &'static str {
    env!("CARGO_BIN_EXE_envgit")
}

/// The test's directory of steps on tmpfs goes with it (as root, or as the users some tests run
/// envgit as): thousands of tests would otherwise leave one each, and a test that kills envgit
/// leaves a step's files in it (~250 KiB of memory), which only a later step of the same store
/// would sweep.
impl Drop for Env {
    fn drop(&mut self) {
        let own = rustix::process::getuid().as_raw();
        for uid in [own, 1001, 1002] {
            let _ = std::fs::remove_dir_all(self.step_dirs_on_tmpfs(uid));
        }
    }
}

impl Env {
    /// An empty project directory and a store home, both temporary.
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let project = tmp.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(tmp.path().join("userhome")).unwrap();
        Self { tmp, home, project }
    }

    /// The directory of steps envgit keeps on tmpfs for this test's store when its commands
    /// run as `uid` (`runtime.rs`'s `step_dirs`: named by the hash of `ENVGIT_HOME`).
    pub fn step_dirs_on_tmpfs(&self, uid: u32) -> PathBuf {
        let home = self
            .home
            .canonicalize()
            .unwrap_or_else(|_| self.home.clone());
        let hash = blake3::hash(home.as_os_str().as_encoded_bytes()).to_hex();
        PathBuf::from(format!("/dev/shm/envgit-{uid}-{}", &hash[..12]))
    }

    /// `envgit` run in `dir` with this test's store (`ENVGIT_HOME`) and this test's home
    /// (`HOME` = [`Env::user_home`]), never the runner's own.
    pub fn cmd(&self, dir: &Path) -> Command {
        self.cmd_of(envgit_bin(), dir)
    }

    /// `program` in `dir` with the variables [`Env::cmd`] gives envgit: for a program that
    /// runs envgit in turn (`unshare`, `setpriv`).
    pub fn cmd_of(&self, program: &str, dir: &Path) -> Command {
        let mut c = Command::new(program);
        c.current_dir(dir)
            .env("ENVGIT_HOME", &self.home)
            .env("HOME", self.user_home())
            .env("NO_COLOR", "1");
        c
    }

    /// `envgit ARGS` in the project on a real pseudo-terminal (`support/pty_run.py`), as from a
    /// person's terminal: when the output shows `expect`, the terminal types `answer`. The
    /// terminal's transcript is the command's stdout; add arguments or variables before
    /// `.output()`.
    pub fn on_terminal(&self, expect: &str, answer: &str, args: &[&str]) -> Command {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/pty_run.py");
        let mut c = Command::new("python3");
        c.arg(script)
            .args([expect, answer, "--", envgit_bin()])
            .args(args)
            .current_dir(&self.project)
            .env("ENVGIT_HOME", &self.home)
            .env("HOME", self.user_home())
            .env("NO_COLOR", "1");
        c
    }

    pub fn envgit_in(&self, dir: &Path, args: &[&str]) -> Run {
        Run::from(self.cmd(dir).args(args).output().unwrap())
    }

    pub fn envgit(&self, args: &[&str]) -> Run {
        self.envgit_in(&self.project, args)
    }

    /// `envgit ARGS` as uid 1002 (no other test runs as that user), who owns the test's whole
    /// directory, with a `TMPDIR` of their own; returns its output and what it left behind: in
    /// that `TMPDIR`, and the directories of steps it left on tmpfs (`/dev/shm/envgit-1002-*`).
    /// `None` when not root (only root can switch users).
    pub fn as_a_user_in_own_tmpdir(&self, args: &[&str]) -> Option<(Output, Vec<String>)> {
        if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) != 0 {
            return None;
        }
        let tmpdir = self.tmp.path().join("their-tmp");
        std::fs::create_dir_all(&tmpdir).unwrap();
        std::fs::create_dir_all(self.user_home()).unwrap();
        // A copy of the binary they can reach: the checkout's may lie below a directory only
        // root may enter (a 0700 temporary directory, /root), and envgit starts itself again
        // by its own path (the doctor's probe, the demo's steps).
        let bin = self.tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("envgit");
        // Renamed into place: a process of an earlier call (a step's detached closer) may
        // still run the last copy, which cannot be written then ("text file busy").
        let fresh = bin.join("envgit.new");
        std::fs::copy(envgit_bin(), &fresh).unwrap();
        std::fs::rename(&fresh, &exe).unwrap();
        let owned = Command::new("chown")
            .args(["-R", "1002:1002"])
            .arg(self.tmp.path())
            .status()
            .unwrap();
        assert!(owned.success());
        let on_tmpfs = || -> std::collections::BTreeSet<String> {
            std::fs::read_dir("/dev/shm")
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with("envgit-1002-"))
                        .collect()
                })
                .unwrap_or_default()
        };
        let before = on_tmpfs();
        let out = self
            .cmd_of("setpriv", self.tmp.path())
            .args(["--reuid=1002", "--regid=1002", "--clear-groups"])
            .arg(&exe)
            .args(args)
            .env("TMPDIR", &tmpdir)
            .env_remove("XDG_DATA_HOME")
            .output()
            .unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&tmpdir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        // `doctor` checks the person's own store's (here the test's) directory there: theirs.
        let own = self.step_dirs_on_tmpfs(1002);
        left.extend(
            on_tmpfs()
                .difference(&before)
                .map(|n| format!("/dev/shm/{n}"))
                .filter(|p| Path::new(p) != own),
        );
        Some((out, left))
    }

    /// Turns on the policy's commented-out example shell rule (`envgit init`'s template), which
    /// denies `git push` and `npm publish`.
    pub fn deny_push_and_publish(&self) {
        let example = "# shell:\n#   - deny: [\"git push\", \"npm publish\"]";
        let yaml = self.read("envgit.yaml");
        assert!(yaml.contains(example), "the template's shell example moved");
        let yaml = yaml.replace(example, "shell:\n  - deny: [\"git push\", \"npm publish\"]");
        self.write("envgit.yaml", &yaml);
    }

    /// The `$HOME` envgit and the sandboxed commands see.
    pub fn user_home(&self) -> PathBuf {
        self.tmp.path().join("userhome")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.project.join(rel)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    /// The host's git commits in the project (changing `a.txt`): the hook it runs must be the
    /// user's, so `marker`, which a planted hook would write, does not appear.
    pub fn host_commit_runs_no_planted_hook(&self, marker: &Path) {
        std::fs::write(self.path("a.txt"), "changed on the host\n").unwrap();
        self.git(&self.project, &["add", "a.txt"]);
        self.git(&self.project, &["commit", "-q", "-m", "host commit"]);
        assert!(!marker.exists(), "the host ran a hook the agent wrote");
    }

    /// Runs the attack `script` inside `envgit run` and proves it ran: envgit did not fail on
    /// its own (125) and the script reached its last line ([`RAN`]). Each command in an attack
    /// prints its own result.
    pub fn attack(&self, script: &str) -> Run {
        self.envgit(&["run", "sh", "-c", &format!("{script}\necho {RAN}")])
            .ran_to(RAN)
    }

    pub fn sh(&self, script: &str) -> Run {
        Run::from(
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(&self.project)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", self.tmp.path())
                .output()
                .unwrap(),
        )
    }

    /// Real git on the host (not in the sandbox) with a fixed identity and no system or user
    /// configuration; panics with git's stderr when it fails.
    /// An empty bare repository `remotes/app.git` that accepts pushes over HTTP, for a git
    /// server to serve from `remotes`: returns (remotes, the bare repository).
    pub fn bare_remote(&self) -> (PathBuf, PathBuf) {
        let remotes = self.tmp.path().join("remotes");
        std::fs::create_dir_all(&remotes).unwrap();
        let bare = remotes.join("app.git");
        self.git(&remotes, &["init", "-q", "--bare", "-b", "main", "app.git"]);
        self.git(&bare, &["config", "http.receivepack", "true"]);
        (remotes, bare)
    }

    /// Pushes a first commit (`a.txt`) to `url`, then makes the project a clone of it with an
    /// identity to commit as.
    pub fn clone_project_from(&self, url: &str) {
        let seed = self.tmp.path().join("seed");
        self.git(self.tmp.path(), &["clone", "-q", url, "seed"]);
        std::fs::write(seed.join("a.txt"), "a").unwrap();
        self.git(&seed, &["add", "-A"]);
        self.git(&seed, &["commit", "-q", "-m", "seed"]);
        self.git(&seed, &["push", "-q", "origin", "HEAD:main"]);
        std::fs::remove_dir_all(&self.project).unwrap();
        self.git(self.tmp.path(), &["clone", "-q", url, "project"]);
        self.git(&self.project, &["config", "user.name", "agent"]);
        self.git(
            &self.project,
            &["config", "user.email", "agent@example.invalid"],
        );
    }

    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.host_git(dir).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The host's git in `dir` as [`Env::git`] runs it (a fixed identity, no system
    /// configuration, this test's home), for a caller that sets more or reads its output.
    pub fn host_git(&self, dir: &Path) -> Command {
        let mut c = Command::new("git");
        c.current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.user_home())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid");
        c
    }

    /// `envgit init` in the project.
    pub fn init(&self) -> Run {
        self.envgit(&["init"]).ok()
    }

    /// `envgit record` and the number of the step it made.
    pub fn record(&self) -> u64 {
        let r = self.envgit(&["record", "--json"]).ok();
        r.json()["number"].as_u64().unwrap()
    }

    pub fn log_json(&self) -> Vec<serde_json::Value> {
        self.envgit(&["log", "--json"])
            .ok()
            .json()
            .as_array()
            .unwrap()
            .clone()
    }

    pub fn store_dir(&self) -> PathBuf {
        let projects = self.home.join("projects");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(projects)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        dirs.sort();
        let canon = self.project.canonicalize().unwrap();
        dirs.into_iter()
            .find(|d| {
                let meta = std::fs::read_to_string(d.join("store.json")).unwrap_or_default();
                meta.contains(&*canon.to_string_lossy())
            })
            .expect("store for the project")
    }
}

/// Run `cmd` with `stdin` written to its standard input (then closed), its output captured: how
/// an agent runs a hook with the tool call's JSON payload.
pub fn output_with_stdin(cmd: &mut Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// Runs `scripts/<script>` (an idempotent installer of a test dependency, fast when it is
/// there) and returns the folder it installs into: `$<var>` when set, else `target/<folder>`.
pub fn installed_by(script: &str, var: &str, folder: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(root.join("scripts").join(script))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/{script} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target").join(folder))
}

/// `refs/heads/main` of a (bare) repository.
pub fn head_of(repo: &Path) -> String {
    let out = Command::new("git")
        .args(["rev-parse", "refs/heads/main"])
        .current_dir(repo)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
pub mod git_forge;
pub mod mcp_client;
pub mod mid_step;
pub mod ui_client;
pub mod upstreams;
pub mod webdriver;
