//! Two envgit binaries, before and after a change, measured in one run with their runs
//! alternating (so a busy machine slows both alike): `envgit run true` in a git project (the
//! git layer, the put-back and the snapshot all run), a 10-file step in a project of
//! `--files` files committed to git, `envgit run true` there with `envgit watch` running (no
//! walk: what is left grows with the repository, its index and the stat index), and `bwrap`
//! with the same namespaces as the anchor. Prints p50/p90 and the after/before ratio; never
//! fails on timing.
//!
//! `cargo run --release -p envgit-bench --bin step-ab -- --before OLD/envgit --after NEW/envgit
//!  [--runs 200] [--files 100000]` (`scripts/bench-step-ab BASE` builds BASE and runs it).

#[path = "../bin_common.rs"]
mod bin_common;
#[path = "../percentile.rs"]
mod percentile;
use bin_common::{git_commit_all, ms, run_ok};
#[path = "../step_dirs.rs"]
mod step_dirs;
use step_dirs::ForgetsStepDirs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

#[path = "../bwrap.rs"]
mod bwrap;
use bwrap::bwrap_cmd;

/// A project with `files` files of 4 KiB in directories of 100, committed to git (so the run
/// has a `.git` to layer), in two identical copies, one per binary.
struct Project {
    dirs: [PathBuf; 2],
    homes: [PathBuf; 2],
}

fn project(root: &Path, name: &str, files: usize, bins: &[PathBuf; 2]) -> Result<Project> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    let block = vec![b'x'; 4096];
    for i in 0..files {
        let d = dir.join(format!("d{}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&d)?;
        }
        std::fs::write(d.join(format!("f{i}")), &block)?;
    }
    git_commit_all(&dir, "tree")?;
    // One copy per binary: each has its own envgit.yaml and store.
    let copy = root.join(format!("{name}-1"));
    run_ok(Command::new("cp").arg("-a").arg(&dir).arg(&copy))?;
    let dirs = [dir, copy];
    let homes = [
        root.join(format!("{name}-h0")),
        root.join(format!("{name}-h1")),
    ];
    for ((bin, home), dir) in bins.iter().zip(&homes).zip(&dirs) {
        run_ok(
            Command::new(bin)
                .arg("init")
                .current_dir(dir)
                .env("ENVGIT_HOME", home),
        )
        .with_context(|| format!("{} init", bin.display()))?;
    }
    Ok(Project { dirs, homes })
}

/// `runs` alternating runs of `f(0)` and `f(1)` after one warm-up each; sorted times.
fn alternate(runs: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<[Vec<Duration>; 2]> {
    f(0)?;
    f(1)?;
    let mut out = [Vec::with_capacity(runs), Vec::with_capacity(runs)];
    for r in 0..runs {
        // Alternate which goes first too.
        for k in [r % 2, 1 - r % 2] {
            let t = Instant::now();
            f(k)?;
            out[k].push(t.elapsed());
        }
    }
    for v in &mut out {
        v.sort();
    }
    Ok(out)
}

fn report(what: &str, t: &[Vec<Duration>; 2]) {
    println!(
        "  {what:<34} before {:7.2} / {:7.2}   after {:7.2} / {:7.2}   after/before p50 {:.2}x",
        ms(&t[0], 0.5),
        ms(&t[0], 0.9),
        ms(&t[1], 0.5),
        ms(&t[1], 0.9),
        ms(&t[1], 0.5) / ms(&t[0], 0.5)
    );
}

/// Two envgit binaries, before and after a change, in one run with their runs alternating:
/// `envgit run true` in a git project, a 10-file step in a git project of `--files` files and
/// `envgit run true` there with `envgit watch` running, with `bwrap` as the anchor; never fails
/// on timing.
#[derive(clap::Parser)]
struct Args {
    /// The envgit binary before the change.
    #[arg(long, value_name = "BIN")]
    before: PathBuf,
    /// The envgit binary after the change.
    #[arg(long, value_name = "BIN")]
    after: PathBuf,
    /// Runs of each figure with each binary.
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// Files in the project of the 10-file step.
    #[arg(long, default_value_t = 100_000)]
    files: usize,
}

fn main() -> Result<()> {
    let Args {
        before,
        after,
        runs,
        files,
    } = clap::Parser::parse();
    // Absolute: each binary runs in the projects' own directories.
    let absolute = |p: &Path| std::fs::canonicalize(p).with_context(|| p.display().to_string());
    let bins = [absolute(&before)?, absolute(&after)?];
    let tmp = tempfile::tempdir()?;

    let small = project(tmp.path(), "small", 1, &bins)?;
    let _forget_small = ForgetsStepDirs(small.homes.to_vec());
    let eg = |p: &Project, k: usize, argv: &[&str]| {
        let mut c = Command::new(&bins[k]);
        c.args(argv)
            .current_dir(&p.dirs[k])
            .env("ENVGIT_HOME", &p.homes[k]);
        c
    };
    println!("{runs} alternating runs each (p50 / p90, ms):");
    let run_true = alternate(runs, |k| run_ok(&mut eg(&small, k, &["run", "true"])))?;
    report("envgit run true (git project)", &run_true);
    if Command::new("bwrap").arg("--version").output().is_ok() {
        let mut bw = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            run_ok(&mut bwrap_cmd(&small.dirs[1]))?;
            bw.push(t.elapsed());
        }
        bw.sort();
        println!(
            "  bwrap true (same namespaces)       {:7.2} / {:7.2}   envgit after / bwrap p50 {:.2}x",
            ms(&bw, 0.5),
            ms(&bw, 0.9),
            ms(&run_true[1], 0.5) / ms(&bw, 0.5)
        );
    } else {
        println!("  bwrap: not installed (apt-get install bubblewrap)");
    }

    eprintln!("generating {files} files…");
    let big = project(tmp.path(), "big", files, &bins)?;
    let _forget_big = ForgetsStepDirs(big.homes.to_vec());
    let mut n = 0u64;
    let step = alternate(runs, |k| {
        n += 1;
        // Ten files in ten directories, different content every run.
        let script: String = (0..10)
            .map(|i| {
                let f = i * files / 10;
                format!("echo {n} >> d{}/f{f}; ", f / 100)
            })
            .collect();
        run_ok(&mut eg(&big, k, &["run", "sh", "-c", &script]))
    })?;
    report(&format!("10-file step, {files} files"), &step);

    // Each copy watched by its own binary's daemon, stopped however this ends.
    let _watched = Watched::start(&big, &bins)?;
    let watched_true = alternate(runs, |k| run_ok(&mut eg(&big, k, &["run", "true"])))?;
    report(&format!("run true, {files} files, watched"), &watched_true);
    Ok(())
}

/// `envgit watch` running on both copies of a project, each started by its own binary; stopped
/// on drop.
struct Watched<'a> {
    project: &'a Project,
    bins: &'a [PathBuf; 2],
}

impl<'a> Watched<'a> {
    fn start(project: &'a Project, bins: &'a [PathBuf; 2]) -> Result<Self> {
        let watched = Self { project, bins };
        for k in 0..2 {
            run_ok(&mut watched.cmd(k, "start")).context("envgit watch start")?;
        }
        Ok(watched)
    }

    fn cmd(&self, k: usize, what: &str) -> Command {
        let mut c = Command::new(&self.bins[k]);
        c.args(["watch", what])
            .current_dir(&self.project.dirs[k])
            .env("ENVGIT_HOME", &self.project.homes[k]);
        c
    }
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        for k in 0..2 {
            let _ = self.cmd(k, "stop").output();
        }
    }
}
