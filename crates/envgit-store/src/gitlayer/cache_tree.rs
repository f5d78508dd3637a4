//! The step's cache-tree checked against its entries, as git's own `verify_cache_tree` checks
//! it. git trusts a valid node when it writes a tree (`git commit`, `git write-tree`, `git
//! stash`): it takes the node's tree and skips as many entries as the node counts, so a node
//! naming the agent's `.husky` tree while the entries hold the person's goes into the
//! person's next commit, and `git status` (which compares by the node) shows nothing. Every
//! node the step changed must therefore be the tree git would build from the entries below
//! it, with the nodes below it taken as git takes them (those the step changed are checked
//! in turn, the others are the host's own). Computed here, in-process: no `git` runs.

use sha1::Digest;

use super::index::Entry;
use super::index_extensions::CacheTree;

/// The first node of `nodes` that `before` (the host's index) did not hold as it is, whose
/// count or tree is not what git would build from `entries` (in git's order): why the index
/// may not reach the host. `hashsz` says which hash names the objects.
pub fn lie(
    entries: &[Entry],
    nodes: &CacheTree,
    before: &CacheTree,
    hashsz: usize,
) -> Option<String> {
    let build = Build { nodes, hashsz };
    for (dir, node) in nodes {
        if before.get(dir) == Some(node) {
            continue;
        }
        let below = entries_below(entries, dir);
        // A node below which no entry lies is never read by git.
        if below.is_empty() && !dir.is_empty() {
            continue;
        }
        let prefix = if dir.is_empty() { 0 } else { dir.len() + 1 };
        let made = build.tree(below, prefix);
        let honest = made
            .as_ref()
            .is_some_and(|(count, id)| *count == node.0 && super::verify::to_hex(id) == node.1);
        if !honest {
            let shown = if dir.is_empty() {
                "the root".to_string()
            } else {
                format!("`{}`", String::from_utf8_lossy(dir).escape_debug())
            };
            return Some(format!(
                "its cache-tree gives {shown} a tree its entries do not make: the host's next \
                 `git commit` would take that tree for it, unseen by `git status`"
            ));
        }
    }
    None
}

/// The entries below `dir` (all of them for the root): a run, since git's order is the
/// paths' bytes.
fn entries_below<'a>(entries: &'a [Entry], dir: &[u8]) -> &'a [Entry] {
    if dir.is_empty() {
        return entries;
    }
    let prefix = [dir, b"/"].concat();
    let start = entries.partition_point(|e| e.path.as_slice() < prefix.as_slice());
    let len = entries[start..].partition_point(|e| e.path.starts_with(&prefix));
    &entries[start..start + len]
}

struct Build<'a> {
    nodes: &'a CacheTree,
    hashsz: usize,
}

impl Build<'_> {
    /// What git's `update_one` makes of `entries`, all below the directory whose path with its
    /// `/` is `prefix` bytes long: how many entries it covers and the tree's id. `None` where
    /// git leaves the node invalid (an unmerged or intent-to-add entry below it).
    fn tree(&self, entries: &[Entry], prefix: usize) -> Option<(u64, Vec<u8>)> {
        // The directory is a sparse index's entry of its own (`dir/`): one entry, its tree.
        if let [e] = entries
            && e.path.len() == prefix
            && e.mode == 0o40000
            && e.stage == 0
        {
            return Some((1, e.oid.clone()));
        }
        let mut listing = Vec::new();
        let mut count = 0u64;
        let mut i = 0;
        while let Some(e) = entries.get(i) {
            if e.stage != 0 || e.intent_to_add {
                return None;
            }
            let rest = e.path.get(prefix..)?;
            match rest.iter().position(|&b| b == b'/') {
                // A sparse index's directory entry: a tree by its own id.
                Some(slash) if slash + 1 == rest.len() => {
                    push(&mut listing, 0o40000, &rest[..slash], &e.oid);
                    count += 1;
                    i += 1;
                }
                Some(slash) => {
                    let dir = &e.path[..prefix + slash];
                    let below = entries_below(&entries[i..], dir);
                    let (n, id) = match self.nodes.get(dir) {
                        Some((n, hex)) => (*n, from_hex(hex)?),
                        None => self.tree(below, prefix + slash + 1)?,
                    };
                    push(&mut listing, 0o40000, &rest[..slash], &id);
                    count += n;
                    i += below.len().max(1);
                }
                None => {
                    push(&mut listing, e.mode, rest, &e.oid);
                    count += 1;
                    i += 1;
                }
            }
        }
        Some((count, self.hash(&listing)))
    }

    fn hash(&self, listing: &[u8]) -> Vec<u8> {
        let header = format!("tree {}\0", listing.len());
        if self.hashsz == 32 {
            let mut h = sha2::Sha256::new();
            h.update(header.as_bytes());
            h.update(listing);
            h.finalize().to_vec()
        } else {
            let mut h = sha1::Sha1::new();
            h.update(header.as_bytes());
            h.update(listing);
            h.finalize().to_vec()
        }
    }
}

/// One entry of a tree object: `<mode in octal> <name>\0<id>`.
fn push(listing: &mut Vec<u8>, mode: u32, name: &[u8], id: &[u8]) {
    listing.extend_from_slice(format!("{mode:o} ").as_bytes());
    listing.extend_from_slice(name);
    listing.push(0);
    listing.extend_from_slice(id);
}

fn from_hex(hex: &str) -> Option<Vec<u8>> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitlayer::index::{all_entries, walk};
    use crate::gitlayer::index_extensions::cache_tree;
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// A repository with files, an executable, a link, a gitlink and nested directories,
    /// its cache-tree made whole by `git write-tree`.
    fn repo(object_format: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(
            d,
            &["init", "-q", &format!("--object-format={object_format}")],
        );
        for (path, text) in [
            ("a.txt", "a"),
            ("a/b.txt", "b"),
            ("a-b/c", "c"),
            ("dir/sub/deeper/d.txt", "d"),
            ("dir/e.sh", "e"),
            (".husky/pre-commit", "exit 0"),
        ] {
            std::fs::create_dir_all(d.join(path).parent().unwrap()).unwrap();
            std::fs::write(d.join(path), text).unwrap();
        }
        std::os::unix::fs::symlink("a.txt", d.join("dir/link")).unwrap();
        git(d, &["add", "."]);
        git(d, &["update-index", "--chmod=+x", "dir/e.sh"]);
        let commit = "1".repeat(if object_format == "sha256" { 64 } else { 40 });
        git(
            d,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{commit},vendor/lib"),
            ],
        );
        git(d, &["write-tree"]);
        tmp
    }

    fn read(d: &Path, hashsz: usize) -> (Vec<Entry>, CacheTree) {
        let data = std::fs::read(d.join(".git/index")).unwrap();
        let tail = walk(&data, hashsz, |_| Ok(())).unwrap();
        let nodes = cache_tree(tail.cache_tree.expect("no cache-tree"), hashsz).unwrap();
        let entries = all_entries(&data, hashsz, &|_| None).unwrap();
        (entries, nodes)
    }

    #[test]
    fn a_cache_tree_git_wrote_is_the_tree_its_entries_make() {
        for (format, hashsz) in [("sha1", 20), ("sha256", 32)] {
            let tmp = repo(format);
            let (entries, nodes) = read(tmp.path(), hashsz);
            assert!(nodes.len() >= 7, "{nodes:?}");
            assert_eq!(lie(&entries, &nodes, &CacheTree::new(), hashsz), None);
        }
    }

    #[test]
    fn a_node_naming_another_tree_or_count_is_a_lie() {
        let tmp = repo("sha1");
        let (entries, nodes) = read(tmp.path(), 20);
        let other = nodes[&b"a"[..]].1.clone();
        for (dir, node) in [
            (&b".husky"[..], (1, other.clone())),
            (b"dir/sub", (2, nodes[&b"dir/sub"[..]].1.clone())),
            (b"", (nodes[&b""[..]].0, other)),
        ] {
            let mut lying = nodes.clone();
            lying.insert(dir.to_vec(), node);
            let why = lie(&entries, &lying, &CacheTree::new(), 20).expect("believed");
            assert!(why.contains("cache-tree"), "{why}");
            // A node the host's own index held is the host's: not judged again.
            assert_eq!(lie(&entries, &lying, &lying, 20), None);
        }
    }

    #[test]
    fn a_sparse_index_and_an_intent_to_add_are_read_as_git_reads_them() {
        let tmp = repo("sha1");
        let d = tmp.path();
        git(d, &["commit", "-q", "-m", "one", "--no-verify"]);
        git(
            d,
            &["sparse-checkout", "set", "--cone", "--sparse-index", "a"],
        );
        git(d, &["write-tree"]);
        let (entries, nodes) = read(d, 20);
        assert!(entries.iter().any(|e| e.mode == 0o40000), "not sparse");
        assert_eq!(lie(&entries, &nodes, &CacheTree::new(), 20), None);

        let tmp = repo("sha1");
        let d = tmp.path();
        std::fs::write(d.join("a/new.txt"), "n").unwrap();
        git(d, &["add", "-N", "a/new.txt"]);
        git(d, &["write-tree"]);
        let (entries, nodes) = read(d, 20);
        assert!(!nodes.contains_key(&b"a"[..]), "{nodes:?}");
        assert_eq!(lie(&entries, &nodes, &CacheTree::new(), 20), None);
    }
}
