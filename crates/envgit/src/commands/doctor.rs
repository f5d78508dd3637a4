//! `envgit doctor`: is this host ready for envgit? One line per check, ✓ or ✗, and for each ✗
//! the exact fix. Required checks decide the exit code (0 when all pass, 1 otherwise);
//! optional ones (agent CLIs, /dev/kvm) only inform.

mod host;
mod live;
mod optional;
use super::proc;
mod project;
mod store;

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;

use crate::cli::JsonArg;
use crate::failure::CmdResult;
use crate::output::{self, Style};

/// The outcome of one check.
#[derive(Serialize, Debug)]
pub struct Check {
    pub name: String,
    /// Required checks decide the exit code; the others only inform.
    pub required: bool,
    pub ok: bool,
    pub detail: String,
    /// The exact fix, for a failed check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Not run here (outside a project): shown with a dash.
    #[serde(skip)]
    pub skipped: bool,
}

impl Check {
    pub fn pass(name: &str, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            required: true,
            ok: true,
            detail: detail.into(),
            fix: None,
            skipped: false,
        }
    }

    pub fn fail(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            required: true,
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
            skipped: false,
        }
    }

    pub fn skip(name: &str, detail: impl Into<String>) -> Self {
        Self {
            skipped: true,
            required: false,
            ..Self::pass(name, detail)
        }
    }

    /// Make this check informational: it never changes the exit code.
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }
}

#[derive(Serialize)]
struct Report<'a> {
    ok: bool,
    checks: &'a [Check],
}

pub fn run(dir: Option<&Path>, args: &JsonArg) -> CmdResult<ExitCode> {
    let mut checks = vec![
        host::kernel(),
        host::user_namespaces(),
        host::landlock(),
        host::seccomp(),
    ];
    let at = project::Location::find(dir);
    checks.extend(store::checks());
    checks.push(host::git());
    checks.extend(project::checks(&at));
    checks.extend(live::checks());
    checks.extend(optional::agents());
    checks.push(optional::inotify());
    checks.push(optional::kvm());

    let ok = checks.iter().all(|c| c.ok || !c.required);
    if args.json {
        output::json(&Report {
            ok,
            checks: &checks,
        })?;
    } else {
        print_human(&checks, ok);
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_human(checks: &[Check], ok: bool) {
    let s = Style::stdout();
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let line = |c: &Check| {
        let mark = if c.skipped {
            s.dim("-")
        } else if c.ok {
            s.green("✓")
        } else if c.required {
            s.red("✗")
        } else {
            s.yellow("✗")
        };
        println!("  {mark} {:<width$}  {}", c.name, c.detail);
        if let Some(fix) = c.fix.as_deref().filter(|_| !c.ok) {
            let pad = " ".repeat(width + 6);
            for (i, l) in fix.lines().enumerate() {
                let head = if i == 0 {
                    s.bold("fix:")
                } else {
                    "    ".into()
                };
                println!("{pad}{head} {l}");
            }
        }
    };
    println!("{}", s.bold("Required:"));
    checks
        .iter()
        .filter(|c| c.required || c.skipped)
        .for_each(line);
    println!(
        "{}",
        s.bold("Optional (informational, never change the exit code):")
    );
    checks
        .iter()
        .filter(|c| !c.required && !c.skipped)
        .for_each(line);
    let failed = checks.iter().filter(|c| c.required && !c.ok).count();
    if ok {
        println!(
            "{}",
            s.green("all required checks pass: envgit can run here")
        );
    } else {
        println!(
            "{}",
            s.red(&format!(
                "{failed} required check(s) failed: apply the fixes above and run `envgit doctor` again"
            ))
        );
    }
}
