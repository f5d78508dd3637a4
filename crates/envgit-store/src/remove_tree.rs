//! Removing a directory envgit made, whatever modes were left inside it.
//!
//! overlayfs makes its work directory (`work/work`) with mode 0, and an agent may leave
//! read-only directories in what it wrote (a git layer's upper). Root's override lets a plain
//! recursive removal into them; anyone else's removal stops at the first, and leaves the whole
//! tree behind (a person's `envgit doctor` left its temporary store in `TMPDIR` at every run).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Removes `dir` and everything in it, making the directories inside enterable first when a
/// plain removal fails. Never follows a link: `dir` itself is removed as a link if it is one,
/// and only entries a listing says are directories are made writable.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    let first = match std::fs::remove_dir_all(dir) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(first),
        };
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    std::fs::remove_dir_all(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_with_a_directory_of_mode_0_goes_and_a_link_out_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o500)).unwrap();
        let dir = t.path().join("made");
        std::fs::create_dir_all(dir.join("work/work")).unwrap();
        std::fs::write(dir.join("work/file"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("link")).unwrap();
        std::fs::set_permissions(
            dir.join("work/work"),
            std::fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        std::fs::set_permissions(dir.join("work"), std::fs::Permissions::from_mode(0o500)).unwrap();
        // As a user who is not root: root's override would let the first plain removal through.
        // Capabilities are each thread's own, so this thread's are dropped.
        std::thread::spawn(move || {
            let none = rustix::thread::CapabilitySet::empty();
            rustix::thread::set_capabilities(
                None,
                rustix::thread::CapabilitySets {
                    effective: none,
                    permitted: none,
                    inheritable: none,
                },
            )
            .unwrap();
            assert!(
                std::fs::remove_dir_all(&dir).is_err(),
                "the plain removal got in"
            );
            remove_tree(&dir).unwrap();
            assert!(!dir.exists());
            // Gone already: nothing to do.
            remove_tree(&dir).unwrap();
        })
        .join()
        .unwrap();
        let mode = std::fs::metadata(&outside).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o500, "the link's target was changed");
        assert!(outside.join("sub").is_dir());
    }
}
