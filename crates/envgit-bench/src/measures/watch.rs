//! One-shot commands with and without `envgit watch` (the daemon that says what changed, so
//! the command does not walk the project): `envgit run true` and `envgit rewind` of a 10-file
//! step, each a new process, on the big tree.

use anyhow::Result;

use super::Envgit;
use super::rewind::target_of;
use super::steps::Session;
use crate::report::{Goal, Report, Row};
use crate::util::{Samples, progress};

pub fn measure(envgit: &Envgit, s: &mut Session, reps: usize, report: &mut Report) -> Result<()> {
    progress(&format!("watch: {reps} × `envgit run true` (CLI), walking"));
    let mut walking = Samples::default();
    for _ in 0..=reps {
        walking.push(envgit.run(&s.root, &["run", "true"])?.ms);
    }
    progress(&format!(
        "watch: {reps} × `envgit run true` and `envgit rewind` with `envgit watch` running"
    ));
    envgit.run(&s.root, &["watch", "start"])?;
    let watched = (|| {
        // Untimed: the stat index saved without the daemon has no token yet.
        envgit.run(&s.root, &["run", "true"])?;
        let (mut run, mut rewind) = (Samples::default(), Samples::default());
        for _ in 0..reps {
            run.push(envgit.run(&s.root, &["run", "true"])?.ms);
        }
        for _ in 0..reps {
            let t = target_of(&mut s.store)?;
            rewind.push(envgit.run(&s.root, &["rewind", &t.to_string()])?.ms);
        }
        anyhow::Ok((run, rewind))
    })();
    envgit.run(&s.root, &["watch", "stop"])?;
    let (run, rewind) = watched?;
    report.push(
        Row::ms("envgit run true, CLI, with envgit watch: p50", run.p50())
            .anchor("the same walking the tree (no daemon)", walking.p50())
            .note(format!(
                "{}; without the daemon {}",
                run.summary_ms(),
                walking.summary_ms()
            )),
    );
    report.push(
        Row::ms(
            "rewind 10-file step: CLI with envgit watch, p50",
            rewind.p50(),
        )
        .goal(Goal::AtMost(50.0))
        .note(format!(
            "{}; no walk: the daemon says what changed since the stat index was saved",
            rewind.summary_ms()
        )),
    );
    Ok(())
}
