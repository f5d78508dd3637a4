//! A step's transaction, begun and finished here: [`Store::begin_step`] marks it open (other
//! processes see it and flag overlaps); [`Store::commit`] makes its objects durable, then
//! under the commit lock numbers it, diffs its snapshot against its parent's and appends its
//! record (after the objects frames that publish its objects) with one more fdatasync.

use crate::diff;
use crate::error::Result;
use crate::id::ObjectId;
use crate::lock::{Flock, StepGuard};
use crate::step::{Placement, Step, StepDraft};
use crate::store::Store;

impl Store {
    /// Mark a step as open: returns a guard that other processes can see until it drops.
    pub fn begin_step(&self, what: &str) -> Result<StepGuard> {
        StepGuard::begin(&self.dir, what, self.head().map(|s| s.number))
    }

    /// Descriptions of steps of this project that other processes have open.
    pub fn steps_in_flight(&self, own: Option<&StepGuard>) -> Result<Vec<String>> {
        crate::lock::live_steps(&self.dir, own)
    }

    /// Commit a step whose snapshot is `tree`: make its objects durable, then append its record
    /// to the journal under the commit lock with one more fdatasync.
    pub fn commit(
        &mut self,
        guard: &mut StepGuard,
        draft: StepDraft,
        tree: ObjectId,
    ) -> Result<Step> {
        self.objects.sync()?;
        let others = self.steps_in_flight(Some(guard))?;
        let _lock = Flock::exclusive(&self.dir.join("lock"))?;
        self.catch_up()?;
        let parent = self.head().map(|s| s.number);
        let parent_tree = match parent {
            Some(p) => self.step(p)?.tree,
            None => None,
        };
        let changes = diff::diff_trees(self, parent_tree.as_ref(), Some(&tree))?;
        let placement = Placement {
            number: parent.unwrap_or(0) + 1,
            parent,
            tree,
            overlapped: !others.is_empty() || guard.head_at_begin() != parent,
        };
        let step = draft.into_step(placement, changes);
        let mut bytes = self.objects.pending_frames()?;
        let record = crate::journal::encode_step(&step)?;
        let start = self.journal.mark().pos + bytes.len() as u64;
        bytes.extend_from_slice(&record);
        self.journal.append(&bytes)?;
        let mark = self.journal.mark();
        self.objects.commit_pending(mark);
        self.steps
            .push(step.clone(), start, crate::journal::payload_len(&record));
        self.steps
            .maybe_write_table(&self.dir, mark, self.objects.as_ref());
        guard.committed(step.number);
        Ok(step)
    }
}
