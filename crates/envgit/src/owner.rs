//! Who a sandboxed command runs as, and whether it can write the project.
//!
//! The command runs as envgit's own user, except when envgit runs as root on a project whose
//! root directory another user owns (a container's root with the repository bind-mounted from
//! the host, its files owned by uid 1001): then it runs as that owner — the directory's uid and
//! group (a group of 0 is replaced by the owner's passwd group, else `nogroup`), mapped 1:1 in
//! the sandbox's user namespace, no supplementary groups, no capabilities — so it writes what
//! the owner can and nothing only root could, and what it creates stays the owner's. (As root,
//! without capabilities, it could write none of the owner's files; `envgit-sandbox`'s `userns`
//! says how the mapping is made.)
//!
//! Its home is the owner's, never root's (root's home is root's alone, and tools writing
//! `~/.npm`, `~/.cargo` or `~/.local` would find root's directories there and fail): the
//! owner's passwd home when it is a directory the owner owns, through a per-project overlay as
//! for any run; otherwise a per-project directory of the owner's, kept between steps, at
//! `/home/envgit-UID`. `HOME`, `USER` and `LOGNAME` follow. Root's toolchains on `PATH` stay
//! usable, read-only, as for any run (and `RUSTUP_HOME` names root's `~/.rustup` when it is
//! unset, so rustup's proxies find their toolchains).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use envgit_sandbox::Spec;
use envgit_sandbox::spec::RootBase;
use envgit_store::{StepKind, Store, WorkTree};

use crate::failure::{CmdResult, Failure};
use crate::home_claim::HomeClaim;
use crate::output;
use crate::runtime::private_dir;

/// The group used when neither the project root's group nor the owner's passwd entry gives
/// one other than root's.
const NOGROUP: u32 = 65534;

struct Passwd {
    name: String,
    gid: u32,
    home: PathBuf,
}

fn passwd(uid: u32) -> Option<Passwd> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2].parse::<u32>().ok() == Some(uid)).then(|| Passwd {
            name: f[0].to_owned(),
            gid: f[3].parse().unwrap_or(NOGROUP),
            home: PathBuf::from(f[5]),
        })
    })
}

/// `(uid, gid)` of the project's owner when commands run as them: envgit runs as root and the
/// project root directory belongs to another user.
pub(crate) fn project_owner(root: &Path) -> Option<(u32, u32)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let meta = std::fs::metadata(root).ok()?;
    if meta.uid() == 0 {
        return None;
    }
    let gid = if meta.gid() != 0 {
        meta.gid()
    } else {
        passwd(meta.uid())
            .map(|p| p.gid)
            .filter(|&g| g != 0)
            .unwrap_or(NOGROUP)
    };
    Some((meta.uid(), gid))
}

/// The ids a command in the project at `root` runs with: uid, gid, and every group it is in.
fn workload_ids(root: &Path) -> (u32, u32, Vec<u32>) {
    if let Some((uid, gid)) = project_owner(root) {
        return (uid, gid, vec![gid]);
    }
    let gid = rustix::process::getegid().as_raw();
    let mut groups: Vec<u32> = rustix::process::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    groups.push(gid);
    (rustix::process::geteuid().as_raw(), gid, groups)
}

/// A directory of envgit's state for the owner's home, private and theirs.
fn owned_dir(p: &Path, uid: u32, gid: u32) -> CmdResult<()> {
    private_dir(p)?;
    std::os::unix::fs::chown(p, Some(uid), Some(gid))
        .map_err(|e| Failure::failed(format!("{}: {e}", p.display())))
}

/// Who one sandboxed run's command runs as, with its home.
pub(crate) struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// The homes the plan masks credentials in and overlays (the first).
    pub homes: Vec<PathBuf>,
    /// `(upper, work)` of the home's overlay.
    pub home_overlay: Option<(PathBuf, PathBuf)>,
    /// The project's shared upper, read-only under `home_overlay`'s, when another sandbox
    /// of the project holds it ([`HomeClaim`]).
    home_shared: Option<PathBuf>,
    /// Which upper this run holds, until it ends.
    pub home_claim: Option<HomeClaim>,
    /// The home has no host directory under it (see [`envgit_sandbox::spec::Overlay`]).
    fresh_home: bool,
    /// Variables set inside: `HOME`, `USER`, `LOGNAME` (and `RUSTUP_HOME`) of the owner.
    pub env: Vec<(String, String)>,
    /// Said on the step when the command does not run as envgit's own user.
    pub note: Option<String>,
}

fn own_ids() -> (u32, u32) {
    (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    )
}

impl RunAs {
    /// The part of the sandbox's view this run's spec will have whatever its command
    /// ([`RootBase`]), for the zygote to build while the store opens: what `plan` and
    /// [`RunAs::fit`] put in the spec for the project at `root`, given its trust files and
    /// envgit's binary.
    pub(crate) fn root_base(
        &self,
        root: &Path,
        staging: PathBuf,
        trust: &envgit_sandbox::trust::TrustFiles,
        envgit_exe: &Path,
    ) -> RootBase {
        let caller_env: Vec<(String, String)> = std::env::vars().collect();
        RootBase {
            staging,
            system: envgit_sandbox::plan::system_dirs(
                &caller_env,
                root,
                self.homes.first().map(PathBuf::as_path),
            ),
            home: envgit_sandbox::plan::home_overlay(&self.homes, self.home_overlay.as_ref()).map(
                |home| envgit_sandbox::spec::Overlay {
                    fresh: self.fresh_home,
                    shared: self.home_shared.clone(),
                    ..home
                },
            ),
            run_files: envgit_sandbox::plan::base_run_files(Some(trust), Some(envgit_exe)),
        }
    }

    /// For a run in the project at `root` whose state directory is `state`; `homes` are
    /// envgit's own user's (`$HOME` and the passwd entry's).
    pub(crate) fn decide(root: &Path, state: &Path, homes: Vec<PathBuf>) -> CmdResult<Self> {
        match project_owner(root) {
            None => Self::invoker(state, homes),
            Some((uid, gid)) => Self::owner(root, uid, gid, state, homes),
        }
    }

    fn invoker(state: &Path, homes: Vec<PathBuf>) -> CmdResult<Self> {
        let (home_overlay, home_shared, home_claim) = match homes.first() {
            Some(home) => {
                let base = state.join("home");
                private_dir(&base.join("upper"))?;
                private_dir(&base.join("work"))?;
                let (claim, layers) = HomeClaim::take(state, &base, home, private_dir)?;
                (
                    Some((layers.upper, layers.work)),
                    layers.shared,
                    Some(claim),
                )
            }
            None => (None, None, None),
        };
        let (uid, gid) = own_ids();
        Ok(Self {
            uid,
            gid,
            homes,
            home_overlay,
            home_shared,
            home_claim,
            fresh_home: false,
            env: Vec::new(),
            note: None,
        })
    }

    fn owner(
        root: &Path,
        uid: u32,
        gid: u32,
        state: &Path,
        root_homes: Vec<PathBuf>,
    ) -> CmdResult<Self> {
        let pw = passwd(uid);
        let base = state.join(format!("home-{uid}"));
        let own_home = pw.as_ref().map(|p| p.home.clone()).filter(|h| {
            h != Path::new("/")
                && std::fs::symlink_metadata(h).is_ok_and(|m| m.is_dir() && m.uid() == uid)
        });
        let (home, overlay, fresh, shared, claim) = match own_home {
            Some(h) => {
                owned_dir(&base.join("upper"), uid, gid)?;
                owned_dir(&base.join("work"), uid, gid)?;
                let (claim, layers) =
                    HomeClaim::take(state, &base, &h, |p| owned_dir(p, uid, gid))?;
                (
                    h.canonicalize().unwrap_or(h),
                    (layers.upper, layers.work),
                    false,
                    layers.shared,
                    Some(claim),
                )
            }
            // Bound at its path, not an overlay: sandboxes side by side may share it.
            None => {
                let dir = base.join("home");
                owned_dir(&dir, uid, gid)?;
                (
                    PathBuf::from(format!("/home/envgit-{uid}")),
                    (dir.clone(), dir),
                    true,
                    None,
                    None,
                )
            }
        };
        let name = pw.map(|p| p.name).unwrap_or_else(|| uid.to_string());
        let mut env = vec![
            ("HOME".to_owned(), home.display().to_string()),
            ("USER".to_owned(), name.clone()),
            ("LOGNAME".to_owned(), name),
        ];
        if std::env::var_os("RUSTUP_HOME").is_none()
            && let Some(rustup) = root_homes
                .first()
                .map(|h| h.join(".rustup"))
                .filter(|r| r.is_dir())
        {
            env.push(("RUSTUP_HOME".to_owned(), rustup.display().to_string()));
        }
        let note = format!(
            "envgit runs as root and {} belongs to uid {uid}: the command ran as uid {uid}, gid \
             {gid}, HOME={}",
            root.display(),
            home.display()
        );
        Ok(Self {
            uid,
            gid,
            homes: vec![home],
            home_overlay: Some(overlay),
            home_shared: shared,
            home_claim: claim,
            fresh_home: fresh,
            env,
            note: Some(note),
        })
    }

    /// What the plan does not know: a fresh home, and run files of envgit's own (below
    /// `runtime`, the private runtime directory) that the owner must reach — a socket they
    /// connect to, a file only root could read — given to the owner (their directory stays
    /// root's, mode 0700: on the host the owner still cannot reach them).
    pub(crate) fn fit(&self, spec: &mut Spec, runtime: &Path) -> CmdResult<()> {
        if let Some(h) = spec.home.as_mut() {
            h.fresh = self.fresh_home;
            h.shared = self.home_shared.clone();
        }
        if self.note.is_none() {
            return Ok(());
        }
        let sources = spec
            .run_files
            .iter()
            .chain(&spec.base_run_files)
            .map(|(_, src)| src)
            .chain(spec.file_overrides.iter().map(|(src, _)| src));
        for src in sources.filter(|s| s.starts_with(runtime)) {
            let Ok(meta) = std::fs::symlink_metadata(src) else {
                continue;
            };
            let ft = meta.file_type();
            use std::os::unix::fs::FileTypeExt;
            let reachable = if ft.is_socket() {
                meta.mode() & 0o002 != 0
            } else {
                !ft.is_file() || meta.mode() & 0o004 != 0
            };
            if !reachable {
                std::os::unix::fs::lchown(src, Some(self.uid), Some(self.gid))
                    .map_err(|e| Failure::failed(format!("{}: {e}", src.display())))?;
            }
        }
        Ok(())
    }
}

/// At most this many entries of the project are looked at by [`sample_unwritable`], breadth
/// first: the project root and what lies near it, where a tree owned by the wrong user shows.
const SAMPLE_ENTRIES: usize = 2000;

/// What [`sample_unwritable`] found.
pub(crate) struct Writability {
    /// The user (and group) commands run as.
    pub uid: u32,
    pub gid: u32,
    /// Entries looked at.
    pub checked: usize,
    /// Those commands cannot write: `(path relative to the root, owner uid, mode)`.
    pub unwritable: Vec<(String, u32, u32)>,
}

impl Writability {
    /// One line naming the first unwritable entry, and the fix; `None` when all are writable.
    pub fn problem(&self, root: &Path) -> Option<(String, String)> {
        let (path, owner, mode) = self.unwritable.first()?;
        let more = match self.unwritable.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more of the {} entries sampled)", self.checked),
        };
        let who = if project_owner(root).is_some() {
            "the project's owner, whom sandboxed commands run as"
        } else {
            "whom sandboxed commands run as"
        };
        let detail = format!(
            "{} (owner uid {owner}, mode {:03o}) is not writable by uid {} ({who}){more}: \
             commands in the sandbox cannot change it",
            root.join(path).display(),
            mode & 0o7777,
            self.uid
        );
        let sudo = if rustix::process::geteuid().is_root() {
            ""
        } else {
            "sudo "
        };
        let fix = format!(
            "{sudo}chown -R {}:{} {}",
            self.uid,
            self.gid,
            crate::output::shell_quote(&root.display().to_string())
        );
        Some((detail, fix))
    }
}

/// Whether a user with `uid` and `groups` (and no capability) may write an entry owned by
/// `owner:group` with `mode`. An entry of their own counts as writable whatever its mode (they
/// can chmod it; read-only files of git's are so on purpose).
fn may_write(uid: u32, groups: &[u32], owner: u32, group: u32, mode: u32) -> bool {
    if owner == uid {
        return true;
    }
    if groups.contains(&group) {
        mode & 0o020 != 0
    } else {
        mode & 0o002 != 0
    }
}

/// Looks at the project root and up to [`SAMPLE_ENTRIES`] entries below it (breadth first,
/// symlinks and protected paths left out: protected paths are read-only inside anyway) and
/// lists those the command's user cannot write. Costs a few milliseconds, never a walk of the
/// whole tree.
pub(crate) fn sample_unwritable(root: &Path) -> Writability {
    let (uid, gid, groups) = workload_ids(root);
    let mut out = Writability {
        uid,
        gid,
        checked: 0,
        unwritable: Vec::new(),
    };
    let check = |out: &mut Writability, rel: &str, meta: &std::fs::Metadata| {
        out.checked += 1;
        if !may_write(uid, &groups, meta.uid(), meta.gid(), meta.mode()) {
            out.unwritable
                .push((rel.to_owned(), meta.uid(), meta.mode()));
        }
    };
    let Ok(meta) = std::fs::metadata(root) else {
        return out;
    };
    check(&mut out, ".", &meta);
    let mut queue: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    queue.push_back(String::new());
    'walk: while let Some(dir) = queue.pop_front() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            if envgit_policy::is_protected(&rel) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(root.join(&rel)) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            check(&mut out, &rel, &meta);
            if meta.is_dir() {
                queue.push_back(rel);
            }
            if out.checked >= SAMPLE_ENTRIES {
                break 'walk;
            }
        }
    }
    out
}

/// Before the first `envgit run` of a project (no run step yet): say who the command runs as
/// when that is not envgit's own user, and warn when sampled project files are not writable
/// by it, naming one and the fix.
pub(crate) fn first_run(root: &Path, store: &Store) {
    // Newest first: once a project has run steps, the newest few settle it.
    if store
        .steps_newest_first()
        .any(|s| s.is_ok_and(|s| s.kind == StepKind::Run))
    {
        return;
    }
    if let Some((uid, gid)) = project_owner(root) {
        output::note(&format!(
            "envgit runs as root and {} belongs to uid {uid}: commands run as uid {uid} (gid \
             {gid}), never as root",
            root.display()
        ));
    }
    if let Some((detail, fix)) = sample_unwritable(root).problem(root) {
        output::warn(&format!("{detail}; fix: {fix}"));
    }
}

/// After a step that began at `started_ms`: clears setuid/setgid bits the step set (see
/// `envgit_store::clear_setid_since`), says so, and notes each on the step. A bit that cannot
/// be cleared is an error on the terminal and a note, never a lost step.
pub(crate) fn clear_setid(
    wt: &WorkTree,
    report: &envgit_store::ScanReport,
    started_ms: u64,
    notes: &mut Vec<String>,
) {
    let done = envgit_store::clear_setid_since(wt, report, started_ms);
    say_setid_cleared(&done);
    notes.extend(envgit_store::setid_notes(&done));
}

/// Says which setuid/setgid bits a step's end cleared, and which it could not.
pub(crate) fn say_setid_cleared(done: &envgit_store::SetidCleared) {
    for p in &done.cleared {
        output::warn(&format!(
            "{p} was made setuid/setgid during the step: bit cleared"
        ));
    }
    for (p, e) in &done.failed {
        output::error(&format!(
            "{p} was made setuid/setgid during the step and the bit could not be cleared ({e}): \
             `chmod ug-s {p}` before running it"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writability_by_owner_group_and_others() {
        assert!(may_write(1001, &[1001], 1001, 1001, 0o444));
        assert!(!may_write(1001, &[1001], 0, 0, 0o755));
        assert!(may_write(1001, &[1001], 0, 0, 0o757));
        assert!(may_write(1001, &[1001], 0, 1001, 0o775));
        // In the group: the group bits decide, not the others'.
        assert!(!may_write(1001, &[1001], 0, 1001, 0o757));
        assert!(!may_write(0, &[0], 1001, 1001, 0o644));
    }
}
