//! Restores between hand-made trees in real directories: entries that change kind, modes,
//! empty directories, sparse content, files nobody recorded, and a link planted after the
//! tree was read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::*;
use crate::id::ObjectKind;

struct Fixture {
    tmp: tempfile::TempDir,
    store: Store,
    root: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir(&root).unwrap();
    let store = Store::create(&tmp.path().join("s"), &root).unwrap();
    Fixture { tmp, store, root }
}

/// What a tree entry is, for building trees by hand.
enum Node<'a> {
    File(&'a [u8], u32),
    Link(&'a str),
    Dir(u32, Vec<(&'a str, Node<'a>)>),
    /// A socket, fifo or device node: a marker.
    Special,
}

fn put(store: &Store, node: &Node<'_>) -> (EntryKind, u32, u64, ObjectId) {
    match node {
        Node::File(content, mode) => (
            EntryKind::File,
            *mode,
            content.len() as u64,
            store.put(ObjectKind::Blob, content).unwrap(),
        ),
        Node::Link(to) => (
            EntryKind::Symlink,
            0,
            to.len() as u64,
            store.put(ObjectKind::Blob, to.as_bytes()).unwrap(),
        ),
        Node::Dir(mode, children) => (EntryKind::Dir, *mode, 0, tree(store, children)),
        Node::Special => (
            EntryKind::Marker(MarkerReason::Special),
            0,
            0,
            store.put(ObjectKind::Blob, b"").unwrap(),
        ),
    }
}

fn tree(store: &Store, children: &[(&str, Node<'_>)]) -> ObjectId {
    let mut entries: Vec<TreeEntry> = children
        .iter()
        .map(|(name, node)| {
            let (kind, mode, size, id) = put(store, node);
            TreeEntry {
                name: name.as_bytes().to_vec(),
                kind,
                mode,
                size,
                id,
            }
        })
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    store.put_tree(&Tree { entries }, None).unwrap()
}

fn run(f: &Fixture, current: Option<&ObjectId>, target: &ObjectId) -> Result<RestoreReport> {
    let excludes = Excludes::none();
    let opts = RestoreOptions {
        excludes: &excludes,
        protected: &[],
        clone_from: None,
    };
    let root = File::open(&f.root).unwrap();
    restore(&f.store, root.as_fd(), current, target, &opts)
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn entries_that_change_kind_modes_empty_dirs_and_links_are_restored() {
    let f = fixture();
    let current = tree(
        &f.store,
        &[
            ("a", Node::File(b"A", 0o644)),
            ("b", Node::Dir(0o755, vec![("x", Node::File(b"X", 0o644))])),
            ("keep", Node::File(b"K", 0o644)),
            ("m", Node::File(b"M", 0o644)),
            ("was_link", Node::Link("a")),
        ],
    );
    let target = tree(
        &f.store,
        &[
            ("a", Node::Dir(0o711, vec![("y", Node::File(b"Y", 0o600))])),
            ("b", Node::File(b"B", 0o755)),
            ("e", Node::Dir(0o750, vec![])),
            ("keep", Node::File(b"K", 0o644)),
            ("l", Node::Link("../outside")),
            ("m", Node::File(b"M", 0o700)),
            ("was_link", Node::Dir(0o755, vec![])),
        ],
    );
    run(&f, None, &current).unwrap();
    let r = &f.root;
    let keep_ino = std::fs::metadata(r.join("keep")).unwrap().ino();
    let m_ino = std::fs::metadata(r.join("m")).unwrap().ino();

    let report = run(&f, Some(&current), &target).unwrap();
    assert!(std::fs::symlink_metadata(r.join("a")).unwrap().is_dir());
    assert_eq!(mode(&r.join("a")), 0o711);
    assert_eq!(std::fs::read(r.join("a/y")).unwrap(), b"Y");
    assert_eq!(mode(&r.join("a/y")), 0o600);
    assert!(std::fs::symlink_metadata(r.join("b")).unwrap().is_file());
    assert_eq!(std::fs::read(r.join("b")).unwrap(), b"B");
    assert_eq!(mode(&r.join("b")), 0o755);
    assert_eq!(std::fs::read_dir(r.join("e")).unwrap().count(), 0);
    assert_eq!(mode(&r.join("e")), 0o750);
    assert_eq!(
        std::fs::read_link(r.join("l")).unwrap(),
        Path::new("../outside")
    );
    assert!(
        std::fs::symlink_metadata(r.join("was_link"))
            .unwrap()
            .is_dir()
    );
    // Same content: only the mode changes, the file is not rewritten.
    assert_eq!(mode(&r.join("m")), 0o700);
    assert_eq!(std::fs::metadata(r.join("m")).unwrap().ino(), m_ino);
    assert_eq!(std::fs::metadata(r.join("keep")).unwrap().ino(), keep_ino);
    // No temporary names left behind.
    let names: Vec<String> = std::fs::read_dir(r)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".envgit-tmp")),
        "{names:?}"
    );
    assert!(report.written >= 5, "{report:?}");

    // And back again.
    run(&f, Some(&target), &current).unwrap();
    assert_eq!(std::fs::read(r.join("a")).unwrap(), b"A");
    assert_eq!(std::fs::read(r.join("b/x")).unwrap(), b"X");
    assert!(!r.join("e").exists());
    assert!(std::fs::symlink_metadata(r.join("l")).is_err());
    assert_eq!(mode(&r.join("m")), 0o644);
    assert_eq!(
        std::fs::read_link(r.join("was_link")).unwrap(),
        Path::new("a")
    );
}

#[test]
fn files_no_tree_knows_of_are_left_alone() {
    let f = fixture();
    let current = tree(
        &f.store,
        &[(
            "d",
            Node::Dir(0o755, vec![("x", Node::File(b"old", 0o644))]),
        )],
    );
    let target = tree(
        &f.store,
        &[(
            "d",
            Node::Dir(0o755, vec![("x", Node::File(b"new", 0o644))]),
        )],
    );
    run(&f, None, &current).unwrap();
    std::fs::write(f.root.join("untracked"), "mine").unwrap();
    std::fs::write(f.root.join("d/untracked"), "mine too").unwrap();
    run(&f, Some(&current), &target).unwrap();
    assert_eq!(std::fs::read(f.root.join("d/x")).unwrap(), b"new");
    assert_eq!(std::fs::read(f.root.join("untracked")).unwrap(), b"mine");
    assert_eq!(
        std::fs::read(f.root.join("d/untracked")).unwrap(),
        b"mine too"
    );
}

/// A fifo the step put where the target holds a file (`.gitattributes`, which the person's git
/// would block reading) or nothing is removed and the file written back; a socket, which a
/// live service may be bound to, stays.
#[test]
fn a_fifo_the_target_does_not_hold_goes_and_a_socket_stays() {
    let f = fixture();
    let target = tree(
        &f.store,
        &[(".gitattributes", Node::File(b"* text\n", 0o644))],
    );
    let current = tree(
        &f.store,
        &[
            (".gitattributes", Node::Special),
            ("pipe", Node::Special),
            ("sock", Node::Special),
        ],
    );
    run(&f, None, &target).unwrap();
    std::fs::remove_file(f.root.join(".gitattributes")).unwrap();
    for fifo in [".gitattributes", "pipe"] {
        let path = std::ffi::CString::new(f.root.join(fifo).into_os_string().into_encoded_bytes())
            .unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    }
    let _listener = std::os::unix::net::UnixListener::bind(f.root.join("sock")).unwrap();
    let report = run(&f, Some(&current), &target).unwrap();
    // Looked at before it is read: a fifo left there would block the read.
    assert!(
        std::fs::symlink_metadata(f.root.join(".gitattributes"))
            .unwrap()
            .is_file()
    );
    assert_eq!(
        std::fs::read(f.root.join(".gitattributes")).unwrap(),
        b"* text\n"
    );
    assert!(!f.root.join("pipe").exists());
    assert!(
        std::fs::symlink_metadata(f.root.join("sock"))
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert!(
        report.not_restored.iter().any(|n| n.path == "sock"),
        "{:?}",
        report.not_restored
    );
}

#[test]
fn a_fresh_restore_never_overwrites_a_file_already_there() {
    let f = fixture();
    let target = tree(&f.store, &[("x", Node::File(b"from the snapshot", 0o644))]);
    std::fs::write(f.root.join("x"), "already here").unwrap();
    assert!(run(&f, None, &target).is_err());
    assert_eq!(std::fs::read(f.root.join("x")).unwrap(), b"already here");

    // Nor writes through a link already there.
    let outside = f.tmp.path().join("outside");
    std::fs::remove_file(f.root.join("x")).unwrap();
    std::os::unix::fs::symlink(&outside, f.root.join("x")).unwrap();
    assert!(run(&f, None, &target).is_err());
    assert!(!outside.exists());
}

#[test]
fn a_link_planted_after_the_tree_was_read_is_never_written_through() {
    let f = fixture();
    let current = tree(
        &f.store,
        &[(
            "d",
            Node::Dir(0o755, vec![("x", Node::File(b"old", 0o644))]),
        )],
    );
    let target = tree(
        &f.store,
        &[(
            "d",
            Node::Dir(
                0o755,
                vec![
                    ("new", Node::File(b"new", 0o644)),
                    ("x", Node::File(b"changed", 0o644)),
                ],
            ),
        )],
    );
    run(&f, None, &current).unwrap();
    // The scan said `d` is a directory; by the time of the restore it is a link outside.
    let outside = f.tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("x"), "the host's").unwrap();
    std::fs::remove_dir_all(f.root.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, f.root.join("d")).unwrap();

    assert!(run(&f, Some(&current), &target).is_err());
    assert_eq!(std::fs::read(outside.join("x")).unwrap(), b"the host's");
    assert!(!outside.join("new").exists());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
}

#[test]
fn sparse_writes_skip_zero_blocks_and_keep_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse");
    let file = File::create(&path).unwrap();
    // Data at the start, a megabyte of zeros, data across a block boundary, zeros at the end;
    // written in pieces that do not start on block boundaries.
    let mut content = vec![7u8; 100];
    content.resize(100 + (1 << 20), 0);
    content.extend(vec![9u8; 5000]);
    content.resize(content.len() + 3 * HOLE_BLOCK + 17, 0);
    let mut pos = 0u64;
    let mut written_end = 0;
    for piece in content.chunks(3001) {
        if let Some(end) = write_sparse(&file, pos, piece).unwrap() {
            written_end = end;
        }
        pos += piece.len() as u64;
    }
    assert!(written_end < pos, "trailing zeros are not written");
    file.set_len(pos).unwrap();
    drop(file);
    assert_eq!(std::fs::read(&path).unwrap(), content);
    let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
    assert!(
        allocated < 64 << 10,
        "{allocated} bytes allocated for {} bytes of data",
        100 + 5000
    );
}
