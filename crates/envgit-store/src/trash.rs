//! Directories a run is done with (its protected copy, its git layer, a home upper of its own):
//! moved aside into the store's `trash/` with one rename, removed later by [`empty`], off the
//! step's path.
//!
//! Removing them cost a step 1.1–1.6 ms of ext4 work after its command (measured with
//! `ENVGIT_TIMINGS`), on two threads beside the stat index's save, and the step waited for it.
//! A rename costs tens of microseconds, and a later step empties the trash on a thread of its
//! own while its sandbox runs. Nothing reads the trash: a directory is moved there only once
//! its owner is done with it, so it is never recovered, and a run killed while emptying it
//! leaves the rest for the next.

use std::path::{Path, PathBuf};

use crate::remove_tree::remove_tree;

fn trash_dir(store_dir: &Path) -> PathBuf {
    store_dir.join("trash")
}

/// Moves `dir`, a directory `<store>/<kind>/<name>` nobody will use again, into the trash
/// (as `<kind>-<name>`: names are unique within a kind). Falls back to removing it here.
pub fn discard(dir: &Path) {
    let (Some(name), Some(kind), Some(store_dir)) = (
        dir.file_name(),
        dir.parent().and_then(Path::file_name),
        dir.parent().and_then(Path::parent),
    ) else {
        let _ = remove_tree(dir);
        return;
    };
    let trash = trash_dir(store_dir);
    let mut entry = kind.to_os_string();
    entry.push("-");
    entry.push(name);
    let to = trash.join(entry);
    let moved = std::fs::rename(dir, &to).or_else(|e| {
        // The first discard of this store makes the trash.
        if e.kind() != std::io::ErrorKind::NotFound || !dir.exists() {
            return Err(e);
        }
        std::fs::create_dir_all(&trash)?;
        std::fs::rename(dir, &to)
    });
    if moved.is_err() {
        let _ = remove_tree(dir);
    }
}

/// Removes everything in the store's trash. Best effort: what cannot be removed now (another
/// process is removing it, a permission) is tried again by the next caller.
pub fn empty(store_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(trash_dir(store_dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let _ = remove_tree(&entry.path());
    }
}

/// Entries past which [`empty_in_background`] empties the trash itself: the threads of earlier
/// runs did not keep up (each ends with its process), and the trash must not grow for ever.
const MOST_LEFT: usize = 16;

/// [`empty`] on a thread nobody waits for: for a caller that is about to wait anyway (for its
/// sandbox), on a machine where that leaves a core idle. A trash of more than [`MOST_LEFT`]
/// entries is emptied before this returns.
pub fn empty_in_background(store_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(trash_dir(store_dir)) else {
        return;
    };
    match entries.take(MOST_LEFT + 1).count() {
        0 => {}
        n if n > MOST_LEFT => empty(store_dir),
        _ => {
            let store_dir = store_dir.to_path_buf();
            let spawned = std::thread::Builder::new()
                .name("envgit-trash".into())
                .spawn(move || empty(&store_dir));
            drop(spawned);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_discarded_directory_leaves_its_kind_at_once_and_the_store_once_emptied() {
        let t = tempfile::tempdir().unwrap();
        let store = t.path();
        let dir = store.join("gitlayer/12-ab");
        std::fs::create_dir_all(dir.join("work/work")).unwrap();
        std::fs::write(dir.join("lock"), "").unwrap();
        // As overlayfs leaves it.
        std::fs::set_permissions(
            dir.join("work/work"),
            std::fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        discard(&dir);
        assert!(!dir.exists());
        assert!(store.join("trash/gitlayer-12-ab/lock").exists());
        empty(store);
        assert_eq!(std::fs::read_dir(store.join("trash")).unwrap().count(), 0);
    }

    #[test]
    fn a_trash_the_background_did_not_keep_up_with_is_emptied_in_the_foreground() {
        let t = tempfile::tempdir().unwrap();
        let store = t.path();
        for i in 0..=MOST_LEFT {
            let dir = store.join(format!("guard/{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            discard(&dir);
        }
        empty_in_background(store);
        assert_eq!(std::fs::read_dir(store.join("trash")).unwrap().count(), 0);
    }

    #[test]
    fn emptying_never_follows_a_link_out_of_the_trash() {
        let t = tempfile::tempdir().unwrap();
        let store = t.path().join("store");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        std::fs::write(outside.join("sub/keep"), "x").unwrap();
        let dir = store.join("guard/1");
        std::fs::create_dir_all(dir.join("upper")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("upper/link")).unwrap();
        std::fs::set_permissions(dir.join("upper"), std::fs::Permissions::from_mode(0o500))
            .unwrap();
        discard(&dir);
        empty(&store);
        assert!(outside.join("sub/keep").exists());
        assert_eq!(std::fs::read_dir(store.join("trash")).unwrap().count(), 0);
    }
}
