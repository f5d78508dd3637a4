//! `envgit fork` takes the origin's files its stat index vouches for from the origin's working
//! tree instead of writing them from the store. On a filesystem with reflinks (XFS made with
//! `reflink=1`, on a loop device this test mounts) it clones them: the fork's files share
//! their extents with the origin's (`filefrag` says `shared`) and each side's later writes
//! stay its own. Without reflinks (ext4) it copies them in the kernel. Either way a file
//! edited after the step it forks is never taken with that edit, and a sparse file stays
//! sparse.
//!
//! The XFS test needs root, a loop device and `mkfs.xfs` (`.ci/run` installs xfsprogs); where
//! the machine cannot mount one the test says so and checks nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::Env;

/// An administration tool: from `/usr/sbin` when it is there (a `PATH` without it is common).
fn sbin(name: &str) -> PathBuf {
    let at = Path::new("/usr/sbin").join(name);
    if at.exists() { at } else { PathBuf::from(name) }
}

/// An XFS filesystem with reflinks, mounted for the test's life.
struct Xfs {
    mount: PathBuf,
}

impl Xfs {
    /// `None` (with the reason printed) where this machine cannot make and mount one.
    fn mount(dir: &Path) -> Option<Xfs> {
        let image = dir.join("xfs.img");
        let mount = dir.join("xfs");
        std::fs::create_dir_all(&mount).unwrap();
        // Sparse: the image costs only what is written into it.
        std::fs::File::create(&image)
            .unwrap()
            .set_len(512 << 20)
            .unwrap();
        let mkfs = Command::new(sbin("mkfs.xfs"))
            .args(["-q", "-m", "reflink=1"])
            .arg(&image)
            .output();
        match mkfs {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                eprintln!(
                    "skipped: mkfs.xfs failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                return None;
            }
            Err(e) => {
                eprintln!("skipped: no mkfs.xfs ({e}); apt-get install xfsprogs");
                return None;
            }
        }
        let mounted = Command::new(sbin("mount"))
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount)
            .output()
            .unwrap();
        if !mounted.status.success() {
            eprintln!(
                "skipped: cannot mount a loop device here: {}",
                String::from_utf8_lossy(&mounted.stderr)
            );
            return None;
        }
        Some(Xfs { mount })
    }
}

impl Drop for Xfs {
    fn drop(&mut self) {
        let _ = Command::new(sbin("umount")).arg(&self.mount).status();
    }
}

/// Whether every extent of `file` is shared with another file (`filefrag -v`).
fn shared(file: &Path) -> bool {
    let out = Command::new(sbin("filefrag"))
        .arg("-v")
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let extents: Vec<&str> = text.lines().filter(|l| l.contains("..")).collect();
    !extents.is_empty() && extents.iter().all(|l| l.contains("shared"))
}

/// 64 KiB that differ per `seed`.
fn content(seed: u8) -> Vec<u8> {
    (0..65_536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}

/// The fork holds step 1's `big.bin` and `src/edited.bin`, not the edit made after it.
fn assert_step_1_content(fork: &Path) {
    assert_eq!(std::fs::read(fork.join("big.bin")).unwrap(), content(1));
    assert_eq!(
        std::fs::read(fork.join("src/edited.bin")).unwrap(),
        content(2),
        "the fork took the edit made after step 1"
    );
}

#[test]
fn a_fork_on_xfs_shares_the_origins_extents_and_never_an_unrecorded_edit() {
    let env = Env::new();
    let Some(xfs) = Xfs::mount(env.tmp.path()) else {
        return;
    };
    let origin = xfs.mount.join("origin");
    std::fs::create_dir_all(origin.join("src")).unwrap();
    std::fs::write(origin.join("big.bin"), content(1)).unwrap();
    std::fs::write(origin.join("src/edited.bin"), content(2)).unwrap();
    std::fs::write(origin.join("src/small.txt"), "small\n").unwrap();
    // Past the racy-timestamp margin (50 ms on XFS): the scan's `lstat`s then vouch for the
    // content. A rule of the filesystem's clock, not a guess at the machine's speed.
    std::thread::sleep(Duration::from_millis(200));
    env.envgit_in(&origin, &["init"]).ok();

    // Edited after step 1 with the same size: its `lstat` no longer vouches for step 1.
    std::fs::write(origin.join("src/edited.bin"), content(3)).unwrap();

    let fork = xfs.mount.join("fork");
    let out = env.envgit_in(&origin, &["fork", "1", fork.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_step_1_content(&fork);
    assert_eq!(
        std::fs::read_to_string(fork.join("src/small.txt")).unwrap(),
        "small\n"
    );
    assert!(
        shared(&fork.join("big.bin")),
        "big.bin was written, not cloned"
    );
    assert!(!shared(&fork.join("src/edited.bin")));
    let log = env.envgit_in(&fork, &["log", "--json"]).ok().json();
    let notes = log[0]["notes"].to_string();
    assert!(notes.contains("share their data"), "{log}");

    // Copy on write: each side's writes stay its own.
    std::fs::write(origin.join("big.bin"), content(4)).unwrap();
    assert_eq!(std::fs::read(fork.join("big.bin")).unwrap(), content(1));
}

/// The filesystem type of `path`, as `stat -f` names it (`ext2/ext3` for ext4 too).
fn fs_type(path: &Path) -> String {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_fork_without_reflinks_copies_the_origins_files_never_an_unrecorded_edit() {
    let env = Env::new();
    let origin = env.project.clone();
    std::fs::create_dir_all(origin.join("src")).unwrap();
    std::fs::write(origin.join("big.bin"), content(1)).unwrap();
    std::fs::write(origin.join("src/edited.bin"), content(2)).unwrap();
    std::fs::write(origin.join("empty"), "").unwrap();
    // 1 MiB with 64 KiB of data in its middle: a hole each side.
    let sparse = std::fs::File::create(origin.join("sparse.img")).unwrap();
    sparse.set_len(1 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, &content(5), 512 << 10).unwrap();
    drop(sparse);
    // Past the racy-timestamp margin: the scan's `lstat`s then vouch for the content.
    std::thread::sleep(Duration::from_millis(200));
    env.envgit(&["init"]).ok();
    std::fs::write(origin.join("src/edited.bin"), content(3)).unwrap();

    let fork = env.tmp.path().join("fork");
    let out = env.envgit(&["fork", "1", fork.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_step_1_content(&fork);
    assert_eq!(std::fs::read(fork.join("empty")).unwrap(), b"");
    let img = std::fs::read(fork.join("sparse.img")).unwrap();
    assert_eq!(img.len(), 1 << 20);
    assert_eq!(&img[512 << 10..(512 << 10) + 65_536], &content(5)[..]);
    use std::os::unix::fs::MetadataExt;
    let blocks = std::fs::metadata(fork.join("sparse.img")).unwrap().blocks() * 512;
    assert!(
        blocks < 1 << 20,
        "sparse.img lost its holes: {blocks} bytes of blocks"
    );
    let log = env.envgit_in(&fork, &["log", "--json"]).ok().json();
    let notes = log[0]["notes"].to_string();
    let fs = fs_type(&fork);
    if fs == "ext2/ext3" {
        // big.bin and empty; edited.bin no longer vouched for, sparse.img written with holes.
        assert!(
            notes.contains("2 files were copied from the origin"),
            "{fs}: {log}"
        );
    } else {
        eprintln!("on {fs}: the fork's notes say {notes}");
    }
}
