//! The live probe: this very binary, in a temporary project with a store of its own, runs
//! `true` in the sandbox, then `envgit selftest --quick` (attacks on the gate and the sandbox,
//! tried for real). Everything it makes is removed afterwards.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::Check;
use super::proc::{Ran, TempDir, run_bounded};

/// How long one `envgit` child may take before it is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(20);
const SANDBOX: &str = "sandboxed `true`";
const GATED: &str = "selftest (quick)";

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
                .env("ENVGIT_HOME", self.tmp.envgit_home())
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
    let tmp = match TempDir::new("envgit-doctor") {
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
        selftest()
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

/// `envgit selftest --quick`: a push refused at the request, a smuggling attempt, the
/// escape basics, each tried for real; one check, the failed classes named.
fn selftest() -> Check {
    match crate::commands::selftest::classes(true) {
        Ok(classes) => {
            let failed: Vec<String> = classes
                .iter()
                .filter(|c| !c.ok)
                .map(|c| format!("{} ({})", c.name, c.detail))
                .collect();
            if failed.is_empty() {
                Check::pass(
                    GATED,
                    format!(
                        "{} attack classes tried for real in the sandbox and gate; all held",
                        classes.len()
                    ),
                )
            } else {
                Check::fail(
                    GATED,
                    format!("FAILED: {}", failed.join("; ")),
                    "run `envgit selftest` for the whole report; the failed checks above say what this machine lacks",
                )
            }
        }
        Err(e) => Check::fail(
            GATED,
            e.message,
            "run `envgit selftest` for the whole report",
        ),
    }
}
