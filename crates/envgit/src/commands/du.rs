//! `envgit du`: where a project's history went on disk — the journal, the packs, the home
//! overlay the sandbox writes into (where a tool's logs under `~` inside really are), the
//! layers and copies of steps in flight — and `--all` for every project of this envgit home.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;

use crate::cli::DuArgs;
use crate::failure::CmdResult;
use crate::output;
use crate::project::ProjectDirs;

/// One part of a store, as shown.
#[derive(Serialize)]
struct Part {
    name: &'static str,
    path: PathBuf,
    bytes: u64,
    what: &'static str,
}

#[derive(Serialize)]
struct Usage {
    project: Option<PathBuf>,
    store: PathBuf,
    bytes: u64,
    parts: Vec<Part>,
}

/// The parts of a store directory, the largest a user asks about first.
const PARTS: &[(&str, &str, &str)] = &[
    (
        "packs",
        "packs",
        "snapshot content (files, trees), compressed and deduplicated",
    ),
    ("journal", "journal", "the step log"),
    (
        "home",
        "home/upper",
        "the sandbox's home overlay: what commands wrote under ~ inside (caches, logs)",
    ),
    (
        "git layers",
        "gitlayer",
        "writes into .git of runs in flight",
    ),
    (
        "guard copies",
        "guard",
        "pre-step copies of protected paths of steps in flight",
    ),
    ("run", "run", "sandbox staging left by envgit before 0.1.x"),
];

pub fn run(dir: Option<&Path>, args: &DuArgs) -> CmdResult<ExitCode> {
    let stores: Vec<(Option<PathBuf>, PathBuf)> = if args.all {
        let home = envgit_store::envgit_home()?;
        let mut all: Vec<(Option<PathBuf>, PathBuf)> = std::fs::read_dir(home.join("projects"))
            .map(|d| {
                d.flatten()
                    .map(|e| (project_of(&e.path()), e.path()))
                    .collect()
            })
            .unwrap_or_default();
        all.sort();
        all
    } else {
        let p = ProjectDirs::find(dir)?;
        vec![(Some(p.root), p.store_dir)]
    };
    let usage: Vec<Usage> = stores
        .into_iter()
        .map(|(project, store)| usage(project, store))
        .collect();
    if args.out.json {
        output::json(&usage)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = String::new();
    for u in &usage {
        let name = u.project.as_ref().map_or_else(
            || "(project unknown)".to_string(),
            |p| p.display().to_string(),
        );
        text.push_str(&format!(
            "{name}: {} in {}\n",
            output::size(u.bytes),
            u.store.display()
        ));
        for p in u.parts.iter().filter(|p| p.bytes > 0) {
            text.push_str(&format!(
                "  {:<13} {:>10}  {}  ({})\n",
                p.name,
                output::size(p.bytes),
                p.path.display(),
                p.what
            ));
        }
    }
    if let Some(u) = usage.first().filter(|_| usage.len() == 1) {
        text.push_str(&format!(
            "A path under ~ inside the sandbox is under {} on the host (e.g. npm's logs: {}).\n",
            u.store.join("home/upper").display(),
            u.store.join("home/upper/.npm/_logs").display()
        ));
    }
    output::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn usage(project: Option<PathBuf>, store: PathBuf) -> Usage {
    let parts: Vec<Part> = PARTS
        .iter()
        .map(|(name, rel, what)| {
            let path = store.join(rel);
            Part {
                name,
                bytes: disk_usage(&path),
                path,
                what,
            }
        })
        .collect();
    Usage {
        project,
        bytes: disk_usage(&store),
        store,
        parts,
    }
}

/// The project a store belongs to, from its `store.json`.
fn project_of(store: &Path) -> Option<PathBuf> {
    let text = std::fs::read(store.join("store.json")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    v["project"].as_str().map(PathBuf::from)
}

/// Bytes on disk (allocated blocks, so sparse files count as what they take) under `path`,
/// walked iteratively without following links.
fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        total += meta.blocks() * 512;
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&p)
        {
            stack.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}
