//! The envgit figures. Each module measures one thing and pushes its rows to the report.

pub mod disk;
pub mod first;
pub mod fork;
pub mod log;
pub mod memory;
pub mod record;
pub mod rewind;
pub mod steps;
pub mod walk;
pub mod watch;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use envgit_policy::{PROTECTED_PATHS, Policy};
use envgit_store::{ScanConfig, StepDraft, StepKind, Store, WorkTree, now_ms};

use crate::util::{Ran, Samples, run, timed};

/// The `envgit` binary, run as a separate process with its own `ENVGIT_HOME`.
pub struct Envgit {
    pub bin: PathBuf,
    pub home: PathBuf,
}

impl Envgit {
    pub fn cmd(&self, project: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-C")
            .arg(project)
            .args(args)
            .env("ENVGIT_HOME", &self.home)
            .env("NO_COLOR", "1");
        cmd
    }

    /// Run `envgit -C PROJECT ARGS…`.
    pub fn run(&self, project: &Path, args: &[&str]) -> Result<Ran> {
        run(&mut self.cmd(project, args))
    }

    /// Where the CLI keeps the store of `project`.
    pub fn store_dir(&self, project: &Path) -> Result<PathBuf> {
        let canonical = project
            .canonicalize()
            .with_context(|| format!("resolving {}", project.display()))?;
        Ok(envgit_store::store_dir_for(&self.home, &canonical))
    }
}

/// What the CLI derives from a project's envgit.yaml, rebuilt here so that in-process
/// snapshots share the CLI's on-disk stat cache.
pub struct ProjectCfg {
    pub scan: ScanConfig,
    pub policy_hash: String,
    pub protected: Vec<String>,
}

/// The same scan configuration as the CLI's (`ScanConfig::new`, `snapshot.budget`), so the stat cache the CLI
/// saved is used.
pub fn project_config(root: &Path) -> Result<ProjectCfg> {
    let path = root.join("envgit.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let policy =
        Policy::parse(&path.display().to_string(), &text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let snap = &policy.snapshot;
    Ok(ProjectCfg {
        scan: ScanConfig::new(&snap.exclude, snap.max_file_size)?.with_budget(Some(snap.budget)),
        policy_hash: policy.hash(),
        protected: PROTECTED_PATHS.iter().map(|p| p.to_string()).collect(),
    })
}

pub fn draft(kind: StepKind, summary: &str, cfg: &ProjectCfg) -> StepDraft {
    StepDraft {
        kind: Some(kind),
        started_at_ms: now_ms(),
        summary: summary.into(),
        policy_hash: Some(cfg.policy_hash.clone()),
        ..Default::default()
    }
}

/// Where a one-shot CLI command spends its time, timed in-process with no change in the tree
/// (open the store, load the stat cache, scan, save the cache), `reps` times; for the notes.
pub fn cli_phases(root: &Path, store_dir: &Path, scratch: &Path, reps: usize) -> Result<String> {
    let cfg = project_config(root)?;
    let (mut open, mut load, mut scan, mut save) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    );
    let mut hashed = 0;
    for _ in 0..reps.max(1) {
        let (store, ms) = timed(|| Ok(Store::open(store_dir)?))?;
        open.push(ms);
        let (mut wt, ms) = timed(|| {
            let mut wt = WorkTree::new(root, cfg.scan.clone(), Some(store_dir))?;
            wt.load_index(&store);
            Ok(wt)
        })?;
        load.push(ms);
        let ((_, report), ms) = timed(|| Ok(wt.full_scan(&store, None)?))?;
        scan.push(ms);
        hashed = report.hashed;
        let cache = scratch.join("stat.cache.bench");
        let ((), ms) = timed(|| Ok(wt.save_cache(&cache)?))?;
        save.push(ms);
        let _ = std::fs::remove_file(&cache);
    }
    Ok(format!(
        "in-process phases (p50, no change): open store {:.0} ms, load stat cache {:.0} ms, \
         full scan {:.0} ms ({hashed} files re-read), save stat cache {:.0} ms",
        open.p50(),
        load.p50(),
        scan.p50(),
        save.p50()
    ))
}
