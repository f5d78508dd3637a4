//! The store's own guarantees: overlapping steps are flagged, a torn journal or pack tail is
//! ignored by readers and cut off by the next writer, objects are deduplicated.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use envgit_store::{ObjectKind, ScanConfig, StepDraft, StepFlag, Store, WorkTree};

#[macro_use]
mod support;
use support::backends::Backend;

fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("f"), "1").unwrap();
    let store = tmp.path().join("s");
    Store::create(&store, &root).unwrap();
    (tmp, root, store)
}

/// As [`setup`], the store's objects in `backend`, and the store opened.
fn setup_on(backend: Backend) -> (tempfile::TempDir, std::path::PathBuf, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("f"), "1").unwrap();
    let store = backend.create(&tmp.path().join("s"), &root);
    (tmp, root, store)
}

fn snapshot(store: &Store, root: &std::path::Path) -> envgit_store::ObjectId {
    let mut wt = WorkTree::new(root, ScanConfig::default(), None).unwrap();
    wt.full_scan(store, None).unwrap().0
}

#[test]
fn steps_open_at_the_same_time_are_flagged_overlapped() {
    let (_t, root, dir) = setup();
    let mut a = Store::open(&dir).unwrap();
    let mut b = Store::open(&dir).unwrap();
    let mut ga = a.begin_step("a").unwrap();
    let mut gb = b.begin_step("b").unwrap();
    let tree = snapshot(&b, &root);
    let sb = b.commit(&mut gb, StepDraft::default(), tree).unwrap();
    drop(gb);
    let tree = snapshot(&a, &root);
    let sa = a.commit(&mut ga, StepDraft::default(), tree).unwrap();
    assert_eq!((sb.number, sa.number), (1, 2));
    assert!(
        sb.has_flag(StepFlag::Overlapped),
        "b committed while a was open"
    );
    assert!(
        sa.has_flag(StepFlag::Overlapped),
        "a began before b committed"
    );
    drop(ga);
    // A step alone is not flagged.
    let mut g = a.begin_step("c").unwrap();
    let s = a.commit(&mut g, StepDraft::default(), tree).unwrap();
    assert!(!s.has_flag(StepFlag::Overlapped));
}

#[test]
fn a_torn_journal_tail_is_ignored_by_readers_and_cut_by_the_next_writer() {
    let (_t, root, dir) = setup();
    let mut s = Store::open(&dir).unwrap();
    let mut g = s.begin_step("x").unwrap();
    let tree = snapshot(&s, &root);
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    drop(g);
    let journal = dir.join("journal");
    let good_len = std::fs::metadata(&journal).unwrap().len();
    // A crash in the middle of the next commit: half a frame.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    f.write_all(&[0x31, 0x4a, 0x47, 0x45, 2, 200, 0, 0, 0, b'{'])
        .unwrap();
    drop(f);
    let reader = Store::open_steps_only(&dir).unwrap();
    assert_eq!(reader.step_count(), 1);
    let mut w = Store::open(&dir).unwrap();
    std::fs::write(root.join("f"), "2").unwrap();
    let mut g = w.begin_step("y").unwrap();
    let tree = snapshot(&w, &root);
    let step = w.commit(&mut g, StepDraft::default(), tree).unwrap();
    assert_eq!(step.number, 2);
    assert!(std::fs::metadata(&journal).unwrap().len() > good_len);
    let again = Store::open(&dir).unwrap();
    assert_eq!(again.step_count(), 2);
    assert!(envgit_store::fsck(&again, None).unwrap().is_clean());
}

#[test]
fn uncommitted_objects_are_invisible_and_their_pack_tail_is_reused() {
    let (_t, _root, dir) = setup();
    let id = {
        let s = Store::open(&dir).unwrap();
        // Written but never committed: like a writer killed before its step record.
        s.put(ObjectKind::Blob, b"orphan content").unwrap()
    };
    let s = Store::open(&dir).unwrap();
    assert!(!s.has(&id));
    let again = s.put(ObjectKind::Blob, b"orphan content").unwrap();
    assert_eq!(id, again);
    let packs: Vec<_> = std::fs::read_dir(dir.join("packs")).unwrap().collect();
    assert_eq!(
        packs.len(),
        1,
        "the crashed writer's pack was taken over, not left beside a new one"
    );
}

on_every_backend!(
    identical_content_is_stored_once,
    sparse_files_stay_sparse_through_fork_and_rewind
);

fn identical_content_is_stored_once(backend: Backend) {
    let (_t, root, mut s) = setup_on(backend);
    for i in 0..20 {
        std::fs::write(
            root.join(format!("copy{i}")),
            "same bytes in every file".repeat(100),
        )
        .unwrap();
    }
    let mut g = s.begin_step("x").unwrap();
    let tree = snapshot(&s, &root);
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    // root tree, "1" and one copy of the repeated content
    assert_eq!(s.object_count(), 3);
}

#[test]
fn a_large_file_edit_stores_a_small_delta() {
    let (_t, root, dir) = setup();
    let mut data: Vec<u8> = (0..24u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("big.bin"), &data).unwrap();
    let mut s = Store::open(&dir).unwrap();
    let mut g = s.begin_step("x").unwrap();
    let tree = snapshot(&s, &root);
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    drop(g);
    let before = s.disk_usage().unwrap();
    data[12 << 20] ^= 0xff;
    std::fs::write(root.join("big.bin"), &data).unwrap();
    let mut g = s.begin_step("y").unwrap();
    let tree = snapshot(&s, &root);
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    let growth = s.disk_usage().unwrap() - before;
    assert!(
        growth < 6 << 20,
        "a one-byte edit of a 24 MiB file stored {growth} bytes"
    );
    let content = {
        let t = s.read_tree(&tree).unwrap();
        s.read_file(&t.get(b"big.bin").unwrap().id).unwrap()
    };
    assert!(content == data);
}

/// Bytes a file really occupies on disk.
fn allocated(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

fn sparse_files_stay_sparse_through_fork_and_rewind(backend: Backend) {
    use std::os::unix::fs::FileExt;
    let (t, root, mut s) = setup_on(backend);
    const LEN: u64 = 96 << 20;
    let f = std::fs::File::create(root.join("sparse.img")).unwrap();
    f.set_len(LEN).unwrap();
    for (i, off) in [0u64, 7 << 20, 50 << 20, LEN - 3].into_iter().enumerate() {
        f.write_all_at(format!("data{i}").as_bytes(), off.min(LEN - 5))
            .unwrap();
    }
    drop(f);
    let src_blocks = allocated(&root.join("sparse.img"));
    let original = std::fs::read(root.join("sparse.img")).unwrap();
    let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    let (tree, _) = wt.full_scan(&s, None).unwrap();
    let mut g = s.begin_step("x").unwrap();
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    drop(g);

    let forked = t.path().join("fork");
    envgit_store::fork(
        &s,
        &forked,
        &t.path().join("fs"),
        &envgit_store::ForkOptions {
            step: 1,
            replace_root_file: None,
            policy_hash: None,
            clone_from: None,
        },
    )
    .unwrap();
    let fork_blocks = allocated(&forked.join("sparse.img"));
    eprintln!("sparse {LEN} bytes: source {src_blocks} allocated, fork {fork_blocks}");
    assert_eq!(std::fs::read(forked.join("sparse.img")).unwrap(), original);
    assert!(
        fork_blocks < 1 << 20,
        "fork wrote a {LEN}-byte sparse file dense: {fork_blocks} bytes allocated"
    );

    // Rewind writes it back sparse too (through a temporary file and a rename).
    std::fs::remove_file(root.join("sparse.img")).unwrap();
    let (tree2, _) = wt.full_scan(&s, None).unwrap();
    let mut g = s.begin_step("y").unwrap();
    s.commit(&mut g, StepDraft::default(), tree2).unwrap();
    drop(g);
    let opts = envgit_store::RewindOptions {
        target: 1,
        protected: &[],
        excludes: &envgit_store::Excludes::none(),
        policy_hash: None,
        known_changes: None,
    };
    let mut g = s.begin_step("rewind").unwrap();
    let start = envgit_store::rewind_start(&s, &mut wt, &g, &opts).unwrap();
    if let Some(draft) = start.record_first.clone() {
        s.commit(&mut g, draft, start.current).unwrap();
    }
    let done = envgit_store::rewind_apply(&s, &mut wt, start, &opts).unwrap();
    s.commit(&mut g, done.draft, done.tree).unwrap();
    drop(g);
    let rewound_blocks = allocated(&root.join("sparse.img"));
    eprintln!("rewound: {rewound_blocks} allocated");
    assert_eq!(std::fs::read(root.join("sparse.img")).unwrap(), original);
    assert!(
        rewound_blocks < 1 << 20,
        "rewind wrote a {LEN}-byte sparse file dense: {rewound_blocks} bytes allocated"
    );
}

/// Child role of the test below: begin a step, say so, and wait to be killed.
fn begin_and_hang(dir: &std::path::Path) -> ! {
    let s = Store::open(dir).unwrap();
    let mut g = s.begin_step("run: sh long.sh").unwrap();
    g.describe(&["sh".into(), "long.sh".into()], Some("sub"), None)
        .unwrap();
    g.keep_if_uncommitted();
    println!("BEGUN");
    std::io::stdout().flush().unwrap();
    let mut buf = [0u8; 1];
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut buf);
    std::process::exit(0)
}

#[test]
fn a_step_whose_process_is_killed_is_recorded_as_interrupted_at_the_next_open() {
    use std::io::BufRead;
    if let Some(dir) = std::env::var_os("ENVGIT_TEST_BEGIN_AND_HANG") {
        begin_and_hang(std::path::Path::new(&dir));
    }
    let (_t, root, dir) = setup();
    let mut s = Store::open(&dir).unwrap();
    let mut g = s.begin_step("x").unwrap();
    let tree = snapshot(&s, &root);
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    drop(g);

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_step_whose_process_is_killed_is_recorded_as_interrupted_at_the_next_open",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ENVGIT_TEST_BEGIN_AND_HANG", &dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("BEGUN")),
        "the child never began its step"
    );
    // While its owner lives the step is in flight, not interrupted.
    let live = Store::open(&dir).unwrap();
    assert_eq!(live.step_count(), 1);
    let in_flight = live.steps_in_flight(None).unwrap();
    assert!(
        in_flight.len() == 1 && in_flight[0].contains("run: sh long.sh"),
        "{in_flight:?}"
    );
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();

    // The next open, even a reader's, records it, once.
    let log = Store::open_steps_only(&dir).unwrap();
    let steps = log.steps().unwrap();
    assert_eq!(steps.len(), 2, "{steps:#?}");
    let i = &steps[1];
    assert_eq!(i.kind, envgit_store::StepKind::Interrupted);
    assert_eq!(i.kind.as_str(), "interrupted");
    assert_eq!((i.number, i.parent), (2, Some(1)));
    assert!(i.summary.contains("run: sh long.sh"), "{}", i.summary);
    assert_eq!(
        i.command,
        Some(vec!["sh".to_string(), "long.sh".to_string()])
    );
    assert_eq!(i.cwd.as_deref(), Some("sub"));
    assert_eq!(
        i.tree,
        Some(tree),
        "an interrupted step keeps the tree before it"
    );
    assert!(!i.has_flag(StepFlag::Overlapped));
    assert_eq!(Store::open(&dir).unwrap().step_count(), 2, "recorded twice");
    assert!(s.steps_in_flight(None).unwrap().is_empty());

    // Later steps carry on from it.
    let mut g = s.begin_step("y").unwrap();
    let step = s.commit(&mut g, StepDraft::default(), tree).unwrap();
    assert_eq!((step.number, step.parent), (3, Some(2)));
}

#[test]
fn a_step_given_up_after_its_command_started_is_interrupted_one_given_up_before_is_not() {
    let (_t, root, dir) = setup();
    let mut s = Store::open(&dir).unwrap();
    let mut g = s.begin_step("x").unwrap();
    let tree = snapshot(&s, &root);
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    // A session guard between steps: dropping it interrupts nothing.
    g.keep_if_uncommitted();
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    drop(g);
    // Refused before anything ran.
    drop(s.begin_step("refused").unwrap());
    assert_eq!(Store::open(&dir).unwrap().step_count(), 2);
    // The command ran, then the commit failed (say, a full disk).
    let mut g = s.begin_step("run: make").unwrap();
    g.keep_if_uncommitted();
    drop(g);
    let after = Store::open(&dir).unwrap();
    let kinds: Vec<&str> = after
        .steps()
        .unwrap()
        .iter()
        .map(|s| s.kind.as_str())
        .collect();
    assert_eq!(kinds, ["record", "record", "interrupted"]);
    assert!(after.steps().unwrap()[2].summary.contains("run: make"));
}

/// A sandboxed step whose owner died before its end owed the project the check of its nested
/// repositories: the next open makes it (a steps-only open hands it to a full one), but not
/// while another step is open, which could be writing there; the step is recorded once made.
#[test]
fn the_end_a_dead_sandboxed_step_owed_is_made_by_the_next_open_once_no_step_is_open() {
    let (_t, root, dir) = setup();
    let hooks = root.join("libs/foo/.git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(root.join("libs/foo/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let mut s = Store::open(&dir).unwrap();
    // The tree the step begins from is committed (the person's edits are a step of theirs).
    let before = snapshot(&s, &root);
    let mut record = s.begin_step("record").unwrap();
    s.commit(&mut record, StepDraft::default(), before).unwrap();
    drop(record);
    let mut g = s.begin_step("run: plant").unwrap();
    let owed = envgit_store::OwedEnd {
        before,
        exclude: Vec::new(),
        max_file_size: u64::MAX,
        below: envgit_store::BelowRoot::default(),
        excluded_before: None,
    };
    g.describe(&["sh".into()], None, Some(owed)).unwrap();
    g.keep_if_uncommitted();
    std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\necho planted\n").unwrap();
    drop(g); // its owner died: the marker stays, unlocked
    let planted = hooks.join("pre-commit");
    // Another step is open: nothing is made, nothing recorded yet.
    let live = s.begin_step("another").unwrap();
    let mut during = Store::open_steps_only(&dir).unwrap();
    assert!(during.take_recovery_warnings().is_empty());
    assert!(planted.exists(), "made while another step was open");
    assert_eq!(during.step_count(), 1);
    drop(live);
    // Now a steps-only open (`envgit log`) hands it to a full open, and says what it did.
    let mut after = Store::open_steps_only(&dir).unwrap();
    assert!(!planted.exists(), "the planted hook outlived the next open");
    let said = after.take_recovery_warnings().join("\n");
    assert!(said.contains("libs/foo/.git/hooks"), "{said}");
    let steps = after.steps().unwrap();
    let last = steps.last().unwrap();
    assert_eq!(last.kind.as_str(), "interrupted");
    assert!(
        last.flags.contains(&StepFlag::GitDropped),
        "{:?}",
        last.flags
    );
    assert!(
        last.refusals
            .iter()
            .any(|r| r.what.contains("libs/foo/.git/hooks")),
        "{:?}",
        last.refusals
    );
    // Made once: the next open has nothing more to say or record.
    let mut again = Store::open(&dir).unwrap();
    assert!(again.take_recovery_warnings().is_empty());
    assert_eq!(again.step_count(), after.step_count());
}
