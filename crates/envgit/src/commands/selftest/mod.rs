//! `envgit selftest`: the proof that enforcement runs on this machine, not just that it is
//! configured. In a temporary project with a store of its own, this very binary starts a
//! loopback upstream, then tries each class of bypass the gate has been attacked with, and the
//! sandbox's escape basics, each for real inside `envgit run` ([`probe`] is what runs inside),
//! and prints one line per class. Its upstream compares what reached it with what the gate
//! recorded as judged. `envgit doctor` runs the `--quick` subset.

pub mod probe;
mod upstream;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::proc::{TempDir, run_bounded};
use crate::cli::SelftestArgs;
use crate::failure::{CmdResult, Failure};
use crate::output::{self, Style};
use upstream::Upstream;

/// How long one `envgit` child may take before it is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);
/// The marker a smuggled request carries: it must never reach the upstream.
const SMUGGLED: &str = "SELFTEST-SMUGGLED";

/// One class of attack and how it ended.
#[derive(Debug, Clone, Serialize)]
pub struct ClassResult {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

#[derive(Serialize)]
struct Report<'a> {
    ok: bool,
    classes: &'a [ClassResult],
}

pub fn run(args: &SelftestArgs) -> CmdResult<ExitCode> {
    let results = classes(args.quick)?;
    let ok = results.iter().all(|r| r.ok);
    if args.out.json {
        output::json(&Report {
            ok,
            classes: &results,
        })?;
    } else {
        let s = Style::stdout();
        let width = results.iter().map(|r| r.name.len()).max().unwrap_or(0);
        for r in &results {
            let mark = if r.ok {
                s.green("ok    ")
            } else {
                s.red("FAILED")
            };
            println!("{mark}  {:<width$}  {}", r.name, r.detail);
        }
        let failed = results.iter().filter(|r| !r.ok).count();
        if ok {
            println!(
                "{}",
                s.green(&format!(
                    "all {} classes hold on this machine",
                    results.len()
                ))
            );
        } else {
            println!(
                "{}",
                s.red(&format!(
                    "{failed} of {} classes FAILED: enforcement does not hold here; `envgit doctor` says what this machine lacks",
                    results.len()
                ))
            );
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The scratch project every class runs in.
struct Lab {
    exe: PathBuf,
    tmp: TempDir,
    upstream: Upstream,
    /// A port on the host's loopback that the policy does not list.
    unlisted: TcpListener,
    canary: String,
}

impl Lab {
    fn new() -> CmdResult<Lab> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::failed(format!("cannot find envgit's own binary: {e}")))?;
        let tmp = TempDir::new("envgit-selftest").map_err(|e| {
            Failure::failed(format!(
                "cannot make a temporary directory in {}: {e}; export TMPDIR=DIR (a writable directory)",
                std::env::temp_dir().display()
            ))
        })?;
        let io = |e: std::io::Error| Failure::failed(format!("selftest set-up: {e}"));
        let upstream = Upstream::start().map_err(io)?;
        let unlisted = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let canary = format!("envgit-selftest-canary-{nanos:x}");
        let lab = Lab {
            exe,
            tmp,
            upstream,
            unlisted,
            canary,
        };
        for dir in ["p", "s", "h/.ssh", "outside"] {
            std::fs::create_dir_all(lab.tmp.0.join(dir)).map_err(io)?;
        }
        std::fs::write(lab.tmp.0.join("h/.ssh/id_selftest"), &lab.canary).map_err(io)?;
        let allow = format!("127.0.0.1:{}", lab.upstream.port);
        let init = lab.envgit(&["init", "--allow", &allow])?;
        if init.code != Some(0) {
            return Err(Failure::failed(format!(
                "`envgit init` in the selftest project failed: {}",
                init.stderr_tail()
            )));
        }
        Ok(lab)
    }

    fn envgit(&self, args: &[&str]) -> CmdResult<super::proc::Ran> {
        run_bounded(
            Command::new(&self.exe)
                .args(args)
                .current_dir(self.tmp.0.join("p"))
                .env("ENVGIT_HOME", self.tmp.envgit_home())
                .env("HOME", self.tmp.0.join("h"))
                .env("NO_COLOR", "1"),
            CHILD_TIMEOUT,
        )
        .map_err(|e| Failure::failed(format!("cannot run {}: {e}", self.exe.display())))
    }

    /// Runs the probe inside the sandbox; the line it printed, or why it did not run.
    fn probe(&self, args: &[&str]) -> Result<String, String> {
        let mut argv = vec!["run", envgit_sandbox::plan::ENVGIT_INSIDE, "selftest-probe"];
        argv.extend_from_slice(args);
        let ran = self.envgit(&argv).map_err(|e| e.message)?;
        match ran.stdout.lines().last() {
            Some(line) if ran.code == Some(0) => Ok(line.to_owned()),
            _ => Err(format!(
                "the probe did not run ({}): {}",
                ran.status(),
                ran.stderr_tail()
            )),
        }
    }

    /// Sends raw bytes to the upstream from inside; the statuses that came back.
    fn http(&self, bytes: &[u8], delay_ms: u64) -> Result<String, String> {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let port = self.upstream.port.to_string();
        self.probe(&["http", &port, &hex, &delay_ms.to_string()])
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.upstream.port)
    }
}

/// A `git-receive-pack` body that updates a ref (what the preset's `git.push` refuses).
fn push_body() -> Vec<u8> {
    let line = format!(
        "{} {} refs/heads/{SMUGGLED}\0report-status\n",
        "0".repeat(40),
        "1".repeat(40)
    );
    let mut body = format!("{:04x}{line}", line.len() + 4).into_bytes();
    body.extend_from_slice(b"0000");
    body
}

fn push(lab: &Lab, target: &str, extra: &str) -> Vec<u8> {
    request(lab, "POST", target, extra)
}

/// `METHOD target` carrying the push body, with `extra` header lines.
fn request(lab: &Lab, method: &str, target: &str, extra: &str) -> Vec<u8> {
    let body = push_body();
    let mut out = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\n{extra}Content-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n",
        lab.host(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

fn result(name: &'static str, outcome: Result<(bool, String), String>) -> ClassResult {
    match outcome {
        Ok((ok, detail)) => ClassResult { name, ok, detail },
        Err(why) => ClassResult {
            name,
            ok: false,
            detail: why,
        },
    }
}

/// A request that must not reach the upstream: passes when the marker never arrived.
fn not_delivered(lab: &Lab, bytes: &[u8], delay_ms: u64) -> Result<(bool, String), String> {
    let reply = lab.http(bytes, delay_ms)?;
    if lab.upstream.received(SMUGGLED) {
        Ok((
            false,
            format!("an unjudged or refused request reached the upstream ({reply})"),
        ))
    } else {
        Ok((
            true,
            format!("nothing unjudged reached the upstream ({reply})"),
        ))
    }
}

/// Every class, or the quick ones.
pub(crate) fn classes(quick: bool) -> CmdResult<Vec<ClassResult>> {
    let lab = Lab::new()?;
    let host = lab.host();
    let mut out = Vec::new();

    out.push(result("gate: a push is refused at the request", {
        let reply = lab.http(&push(&lab, "/selftest.git/git-receive-pack", ""), 0);
        reply.map(|r| {
            let refused = r.contains("403") && !lab.upstream.received(SMUGGLED);
            (refused, format!("answered {r}"))
        })
    }));
    let mut hidden = format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: Content-Length\r\nContent-Length: {}\r\n\r\n",
        push(&lab, "/hidden.git/git-receive-pack", "").len()
    )
    .into_bytes();
    hidden.extend_from_slice(&push(&lab, "/hidden.git/git-receive-pack", ""));
    out.push(result(
        "gate: Connection naming Content-Length",
        not_delivered(&lab, &hidden, 0),
    ));
    if !quick {
        let smuggled = push(&lab, "/clte.git/git-receive-pack", "");
        let mut cl_te = format!(
            "POST /up HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            smuggled.len() + 5
        )
        .into_bytes();
        cl_te.extend_from_slice(&smuggled);
        out.push(result(
            "gate: Content-Length and Transfer-Encoding",
            not_delivered(&lab, &cl_te, 0),
        ));
        out.push(result(
            "gate: a fragment in the target",
            not_delivered(&lab, &push(&lab, "/frag.git/git-receive-pack#x", ""), 0),
        ));
        out.push(result(
            "gate: a pause before the request",
            not_delivered(&lab, &push(&lab, "/late.git/git-receive-pack", ""), 600),
        ));
        let mut crlf = b"\r\n".to_vec();
        crlf.extend_from_slice(&push(&lab, "/crlf.git/git-receive-pack", ""));
        out.push(result(
            "gate: an empty line before the request",
            not_delivered(&lab, &crlf, 0),
        ));
        out.push(result(
            "gate: a method override",
            not_delivered(
                &lab,
                &request(
                    &lab,
                    "PUT",
                    "/override.git/git-receive-pack",
                    "X-HTTP-Method-Override: POST\r\n",
                ),
                0,
            ),
        ));
        out.push(result("gate: a chunk size that overflows", {
            let mut big = format!(
                "POST /x.git/git-receive-pack HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"
            )
            .into_bytes();
            big.extend_from_slice(&[b'a'; 8192]);
            lab.http(&big, 0).and_then(|r| {
                let after = lab.http(format!("GET /after HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(), 0)?;
                Ok((
                    r.contains("400") && after.contains("200"),
                    format!("answered {r}, then {after} to the next request"),
                ))
            })
        }));
    }

    out.push(result("sandbox: ~/.ssh is unreadable", {
        lab.probe(&[
            "read",
            &lab.tmp.0.join("h/.ssh/id_selftest").display().to_string(),
        ])
        .map(|line| (!line.contains(&lab.canary), line))
    }));
    out.push(result("sandbox: writes outside the project do not land", {
        let target = lab.tmp.0.join("outside/marker");
        lab.probe(&["write", &target.display().to_string()])
            .map(|line| {
                let landed = target.exists();
                (
                    !landed,
                    if landed {
                        format!("{line}: the file is on the host")
                    } else {
                        line
                    },
                )
            })
    }));
    out.push(result("sandbox: a host port not listed is unreachable", {
        let port = lab.unlisted.local_addr().map(|a| a.port()).unwrap_or(0);
        lab.probe(&["connect", &format!("127.0.0.1:{port}")])
            .map(|line| (line.starts_with("connect failed"), line))
    }));
    if !quick {
        out.push(result("sandbox: DNS to the outside goes nowhere", {
            lab.probe(&["udp", "192.0.2.53:53"])
                .map(|line| (line.starts_with("udp failed"), line))
        }));
    }
    out.push(result(
        "gate: every request that arrived was judged",
        judged(&lab),
    ));
    Ok(out)
}

/// Every request the upstream read appears, allowed, in the steps' records.
fn judged(lab: &Lab) -> Result<(bool, String), String> {
    let log = lab.envgit(&["log", "--json"]).map_err(|e| e.message)?;
    let steps: serde_json::Value =
        serde_json::from_str(&log.stdout).map_err(|e| format!("envgit log --json: {e}"))?;
    let allowed: Vec<(String, String)> = steps
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["requests"].as_array().cloned().unwrap_or_default())
        .filter(|q| q["decision"] == "allowed")
        .map(|q| {
            let s = |k: &str| q[k].as_str().unwrap_or_default().to_owned();
            (s("method"), s("path"))
        })
        .collect();
    let seen = lab.upstream.seen();
    let unjudged: Vec<String> = seen
        .iter()
        .filter(|r| {
            let path = r.target.split('?').next().unwrap_or_default();
            !allowed.iter().any(|(m, p)| *m == r.method && p == path)
        })
        .map(|r| format!("{} {}", r.method, r.target))
        .collect();
    if unjudged.is_empty() {
        Ok((
            true,
            format!(
                "{} request(s) arrived, each judged and recorded",
                seen.len()
            ),
        ))
    } else {
        Ok((
            false,
            format!("arrived without a judgement: {}", unjudged.join(", ")),
        ))
    }
}
