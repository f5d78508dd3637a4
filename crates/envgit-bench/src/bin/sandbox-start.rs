//! The sandbox's start-up cost: `envgit run true` (a whole step: snapshot, sandbox, gate,
//! snapshot, commit) and the sandbox alone beside `bwrap` with an equivalent set of namespaces
//! and mounts, and beside bare `true`, measured in one run. Prints p50/p90 and ratios; never
//! fails on timing.
//!
//! `cargo run --release -p envgit-bench --bin sandbox-start -- [--runs 50]`

#[path = "../percentile.rs"]
mod percentile;
use percentile::percentile;
#[path = "../step_dirs.rs"]
mod step_dirs;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

#[path = "../bwrap.rs"]
mod bwrap;
use bwrap::bwrap_cmd;

fn time_runs(runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<Duration>> {
    f()?; // warm-up
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f()?;
        out.push(t.elapsed());
    }
    out.sort();
    Ok(out)
}

fn run_ok(cmd: &mut Command) -> Result<()> {
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn envgit_exe() -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    let exe = me.with_file_name("envgit");
    if !exe.exists() {
        bail!(
            "{} is missing: build it first (cargo build --release -p envgit)",
            exe.display()
        );
    }
    Ok(exe)
}

/// The sandbox's start-up cost: `envgit run true` beside `bwrap` with equivalent namespaces and
/// mounts and beside bare `true`, in one run; never fails on timing.
#[derive(clap::Parser)]
struct Args {
    /// Runs of each.
    #[arg(long, default_value_t = 50)]
    runs: usize,
}

fn main() -> Result<()> {
    let Args { runs } = clap::Parser::parse();
    let envgit = envgit_exe()?;
    let tmp = tempfile::tempdir()?;
    let project = tmp.path().join("p");
    let home = tmp.path().join("h");
    let _forget = step_dirs::ForgetsStepDirs(vec![home.clone()]);
    std::fs::create_dir_all(&project)?;
    std::fs::write(project.join("a.txt"), "a")?;
    let eg = |args: &[&str]| {
        let mut c = Command::new(&envgit);
        c.args(args).current_dir(&project).env("ENVGIT_HOME", &home);
        c
    };
    run_ok(&mut eg(&["init"])).context("envgit init")?;

    let bare = time_runs(runs, || run_ok(&mut Command::new("true")))?;
    let envgit_run = time_runs(runs, || run_ok(&mut eg(&["run", "true"])))?;
    let bwrap = if Command::new("bwrap").arg("--version").output().is_ok() {
        Some(time_runs(runs, || run_ok(&mut bwrap_cmd(&project)))?)
    } else {
        None
    };

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("sandbox start-up, {runs} runs each (p50 / p90, ms):");
    println!(
        "  bare true            {:8.2} / {:8.2}",
        ms(percentile(&bare, 0.5)),
        ms(percentile(&bare, 0.9))
    );
    if let Some(b) = &bwrap {
        println!(
            "  bwrap (equivalent)   {:8.2} / {:8.2}",
            ms(percentile(b, 0.5)),
            ms(percentile(b, 0.9))
        );
    } else {
        println!("  bwrap                not installed (apt-get install bubblewrap)");
    }
    println!(
        "  envgit run true      {:8.2} / {:8.2}   (a whole step: two snapshots, gate, relay, commit)",
        ms(percentile(&envgit_run, 0.5)),
        ms(percentile(&envgit_run, 0.9))
    );
    if let Some(b) = &bwrap {
        let ratio = ms(percentile(&envgit_run, 0.5)) / ms(percentile(b, 0.5));
        println!(
            "  ratio envgit run / bwrap (p50): {ratio:.2}x   goal <= 1.5x: {}",
            if ratio <= 1.5 { "met" } else { "not met" }
        );
    }
    Ok(())
}
