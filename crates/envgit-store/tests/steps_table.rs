//! The steps table (`steps.table`): a store opened through it has every step the journal
//! holds, each read only when asked for and checked then; a table that does not match the
//! journal as it is (damaged, another store's, ahead of a journal cut back, or from before gc
//! rewrote the journal) is ignored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use envgit_store::{GcOptions, ObjectId, ScanConfig, Step, StepDraft, Store, WorkTree};

/// Steps enough that a commit writes a table (it is written 64 records after the last one).
const STEPS: u64 = 150;

fn table(store_dir: &Path) -> PathBuf {
    store_dir.join("steps.table")
}

fn snapshot(store: &mut Store, root: &Path) -> ObjectId {
    let mut wt = WorkTree::new(root, ScanConfig::default(), None).unwrap();
    wt.full_scan(store, None).unwrap().0
}

fn commit(store: &mut Store, tree: ObjectId, summary: &str) -> Step {
    let mut g = store.begin_step(summary).unwrap();
    let draft = StepDraft {
        summary: summary.to_string(),
        ..StepDraft::default()
    };
    store.commit(&mut g, draft, tree).unwrap()
}

/// A project committed `steps` times (a file written before each), and its store.
fn project(tmp: &Path, name: &str, steps: u64) -> (PathBuf, PathBuf) {
    let root = tmp.join(name);
    std::fs::create_dir_all(&root).unwrap();
    let dir = tmp.join(format!("{name}.store"));
    let mut store = Store::create(&dir, &root).unwrap();
    for n in 1..=steps {
        std::fs::write(root.join(format!("f{}", n % 7)), format!("{name} {n}\n")).unwrap();
        let tree = snapshot(&mut store, &root);
        commit(&mut store, tree, &format!("{name} step {n}"));
    }
    (root, dir)
}

/// Every step as JSON, oldest first, read through every way a caller reads them.
fn steps_of(store: &Store) -> Vec<String> {
    let json = |s: &Step| serde_json::to_string(s).unwrap();
    let all: Vec<String> = store.steps().unwrap().iter().map(json).collect();
    let by_number: Vec<String> = (1..=store.step_count() as u64)
        .map(|n| json(store.step(n).unwrap()))
        .collect();
    let mut newest_first: Vec<String> = store
        .steps_newest_first()
        .map(|s| json(s.unwrap()))
        .collect();
    newest_first.reverse();
    assert_eq!(all, by_number);
    assert_eq!(all, newest_first);
    assert_eq!(store.head().map(json), all.last().cloned());
    all
}

/// What the journal alone says: the store opened with no table there.
fn without_table(dir: &Path) -> Vec<String> {
    let kept = std::fs::read(table(dir)).ok();
    let _ = std::fs::remove_file(table(dir));
    let from_journal = steps_of(&Store::open(dir).unwrap());
    if let Some(bytes) = kept {
        std::fs::write(table(dir), bytes).unwrap();
    }
    from_journal
}

/// Where the frame of step `number`'s record starts in the journal: the record is the JSON
/// after a 9-byte header, beginning `{"number":N,`.
fn record_at(dir: &Path, number: u64) -> usize {
    let journal = std::fs::read(dir.join("journal")).unwrap();
    let needle = format!("{{\"number\":{number},");
    journal
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .expect("the record is in the journal")
        - 9
}

#[test]
fn a_store_opened_through_its_table_has_every_step_the_journal_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a", STEPS);
    assert!(table(&dir).exists(), "no table after {STEPS} steps");
    // Steps after the point the table covers come from the journal.
    let mut store = Store::open(&dir).unwrap();
    let tree = snapshot(&mut store, &root);
    commit(&mut store, tree, "after the table");
    let reopened = Store::open(&dir).unwrap();
    let steps = steps_of(&reopened);
    assert_eq!(steps.len() as u64, STEPS + 1);
    assert_eq!(steps, without_table(&dir));
    assert_eq!(steps_of(&Store::open_steps_only(&dir).unwrap()), steps);
    assert!(envgit_store::fsck(&reopened, None).unwrap().is_clean());
}

/// A table written by the newest commit holds every record: the newest step comes from it,
/// decoded as the store opens, and a commit after it follows it.
#[test]
fn a_table_that_holds_every_record_gives_the_newest_step() {
    let tmp = tempfile::tempdir().unwrap();
    // Tables are written 64 records after the last one: the 128th commit writes one holding
    // all 128.
    let (root, dir) = project(tmp.path(), "a", 128);
    let mut store = Store::open(&dir).unwrap();
    assert_eq!(store.head().map(|s| s.number), Some(128));
    assert_eq!(
        store.head().map(|s| s.summary.clone()),
        Some("a step 128".into())
    );
    let steps = steps_of(&store);
    assert_eq!(steps, without_table(&dir));
    let tree = snapshot(&mut store, &root);
    let next = commit(&mut store, tree, "after");
    assert_eq!(next.number, 129);
    assert_eq!(store.head().map(|s| s.number), Some(129));
    assert_eq!(steps_of(&Store::open(&dir).unwrap()), without_table(&dir));
}

/// Opening through the table reads none of the records it holds: damage in one is reported
/// to whoever asks for that step, naming where it is, and by fsck; it is never skipped.
/// Without the table the open itself reports it, as before.
#[test]
fn damage_in_a_record_the_table_holds_is_reported_when_that_step_is_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, dir) = project(tmp.path(), "a", STEPS);
    let at = record_at(&dir, 40);
    let journal = dir.join("journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[at + 30] ^= 0x01;
    std::fs::write(&journal, &bytes).unwrap();

    let store = Store::open(&dir).expect("opens through the table");
    assert_eq!(store.step_count() as u64, STEPS);
    assert_eq!(store.step(41).unwrap().summary, "a step 41");
    let e = store.step(40).unwrap_err().to_string();
    assert!(
        e.contains("damaged") && e.contains(&format!("byte {at}")),
        "{e}"
    );
    let e = store.steps().unwrap_err().to_string();
    assert!(e.contains(&format!("byte {at}")), "{e}");
    let e = envgit_store::fsck(&store, None).unwrap_err().to_string();
    assert!(e.contains("damaged"), "{e}");

    let _ = std::fs::remove_file(table(&dir));
    let e = Store::open(&dir)
        .err()
        .expect("damage reported")
        .to_string();
    assert!(e.contains("damaged"), "{e}");
}

#[test]
fn a_table_that_does_not_match_the_journal_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, a) = project(tmp.path(), "a", STEPS);
    let (_, b) = project(tmp.path(), "b", STEPS);
    let b_steps = without_table(&b);

    // Another store's table: its journal is another file.
    std::fs::copy(table(&a), table(&b)).unwrap();
    assert_eq!(steps_of(&Store::open(&b).unwrap()), b_steps);

    // A damaged table: one bit of the last entry's start, the checksum left as it was.
    let a_steps = without_table(&a);
    let mut bytes = std::fs::read(table(&a)).unwrap();
    let at = bytes.len() - 4 - 12;
    bytes[at] ^= 1;
    std::fs::write(table(&a), &bytes).unwrap();
    assert_eq!(steps_of(&Store::open(&a).unwrap()), a_steps);

    // A table whose checksum matches but whose records are not where it says (the first
    // record's start moved by one): the checks before trusting it refuse it.
    let mut bytes = std::fs::read(table(&b)).unwrap();
    let first_start = 8 + 16 + 8 + 4 + 8 + 8;
    bytes[first_start] ^= 1;
    let body = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..body]).to_le_bytes();
    bytes[body..].copy_from_slice(&crc);
    std::fs::write(table(&b), &bytes).unwrap();
    assert_eq!(steps_of(&Store::open(&b).unwrap()), b_steps);
}

/// The same journal file cut back to before the point the table covers: the table is
/// ignored, and the store is what the journal holds; its next commit follows that.
#[test]
fn a_table_ahead_of_its_journal_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a", 10);
    let journal = dir.join("journal");
    let cut = std::fs::metadata(&journal).unwrap().len();
    let mut store = Store::open(&dir).unwrap();
    let tree = snapshot(&mut store, &root);
    for n in 11..=STEPS {
        commit(&mut store, tree, &format!("a step {n}"));
    }
    drop(store);
    assert!(table(&dir).exists());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap()
        .set_len(cut)
        .unwrap();
    let mut store = Store::open(&dir).unwrap();
    assert_eq!(store.step_count(), 10);
    let step = commit(&mut store, tree, "after the cut");
    assert_eq!(step.number, 11);
    assert_eq!(steps_of(&Store::open(&dir).unwrap()), without_table(&dir));
}

/// A crashed writer's half-written frame after the point the table covers is a tail like any
/// other: the open ignores it and the next commit cuts it off.
#[test]
fn an_interrupted_write_after_the_table_is_cut_off_by_the_next_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a", STEPS);
    let journal = dir.join("journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    let last = record_at(&dir, STEPS);
    // The newest frame again, cut short: what a crash mid-append leaves.
    let torn = bytes[last..bytes.len() - 20].to_vec();
    bytes.extend_from_slice(&torn);
    std::fs::write(&journal, &bytes).unwrap();
    let mut store = Store::open(&dir).unwrap();
    assert_eq!(store.step_count() as u64, STEPS);
    let tree = snapshot(&mut store, &root);
    commit(&mut store, tree, "after the crash");
    let steps = steps_of(&Store::open(&dir).unwrap());
    assert_eq!(steps.len() as u64, STEPS + 1);
    assert_eq!(steps, without_table(&dir));
}

/// Two processes: one opened through an older table while the other committed enough steps
/// to write a new one. Each sees every step, numbered in order.
#[test]
fn a_store_open_while_another_writes_a_new_table_sees_every_step() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a", STEPS);
    let mut first = Store::open(&dir).unwrap();
    let mut second = Store::open(&dir).unwrap();
    let tree = snapshot(&mut first, &root);
    let before = std::fs::read(table(&dir)).unwrap();
    for n in 1..=70 {
        commit(&mut second, tree, &format!("second {n}"));
    }
    assert_ne!(std::fs::read(table(&dir)).unwrap(), before, "no new table");
    let step = commit(&mut first, tree, "first");
    assert_eq!(step.number, STEPS + 71);
    assert_eq!(step.parent, Some(STEPS + 70));
    let steps = steps_of(&first);
    assert_eq!(steps, steps_of(&Store::open(&dir).unwrap()));
    assert_eq!(steps, without_table(&dir));
}

#[test]
fn gc_removes_the_table_of_the_journal_it_replaces() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, dir) = project(tmp.path(), "a", STEPS);
    let before = std::fs::read(table(&dir)).unwrap();
    let mut store = Store::open(&dir).unwrap();
    envgit_store::gc(
        &mut store,
        &GcOptions {
            budget: 0,
            keep_recent: 1,
            purge: Vec::new(),
        },
    )
    .unwrap();
    assert!(
        std::fs::read(table(&dir)).ok().as_ref() != Some(&before),
        "the table of the replaced journal is still there"
    );
    let reopened = Store::open(&dir).unwrap();
    assert_eq!(steps_of(&reopened), without_table(&dir));
    assert!(envgit_store::fsck(&reopened, None).unwrap().is_clean());
}

/// Every object the store knows and where, ordered (id in hex).
fn objects(store: &Store) -> std::collections::BTreeMap<String, String> {
    store
        .packs()
        .unwrap()
        .index()
        .iter()
        .map(|(id, loc)| (id.hex(), format!("{loc:?}")))
        .collect()
}

/// The store opened with neither table there (what the journal alone says).
fn without_tables(dir: &Path) -> (Vec<String>, std::collections::BTreeMap<String, String>) {
    let kept: Vec<(PathBuf, Vec<u8>)> = [table(dir), dir.join("objects.table")]
        .into_iter()
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect();
    for (p, _) in &kept {
        std::fs::remove_file(p).unwrap();
    }
    let store = Store::open(dir).unwrap();
    let found = (steps_of(&store), objects(&store));
    for (p, b) in kept {
        std::fs::write(p, b).unwrap();
    }
    found
}

/// The steps table carries the objects committed after the object table's point, so an open
/// reads neither the step frames nor the objects frames before its own point: the objects
/// are all found where the journal put them, later commits append to the packs where they
/// may, and damage in a skipped objects frame is fsck's to report.
#[test]
fn the_objects_after_the_object_table_come_with_the_steps_table() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("a");
    for i in 0..1200 {
        let d = root.join(format!("d{}", i / 100));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("f{i}")), format!("file {i}\n")).unwrap();
    }
    let dir = tmp.path().join("a.store");
    let mut store = Store::create(&dir, &root).unwrap();
    let tree = snapshot(&mut store, &root);
    commit(&mut store, tree, "import");
    assert!(dir.join("objects.table").exists(), "no object table");
    let journal = dir.join("journal");
    let first_end = std::fs::metadata(&journal).unwrap().len() as usize;
    for n in 1..=100 {
        std::fs::write(root.join("changing"), format!("version {n}\n")).unwrap();
        let tree = snapshot(&mut store, &root);
        commit(&mut store, tree, &format!("edit {n}"));
    }
    drop(store);
    assert!(table(&dir).exists(), "no steps table");

    let reopened = Store::open(&dir).unwrap();
    assert_eq!(
        (steps_of(&reopened), objects(&reopened)),
        without_tables(&dir)
    );
    drop(reopened);
    // A commit through both tables appends where it may: fsck reads every object back.
    let mut store = Store::open(&dir).unwrap();
    std::fs::write(root.join("changing"), "after\n").unwrap();
    let tree = snapshot(&mut store, &root);
    commit(&mut store, tree, "after");
    assert!(envgit_store::fsck(&store, None).unwrap().is_clean());
    drop(store);

    // Damage inside the second step's objects frame (after the object table's point, before
    // the steps table's): the open never reads it; fsck does.
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[first_end + 20] ^= 0x40;
    std::fs::write(&journal, &bytes).unwrap();
    let store = Store::open(&dir).expect("opens through both tables");
    let e = envgit_store::fsck(&store, None).unwrap_err().to_string();
    assert!(e.contains("damaged"), "{e}");
    std::fs::remove_file(table(&dir)).unwrap();
    let e = Store::open(&dir)
        .err()
        .expect("damage reported")
        .to_string();
    assert!(e.contains("damaged"), "{e}");
}

/// Child role of the test below: begin a step, say so, and wait to be killed.
fn begin_and_hang(dir: &Path) -> ! {
    let store = Store::open(dir).unwrap();
    let mut g = store.begin_step("run: sleep").unwrap();
    g.keep_if_uncommitted();
    println!("BEGUN");
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    let mut buf = [0u8; 1];
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut buf);
    std::process::exit(0)
}

/// A reader (`envgit log`) opens for step records only, so it knows no object; when it records
/// a killed step as interrupted and that record is the one that writes a new steps table, the
/// table must not say "no object after the object table's point". (It did: the next open then
/// had no object at all, and fsck said every step was damaged.)
#[test]
fn a_table_written_by_a_reader_that_recorded_an_interrupted_step_loses_no_object() {
    use std::io::BufRead;
    if let Some(dir) = std::env::var_os("ENVGIT_TEST_STEPS_TABLE_HANG") {
        begin_and_hang(Path::new(&dir));
    }
    let tmp = tempfile::tempdir().unwrap();
    // One record short of a table: the interrupted step's record writes it.
    let (_, dir) = project(tmp.path(), "a", 63);
    assert!(!table(&dir).exists());
    let name = "a_table_written_by_a_reader_that_recorded_an_interrupted_step_loses_no_object";
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("ENVGIT_TEST_STEPS_TABLE_HANG", &dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("BEGUN")),
        "the child never began its step"
    );
    child.kill().unwrap();
    child.wait().unwrap();

    let reader = Store::open_steps_only(&dir).unwrap();
    assert_eq!(reader.step_count(), 64);
    drop(reader);
    assert!(table(&dir).exists(), "the reader wrote no table");
    let store = Store::open(&dir).unwrap();
    let (steps, objects_then) = without_tables(&dir);
    assert!(!objects_then.is_empty());
    assert_eq!(objects(&store), objects_then, "objects lost");
    assert_eq!(steps_of(&store), steps);
    assert!(envgit_store::fsck(&store, None).unwrap().is_clean());
}
