//! G11: `envgit log` over 1,000 steps. The steps are made quickly in-process on a small tree
//! (10 files changed each, so every record lists changes), then `envgit log` and
//! `envgit log --json` are timed as processes, and opening the store against the same store at
//! one step.

use anyhow::{Result, bail};
use envgit_store::{StepKind, Store, WorkTree};

use super::{Envgit, draft, project_config};
use crate::r#gen::{GenTree, Rng};
use crate::report::{Goal, Report, Row};
use crate::util::{Samples, progress, timed};

pub fn measure(
    envgit: &Envgit,
    tree: &GenTree,
    steps: usize,
    reps: usize,
    seed: u64,
    report: &mut Report,
) -> Result<()> {
    envgit.run(&tree.root, &["init"])?;
    let store_dir = envgit.store_dir(&tree.root)?;
    let cfg = project_config(&tree.root)?;
    let open_before = open_times(&store_dir, reps)?;
    progress(&format!("log: making {steps} steps through the store API"));
    let ((), make_ms) = timed(|| {
        let mut store = Store::open(&store_dir)?;
        let mut wt = WorkTree::new(&tree.root, cfg.scan.clone(), Some(&store_dir))?;
        wt.load_index(&store);
        let mut rng = Rng::new(seed ^ 0x44);
        for i in 0..steps {
            tree.touch(&mut rng, 10, &format!("log step {i}"))?;
            let mut guard = store.begin_step("tool")?;
            let (t, _) = wt.full_scan(&store, None)?;
            let summary = format!("python3 -m pytest tests/test_{i}.py -q");
            store.commit(&mut guard, draft(StepKind::Tool, &summary, &cfg), t)?;
        }
        wt.save_index(&store)?;
        Ok(())
    })?;
    let journal = std::fs::metadata(store_dir.join("journal"))
        .map(|m| m.len())
        .unwrap_or(0);

    // What opening the store costs, which every command pays, against the same store at one
    // step: a history that grows must not make each step slower (a goal of this bench's own:
    // under a millisecond at 1,000 steps).
    let open_after = open_times(&store_dir, reps)?;
    let total = steps + 1;
    report.push(
        Row::ms(format!("store open, {total} steps: p50"), open_after.p50())
            .anchor("the same store at 1 step", open_before.p50())
            .goal(Goal::AtMost(1.0))
            .note(format!(
                "in-process Store::open; {} (1 step: {})",
                open_after.summary_ms(),
                open_before.summary_ms()
            )),
    );

    // Process start-up alone, to read the two figures against.
    let mut bare = Samples::default();
    for _ in 0..reps {
        bare.push(crate::util::run(std::process::Command::new(&envgit.bin).arg("--version"))?.ms);
    }
    for json in [false, true] {
        let args: &[&str] = if json { &["log", "--json"] } else { &["log"] };
        let mut s = Samples::default();
        let mut out_len = 0;
        for _ in 0..reps {
            let r = envgit.run(&tree.root, args)?;
            s.push(r.ms);
            out_len = r.out.stdout.len();
            if !json && r.out.stdout.iter().filter(|b| **b == b'\n').count() < total {
                bail!("envgit log printed fewer than {total} lines");
            }
        }
        let name = if json {
            "envgit log --json"
        } else {
            "envgit log"
        };
        report.push(
            Row::ms(format!("{name}, {total} steps: p50"), s.p50())
                .goal(Goal::AtMost(50.0))
                .note(format!(
                    "{}; {:.0} KiB of output; journal {:.0} KiB; `envgit --version` alone p50 \
                     {:.1} ms; making the {steps} steps took {:.1} s",
                    s.summary_ms(),
                    out_len as f64 / 1024.0,
                    journal as f64 / 1024.0,
                    bare.p50(),
                    make_ms / 1e3
                )),
        );
    }
    Ok(())
}

/// `Store::open` of `store_dir`, `reps` times (the files in the page cache after the first).
fn open_times(store_dir: &std::path::Path, reps: usize) -> Result<Samples> {
    let mut s = Samples::default();
    Store::open(store_dir)?;
    for _ in 0..reps.max(5) {
        let (_, ms) = timed(|| Ok(Store::open(store_dir)?))?;
        s.push(ms);
    }
    Ok(s)
}
