//! A damaged journal or pack, in the manner of jj's `test_bad_locking.rs`: real stores on
//! disk, damaged byte by byte the way a crash, a full disk or a bad sector would, then opened
//! again. Nothing may panic, a torn tail must read as "not committed", and damage inside
//! committed data must be reported, never read as something else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};

use envgit_store::{ObjectKind, ScanConfig, StepDraft, Store, WorkTree, fsck};

struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    store: PathBuf,
}

fn project() -> Project {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("f"), "one").unwrap();
    let store = tmp.path().join("s");
    Store::create(&store, &root).unwrap();
    Project {
        _tmp: tmp,
        root,
        store,
    }
}

/// Writes `content` to `f` and commits a step; returns the journal's length after it.
fn step(p: &Project, content: &str) -> u64 {
    std::fs::write(p.root.join("f"), content).unwrap();
    let mut store = Store::open(&p.store).unwrap();
    let mut wt = WorkTree::new(&p.root, ScanConfig::default(), None).unwrap();
    let mut g = store.begin_step(content).unwrap();
    let (tree, _) = wt.full_scan(&store, None).unwrap();
    let draft = StepDraft {
        summary: content.to_owned(),
        ..StepDraft::default()
    };
    store.commit(&mut g, draft, tree).unwrap();
    std::fs::metadata(store.journal_path()).unwrap().len()
}

fn journal(p: &Project) -> PathBuf {
    p.store.join("journal")
}

fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at as usize] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

/// A journal frame as the store writes them: magic "EGJ1", type, length, payload, CRC32C of
/// type, length and payload.
fn frame(ty: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = 0x4547_4a31u32.to_le_bytes().to_vec();
    out.push(ty);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[4..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn append(path: &Path, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn a_journal_cut_at_any_byte_of_the_last_commit_reads_as_the_commit_before() {
    let p = project();
    let one = step(&p, "one");
    let two = step(&p, "two, a longer content");
    let full = std::fs::read(journal(&p)).unwrap();
    for len in one..two {
        std::fs::write(journal(&p), &full[..len as usize]).unwrap();
        let s = Store::open_steps_only(&p.store).unwrap_or_else(|e| panic!("cut at {len}: {e}"));
        assert_eq!(s.step_count(), 1, "cut at {len} of {two}");
        let s = Store::open(&p.store).unwrap_or_else(|e| panic!("cut at {len}: {e}"));
        assert_eq!(s.head().map(|h| h.summary.as_str()), Some("one"));
    }
    // The next writer cuts the torn tail and commits after the first step.
    std::fs::write(journal(&p), &full[..(one + (two - one) / 2) as usize]).unwrap();
    step(&p, "three");
    let s = Store::open(&p.store).unwrap();
    assert_eq!(summaries(&s), ["one", "three"]);
    assert!(fsck(&s, None).unwrap().is_clean());
}

#[test]
fn a_flipped_byte_in_the_last_commit_reads_as_not_committed_or_is_reported() {
    let p = project();
    let one = step(&p, "one");
    let two = step(&p, "two");
    // Every byte of the second commit's frames: magic, type, length, payload or CRC. (A
    // reader of step records only skips objects frames unread, so the full open is the one
    // that checks them all.) Damage in its last frame may be a torn write: not committed.
    // Damage in its objects frame, with its step frame intact after it, cannot be a torn
    // write and must be reported.
    let full = std::fs::read(journal(&p)).unwrap();
    let last_frame = last_frame_start(&full, one);
    for at in one..two {
        flip(&journal(&p), at);
        match Store::open(&p.store) {
            Ok(s) if at >= last_frame => assert_eq!(s.step_count(), 1, "flip at {at}"),
            Ok(s) => panic!("flip at {at}: read {} steps, no error", s.step_count()),
            Err(e) if at < last_frame => assert!(e.to_string().contains("intact frame"), "{e}"),
            Err(e) => panic!("flip at {at}: {e}"),
        }
        std::fs::write(journal(&p), &full).unwrap();
    }
    assert_eq!(Store::open(&p.store).unwrap().step_count(), 2);
}

/// Where the last frame at or after `from` starts (frames are walked by their lengths).
fn last_frame_start(journal: &[u8], from: u64) -> u64 {
    let mut at = from as usize;
    loop {
        let len = u32::from_le_bytes(journal[at + 5..at + 9].try_into().unwrap()) as usize;
        let next = at + 13 + len;
        if next >= journal.len() {
            return at as u64;
        }
        at = next;
    }
}

/// A flipped byte anywhere in an old commit: the bug was that the reader took it for a torn
/// tail, so every later step vanished from `log`, and the next commit cut them off for good.
#[test]
fn a_flipped_byte_in_an_old_commit_is_reported_and_never_cut_off() {
    let p = project();
    let one = step(&p, "one");
    step(&p, "two");
    step(&p, "three");
    let full = std::fs::read(journal(&p)).unwrap();
    for at in 0..one {
        flip(&journal(&p), at);
        let err = match Store::open(&p.store) {
            Ok(s) => panic!("flip at {at}: read {} steps, no error", s.step_count()),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("committed history is damaged"),
            "flip at {at}: {err}"
        );
        assert!(err.contains("journal"), "names the file: {err}");
        // The steps-only reader skips objects frames unread, so it may not see every flip;
        // what it reads must never be a shortened history.
        if let Ok(s) = Store::open_steps_only(&p.store) {
            assert_eq!(s.step_count(), 3, "flip at {at}");
        }
        // Nothing may write past the damage: a new step is refused, the journal untouched.
        std::fs::write(p.root.join("f"), "four").unwrap();
        assert!(Store::open(&p.store).is_err());
        let now = std::fs::read(journal(&p)).unwrap();
        assert_eq!(
            now.len(),
            full.len(),
            "flip at {at}: the journal changed length"
        );
        std::fs::write(journal(&p), &full).unwrap();
    }
    let s = Store::open(&p.store).unwrap();
    assert_eq!(summaries(&s), ["one", "two", "three"]);
}

#[test]
fn a_frame_claiming_a_huge_length_is_a_torn_tail() {
    let p = project();
    step(&p, "one");
    let mut head = 0x4547_4a31u32.to_le_bytes().to_vec();
    head.push(2);
    head.extend_from_slice(&u32::MAX.to_le_bytes());
    head.extend_from_slice(b"{\"number\":");
    append(&journal(&p), &head);
    let s = Store::open(&p.store).unwrap();
    assert_eq!(s.step_count(), 1);
}

#[test]
fn a_step_record_with_a_good_checksum_but_bad_content_is_reported_as_corrupt() {
    let p = project();
    let good = step(&p, "one");
    // Checksummed, so not a torn write: damage written by something else. It must be said,
    // never skipped (what follows it would be lost) nor read as a step.
    append(&journal(&p), &frame(2, b"{\"number\": \"not a number\"}"));
    let err = match Store::open_steps_only(&p.store) {
        Ok(_) => panic!("a corrupt step record was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("corrupt"), "{err}");
    assert!(err.contains("journal step record"), "{err}");
    assert!(std::fs::metadata(journal(&p)).unwrap().len() > good);
}

/// Records are decoded when asked for. One inside the history whose start is sound but whose
/// content is not opens the store (its newest step is sound), and is reported, as corrupt
/// and by its byte, to whatever reads it: `step(2)`, every step at once. It is never skipped
/// and never cut off by the next commit.
#[test]
fn a_bad_record_inside_the_history_is_reported_when_read() {
    let p = project();
    step(&p, "one");
    append(
        &journal(&p),
        &frame(2, b"{\"number\":2,\"kind\":\"no such kind\"}"),
    );
    append(
        &journal(&p),
        &frame(
            2,
            b"{\"number\":3,\"kind\":\"run\",\"parent\":2,\"started_at_ms\":0,\
              \"ended_at_ms\":0,\"tree\":null,\"summary\":\"three\"}",
        ),
    );

    let s = Store::open(&p.store).unwrap();
    assert_eq!(s.step_count(), 3);
    assert_eq!(s.head().map(|h| h.number), Some(3));
    assert_eq!(s.step(1).unwrap().summary, "one");
    for err in [
        s.step(2).map(|_| ()).unwrap_err().to_string(),
        s.steps().map(|_| ()).unwrap_err().to_string(),
    ] {
        assert!(err.contains("corrupt"), "{err}");
        assert!(err.contains("journal step record at byte"), "{err}");
    }
    drop(s);
    step(&p, "four");
    let s = Store::open(&p.store).unwrap();
    assert_eq!(s.step_count(), 4);
    assert!(s.step(2).is_err() && s.step(3).is_ok());
}

#[test]
fn an_unknown_frame_type_is_reported_and_never_cut_off() {
    let p = project();
    let good = step(&p, "one");
    // Checksummed, so written on purpose (by a newer envgit): ending the journal there would
    // let this envgit's next commit cut off whatever the newer one wrote.
    append(&journal(&p), &frame(9, b"from a newer envgit"));
    let err = match Store::open(&p.store) {
        Ok(_) => panic!("an unknown frame was read past"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(&format!("byte {good}")), "{err}");
    assert!(err.contains("newer envgit"), "{err}");
    assert!(std::fs::metadata(journal(&p)).unwrap().len() > good);
}

/// The pack file and offset of the object holding `content`.
fn object_place(store: &Store, content: &[u8]) -> (PathBuf, u64, u64) {
    let id = envgit_store::ObjectId::of(ObjectKind::Blob, content);
    let loc = store
        .packs()
        .unwrap()
        .index()
        .get(&id)
        .copied()
        .expect("the object is in the store");
    let path = store.packs_dir().join(format!("{:016x}.pack", loc.pack));
    (path, loc.offset, loc.record_len())
}

#[test]
fn a_torn_pack_is_reported_by_reads_and_fsck_with_the_steps_it_breaks() {
    let p = project();
    step(&p, "one");
    let last = "the last content, in the last record of the pack";
    step(&p, last);
    let s = Store::open(&p.store).unwrap();
    let (pack, offset, len) = object_place(&s, last.as_bytes());
    // The disk filled (or the machine died) after the journal said the object was there: the
    // pack ends inside its record (and the records after it, this step's trees, are gone).
    truncate(&pack, offset + len / 2);
    let s = Store::open(&p.store).unwrap();
    let id = envgit_store::ObjectId::of(ObjectKind::Blob, last.as_bytes());
    assert!(s.read_object(&id).is_err(), "a torn record read back");
    let report = fsck(&s, None).unwrap();
    assert!(!report.is_clean());
    assert!(report.bad_objects.contains_key(&id.hex()), "{report:?}");
    assert_eq!(
        report.broken_steps.keys().copied().collect::<Vec<_>>(),
        [2],
        "only the step that needs it: {report:?}"
    );
    // The first step's snapshot is whole.
    let first = s.step_tree(1).unwrap();
    assert!(s.read_tree(&first).is_ok());
}

#[test]
fn a_flipped_byte_in_a_pack_record_never_reads_as_other_content() {
    let p = project();
    let content = "some content worth keeping, long enough to be compressed? no: short";
    step(&p, content);
    let s = Store::open(&p.store).unwrap();
    let (pack, offset, len) = object_place(&s, content.as_bytes());
    let id = envgit_store::ObjectId::of(ObjectKind::Blob, content.as_bytes());
    for at in offset..offset + len {
        let before = std::fs::read(&pack).unwrap();
        flip(&pack, at);
        let s = Store::open(&p.store).unwrap();
        match s.read_object(&id) {
            Ok(_) => panic!("flip at {at}: damaged record read back"),
            Err(e) => assert!(e.to_string().contains("corrupt"), "flip at {at}: {e}"),
        }
        std::fs::write(&pack, before).unwrap();
    }
    assert_eq!(
        Store::open(&p.store).unwrap().read_file(&id).unwrap(),
        content.as_bytes()
    );
}

/// Every step's summary, oldest first.
fn summaries(s: &Store) -> Vec<String> {
    s.steps()
        .unwrap()
        .iter()
        .map(|s| s.summary.clone())
        .collect()
}
