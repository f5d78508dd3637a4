//! `PYTHONPATH`: its directories come before Python's own library in every Python program
//! the person runs, so a module there named like one of the library's (`json.py`, a package
//! `email/`) is imported instead of it, by `pip` and every Python tool as much as by the
//! project's code. What counts as the same module is the name Python imports it by.

use std::path::{Path, PathBuf};

use super::python_stdlib::STDLIB;

/// Library modules no tool imports, whose names projects use for their own (`test/`, a
/// `test.py`): never taken for a shadow.
const NEVER_IMPORTED: &[&[u8]] = &[
    b"test",
    b"this",
    b"antigravity",
    b"idlelib",
    b"turtledemo",
    b"__hello__",
    b"__phello__",
];

/// The module a file of a search directory is imported as: `json.py`, `json.pyc` and the
/// extension modules `json.so`, `json.cpython-311-x86_64-linux-gnu.so`, `json.abi3.so` are
/// all `json`; a directory is the package of its name. `None` for what Python never imports.
pub(super) fn module_of(name: &[u8], dir: bool) -> Option<&[u8]> {
    let identifier = |s: &[u8]| {
        s.first()
            .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
            && s.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
    };
    let module = if dir {
        name
    } else {
        let dot = name.iter().position(|&c| c == b'.')?;
        let ext = &name[dot + 1..];
        let imported = ext == b"py" || ext == b"pyc" || ext == b"so" || ext.ends_with(b".so");
        if !imported {
            return None;
        }
        &name[..dot]
    };
    (identifier(module) && !NEVER_IMPORTED.contains(&module)).then_some(module)
}

/// The modules Python's `site` imports at the start of every program, from the first
/// directory of its path that has one: a `PYTHONPATH` directory's comes first whatever the
/// host has.
const START_UP_HOOKS: &[&str] = &["sitecustomize", "usercustomize"];

/// The modules every host Python has, wherever its library lies: the standard library's, and
/// the start-up hooks it looks for.
pub(super) fn always_on_host() -> impl Iterator<Item = &'static [u8]> {
    STDLIB
        .iter()
        .chain(START_UP_HOOKS)
        .filter_map(|m| module_of(m.as_bytes(), true))
}

/// What the module `name` stands for on every host, when no directory showed it: the
/// standard library's, or a start-up hook.
pub(super) fn on_every_host(name: &[u8]) -> Option<String> {
    let shown = String::from_utf8_lossy(name);
    if START_UP_HOOKS.iter().any(|m| m.as_bytes() == name) {
        return Some(format!("Python's start-up hook {shown}"));
    }
    STDLIB
        .iter()
        .any(|m| m.as_bytes() == name)
        .then(|| format!("the standard library's {shown}"))
}

/// The host's Python libraries that come after `PYTHONPATH`: each installed Python's own
/// (`lib/python3.X`, its `lib-dynload` and `site-packages`), Debian's `dist-packages`, and the
/// person's `~/.local` ones. The Pythons are those of the system, and those the host's `PATH`
/// finds (a virtualenv's leads to the Python it was made from).
pub(super) fn host_dirs(path_dirs: &[PathBuf], home: Option<&Path>) -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = vec!["/usr".into(), "/usr/local".into()];
    super::search::add_prefixes_on_path(&mut prefixes, path_dirs, &["python3", "python"]);
    let mut dirs = Vec::new();
    for prefix in &prefixes {
        for lib in versioned(&prefix.join("lib")) {
            dirs.push(lib.join("site-packages"));
            dirs.push(lib.join("dist-packages"));
            dirs.push(lib.join("lib-dynload"));
            dirs.push(lib);
        }
    }
    dirs.push("/usr/lib/python3/dist-packages".into());
    if let Some(home) = home {
        for lib in versioned(&home.join(".local/lib")) {
            dirs.push(lib.join("site-packages"));
        }
    }
    dirs.retain(|d| d.is_dir());
    dirs
}

/// The `python3.X` directories of `lib`.
fn versioned(lib: &Path) -> Vec<PathBuf> {
    let Ok(list) = std::fs::read_dir(lib) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = list
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("python3"))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_packages_are_known_by_the_module_they_import_as() {
        for (name, dir, module) in [
            ("json.py", false, Some("json")),
            ("json.pyc", false, Some("json")),
            (
                "_json.cpython-311-x86_64-linux-gnu.so",
                false,
                Some("_json"),
            ),
            ("yaml.abi3.so", false, Some("yaml")),
            ("email", true, Some("email")),
            ("README.md", false, None),
            ("json.py.bak", false, None),
            ("my-tool.py", false, None),
            ("build.d", true, None),
            ("test", true, None),
            ("test.py", false, None),
        ] {
            let got = module_of(name.as_bytes(), dir).map(|m| String::from_utf8_lossy(m));
            assert_eq!(got.as_deref(), module, "{name}");
        }
        assert!(on_every_host(b"json").is_some() && on_every_host(b"subprocess").is_some());
        assert!(on_every_host(b"sitecustomize").is_some() && on_every_host(b"requests").is_none());
    }
}
