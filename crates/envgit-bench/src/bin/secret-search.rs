//! What finding the project's secrets (and its hard links to outside) costs the sandbox's
//! plan, before and after issue 12: before, a walk of the project 6 levels deep (`.env` files
//! deeper were missed); after, the stat index the pre-step scan already made, plus a listing by
//! name of only the directories the snapshot excludes. On the generated kernel-shaped tree
//! (100k files by default) with a `node_modules/` beside it, hot cache, in process. Also
//! timed, for scale: the pre-step scan every step pays anyway. The listing `lstat`s each file
//! of a directory it reads afresh (for its link count: a file linked outside becomes the
//! project's own copy); a listing cache in the store serves the unchanged directories.
//!
//! `cargo run --release -p envgit-bench --bin secret-search -- [--files 100000] [--dirs 7000]
//! [--nm-files 30000] [--reps 15]`

#[path = "../gen.rs"]
#[allow(dead_code)]
mod r#gen;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use envgit_sandbox::plan::{ProjectIndex, Seen, project_facts};
use envgit_store::{EntryKind, MarkerReason, ScanConfig, Store, WorkTree};

/// What finding the project's secrets costs the sandbox's plan, on a generated tree with a
/// `node_modules/` beside it, hot cache, in process.
#[derive(clap::Parser)]
struct Args {
    /// Files in the generated tree.
    #[arg(long, default_value_t = 100_000)]
    files: usize,
    /// Directories in the generated tree.
    #[arg(long, default_value_t = 7_000)]
    dirs: usize,
    /// Files in its `node_modules/`.
    #[arg(long, default_value_t = 30_000)]
    nm_files: usize,
    /// Repetitions of each figure.
    #[arg(long, default_value_t = 15)]
    reps: usize,
}

fn p50(mut f: impl FnMut() -> Result<usize>, reps: usize) -> Result<(Duration, usize)> {
    let mut found = f()?; // warm-up
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        found = f()?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok((times[times.len() / 2], found))
}

/// The search as it was (plan.rs before issue 12): every entry of the project down to 6
/// levels, `.git` skipped, a name check per file.
fn old_walk(dir: &Path, depth_left: usize, found: &mut usize) {
    if depth_left == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let name = e.file_name();
        let n = name.to_str().unwrap_or("");
        if !ft.is_dir() && (n == ".env" || n.starts_with(".env.") || n == ".npmrc") {
            *found += 1;
        }
        if ft.is_dir() && n != ".git" {
            old_walk(&e.path(), depth_left - 1, found);
        }
    }
}

/// A [`WorkTree`] as the plan reads it (the same adapter as the CLI's `project_facts.rs`).
struct Index<'a> {
    wt: &'a WorkTree,
    unwalked: bool,
}

impl ProjectIndex for Index<'_> {
    fn visit(&self, skip_dir: &dyn Fn(&[u8]) -> bool, f: &mut dyn FnMut(&[u8], Seen)) {
        let mut rel = Vec::new();
        self.wt.visit_entries(skip_dir, |dir, name, kind, st| {
            rel.clear();
            if !dir.is_empty() {
                rel.extend_from_slice(dir);
                rel.push(b'/');
            }
            rel.extend_from_slice(name);
            let file = Seen::File {
                dev: st.dev,
                ino: st.ino,
                nlink: u64::from(st.nlink),
            };
            let seen = match kind {
                EntryKind::File => file,
                EntryKind::Dir => Seen::Dir,
                EntryKind::Marker(MarkerReason::Excluded | MarkerReason::TooDeep)
                    if st.is_dir() =>
                {
                    if self.unwalked {
                        Seen::Unwalked
                    } else {
                        Seen::Other
                    }
                }
                EntryKind::Marker(_) if st.is_file() => file,
                _ => Seen::Other,
            };
            f(&rel, seen);
        });
    }
}

/// Every file under `dir` listed and `lstat`ed with the standard library: the anchor for the
/// listing afresh, which does the same with `getdents` and one `statx` per file.
fn list_and_stat(dir: &Path) -> usize {
    let mut linked = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file()
                && std::fs::symlink_metadata(e.path())
                    .is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) > 1)
            {
                linked += 1;
            }
        }
    }
    linked
}

/// `nm_files` small files in a node_modules-shaped tree: packages of ~15 files in 3 levels.
fn node_modules(root: &Path, nm_files: usize) -> Result<()> {
    let nm = root.join("node_modules");
    let mut written = 0;
    let mut pkg = 0;
    while written < nm_files {
        for (sub, n) in [("", 4), ("lib", 6), ("lib/util", 5)] {
            let d = nm.join(format!("pkg{pkg}")).join(sub);
            std::fs::create_dir_all(&d)?;
            for i in 0..n {
                std::fs::write(d.join(format!("f{i}.js")), format!("module {pkg} {i}\n"))?;
                written += 1;
            }
        }
        pkg += 1;
    }
    std::fs::create_dir_all(nm.join("pkg7/lib/util/deep"))?;
    std::fs::write(nm.join("pkg7/lib/util/deep/.env"), "S")?;
    Ok(())
}

fn main() -> Result<()> {
    let Args {
        files,
        dirs,
        nm_files,
        reps,
    } = clap::Parser::parse();
    let reps = reps.max(1);
    let tmp = tempfile::Builder::new()
        .prefix("envgit-secret-search-")
        .tempdir()?;
    let root = tmp.path().join("tree");
    eprintln!("generating {files} files in {dirs} directories…");
    let tree = r#gen::generate(
        &root,
        &r#gen::Spec {
            files,
            dirs,
            seed: 1,
            skew: 0.9,
        },
    )?;
    node_modules(&root, nm_files)?;
    let deep = root.join("a/b/c/d/e/f/g/h/i/j");
    std::fs::create_dir_all(&deep)?;
    std::fs::write(deep.join(".env"), "S")?;
    std::fs::write(root.join(".env"), "S")?;
    let store = Store::create(&tmp.path().join("store"), &root)?;
    let config =
        ScanConfig::new(&["node_modules/".to_string()], 100 << 20)?.with_budget(Some(20 << 30));
    let mut wt = WorkTree::new(&root, config, None)?;
    // Past the racy-timestamp margin, so the scans below trust their stat cache as a real
    // step's would.
    std::thread::sleep(Duration::from_millis(2500));
    eprintln!("first scan…");
    wt.full_scan(&store, None)?;
    let (scan, _) = p50(
        || {
            wt.full_scan(&store, None)?;
            Ok(0)
        },
        reps.min(5),
    )?;
    let policy = envgit_policy::Policy::default();
    let (before, before_found) = p50(
        || {
            let mut found = 0;
            old_walk(&root, 6, &mut found);
            Ok(found)
        },
        reps,
    )?;
    // What the plan's search finds: with the excluded directories listed or not, with the
    // listing cache or without.
    let cache = tmp.path().join("listing.cache");
    let search = |unwalked: bool, cache: Option<&Path>| {
        let index = Index { wt: &wt, unwalked };
        let f = project_facts(&policy, &root, &index, cache, None).map_err(anyhow::Error::msg)?;
        Ok(f.secrets.len())
    };
    let (index_only, _) = p50(|| search(false, None), reps)?;
    let (after, after_found) = p50(|| search(true, None), reps)?;
    let (cached, _) = p50(|| search(true, Some(&cache)), reps)?;
    let (stat_nm, _) = p50(|| Ok(list_and_stat(&root.join("node_modules"))), reps)?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "tree: {} files in {} directories ({:.0} MiB), node_modules/: {nm_files} files (excluded); \
         .env files planted: at the root, 10 levels deep, 5 levels into node_modules/; \
         p50 of {reps}, hot cache",
        tree.files.len(),
        tree.dir_count,
        tree.bytes as f64 / (1 << 20) as f64
    );
    println!(
        "pre-step scan, unchanged tree (every step pays it)   {:8.1} ms",
        ms(scan)
    );
    println!(
        "before: walk of the project, 6 levels               {:8.1} ms  found {before_found} of 3",
        ms(before)
    );
    println!(
        "after: stat index only                              {:8.1} ms",
        ms(index_only)
    );
    println!(
        "after: stat index + listing of node_modules/, afresh {:7.1} ms  found {after_found} of 3",
        ms(after)
    );
    println!(
        "after: the same, unchanged directories from the cache {:6.1} ms",
        ms(cached)
    );
    println!(
        "anchor: read_dir + lstat of every node_modules/ file {:7.1} ms",
        ms(stat_nm)
    );
    Ok(())
}
