//! Directories git takes for a repository with no `.git` in them. git's discovery looks in
//! each directory from where it starts up to the root for a `.git`, and then at whether the
//! directory itself is one: `HEAD` with `objects/` and `refs/` (a bare repository), or `HEAD`
//! with `commondir` (a worktree's). With `safe.bareRepository` at its default (`all`), a
//! step that writes that layout and a `config` naming a `core.fsmonitor` into a directory of
//! the project makes it the repository of every git run below it, on the host too. Whoever
//! checks a step (from its snapshot, or on disk when there is none) asks these.

use crate::tree::EntryKind;

/// The entries whose change can make a directory a repository: [`MAKING_ENTRIES`] go back
/// when a plain directory became one.
pub const LAYOUT_ENTRIES: &[&str] = &["HEAD", "commondir", "objects", "refs"];
/// What, put back, makes such a directory plain again.
pub const MAKING_ENTRIES: &[&str] = &["HEAD", "commondir"];
/// What git runs or follows in a repository's directory: put back (the `config` through the
/// allow-list where there is a snapshot to filter against, whole where there is none).
pub const CODE_ENTRIES: &[&str] = &["hooks", "info", "commondir"];
/// A repository's configuration.
pub const CONFIG_ENTRY: &str = "config";

/// Whether git takes a directory for a repository, from the kind of each of its entries
/// (`kind("HEAD")`; `None` when absent); any `HEAD` counts (git also reads it).
pub fn is_git_directory(kind: impl Fn(&str) -> Option<EntryKind>) -> bool {
    let head = matches!(kind("HEAD"), Some(EntryKind::File | EntryKind::Symlink));
    let common = matches!(kind("commondir"), Some(EntryKind::File));
    let own = kind("objects") == Some(EntryKind::Dir) && kind("refs") == Some(EntryKind::Dir);
    head && (common || own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_layout_or_a_worktrees_makes_a_repository() {
        let of = |entries: &'static [(&'static str, EntryKind)]| {
            move |name: &str| entries.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
        };
        use EntryKind::{Dir, File, Symlink};
        assert!(is_git_directory(of(&[
            ("HEAD", File),
            ("objects", Dir),
            ("refs", Dir)
        ])));
        assert!(is_git_directory(of(&[
            ("HEAD", Symlink),
            ("objects", Dir),
            ("refs", Dir)
        ])));
        assert!(is_git_directory(of(&[("HEAD", File), ("commondir", File)])));
        assert!(!is_git_directory(of(&[("objects", Dir), ("refs", Dir)])));
        assert!(!is_git_directory(of(&[("HEAD", File), ("objects", Dir)])));
        assert!(!is_git_directory(of(&[
            ("HEAD", Dir),
            ("objects", Dir),
            ("refs", Dir)
        ])));
        assert!(!is_git_directory(of(&[
            ("HEAD", File),
            ("objects", File),
            ("refs", Dir)
        ])));
    }
}
