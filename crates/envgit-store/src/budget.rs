//! The store's disk budget, enforced while a step is snapshotted: a file whose new content
//! would take the store past `snapshot.budget`, or its filesystem below a free-space reserve,
//! is recorded as an `over_budget` marker instead of being written, so an agent can never fill
//! the disk through the store.
//!
//! Cheap by construction: nothing is measured until the first file the scan has to read (a
//! step that changed nothing costs nothing), then one listing of `packs/` and one `statvfs`;
//! from there an atomic counter. Each file reserves an upper bound of what it could append,
//! known from the `lstat` the scan already did, before a byte is read; what it really appends
//! (nothing when its content is already stored) is charged to that reservation and the rest
//! given back. A file that cannot reserve is still read and hashed, so content the store
//! already has (a rewind's files) is captured at no cost, but nothing new is written for it.
//! Trees and link targets are always written (a snapshot cannot leave them out) and charged:
//! they, the journal's records of the step and what concurrent writers append are the slack.

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, OnceLock};

use serde::Serialize;

use crate::chunk;
use crate::pack::HEADER_LEN;
use crate::store::Store;

/// The free-space reserve is this fraction of the store's filesystem…
const RESERVE_FRACTION: u64 = 20;
/// …capped at this: what envgit leaves free for everything else on the machine.
const RESERVE_MAX: u64 = 1 << 30;

/// What bounded the store when files were left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "limit", rename_all = "snake_case")]
pub enum BudgetLimit {
    /// `snapshot.budget`, and what the store used when the scan began.
    Budget { budget: u64, used: u64 },
    /// The store's filesystem: what was available to envgit, and the reserve it keeps free.
    FreeSpace { available: u64, reserve: u64 },
}

/// Bytes the store may still append during one scan, shared by its threads; may go negative
/// through forced writes (trees).
pub(crate) struct Allowance {
    left: AtomicI64,
    limit: BudgetLimit,
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Allowance {
    /// The smaller of what the budget and the filesystem leave.
    fn measure(store: &Store, budget: Option<u64>) -> Self {
        let mut left = i64::MAX;
        let mut limit = BudgetLimit::Budget {
            budget: u64::MAX,
            used: 0,
        };
        if let Some(budget) = budget {
            // Unmeasurable usage counts as none: the free-space check still holds.
            let used = store.disk_usage().unwrap_or(0);
            left = to_i64(budget).saturating_sub(to_i64(used));
            limit = BudgetLimit::Budget { budget, used };
        }
        if let Ok(fs) = rustix::fs::statvfs(store.dir()) {
            let frsize = fs.f_frsize.max(1);
            let available = fs.f_bavail.saturating_mul(frsize);
            let total = fs.f_blocks.saturating_mul(frsize);
            let reserve = (total / RESERVE_FRACTION).min(RESERVE_MAX);
            let free_left = to_i64(available).saturating_sub(to_i64(reserve));
            if free_left < left {
                left = free_left;
                limit = BudgetLimit::FreeSpace { available, reserve };
            }
        }
        Self {
            left: AtomicI64::new(left),
            limit,
        }
    }

    /// Takes `n` if that much is left.
    fn try_take(&self, n: u64) -> bool {
        let n = to_i64(n);
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                (left >= n).then(|| left - n)
            })
            .is_ok()
    }

    fn force(&self, n: u64) {
        self.left.fetch_sub(to_i64(n), Ordering::AcqRel);
    }

    fn give_back(&self, n: u64) {
        self.left.fetch_add(to_i64(n), Ordering::AcqRel);
    }
}

/// The budget of one scan (a full scan, or every directory of one rescan).
pub(crate) struct ScanBudget {
    budget: Option<u64>,
    allowance: OnceLock<Allowance>,
    /// Files left out: path (relative, raw) and size.
    over: Mutex<Vec<(Vec<u8>, u64)>>,
}

impl ScanBudget {
    pub fn new(budget: Option<u64>) -> Self {
        Self {
            budget,
            allowance: OnceLock::new(),
            over: Mutex::default(),
        }
    }

    fn allowance(&self, store: &Store) -> &Allowance {
        self.allowance
            .get_or_init(|| Allowance::measure(store, self.budget))
    }

    /// Room for a file of `size` bytes: granted in full, or not at all (the file may then
    /// still be captured if the store already has its content).
    pub fn reserve(&self, store: &Store, size: u64) -> Reservation<'_> {
        let a = self.allowance(store);
        let need = upper_bound(size);
        let granted = a.try_take(need);
        Reservation {
            allowance: Some(a),
            granted: Cell::new(if granted { need } else { 0 }),
            used: Cell::new(0),
            may_grow: granted,
            forced: false,
        }
    }

    /// For what a snapshot must write whatever the budget (trees, link targets): charged once
    /// the allowance is measured, never refused.
    pub fn forced(&self) -> Reservation<'_> {
        Reservation {
            allowance: self.allowance.get(),
            granted: Cell::new(0),
            used: Cell::new(0),
            may_grow: true,
            forced: true,
        }
    }

    pub fn left_out(&self, rel: &[u8], size: u64) {
        if let Ok(mut o) = self.over.lock() {
            o.push((rel.to_vec(), size));
        }
    }

    /// The files left out (sorted by path) and what bounded the store, if any were.
    pub fn take_report(&self) -> (Vec<(Vec<u8>, u64)>, Option<BudgetLimit>) {
        let mut over = self
            .over
            .lock()
            .map(|mut o| std::mem::take(&mut *o))
            .unwrap_or_default();
        over.sort();
        let limit = if over.is_empty() {
            None
        } else {
            self.allowance.get().map(|a| a.limit)
        };
        (over, limit)
    }
}

/// The most a file of `size` bytes can append: each record's header and checksum, its bytes
/// stored raw (compression is used only when it saves), and for a chunked file its chunk list.
pub(crate) fn upper_bound(size: u64) -> u64 {
    let per_record = HEADER_LEN + 4;
    if size <= chunk::CHUNK_THRESHOLD {
        return size + per_record;
    }
    let chunks = size / chunk::MIN_CHUNK as u64 + 1;
    size + chunks * (per_record + chunk::LIST_ENTRY) + per_record
}

/// One file's share of the allowance (or a forced writer's). Used on one thread.
pub(crate) struct Reservation<'a> {
    allowance: Option<&'a Allowance>,
    granted: Cell<u64>,
    used: Cell<u64>,
    /// A file that grew since its `lstat` may take more; one that got nothing may not (it only
    /// finds out whether its content is stored already).
    may_grow: bool,
    forced: bool,
}

impl Reservation<'_> {
    /// Whether the file got its room up front.
    pub fn granted(&self) -> bool {
        self.granted.get() > 0 || self.forced
    }

    /// Account for appending `n` bytes; false if they do not fit.
    pub fn charge(&self, n: u64) -> bool {
        let Some(a) = self.allowance else {
            return true;
        };
        let used = self.used.get() + n;
        let granted = self.granted.get();
        if used > granted {
            let more = used - granted;
            if self.forced {
                a.force(more);
            } else if !self.may_grow || !a.try_take(more) {
                return false;
            }
            self.granted.set(used);
        }
        self.used.set(used);
        true
    }

    /// `n` bytes charged were not appended after all (another thread stored the object).
    pub fn refund(&self, n: u64) {
        self.used.set(self.used.get().saturating_sub(n));
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(a) = self.allowance {
            let unused = self.granted.get().saturating_sub(self.used.get());
            if unused > 0 {
                a.give_back(unused);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowance(left: i64) -> Allowance {
        Allowance {
            left: AtomicI64::new(left),
            limit: BudgetLimit::Budget { budget: 0, used: 0 },
        }
    }

    #[test]
    fn unused_room_goes_back_and_growth_is_bounded() {
        let a = allowance(1000);
        {
            let r = Reservation {
                allowance: Some(&a),
                granted: Cell::new(600),
                used: Cell::new(0),
                may_grow: true,
                forced: false,
            };
            a.force(600); // what reserve() took
            assert!(r.charge(100));
            assert!(r.charge(550)); // grew: 50 more taken
            assert!(!r.charge(1000)); // more than is left
        }
        // 650 used, the rest back.
        assert_eq!(a.left.load(Ordering::Acquire), 350);
        let none = Reservation {
            allowance: Some(&a),
            granted: Cell::new(0),
            used: Cell::new(0),
            may_grow: false,
            forced: false,
        };
        assert!(!none.charge(1), "a refused file never writes");
        drop(none);
        assert_eq!(a.left.load(Ordering::Acquire), 350);
    }

    #[test]
    fn forced_writes_go_below_zero() {
        let a = allowance(10);
        let f = Reservation {
            allowance: Some(&a),
            granted: Cell::new(0),
            used: Cell::new(0),
            may_grow: true,
            forced: true,
        };
        assert!(f.charge(100));
        drop(f);
        assert_eq!(a.left.load(Ordering::Acquire), -90);
        assert!(!a.try_take(1));
    }

    #[test]
    fn the_bound_covers_every_record() {
        assert_eq!(upper_bound(0), HEADER_LEN + 4);
        let big = 10 << 20;
        let chunks = big / chunk::MIN_CHUNK as u64 + 1;
        assert!(upper_bound(big) >= big + chunks * (HEADER_LEN + 4) + chunks * 40);
    }
}
