//! G5: the first snapshot, `envgit init` (a process) against the first `git add -A`.

use anyhow::Result;

use super::Envgit;
use crate::anchors::GitFigures;
use crate::r#gen::GenTree;
use crate::report::{Goal, Report, Row};
use crate::util::{dir_size, mib, progress};

pub fn measure(
    envgit: &Envgit,
    tree: &GenTree,
    git: &GitFigures,
    report: &mut Report,
) -> Result<()> {
    progress(&format!("envgit init on {} files", tree.files.len()));
    let init = envgit.run(&tree.root, &["init"])?;
    let store_bytes = dir_size(&envgit.store_dir(&tree.root)?)? as f64;
    report.push(
        Row::ms(
            format!(
                "first snapshot: envgit init, {}k files",
                tree.files.len() / 1000
            ),
            init.ms,
        )
        .anchor("git add -A", git.first_add_ms)
        .goal(Goal::FasterBy(5.0))
        .goal(Goal::AtMost(6_000.0))
        .note(format!(
            "CPU (user + sys) envgit {:.1} s, git add -A {:.1} s; store after init {:.0} MiB \
             for {:.0} MiB of files ({:.1}× smaller); git write-tree {:.0} ms + commit-tree \
             {:.0} ms come on top of git's add -A",
            init.cpu_ms / 1e3,
            git.first_add_cpu_ms / 1e3,
            mib(store_bytes),
            mib(tree.bytes as f64),
            tree.bytes as f64 / store_bytes,
            git.first_write_tree_ms,
            git.first_commit_tree_ms
        )),
    );
    Ok(())
}
