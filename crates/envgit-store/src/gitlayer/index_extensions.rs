//! The two extensions of git's index that name content by path beside the entries, read as
//! git reads them (`cache-tree.c`'s `read_one`, `resolve-undo.c`'s `resolve_undo_read`):
//!
//! - the cache-tree (`TREE`): for each directory, how many entries lie below it and, when
//!   that count is not negative, the tree they make. `git commit`, `git write-tree` and
//!   `git stash` take a valid node's tree as it is, and `git status` and `git reset --hard`
//!   skip what lies below a node whose tree matches `HEAD`'s: a node naming other content
//!   than the entries goes into the person's next commit unseen.
//! - the resolve-undo records (`REUC`): for a conflict the index resolved, the modes and
//!   blobs of its three stages, which `git checkout -m` and `git update-index --unresolve`
//!   bring back into the index and the working tree.
//!
//! git drops an extension it cannot read; here one that does not read strictly as git writes
//! it is an `Err`, and the index it came in is not believed.

use std::collections::BTreeMap;

/// The valid cache-tree nodes: directory path (`""` for the root, no trailing `/`) → how many
/// entries lie below it and the tree they make (object id in hex). Invalid nodes (a negative
/// count) name nothing and are left out.
pub type CacheTree = BTreeMap<Vec<u8>, (u64, String)>;

/// The valid nodes of the cache-tree extension `body` whose ids are `hashsz` bytes.
pub fn cache_tree(body: &[u8], hashsz: usize) -> Result<CacheTree, String> {
    const BAD: &str = "a cache-tree (TREE) git did not write";
    let mut out = CacheTree::new();
    let mut at = 0usize;
    // The path of each open node and how many of its subtrees are still to come.
    let mut open: Vec<(Vec<u8>, u64)> = Vec::new();
    loop {
        let nul = body[at..].iter().position(|&b| b == 0).ok_or(BAD)?;
        let name = &body[at..at + nul];
        at += nul + 1;
        let nl = body[at..].iter().position(|&b| b == b'\n').ok_or(BAD)?;
        let counts = std::str::from_utf8(&body[at..at + nl]).map_err(|_| BAD)?;
        at += nl + 1;
        let (entries, subtrees) = counts.split_once(' ').ok_or(BAD)?;
        let entries: i64 = entries.parse().map_err(|_| BAD)?;
        let subtrees: u64 = subtrees.parse().map_err(|_| BAD)?;
        let path = match open.last() {
            None if name.is_empty() => Vec::new(),
            // git looks subtrees up by one component: a name it could never match, or a root
            // with a name, is not one git wrote.
            None => return Err(BAD.into()),
            Some(_) if name.is_empty() || name.contains(&b'/') => return Err(BAD.into()),
            Some((parent, _)) if parent.is_empty() => name.to_vec(),
            Some((parent, _)) => [parent.as_slice(), b"/", name].concat(),
        };
        if let Ok(count) = u64::try_from(entries) {
            let id = body.get(at..at + hashsz).ok_or(BAD)?;
            out.insert(path.clone(), (count, super::verify::to_hex(id)));
            at += hashsz;
        }
        open.push((path, subtrees));
        // Close every node whose subtrees have all been read.
        while let Some((_, 0)) = open.last() {
            open.pop();
            match open.last_mut() {
                Some((_, left)) => *left -= 1,
                None => return Ok(out),
            }
        }
    }
}

/// A resolve-undo record's stages 1 to 3: mode and object id (hex), `None` for an absent one.
pub type Stages = [Option<(u32, String)>; 3];

/// The records of the resolve-undo extension `body` whose ids are `hashsz` bytes, by path
/// (a later record for the same path replaces an earlier one, as in git's list).
pub fn resolve_undo(body: &[u8], hashsz: usize) -> Result<BTreeMap<Vec<u8>, Stages>, String> {
    const BAD: &str = "resolve-undo records (REUC) git did not write";
    let mut out = BTreeMap::new();
    let mut at = 0usize;
    while at < body.len() {
        let nul = body[at..].iter().position(|&b| b == 0).ok_or(BAD)?;
        let path = body[at..at + nul].to_vec();
        at += nul + 1;
        let mut modes = [0u32; 3];
        for mode in &mut modes {
            let nul = body[at..].iter().position(|&b| b == 0).ok_or(BAD)?;
            let text = std::str::from_utf8(&body[at..at + nul]).map_err(|_| BAD)?;
            *mode = u32::from_str_radix(text, 8).map_err(|_| BAD)?;
            at += nul + 1;
        }
        let mut stages: Stages = Default::default();
        for (stage, mode) in stages.iter_mut().zip(modes) {
            if mode != 0 {
                let id = body.get(at..at + hashsz).ok_or(BAD)?;
                *stage = Some((mode, super::verify::to_hex(id)));
                at += hashsz;
            }
        }
        out.insert(path, stages);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, entries: i64, subtrees: u64, id: Option<u8>) -> Vec<u8> {
        let mut v = format!("{name}\0{entries} {subtrees}\n").into_bytes();
        if let Some(b) = id {
            v.extend([b; 20]);
        }
        v
    }

    #[test]
    fn a_cache_tree_is_read_by_full_paths_with_its_invalid_nodes_left_out() {
        let body = [
            node("", 3, 2, Some(1)),
            node("a", -1, 1, None),
            node("b", 1, 0, Some(2)),
            node(".husky", 1, 0, Some(3)),
        ]
        .concat();
        let t = cache_tree(&body, 20).unwrap();
        let paths: Vec<&[u8]> = t.keys().map(Vec::as_slice).collect();
        assert_eq!(paths, [&b""[..], b".husky", b"a/b"]);
        assert_eq!(t[&b".husky"[..]], (1, "03".repeat(20)));
    }

    #[test]
    fn a_cache_tree_git_did_not_write_is_not_read() {
        for body in [
            node("x", 1, 0, Some(1)),
            [node("", 1, 1, Some(1)), node("a/b", 1, 0, Some(2))].concat(),
            [node("", 1, 2, Some(1)), node("a", 1, 0, Some(2))].concat(),
            node("", 1, 0, None),
            b"\0one two\n".to_vec(),
        ] {
            assert!(cache_tree(&body, 20).is_err(), "{body:?}");
        }
    }

    #[test]
    fn resolve_undo_records_as_git_writes_them() {
        let mut body = [".husky/pre-commit", "100755", "0", "100644", ""]
            .join("\0")
            .into_bytes();
        body.extend([7; 20]);
        body.extend([8; 20]);
        let r = resolve_undo(&body, 20).unwrap();
        let stages = &r[&b".husky/pre-commit"[..]];
        assert_eq!(stages[0], Some((0o100755, "07".repeat(20))));
        assert_eq!(stages[1], None);
        assert_eq!(stages[2], Some((0o100644, "08".repeat(20))));
        let record = |parts: &[&str]| parts.join("\0").into_bytes();
        assert!(resolve_undo(&record(&["p", "100644", ""]), 20).is_err());
        assert!(resolve_undo(&record(&["p", "100644", "x", "0", ""]), 20).is_err());
    }
}
