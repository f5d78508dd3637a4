//! The ways to install envgit, each into a fresh place, with the dist binary scripts/build-dist
//! builds once (`ENVGIT_DIST_BIN`, which scripts/test always sets): the binary alone in a
//! minimal chroot of Debian's libc6 (portable: glibc only), the npm tarballs installed offline
//! and from a registry on loopback by name, `cargo install` reusing the dist build. And, with
//! the binary under test, that envgit refuses to supervise a project holding its own executable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{Env, Run, envgit_bin};

/// The glibc the dist binary may need at most: Ubuntu 22.04's, older than bookworm's 2.36
/// (docs/install.md states it).
const GLIBC_BASELINE: (u32, u32) = (2, 35);
/// The issue's goal for the binary's size.
const MAX_DIST_BYTES: u64 = 30_000_000;
/// How long a server may take to listen, and any one install or command to finish.
const LIMIT: Duration = Duration::from_secs(300);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The dist binary, or `None` (with a loud note) in a local `cargo test` without it.
fn dist_bin() -> Option<PathBuf> {
    let Some(p) = std::env::var_os("ENVGIT_DIST_BIN") else {
        eprintln!(
            "\n*** SKIPPED: ENVGIT_DIST_BIN is not set. scripts/test builds the dist binary \
             (scripts/build-dist) and sets it; to run this test alone: \
             scripts/build-dist && ENVGIT_DIST_BIN=$PWD/target/dist/envgit cargo test -p envgit --test install ***\n"
        );
        return None;
    };
    let p = PathBuf::from(p);
    assert!(
        p.is_file(),
        "ENVGIT_DIST_BIN={} is not a file: run scripts/build-dist",
        p.display()
    );
    Some(p.canonicalize().unwrap())
}

/// Variables of the runner that would point npm or cargo elsewhere (a mirror, a cache, a
/// target directory), and those `cargo test` sets for this test binary (`CARGO_PKG_*`,
/// `OUT_DIR`, …; build scripts such as ring's watch some, so `cargo install` would otherwise
/// rebuild what scripts/build-dist built): removed from every command here.
fn hermetic(c: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let steering = k.starts_with("NPM_CONFIG_")
            || k.starts_with("npm_config_")
            || (k.starts_with("CARGO") && k != "CARGO_HOME")
            || k.starts_with("RUSTC")
            || k == "OUT_DIR";
        if steering {
            c.env_remove(k);
        }
    }
    c
}

/// Runs `cmd` to the end (bounded by [`LIMIT`] through `timeout`).
fn run(cmd: &mut Command) -> Run {
    let mut t = Command::new("timeout");
    t.arg("--kill-after=10")
        .arg(LIMIT.as_secs().to_string())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(d) = cmd.get_current_dir() {
        t.current_dir(d);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    Run::from(hermetic(&mut t).stdin(Stdio::null()).output().unwrap())
}

fn ok(cmd: &mut Command) -> Run {
    let shown = format!("{cmd:?}");
    let r = run(cmd);
    assert_eq!(
        r.code, 0,
        "{shown} failed:\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    r
}

fn version_of(bin: &Path) -> String {
    ok(Command::new(bin).arg("--version")).stdout
}

/// npm with a home and cache of its own in `tmp` (so nothing comes from the runner's cache),
/// no update check.
fn npm(tmp: &Path) -> Command {
    let mut c = Command::new("npm");
    c.env("HOME", tmp.join("npm-home"))
        .env("npm_config_cache", tmp.join("npm-cache"))
        .env("npm_config_update_notifier", "false")
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false");
    c
}

/// scripts/package-npm's two tarballs for `dist`, in `tmp/pkgs`: (wrapper, platform package).
fn package_npm(dist: &Path, tmp: &Path) -> (PathBuf, PathBuf) {
    let out = tmp.join("pkgs");
    ok(Command::new(workspace().join("scripts/package-npm"))
        .arg("--out")
        .arg(&out)
        .arg("--bin")
        .arg(dist));
    let mut wrapper = None;
    let mut platform = None;
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("agent-envgit-linux-x64-") {
            platform = Some(p);
        } else if name.starts_with("agent-envgit-") {
            wrapper = Some(p);
        }
    }
    (wrapper.unwrap(), platform.unwrap())
}

/// A prefix's `envgit` run with a store and home of their own in `tmp`.
fn installed(prefix: &Path, tmp: &Path) -> Command {
    let home = tmp.join("user-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut c = Command::new(prefix.join("bin/envgit"));
    c.env("HOME", &home)
        .env("ENVGIT_HOME", tmp.join("envgit-home"))
        .env("NO_COLOR", "1")
        .current_dir(tmp);
    c
}

/// The dist binary is what the issue asks for: at most 30 MB, no debug info or symbol table,
/// and nothing at run time but glibc (libc, libm, the loader; not even libgcc_s: the unwinder is
/// linked in) no newer than the stated baseline.
#[test]
fn dist_binary_is_small_and_needs_only_glibc() {
    let Some(dist) = dist_bin() else { return };
    let size = std::fs::metadata(&dist).unwrap().len();
    assert!(
        size <= MAX_DIST_BYTES,
        "{} is {size} bytes, over the {MAX_DIST_BYTES} goal",
        dist.display()
    );

    let sections = ok(Command::new("readelf").arg("-SW").arg(&dist)).stdout;
    for s in [".debug_info", ".debug_line", ".symtab"] {
        assert!(
            !sections.contains(&format!(" {s} ")),
            "the dist binary has a {s} section: [profile.dist] strips it"
        );
    }

    let dynamic = ok(Command::new("readelf").arg("-dW").arg(&dist)).stdout;
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    assert!(needed.contains(&"libc.so.6"), "{dynamic}");
    for lib in &needed {
        assert!(
            ["libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2"].contains(lib),
            "the dist binary needs {lib}, which is not part of glibc: {needed:?}"
        );
    }

    let symbols = ok(Command::new("objdump").arg("-T").arg(&dist)).stdout;
    let newest = symbols
        .split("GLIBC_")
        .skip(1)
        .filter_map(|rest| {
            let v: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let mut parts = v.split('.').map(|n| n.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .max()
        .unwrap();
    assert!(
        newest <= GLIBC_BASELINE,
        "the dist binary needs GLIBC_{}.{}, newer than the stated baseline {}.{}",
        newest.0,
        newest.1,
        GLIBC_BASELINE.0,
        GLIBC_BASELINE.1
    );
}

/// The dist binary alone in a root made of Debian's libc6 package (unpacked, not installed;
/// scripts/install-deps-dist fetches it once): none of the build machine's libraries, not even
/// libgcc_s, and `--version`, `--help` and `completions` run.
#[test]
fn dist_binary_runs_in_a_minimal_debian_chroot() {
    let Some(dist) = dist_bin() else { return };
    let debs = std::env::var_os("ENVGIT_DIST_DEBS").map_or_else(
        || {
            std::env::var_os("ENVGIT_TEST_DEPS")
                .map_or_else(|| PathBuf::from("/opt/envgit-test-deps"), PathBuf::from)
                .join("dist-debs")
        },
        PathBuf::from,
    );
    ok(Command::new(workspace().join("scripts/install-deps-dist")).env("ENVGIT_DIST_DEBS", &debs));
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    for e in std::fs::read_dir(&debs).unwrap() {
        let deb = e.unwrap().path();
        let libc6 = deb
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("libc6_"));
        if libc6 && deb.extension().is_some_and(|x| x == "deb") {
            ok(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
        }
    }
    std::fs::copy(&dist, root.join("envgit")).unwrap();
    // Only what libc6 holds: no other shared library anywhere in the root.
    let libs = ok(Command::new("find")
        .arg(&root)
        .args(["-name", "*.so*", "-printf", "%f\n"]))
    .stdout;
    assert!(!libs.contains("libz"), "{libs}");
    assert!(!libs.contains("libssl"), "{libs}");
    assert!(!libs.contains("libgcc_s"), "{libs}");

    let in_root = |args: &[&str]| {
        ok(Command::new("unshare")
            .arg("--map-root-user")
            .arg(format!("--root={}", root.display()))
            .arg("/envgit")
            .args(args))
    };
    let v = in_root(&["--version"]).stdout;
    assert_eq!(v, version_of(&dist), "--version in the chroot");
    assert!(
        in_root(&["--help"]).stdout.contains("Usage: envgit"),
        "--help in the chroot"
    );
    assert!(in_root(&["completions", "bash"]).stdout.contains("_envgit"));
}

/// `npm install -g` of the two tarballs into a fresh prefix with no network and an empty cache:
/// the `envgit` it links runs the shipped binary, passes on its exit code and the signal that
/// ended it, and the man pages and completions are in place.
#[test]
fn npm_tarballs_install_offline_into_a_prefix() {
    let Some(dist) = dist_bin() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    let (wrapper, platform) = package_npm(&dist, tmp);
    let prefix = tmp.join("prefix");
    ok(npm(tmp)
        .args(["install", "-g", "--offline", "--prefix"])
        .arg(&prefix)
        .arg(&wrapper)
        .arg(&platform));

    let envgit = prefix.join("bin/envgit");
    assert_eq!(version_of(&envgit), version_of(&dist));
    let shipped = prefix.join("lib/node_modules/@agent-envgit/linux-x64/bin/envgit");
    assert!(
        std::fs::read(&shipped).unwrap() == std::fs::read(&dist).unwrap(),
        "{} is not the dist binary",
        shipped.display()
    );
    let page = std::fs::read_to_string(prefix.join("share/man/man1/envgit-run.1")).unwrap();
    assert!(page.contains(".TH envgit-run 1"), "{page}");
    let pkg = prefix.join("lib/node_modules/agent-envgit");
    for f in [
        "completions/envgit.bash",
        "completions/_envgit",
        "completions/envgit.fish",
    ] {
        assert!(
            std::fs::read_to_string(pkg.join(f))
                .unwrap()
                .contains("envgit"),
            "{f}"
        );
    }

    // The binary's exit code comes through the launcher (2: a usage error).
    let nowhere = tmp.join("not-a-project");
    std::fs::create_dir_all(&nowhere).unwrap();
    let r = run(installed(&prefix, tmp).arg("-C").arg(&nowhere).arg("log"));
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("is not in an envgit project"),
        "{}",
        r.stderr
    );

    // SIGTERM to the launcher ends the binary and the launcher by that signal. The Copilot
    // hook reads its payload until stdin closes, so it waits here until the signal.
    let mut child = installed(&prefix, tmp)
        .args(["hook", "copilot", "pre"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until_running(&child, &shipped);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = wait_bounded(&mut child);
    assert!(
        status.signal() == Some(libc_sigterm()) || status.code() == Some(128 + libc_sigterm()),
        "the launcher ended with {status:?}, not by SIGTERM"
    );
}

fn libc_sigterm() -> i32 {
    rustix::process::Signal::TERM.as_raw()
}

/// Waits (bounded) until `exe` runs as `launcher` itself (Node's execve) or as its child.
fn wait_until_running(launcher: &Child, exe: &Path) {
    let deadline = Instant::now() + LIMIT;
    let pid = launcher.id().to_string();
    loop {
        let running = std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            let dir = e.path();
            let is_ours = std::fs::read_link(dir.join("exe")).is_ok_and(|p| p == exe);
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            // The fields after the command name: state, then ppid.
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1));
            is_ours && (e.file_name().to_str() == Some(&pid) || ppid == Some(pid.as_str()))
        });
        if running {
            return;
        }
        assert!(Instant::now() < deadline, "{} never started", exe.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the launcher did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The platform package is a 24 MB binary (10 MB gzipped): over verdaccio's default 10 MB body.
const VERDACCIO_CONFIG: &str = "\
storage: ./storage
max_body_size: 200mb
auth:
  htpasswd:
    file: ./htpasswd
    max_users: 10
uplinks: {}
packages:
  '**':
    access: $all
    publish: $authenticated
web:
  enable: false
log: { type: stdout, format: pretty, level: warn }
";

/// A server process killed when the test ends, pass or fail.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Verdaccio (scripts/install-deps-registries installs it) on a loopback port with a user who
/// may publish: (server, registry URL, token).
fn verdaccio(tmp: &Path) -> (Server, String, String) {
    let deps = std::env::var_os("ENVGIT_REGISTRY_DEPS").map_or_else(
        || {
            std::env::var_os("ENVGIT_TEST_DEPS")
                .map_or_else(|| PathBuf::from("/opt/envgit-test-deps"), PathBuf::from)
                .join("registries")
        },
        PathBuf::from,
    );
    ok(
        Command::new(workspace().join("scripts/install-deps-registries"))
            .env("ENVGIT_REGISTRY_DEPS", &deps),
    );
    let dir = tmp.join("verdaccio");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), VERDACCIO_CONFIG).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(dir.join("verdaccio.log")).unwrap();
    let mut cmd = Command::new("node");
    cmd.arg(deps.join("node_modules/verdaccio/bin/verdaccio"))
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let mut server = Server(hermetic(&mut cmd).spawn().unwrap());
    let deadline = Instant::now() + LIMIT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        let exited = server.0.try_wait().unwrap();
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "verdaccio is not listening on {port} ({exited:?}):\n{}",
            std::fs::read_to_string(dir.join("verdaccio.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("http://127.0.0.1:{port}/");
    let out = ok(Command::new("curl").args([
        "-sf",
        "-X",
        "PUT",
        "-H",
        "content-type: application/json",
        "-d",
        r#"{"name":"publisher","password":"publisher-pw"}"#,
        &format!("{url}-/user/org.couchdb.user:publisher"),
    ]))
    .stdout;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    (server, url, v["token"].as_str().unwrap().to_owned())
}

/// Both tarballs published to a registry on loopback, then `npm install -g agent-envgit` by
/// name into a fresh prefix: npm resolves the platform package from the wrapper's optional
/// dependency, as for a user, and `envgit demo` and `envgit doctor` run from there.
#[test]
fn npm_install_by_name_from_a_loopback_registry() {
    let Some(dist) = dist_bin() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    let (wrapper, platform) = package_npm(&dist, tmp);
    let (_server, registry, token) = verdaccio(tmp);
    let auth = format!(
        "--{}:_authToken={token}",
        registry.trim_start_matches("http:")
    );
    // The platform package first: the wrapper's optional dependency must resolve once it is out.
    for tarball in [&platform, &wrapper] {
        ok(npm(tmp)
            .args(["publish", "--registry", &registry, &auth])
            .arg(tarball));
    }

    let prefix = tmp.join("prefix");
    ok(npm(tmp)
        .args(["install", "-g", "--registry", &registry, "--prefix"])
        .arg(&prefix)
        .arg("agent-envgit"));
    let resolved = ok(npm(tmp)
        .args(["ls", "-g", "--all", "--parseable", "--prefix"])
        .arg(&prefix))
    .stdout;
    assert!(
        resolved.contains("@agent-envgit/linux-x64"),
        "npm did not install the platform package:\n{resolved}"
    );
    assert_eq!(version_of(&prefix.join("bin/envgit")), version_of(&dist));

    let demo = ok(installed(&prefix, tmp).arg("demo"));
    assert!(
        demo.stdout.contains("rewind") || demo.stderr.contains("rewind"),
        "demo:\n{}\n{}",
        demo.stdout,
        demo.stderr
    );
    let doctor = run(installed(&prefix, tmp).args(["doctor", "--json"]));
    assert_eq!(
        doctor.code, 0,
        "doctor:\n{}\n{}",
        doctor.stdout, doctor.stderr
    );
}

/// `cargo install --locked --path crates/envgit --profile dist` with the workspace's target
/// directory installs the very binary scripts/build-dist built: the custom profile is honoured
/// and nothing is built again.
#[test]
fn cargo_install_reuses_the_dist_build() {
    let Some(dist) = dist_bin() else { return };
    // ENVGIT_DIST_BIN is TARGET/dist/envgit.
    let target = dist.parent().and_then(Path::parent).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let r = ok(Command::new("cargo")
        .args([
            "install",
            "--locked",
            "--offline",
            "--profile",
            "dist",
            "--path",
        ])
        .arg(workspace().join("crates/envgit"))
        .arg("--target-dir")
        .arg(target)
        .arg("--root")
        .arg(&root)
        .current_dir(tmp.path()));
    assert!(
        !r.stderr.contains("Compiling envgit "),
        "cargo install built envgit again instead of reusing the dist build:\n{}",
        r.stderr
    );
    let installed = root.join("bin/envgit");
    assert!(
        std::fs::read(&installed).unwrap() == std::fs::read(&dist).unwrap(),
        "{} differs from {}",
        installed.display(),
        dist.display()
    );
    assert_eq!(version_of(&installed), version_of(&dist));
}

/// `envgit --version` names the commit it was built from.
#[test]
fn version_names_the_commit() {
    let head = Command::new("git")
        .args(["log", "-1", "--format=%h", "--abbrev=12"])
        .current_dir(workspace())
        .output()
        .unwrap();
    let v = ok(Command::new(envgit_bin()).arg("--version")).stdout;
    if !head.status.success() {
        // A source tarball: the plain version.
        assert_eq!(v.trim(), concat!("envgit ", env!("CARGO_PKG_VERSION")));
        return;
    }
    let head = String::from_utf8(head.stdout).unwrap();
    assert!(
        v.starts_with(concat!("envgit ", env!("CARGO_PKG_VERSION"), " ("))
            && v.contains(head.trim()),
        "--version is {v:?}, HEAD is {head}"
    );
}

/// A copy of envgit inside a project (as `npm install agent-envgit` there would put it) refuses
/// to supervise that project: init, run, log name its path and the fix; the Copilot hook denies
/// the agent's calls instead of letting them through unrecorded. The same binary outside works.
#[test]
fn an_executable_inside_the_project_refuses_to_supervise_it() {
    let env = Env::new();
    let inside = env.path("node_modules/@agent-envgit/linux-x64/bin/envgit");
    std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
    std::fs::copy(envgit_bin(), &inside).unwrap();
    // The project's copy, with the store and home Env::cmd gives the binary under test.
    let local_in = |dir: &Path| {
        let mut c = Command::new(&inside);
        c.current_dir(dir)
            .env("ENVGIT_HOME", &env.home)
            .env("HOME", env.user_home())
            .env("NO_COLOR", "1");
        c
    };
    let local = |args: &[&str]| run(local_in(&env.project).args(args));
    let refused = |r: &Run| {
        assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
        assert!(
            r.stderr
                .contains(&inside.canonicalize().unwrap().display().to_string())
                && r.stderr.contains("npm install -g agent-envgit"),
            "{}",
            r.stderr
        );
    };
    refused(&local(&["init"]));
    assert!(
        !env.path("envgit.yaml").exists(),
        "init wrote a policy before refusing"
    );

    env.envgit(&["init"]).ok();
    refused(&local(&["run", "--", "true"]));
    refused(&local(&["log"]));
    // From a subdirectory too: the project is found upward.
    std::fs::create_dir_all(env.path("src")).unwrap();
    refused(&run(local_in(&env.path("src")).arg("log")));

    // The Copilot hook (installed with this path in ~/.copilot) denies.
    let payload = serde_json::json!({
        "cwd": env.project.display().to_string(),
        "toolName": "bash",
        "toolArgs": "{\"command\":\"echo hi\"}",
    });
    let out = Run::from(support::output_with_stdin(
        local_in(&env.project).args(["hook", "copilot", "pre"]),
        payload.to_string().as_bytes(),
    ));
    assert!(
        out.stdout.contains("\"permissionDecision\":\"deny\"")
            && out.stdout.contains("inside the project"),
        "the hook did not deny:\n{}\n{}",
        out.stdout,
        out.stderr
    );

    // The binary outside the project supervises it as ever.
    env.envgit(&["run", "--", "true"]).ok();
}

/// Every crate the binary is built from packs for crates.io (`cargo package`, not published):
/// description, license, repository, readme, keywords, categories, versioned path
/// dependencies, and no warning.
#[test]
fn crates_are_publish_ready() {
    let tmp = tempfile::tempdir().unwrap();
    let r = ok(Command::new("cargo")
        .args([
            "package",
            "--workspace",
            "--exclude",
            "envgit-bench",
            "--no-verify",
            "--offline",
            "--allow-dirty",
            "--target-dir",
        ])
        .arg(tmp.path())
        .current_dir(workspace()));
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
    for krate in [
        "envgit",
        "envgit-store",
        "envgit-sandbox",
        "envgit-gate",
        "envgit-policy",
        "envgit-codex",
        "envgit-repl",
    ] {
        let file = tmp.path().join(format!(
            "package/{krate}-{}.crate",
            env!("CARGO_PKG_VERSION")
        ));
        assert!(
            file.is_file(),
            "{} was not packed:\n{}",
            file.display(),
            r.stderr
        );
    }
}
