//! The anchors envgit is measured against, run on the same tree in the same run:
//! git's snapshot-per-step (what opencode, Cline and Codex do) and `cp -a`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::r#gen::{GenTree, Rng};
use crate::util::{Ran, Samples, dir_size, progress, run};

/// A git repository whose GIT_DIR sits outside the work tree, so the tree stays clean.
pub struct Git {
    git_dir: PathBuf,
    work: PathBuf,
    head: Option<String>,
}

/// What git costs on the big tree: the first `git add -A`, then per step.
pub struct GitFigures {
    pub first_add_ms: f64,
    pub first_add_cpu_ms: f64,
    pub first_write_tree_ms: f64,
    pub first_commit_tree_ms: f64,
    /// `git add -A && git write-tree && git commit-tree` per 10-file step.
    pub step: Samples,
    pub add: Samples,
    pub write_tree: Samples,
    pub commit_tree: Samples,
    /// CPU (user + system) of the three processes per step.
    pub step_cpu: Samples,
    /// Growth of `objects/` per step (loose zlib objects, apparent size).
    pub growth_per_step: f64,
}

impl Git {
    pub fn init(git_dir: &Path, work: &Path) -> Result<Self> {
        let git = Self {
            git_dir: git_dir.to_path_buf(),
            work: work.to_path_buf(),
            head: None,
        };
        run(&mut git.cmd(&["init", "-q"]))?;
        Ok(git)
    }

    /// Nothing from the user's or system's config (no fsmonitor, no hooks), a fixed identity.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(&self.work)
            .env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "bench")
            .env("GIT_AUTHOR_EMAIL", "bench@localhost")
            .env("GIT_COMMITTER_NAME", "bench")
            .env("GIT_COMMITTER_EMAIL", "bench@localhost");
        cmd
    }

    pub fn add_all(&self) -> Result<Ran> {
        run(&mut self.cmd(&["add", "-A"]))
    }

    /// The tree id, and the run.
    pub fn write_tree(&self) -> Result<(String, Ran)> {
        let r = run(&mut self.cmd(&["write-tree"]))?;
        Ok((String::from_utf8_lossy(&r.out.stdout).trim().to_string(), r))
    }

    /// `git commit-tree` on top of the previous one (no ref update: the agent tools keep
    /// the commit id themselves).
    pub fn commit_tree(&mut self, tree: &str) -> Result<Ran> {
        let mut args = vec!["commit-tree", tree, "-m", "step"];
        let parent = self.head.clone();
        if let Some(p) = &parent {
            args.extend(["-p", p]);
        }
        let r = run(&mut self.cmd(&args))?;
        self.head = Some(String::from_utf8_lossy(&r.out.stdout).trim().to_string());
        Ok(r)
    }

    pub fn objects_size(&self) -> Result<u64> {
        dir_size(&self.git_dir.join("objects"))
    }
}

/// The first `git add -A` of the whole tree, then `steps` steps of 10 changed files.
pub fn git_figures(git: &mut Git, tree: &GenTree, seed: u64, steps: usize) -> Result<GitFigures> {
    progress(&format!(
        "git: first `git add -A` of {} files (minutes on a big tree)",
        tree.files.len()
    ));
    let first_add = git.add_all()?;
    let (t, first_write_tree) = git.write_tree()?;
    let first_commit_tree = git.commit_tree(&t)?;
    progress(&format!(
        "git: first add -A {:.1} s; {steps} steps of 10 changed files",
        first_add.ms / 1e3
    ));
    let before = git.objects_size()?;
    let mut rng = Rng::new(seed ^ 0x11);
    let mut step = Samples::default();
    let mut add = Samples::default();
    let mut write_tree = Samples::default();
    let mut commit_tree = Samples::default();
    let mut step_cpu = Samples::default();
    for i in 0..steps {
        tree.touch(&mut rng, 10, &format!("git step {i}"))?;
        let a = git.add_all()?;
        let (t, w) = git.write_tree()?;
        let c = git.commit_tree(&t)?;
        add.push(a.ms);
        write_tree.push(w.ms);
        commit_tree.push(c.ms);
        step.push(a.ms + w.ms + c.ms);
        step_cpu.push(a.cpu_ms + w.cpu_ms + c.cpu_ms);
    }
    let after = git.objects_size()?;
    Ok(GitFigures {
        first_add_ms: first_add.ms,
        first_add_cpu_ms: first_add.cpu_ms,
        first_write_tree_ms: first_write_tree.ms,
        first_commit_tree_ms: first_commit_tree.ms,
        step,
        add,
        write_tree,
        commit_tree,
        step_cpu,
        growth_per_step: (after.saturating_sub(before)) as f64 / steps.max(1) as f64,
    })
}

/// `git add -A && git write-tree` (no commit): the one-shot anchor for `envgit record`.
/// Wall and CPU ms.
pub fn git_add_write(git: &Git) -> Result<(f64, f64)> {
    let a = git.add_all()?;
    let (_, w) = git.write_tree()?;
    Ok((a.ms + w.ms, a.cpu_ms + w.cpu_ms))
}

/// `cp -a SRC DST` (no sync afterwards, as fork does none).
pub fn cp_a(src: &Path, dst: &Path) -> Result<Ran> {
    run(Command::new("cp").arg("-a").arg(src).arg(dst))
        .with_context(|| format!("cp -a {}", src.display()))
}
