//! Files a crash leaves in the store's directory: a store file is written under a temporary
//! name and renamed into place (`.tmp-…` by `write_file_atomic`, `stat.tmp-…` for the stat
//! index, up to 12 MB at 100,000 files, `listing.tmp-…` for the sandbox's listing cache). A
//! process killed between the write and the rename leaves its temporary behind, and nothing
//! else would ever remove it.

use std::path::Path;
use std::time::{Duration, SystemTime};

/// A temporary this old is no writer's any more: a writer renames within seconds.
const STALE_AFTER: Duration = Duration::from_secs(3600);

/// Whether `name` is one of the store's temporary names.
fn is_temporary(name: &[u8]) -> bool {
    name.starts_with(b".tmp-")
        || [b"stat.tmp-".as_slice(), b"listing.tmp-".as_slice()]
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// Remove the stale temporaries directly in `store_dir` (regular files only, never through a
/// link). Best effort: a temporary that cannot be removed now is tried at the next open.
pub(crate) fn sweep(store_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(store_dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !is_temporary(name.as_encoded_bytes()) {
            continue;
        }
        // `DirEntry::metadata` does not follow a link.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let stale = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= STALE_AFTER);
        if meta.file_type().is_file() && stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn aged(path: &Path, age: Duration) {
        std::fs::write(path, b"half written").unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(SystemTime::now() - age)
            .unwrap();
    }

    #[test]
    fn only_old_temporaries_go() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&store).unwrap();
        std::fs::create_dir(&outside).unwrap();
        let old = STALE_AFTER + Duration::from_secs(60);
        for name in [
            ".tmp-00000000deadbeef",
            "stat.tmp-0123456789abcdef",
            "listing.tmp-42",
        ] {
            aged(&store.join(name), old);
        }
        // A writer's, still being written; and the store's own files, however old.
        aged(&store.join(".tmp-fresh"), Duration::from_secs(5));
        aged(&store.join("stat.cache"), old);
        aged(&store.join("journal"), old);
        // A link with a temporary's name is not followed, nor is its target touched.
        aged(&outside.join("keep"), old);
        std::os::unix::fs::symlink(outside.join("keep"), store.join(".tmp-link")).unwrap();

        sweep(&store);

        let mut left: Vec<String> = std::fs::read_dir(&store)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".tmp-fresh", ".tmp-link", "journal", "stat.cache"]);
        assert!(outside.join("keep").exists());
    }

    #[test]
    fn opening_the_store_sweeps() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("s");
        drop(crate::store::Store::create(&dir, tmp.path()).unwrap());
        aged(&dir.join("stat.tmp-0123456789abcdef"), STALE_AFTER * 2);
        drop(crate::store::Store::open(&dir).unwrap());
        assert!(!dir.join("stat.tmp-0123456789abcdef").exists());
    }
}
