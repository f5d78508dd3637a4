//! Setuid and setgid bits never come out of envgit: a snapshot does not record them (a tree
//! entry keeps the permission bits, `0o777`), rewind and fork never write them, and a file a
//! step left setuid or setgid loses the bit when the step ends ([`clear_setid`], run on what
//! the scan after the step reports). A file the sandboxed command made setuid would otherwise
//! run as its owner for anyone on the host — root's, when envgit ran as root.
//!
//! `security.capability` (file capabilities) goes with the bits on those files. The command
//! itself cannot set that attribute (it holds no capability, CAP_SETFCAP included, and the
//! kernel drops the attribute on every write), so no scan looks for it elsewhere.

use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::beneath;
use crate::worktree::{ScanReport, WorkTree};

/// The setuid and setgid bits of `st_mode`.
pub const SETID_BITS: u32 = 0o6000;

/// A regular file with the setuid or setgid bit, as a scan saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetidFile {
    /// Relative to the project root, `/`-separated.
    pub rel: Vec<u8>,
    /// Its inode's change time (ns since the epoch): a `chmod u+s` sets it, nothing the
    /// command can do sets it back, so it tells what changed since a step began.
    pub ctime_ns: i64,
}

impl SetidFile {
    pub fn path(&self) -> String {
        beneath::display_rel(&self.rel)
    }
}

/// Margin for the coarse clock that stamps ctime (it may lag the wall clock by a tick).
const CTIME_MARGIN_NS: i64 = 1_000_000_000;

/// After a step that began at `since_ms` (ms since the epoch): clears the setuid and setgid
/// bits of the files `report` found with one whose inode changed since then — what the step
/// made, not what the user had before it. The caller says what was cleared and what failed.
pub fn clear_setid_since(wt: &WorkTree, report: &ScanReport, since_ms: u64) -> Cleared {
    clear_setid(wt.root_fd(), &changed_since(&report.setid, since_ms))
}

/// Those of `files` whose inode changed since `since_ms` (ms since the epoch).
pub(crate) fn changed_since(files: &[SetidFile], since_ms: u64) -> Vec<SetidFile> {
    let since = (since_ms as i64).saturating_mul(1_000_000) - CTIME_MARGIN_NS;
    files
        .iter()
        .filter(|f| f.ctime_ns >= since)
        .cloned()
        .collect()
}

/// What [`clear_setid`] did.
#[derive(Debug, Default)]
pub struct Cleared {
    /// Paths whose bits were cleared.
    pub cleared: Vec<String>,
    /// Paths whose bits could not be cleared, and why.
    pub failed: Vec<(String, Errno)>,
}

/// Clears the setuid and setgid bits, and `security.capability`, of each regular file in
/// `files` (below `root`, never through a symlink). A file gone or replaced since the scan is
/// skipped; one that fails does not stop the others.
pub fn clear_setid(root: BorrowedFd<'_>, files: &[SetidFile]) -> Cleared {
    let mut out = Cleared::default();
    for f in files {
        match clear_one(root, &f.rel) {
            Ok(true) => out.cleared.push(f.path()),
            Ok(false) | Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => {}
            Err(e) => out.failed.push((f.path(), e)),
        }
    }
    out
}

fn clear_one(root: BorrowedFd<'_>, rel: &[u8]) -> rustix::io::Result<bool> {
    let parent = beneath::parent_rel(rel).unwrap_or(b"");
    let name = rel.rsplit(|&b| b == b'/').next().unwrap_or(rel);
    let dir = beneath::open_dir_rel(root, parent)?;
    // O_PATH opens a symlink itself rather than its target, and needs no read permission on
    // the file; the change goes through the descriptor's /proc link, so it lands on this
    // very inode whatever is renamed meanwhile.
    let fd = rustix::fs::openat(
        &dir,
        beneath::cstr(name)?.as_c_str(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_mode & SETID_BITS == 0
    {
        return Ok(false);
    }
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match rustix::fs::removexattr(link.as_str(), "security.capability") {
        Ok(()) | Err(Errno::NODATA | Errno::NOTSUP) => {}
        Err(e) => return Err(e),
    }
    rustix::fs::chmod(
        link.as_str(),
        Mode::from_raw_mode(st.st_mode & 0o7777 & !SETID_BITS),
    )?;
    Ok(true)
}

/// The step's notes for the setuid/setgid bits its end cleared, or failed to.
pub fn setid_notes(done: &Cleared) -> Vec<String> {
    let cleared = done
        .cleared
        .iter()
        .map(|p| format!("{p}: setuid/setgid bit cleared (envgit never keeps one a step made)"));
    let failed = done
        .failed
        .iter()
        .map(|(p, e)| format!("{p}: made setuid/setgid by the step; clearing the bit failed: {e}"));
    cleared.chain(failed).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn clears_the_bits_and_skips_links_and_plain_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir(root.join("d")).unwrap();
        let set = |p: &str, mode: u32| {
            std::fs::write(root.join(p), b"x").unwrap();
            std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(mode)).unwrap();
        };
        set("d/s", 0o4755);
        set("g", 0o2711);
        set("plain", 0o755);
        std::os::unix::fs::symlink("d/s", root.join("link")).unwrap();
        let fd = beneath::open_root(root).unwrap();
        let files: Vec<SetidFile> = ["d/s", "g", "plain", "link", "gone"]
            .iter()
            .map(|p| SetidFile {
                rel: p.as_bytes().to_vec(),
                ctime_ns: 0,
            })
            .collect();
        let done = clear_setid(fd.as_fd(), &files);
        assert_eq!(done.cleared, vec!["d/s".to_string(), "g".to_string()]);
        assert!(done.failed.is_empty(), "{:?}", done.failed);
        let mode = |p: &str| {
            std::fs::symlink_metadata(root.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("d/s"), 0o755);
        assert_eq!(mode("g"), 0o711);
        assert_eq!(mode("plain"), 0o755);
    }
}
