//! The replay journal: per cell its code, status, host calls with their replies, and clock
//! readings. Enough to rebuild a session's state in a fresh context without calling anything.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::{Catalog, CellStatus, Host, HostCall, HostFuture, HostReply};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    pub seed: u32,
    pub catalog: Catalog,
    pub cells: Vec<JournalCell>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalCell {
    pub code: String,
    pub status: CellStatus,
    /// In the order the cell started them.
    pub calls: Vec<JournalCall>,
    /// `Date.now()` readings handed out, in order.
    pub clock: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalCall {
    pub call: HostCall,
    /// `None` when the cell ended before the reply came.
    pub reply: Option<HostReply>,
}

/// Answers a replayed cell's host calls from its journal entry, in order, and notes the first
/// call that differs from the recorded one.
pub(crate) struct JournalHost {
    calls: Mutex<VecDeque<JournalCall>>,
    divergence: Mutex<Option<String>>,
}

impl JournalHost {
    pub(crate) fn new(calls: Vec<JournalCall>) -> Self {
        JournalHost {
            calls: Mutex::new(calls.into()),
            divergence: Mutex::new(None),
        }
    }

    pub(crate) fn divergence(&self) -> Option<String> {
        let d = self.divergence.lock().ok()?.clone();
        if d.is_some() {
            return d;
        }
        let left = self.calls.lock().ok()?.len();
        (left > 0).then(|| format!("{left} recorded downstream call(s) were not made again"))
    }

    fn diverge(&self, reason: String) -> HostReply {
        if let Ok(mut d) = self.divergence.lock()
            && d.is_none()
        {
            *d = Some(reason.clone());
        }
        Err(format!("replay diverged: {reason}"))
    }
}

impl Host for JournalHost {
    fn call(&self, call: HostCall) -> HostFuture {
        let next = self.calls.lock().ok().and_then(|mut c| c.pop_front());
        let reply = match next {
            None => self.diverge(format!(
                "{}.{} was called, and the journal has no more calls",
                call.server, call.tool
            )),
            Some(rec) if rec.call != call => self.diverge(format!(
                "{}.{} was called where the journal has {}.{} with other arguments",
                call.server, call.tool, rec.call.server, rec.call.tool
            )),
            Some(rec) => match rec.reply {
                Some(r) => r,
                None => self.diverge(format!(
                    "{}.{} has no recorded reply",
                    call.server, call.tool
                )),
            },
        };
        Box::pin(async move { reply })
    }
}
