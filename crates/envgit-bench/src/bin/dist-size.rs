//! The installed binary's size and `envgit --version` start time, beside a static hello-world
//! (built here with rustc, `+crt-static`: the floor for starting a process) and the pinned Codex
//! CLI's `codex --version` (its native binary, and through its npm launcher as a user runs it),
//! all in one run with their runs alternating, so the shared machine's load falls on each alike.
//! envgit through its own npm launcher is measured too (the package's layout, built in a
//! temporary directory). Prints sizes, p50/p90 and ratios to the hello-world; never fails on
//! timing.
//!
//! `cargo run -p envgit-bench --bin dist-size -- [--envgit PATH] [--runs 200]` (a debug build is
//! enough: it only spawns and times other programs)
//! (PATH defaults to $ENVGIT_DIST_BIN, else target/dist/envgit from scripts/build-dist; Codex
//! is looked up under $ENVGIT_AGENTS_DIR, else /opt/envgit-test-deps/agents.)

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

const HELLO: &str = "fn main() { println!(\"hello\"); }\n";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A statically linked, optimized, stripped hello-world.
fn build_hello(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("hello.rs");
    std::fs::write(&src, HELLO)?;
    let out = dir.join("hello-static");
    let status = Command::new("rustc")
        .args([
            "-C",
            "opt-level=3",
            "-C",
            "target-feature=+crt-static",
            "-C",
            "strip=symbols",
            "-C",
            "panic=abort",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .status()
        .context("running rustc")?;
    if !status.success() {
        bail!(
            "rustc could not build the static hello-world (is glibc's libc.a installed? apt-get install libc6-dev)"
        );
    }
    Ok(out)
}

/// envgit's npm layout (`node_modules/agent-envgit/bin/envgit.js` finding
/// `node_modules/@agent-envgit/linux-x64/bin/envgit`) around `envgit`, as npm lays it out.
fn npm_layout(dir: &Path, envgit: &Path) -> Result<PathBuf> {
    let nm = dir.join("node_modules");
    let launcher = nm.join("agent-envgit/bin/envgit.js");
    std::fs::create_dir_all(launcher.parent().context("no parent")?)?;
    std::fs::copy(
        workspace().join("npm/agent-envgit/bin/envgit.js"),
        &launcher,
    )?;
    let platform = nm.join("@agent-envgit/linux-x64");
    std::fs::create_dir_all(platform.join("bin"))?;
    std::fs::write(
        platform.join("package.json"),
        r#"{"name":"@agent-envgit/linux-x64","version":"0.0.0"}"#,
    )?;
    std::fs::copy(envgit, platform.join("bin/envgit"))?;
    Ok(launcher)
}

struct Subject {
    name: &'static str,
    argv: Vec<PathBuf>,
    size: Option<u64>,
    times: Vec<Duration>,
}

impl Subject {
    fn new(name: &'static str, argv: Vec<PathBuf>, size_of: Option<&Path>) -> Result<Self> {
        let size = match size_of {
            Some(p) => Some(std::fs::metadata(p)?.len()),
            None => None,
        };
        Ok(Self {
            name,
            argv,
            size,
            times: Vec::new(),
        })
    }

    fn run_once(&self) -> Result<Duration> {
        let t = Instant::now();
        let status = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("running {}", self.name))?;
        let d = t.elapsed();
        if !status.success() {
            bail!("{} failed: {status}", self.name);
        }
        Ok(d)
    }

    fn pct(&self, p: f64) -> f64 {
        let mut s = self.times.clone();
        s.sort();
        let i = ((s.len() as f64 - 1.0) * p).round() as usize;
        s[i.min(s.len() - 1)].as_secs_f64() * 1e3
    }
}

/// The installed binary's size and `envgit --version` start time, beside a static hello-world
/// and the pinned Codex CLI, runs alternating; never fails on timing.
#[derive(clap::Parser)]
struct Args {
    /// The envgit binary (default: $ENVGIT_DIST_BIN, else target/dist/envgit).
    #[arg(long, value_name = "PATH")]
    envgit: Option<PathBuf>,
    /// Runs of each program.
    #[arg(long, default_value_t = 200)]
    runs: usize,
}

fn main() -> Result<()> {
    let Args { envgit, runs } = clap::Parser::parse();
    let envgit = envgit
        .or_else(|| std::env::var_os("ENVGIT_DIST_BIN").map(PathBuf::from))
        .unwrap_or_else(|| workspace().join("target/dist/envgit"));
    if !envgit.is_file() {
        bail!(
            "{} is missing: build it first (scripts/build-dist) or pass --envgit PATH",
            envgit.display()
        );
    }
    let agents = std::env::var_os("ENVGIT_AGENTS_DIR").map_or_else(
        || PathBuf::from("/opt/envgit-test-deps/agents"),
        PathBuf::from,
    );
    let codex_native = agents
        .join("node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex");
    let codex_npm = agents.join("node_modules/.bin/codex");

    let tmp = tempfile::tempdir()?;
    let hello = build_hello(tmp.path())?;
    let launcher = npm_layout(tmp.path(), &envgit)?;
    let version = PathBuf::from("--version");
    let mut subjects = vec![
        Subject::new("static hello-world", vec![hello.clone()], Some(&hello))?,
        Subject::new(
            "envgit --version",
            vec![envgit.clone(), version.clone()],
            Some(&envgit),
        )?,
        Subject::new(
            "envgit --version (npm launcher)",
            vec![PathBuf::from("node"), launcher, version.clone()],
            None,
        )?,
    ];
    if codex_native.is_file() {
        subjects.push(Subject::new(
            "codex --version",
            vec![codex_native.clone(), version.clone()],
            Some(&codex_native),
        )?);
        subjects.push(Subject::new(
            "codex --version (npm launcher)",
            vec![codex_npm, version],
            None,
        )?);
    } else {
        println!(
            "codex not found at {} (scripts/install-deps-agents installs it): not measured",
            codex_native.display()
        );
    }

    // Warm-up (page cache, node's compile cache), then rounds in a rotating order.
    for s in &subjects {
        s.run_once()?;
    }
    let n = subjects.len();
    for round in 0..runs {
        for k in 0..n {
            let s = &mut subjects[(round + k) % n];
            let d = s.run_once()?;
            s.times.push(d);
        }
    }

    let hello_p50 = subjects[0].pct(0.5);
    println!(
        "start-up, {runs} alternating runs each (p50 / p90 ms, ratio of p50 to the hello-world, size):"
    );
    for s in &subjects {
        let size = s
            .size
            .map_or_else(String::new, |b| format!("{:7.1} MB", b as f64 / 1e6));
        println!(
            "  {:32} {:7.2} / {:7.2}   {:6.2}x   {size}",
            s.name,
            s.pct(0.5),
            s.pct(0.9),
            s.pct(0.5) / hello_p50
        );
    }
    let over = subjects[1].pct(0.5) - hello_p50;
    println!(
        "envgit --version over the static hello-world (p50): {over:+.2} ms   goal <= 1 ms: {}",
        if over <= 1.0 { "met" } else { "not met" }
    );
    let size = subjects[1].size.unwrap_or(0);
    println!(
        "envgit binary: {:.1} MB   goal <= 30 MB: {}",
        size as f64 / 1e6,
        if size <= 30_000_000 { "met" } else { "not met" }
    );
    Ok(())
}
