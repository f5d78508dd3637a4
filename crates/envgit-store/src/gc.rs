//! `envgit gc`: keep the store under its disk budget with a small, fixed amount of extra space.
//!
//! Order: (1) `--purge PATH` rewrites every snapshot without that path; (2) if the live data is
//! over budget, older unmarked steps are pruned (recent and marked steps are kept; pruned steps
//! stay in the log); (3) packs holding dead bytes are compacted one at a time: live records
//! copied into a new pack (synced), the journal republished pointing at it, then the old pack
//! deleted. A crash at any point leaves duplicates, never holes. At most one pack of extra
//! space is needed.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::error::{IoContext, Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::lock::{Flock, gc_exclusive};
use crate::pack::{self, Location, PackWriter};
use crate::pack_backend::PackBackend;
use crate::reach;
use crate::step::StepFlag;
use crate::store::Store;
use crate::tree::{EntryKind, MarkerReason, Tree, TreeEntry, ZERO_ID};

pub struct GcOptions {
    /// Bytes the store may use.
    pub budget: u64,
    /// The newest steps are never pruned.
    pub keep_recent: usize,
    /// Paths ('/'-separated, relative to the project) to remove from every snapshot.
    pub purge: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct GcReport {
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub pruned_steps: Vec<u64>,
    pub purged_steps: Vec<u64>,
    pub packs_compacted: u64,
    pub objects_dropped: u64,
}

pub fn gc(store: &mut Store, opts: &GcOptions) -> Result<GcReport> {
    let _gc = gc_exclusive(store.dir())?;
    // What runs left to remove later: gc is the user's way to reclaim space.
    crate::trash::empty(store.dir());
    store.packs_for("gc")?.switch_to_new_pack()?;
    let _commit = Flock::exclusive(&store.dir().join("lock"))?;
    store.catch_up()?;
    let mut report = GcReport {
        bytes_before: store.disk_usage()?,
        ..Default::default()
    };
    let mut steps = store.steps()?.to_vec();

    for path in &opts.purge {
        let parts: Vec<&[u8]> = path
            .trim_matches('/')
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .map(str::as_bytes)
            .collect();
        if parts.is_empty() || parts.contains(&&b".."[..]) {
            return Err(StoreError::Refused(format!(
                "cannot purge `{path}`: give a path inside the project"
            )));
        }
        for step in steps.iter_mut() {
            let Some(tree) = step.tree else { continue };
            if let Some(new) = purge(store, &tree, &parts)? {
                step.tree = Some(new);
                if !step.flags.contains(&StepFlag::Purged) {
                    step.flags.push(StepFlag::Purged);
                }
                report.purged_steps.push(step.number);
            }
        }
    }

    // Prune older unmarked steps while the live data is over budget.
    loop {
        let live = live_set(store, &steps)?;
        // The journal counts too: step records stay even for pruned steps.
        let journal = std::fs::metadata(store.journal_path())
            .map(|m| m.len())
            .unwrap_or(0);
        let live_bytes = live_bytes(store.packs_for("gc")?, &live) + journal;
        if live_bytes <= opts.budget {
            break;
        }
        let keep_from = steps.len().saturating_sub(opts.keep_recent);
        let candidates: Vec<usize> = (0..keep_from)
            .filter(|&i| {
                steps[i].tree.is_some() && !steps[i].flags.contains(&StepFlag::Irreversible)
            })
            .collect();
        if candidates.is_empty() {
            break;
        }
        let n = candidates.len().div_ceil(4);
        for &i in candidates.iter().take(n) {
            steps[i].tree = None;
            steps[i].flags.push(StepFlag::Pruned);
            report.pruned_steps.push(steps[i].number);
        }
    }

    let live = live_set(store, &steps)?;
    // Current locations of every live object, including trees purge just wrote.
    let mut locs: HashMap<ObjectId, Location> = HashMap::new();
    for id in &live {
        if let Some(l) = store.packs_for("gc")?.location(id) {
            locs.insert(*id, l);
        }
    }
    let packs = store.packs_for("gc")?;
    report.objects_dropped = packs.index().keys().filter(|id| !live.contains(id)).count() as u64;
    // Trees that purge wrote must be durable before the journal names them.
    packs.take_pending_synced()?;
    publish(store, &locs, &steps)?;

    // Compact packs one at a time.
    let packs_dir = store.packs_dir();
    let mut by_pack: HashMap<u64, Vec<(ObjectId, Location)>> = HashMap::new();
    for (id, l) in &locs {
        by_pack.entry(l.pack).or_default().push((*id, *l));
    }
    let mut packs = Vec::new();
    for entry in std::fs::read_dir(&packs_dir).at(&packs_dir)? {
        let entry = entry.at(&packs_dir)?;
        if let Some(p) = entry.file_name().to_str().and_then(pack::parse_pack_name) {
            packs.push((p, entry.metadata().at(&packs_dir)?.len()));
        }
    }
    let mut writer: Option<PackWriter> = None;
    for (pack_id, len) in packs {
        if writer.as_ref().is_some_and(|w| w.pack() == pack_id) {
            continue;
        }
        let path = pack::pack_path(&packs_dir, pack_id);
        // A pack another process still appends to is left for a later gc.
        let Some(_held) = Flock::try_exclusive(&path)? else {
            continue;
        };
        let live_in_pack = by_pack.remove(&pack_id).unwrap_or_default();
        let live_len: u64 = live_in_pack.iter().map(|(_, l)| l.record_len()).sum();
        if live_len == len && len > 0 {
            continue; // nothing dead in it
        }
        if !live_in_pack.is_empty() {
            let w = match writer.as_mut() {
                Some(w) => w,
                None => writer.insert(PackWriter::acquire_new(&packs_dir)?),
            };
            for (id, l) in &live_in_pack {
                let rec = store.packs_for("gc")?.reader().read_record(l)?;
                let new = w.append_record(&rec, l)?;
                locs.insert(*id, new);
            }
            w.sync()?;
            publish(store, &locs, &steps)?;
        }
        store.packs_for("gc")?.reader().forget(pack_id);
        std::fs::remove_file(&path).at(&path)?;
        report.packs_compacted += 1;
    }
    pack::sync_dir(&packs_dir)?;
    drop(writer);
    report.bytes_after = store.disk_usage()?;
    Ok(report)
}

fn publish(
    store: &mut Store,
    locs: &HashMap<ObjectId, Location>,
    steps: &[crate::step::Step],
) -> Result<()> {
    let mut objects: Vec<(ObjectId, Location)> = locs.iter().map(|(i, l)| (*i, *l)).collect();
    objects.sort_by_key(|(_, l)| (l.pack, l.offset));
    store.rewrite_journal(&objects, steps)
}

fn live_set(store: &Store, steps: &[crate::step::Step]) -> Result<HashSet<ObjectId>> {
    let mut live = HashSet::new();
    for s in steps {
        if let Some(t) = s.tree {
            reach::collect(store, &t, &mut live)?;
        }
    }
    // Delta bases stay (never their contents): gc keeps every base a live delta needs rather
    // than rewriting deltas whole, so compaction still copies records verbatim.
    reach::add_delta_bases(store, &mut live)?;
    Ok(live)
}

fn live_bytes(packs: &PackBackend, live: &HashSet<ObjectId>) -> u64 {
    live.iter()
        .filter_map(|id| packs.location(id))
        .map(|l| l.record_len())
        .sum()
}

/// Rewrite `tree` without the path `parts`; `None` if the path is not in it.
fn purge(store: &Store, tree: &ObjectId, parts: &[&[u8]]) -> Result<Option<ObjectId>> {
    let Some((first, rest)) = parts.split_first() else {
        return Ok(None);
    };
    let mut t: Tree = store.read_tree(tree)?;
    let Some(pos) = t.entries.iter().position(|e| e.name.as_slice() == *first) else {
        return Ok(None);
    };
    let e = &t.entries[pos];
    if rest.is_empty() {
        if e.kind == EntryKind::Marker(MarkerReason::Purged) {
            return Ok(None);
        }
        t.entries[pos] = TreeEntry {
            name: e.name.clone(),
            kind: EntryKind::Marker(MarkerReason::Purged),
            mode: 0,
            size: 0,
            id: ZERO_ID,
        };
    } else {
        if e.kind != EntryKind::Dir {
            return Ok(None);
        }
        let Some(sub) = purge(store, &e.id, rest)? else {
            return Ok(None);
        };
        t.entries[pos].id = sub;
    }
    Ok(Some(store.put(ObjectKind::Tree, &t.encode())?))
}

#[cfg(test)]
mod tests {
    //! gc rerun over the files a crash at each of its phases leaves, and gc beside a step, a
    //! commit or a writer that holds one of the store's locks.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::{Path, PathBuf};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::fsck::fsck;
    use crate::step::StepDraft;
    use crate::tree::EntryKind;

    fn keep_everything() -> GcOptions {
        GcOptions {
            budget: u64::MAX,
            keep_recent: usize::MAX,
            purge: Vec::new(),
        }
    }

    /// A store whose two steps each name one file, with one object committed that no step
    /// reaches. Returns the files' contents and the orphan's id.
    fn store_with_an_orphan(dir: &Path) -> (PathBuf, Vec<Vec<u8>>, ObjectId) {
        let store_dir = dir.join("s");
        let project = dir.join("p");
        std::fs::create_dir_all(&project).unwrap();
        let mut store = Store::create(&store_dir, &project).unwrap();
        let mut contents = Vec::new();
        let mut orphan = ZERO_ID;
        for n in 0..2u8 {
            let mut g = store.begin_step("t").unwrap();
            let content = vec![n + 1; 5000 + usize::from(n)];
            let blob = store.put(ObjectKind::Blob, &content).unwrap();
            if n == 0 {
                orphan = store.put(ObjectKind::Blob, b"named by no tree").unwrap();
            }
            let tree = Tree {
                entries: vec![TreeEntry {
                    name: b"f".to_vec(),
                    kind: EntryKind::File,
                    mode: 0o644,
                    size: content.len() as u64,
                    id: blob,
                }],
            };
            let tree = store.put_tree(&tree, None).unwrap();
            store.commit(&mut g, StepDraft::default(), tree).unwrap();
            contents.push(content);
        }
        (store_dir, contents, orphan)
    }

    fn assert_whole(store_dir: &Path, contents: &[Vec<u8>]) {
        let store = Store::open(store_dir).unwrap();
        for (i, content) in contents.iter().enumerate() {
            let tree = store
                .read_tree(&store.step_tree(i as u64 + 1).unwrap())
                .unwrap();
            let f = tree.get(b"f").unwrap();
            assert_eq!(&store.read_file(&f.id).unwrap(), content, "step {}", i + 1);
        }
        assert!(fsck(&store, None).unwrap().is_clean());
    }

    fn pack_files(store_dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out: Vec<_> = std::fs::read_dir(store_dir.join("packs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "pack"))
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        out.sort();
        out
    }

    /// The packs the journal names, and every pack on disk.
    fn named_and_present(store_dir: &Path) -> (Vec<u64>, Vec<u64>) {
        let store = Store::open(store_dir).unwrap();
        let mut named: Vec<u64> = store
            .packs()
            .unwrap()
            .index()
            .values()
            .map(|l| l.pack)
            .collect();
        named.sort_unstable();
        named.dedup();
        let present = pack_files(store_dir)
            .iter()
            .filter_map(|(p, _)| pack::parse_pack_name(p.file_name()?.to_str()?))
            .collect();
        (named, present)
    }

    #[test]
    fn gc_rerun_over_what_a_crash_at_each_phase_leaves_loses_nothing_reachable() {
        let tmp = tempfile::tempdir().unwrap();
        let (store_dir, contents, orphan) = store_with_an_orphan(tmp.path());
        let before = pack_files(&store_dir);
        gc(&mut Store::open(&store_dir).unwrap(), &keep_everything()).unwrap();
        assert!(!Store::open(&store_dir).unwrap().has(&orphan));
        let packs_dir = store_dir.join("packs");

        // Phase 1, the writer switched to a new pack: an empty pack.
        std::fs::write(pack::pack_path(&packs_dir, 0x1111), b"").unwrap();
        // Phase 3, live records copied into a new pack, journal not yet republished: a
        // pack nobody names, holding copies of live records (and a torn one at its end).
        let (_, current) = &pack_files(&store_dir)[0];
        let mut copied = current.clone();
        copied.extend_from_slice(&current[..current.len() / 2]);
        std::fs::write(pack::pack_path(&packs_dir, 0x2222), &copied).unwrap();
        // Journal republished, old packs not yet removed: they come back.
        for (path, bytes) in &before {
            std::fs::write(path, bytes).unwrap();
        }
        // A publish that died before its rename: the temporary journal.
        std::fs::write(store_dir.join(".tmp-00000000deadbeef"), b"half a journal").unwrap();

        assert_whole(&store_dir, &contents);
        let report = gc(&mut Store::open(&store_dir).unwrap(), &keep_everything()).unwrap();
        assert_eq!(report.objects_dropped, 0, "{report:?}");
        assert_whole(&store_dir, &contents);
        assert!(!Store::open(&store_dir).unwrap().has(&orphan));
        // Only the packs the journal names are left, and the empty one gc switched the
        // store's writer to (the next writer takes it over).
        let (named, present) = named_and_present(&store_dir);
        for pack in &present {
            let len = std::fs::metadata(pack::pack_path(&packs_dir, *pack))
                .unwrap()
                .len();
            assert!(
                named.contains(pack) || len == 0,
                "pack {pack:016x}: {len} bytes"
            );
        }
        assert!(!present.contains(&0x1111) && !present.contains(&0x2222));
        for (path, _) in &before {
            assert!(!path.exists(), "{}", path.display());
        }

        // And a third run finds nothing to do.
        let again = gc(&mut Store::open(&store_dir).unwrap(), &keep_everything()).unwrap();
        assert_eq!(again.objects_dropped, 0);
        assert_whole(&store_dir, &contents);
    }

    #[test]
    fn gc_refuses_while_a_step_is_open_and_runs_once_it_is_closed() {
        let tmp = tempfile::tempdir().unwrap();
        let (store_dir, contents, orphan) = store_with_an_orphan(tmp.path());
        let other = Store::open(&store_dir).unwrap();
        let guard = other.begin_step("a step in flight").unwrap();
        let mut store = Store::open(&store_dir).unwrap();
        let e = gc(&mut store, &keep_everything()).expect_err("refused");
        assert!(matches!(e, StoreError::InFlight(_)), "{e}");
        assert!(e.to_string().contains("a step in flight"), "{e}");
        // Nothing was dropped or compacted.
        assert!(Store::open(&store_dir).unwrap().has(&orphan));
        drop(guard);
        gc(&mut store, &keep_everything()).unwrap();
        assert!(!Store::open(&store_dir).unwrap().has(&orphan));
        assert_whole(&store_dir, &contents);
    }

    #[test]
    fn gc_waits_for_a_commit_in_progress() {
        let tmp = tempfile::tempdir().unwrap();
        let (store_dir, contents, _) = store_with_an_orphan(tmp.path());
        let commit_lock = Flock::exclusive(&store_dir.join("lock")).unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let gc_dir = store_dir.clone();
        let running = std::thread::spawn(move || {
            let result = gc(&mut Store::open(&gc_dir).unwrap(), &keep_everything());
            done_tx.send(result.map(|r| r.objects_dropped)).unwrap();
        });
        assert!(
            done_rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "gc ran while a commit held the lock"
        );
        drop(commit_lock);
        let dropped = done_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap()
            .unwrap();
        running.join().unwrap();
        assert_eq!(dropped, 1);
        assert_whole(&store_dir, &contents);
    }

    #[test]
    fn gc_leaves_a_pack_another_writer_holds_for_a_later_gc() {
        let tmp = tempfile::tempdir().unwrap();
        let (store_dir, contents, _) = store_with_an_orphan(tmp.path());
        let held: Vec<_> = pack_files(&store_dir)
            .into_iter()
            .map(|(path, bytes)| {
                let lock = Flock::try_exclusive(&path).unwrap().expect("free");
                (path, bytes, lock)
            })
            .collect();
        let report = gc(&mut Store::open(&store_dir).unwrap(), &keep_everything()).unwrap();
        assert_eq!(report.packs_compacted, 0, "{report:?}");
        for (path, bytes, _) in &held {
            assert_eq!(&std::fs::read(path).unwrap(), bytes, "{}", path.display());
        }
        assert_whole(&store_dir, &contents);
        drop(held);
        let report = gc(&mut Store::open(&store_dir).unwrap(), &keep_everything()).unwrap();
        assert!(report.packs_compacted > 0, "{report:?}");
        assert_whole(&store_dir, &contents);
    }
}
