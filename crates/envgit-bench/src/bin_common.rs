//! What the A/B benchmark binaries under `src/bin/` share (each includes this file by path,
//! as it does `percentile.rs`): a command that must succeed, and a percentile in milliseconds.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Result, bail};

use crate::percentile::percentile;

/// Runs `cmd` with its output discarded; an error with its stderr when it fails.
pub fn run_ok(cmd: &mut Command) -> Result<()> {
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output()?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The `q` percentile of sorted samples, in milliseconds.
pub fn ms(sorted: &[Duration], q: f64) -> f64 {
    percentile(sorted, q).as_secs_f64() * 1e3
}

/// `git init` in `dir` and one commit of everything in it, with `message`.
pub fn git_commit_all(dir: &Path, message: &str) -> Result<()> {
    let git = |args: &[&str]| {
        run_ok(
            Command::new("git")
                .args(["-c", "user.name=b", "-c", "user.email=b@b"])
                .args(args)
                .current_dir(dir),
        )
    };
    git(&["init", "-q", "-b", "main"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", message])
}
