//! The large files every open maps (the stat index's base, the object table) are checked whole
//! once per boot and file, not at every open. Their checksum and structure checks guard
//! against a file torn by a crash (they are renamed into place without an fsync); in a
//! 20,000-file repository they were ~2 ms of every step's CPU (`crc32c` over 7 MB, and every
//! entry's name checked), growing with the repository.
//!
//! Once a file passed its checks, a note beside it (`NAME.checked`) says so for this boot
//! (`/proc/sys/kernel/random/boot_id`) and this file: its device, inode, size, mtime and ctime.
//! The store never writes these files in place (each is written whole and renamed in), so the
//! same inode with the same stamps holds the same bytes, and only a crash, that is a new boot,
//! can leave torn ones. A note that is missing, torn, of another boot or of another file means
//! the checks run again. The store's directory is its user's alone and hidden from every
//! sandbox, as for the files themselves.

use std::fs::Metadata;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A file as it was opened: the note's key for it (boot, device, inode, size, stamps), `None`
/// when the boot cannot be told (no `/proc`): then it is checked every time.
#[derive(Debug)]
pub(crate) struct Opened {
    key: Option<String>,
    note: PathBuf,
}

impl Opened {
    /// `path` as opened with `meta` (from the open file, not the path: a file renamed over it
    /// meanwhile is another file).
    pub(crate) fn new(path: &Path, meta: &Metadata) -> Self {
        let key = boot_id().map(|boot| {
            format!(
                "{boot}\n{}:{}:{}:{}.{}:{}.{}\n",
                meta.dev(),
                meta.ino(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec()
            )
        });
        Self {
            key,
            note: note_of(path),
        }
    }

    /// Whether this file passed its checks earlier in this boot.
    pub(crate) fn was_checked(&self) -> bool {
        let Some(key) = &self.key else {
            return false;
        };
        std::fs::read(&self.note).is_ok_and(|said| said == key.as_bytes())
    }

    /// Notes that this file passed its checks; a failure only means the next open checks it
    /// again.
    pub(crate) fn passed(&self) {
        let Some(key) = &self.key else {
            return;
        };
        // A store temporary's name: one a kill leaves is swept (`stale_temporaries.rs`).
        let Some(dir) = self.note.parent() else {
            return;
        };
        let tmp = dir.join(format!(".tmp-checked-{:016x}", crate::pack::random_u64()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(key.as_bytes()));
        if written
            .and_then(|()| std::fs::rename(&tmp, &self.note))
            .is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// Removes the note of the file at `path`, removed itself (a note of a file that is gone
/// only names another file, but it would stay behind).
pub(crate) fn forget(path: &Path) {
    let _ = std::fs::remove_file(note_of(path));
}

/// `NAME.checked` beside the file at `path`.
fn note_of(path: &Path) -> PathBuf {
    let mut note = path.as_os_str().to_owned();
    note.push(".checked");
    PathBuf::from(note)
}

/// This boot's id, read once per process.
fn boot_id() -> Option<&'static str> {
    static BOOT: OnceLock<Option<String>> = OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
    .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_taken_as_checked_only_while_it_is_the_same_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("objects.table");
        std::fs::write(&path, b"one").unwrap();
        let opened = |p: &Path| Opened::new(p, &std::fs::metadata(p).unwrap());
        let first = opened(&path);
        assert!(!first.was_checked(), "checked before any check");
        first.passed();
        assert!(opened(&path).was_checked());

        // Written in place (the store never does): its stamps move, so it is checked again
        // (moved by hand: within one tick of the file clock a write can leave them as they were).
        std::fs::write(&path, b"two").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(std::time::UNIX_EPOCH))
            .unwrap();
        assert!(!opened(&path).was_checked());

        // Replaced by a rename, as the store does: another inode.
        let again = opened(&path);
        again.passed();
        let new = tmp.path().join("new");
        std::fs::write(&new, b"two").unwrap();
        std::fs::rename(&new, &path).unwrap();
        assert!(!opened(&path).was_checked());

        // A note of another boot, or torn.
        let note = tmp.path().join("objects.table.checked");
        let now = opened(&path);
        now.passed();
        let said = std::fs::read_to_string(&note).unwrap();
        std::fs::write(&note, said.replacen(boot_id().unwrap(), "another-boot", 1)).unwrap();
        assert!(!opened(&path).was_checked());
        std::fs::write(&note, &said[..said.len() / 2]).unwrap();
        assert!(!opened(&path).was_checked());
    }
}
