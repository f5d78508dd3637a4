//! One-shot `envgit record` (a new process: rescan with the on-disk stat cache) on a smaller
//! tree, 10 files changed, against `git add -A && git write-tree` on the same tree. Both see
//! the same 10 changes: each rep edits, runs envgit, then git.

use std::path::Path;

use anyhow::Result;

use super::{Envgit, cli_phases};
use crate::anchors::{Git, git_add_write};
use crate::r#gen::{GenTree, Rng};
use crate::report::{Goal, Report, Row};
use crate::util::{Samples, progress};

pub fn measure(
    envgit: &Envgit,
    tree: &GenTree,
    git_dir: &Path,
    reps: usize,
    seed: u64,
    report: &mut Report,
) -> Result<()> {
    let n = tree.files.len();
    progress(&format!(
        "record: git add -A of the {n}-file tree, envgit init"
    ));
    let git = Git::init(git_dir, &tree.root)?;
    let (first_git, _) = git_add_write(&git)?;
    let init_ms = envgit.run(&tree.root, &["init"])?.ms;
    let mut rng = Rng::new(seed ^ 0x33);
    // One untimed round: git picks up envgit.yaml, both settle their caches.
    tree.touch(&mut rng, 10, "record warm-up")?;
    envgit.run(&tree.root, &["record"])?;
    git_add_write(&git)?;
    progress(&format!(
        "record: {reps} × (10 changed; envgit record; git add -A && write-tree)"
    ));
    let (mut eg, mut gt) = (Samples::default(), Samples::default());
    let (mut eg_cpu, mut gt_cpu) = (Samples::default(), Samples::default());
    for i in 0..reps {
        tree.touch(&mut rng, 10, &format!("record {i}"))?;
        let r = envgit.run(&tree.root, &["record", "--summary", "bench"])?;
        eg.push(r.ms);
        eg_cpu.push(r.cpu_ms);
        let (ms, cpu) = git_add_write(&git)?;
        gt.push(ms);
        gt_cpu.push(cpu);
    }
    let store_dir = envgit.store_dir(&tree.root)?;
    let phases = cli_phases(
        &tree.root,
        &store_dir,
        git_dir.parent().unwrap_or(git_dir),
        3,
    )?;
    report.push(
        Row::ms(
            format!("envgit record (CLI), {}k files, 10 changed: p50", n / 1000),
            eg.p50(),
        )
        .anchor("git add -A && write-tree", gt.p50())
        .goal(Goal::FasterBy(1.0))
        .note(format!(
            "envgit {}; git {}; CPU p50 envgit {:.0} ms, git {:.0} ms; {phases}; first \
             snapshot of this tree: envgit init {:.0} ms, git add -A && write-tree {:.0} ms",
            eg.summary_ms(),
            gt.summary_ms(),
            eg_cpu.p50(),
            gt_cpu.p50(),
            init_ms,
            first_git
        )),
    );
    Ok(())
}
