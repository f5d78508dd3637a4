//! The REPL's named sessions: at most [`MAX_SESSIONS`], made on first use, each with a turn
//! that one call holds from before its cell starts until its step is committed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use envgit_repl::{Catalog, CellOptions, CellOutcome, Limits, Session};

use super::error::ExecuteError;

/// Live sessions at most; a new name beyond this is refused.
const MAX_SESSIONS: usize = 16;
pub(super) const DEFAULT_SESSION: &str = "default";

/// A live session and whose turn it is.
///
/// [`Session::interrupt`] raises one flag per session, and [`Session::execute`] lowers it as it
/// takes a cell. When a client gives up on a call it sends `notifications/cancelled` and, at
/// once, its next call: if that next cell was handed to the session while the cancelled one
/// still ran, it lowered the flag before the running cell saw it, and the cancelled cell ran
/// to its timeout (the test's 1-in-5 flake; rmcp delivered the cancellation every time). So
/// here a call takes its session's turn before its cell starts and gives it back once its
/// step is committed (so a session's steps are also numbered in the order of its cells), an
/// interrupt reaches a cell only while it runs, and it is repeated until the cell ends (it can
/// land just before `execute` lowers the flag for the cell it was meant for).
pub(super) struct Live {
    pub(super) session: Session,
    /// Held by a call (in its `Running`) from before its cell starts until its step is
    /// committed; handed out first come, first served.
    pub(super) turn: Arc<tokio::sync::Mutex<()>>,
    /// The cell running now (0: none).
    running: Mutex<u64>,
}

impl Live {
    pub(super) fn new(session: Session) -> Arc<Self> {
        Arc::new(Live {
            session,
            turn: Arc::new(tokio::sync::Mutex::new(())),
            running: Mutex::new(0),
        })
    }

    /// Runs cell number `id`; its call holds the turn.
    pub(super) async fn execute(
        &self,
        id: u64,
        code: &str,
        opts: &CellOptions,
        host: Arc<dyn envgit_repl::Host>,
    ) -> Result<CellOutcome, ExecuteError> {
        self.set_running(id);
        let r = self.session.execute(code, opts, host).await;
        self.set_running(0);
        Ok(r?)
    }

    fn set_running(&self, id: u64) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = id;
    }

    /// Interrupts cell `id` if it is the one running (an interrupt that comes as the cell ends
    /// must not reach the next one; one that comes before it runs is repeated by the caller).
    pub(super) fn interrupt(&self, id: u64) {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if *running == id {
            self.session.interrupt();
        }
    }
}

/// The named sessions, and what rebuilding one as of a step needs.
pub(super) struct Sessions {
    pub(super) live: tokio::sync::Mutex<HashMap<String, Arc<Live>>>,
    pub(super) limits: Limits,
    seeds: AtomicU32,
    /// Per session: (step, journal cells after it), to rebuild the session as of a step.
    pub(super) marks: Mutex<HashMap<String, Vec<(u64, usize)>>>,
    /// The newest step this server has seen.
    pub(super) seen: AtomicU64,
}

impl Sessions {
    pub(super) fn new(limits: Limits, seen: u64) -> Self {
        Sessions {
            live: tokio::sync::Mutex::new(HashMap::new()),
            limits,
            seeds: AtomicU32::new(seed_base()),
            marks: Mutex::new(HashMap::new()),
            seen: AtomicU64::new(seen),
        }
    }

    /// The session `name`, made (with the downstream servers of `catalog`) on first use.
    pub(super) async fn get(
        &self,
        name: &str,
        catalog: &Catalog,
    ) -> Result<Arc<Live>, ExecuteError> {
        let mut sessions = self.live.lock().await;
        if let Some(s) = sessions.get(name) {
            return Ok(s.clone());
        }
        if sessions.len() >= MAX_SESSIONS {
            return Err(ExecuteError::TooManySessions {
                max: MAX_SESSIONS,
                names: sessions.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
        let seed = self.seeds.fetch_add(0x9e37_79b9, Ordering::Relaxed);
        let s = Live::new(Session::new(catalog, self.limits.clone(), seed).await?);
        sessions.insert(name.to_string(), s.clone());
        Ok(s)
    }

    /// Step `step` committed session `name`'s newest cell: marks where to rebuild it from.
    pub(super) async fn committed(&self, name: &str, step: u64) {
        self.seen.fetch_max(step, Ordering::SeqCst);
        let cells = match self.live.lock().await.get(name) {
            Some(sess) => sess.session.journal_len(),
            None => 0,
        };
        if let Ok(mut m) = self.marks.lock() {
            m.entry(name.to_string()).or_default().push((step, cells));
        }
    }

    pub(super) async fn clear(&self) {
        self.live.lock().await.clear();
    }
}

fn seed_base() -> u32 {
    (envgit_store::now_ms() as u32) ^ std::process::id().rotate_left(16)
}
