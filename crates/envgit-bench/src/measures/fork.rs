//! G7: `envgit fork HEAD DIR` of the big tree (a process) against `cp -a` of the same tree.
//! Neither syncs the copy to disk.

use std::path::Path;

use anyhow::Result;

use super::Envgit;
use super::steps::Session;
use crate::anchors::cp_a;
use crate::report::{Goal, Report, Row};
use crate::util::{progress, timed};

pub fn measure(envgit: &Envgit, s: &mut Session, work: &Path, report: &mut Report) -> Result<()> {
    s.store.catch_up()?;
    let head = s.store.head().map(|h| h.number).unwrap_or(1);
    let fork_dir = work.join("fork");
    let cp_dir = work.join("cp");
    progress(&format!("fork: envgit fork {head} (all files)"));
    let fork = envgit.run(
        &s.root,
        &["fork", &head.to_string(), &fork_dir.to_string_lossy()],
    )?;
    let fork_store = envgit.store_dir(&fork_dir)?;
    progress("fork: cp -a of the same tree");
    let cp = cp_a(&s.root, &cp_dir)?;
    let k = s.files / 1000;
    report.push(
        Row::ms(format!("fork of {k}k files, vs cp -a"), fork.ms)
            .anchor("cp -a", cp.ms)
            .goal(Goal::AnchorTimes(1.2))
            .note(format!(
                "G7 on ext4: ≤ 1.2× cp -a; CPU (user + sys) fork {:.1} s, cp -a {:.1} s; neither \
                 syncs",
                fork.cpu_ms / 1e3,
                cp.cpu_ms / 1e3
            )),
    );
    report.push(
        Row::ms(format!("fork of {k}k files, absolute"), fork.ms).goal(Goal::AtMost(2_000.0)),
    );
    progress("fork: removing both copies");
    let ((), rm_ms) = timed(|| {
        let (a, b) = rayon::join(
            || std::fs::remove_dir_all(&fork_dir),
            || std::fs::remove_dir_all(&cp_dir),
        );
        a?;
        b?;
        std::fs::remove_dir_all(&fork_store)?;
        Ok(())
    })?;
    progress(&format!("fork: removed in {:.1} s", rm_ms / 1e3));
    Ok(())
}
