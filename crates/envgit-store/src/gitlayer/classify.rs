//! What a path inside `.git` is to the import: data git reads, or something git would run or
//! follow. An allow-list: anything not named here is dropped.

/// How the import treats one path of the upper layer (relative to `.git`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Uniquely named and immutable (a split index's shared part, reftable tables, a pack's
    /// `.keep`, `.promisor` and `.mtimes`): written only when absent.
    Object,
    /// A loose object, `objects/xx/<rest of its id>`: written only when absent, and only when
    /// its content hashes to its name (git trusts the name when it reads one).
    Loose,
    /// A Git LFS object, `lfs/objects/xx/yy/<its SHA-256>`: written only when absent, and only
    /// when its content hashes to its name (git-lfs's smudge filter trusts the name: it writes
    /// that file's bytes into the working tree for a pointer the user trusts).
    LfsObject,
    /// A pack, `objects/pack/pack-<hash>.pack`: given to the host's `git index-pack`, which
    /// names every object by its content; the step's own `.idx` is never taken (an index that
    /// gives an object the host has other content would make the host read that content).
    Pack,
    /// What the host's git derives from the objects and rebuilds itself (a pack's `.idx`,
    /// `.rev` and `.bitmap`, the multi-pack index, commit-graphs, `objects/info/packs`,
    /// `info/refs`):
    /// never imported, and not news. Each maps ids to content or history, so a forged one
    /// would make the host read what the step chose.
    Derived,
    /// Plain data (logs, the `*_HEAD` files, messages): written as is.
    Data,
    /// Refs, `packed-refs`, reftable's `tables.list`, the index, `shallow`: written
    /// compare-and-swap against the pre-step content.
    Cas,
    /// `HEAD`: compare-and-swap, and only when it is a symbolic ref or an object id.
    Head,
    /// `config`: key by key through the allow-list.
    Config,
}

/// Top-level files git writes as data during ordinary work.
const TOP_DATA: &[&str] = &[
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "SQUASH_MSG",
    "COMMIT_EDITMSG",
    "AUTO_MERGE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "description",
];

/// The top-level data files that name commits (or, `AUTO_MERGE`, a tree) the person's git
/// checks out by name: `git reset --hard ORIG_HEAD` is git's own "undo".
const PSEUDO_REFS: &[&str] = &[
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "AUTO_MERGE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
];

/// Whether the data file `rel` names commits the person's git checks out by name: a
/// pseudo-ref, or a reflog (`git reset --hard HEAD@{1}`). What it names is judged as a
/// ref's commit is, and it stays out with the refs.
pub fn names_commits(rel: &str) -> bool {
    PSEUDO_REFS.contains(&rel) || rel.starts_with("logs/")
}

/// Whether `rel` is git's own run-time bookkeeping, left by a git process the step's end
/// killed: a `*.lock` (on the host it would block the user's own git: "Unable to create
/// ….lock: File exists"), a detached `gc --auto`'s `gc.pid` (it would hold off the host's gc)
/// and `gc.log` (git refuses to auto-gc for a day while it exists). Never imported, and not
/// news either: no warning, no refusal.
pub fn is_leftover(rel: &str) -> bool {
    rel.ends_with(".lock")
        || rel == "gc.pid"
        || rel == "gc.log"
        // The temporary files git writes objects and packs through (`tmp_obj_*`, `tmp_pack_*`).
        || (rel.starts_with("objects/") && rel.rsplit('/').next().is_some_and(|n| n.starts_with("tmp_")))
}

/// The commits git takes for having no parents (a shallow clone's boundary): its history
/// stops there, so written compare-and-swap, and never naming a commit the repository had.
pub const SHALLOW: &str = "shallow";

/// The list of a reftable repository's tables (`--ref-format=reftable`): its refs, as
/// `packed-refs` is for the files backend, so written compare-and-swap.
pub const REFTABLE_LIST: &str = "reftable/tables.list";

/// A split index's shared part (`core.splitIndex`): `sharedindex.<hash>`, named by its
/// content like an object, and named in turn by the index, so it must arrive before it.
pub fn is_shared_index(rel: &str) -> bool {
    rel.strip_prefix("sharedindex.").is_some_and(is_object_id)
}

/// One table of a reftable repository, `reftable/0x<min>-0x<max>-<random>.ref`: written once
/// under a new name, never changed, and named by `tables.list`, so it must arrive before it.
fn is_reftable_table(rel: &str) -> bool {
    let Some(name) = rel
        .strip_prefix("reftable/")
        .and_then(|n| n.strip_suffix(".ref"))
    else {
        return false;
    };
    let hex = |s: &str, min: usize| s.len() >= min && s.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = name.split('-').collect();
    matches!(parts.as_slice(), [lo, hi, random]
        if lo.strip_prefix("0x").is_some_and(|h| hex(h, 12))
            && hi.strip_prefix("0x").is_some_and(|h| hex(h, 12))
            && random.len() == 8 && hex(random, 8))
}

/// Whether `tables.list` names only reftable tables (git opens each beneath `reftable/`).
pub fn valid_tables_list(content: &[u8]) -> bool {
    std::str::from_utf8(content).is_ok_and(|text| {
        text.lines()
            .all(|name| is_reftable_table(&format!("reftable/{name}")))
    })
}

/// The object ids a `shallow` file lists, or `None` when a line is not one.
pub fn shallow_ids(content: &[u8]) -> Option<std::collections::BTreeSet<String>> {
    let text = std::str::from_utf8(content).ok()?;
    text.lines()
        .map(|l| is_object_id(l).then(|| l.to_ascii_lowercase()))
        .collect()
}

/// The oid of `xx/yy/<oid>` below `lfs/objects/`: a SHA-256 in lowercase hex, stored under its
/// first two pairs of digits.
pub fn lfs_oid(rest: &str) -> Option<&str> {
    let (a, rest) = rest.split_once('/')?;
    let (b, oid) = rest.split_once('/')?;
    (oid.len() == 64
        && oid.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        && oid.get(..2) == Some(a)
        && oid.get(2..4) == Some(b))
    .then_some(oid)
}

/// A SHA-1 or SHA-256 object id in hex.
fn is_object_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The class of `rel`, or why it is dropped.
pub fn classify(rel: &str) -> Result<Class, &'static str> {
    if is_leftover(rel) {
        return Err("git's run-time bookkeeping of a process that did not finish");
    }
    if rel == "HEAD" {
        return Ok(Class::Head);
    }
    if rel.starts_with("refs/replace/") {
        return Err(
            "a replace ref makes the host's git read other content for an object the user trusts",
        );
    }
    if rel == "index"
        || rel == "packed-refs"
        || rel == REFTABLE_LIST
        || rel == SHALLOW
        || rel.starts_with("refs/")
    {
        return Ok(Class::Cas);
    }
    if rel == "config" {
        return Ok(Class::Config);
    }
    if rel == "objects/info/alternates" || rel == "objects/info/http-alternates" {
        return Err("alternates make git read objects from a directory the step chose");
    }
    if let Some(rest) = rel.strip_prefix("objects/") {
        return objects_class(rest);
    }
    // The refs listed for dumb HTTP clients, written by `git gc` (`update-server-info`).
    if rel == "info/refs" {
        return Ok(Class::Derived);
    }
    if is_shared_index(rel) || is_reftable_table(rel) {
        return Ok(Class::Object);
    }
    if let Some(rest) = rel.strip_prefix("lfs/objects/") {
        return if lfs_oid(rest).is_some() {
            Ok(Class::LfsObject)
        } else {
            Err("it is not a Git LFS object (lfs/objects/xx/yy/<its SHA-256>)")
        };
    }
    if rel.starts_with("logs/") || TOP_DATA.contains(&rel) {
        return Ok(Class::Data);
    }
    let top = rel.split('/').next().unwrap_or(rel);
    Err(match top {
        "hooks" => "hooks run on the host",
        "commondir" | "worktrees" => "it points git at another repository directory",
        "config.worktree" => "it is git configuration outside the allow-list",
        "info" => "info/ (attributes, exclude, sparse-checkout) is not data the step may change",
        "rebase-merge" | "rebase-apply" | "sequencer" => {
            "its todo lines can carry `exec` commands the next `git rebase --continue` runs"
        }
        "modules" => "a submodule's git directory carries its own config and hooks",
        _ => "it is not a git data file",
    })
}

/// Whether `rel` is in a repository's object store (and not its alternates, which point
/// elsewhere): a nested repository's object data stays as the step left it.
pub fn is_object_store_path(rel: &str) -> bool {
    (rel == "objects" || rel.starts_with("objects/"))
        && !matches!(
            rel,
            "objects/info/alternates" | "objects/info/http-alternates"
        )
}

/// The class of `objects/<rest>`.
fn objects_class(rest: &str) -> Result<Class, &'static str> {
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some((dir, name)) = rest.split_once('/')
        && dir.len() == 2
        && hex(dir)
        && is_object_id(&format!("{dir}{name}"))
    {
        return Ok(Class::Loose);
    }
    if rest == "info/packs"
        || rest == "info/commit-graph"
        || rest.starts_with("info/commit-graphs/")
        || rest.starts_with("pack/multi-pack-index")
    {
        return Ok(Class::Derived);
    }
    if let Some((hash, ext)) = rest
        .strip_prefix("pack/pack-")
        .and_then(|n| n.split_once('.'))
        && is_object_id(hash)
    {
        return match ext {
            "pack" => Ok(Class::Pack),
            "idx" | "rev" | "bitmap" => Ok(Class::Derived),
            "keep" | "promisor" | "mtimes" => Ok(Class::Object),
            _ => Err("it is not a file git keeps beside a pack"),
        };
    }
    Err("it is not a git object, a pack or a file git derives from them")
}

/// Whether `HEAD`'s content is a symbolic ref under `refs/` or a bare object id.
pub fn valid_head(content: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(content) else {
        return false;
    };
    let s = s.strip_suffix('\n').unwrap_or(s);
    if let Some(r) = s.strip_prefix("ref: refs/") {
        return !r.is_empty()
            && !r.contains("..")
            && r.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    }
    is_object_id(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(classify("refs/heads/main"), Ok(Class::Cas));
        assert!(classify(&format!("refs/replace/{}", "0a".repeat(20))).is_err());
        let id = "0a".repeat(20);
        assert_eq!(
            classify(&format!("objects/0a/{}", &id[2..])),
            Ok(Class::Loose)
        );
        assert_eq!(
            classify(&format!("objects/0a/{}", "b".repeat(62))),
            Ok(Class::Loose)
        );
        assert!(classify("objects/ab/cdef").is_err());
        assert!(classify("objects/incoming-x/pack/a.pack").is_err());
        assert_eq!(
            classify(&format!("objects/pack/pack-{id}.pack")),
            Ok(Class::Pack)
        );
        assert_eq!(
            classify(&format!("objects/pack/pack-{id}.idx")),
            Ok(Class::Derived)
        );
        assert_eq!(
            classify(&format!("objects/pack/pack-{id}.keep")),
            Ok(Class::Object)
        );
        assert!(classify(&format!("objects/pack/pack-{id}.sh")).is_err());
        assert!(classify("objects/pack/pack-1.pack").is_err());
        assert_eq!(classify("objects/info/commit-graph"), Ok(Class::Derived));
        assert_eq!(
            classify("objects/pack/multi-pack-index"),
            Ok(Class::Derived)
        );
        assert!(classify("objects/info/alternates").is_err());
        assert!(classify("hooks/pre-commit").is_err());
        assert!(classify("commondir").is_err());
        assert!(classify("config.worktree").is_err());
        assert!(classify("rebase-merge/git-rebase-todo").is_err());
        assert!(classify("brand-new").is_err());
        assert!(classify("refs/heads/main.lock").is_err());
        assert!(classify("index.lock").is_err());
        assert!(classify("gc.pid").is_err());
        assert!(is_leftover("gc.pid") && is_leftover("gc.log"));
        assert!(is_leftover("refs/heads/main.lock") && is_leftover("index.lock"));
        assert!(!is_leftover("hooks/pre-commit") && !is_leftover("gc.pid.sh"));
        assert!(is_leftover("objects/pack/tmp_pack_x1Y2") && is_leftover("objects/0a/tmp_obj_Q"));
        assert_eq!(classify("logs/HEAD"), Ok(Class::Data));
        assert!(names_commits("logs/refs/heads/main") && names_commits("ORIG_HEAD"));
        assert!(!names_commits("MERGE_MSG") && !names_commits("description"));
        assert!(PSEUDO_REFS.iter().all(|p| TOP_DATA.contains(p)));
        let oid = format!("ab12{}", "0".repeat(60));
        assert_eq!(
            classify(&format!("lfs/objects/ab/12/{oid}")),
            Ok(Class::LfsObject)
        );
        assert!(classify(&format!("lfs/objects/ab/13/{oid}")).is_err());
        assert!(classify("lfs/objects/ab/12/x").is_err());
        assert!(classify("lfs/tmp/x").is_err());
        assert_eq!(classify("shallow"), Ok(Class::Cas));
        let id = "0a".repeat(20);
        assert_eq!(shallow_ids(format!("{id}\n").as_bytes()), Some([id].into()));
        assert_eq!(shallow_ids(b""), Some(Default::default()));
        assert_eq!(shallow_ids(b"HEAD\n"), None);
        let shared = format!("sharedindex.{}", "0a".repeat(20));
        assert_eq!(classify(&shared), Ok(Class::Object));
        assert!(classify("sharedindex.0a").is_err());
        assert!(classify("sharedindex.../hooks/pre-commit").is_err());
        assert_eq!(classify("reftable/tables.list"), Ok(Class::Cas));
        let table = "reftable/0x000000000001-0x000000000003-eb83fee2.ref";
        assert_eq!(classify(table), Ok(Class::Object));
        assert!(classify("reftable/0x1-0x3-eb83fee2.ref").is_err());
        assert!(classify("reftable/../hooks/0x000000000001-0x000000000003-eb83fee2.ref").is_err());
        assert!(classify("reftable/notes").is_err());
        assert!(valid_tables_list(
            b"0x000000000001-0x000000000003-eb83fee2.ref\n"
        ));
        assert!(valid_tables_list(b""));
        assert!(!valid_tables_list(
            b"0x000000000001-0x000000000003-eb83fee2.ref\n../../x\n"
        ));
        assert!(valid_head(b"ref: refs/heads/main\n"));
        assert!(valid_head(b"0123456789012345678901234567890123456789\n"));
        assert!(!valid_head(b"ref: ../../etc\n"));
        assert!(!valid_head(b"gitdir: /tmp/x\n"));
    }
}
