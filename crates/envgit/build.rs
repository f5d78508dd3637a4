//! Names the commit the binary was built from in `envgit --version` (`ENVGIT_VERSION`):
//! `0.1.0 (3f2a9c1d07be 2026-11-29)` from a git checkout of the envgit repository, plain
//! `0.1.0` where there is none (a crates.io tarball, a source archive, no git installed), and
//! links the unwinder statically (`static_unwinder.rs`).

mod static_unwinder;

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}

/// The commit as `HASH DATE`, when this crate is `crates/envgit` of the checkout git finds (not
/// some other repository the sources happen to be unpacked in).
fn commit(manifest_dir: &Path) -> Option<String> {
    let top = PathBuf::from(git(manifest_dir, &["rev-parse", "--show-toplevel"])?);
    let ours = top.join("crates/envgit").canonicalize().ok()?;
    if manifest_dir.canonicalize().ok()? != ours {
        return None;
    }
    // Rebuild when HEAD moves: HEAD itself (a branch switch), the branch's loose ref (a
    // commit) and packed-refs. Only files that exist: cargo reruns for a missing one every time.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(manifest_dir, &["rev-parse", "--git-path", &name]) {
            let path = manifest_dir.join(path);
            if path.is_file() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    git(
        manifest_dir,
        &[
            "log",
            "-1",
            "--no-show-signature",
            "--format=%h %cs",
            "--abbrev=12",
        ],
    )
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=static_unwinder.rs");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let full = match std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .and_then(|d| commit(&d))
    {
        Some(c) => format!("{version} ({c})"),
        None => version,
    };
    println!("cargo:rustc-env=ENVGIT_VERSION={full}");
    if let Some(out_dir) = std::env::var_os("OUT_DIR") {
        static_unwinder::link(Path::new(&out_dir));
    }
}
