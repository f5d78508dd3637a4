//! A 10,000-deep directory chain planted in the project never aborts envgit nor blocks later
//! commands: `record`, `run`, `fork` and `rewind` work, with at most 256 open files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Command;

use rustix::fs::{AtFlags, Mode, OFlags};
use support::{Env, envgit_bin};

const DEPTH: usize = 10_000;

fn open_dir(dir: impl rustix::fd::AsFd, name: &std::ffi::CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn open_path(p: &Path) -> OwnedFd {
    open_dir(
        rustix::fs::CWD,
        &CString::new(p.as_os_str().as_encoded_bytes()).unwrap(),
    )
    .unwrap()
}

/// `root/d/d/…/d`, one descriptor at a time.
fn make_chain(root: &Path) {
    let mut cur = open_path(root);
    for _ in 0..DEPTH {
        rustix::fs::mkdirat(&cur, c"d", Mode::from_raw_mode(0o755)).unwrap();
        cur = open_dir(&cur, c"d").unwrap();
    }
}

fn chain_depth(root: &Path) -> usize {
    let mut cur = open_path(root);
    let mut n = 0;
    while let Ok(fd) = open_dir(&cur, c"d") {
        cur = fd;
        n += 1;
    }
    n
}

/// Bottom-up through `..` (std's remove_dir_all holds a descriptor per level).
fn remove_chain(root: &Path) {
    let mut cur = open_path(root);
    let mut depth = 0;
    while let Ok(fd) = open_dir(&cur, c"d") {
        cur = fd;
        depth += 1;
    }
    for _ in 0..depth {
        let parent = open_dir(&cur, c"..").unwrap();
        rustix::fs::unlinkat(&parent, c"d", AtFlags::REMOVEDIR).unwrap();
        cur = parent;
    }
}

/// `envgit ARGS` in `dir` with RLIMIT_NOFILE 256: (exit code, stdout, stderr).
fn envgit_256(env: &Env, dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" \"$@\"")
        .arg(envgit_bin())
        .args(args)
        .current_dir(dir)
        .env("ENVGIT_HOME", &env.home)
        .env("NO_COLOR", "1")
        .env("HOME", env.user_home())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_ten_thousand_deep_tree_never_aborts_envgit_nor_blocks_later_commands() {
    let env = Env::new();
    env.write("top.txt", "1\n");
    env.init();
    make_chain(&env.project);
    let project = env.project.clone();

    let t0 = std::time::Instant::now();
    let (code, out, err) = envgit_256(&env, &project, &["record", "--json"]);
    eprintln!("record of a {DEPTH}-deep chain: {:?}", t0.elapsed());
    assert_eq!(code, 0, "record failed:\n{out}\n{err}");
    let deep_step = serde_json::from_str::<serde_json::Value>(&out).unwrap()["number"]
        .as_u64()
        .unwrap();

    // A step over the chain says what it recorded as a marker.
    let (code, out, err) = envgit_256(&env, &project, &["run", "--", "true"]);
    assert_eq!(code, 0, "run failed:\n{out}\n{err}");
    assert!(err.contains("nested too deep to snapshot"), "{err}");

    env.write("top.txt", "2\n");
    let (code, out, err) = envgit_256(&env, &project, &["record", "--json"]);
    assert_eq!(code, 0, "the next record failed:\n{out}\n{err}");

    let forked = env.tmp.path().join("fork");
    let (code, out, err) = envgit_256(
        &env,
        &project,
        &["fork", &deep_step.to_string(), forked.to_str().unwrap()],
    );
    assert_eq!(code, 0, "fork failed:\n{out}\n{err}");
    assert_eq!(chain_depth(&forked), envgit_store::MAX_TREE_DEPTH);

    remove_chain(&project);
    let (code, out, err) = envgit_256(&env, &project, &["rewind", &deep_step.to_string()]);
    assert_eq!(code, 0, "rewind failed:\n{out}\n{err}");
    assert_eq!(chain_depth(&project), envgit_store::MAX_TREE_DEPTH);
    assert_eq!(env.read("top.txt"), "1\n");
    let (code, out, err) = envgit_256(&env, &project, &["fsck"]);
    assert_eq!(code, 0, "fsck failed:\n{out}\n{err}");

    remove_chain(&project);
    remove_chain(&forked);
}
