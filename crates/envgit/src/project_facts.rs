//! The sandbox plan's facts about the project's files (secrets to mask, files hard-linked to
//! outside it), taken from the stat index of the scan a step already made: no walk of its own.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use envgit_policy::Policy;
use envgit_sandbox::plan::{
    ListingVouch, MAX_LINK_BINDS, ProjectFacts, ProjectIndex, Seen, project_facts,
};
use envgit_store::{EntryKind, MarkerReason, Store, WorkTree};

use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::Project;
use crate::supervisor::SandboxStarted;

/// A scanned [`WorkTree`] as the plan reads it.
struct Index<'a>(&'a WorkTree);

impl ProjectIndex for Index<'_> {
    fn visit(&self, skip_dir: &dyn Fn(&[u8]) -> bool, f: &mut dyn FnMut(&[u8], Seen)) {
        let mut rel = Vec::new();
        self.0.visit_entries(skip_dir, |dir, name, kind, st| {
            rel.clear();
            if !dir.is_empty() {
                rel.extend_from_slice(dir);
                rel.push(b'/');
            }
            rel.extend_from_slice(name);
            let file = Seen::File {
                dev: st.dev,
                ino: st.ino,
                nlink: u64::from(st.nlink),
            };
            let seen = match kind {
                EntryKind::File => file,
                EntryKind::Dir => Seen::Dir,
                EntryKind::Symlink => Seen::Other,
                // A marker keeps the lstat of what it stands for.
                EntryKind::Marker(MarkerReason::Excluded | MarkerReason::TooDeep)
                    if st.is_dir() =>
                {
                    Seen::Unwalked
                }
                EntryKind::Marker(_) if st.is_file() => file,
                EntryKind::Marker(_) if st.is_socket() => Seen::Socket,
                EntryKind::Marker(_) => Seen::Other,
            };
            f(&rel, seen);
        });
    }
}

/// The store's cache of what the excluded directories held when last listed.
const LISTING_CACHE: &str = "listing.cache";

/// From `wt`, just scanned; warns about what the search could not cover. The listing of the
/// directories the scan does not enter is cached in the store at `store_dir`, and taken as it
/// is while the watching daemon's count for them (`vouch`, asked before) has not moved.
pub(crate) fn of(
    project: &Project,
    store_dir: &Path,
    wt: &WorkTree,
    vouch: Option<ListingVouch>,
) -> CmdResult<ProjectFacts> {
    let mut facts = searched(project, store_dir, wt, vouch)?;
    let failed = own_copies_of_linked_files(project, &mut facts);
    if let Some((path, why)) = failed.first() {
        // Bound read-only like a tracked file linked outside, as far as the sandbox can.
        if facts.linked_out.len() + failed.len() > MAX_LINK_BINDS {
            return Err(no_own_copy(path, why));
        }
        facts.notes.push(format!(
            "{} file(s) hard-linked to outside the project could not be made copies of their \
             own ({}: {why}): they are read-only inside",
            failed.len(),
            path.display()
        ));
        facts.linked_out.extend(failed.into_iter().map(|(p, _)| p));
        facts.linked_out.sort();
    }
    for n in &facts.notes {
        output::warn(n);
    }
    if facts.listing_vouched {
        crate::timings::note("the excluded directories' listing taken on the daemon's word");
    }
    Ok(facts)
}

/// The plan's search of `wt`, with the listing cache in the store at `store_dir`.
fn searched(
    project: &Project,
    store_dir: &Path,
    wt: &WorkTree,
    vouch: Option<ListingVouch>,
) -> CmdResult<ProjectFacts> {
    let cache = store_dir.join(LISTING_CACHE);
    project_facts(
        &project.policy,
        &project.root,
        &Index(wt),
        Some(&cache),
        vouch,
    )
    .map_err(|e| Failure::usage(e.to_string()))
}

/// The directories `wt`'s scan did not enter, where repositories no snapshot holds may be.
pub(crate) fn unwalked_roots(wt: &WorkTree) -> Vec<Vec<u8>> {
    envgit_sandbox::plan::unwalked_roots(&Index(wt))
}

/// The listing cache in the store at `store_dir`.
pub(crate) fn listing_cache(store_dir: &Path) -> PathBuf {
    store_dir.join(LISTING_CACHE)
}

/// From the stat cache the last step saved (a scan first if there is none), for a sandbox
/// started without a step's own scan at hand.
pub(crate) fn from_cache(project: &Project, store: &Store) -> CmdResult<ProjectFacts> {
    let mut wt = project.worktree(store)?;
    if wt.root_tree().is_none() {
        wt.full_scan(store, None)?;
    }
    of(project, store.dir(), &wt, None)
}

/// What a session's sandbox hides: each secret it masks and each file it binds read-only, with
/// the inode found at that path when the mount was planned. Those mounts sit on the inodes: a
/// secret made since (the person's key saved into a new `.env`, a `.env` the agent made), a
/// file saved in its place (an editor's write and rename) and a file linked outside since are
/// not covered until [`before_session_call`] mounts them into the running sandbox.
#[derive(Default)]
pub(crate) struct SessionCover(HashMap<PathBuf, Option<(u64, u64)>>);

impl SessionCover {
    /// What a sandbox planned from `facts` covers, with the secrets of `homes` (the paths as
    /// they are now). Call it before the plan: what it leaves out is masked again at the first
    /// call, which costs a mount and hides nothing more, where what it claimed and the plan
    /// missed would stay readable.
    pub(crate) fn of(facts: &ProjectFacts, homes: &[PathBuf], policy: &Policy) -> Self {
        let home = envgit_sandbox::plan::home_secrets(homes, policy);
        let covered = facts.secrets.iter().chain(&facts.linked_out).chain(&home);
        SessionCover(covered.map(|p| (p.clone(), inode(p))).collect())
    }

    /// The paths of `facts` and `outside` (the secrets outside the project) the session's
    /// sandboxes do not cover, with the rule each is under and the inode found there now. A
    /// mask every sandbox's plan made at that inode (`started`) covers it too.
    fn uncovered(
        &self,
        facts: &ProjectFacts,
        outside: &[PathBuf],
        started: &[&SandboxStarted],
    ) -> Vec<Uncovered> {
        let secrets = facts.secrets.iter().chain(outside).map(|p| (p, DENY_READ));
        let linked = facts.linked_out.iter().map(|p| (p, HARD_LINK));
        let planned = |p: &PathBuf, now: (u64, u64)| {
            !started.is_empty()
                && started
                    .iter()
                    .all(|s| s.masked.iter().any(|(m, at)| m == p && *at == now))
        };
        secrets
            .chain(linked)
            .filter_map(|(p, rule)| {
                let now = inode(p)?;
                let covered = self.0.get(p).is_some_and(|was| *was == Some(now))
                    || (rule == DENY_READ && planned(p, now));
                (!covered).then(|| Uncovered {
                    path: p.clone(),
                    rule,
                    inode: now,
                })
            })
            .collect()
    }

    /// `u` is covered now (its inode as found before the mount was made: a file saved in its
    /// place meanwhile is found again at the next call).
    fn add(&mut self, u: &Uncovered) {
        self.0.insert(u.path.clone(), Some(u.inode));
    }
}

const DENY_READ: &str = "filesystem.deny_read";
const HARD_LINK: &str = "filesystem.hard_link";

/// A path a session's sandbox does not cover.
#[derive(Debug, PartialEq)]
struct Uncovered {
    path: PathBuf,
    rule: &'static str,
    inode: (u64, u64),
}

/// What the sandboxes a session is about to set up will cover: the search they will make of
/// `wt` (saved as their stat cache), without its copies or notes, which each sandbox makes.
pub(crate) fn cover_of(
    project: &Project,
    store_dir: &Path,
    wt: &WorkTree,
    homes: &[PathBuf],
) -> CmdResult<SessionCover> {
    let facts = searched(project, store_dir, wt, None)?;
    Ok(SessionCover::of(&facts, homes, &project.policy))
}

/// The `(dev, ino)` at `p`, not following a link; `None` when nothing is there.
pub(crate) fn inode(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Why a session's tool call does not run: what it would have reached, the rule, and the
/// whole message for the person and the model.
pub(crate) struct CallRefused {
    pub what: String,
    pub rule: &'static str,
    pub message: String,
}

/// Before a tool call of a session whose sandbox was set up at its start (`cover`): a secret
/// that sandbox does not cover is masked in it, a file linked outside since made read-only
/// (`sandboxes`: pidfds of the first processes of the session's sandboxes and what each
/// said when it started, where its plan found the secrets outside the project, those made
/// since masked too; or why mounts cannot be added to them: then, or when a mount fails, the
/// call is refused, saying how to start the session again, `start_again`), and the files of the excluded directories linked outside since (the
/// person's `pnpm install` in their own terminal) become the project's own copies (one that
/// cannot refuses the call: the running sandbox cannot bind it read-only).
pub(crate) fn before_session_call(
    project: &Project,
    store_dir: &Path,
    wt: &WorkTree,
    cover: &mut SessionCover,
    sandboxes: Result<(&[OwnedFd], &[SandboxStarted]), &str>,
    start_again: &str,
) -> Result<(), CallRefused> {
    let mut facts = searched(project, store_dir, wt, None).map_err(|f| CallRefused {
        what: "the project's secrets".into(),
        rule: DENY_READ,
        message: f.message,
    })?;
    // A sandbox whose processes all ended (a downstream server that crashed) has nothing left
    // to hide a file from.
    let sandboxes = sandboxes.map(|(fds, started)| {
        fds.iter()
            .zip(started)
            .filter(|(fd, _)| !envgit_sandbox::cover::has_ended(fd.as_fd()))
            .unzip::<_, _, Vec<&OwnedFd>, Vec<&SandboxStarted>>()
    });
    let started: Vec<&SandboxStarted> = sandboxes
        .as_ref()
        .map(|(_, started)| started.clone())
        .unwrap_or_default();
    let mut outside: Vec<PathBuf> = started.iter().flat_map(|s| s.secrets.now()).collect();
    outside.sort();
    outside.dedup();
    let mut uncovered = cover.uncovered(&facts, &outside, &started);
    // A socket a process of the session's sandbox listens on (a dev server the agent started)
    // is the session's own: left reachable, where one anything else made is masked.
    let is_socket = |p: &Path| {
        use std::os::unix::fs::FileTypeExt;
        std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
    };
    if uncovered.iter().any(|u| is_socket(&u.path)) {
        let own: Vec<PathBuf> = started
            .iter()
            .flat_map(|s| envgit_sandbox::cover::own_sockets(s.pid))
            .collect();
        uncovered.retain(|u| !(own.contains(&u.path) && is_socket(&u.path)));
    }
    let none_running = matches!(&sandboxes, Ok((live, _)) if live.is_empty());
    if let Some(first) = uncovered.first().filter(|_| !none_running) {
        // The helper takes the masks, then the read-only files, and says the same order.
        let (masks, read_only): (Vec<&Uncovered>, Vec<&Uncovered>) =
            uncovered.iter().partition(|u| u.rule == DENY_READ);
        let paths = |us: &[&Uncovered]| us.iter().map(|u| u.path.clone()).collect::<Vec<_>>();
        let covered = sandboxes
            .map_err(str::to_string)
            .and_then(|(sandboxes, _)| {
                let exe =
                    std::env::current_exe().map_err(|e| format!("envgit's own binary: {e}"))?;
                let mut everywhere = vec![true; uncovered.len()];
                for sandbox in sandboxes {
                    let said = envgit_sandbox::cover::cover_running(
                        &exe,
                        sandbox.as_fd(),
                        &paths(&masks),
                        &paths(&read_only),
                    )?;
                    for (all, this) in everywhere.iter_mut().zip(said) {
                        *all &= this;
                    }
                }
                Ok(everywhere)
            });
        let covered = match covered {
            Ok(covered) => covered,
            Err(e) => return Err(not_covered(first, &e, start_again)),
        };
        // One a sandbox does not see got no mount there. In a home it may not be there *yet*
        // (the home's overlay remembers having looked for it): looked at again next call.
        // Elsewhere the view shows the host's directories as they are, or not at all (a
        // private `/tmp`, a directory outside the view): it will not be seen later either.
        let mut now_covered = Vec::new();
        for (u, covered) in masks.iter().chain(&read_only).zip(covered) {
            if covered {
                cover.add(u);
                now_covered.push(*u);
            } else if !started
                .iter()
                .flat_map(|s| &s.secrets.homes)
                .any(|h| u.path.starts_with(h))
            {
                cover.add(u);
            }
        }
        if let Some(first) = now_covered.first() {
            output::note(&format!(
                "envgit: {} made or replaced since the session began (rule {}){}: {} in the \
                 session's sandbox",
                first.path.display(),
                first.rule,
                match now_covered.len() {
                    1 => String::new(),
                    n => format!(" and {} more", n - 1),
                },
                if first.rule == DENY_READ {
                    "masked"
                } else {
                    "read-only"
                },
            ));
        }
    }
    match own_copies_of_linked_files(project, &mut facts).first() {
        Some((path, why)) => Err(CallRefused {
            what: format!("write {}", path.display()),
            rule: HARD_LINK,
            message: no_own_copy(path, why).message,
        }),
        None => Ok(()),
    }
}

/// The refusal of a call when the running sandbox could not be given the mount `u` needs.
fn not_covered(u: &Uncovered, why: &str, start_again: &str) -> CallRefused {
    let (what, is, cannot) = match u.rule {
        DENY_READ => (
            "read",
            "a secret made or replaced since the session began",
            "hide it",
        ),
        _ => (
            "write",
            "a file hard-linked to outside the project since the session began",
            "make it read-only",
        ),
    };
    let rule = u.rule;
    CallRefused {
        what: format!("{what} {}", u.path.display()),
        rule,
        message: format!(
            "{} is {is}, and this session's sandbox, set up when it began, cannot {cannot} \
             ({why}; rule {rule}), so its tool calls are refused. End the session and start it \
             again ({start_again}): the new sandbox covers it",
            u.path.display()
        ),
    }
}

/// The files of the excluded directories with more than one link become the project's own
/// copies ([`crate::own_copies`]), said in a note; those that could not, with why.
fn own_copies_of_linked_files(
    project: &Project,
    facts: &mut ProjectFacts,
) -> Vec<(PathBuf, std::io::Error)> {
    let files = std::mem::take(&mut facts.linked_excluded);
    if files.is_empty() {
        return Vec::new();
    }
    let done = crate::own_copies::make_own_copies(&project.root, &files);
    crate::timings::mark("own copies of linked files");
    if done.copied > 0 {
        output::note(&format!(
            "envgit: {} file(s) in {} ({}) were hard links to files outside the project, \
             which a write inside the sandbox would have changed too (a pnpm store, a uv \
             cache): each is now the project's own copy. To have copies from the start: \
             `pnpm config set package-import-method copy`, `UV_LINK_MODE=copy`.",
            done.copied,
            crate::own_copies::where_they_are(&project.root, &files),
            output::size(done.bytes),
        ));
    }
    done.failed
}

/// The refusal when a file linked outside can neither be copied nor made read-only.
fn no_own_copy(path: &Path, why: &std::io::Error) -> Failure {
    Failure::usage(format!(
        "{} is a hard link to a file outside the project, which a write inside the sandbox \
         would change, and envgit could not make it a copy of its own ({why}) nor read-only; \
         refusing to run. Make it a copy (`find . -type f -links +1` lists such files), or \
         fix what stopped the copy",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn facts(secrets: &[&Path], linked_out: &[&Path]) -> ProjectFacts {
        ProjectFacts {
            secrets: secrets.iter().map(|p| p.to_path_buf()).collect(),
            linked_out: linked_out.iter().map(|p| p.to_path_buf()).collect(),
            ..Default::default()
        }
    }

    /// The paths and rules `cover` leaves uncovered in `facts`.
    fn left(cover: &SessionCover, facts: &ProjectFacts) -> Vec<(PathBuf, &'static str)> {
        let u = cover.uncovered(facts, &[], &[]);
        u.into_iter().map(|u| (u.path, u.rule)).collect()
    }

    #[test]
    fn a_secret_made_or_saved_over_since_is_uncovered_one_edited_in_place_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (env, notes, linked) = (
            dir.path().join(".env"),
            dir.path().join("notes.txt"),
            dir.path().join("shared.txt"),
        );
        std::fs::write(&env, "KEY=1\n").unwrap();
        std::fs::write(&linked, "shared\n").unwrap();
        let mut cover = SessionCover::of(&facts(&[&env], &[&linked]), &[], &Policy::default());
        // Edited in place: the mask is still on it.
        std::fs::write(&env, "KEY=2\n").unwrap();
        assert_eq!(left(&cover, &facts(&[&env], &[&linked])), []);
        // Gone: nothing to read.
        let gone = dir.path().join(".env.gone");
        assert_eq!(left(&cover, &facts(&[&gone], &[])), []);
        // A new name for it (a link made since) is not masked.
        std::fs::hard_link(&env, &notes).unwrap();
        assert_eq!(
            left(&cover, &facts(&[&env, &notes], &[&linked])),
            [(notes.clone(), DENY_READ)]
        );
        // Once masked, it is covered.
        for u in cover.uncovered(&facts(&[&notes], &[]), &[], &[]) {
            cover.add(&u);
        }
        assert_eq!(left(&cover, &facts(&[&env, &notes], &[&linked])), []);
        // Saved by a write and a rename: a new file where the mask was.
        let tmp = dir.path().join(".env.swp");
        std::fs::write(&tmp, "KEY=3\n").unwrap();
        std::fs::rename(&tmp, &env).unwrap();
        assert_eq!(
            left(&cover, &facts(&[&env], &[&linked])),
            [(env.clone(), DENY_READ)]
        );
        // A file linked outside since the session began is not bound read-only.
        let later = dir.path().join("later.txt");
        std::fs::write(&later, "x").unwrap();
        assert_eq!(
            left(&cover, &facts(&[], &[&linked, &later])),
            [(later, HARD_LINK)]
        );
        // No cover at all (the sandbox not planned yet): every secret is uncovered.
        assert_eq!(
            left(&SessionCover::default(), &facts(&[&notes], &[])).len(),
            1
        );
    }
}
