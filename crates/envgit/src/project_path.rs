//! A host path as a path of the project: '/'-separated, relative to its root.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// `path` (absolute) as a project path, `..` applied by name as a shell or git reads it; when
/// that is outside the project, with its directory's links resolved (`/home/me/work ->
/// /data/work`: the file itself may not exist yet, and a link at its name is protected as a
/// link). `None` outside the project, or for the root itself.
pub(crate) fn of(root: &Path, path: &Path) -> Option<String> {
    let normal = normalize(path)?;
    if let Some(rel) = relative(root, &normal) {
        return Some(rel);
    }
    let dir = normal.parent()?.canonicalize().ok()?;
    relative(root, &dir.join(normal.file_name()?))
}

/// Whether the project path `path` is `top` or lies below it.
pub(crate) fn is_at_or_below(path: &str, top: &str) -> bool {
    path.strip_prefix(top)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The words of a command line that name files by path: its program (`./tools/st.sh`) and
/// the scripts it is given (`sh tools/st.sh`, `node scripts/x.js`); not an option, not a URL,
/// not a bare name (found on `PATH`, which other checks cover). Quotes around a word go; a
/// shell's `!`, `|` and `;` before or after one too.
pub(crate) fn path_words(command: &str) -> Vec<&str> {
    command
        .split_whitespace()
        .map(|w| w.trim_matches(['"', '\'', '!', '|', ';', '(', ')']))
        .filter(|w| w.contains('/') && !w.starts_with('-') && !w.contains("://"))
        .collect()
}

/// `path` without `.` and with `..` applied by name; `None` past `/`.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?.as_os_str();
    if rel.is_empty() {
        return None;
    }
    String::from_utf8(rel.as_bytes().to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paths_of_a_command_line() {
        assert_eq!(
            path_words("!sh ./tools/st.sh --flag=a/b -x https://h/p \"scripts/q.py\";"),
            ["./tools/st.sh", "scripts/q.py"]
        );
        assert_eq!(path_words("|/p/lesspipe %s"), ["/p/lesspipe"]);
        assert!(path_words("less -R").is_empty());
    }

    #[test]
    fn paths_inside_the_project_only() {
        let root = Path::new("/p/proj");
        let of = |p: &str| of(root, Path::new(p));
        assert_eq!(of("/p/proj/a/./b").as_deref(), Some("a/b"));
        assert_eq!(of("/p/x/../proj/tools/../c").as_deref(), Some("c"));
        assert_eq!(of("/p/proj"), None);
        assert_eq!(of("/p/proj/../x"), None);
        assert_eq!(of("/p/project-other/x"), None);
        assert_eq!(of("/../../p/proj/a").as_deref(), None);
    }
}
