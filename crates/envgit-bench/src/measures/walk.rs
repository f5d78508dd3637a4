//! The floor of any scan, as an anchor: a bare `lstat` walk of the tree, one thread, the same
//! system calls a scan makes and nothing else (open each directory, list it, `fstatat` each
//! entry with `AT_SYMLINK_NOFOLLOW`; no hashing, no allocation per entry beyond the listing).
//! Measured in the same run as what is compared with it, alternating with it where it can.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use anyhow::{Context, Result};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use crate::util::{Samples, timed};

/// Entries visited by one walk of `root`.
pub fn walk(root: &Path) -> Result<u64> {
    let top = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .with_context(|| format!("opening {}", root.display()))?;
    walk_dir(top)
}

/// Depth first, one descriptor per level (a directory's subdirectories are opened after its
/// listing is done).
fn walk_dir(dir: OwnedFd) -> Result<u64> {
    let mut entries = 0;
    let mut subdirs: Vec<CString> = Vec::new();
    let mut listing = Dir::read_from(dir.as_fd()).context("listing a directory")?;
    while let Some(entry) = listing.read() {
        let entry = entry.context("reading a directory entry")?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let st =
            rustix::fs::statat(dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW).context("lstat")?;
        entries += 1;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            subdirs.push(name.to_owned());
        }
    }
    drop(listing);
    for name in subdirs {
        let sub = rustix::fs::openat(
            dir.as_fd(),
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .context("opening a subdirectory")?;
        entries += walk_dir(sub)?;
    }
    Ok(entries)
}

/// One timed walk, in ms, added to `samples`.
pub fn sample(root: &Path, samples: &mut Samples) -> Result<u64> {
    let (n, ms) = timed(|| walk(root))?;
    samples.push(ms);
    Ok(n)
}
