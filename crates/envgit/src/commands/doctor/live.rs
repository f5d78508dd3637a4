//! The live probe: this very binary, in a temporary project with a store of its own, runs
//! `true` in the sandbox and then fetches a page from a server on the host's loopback, through
//! the gate, as the policy allows. Everything it makes is removed afterwards.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Check;
use super::proc::{Ran, run_bounded, which};

/// How long one `envgit` child may take before it is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(20);
const SANDBOX: &str = "sandboxed `true`";
const GATED: &str = "gated request";
/// The path the probe asks the local server for.
const PROBE_PATH: &str = "/envgit-doctor";

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    /// Short on purpose: the gate's unix socket lives deep inside the store, and a socket path
    /// must fit in 108 bytes.
    fn new() -> std::io::Result<Self> {
        let mut last = None;
        for attempt in 0..8u32 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let tag = nanos ^ std::process::id().rotate_left(16) ^ attempt;
            let path = base().join(format!("envgit-doctor-{tag:08x}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                // The sandbox sees canonical paths; so should the store.
                Ok(()) => {
                    return match path.canonicalize() {
                        Ok(c) => Ok(Self(c)),
                        Err(e) => {
                            let _ = std::fs::remove_dir(&path);
                            Err(e)
                        }
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no attempt made")))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where the probe's temporary project goes.
fn base() -> PathBuf {
    std::env::temp_dir()
}

/// A temporary project and its store home.
struct Probe {
    exe: PathBuf,
    tmp: TempDir,
}

impl Probe {
    fn project(&self) -> PathBuf {
        self.tmp.0.join("p")
    }

    fn envgit(&self, args: &[&str]) -> std::io::Result<Ran> {
        run_bounded(
            Command::new(&self.exe)
                .args(args)
                .current_dir(self.project())
                .env("ENVGIT_HOME", self.tmp.0.join("s"))
                .env("NO_COLOR", "1"),
            CHILD_TIMEOUT,
        )
    }
}

/// The fix a failed child named (`…; fix: …` is how envgit's own messages give one).
fn fix_in(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|l| {
        l.split_once("fix: ")
            .map(|(_, f)| f.trim().trim_matches('`').to_string())
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn checks() -> Vec<Check> {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            let why = format!("cannot find envgit's own binary to run: {e}");
            let fix = "run envgit by its path (e.g. /usr/local/bin/envgit doctor)";
            return vec![
                Check::fail(SANDBOX, &why, fix),
                Check::fail(GATED, why, fix),
            ];
        }
    };
    let tmp = match TempDir::new() {
        Ok(t) => t,
        Err(e) => {
            let tmpdir = std::env::temp_dir();
            let why = format!(
                "cannot make a temporary directory in {}: {e}",
                tmpdir.display()
            );
            let fix = "export TMPDIR=DIR (a writable directory) and run `envgit doctor` again";
            return vec![
                Check::fail(SANDBOX, &why, fix),
                Check::fail(GATED, why, fix),
            ];
        }
    };
    let probe = Probe { exe, tmp };
    let sandbox = sandboxed_true(&probe);
    let gated = if sandbox.ok {
        gated_request(&probe)
    } else {
        Check::fail(
            GATED,
            "not tried: the sandbox does not start",
            sandbox.fix.clone().unwrap_or_default(),
        )
    };
    vec![sandbox, gated]
}

fn sandboxed_true(p: &Probe) -> Check {
    if let Err(e) = std::fs::create_dir(p.project()) {
        return Check::fail(
            SANDBOX,
            format!("cannot make a project in {}: {e}", p.tmp.0.display()),
            "export TMPDIR=DIR (a writable directory) and run `envgit doctor` again",
        );
    }
    match p.envgit(&["init"]) {
        Ok(r) if r.success() => {}
        Ok(r) => {
            return Check::fail(
                SANDBOX,
                format!(
                    "`envgit init` in a temporary project failed ({}): {}",
                    r.status(),
                    r.stderr_tail()
                ),
                fix_in(&r.stderr).unwrap_or_else(|| {
                    "export TMPDIR=DIR (a writable directory on a local filesystem) and run `envgit doctor` again".into()
                }),
            );
        }
        Err(e) => {
            return Check::fail(
                SANDBOX,
                format!("cannot run {}: {e}", p.exe.display()),
                "reinstall envgit",
            );
        }
    }
    match p.envgit(&["run", "true"]) {
        Ok(r) if r.success() => Check::pass(
            SANDBOX,
            format!(
                "`envgit run true` in a temporary project: exit 0 in {} ms",
                r.elapsed.as_millis()
            ),
        ),
        Ok(r) => Check::fail(
            SANDBOX,
            format!(
                "`envgit run true` failed ({}): {}",
                r.status(),
                r.stderr_tail()
            ),
            fix_in(&r.stderr).unwrap_or_else(|| {
                "apply the fixes of the failed checks above (user namespaces, Landlock, seccomp); \
                 `envgit run true` in a project shows the whole error"
                    .into()
            }),
        ),
        Err(e) => Check::fail(
            SANDBOX,
            format!("cannot run {}: {e}", p.exe.display()),
            "reinstall envgit",
        ),
    }
}

/// A server on the host's loopback answering every request with `body`; it records each
/// request line and stops when told to.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(body: String) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + CHILD_TIMEOUT + Duration::from_secs(5);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            if let Some(line) = answer(conn, &body)
                                && let Ok(mut s) = seen.lock()
                            {
                                s.push(line);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        Ok(Self {
            port,
            seen,
            stop,
            thread: Some(thread),
        })
    }

    /// Stop serving; the request lines seen.
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// Read one request's head, answer `200 OK` with `body`; the request line.
fn answer(mut conn: TcpStream, body: &str) -> Option<String> {
    conn.set_nonblocking(false).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(resp.as_bytes());
    let text = String::from_utf8_lossy(&head);
    text.lines()
        .next()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
}

/// The HTTP client to run in the sandbox: curl, else python3, else bash's /dev/tcp.
fn client(port: u16) -> Option<(&'static str, Vec<String>)> {
    let url = format!("http://127.0.0.1:{port}{PROBE_PATH}");
    if let Some(curl) = which("curl") {
        let argv = vec![
            curl.display().to_string(),
            "-sS".into(),
            "-m".into(),
            "10".into(),
            url,
        ];
        return Some(("curl", argv));
    }
    if let Some(py) = which("python3") {
        let argv = vec![
            py.display().to_string(),
            "-c".into(),
            "import sys, urllib.request as u; \
             sys.stdout.write(u.urlopen(sys.argv[1], timeout=10).read().decode())"
                .into(),
            url,
        ];
        return Some(("python3", argv));
    }
    if let Some(bash) = which("bash") {
        let script = format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && \
             printf 'GET {PROBE_PATH} HTTP/1.0\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n' >&3 && cat <&3"
        );
        return Some((
            "bash /dev/tcp",
            vec![bash.display().to_string(), "-c".into(), script],
        ));
    }
    None
}

fn gated_request(p: &Probe) -> Check {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let token = format!("envgit-doctor-reply-{nanos:x}");
    let server = match Server::start(token.clone()) {
        Ok(s) => s,
        Err(e) => {
            return Check::fail(
                GATED,
                format!("cannot listen on 127.0.0.1: {e}"),
                "bring up the loopback interface: sudo ip link set lo up",
            );
        }
    };
    let port = server.port;
    let Some((name, argv)) = client(port) else {
        server.finish();
        return Check::fail(
            GATED,
            "no HTTP client to probe with: none of curl, python3 or bash is on PATH",
            "install curl (`sudo apt-get install curl`)",
        );
    };
    let policy = format!("version: 1\nnetwork:\n  allow: [\"127.0.0.1:{port}\"]\n");
    if let Err(e) = std::fs::write(p.project().join("envgit.yaml"), policy) {
        server.finish();
        return Check::fail(
            GATED,
            format!("cannot write the probe's envgit.yaml: {e}"),
            "export TMPDIR=DIR (a writable directory) and run `envgit doctor` again",
        );
    }
    let mut args: Vec<&str> = vec!["run", "--"];
    args.extend(argv.iter().map(String::as_str));
    let ran = p.envgit(&args);
    let seen = server.finish();
    let ran = match ran {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                GATED,
                format!("cannot run {}: {e}", p.exe.display()),
                "reinstall envgit",
            );
        }
    };
    let saw = seen.iter().find(|l| l.contains(PROBE_PATH));
    let replied = ran.stdout.contains(&token);
    match (ran.success(), saw, replied) {
        (true, Some(line), true) => Check::pass(
            GATED,
            format!(
                "{name} in the sandbox → gate → 127.0.0.1:{port} (allowed by the policy): the server saw `{line}` and its reply came back"
            ),
        ),
        (_, saw, replied) => {
            let reached = match saw {
                Some(l) => format!("the server saw `{l}`"),
                None => "the request never reached the server".into(),
            };
            let back = if replied {
                "its reply came back"
            } else {
                "its reply did not come back"
            };
            let out = one_line(&ran.stdout);
            let out = if out.is_empty() {
                String::new()
            } else {
                format!("; stdout: {}", out.chars().take(200).collect::<String>())
            };
            Check::fail(
                GATED,
                format!(
                    "{name} to 127.0.0.1:{port} (allowed by the policy) through the gate: {} — {reached}, {back}{out}; stderr: {}",
                    ran.status(),
                    ran.stderr_tail()
                ),
                fix_in(&ran.stderr).unwrap_or_else(|| {
                    format!(
                        "check that nothing (a firewall, a proxy variable) intercepts loopback connections; in a project whose envgit.yaml allows \"127.0.0.1:PORT\", `envgit run -- {name} …` shows the whole error"
                    )
                }),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fix_in;

    #[test]
    fn a_fix_is_taken_from_envgits_message() {
        let err = "envgit: cannot create a user namespace for the sandbox (Operation not permitted): \
                   user namespaces are disabled; fix: `sudo sysctl -w user.max_user_namespaces=15000`\n";
        assert_eq!(
            fix_in(err).as_deref(),
            Some("sudo sysctl -w user.max_user_namespaces=15000")
        );
        assert_eq!(fix_in("envgit: something else"), None);
    }
}
