//! `envgit-bench`: the snapshot store's performance figures, each printed
//! beside an anchor measured in the same run on the same generated tree. It never fails on
//! timing, and touches nothing but the local disk.
//!
//! Build envgit first, with the same target directory, so the `envgit` binary sits next to
//! this one:
//!
//! ```sh
//! export CARGO_TARGET_DIR=target
//! cargo build --release -p envgit
//! cargo run --release -p envgit-bench -- [--files 100000] [--dirs 7000] [--steps 20] [--work DIR]
//! ```
//!
//! Caches are hot: the tree was just written, and dropping the page cache needs root.

mod anchors;
mod r#gen;
mod measures;
mod percentile;
mod report;
mod step_dirs;
mod util;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rayon::prelude::*;

use crate::anchors::Git;
use crate::r#gen::{Spec, generate};
use crate::measures::Envgit;
use crate::report::Report;
use crate::util::{loadavg, mib, progress, start_clock, timed};

#[derive(Parser, Debug)]
#[command(
    name = "envgit-bench",
    about = "Benchmark envgit's snapshot store against git and cp on a generated, kernel-shaped tree",
    long_about = "Benchmark envgit's snapshot store against git and cp on a generated, \
        kernel-shaped tree.\n\nBuild envgit first with the same CARGO_TARGET_DIR \
        (`cargo build --release -p envgit`): by default the `envgit` next to this binary is used. \
        Figures are hot-cache wall times; progress goes to stderr, the table (or --json) to stdout."
)]
struct Args {
    /// Files in the big tree.
    #[arg(long, default_value_t = 100_000)]
    files: usize,
    /// Directories in the big tree (besides its root).
    #[arg(long, default_value_t = 7_000)]
    dirs: usize,
    /// Measured steps per per-step figure (p50/p90 over these).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// Watcher steps measured (p50/p90/p99 over these; each step is cheap).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    watcher_steps: u64,
    /// Files in the tree the one-shot `envgit record` is measured on.
    #[arg(long, default_value_t = 20_000)]
    record_files: usize,
    /// Steps in the history `envgit log` is measured on.
    #[arg(long, default_value_t = 1_000)]
    log_steps: usize,
    /// Repetitions of each rewind figure (record and log run at least 10 times).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    reps: u64,
    /// How unevenly files spread over directories (0: evenly, ~14 per directory; the default
    /// gives a kernel-like heavy tail). Per-step costs grow with the edited directories' size.
    #[arg(long, default_value_t = 0.9)]
    dir_skew: f64,
    /// Seed of the tree generator and of the edits.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where trees, git repositories and stores go (created; must be empty). Default: a new
    /// directory under the system's temp dir.
    #[arg(long, value_name = "DIR")]
    work: Option<PathBuf>,
    /// Keep the work directory afterwards.
    #[arg(long)]
    keep: bool,
    /// The envgit binary. Default: `envgit` next to this executable.
    #[arg(long, value_name = "PATH")]
    envgit: Option<PathBuf>,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    json: bool,

    #[command(subcommand)]
    internal: Option<Internal>,
}

#[derive(Subcommand, Debug)]
enum Internal {
    /// Child process of the memory figure: hold a LiveTree, print its peak RSS.
    #[command(hide = true)]
    HoldLive {
        #[arg(long)]
        root: PathBuf,
        #[arg(long)]
        store: PathBuf,
    },
}

/// The work directory: removed at the end unless `--keep` (only what the run put in it, if
/// the user named it).
struct Work {
    path: PathBuf,
    _temp: Option<tempfile::TempDir>,
    clean_contents: bool,
}

impl Work {
    fn new(given: Option<&Path>, keep: bool) -> Result<Self> {
        match given {
            Some(p) => {
                std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
                if std::fs::read_dir(p)?.next().is_some() {
                    bail!(
                        "{} is not empty: give an empty or new --work directory",
                        p.display()
                    );
                }
                Ok(Self {
                    path: p.canonicalize()?,
                    _temp: None,
                    clean_contents: !keep,
                })
            }
            None => {
                let t = tempfile::Builder::new().prefix("envgit-bench-").tempdir()?;
                let path = t.path().canonicalize()?;
                let temp = if keep {
                    let _ = t.keep();
                    None
                } else {
                    Some(t)
                };
                Ok(Self {
                    path,
                    _temp: temp,
                    clean_contents: false,
                })
            }
        }
    }
}

impl Work {
    /// Remove everything the run put in the work directory (the big trees in parallel:
    /// unlinking 100k files takes a while).
    fn clear(&self) -> Result<()> {
        let entries: Vec<PathBuf> = std::fs::read_dir(&self.path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        entries.par_iter().try_for_each(|p| {
            if p.is_dir() {
                std::fs::remove_dir_all(p)
            } else {
                std::fs::remove_file(p)
            }
            .with_context(|| format!("removing {}", p.display()))
        })
    }
}

impl Drop for Work {
    /// Also on failure: a named --work directory is emptied (a temporary one removes itself).
    fn drop(&mut self) {
        if self.clean_contents {
            let _ = self.clear();
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Internal::HoldLive { root, store }) = &args.internal {
        return match measures::memory::hold_live(root, store) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("envgit-bench hold-live: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    start_clock();
    let mut report = Report::default();
    let result = run(&args, &mut report);
    // Whatever was measured is printed, even if a later phase failed.
    if args.json {
        let mut v = report.json();
        if let Err(e) = &result {
            v["error"] = serde_json::Value::String(format!("{e:#}"));
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", report.table());
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("envgit-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn envgit_binary(given: Option<&Path>) -> Result<PathBuf> {
    let bin = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("locating the benchmark binary")?
            .with_file_name("envgit"),
    };
    if !bin.is_file() {
        bail!(
            "no envgit binary at {}: build it with the same target dir \
             (`cargo build --release -p envgit`) or pass --envgit PATH",
            bin.display()
        );
    }
    Ok(bin)
}

fn run(args: &Args, report: &mut Report) -> Result<()> {
    let envgit_bin = envgit_binary(args.envgit.as_deref())?;
    let work = Work::new(args.work.as_deref(), args.keep)?;
    let w = &work.path;
    let envgit = Envgit {
        bin: envgit_bin,
        home: w.join("envgit-home"),
    };
    // Removed at the end, before the work directory (the store bench's own home on tmpfs).
    let _forget = step_dirs::ForgetsStepDirs(vec![envgit.home.clone()]);
    let steps = args.steps as usize;
    let reps = args.reps as usize;
    report.config = serde_json::json!({
        "files": args.files,
        "dirs": args.dirs,
        "steps": steps,
        "watcher_steps": args.watcher_steps,
        "record_files": args.record_files,
        "log_steps": args.log_steps,
        "reps": reps,
        "seed": args.seed,
        "dir_skew": args.dir_skew,
        "work": w,
        "envgit": envgit.bin,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cache": "hot",
    });
    progress(&format!("work directory {}", w.display()));

    // The big tree and the git anchor on it.
    progress(&format!(
        "generating {} files in {} directories",
        args.files, args.dirs
    ));
    let spec = Spec {
        files: args.files,
        dirs: args.dirs,
        seed: args.seed,
        skew: args.dir_skew,
    };
    let (big, gen_ms) = timed(|| generate(&w.join("tree"), &spec))?;
    report.note(format!(
        "big tree: {} files, {} directories, {:.0} MiB, generated in {:.1} s; {}",
        big.files.len(),
        big.dir_count,
        mib(big.bytes as f64),
        gen_ms / 1e3,
        big.shape()
    ));
    report.note(format!(
        "all figures are hot-cache wall times (dropping the page cache needs root); the machine \
         has {} CPUs and is shared: 1-minute load average {} at the start",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        loadavg()
    ));
    measures::disk::measure(w, 40, report)?;
    let mut git = Git::init(&w.join("tree.git"), &big.root)?;
    let git_figs = anchors::git_figures(&mut git, &big, args.seed, steps)?;

    measures::first::measure(&envgit, &big, &git_figs, report)?;
    let mut session = measures::steps::measure(
        &envgit,
        &big,
        &git_figs,
        steps,
        args.watcher_steps as usize,
        args.seed,
        report,
    )?;
    measures::memory::measure(&session, report)?;
    measures::rewind::measure(&envgit, &mut session, reps, w, report)?;
    measures::watch::measure(&envgit, &mut session, reps, report)?;
    measures::fork::measure(&envgit, &mut session, w, report)?;
    drop(session);

    // The one-shot record on a smaller tree (same shape, scaled directories).
    let small_dirs = (args.dirs * args.record_files / args.files.max(1)).max(1);
    progress(&format!(
        "generating {} files in {small_dirs} directories",
        args.record_files
    ));
    let small = generate(
        &w.join("tree-small"),
        &Spec {
            files: args.record_files,
            dirs: small_dirs,
            seed: args.seed ^ 0x5eed,
            skew: args.dir_skew,
        },
    )?;
    measures::record::measure(
        &envgit,
        &small,
        &w.join("tree-small.git"),
        reps.max(10),
        args.seed,
        report,
    )?;

    // `envgit log` over a long history of a tiny project.
    let tiny = generate(
        &w.join("tree-log"),
        &Spec {
            files: 100,
            dirs: 10,
            seed: args.seed ^ 0x109,
            skew: 0.0,
        },
    )?;
    measures::log::measure(
        &envgit,
        &tiny,
        args.log_steps,
        reps.max(10),
        args.seed,
        report,
    )?;

    let cleanup = if args.keep {
        format!("kept {}", w.display())
    } else {
        progress("removing the work directory");
        let ((), ms) = timed(|| work.clear())?;
        format!("removing the work directory took {:.0} s", ms / 1e3)
    };
    report.note(format!(
        "whole run {:.0} s ({cleanup}); load average {} at the end",
        start_clock().elapsed().as_secs_f64(),
        loadavg()
    ));
    Ok(())
}
