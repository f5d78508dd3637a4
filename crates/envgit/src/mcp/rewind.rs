//! Following a rewind: when a step committed since the last call is a rewind (from any
//! terminal), every session is rebuilt as of the rewind's target by replaying its journal.

use std::sync::atomic::Ordering;

use envgit_repl::{CellStatus, Session};

use super::session::{Live, Sessions};

impl Sessions {
    /// When a step committed since we last looked is a rewind (from any terminal), every
    /// session goes back to its state as of the rewind's target, rebuilt by replaying its
    /// journal up to there (downstream results from the journal, never sent again). Returns a
    /// note for the model.
    pub(super) async fn follow_rewinds(&self, steps: &[(u64, Option<u64>)]) -> Option<String> {
        let seen = self.seen.load(Ordering::SeqCst);
        let target = steps
            .iter()
            .filter(|(n, _)| *n > seen)
            .filter_map(|(_, t)| *t)
            .next_back()?;
        if let Some(head) = steps.last() {
            self.seen.fetch_max(head.0, Ordering::SeqCst);
        }
        let mut sessions = self.live.lock().await;
        let names: Vec<String> = sessions.keys().cloned().collect();
        let mut notes = Vec::new();
        for name in names {
            let keep = self
                .marks
                .lock()
                .ok()
                .and_then(|m| {
                    m.get(&name)
                        .and_then(|v| v.iter().rev().find(|(step, _)| *step <= target).copied())
                })
                .map(|(_, cells)| cells)
                .unwrap_or(0);
            let Some(old) = sessions.remove(&name) else {
                continue;
            };
            let mut journal = old.session.journal();
            drop(old);
            journal.cells.truncate(keep);
            let replayed = journal
                .cells
                .iter()
                .filter(|c| c.status == CellStatus::Ok)
                .count();
            match Session::replay(&journal, self.limits.clone()).await {
                Ok(fresh) => {
                    sessions.insert(name.clone(), Live::new(fresh));
                    notes.push(format!("session {name}: {replayed} cell(s) replayed"));
                }
                Err(e) => notes.push(format!(
                    "session {name} could not be rebuilt ({e}) and starts empty"
                )),
            }
            if let Ok(mut m) = self.marks.lock()
                && let Some(v) = m.get_mut(&name)
            {
                v.retain(|(step, _)| *step <= target);
            }
        }
        Some(format!(
            "the project was rewound to step {target}; the REPL went back with it ({})",
            if notes.is_empty() {
                "no sessions".to_string()
            } else {
                notes.join("; ")
            }
        ))
    }
}
