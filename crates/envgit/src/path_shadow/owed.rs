//! The sweep a step owes the person's search paths, kept with its protected copy: should
//! envgit die before the step's end (`kill -9`, the OOM killer), the next envgit command
//! sweeps for it. It cannot read the paths again instead: by then the planted `git` is in
//! `.venv/bin`, and a run reading them would take it for the person's own.
//!
//! What is kept is what the run found (each search's directories, the files that were there,
//! the names the policy lets a step put first), not the host's files, read again at the sweep.

use std::collections::{BTreeSet, HashSet};

use super::entry::Entry;
use super::search::Search;
use super::{PathShadows, Removed, SearchPath};

/// The name the copy keeps it under.
pub(crate) const ATTACHMENT: &str = "path-shadows";

#[derive(serde::Serialize, serde::Deserialize)]
struct Owed {
    searches: Vec<OwedSearch>,
    allowed: Vec<Vec<u8>>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct OwedSearch {
    search: Search,
    entries: Vec<Entry>,
    accepted: Vec<BTreeSet<Vec<u8>>>,
}

impl PathShadows {
    /// What a recovery needs to make this sweep; `None` when it cannot be written down (a
    /// directory whose path is not UTF-8).
    pub(crate) fn owed(&self) -> Option<Vec<u8>> {
        let searches = self
            .searches
            .iter()
            .map(|s| OwedSearch {
                search: s.search,
                entries: s.entries.clone(),
                accepted: s.accepted.clone(),
            })
            .collect();
        let owed = Owed {
            searches,
            allowed: self.allowed.iter().cloned().collect(),
        };
        serde_json::to_vec(&owed).ok()
    }

    /// The sweep `owed` ([`PathShadows::owed`]) describes, the host's directories read now.
    fn from_owed(owed: &[u8]) -> Option<PathShadows> {
        let owed: Owed = serde_json::from_slice(owed).ok()?;
        let searches = owed
            .searches
            .into_iter()
            .filter_map(|o| {
                let mut s = SearchPath::of_entries(o.search, o.entries)?;
                // Shaped as the entries were when it was written; anything else accepts
                // nothing (fail closed: a shadowing file is then removed).
                s.accepted = if o.accepted.len() == s.entries.len() {
                    o.accepted
                } else {
                    vec![BTreeSet::new(); s.entries.len()]
                };
                Some(s)
            })
            .collect();
        Some(PathShadows {
            searches,
            allowed: owed.allowed.into_iter().collect::<HashSet<_>>(),
        })
    }
}

/// Keeps with `copy` what the sweep of `shadows` needs, should envgit die before the step's
/// end. A sweep that cannot be written down stops the run: the next command could not make it.
pub(crate) fn keep_with(
    copy: &envgit_store::ProtectedCopy,
    shadows: &PathShadows,
) -> crate::failure::CmdResult<()> {
    let owed = shadows.owed().ok_or_else(|| {
        crate::failure::Failure::usage(
            "a directory of your PATH (or LD_LIBRARY_PATH, PYTHONPATH, PERL5LIB, RUBYLIB) that a \
             step can write has a path that is not UTF-8: envgit cannot keep what it must check \
             there should it be killed; rename it or take it off the variable"
                .to_string(),
        )
    })?;
    copy.attach(ATTACHMENT, &owed)?;
    Ok(())
}

/// The sweeps of steps whose envgit died before their end (`attached`: what their protected
/// copies kept), made now; what they removed, or what could not be read.
pub(crate) fn sweep_owed(attached: &[(String, Vec<u8>)]) -> Result<Vec<Removed>, String> {
    let mut removed = Vec::new();
    for (_, owed) in attached.iter().filter(|(name, _)| name == ATTACHMENT) {
        let shadows = PathShadows::from_owed(owed).ok_or_else(|| {
            "the search paths a killed step was to be checked against could not be read".to_string()
        })?;
        removed.extend(shadows.sweep());
    }
    Ok(removed)
}
