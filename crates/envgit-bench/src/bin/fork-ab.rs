//! `envgit fork` of the benchmark's kernel-shaped tree by two envgit binaries, before and after
//! a change, against `cp -a` of the same tree, in one run with the three alternating (so a
//! busy machine slows all alike). Each figure is printed with the 1-minute load average taken
//! just before it; none syncs its copy, but everything is synced before each one starts (so
//! one copy's write-back does not land on the next). The copies are removed only at the end:
//! ext4 skips inodes deleted in the last seconds when it allocates (`recently_deleted`), and
//! with 100,000 just freed that search led the profile and tripled the next copy's time.
//! Never fails on timing.
//!
//! `cargo run --release -p envgit-bench --bin fork-ab -- --before OLD/envgit --after NEW/envgit
//!  [--rounds 3] [--files 100000] [--dirs 7000] [--work DIR]`

// Shared helpers; this binary uses only some of them.
#[path = "../bin_common.rs"]
#[allow(dead_code)]
mod bin_common;
#[path = "../gen.rs"]
#[allow(dead_code)]
mod r#gen;
#[path = "../percentile.rs"]
#[allow(dead_code)]
mod percentile;
use bin_common::run_ok;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}

fn timed(cmd: &mut Command) -> Result<Duration> {
    let t = Instant::now();
    run_ok(cmd)?;
    Ok(t.elapsed())
}

/// `envgit fork` of a generated tree by two envgit binaries, before and after a change,
/// against `cp -a` of the same tree, in one run with the three alternating; never fails on
/// timing.
#[derive(clap::Parser)]
struct Args {
    /// The envgit binary before the change.
    #[arg(long, value_name = "BIN")]
    before: PathBuf,
    /// The envgit binary after the change.
    #[arg(long, value_name = "BIN")]
    after: PathBuf,
    /// Rounds of the three.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Files in the generated tree.
    #[arg(long, default_value_t = 100_000)]
    files: usize,
    /// Directories in the generated tree.
    #[arg(long, default_value_t = 7_000)]
    dirs: usize,
    /// Where the tree and the forks go (kept; a tree already there is reused).
    #[arg(long, value_name = "DIR")]
    work: Option<PathBuf>,
}

fn main() -> Result<()> {
    let Args {
        before,
        after,
        rounds,
        files,
        dirs,
        work,
    } = clap::Parser::parse();
    let absolute = |p: &Path| std::fs::canonicalize(p).with_context(|| p.display().to_string());
    let bins = [absolute(&before)?, absolute(&after)?];
    let _tmp;
    let work: PathBuf = match work {
        Some(w) => {
            std::fs::create_dir_all(&w)?;
            std::fs::canonicalize(&w)?
        }
        None => {
            _tmp = tempfile::tempdir()?;
            _tmp.path().to_path_buf()
        }
    };
    let tree = work.join("tree");
    let home = work.join("home");
    if !tree.exists() {
        eprintln!("generating {files} files in {dirs} directories…");
        let spec = r#gen::Spec {
            files,
            dirs,
            seed: 1,
            skew: 0.9,
        };
        let g = r#gen::generate(&tree, &spec)?;
        eprintln!("{}", g.shape());
        eprintln!("envgit init (the first snapshot)…");
        run_ok(
            Command::new(&bins[1])
                .arg("-C")
                .arg(&tree)
                .arg("init")
                .env("ENVGIT_HOME", &home),
        )?;
    }
    let fork = |k: usize, dir: &Path| -> Result<Duration> {
        timed(
            Command::new(&bins[k])
                .arg("-C")
                .arg(&tree)
                .args(["fork", "@"])
                .arg(dir)
                .env("ENVGIT_HOME", &home)
                .env("NO_COLOR", "1"),
        )
    };
    let remove = |dir: &Path| -> Result<()> {
        let store = envgit_store::store_dir_for(&home, &dir.canonicalize()?);
        std::fs::remove_dir_all(dir)?;
        if store.exists() {
            std::fs::remove_dir_all(store)?;
        }
        Ok(())
    };
    println!("{rounds} rounds, before / after / cp -a alternating (s, load average before each):");
    let mut sums = [0.0f64; 3];
    let mut copies = Vec::new();
    for r in 0..rounds {
        let order = if r % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        for k in order {
            let dir = work.join(format!("copy-{r}-{k}"));
            run_ok(&mut Command::new("sync"))?;
            let load = loadavg();
            let took = match k {
                2 => timed(Command::new("cp").arg("-a").arg(&tree).arg(&dir))?,
                _ => fork(k, &dir)?,
            };
            let what = ["before", "after", "cp -a"][k];
            println!(
                "  round {r} {what:<7} {:6.2} s  (load {load})",
                took.as_secs_f64()
            );
            sums[k] += took.as_secs_f64();
            copies.push((k, dir));
        }
    }
    eprintln!("removing the copies…");
    for (k, dir) in copies {
        if k == 2 {
            std::fs::remove_dir_all(&dir)?;
        } else {
            remove(&dir)?;
        }
    }
    let n = rounds.max(1) as f64;
    println!(
        "mean: before {:.2} s, after {:.2} s, cp -a {:.2} s",
        sums[0] / n,
        sums[1] / n,
        sums[2] / n
    );
    Ok(())
}
