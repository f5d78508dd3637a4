//! Git's index (`.git/index`, and a split index's `sharedindex.<hash>`), read as git reads it:
//! the host's git trusts every entry of an index it reads (it runs no `verify_path` there), and
//! writes an entry's blob at its path on `git restore`, `git checkout -- .`, `git stash`, …, so
//! an index naming `.git/hooks/pre-commit` would plant a hook. An index from the step is taken
//! only when every path in it is one git itself would have let into an index (`verify_path`),
//! and (see `import`) when it leaves the entries of the protected paths as they were.
//!
//! Versions 2, 3 and 4 (prefix-compressed paths); of the extensions after the entries, those
//! that name paths or objects the host's git acts on are kept for the caller ([`Tail`]): a
//! split index's `link`, the cache-tree (`TREE`) and the resolve-undo records (`REUC`, see
//! `index_extensions`). No crate in the workspace's lock reads the format.

use std::collections::BTreeMap;

use super::index_extensions::{self, CacheTree};

/// One entry: its path, mode, stage, object id (raw bytes), and whether it is only an intent
/// to add (`git add -N`: in no tree git writes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    pub path: Vec<u8>,
    pub mode: u32,
    pub stage: u8,
    pub oid: Vec<u8>,
    pub intent_to_add: bool,
}

/// A split index's `link` extension: the shared index it builds on (hex), and the positions
/// in it its delete and replace bitmaps name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Link {
    pub shared: String,
    pub delete: Vec<usize>,
    pub replace: Vec<usize>,
}

/// The hash sizes git knows (SHA-1, SHA-256). The index does not say which one it uses (the
/// repository's `extensions.objectFormat` does): every one it can be read with is checked,
/// unless the repository's configuration rules SHA-256 out ([`hash_sizes`]).
pub const HASH_SIZES: &[usize] = &[20, 32];

/// The hash sizes an index of the repository whose `config` holds these bytes can use: SHA-1
/// alone when no line mentions an object format (git's default) nor an include (git reads
/// the format from the file itself, but a guess is never made here on its behalf); both
/// otherwise. A cheap look, so a 20,000-entry index is not read twice for nothing.
pub fn hash_sizes(config: Option<&[u8]>) -> &'static [usize] {
    let Some(text) = config else {
        return HASH_SIZES;
    };
    let lower = text.to_ascii_lowercase();
    let mentions = |word: &[u8]| lower.windows(word.len()).any(|w| w == word);
    if mentions(b"objectformat") || mentions(b"include") {
        HASH_SIZES
    } else {
        &HASH_SIZES[..1]
    }
}

fn be32(d: &[u8], at: usize) -> Result<u32, String> {
    d.get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| "it ends inside an entry".to_string())
}

fn be16(d: &[u8], at: usize) -> Result<u16, String> {
    d.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| "it ends inside an entry".to_string())
}

/// git's `decode_varint` (version 4's prefix lengths): the value and the bytes it took.
fn varint(d: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    let mut c = *d.first()?;
    let mut val = u64::from(c & 127);
    while c & 128 != 0 {
        val = val.checked_add(1)?;
        if val >> 57 != 0 {
            return None;
        }
        i += 1;
        c = *d.get(i)?;
        val = (val << 7) + u64::from(c & 127);
    }
    Some((usize::try_from(val).ok()?, i + 1))
}

/// What an index holds after its entries that the host's git acts on: a split index's `link`,
/// and the bodies of its cache-tree (`TREE`: `git commit` takes a valid node's tree without
/// reading the entries below it) and resolve-undo (`REUC`: `git checkout -m` brings its
/// stages back) extensions.
#[derive(Debug, Default)]
pub struct Tail<'a> {
    pub link: Option<Link>,
    pub cache_tree: Option<&'a [u8]>,
    pub resolve_undo: Option<&'a [u8]>,
}

/// Reads `data` as an index whose object ids are `hashsz` bytes, giving each entry to `each`
/// in order; returns what follows the entries ([`Tail`]). `Err` says why git could not read
/// it so (or why it is read differently by git's threaded loader).
pub fn walk(
    data: &[u8],
    hashsz: usize,
    mut each: impl FnMut(&Entry) -> Result<(), String>,
) -> Result<Tail<'_>, String> {
    if data.len() < 12 + hashsz || &data[..4] != b"DIRC" {
        return Err("it is not a git index (no `DIRC` header)".into());
    }
    let version = be32(data, 4)?;
    if !(2..=4).contains(&version) {
        return Err(format!("index version {version} is none git reads"));
    }
    let count = be32(data, 8)?;
    let end = data.len() - hashsz;
    let mut off = 12;
    let mut entry = Entry::default();
    for i in 0..count {
        let flags_at = off + 40 + hashsz;
        if flags_at + 2 > end {
            return Err("it ends inside an entry".into());
        }
        entry.mode = be32(data, off + 24)?;
        entry.oid.clear();
        entry.oid.extend_from_slice(&data[off + 40..flags_at]);
        let flags = be16(data, flags_at)?;
        entry.stage = ((flags >> 12) & 3) as u8;
        let extended = flags & 0x4000 != 0;
        let mut name_at = flags_at + 2;
        entry.intent_to_add = false;
        if extended {
            let more = be16(data, name_at)?;
            if more & !0x6000 != 0 {
                return Err("an entry has flags git does not know".into());
            }
            entry.intent_to_add = more & 0x2000 != 0;
            name_at += 2;
        }
        let len = usize::from(flags & 0xfff);
        let strlen = |from: usize| -> Result<usize, String> {
            data.get(from..end)
                .and_then(|rest| rest.iter().position(|&b| b == 0))
                .ok_or_else(|| "a path runs past the entries".to_string())
        };
        if version == 4 {
            let (strip, used) =
                varint(data.get(name_at..end).unwrap_or_default()).ok_or("a bad path prefix")?;
            name_at += used;
            // The first entry has no previous one: git ignores its prefix length.
            let copy = if i == 0 {
                0
            } else {
                entry
                    .path
                    .len()
                    .checked_sub(strip)
                    .ok_or("a path prefix longer than the previous path")?
            };
            let suffix = if len == 0xfff {
                strlen(name_at)?
            } else {
                len.checked_sub(copy)
                    .ok_or("a path shorter than its prefix")?
            };
            let bytes = data
                .get(name_at..name_at + suffix)
                .filter(|_| name_at + suffix < end)
                .ok_or("a path runs past the entries")?;
            entry.path.truncate(copy);
            entry.path.extend_from_slice(bytes);
            off = name_at + suffix + 1;
        } else {
            let len = if len == 0xfff { strlen(name_at)? } else { len };
            let bytes = data
                .get(name_at..name_at + len)
                .filter(|_| name_at + len < end)
                .ok_or("a path runs past the entries")?;
            entry.path.clear();
            entry.path.extend_from_slice(bytes);
            // git's `ondisk_ce_size`: padded with NULs to a multiple of 8.
            let fixed = 40 + hashsz + 2 + if extended { 2 } else { 0 };
            off += (fixed + len + 8) & !7;
        }
        // git reads a path up to its NUL and the entry by its length: they must agree.
        if entry.path.contains(&0) {
            return Err("a path holds a NUL byte".into());
        }
        each(&entry)?;
    }
    let mut tail = Tail::default();
    while off + 8 <= end {
        let sig = &data[off..off + 4];
        let size = usize::try_from(be32(data, off + 4)?).unwrap_or(usize::MAX);
        let body = data
            .get(off + 8..off.saturating_add(8).saturating_add(size))
            .filter(|_| off + 8 + size <= end)
            .ok_or("an extension runs past the end")?;
        match sig {
            b"link" => tail.link = Some(read_link(body, hashsz)?),
            b"TREE" => tail.cache_tree = Some(body),
            b"REUC" => tail.resolve_undo = Some(body),
            // Its blocks' first paths are read without their prefix by git's threaded loader,
            // in order here: the two could differ. git writes it only when asked
            // (`index.recordOffsetTable`).
            b"IEOT" if version == 4 => {
                return Err("a version 4 index with an offset table (IEOT)".into());
            }
            b"sdir" => {}
            // git refuses an index with a required extension it does not know.
            _ if !sig[0].is_ascii_uppercase() => {
                return Err(format!(
                    "an extension git does not know ({})",
                    String::from_utf8_lossy(sig)
                ));
            }
            _ => {}
        }
        off += 8 + size;
    }
    Ok(tail)
}

fn read_link(body: &[u8], hashsz: usize) -> Result<Link, String> {
    let shared = body.get(..hashsz).ok_or("a short link extension")?;
    let mut link = Link {
        shared: super::verify::to_hex(shared),
        ..Link::default()
    };
    let rest = &body[hashsz..];
    if rest.is_empty() {
        return Ok(link);
    }
    let (delete, used) = ewah_bits(rest)?;
    let (replace, used2) = ewah_bits(&rest[used..])?;
    if used + used2 != rest.len() {
        return Err("garbage at the end of the link extension".into());
    }
    link.delete = delete;
    link.replace = replace;
    Ok(link)
}

/// The positions set in an EWAH bitmap as git stores it (`ewah_read_mmap`), and its size.
fn ewah_bits(d: &[u8]) -> Result<(Vec<usize>, usize), String> {
    const BAD: &str = "a bad bitmap in the link extension";
    let words = usize::try_from(be32(d, 4).map_err(|_| BAD)?).map_err(|_| BAD)?;
    let size = words
        .checked_mul(8)
        .and_then(|n| n.checked_add(12))
        .ok_or(BAD)?;
    let buf = d.get(8..8 + words * 8).ok_or(BAD)?;
    if d.len() < size {
        return Err(BAD.into());
    }
    let word = |i: usize| {
        let b = &buf[i * 8..i * 8 + 8];
        u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    };
    // No index has more entries than this: a run beyond it is a lie git would die on.
    const MAX: usize = 1 << 32;
    let mut bits = Vec::new();
    let (mut pos, mut i) = (0usize, 0usize);
    while i < words {
        let rlw = word(i);
        let run = usize::try_from((rlw >> 1) & 0xffff_ffff).map_err(|_| BAD)? * 64;
        if pos.saturating_add(run) > MAX {
            return Err(BAD.into());
        }
        if rlw & 1 != 0 {
            bits.extend(pos..pos + run);
        }
        pos += run;
        i += 1;
        for _ in 0..(rlw >> 33) {
            if i >= words {
                return Err(BAD.into());
            }
            let w = word(i);
            bits.extend((0..64).filter(|c| w & (1 << c) != 0).map(|c| pos + c));
            pos += 64;
            i += 1;
        }
    }
    Ok((bits, size))
}

/// Why git would never have let this index be: an entry whose path fails git's
/// `verify_path` (a `.git` component in any spelling, `.` or `..`, an empty component, a
/// leading or trailing `/`, a `.gitmodules` that is a link), or bytes git cannot read as an
/// index. `shared` gives a split index's shared part by its hash (hex); its entries are
/// checked too. `None`: every path is one git itself writes.
pub fn refusal(
    data: &[u8],
    sizes: &[usize],
    shared: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Option<String> {
    let mut read = false;
    let mut last = None;
    for &hashsz in sizes {
        match check(data, hashsz, shared) {
            Ok(()) => read = true,
            Err(Why::Unreadable(why)) => last = Some(why),
            Err(Why::Path(why)) => return Some(why),
        }
    }
    (!read).then(|| {
        format!(
            "git cannot read it as an index: {}",
            last.unwrap_or_default()
        )
    })
}

enum Why {
    Unreadable(String),
    Path(String),
}

fn check(data: &[u8], hashsz: usize, shared: &dyn Fn(&str) -> Option<Vec<u8>>) -> Result<(), Why> {
    let describe = |e: &Entry| {
        format!(
            "it lists `{}`, a path git never lets into an index (its `verify_path`): \
             the host's `git restore`, `git checkout` or `git stash` would write it there",
            String::from_utf8_lossy(&e.path).escape_debug()
        )
    };
    // Judged only once the whole file reads with this hash size: read with the other one,
    // a good index yields garbage paths.
    let mut bad = None;
    let mut unnamed = None;
    let tail = walk(data, hashsz, |e| {
        if e.path.is_empty() {
            // A split index's replacements carry no name: they take the shared entry's.
            unnamed.get_or_insert_with(|| describe(e));
        } else if bad.is_none() && !verify_path(&e.path, e.mode) {
            bad = Some(describe(e));
        }
        Ok(())
    })
    .map_err(Why::Unreadable)?;
    // `git update-index --unresolve` adds a record's stages as entries.
    if let Some(body) = tail.resolve_undo {
        let records = index_extensions::resolve_undo(body, hashsz).map_err(Why::Unreadable)?;
        if let Some((path, _)) = records.iter().find(|(p, _)| !verify_path(p, 0o100644)) {
            bad = bad.or(Some(describe(&Entry {
                path: path.clone(),
                mode: 0o100644,
                ..Entry::default()
            })));
        }
    }
    let link = tail.link.filter(|l| l.shared.bytes().any(|b| b != b'0'));
    if let Some(link) = link {
        let base = shared(&link.shared).ok_or_else(|| {
            Why::Unreadable(format!(
                "it names sharedindex.{}, which is not there",
                link.shared
            ))
        })?;
        let mut base_bad = None;
        walk(&base, hashsz, |e| {
            if base_bad.is_none() && !verify_path(&e.path, e.mode) {
                base_bad = Some(describe(e));
            }
            Ok(())
        })
        .map_err(|e| Why::Unreadable(format!("its shared index: {e}")))?;
        bad = bad.or(base_bad);
    } else {
        bad = bad.or(unnamed);
    }
    match bad {
        Some(why) => Err(Why::Path(why)),
        None => Ok(()),
    }
}

/// What an index read with `hashsz`-byte ids holds for the protected paths: its entries
/// there, keyed by path and stage (a split index's merged with its shared part's as git
/// merges them; a sparse index's directory entry above a protected path, `dir/`, among them;
/// a resolve-undo record's stages as stages 5 to 7), and its cache-tree's valid nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtectedView {
    pub hashsz: usize,
    pub entries: ProtectedEntries,
    pub cache_tree: CacheTree,
}

/// The stage a resolve-undo record's stage `n` (1 to 3) is kept under in [`ProtectedEntries`].
pub const RESOLVE_UNDO_STAGE: u8 = 4;

/// What the index `data` holds for the paths `protected` names ([`ProtectedView`]), for each
/// hash size the index can be read with. `Err` when it cannot be read.
pub fn protected_entries(
    data: &[u8],
    sizes: &[usize],
    shared: &dyn Fn(&str) -> Option<Vec<u8>>,
    protected: &ProtectedPaths<'_>,
) -> Result<Vec<ProtectedView>, String> {
    let mut out = Vec::new();
    let mut last = String::new();
    for &hashsz in sizes {
        match protected_at(data, hashsz, shared, protected) {
            Ok(e) => out.push(e),
            Err(e) => last = e,
        }
    }
    if out.is_empty() {
        return Err(last);
    }
    Ok(out)
}

/// `(path, stage)` → `(mode, object id in hex)`.
pub type ProtectedEntries = BTreeMap<(Vec<u8>, u8), (u32, String)>;

fn protected_at(
    data: &[u8],
    hashsz: usize,
    shared: &dyn Fn(&str) -> Option<Vec<u8>>,
    protected: &ProtectedPaths<'_>,
) -> Result<ProtectedView, String> {
    let mut own: Vec<(usize, Entry)> = Vec::new();
    let mut n = 0usize;
    let tail = walk(data, hashsz, |e| {
        if e.path.is_empty() || protected.contains(&e.path) {
            own.push((n, e.clone()));
        }
        n += 1;
        Ok(())
    })?;
    let mut view = ProtectedView {
        hashsz,
        ..ProtectedView::default()
    };
    if let Some(body) = tail.cache_tree {
        view.cache_tree = index_extensions::cache_tree(body, hashsz)?;
    }
    if let Some(body) = tail.resolve_undo {
        for (path, stages) in index_extensions::resolve_undo(body, hashsz)? {
            if protected.contains(&path) {
                for (n, stage) in (1u8..).zip(stages) {
                    if let Some(v) = stage {
                        view.entries
                            .insert((path.clone(), RESOLVE_UNDO_STAGE + n), v);
                    }
                }
            }
        }
    }
    let out = &mut view.entries;
    let value = |e: &Entry| (e.mode, super::verify::to_hex(&e.oid));
    let link = tail.link.filter(|l| l.shared.bytes().any(|b| b != b'0'));
    let Some(link) = link else {
        for (_, e) in own {
            out.insert((e.path.clone(), e.stage), value(&e));
        }
        return Ok(view);
    };
    let base = shared(&link.shared)
        .ok_or_else(|| format!("it names sharedindex.{}, which is not there", link.shared))?;
    // git's `merge_base_index`: the shared entries, the k-th replaced one taking the k-th
    // entry of this index (which has no name of its own), those deleted gone, then this
    // index's other entries added over them.
    let mut base_entries: BTreeMap<usize, Entry> = BTreeMap::new();
    let mut pos = 0usize;
    walk(&base, hashsz, |e| {
        if protected.contains(&e.path) || link.replace.contains(&pos) {
            base_entries.insert(pos, e.clone());
        }
        pos += 1;
        Ok(())
    })?;
    let replaced = link.replace.len();
    for (k, at) in link.replace.iter().enumerate() {
        let Some((_, by)) = own.iter().find(|(i, _)| *i == k) else {
            return Err("a replacement the split index does not hold".into());
        };
        if let Some(e) = base_entries.get_mut(at) {
            let path = std::mem::take(&mut e.path);
            *e = Entry { path, ..by.clone() };
        }
    }
    for (at, e) in &base_entries {
        if !link.delete.contains(at) && protected.contains(&e.path) {
            out.insert((e.path.clone(), e.stage), value(e));
        }
    }
    for (i, e) in own {
        if i >= replaced && !e.path.is_empty() {
            out.insert((e.path.clone(), e.stage), value(&e));
        }
    }
    Ok(view)
}

/// Every entry of the index `data` in git's order (path, then stage), a split index's merged
/// with its shared part's as git merges them.
pub fn all_entries(
    data: &[u8],
    hashsz: usize,
    shared: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Result<Vec<Entry>, String> {
    let mut own = Vec::new();
    let tail = walk(data, hashsz, |e| {
        own.push(e.clone());
        Ok(())
    })?;
    let link = tail.link.filter(|l| l.shared.bytes().any(|b| b != b'0'));
    let Some(link) = link else {
        return Ok(own);
    };
    let base = shared(&link.shared)
        .ok_or_else(|| format!("it names sharedindex.{}, which is not there", link.shared))?;
    let mut merged: Vec<Entry> = Vec::new();
    walk(&base, hashsz, |e| {
        merged.push(e.clone());
        Ok(())
    })?;
    // As in `protected_at`: the k-th replaced shared entry takes this index's k-th entry.
    let replaced = link.replace.len();
    for (k, &at) in link.replace.iter().enumerate() {
        let (Some(by), Some(e)) = (own.get(k), merged.get_mut(at)) else {
            return Err("a replacement the split index does not hold".into());
        };
        let path = std::mem::take(&mut e.path);
        *e = Entry { path, ..by.clone() };
    }
    let deleted: std::collections::HashSet<usize> = link.delete.iter().copied().collect();
    let mut by_key: BTreeMap<(Vec<u8>, u8), Entry> = merged
        .into_iter()
        .enumerate()
        .filter(|(at, _)| !deleted.contains(at))
        .map(|(_, e)| ((e.path.clone(), e.stage), e))
        .collect();
    for e in own
        .into_iter()
        .skip(replaced)
        .filter(|e| !e.path.is_empty())
    {
        by_key.insert((e.path.clone(), e.stage), e);
    }
    Ok(by_key.into_values().collect())
}

/// git's `verify_path` (read-cache.c) as it judges an index entry (`add_index_entry`): what
/// git refuses to put in an index, with its HFS+ and NTFS protections both on (a repository
/// may be checked out on either). Each component is judged by gix-validate (`.git` in any
/// spelling those filesystems read as it, `.` and `..`, an empty one, a `.gitmodules` link);
/// what follows a `\` too, as git does for NTFS, where it separates. A trailing `/` only on a
/// sparse index's directory entry.
pub fn verify_path(path: &[u8], mode: u32) -> bool {
    use gix_validate::path::component::{Error, Mode, Options};
    let link = mode & 0o170000 == 0o120000;
    let dir = mode & 0o170000 == 0o040000;
    let path = match path.strip_suffix(b"/") {
        Some(p) if dir => p,
        Some(_) => return false,
        None => path,
    };
    let opts = Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    };
    let mut parts = path.split(|&b| b == b'/').peekable();
    while let Some(part) = parts.next() {
        // Every spelling the checks below refuse starts with `.`, `g` or `G`, holds a byte
        // outside ASCII (HFS+'s ignorable code points), a `\`, or is empty: most components
        // of an index of 20,000 entries are none of these, and need no closer look.
        if part
            .first()
            .is_some_and(|c| !matches!(c, b'.' | b'g' | b'G'))
            && part.iter().all(|&c| c.is_ascii() && c != b'\\')
        {
            continue;
        }
        let mode = (link && parts.peek().is_none()).then_some(Mode::Symlink);
        if gix_validate::path::component(part.into(), mode, opts).is_err() {
            return false;
        }
        for piece in part.split(|&b| b == b'\\').skip(1) {
            if matches!(
                gix_validate::path::component(piece.into(), mode, opts),
                Err(Error::DotGitDir | Error::SymlinkedGitModules)
            ) {
                return false;
            }
        }
    }
    true
}

/// The start of a protected list's entry naming a file or directory at any depth
/// (`**/.vscode`): the names put back below the root, whatever folder they are in.
pub const BELOW_ROOT: &str = "**/";

/// Whether project-relative `path` is a protected path or lies beneath one; an entry of
/// `protected` holding `*` is a pattern for a name at the project's top, one starting with
/// [`BELOW_ROOT`] a name at any depth.
pub fn is_protected(path: &[u8], protected: &[String]) -> bool {
    ProtectedPaths::new(protected).contains(path)
}

/// The protected list as an index's entries are looked up in it, by each entry's first
/// component first: an index of 20,000 entries is judged against ~80 paths at a step's end,
/// where comparing each entry with each path (and a pattern's parts collected anew each
/// time) cost ~40 ms.
pub struct ProtectedPaths<'a> {
    literal: Vec<&'a [u8]>,
    /// The first component of each literal path.
    tops: std::collections::HashSet<&'a [u8]>,
    /// Patterns for a name at the project's top.
    patterns: Vec<&'a [u8]>,
    /// Names at any depth ([`BELOW_ROOT`]).
    below: std::collections::HashSet<&'a [u8]>,
    /// Each name's first byte and the range of their lengths: most components of an index's
    /// paths are ruled out by these alone, without hashing (20,000 paths against the 31
    /// names: 1.8 ms with a hash per component, 0.3 ms so).
    below_first: [bool; 256],
    below_lengths: std::ops::RangeInclusive<usize>,
}

impl<'a> ProtectedPaths<'a> {
    pub fn new(protected: &'a [String]) -> Self {
        let mut below = std::collections::HashSet::new();
        let (patterns, literal): (Vec<&[u8]>, Vec<&[u8]>) = protected
            .iter()
            .filter(|p| match p.strip_prefix(BELOW_ROOT) {
                Some(name) => !below.insert(name.as_bytes()),
                None => true,
            })
            .map(|p| p.as_bytes())
            .partition(|p| p.contains(&b'*'));
        let tops = literal.iter().map(|p| first_component(p)).collect();
        let mut below_first = [false; 256];
        for name in &below {
            if let Some(&b) = name.first() {
                below_first[usize::from(b)] = true;
            }
        }
        let lengths = below.iter().map(|n| n.len());
        let below_lengths = lengths.clone().min().unwrap_or(1)..=lengths.max().unwrap_or(0);
        ProtectedPaths {
            literal,
            tops,
            patterns,
            below,
            below_first,
            below_lengths,
        }
    }

    /// Whether a component of `path` is a name protected at any depth.
    fn holds_below_name(&self, path: &[u8]) -> bool {
        let mut start = 0;
        while start < path.len() {
            let end = path[start..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(path.len(), |i| start + i);
            if self.is_below_name(&path[start..end]) {
                return true;
            }
            start = end + 1;
        }
        false
    }

    fn is_below_name(&self, part: &[u8]) -> bool {
        self.below_lengths.contains(&part.len())
            && part
                .first()
                .is_some_and(|&b| self.below_first[usize::from(b)])
            && self.below.contains(part)
    }

    /// Whether names at any depth are protected ([`BELOW_ROOT`]).
    pub fn has_names_below(&self) -> bool {
        !self.below.is_empty()
    }

    /// For a path below the root on which a name protected at any depth lies
    /// (`packages/web/.vscode/tasks.json`), the directory holding the first such name
    /// (`packages/web`); `None` when the first lies at the root, or none does.
    pub fn below_dir<'p>(&self, path: &'p [u8]) -> Option<&'p [u8]> {
        let mut start = 0;
        for part in path.split(|&b| b == b'/') {
            if self.is_below_name(part) {
                return (start > 0).then(|| &path[..start - 1]);
            }
            start += part.len() + 1;
        }
        None
    }

    /// Whether `path` is one of the paths or lies beneath one, or its first component
    /// matches a pattern. A path ending in `/` is a sparse index's directory entry, which
    /// stands for everything beneath it: it is protected when a protected path lies there.
    pub fn contains(&self, path: &[u8]) -> bool {
        if !self.below.is_empty() {
            if self.holds_below_name(path) {
                return true;
            }
            // A sparse index's directory entry may hold such a name anywhere beneath it.
            if path.ends_with(b"/") {
                return true;
            }
        }
        if let Some(dir) = path.strip_suffix(b"/")
            && self.literal.iter().any(|p| {
                p.strip_prefix(dir)
                    .is_some_and(|rest| rest.starts_with(b"/"))
            })
        {
            return true;
        }
        let top = first_component(path);
        if self.patterns.iter().any(|p| pattern_holds(p, path, top)) {
            return true;
        }
        self.tops.contains(top)
            && self.literal.iter().any(|p| {
                path.strip_prefix(*p)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
            })
    }
}

/// Whether the pattern `p` (a name at the top, `lefthook.*`, or below a directory there,
/// `.config/lefthook.*`: each component matched on its own) is `path` or lies above it; a
/// sparse index's directory entry (`.config/`) holds it when it lies below.
fn pattern_holds(p: &[u8], path: &[u8], top: &[u8]) -> bool {
    // Most patterns are one name, and most paths fail at their first component: judged
    // there before any walk (an index's 20,000 paths against the list cost 2 ms more without).
    let first = p.split(|&b| b == b'/').next().unwrap_or(p);
    if !crate::star_glob::matches(first, top) {
        return false;
    }
    if first.len() == p.len() {
        return true;
    }
    let mut parts = path.split(|&b| b == b'/');
    for want in p.split(|&b| b == b'/') {
        match parts.next() {
            Some(part) if crate::star_glob::matches(want, part) => {}
            // The directory entry's trailing `/`: what it stands for may hold the rest.
            Some(b"") => return path.ends_with(b"/"),
            _ => return false,
        }
    }
    true
}

fn first_component(path: &[u8]) -> &[u8] {
    path.split(|&b| b == b'/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha1::Digest;
    use std::path::Path;
    use std::process::Command;

    const FILE: u32 = 0o100644;
    const LINK: u32 = 0o120000;
    const DIR: u32 = 0o040000;

    #[test]
    fn the_hash_size_comes_from_the_configuration_when_it_can() {
        assert_eq!(hash_sizes(Some(b"[core]\n\tbare = false\n")), &[20]);
        assert_eq!(
            hash_sizes(Some(b"[extensions]\n\tobjectFormat = sha256\n")),
            HASH_SIZES
        );
        assert_eq!(
            hash_sizes(Some(b"[Extensions]\n\tOBJECTFORMAT=sha1\n")),
            HASH_SIZES
        );
        assert_eq!(hash_sizes(Some(b"[include]\n\tpath = other\n")), HASH_SIZES);
        assert_eq!(hash_sizes(None), HASH_SIZES);
    }

    #[test]
    fn paths_git_lets_into_an_index() {
        for p in [
            "a",
            "a/b",
            ".gitignore",
            ".github/workflows/x.yml",
            "a.git",
            "x/.gitx",
            "git~2",
            "..a",
            "a..",
            ".gitmodules",
        ] {
            assert!(verify_path(p.as_bytes(), FILE), "{p} refused");
        }
        assert!(verify_path(b"sparse/dir/", DIR));
    }

    #[test]
    fn paths_git_never_lets_into_an_index() {
        for p in [
            ".git",
            ".git/hooks/pre-commit",
            "a/.git/hooks/pre-commit",
            ".GIT/hooks/pre-commit",
            "sub/.GiT/config",
            "git~1/hooks/pre-commit",
            "GIT~1/hooks/pre-commit",
            ".git./hooks/pre-commit",
            ".git . /hooks/pre-commit",
            ".git::$INDEX_ALLOCATION/hooks/pre-commit",
            "a\\.git\\hooks\\pre-commit",
            "a\\git~1\\hooks",
            // HFS+ ignores these code points: `.g<ZWNJ>it`, `<ZWJ>.git`, `.git<BOM>`.
            ".g\u{200c}it/hooks/pre-commit",
            "\u{200d}.git/hooks/pre-commit",
            ".git\u{feff}/hooks/pre-commit",
            ".",
            "..",
            "a/./b",
            "a/../b",
            "../b",
            "a//b",
            "/a",
            "a/",
            "",
        ] {
            assert!(!verify_path(p.as_bytes(), FILE), "{p:?} allowed");
        }
        // A link at `.gitmodules` in any spelling git knows.
        for p in [
            ".gitmodules",
            "a/.GITMODULES",
            "GITMOD~1",
            "gi7eba~9",
            ".gitmodules .",
        ] {
            assert!(!verify_path(p.as_bytes(), LINK), "{p:?} allowed as a link");
            assert!(verify_path(p.as_bytes(), FILE), "{p:?} refused as a file");
        }
    }

    #[test]
    fn protected_paths_and_patterns() {
        let protected = [".husky".to_string(), "lefthook.*".into(), ".envrc".into()];
        assert!(is_protected(b".husky/pre-commit", &protected));
        assert!(is_protected(b".envrc", &protected));
        assert!(is_protected(b"lefthook.yml", &protected));
        assert!(!is_protected(b".huskyx", &protected));
        assert!(!is_protected(b"src/lefthook.yml", &protected));
        assert!(!is_protected(b".envrc.d/x", &protected));
        // A pattern below a directory at the top, each component matched on its own.
        let below = [".config/lefthook.*".to_string()];
        assert!(is_protected(b".config/lefthook.yml", &below));
        assert!(
            is_protected(b".config/", &below),
            "a sparse directory entry"
        );
        assert!(!is_protected(b".config/other.yml", &below));
        assert!(!is_protected(b".config", &below));
        assert!(!is_protected(b"x/.config/lefthook.yml", &below));
    }

    #[test]
    fn names_protected_at_any_depth_and_sparse_directories() {
        let protected = [
            ".github/hooks".to_string(),
            format!("{BELOW_ROOT}.vscode"),
            format!("{BELOW_ROOT}rust-toolchain.toml"),
        ];
        let p = ProtectedPaths::new(&protected);
        assert!(p.contains(b"packages/web/.vscode/tasks.json"));
        assert!(p.contains(b".vscode/settings.json"));
        assert!(p.contains(b"a/b/rust-toolchain.toml"));
        assert!(!p.contains(b"a/b/rust-toolchain.tom"));
        assert!(!p.contains(b"a/.vscodex/x"));
        assert_eq!(
            p.below_dir(b"packages/web/.vscode/tasks.json"),
            Some(&b"packages/web"[..])
        );
        assert_eq!(p.below_dir(b".vscode/tasks.json"), None);
        assert_eq!(p.below_dir(b"src/main.rs"), None);
        // A sparse index's directory entry stands for what lies beneath it.
        let root_only = [".github/hooks".to_string()];
        let q = ProtectedPaths::new(&root_only);
        assert!(q.contains(b".github/"));
        assert!(!q.contains(b".git/"));
        assert!(!q.contains(b"src/"));
        assert!(
            p.contains(b"src/"),
            "any directory may hold a name protected anywhere"
        );
    }

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// A repository with `a.txt`, `dir/b.txt`, `dir/sub/c.txt` and `-aaaaaaaaaaaaaaaaaaaa`
    /// staged, its index in `version`.
    fn repo(version: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q"]);
        std::fs::create_dir_all(d.join("dir/sub")).unwrap();
        for f in [
            "a.txt",
            "dir/b.txt",
            "dir/sub/c.txt",
            "-aaaaaaaaaaaaaaaaaaaa",
        ] {
            std::fs::write(d.join(f), f).unwrap();
        }
        git(d, &["add", "--", "."]);
        std::fs::write(d.join("n.txt"), "n").unwrap();
        if version == "2" {
            git(d, &["add", "n.txt"]);
        } else {
            // An intent-to-add entry carries extended flags (version 3 at least).
            git(d, &["add", "-N", "n.txt"]);
        }
        git(d, &["update-index", "--index-version", version]);
        tmp
    }

    fn paths(data: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        walk(data, 20, |e| {
            out.push(String::from_utf8_lossy(&e.path).into_owned());
            Ok(())
        })
        .unwrap();
        out
    }

    /// `data` with `from` renamed `to` (same length) and its checksum fixed, as an attacker
    /// would write it.
    fn retarget(data: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let body = &data[..data.len() - 20];
        let at = body.windows(from.len()).position(|w| w == from).unwrap();
        let mut body = body.to_vec();
        body[at..at + to.len()].copy_from_slice(to);
        let sum = sha1::Sha1::digest(&body);
        body.extend_from_slice(&sum);
        body
    }

    #[test]
    fn indexes_git_writes_read_whole_in_each_version() {
        for version in ["2", "3", "4"] {
            let tmp = repo(version);
            let data = std::fs::read(tmp.path().join(".git/index")).unwrap();
            assert_eq!(
                u32::from_be_bytes(data[4..8].try_into().unwrap()).to_string(),
                version
            );
            assert_eq!(
                paths(&data),
                [
                    "-aaaaaaaaaaaaaaaaaaaa",
                    "a.txt",
                    "dir/b.txt",
                    "dir/sub/c.txt",
                    "n.txt"
                ],
                "version {version}"
            );
            assert_eq!(
                refusal(&data, HASH_SIZES, &|_| None),
                None,
                "version {version}"
            );
            let bad = retarget(&data, b"-aaaaaaaaaaaaaaaaaaaa", b".git/hooks/pre-commit");
            let why = refusal(&bad, HASH_SIZES, &|_| None).expect("a hook's path was allowed");
            assert!(why.contains(".git/hooks/pre-commit"), "{why}");
            // git reads it as it is: the check is envgit's.
            let dir = ["dir".to_string()];
            let mut protected =
                protected_entries(&data, HASH_SIZES, &|_| None, &ProtectedPaths::new(&dir))
                    .unwrap()
                    .remove(0)
                    .entries
                    .into_keys()
                    .map(|(p, _)| String::from_utf8(p).unwrap());
            assert_eq!(protected.next().as_deref(), Some("dir/b.txt"));
            assert_eq!(protected.next().as_deref(), Some("dir/sub/c.txt"));
            assert_eq!(protected.next(), None);
        }
        assert!(refusal(b"DIRC\0\0\0\x05\0\0\0\0", HASH_SIZES, &|_| None).is_some());
        assert!(refusal(b"not an index at all, not at all", HASH_SIZES, &|_| None).is_some());
    }

    #[test]
    fn a_split_index_is_read_with_its_shared_part() {
        let tmp = repo("2");
        let d = tmp.path();
        git(d, &["update-index", "--split-index"]);
        std::fs::write(d.join("dir/b.txt"), "changed").unwrap();
        std::fs::write(d.join("dir/d.txt"), "new").unwrap();
        git(d, &["-c", "splitIndex.maxPercentChange=100", "add", "dir"]);
        git(d, &["rm", "-q", "--cached", "a.txt"]);
        let data = std::fs::read(d.join(".git/index")).unwrap();
        let link = walk(&data, 20, |_| Ok(()))
            .unwrap()
            .link
            .expect("no link extension");
        let shared_file = d.join(format!(".git/sharedindex.{}", link.shared));
        let shared = |hex: &str| std::fs::read(d.join(format!(".git/sharedindex.{hex}"))).ok();
        assert_eq!(refusal(&data, HASH_SIZES, &shared), None);
        // Without its shared part git cannot read it.
        assert!(refusal(&data, HASH_SIZES, &|_| None).is_some());
        let protected = ["dir".to_string(), "a.txt".to_string()];
        let entries =
            protected_entries(&data, HASH_SIZES, &shared, &ProtectedPaths::new(&protected))
                .unwrap()
                .remove(0)
                .entries;
        let names: Vec<String> = entries
            .keys()
            .map(|(p, _)| String::from_utf8(p.clone()).unwrap())
            .collect();
        assert_eq!(names, ["dir/b.txt", "dir/d.txt", "dir/sub/c.txt"]);
        // `dir/b.txt` has the step's blob, as git merges the split index.
        let blob = |text: &str| {
            let mut h = sha1::Sha1::new();
            h.update(format!("blob {}\0{text}", text.len()));
            crate::gitlayer::verify::to_hex(&h.finalize())
        };
        assert_eq!(entries[&(b"dir/b.txt".to_vec(), 0)].1, blob("changed"));
        // A shared part naming a hook's path is refused, through the index naming it.
        let bad_shared = retarget(
            &std::fs::read(&shared_file).unwrap(),
            b"-aaaaaaaaaaaaaaaaaaaa",
            b".git/hooks/pre-commit",
        );
        let why = refusal(&data, HASH_SIZES, &|_| Some(bad_shared.clone())).expect("allowed");
        assert!(why.contains(".git/hooks/pre-commit"), "{why}");
    }

    #[test]
    fn bitmaps_as_git_stores_them() {
        // One run-length word: no run, two literal words.
        let mut d = Vec::new();
        d.extend_from_slice(&128u32.to_be_bytes());
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(&(2u64 << 33).to_be_bytes());
        d.extend_from_slice(&0b101u64.to_be_bytes());
        d.extend_from_slice(&1u64.to_be_bytes());
        d.extend_from_slice(&0u32.to_be_bytes());
        assert_eq!(ewah_bits(&d).unwrap(), (vec![0, 2, 64], d.len()));
        // A run of ones, then one literal word.
        let mut d = Vec::new();
        d.extend_from_slice(&128u32.to_be_bytes());
        d.extend_from_slice(&2u32.to_be_bytes());
        d.extend_from_slice(&((1u64 << 33) | (1 << 1) | 1).to_be_bytes());
        d.extend_from_slice(&2u64.to_be_bytes());
        d.extend_from_slice(&0u32.to_be_bytes());
        let (bits, _) = ewah_bits(&d).unwrap();
        assert_eq!(bits.len(), 65);
        assert_eq!(bits.last(), Some(&65));
        assert!(ewah_bits(&d[..10]).is_err());
    }
}
