//! mise trusts a directory by its path (`mise trust`: a link in its state directory's
//! `trusted-configs/` to the directory): every configuration it finds there is loaded at the
//! person's prompt in it, whatever that configuration says now. The project root's are
//! protected by name; a trusted directory deeper in the project (a monorepo's `packages/web`)
//! is read from mise's trust store, and its configuration protected the same way.

use std::path::{Path, PathBuf};

/// What mise trusts inside the project at `root`: directories, and configuration files an
/// older mise trusted one by one (project paths; the root itself is left out).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Trusted {
    pub dirs: Vec<String>,
    pub files: Vec<String>,
}

/// mise's state directory, as mise finds it: `MISE_STATE_DIR`, `$XDG_STATE_HOME/mise`, or
/// `~/.local/state/mise`.
fn state_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("MISE_STATE_DIR")
        .or_else(|| var("XDG_STATE_HOME").map(|x| x.join("mise")))
        .or_else(|| var("HOME").map(|h| h.join(".local/state/mise")))
}

/// What mise's trust store holds inside the project at `root`.
pub(super) fn inside(root: &Path) -> Trusted {
    let mut out = Trusted::default();
    let Some(store) = state_dir().map(|s| s.join("trusted-configs")) else {
        return out;
    };
    let Ok(list) = std::fs::read_dir(&store) else {
        return out;
    };
    for entry in list.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let target = if target.is_absolute() {
            target
        } else {
            store.join(target)
        };
        let Some(rel) = crate::project_path::of(root, &target) else {
            continue;
        };
        // As it is before the step: a directory, or a file mise trusted by its name.
        let to = match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => &mut out.dirs,
            _ => &mut out.files,
        };
        if !to.contains(&rel) {
            to.push(rel);
        }
    }
    out
}
