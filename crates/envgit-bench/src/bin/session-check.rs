//! What a session's check before each tool call costs outside the project (`envgit claude`,
//! `envgit mcp`): the homes' secrets found again (`plan::home_secrets`: the credentials' paths,
//! then a walk three levels deep for `.env` files and sockets) to compare with what the sandbox
//! masks, and everything else its plan looked at (`HostSecrets::now`: the paths this process's
//! environment names, `/etc`'s private files, kept while inotify reports no change there, the
//! host's sockets in view).
//! Anchor, measured in the same run: a bare `read_dir` walk of the same home to the same
//! depth, hidden directories skipped as the search skips them (the traversal's floor). On a
//! generated home (projects with sources and `node_modules/`) or the one given. Prints p50 and
//! the ratio; never fails on timing.
//!
//! `cargo run --release -p envgit-bench --bin session-check -- [--home DIR] [--projects 40]
//! [--reps 30]`

#[path = "../percentile.rs"]
mod percentile;
use percentile::percentile;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use envgit_policy::Policy;

/// What a session's check of the home costs before each tool call, beside a bare walk.
#[derive(clap::Parser)]
struct Args {
    /// A home to search (read only); default: one generated in a temporary directory.
    #[arg(long)]
    home: Option<PathBuf>,
    /// Projects in the generated home.
    #[arg(long, default_value_t = 40)]
    projects: usize,
    /// Repetitions of each figure.
    #[arg(long, default_value_t = 30)]
    reps: usize,
}

/// A home shaped like a developer's: dotfiles and credentials, and `projects` projects under
/// `src/`, each with sources and a `node_modules/` (below the search's depth, but listed on
/// the way).
fn generate(home: &Path, projects: usize) -> std::io::Result<()> {
    for d in [".aws", ".ssh", ".config/gh", ".cache/pip", ".npm/_cacache"] {
        std::fs::create_dir_all(home.join(d))?;
    }
    std::fs::write(home.join(".aws/credentials"), "[default]\n")?;
    std::fs::write(home.join(".bashrc"), "")?;
    for p in 0..projects {
        let project = home.join("src").join(format!("project-{p}"));
        for sub in [
            "src",
            "tests",
            "docs",
            "node_modules/left-pad",
            "node_modules/lodash",
        ] {
            let dir = project.join(sub);
            std::fs::create_dir_all(&dir)?;
            for f in 0..20 {
                std::fs::write(dir.join(format!("file-{f}.txt")), "x")?;
            }
        }
        std::fs::write(project.join(".env"), "KEY=1\n")?;
        std::fs::write(project.join("README.md"), "")?;
    }
    Ok(())
}

/// The floor: the same walk with nothing looked at but the names.
fn bare_walk(dir: &Path, depth_left: usize) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut seen = 0;
    for e in entries.flatten() {
        seen += 1;
        let hidden = e.file_name().as_encoded_bytes().first() == Some(&b'.');
        if depth_left > 1 && !hidden && e.file_type().is_ok_and(|t| t.is_dir()) {
            seen += bare_walk(&e.path(), depth_left - 1);
        }
    }
    seen
}

fn p50(reps: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    percentile(&times, 0.5)
}

/// Where this run keeps the walk of `/etc`'s cache.
static ETC_CACHE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn main() -> Result<()> {
    let args: Args = clap::Parser::parse();
    let tmp = tempfile::tempdir()?;
    let home = match &args.home {
        Some(h) => h.clone(),
        None => {
            let h = tmp.path().join("home");
            generate(&h, args.projects)?;
            h
        }
    };
    let homes = [home.clone()];
    let policy = Policy::default();
    let found = envgit_sandbox::plan::home_secrets(&homes, &policy).len();
    let entries = bare_walk(&home, 3);
    let check = p50(args.reps, || {
        std::hint::black_box(envgit_sandbox::plan::home_secrets(&homes, &policy));
    });
    // The `/etc` walk's cache where `envgit` keeps it would be another user's business: this
    // run keeps its own, made by the first look.
    let _ = ETC_CACHE.set(tmp.path().join("etc-private.cache"));
    envgit_sandbox::etc_walk::cache_found_by(|| ETC_CACHE.get().cloned());
    let env: Vec<(String, String)> = std::env::vars().collect();
    let system: Vec<PathBuf> = envgit_sandbox::plan::SYSTEM_DIRS
        .iter()
        .map(PathBuf::from)
        .collect();
    let project = tmp.path().join("project");
    let places =
        envgit_sandbox::host_secrets::HostSecrets::new(envgit_sandbox::host_secrets::Places {
            homes: &homes,
            policy: &policy,
            caller_env: &env,
            cwd: &project,
            project: &project,
            more_masks: &[],
            uid: rustix::process::getuid().as_raw(),
            system: &system,
        });
    let outside = places.now().len();
    let whole = p50(args.reps, || {
        std::hint::black_box(places.now());
    });
    let etc = p50(args.reps, || {
        std::hint::black_box(envgit_sandbox::etc_walk::now());
    });
    let floor = p50(args.reps, || {
        std::hint::black_box(bare_walk(&home, 3));
    });
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "a session's home check before each call, {} ({entries} entries to depth 3, {found} secrets), p50 of {}:",
        home.display(),
        args.reps
    );
    println!("  home_secrets                 {:8.3} ms", ms(check));
    println!(
        "  HostSecrets::now             {:8.3} ms   (all a plan looks at outside the project: {outside} found)",
        ms(whole)
    );
    println!(
        "    of which /etc's            {:8.3} ms   (kept while inotify reports no change there)",
        ms(etc)
    );
    println!("  bare read_dir walk (anchor)  {:8.3} ms", ms(floor));
    println!(
        "  ratio home_secrets / walk    {:8.2}x",
        check.as_secs_f64() / floor.as_secs_f64().max(1e-9)
    );
    Ok(())
}
