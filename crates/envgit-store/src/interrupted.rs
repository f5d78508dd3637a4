//! Steps that began and never committed, recorded as `interrupted` by the next open, which
//! also makes the end a sandboxed one owed the project (its nested repositories checked).

use std::os::fd::AsFd;

use crate::below_root::PROTECTED_RULE;
use crate::error::{IoContext, Result};
use crate::gitlayer::GIT_DATA_ONLY_RULE;
use crate::journal;
use crate::lock::Flock;
use crate::step::{ChangeCounts, Refusal, Step, StepFlag, StepKind, now_ms};
use crate::store::Store;
use crate::without_snapshot::{OwedEnd, end_without_snapshot};
use crate::worktree::ScanConfig;

impl Store {
    /// Record every step that began and never committed, and whose owner is gone (crashed,
    /// killed, signalled, or gave up after its command started), as an `interrupted` step:
    /// what its begin record knew (description, command, start), the tree of the step before
    /// it (what it changed, if anything, is in the next step), flagged `overlapped` if other
    /// steps committed meanwhile. Takes the commit lock only if it is free. Returns the
    /// numbers of the steps recorded.
    ///
    /// A sandboxed step's end that its owner never made (its begin record says what it owes)
    /// is made first: the nested repositories are checked against the tree before the step
    /// ([`crate::end_without_snapshot`]) and what was put back goes on the record and into
    /// [`Store::take_recovery_warnings`]. That is done only while no other step is open (one
    /// could be writing there); until then the step is left as it is.
    pub fn recover_interrupted(&mut self) -> Result<Vec<u64>> {
        let mut dead = crate::lock::dead_steps(&self.dir)?;
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        let owes = |d: &crate::lock::DeadStep| d.begun.open && d.begun.owed_end.is_some();
        let mut others_open = false;
        if dead.iter().any(owes) {
            drop(dead);
            if !self.objects_loaded {
                // The check reads trees: a full open makes it, and records every dead step.
                let mut full = Store::open(&self.dir)?;
                self.recovery_warnings.append(&mut full.recovery_warnings);
                drop(full);
                self.catch_up()?;
                return Ok(Vec::new());
            }
            // Asked with the dead unlocked (a marker this open holds would look alive), then
            // the dead taken again.
            others_open = !crate::lock::live_steps(&self.dir, None)?.is_empty();
            dead = crate::lock::dead_steps(&self.dir)?;
        }
        let Some(_lock) = Flock::try_exclusive(&self.dir.join("lock"))? else {
            return Ok(Vec::new());
        };
        let dead: Vec<_> = dead
            .into_iter()
            .filter(|d| !(others_open && owes(d)))
            .collect();
        self.catch_up()?;
        let mut bytes = Vec::new();
        let mut recorded: Vec<Step> = Vec::new();
        // Where each recorded step's frame is in `bytes`, and its payload's length.
        let mut places: Vec<(u64, u32)> = Vec::new();
        for d in dead.iter().filter(|d| d.begun.open) {
            let note = format!("begun as inflight/{} by pid {}", d.id, d.begun.pid);
            // Recorded before, by an open that died before it removed the marker.
            let mut seen = false;
            for s in self.steps.newest_first().take(256) {
                seen |= s?.notes.contains(&note);
            }
            if seen {
                continue;
            }
            let prev = recorded.last().or(self.steps.head());
            let parent = prev.map(|s| s.number);
            let mut tree = recorded.iter().rev().find_map(|s| s.tree);
            if tree.is_none() {
                for s in self.steps.newest_first() {
                    tree = s?.tree;
                    if tree.is_some() {
                        break;
                    }
                }
            }
            let mut flags = Vec::new();
            if parent != d.begun.head {
                flags.push(StepFlag::Overlapped);
            }
            let mut notes = vec![
                note,
                "the step never committed (its process crashed, was killed or signalled, \
                 or the disk was full); what it changed, if anything, is recorded by the \
                 next step"
                    .into(),
            ];
            let mut refusals = Vec::new();
            if let Some(owed) = d.begun.owed_end.as_ref().filter(|_| d.begun.open) {
                self.make_owed_end(owed, &d.begun, &mut notes, &mut refusals);
                if !refusals.is_empty() {
                    flags.push(StepFlag::GitDropped);
                }
            }
            let step = Step {
                number: parent.unwrap_or(0) + 1,
                kind: StepKind::Interrupted,
                parent,
                started_at_ms: d.begun.started_at_ms,
                ended_at_ms: now_ms(),
                tree,
                summary: format!("interrupted: {}", d.begun.what),
                command: d.begun.command.clone(),
                cwd: d.begun.cwd.clone(),
                exit_code: None,
                policy_hash: None,
                changes: Vec::new(),
                changes_total: ChangeCounts::default(),
                changes_truncated: false,
                changes_omitted: 0,
                flags,
                requests: Vec::new(),
                refusals,
                approvals: Vec::new(),
                target: None,
                origin: None,
                repl: None,
                notes,
            };
            let record = journal::encode_step(&step)?;
            let at = bytes.len() as u64;
            bytes.extend_from_slice(&record);
            places.push((at, journal::payload_len(&record)));
            recorded.push(step);
        }
        let start = self.journal.mark().pos;
        if !bytes.is_empty() {
            self.journal.append(&bytes)?;
        }
        let numbers = recorded.iter().map(|s| s.number).collect();
        for (step, (at, len)) in recorded.into_iter().zip(places) {
            self.steps.push(step, start + at, len);
        }
        self.steps
            .maybe_write_table(&self.dir, self.journal.mark(), self.objects.as_ref());
        for d in &dead {
            let _ = std::fs::remove_file(&d.path);
        }
        Ok(numbers)
    }

    /// The end a dead sandboxed step owed: its nested repositories checked and put back,
    /// its setid bits cleared; said in `notes` and `refusals`, and to the person.
    fn make_owed_end(
        &mut self,
        owed: &OwedEnd,
        begun: &crate::lock::Begun,
        notes: &mut Vec<String>,
        refusals: &mut Vec<Refusal>,
    ) {
        let rule = GIT_DATA_ONLY_RULE;
        let unchecked = |e: &dyn std::fmt::Display| {
            format!(
                "the interrupted step's repositories inside the project could not be checked \
                 ({e}): check their .git/hooks and .git/config before running git in them \
                 (rule {rule})"
            )
        };
        let opened = (|| -> Result<_> {
            let root = crate::beneath::open_root(self.project()).at(self.project())?;
            Ok((root, ScanConfig::new(&owed.exclude, owed.max_file_size)?))
        })();
        let (root, config) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                let said = unchecked(&e);
                notes.push(said.clone());
                self.recovery_warnings.push(said);
                return;
            }
        };
        // What a nested repository's git config names is read by the reader envgit set.
        let done = end_without_snapshot(
            self,
            root.as_fd(),
            &config,
            &owed.before,
            begun.started_at_ms,
            &owed.below,
            Some(self.project()),
        );
        if let Some(e) = &done.unchecked {
            let said = unchecked(e);
            notes.push(said.clone());
            self.recovery_warnings.push(said);
        }
        for p in &done.put_back {
            let said = format!(
                "{p} of a repository inside the project was changed by a step whose envgit \
                 was killed before its end, and was put back: git would run or follow it on \
                 the host (rule {rule})"
            );
            notes.push(said.clone());
            self.recovery_warnings.push(said);
            refusals.push(Refusal {
                what: format!("write {p}"),
                rule: rule.into(),
            });
        }
        for p in &done.put_back_below {
            let said = format!(
                "{p} was changed by a step whose envgit was killed before its end, and was put \
                 back: the host runs it from there (rule {PROTECTED_RULE})"
            );
            notes.push(said.clone());
            self.recovery_warnings.push(said);
            refusals.push(Refusal {
                what: format!("write {p}"),
                rule: PROTECTED_RULE.into(),
            });
        }
        for (p, e) in &done.failed {
            let said = format!(
                "{p} of a repository inside the project was changed by a step whose envgit \
                 was killed before its end, and could not be put back ({e}; rule {rule}): \
                 remove it before running git in that repository"
            );
            notes.push(said.clone());
            self.recovery_warnings.push(said);
        }
        if let Some(before) = &owed.excluded_before {
            self.disarm_excluded_made(root.as_fd(), &done.excluded_dirs, before, notes, refusals);
        }
        let setid = crate::setid::setid_notes(&done.setid);
        self.recovery_warnings.extend(setid.iter().cloned());
        notes.extend(setid);
    }

    /// The repositories below `excluded` (the directories the snapshot leaves out) that were
    /// not there before the dead step (`before`) lose what git would run; said in `notes` and
    /// `refusals`. Those that were have their code put back from the step's copy after this
    /// open.
    fn disarm_excluded_made(
        &mut self,
        root: std::os::fd::BorrowedFd<'_>,
        excluded: &[Vec<u8>],
        before: &[crate::gitlayer::RepositoryAt],
        notes: &mut Vec<String>,
        refusals: &mut Vec<Refusal>,
    ) {
        let rule = GIT_DATA_ONLY_RULE;
        let project = self.project().to_path_buf();
        let (now, stopped) = crate::gitlayer::repositories_below(root, excluded);
        let mut said = Vec::new();
        if stopped {
            said.push(format!(
                "the directories snapshot.exclude leaves out hold too many entries to look through all \
                 of them for repositories an interrupted step made: check the .git/hooks and \
                 .git/config of those below before running git in them (rule {rule})"
            ));
        }
        for repo in now.iter().filter(|r| !before.contains(r)) {
            let mut own = repo.dir.clone();
            own.push(b'/');
            let code: Vec<Vec<u8>> =
                crate::gitlayer::excluded_code_paths(&project, &repo.dir, repo.layout)
                    .into_iter()
                    .filter(|p| p.starts_with(&own))
                    .collect();
            match crate::gitlayer::disarm_excluded(&project, &code) {
                Ok(done) => {
                    let dropped = done.dropped.iter().map(|d| (&d.path, Some(&d.why)));
                    for (p, why) in done.removed.iter().map(|p| (p, None)).chain(dropped) {
                        let why = why.map(|w| format!(": {w}")).unwrap_or_default();
                        said.push(format!(
                            "{p} of a repository a step whose envgit was killed before its end made inside a \
                             directory snapshot.exclude leaves out was removed{why}: git would run or follow it \
                             on the host (rule {rule})"
                        ));
                        refusals.push(Refusal {
                            what: format!("write {p}"),
                            rule: rule.into(),
                        });
                    }
                }
                Err(e) => said.push(format!(
                    "a repository at {} a step whose envgit was killed before its end made could not be \
                     disarmed ({e}): check its .git/hooks and .git/config before running git in it \
                     (rule {rule})",
                    crate::beneath::display_rel(&repo.dir)
                )),
            }
        }
        for s in said {
            notes.push(s.clone());
            self.recovery_warnings.push(s);
        }
    }

    /// What recovering interrupted steps at this open did that the person should hear.
    pub fn take_recovery_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.recovery_warnings)
    }
}
