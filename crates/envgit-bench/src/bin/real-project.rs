//! What envgit adds to a step on a real project: a 10,000-file project made of a real
//! npm-installed tree (`node_modules`, excluded from snapshots as `envgit init` writes it) and
//! generated sources under git, then `true`, `git status` and `node -e 0`, each bare and
//! through `envgit run`, alternating (so a busy machine slows both alike): once walking the
//! project before each command as a one-shot run does, once with `envgit watch` (a daemon
//! that says what changed; a second copy of the project). Prints p50/p90 of each and the
//! overhead (envgit p50 − bare p50) against the goal of 20 ms; never fails on timing.
//!
//! `cargo run --release -p envgit-bench --bin real-project -- [--envgit BIN] [--runs 50]
//!  [--node-modules DIR] [--sources 3200] [--keep DIR]`. The default tree is verdaccio's, which
//! `scripts/install-deps-registries` installs under /opt/envgit-test-deps/registries.

#[path = "../bin_common.rs"]
mod bin_common;
#[path = "../percentile.rs"]
mod percentile;
use bin_common::{git_commit_all, ms, run_ok};
#[path = "../step_dirs.rs"]
mod step_dirs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

const DEFAULT_NODE_MODULES: &str = "/opt/envgit-test-deps/registries/node_modules";
const GOAL_MS: f64 = 20.0;

/// Files below `dir`, links and directories not counted.
fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// The project: the npm tree copied in, `sources` small JavaScript files in directories of
/// 40, a git repository of the sources, and `envgit init`.
fn project(root: &Path, node_modules: &Path, sources: usize, envgit: &Path) -> Result<PathBuf> {
    let dir = root.join("app");
    std::fs::create_dir_all(&dir)?;
    run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(node_modules)
            .arg(dir.join("node_modules")),
    )?;
    for i in 0..sources {
        let d = dir.join(format!("src/m{}", i / 40));
        if i % 40 == 0 {
            std::fs::create_dir_all(&d)?;
        }
        std::fs::write(
            d.join(format!("f{i}.js")),
            format!("export const v{i} = {i};\nexport function f{i}(x) {{ return x + {i}; }}\n"),
        )?;
    }
    std::fs::write(
        dir.join("package.json"),
        "{\"name\":\"app\",\"version\":\"1.0.0\"}\n",
    )?;
    std::fs::write(dir.join(".gitignore"), "node_modules/\n")?;
    git_commit_all(&dir, "sources")?;
    run_ok(
        Command::new(envgit)
            .arg("init")
            .current_dir(&dir)
            .env("ENVGIT_HOME", root.join("home")),
    )
    .context("envgit init")?;
    Ok(dir)
}

/// What envgit adds to a step on a real project (a real npm-installed tree and generated
/// sources under git): `true`, `git status` and `node -e 0`, bare and through `envgit run`,
/// alternating; never fails on timing.
#[derive(clap::Parser)]
struct Args {
    /// The envgit binary.
    #[arg(long, value_name = "BIN", default_value = "target/release/envgit")]
    envgit: PathBuf,
    /// Runs of each command, bare and through envgit.
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// An npm-installed `node_modules` to copy into the project.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_NODE_MODULES)]
    node_modules: PathBuf,
    /// Generated source files, committed to git.
    #[arg(long, default_value_t = 3200)]
    sources: usize,
    /// Make the two projects here and keep them (to look into a figure afterwards); a
    /// temporary directory otherwise. It must not exist yet.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
}

fn main() -> Result<()> {
    let Args {
        envgit,
        runs,
        node_modules,
        sources,
        keep,
    } = clap::Parser::parse();
    let envgit = std::fs::canonicalize(&envgit).with_context(|| {
        format!(
            "{} (build it: cargo build --release -p envgit)",
            envgit.display()
        )
    })?;
    if !node_modules.is_dir() {
        bail!(
            "{}: no npm-installed tree there (scripts/install-deps-registries installs one, or pass --node-modules DIR)",
            node_modules.display()
        );
    }
    let _tmp;
    let work = match keep {
        Some(dir) => {
            if dir.exists() {
                bail!(
                    "{}: already exists; --keep makes a new directory",
                    dir.display()
                );
            }
            std::fs::create_dir_all(&dir)?;
            std::fs::canonicalize(&dir)?
        }
        None => {
            _tmp = tempfile::tempdir()?;
            _tmp.path().to_path_buf()
        }
    };
    let walk_root = work.join("walk");
    let watch_root = work.join("watch");
    let _forget = step_dirs::ForgetsStepDirs(vec![walk_root.join("home"), watch_root.join("home")]);
    let dir = project(&walk_root, &node_modules, sources, &envgit)?;
    let watched = project(&watch_root, &node_modules, sources, &envgit)?;
    run_ok(
        Command::new(&envgit)
            .args(["watch", "start"])
            .current_dir(&watched)
            .env("ENVGIT_HOME", watch_root.join("home")),
    )
    .context("envgit watch start")?;
    // The copies' write-back would otherwise land on the first rounds.
    run_ok(&mut Command::new("sync"))?;
    let result = measure(&envgit, runs, (&dir, &walk_root), (&watched, &watch_root));
    let _ = run_ok(
        Command::new(&envgit)
            .args(["watch", "stop"])
            .current_dir(&watched)
            .env("ENVGIT_HOME", watch_root.join("home")),
    );
    result
}

/// Each command bare, through `envgit run` in `walked`, and through `envgit run` in `watched`
/// (whose daemon runs), alternating the order every round.
fn measure(
    envgit: &Path,
    runs: usize,
    walked: (&Path, &Path),
    watched: (&Path, &Path),
) -> Result<()> {
    let dir = walked.0;
    println!(
        "real project: {} files ({} in node_modules, excluded), {runs} alternating runs each; load {}",
        count_files(dir) - count_files(&dir.join(".git")),
        count_files(&dir.join("node_modules")),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "  {:<14} {:>16} {:>22} {:>9} {:>22} {:>9}  goal ≤ {GOAL_MS} ms",
        "command",
        "bare p50 / p90",
        "envgit run p50 / p90",
        "overhead",
        "with watch p50 / p90",
        "overhead"
    );
    let commands: [&[&str]; 3] = [
        &["true"],
        &["git", "status", "--short"],
        &["node", "-e", "0"],
    ];
    for argv in commands {
        let mut times = [
            Vec::with_capacity(runs),
            Vec::with_capacity(runs),
            Vec::with_capacity(runs),
        ];
        for r in 0..=runs {
            for k in [r % 3, (r + 1) % 3, (r + 2) % 3] {
                let mut c = if k == 0 {
                    let mut c = Command::new(argv[0]);
                    c.args(&argv[1..]).current_dir(dir);
                    c
                } else {
                    let (project, root) = if k == 1 { walked } else { watched };
                    let mut c = Command::new(envgit);
                    c.arg("run")
                        .arg("--")
                        .args(argv)
                        .current_dir(project)
                        .env("ENVGIT_HOME", root.join("home"));
                    c
                };
                let t = Instant::now();
                run_ok(&mut c).with_context(|| argv.join(" "))?;
                // The first round warms all up.
                if r > 0 {
                    times[k].push(t.elapsed());
                }
            }
        }
        for v in &mut times {
            v.sort();
        }
        let overhead = |k: usize| ms(&times[k], 0.5) - ms(&times[0], 0.5);
        let verdict = |o: f64| if o <= GOAL_MS { "met" } else { "NOT met" };
        println!(
            "  {:<14} {:>7.2} / {:>6.2} {:>12.2} / {:>7.2} {:>6.2} ms {:>12.2} / {:>7.2} {:>6.2} ms  {} / {}",
            argv.join(" "),
            ms(&times[0], 0.5),
            ms(&times[0], 0.9),
            ms(&times[1], 0.5),
            ms(&times[1], 0.9),
            overhead(1),
            ms(&times[2], 0.5),
            ms(&times[2], 0.9),
            overhead(2),
            verdict(overhead(1)),
            verdict(overhead(2)),
        );
    }
    Ok(())
}
