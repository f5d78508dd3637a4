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
    store.packs_for("gc")?.switch_to_new_pack()?;
    let _commit = Flock::exclusive(&store.dir().join("lock"))?;
    store.catch_up()?;
    let mut report = GcReport {
        bytes_before: store.disk_usage()?,
        ..Default::default()
    };
    let mut steps = store.steps().to_vec();

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
