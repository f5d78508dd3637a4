//! What the last listing of the directories the scan does not enter (`node_modules/`,
//! `target/`, …) found in each of them: its subdirectories and the names to mask. A step then
//! reads again only the directories that changed since, instead of every one of them (on a
//! real npm project ~1,000 directories, most of a step's set-up).
//!
//! A directory's ctime moves whenever a name in it is added, removed or renamed, and no
//! program can set it back, so a directory with the inode and ctime it had when it was listed
//! holds the same names. Timestamps are coarse (a clock tick), so a listing made less than
//! [`RACY_MARGIN_NS`] after the directory's ctime is not trusted the next time (git's
//! racy-index rule). Each directory is checked on its own, parents first, so a change at any
//! depth is read again.
//!
//! With `envgit watch`, the daemon watches these directories too and counts every event in
//! them ([`ListingVouch`]). A listing made just after the daemon gave a count is saved with
//! that count, the directories it started from and what it found; while the count stays the
//! same, nothing changed there, and the next step takes what was found without one `lstat`
//! ([`ListingCache::vouched`]).
//!
//! Each listing also keeps the names of the regular files with more than one link (one
//! `lstat` per file, made only when a directory is read afresh): the step gives the project
//! its own copy of each ([`crate::plan::ProjectFacts::linked_excluded`]), which changes the
//! directory, so it is read again the next time.
//!
//! It is a cache kept in the store (outside every sandbox): written to a temporary file and
//! renamed into place, and a missing, torn, foreign (other `deny_read` globs) or other-version
//! file is ignored — everything is listed — never trusted.

use std::collections::HashMap;
use std::path::Path;

/// `05`: each listing says whether the directory holds a repository (one made before did not
/// look: it is not trusted, or a repository the step found would be taken for one it made).
const MAGIC: &[u8; 8] = b"EGLIST05";
const END: &[u8; 8] = b"EGLISTOK";
/// As the store's stat index: a change within this of a listing makes the listing untrusted.
pub(crate) const RACY_MARGIN_NS: i64 = 2_000_000_000;

/// One directory as it was listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub ino: u64,
    pub ctime_ns: i64,
    /// When the listing began (before its first read).
    pub listed_ns: i64,
    /// Names of its subdirectories (the listing goes on into each).
    pub subdirs: Vec<Vec<u8>>,
    /// Names in it to mask.
    pub secrets: Vec<Vec<u8>>,
    /// Names of its regular files with more than one link (none of them masked).
    pub linked: Vec<Vec<u8>>,
    /// What makes it, or a repository in it, one git works in: [`REPO_DOT_GIT`] and
    /// [`REPO_LAYOUT`] bits.
    pub repo: u8,
}

/// The directory holds a `.git` (a directory, a `gitdir:` file or a link).
pub(crate) const REPO_DOT_GIT: u8 = 1;
/// The directory is a git directory by its layout alone (`HEAD` with `objects/` and `refs/`,
/// or with `commondir`): git takes it for a repository with no `.git` in it.
pub(crate) const REPO_LAYOUT: u8 = 2;

impl Listed {
    /// Whether this listing still holds for a directory now at (`ino`, `ctime_ns`).
    pub(crate) fn holds_for(&self, ino: u64, ctime_ns: i64) -> bool {
        self.ino == ino
            && self.ctime_ns == ctime_ns
            && self.listed_ns.saturating_sub(ctime_ns) >= RACY_MARGIN_NS
    }
}

/// A watching daemon's word on the directories a scan does not enter: its instance, and how
/// many events they had had when it answered (`envgit_store::Since::unscanned`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListingVouch {
    pub instance: u64,
    pub count: u64,
}

/// What a whole listing found, relative to the project.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// To mask.
    pub secrets: Vec<Vec<u8>>,
    /// Regular files with more than one link.
    pub linked: Vec<Vec<u8>>,
    /// The directories holding a repository, each prefixed with its [`Listed::repo`] bits.
    pub repos: Vec<Vec<u8>>,
}

/// The listings of one step, by directory (relative to the project), and the globs they were
/// matched against.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ListingCache {
    pub globs: Vec<u8>,
    /// The daemon's count just before the listing, when it covered every directory.
    pub vouch: Option<ListingVouch>,
    /// The directories the listing started from (sorted), and what it found below them
    /// (relative to the project): to mask, and with more than one link.
    pub roots: Vec<Vec<u8>>,
    pub found: Found,
    pub dirs: HashMap<Vec<u8>, Listed>,
    /// Whether `dirs` differs from the file it was loaded from (not stored): an unchanged cache
    /// is not written again.
    pub changed: bool,
}

impl ListingCache {
    /// The cache at `path` if it is sound and was made with `globs`; empty otherwise (the
    /// step reads the file once for [`ListingCache::vouched`] and this: [`Self::from_bytes`]).
    #[cfg(test)]
    pub(crate) fn load(path: &Path, globs: &[u8]) -> Self {
        Self::from_bytes(std::fs::read(path).ok().as_deref(), globs)
    }

    /// [`ListingCache::load`] of a file read already (`None`: there was none).
    pub(crate) fn from_bytes(bytes: Option<&[u8]>, globs: &[u8]) -> Self {
        bytes
            .and_then(decode)
            .filter(|c| c.globs == globs)
            .unwrap_or_else(|| ListingCache {
                globs: globs.to_vec(),
                changed: true,
                ..ListingCache::default()
            })
    }

    /// What the listing in `bytes` (the cache file) found below `roots` (sorted), when it was
    /// made with `globs` just after the daemon's count `vouch`, which has not moved since:
    /// nothing changed in those directories. The listings of each directory are not decoded.
    pub(crate) fn vouched(
        bytes: &[u8],
        globs: &[u8],
        vouch: ListingVouch,
        roots: &[Vec<u8>],
    ) -> Option<Found> {
        let mut r = Reader(body(bytes)?);
        let head = header(&mut r)?;
        (head.globs == globs && head.vouch == Some(vouch) && head.roots == roots)
            .then_some(head.found)
    }

    /// Replaces the file at `path`; a failure (a full disk, a read-only store) only makes the
    /// next step list everything again, so it is not an error.
    pub(crate) fn save(&self, path: &Path) {
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        if std::fs::write(&tmp, encode(self)).is_err() || std::fs::rename(&tmp, path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_names(out: &mut Vec<u8>, names: &[Vec<u8>]) {
    out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for n in names {
        put_bytes(out, n);
    }
}

fn encode(cache: &ListingCache) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + cache.dirs.len() * 96);
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, &cache.globs);
    match cache.vouch {
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.instance.to_le_bytes());
            out.extend_from_slice(&v.count.to_le_bytes());
        }
        None => out.push(0),
    }
    put_names(&mut out, &cache.roots);
    put_names(&mut out, &cache.found.secrets);
    put_names(&mut out, &cache.found.linked);
    put_names(&mut out, &cache.found.repos);
    out.extend_from_slice(&(cache.dirs.len() as u32).to_le_bytes());
    for (rel, d) in &cache.dirs {
        put_bytes(&mut out, rel);
        out.extend_from_slice(&d.ino.to_le_bytes());
        out.extend_from_slice(&d.ctime_ns.to_le_bytes());
        out.extend_from_slice(&d.listed_ns.to_le_bytes());
        put_names(&mut out, &d.subdirs);
        put_names(&mut out, &d.secrets);
        put_names(&mut out, &d.linked);
        out.push(d.repo);
    }
    let len = out.len() as u64;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(END);
    out
}

/// A reader that fails (None) on any read past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        Some(self.take(n)?.to_vec())
    }
    fn names(&mut self) -> Option<Vec<Vec<u8>>> {
        let n = self.u32()? as usize;
        // Each name takes at least its 4-byte length: a count past that is damage.
        if n > self.0.len() / 4 {
            return None;
        }
        (0..n).map(|_| self.bytes()).collect()
    }
}

/// The file's body, when its trailer (length, end mark; written last) says it is whole.
fn body(b: &[u8]) -> Option<&[u8]> {
    let body_len = b.len().checked_sub(16)?;
    let (body, trailer) = b.split_at(body_len);
    (&trailer[8..] == END && u64::from_le_bytes(trailer[..8].try_into().ok()?) == body_len as u64)
        .then_some(body)
}

/// What precedes the listings of each directory.
struct Header {
    globs: Vec<u8>,
    vouch: Option<ListingVouch>,
    roots: Vec<Vec<u8>>,
    found: Found,
}

fn header(r: &mut Reader<'_>) -> Option<Header> {
    if r.take(8)? != MAGIC {
        return None;
    }
    let globs = r.bytes()?;
    let vouch = match r.take(1)? {
        [0] => None,
        [1] => Some(ListingVouch {
            instance: r.u64()?,
            count: r.u64()?,
        }),
        _ => return None,
    };
    Some(Header {
        globs,
        vouch,
        roots: r.names()?,
        found: Found {
            secrets: r.names()?,
            linked: r.names()?,
            repos: r.names()?,
        },
    })
}

fn decode(b: &[u8]) -> Option<ListingCache> {
    let body = body(b)?;
    let mut r = Reader(body);
    let Header {
        globs,
        vouch,
        roots,
        found,
    } = header(&mut r)?;
    let n = r.u32()? as usize;
    let mut dirs = HashMap::with_capacity(n.min(body.len() / 32));
    for _ in 0..n {
        let rel = r.bytes()?;
        let listed = Listed {
            ino: r.u64()?,
            ctime_ns: r.u64()? as i64,
            listed_ns: r.u64()? as i64,
            subdirs: r.names()?,
            secrets: r.names()?,
            linked: r.names()?,
            repo: r.take(1)?[0],
        };
        dirs.insert(rel, listed);
    }
    r.0.is_empty().then_some(ListingCache {
        globs,
        vouch,
        roots,
        found,
        dirs,
        changed: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ListingCache {
        let mut dirs = HashMap::new();
        dirs.insert(
            b"node_modules".to_vec(),
            Listed {
                ino: 7,
                ctime_ns: 1_000,
                listed_ns: 5_000_000_000,
                subdirs: vec![b"a".to_vec(), b"\xffb".to_vec()],
                secrets: vec![b".env".to_vec()],
                linked: vec![b"index.js".to_vec()],
                repo: REPO_DOT_GIT,
            },
        );
        ListingCache {
            globs: b"keys/*.pem".to_vec(),
            vouch: Some(ListingVouch {
                instance: 0xfeed,
                count: 41,
            }),
            roots: vec![b"node_modules".to_vec()],
            found: Found {
                secrets: vec![b"node_modules/.env".to_vec()],
                linked: vec![b"node_modules/index.js".to_vec()],
                repos: vec![b"\x01node_modules".to_vec()],
            },
            dirs,
            changed: false,
        }
    }

    #[test]
    fn what_was_found_is_taken_only_under_the_same_count_roots_and_globs() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("listing.cache");
        let c = sample();
        c.save(&path);
        let (globs, vouch, roots) = (&c.globs, c.vouch.unwrap(), &c.roots);
        assert_eq!(
            ListingCache::vouched(&std::fs::read(&path).unwrap(), globs, vouch, roots),
            Some(c.found.clone())
        );
        let later = ListingVouch {
            count: vouch.count + 1,
            ..vouch
        };
        let other = ListingVouch {
            instance: vouch.instance + 1,
            ..vouch
        };
        assert_eq!(
            ListingCache::vouched(&std::fs::read(&path).unwrap(), globs, later, roots),
            None
        );
        assert_eq!(
            ListingCache::vouched(&std::fs::read(&path).unwrap(), globs, other, roots),
            None
        );
        assert_eq!(
            ListingCache::vouched(&std::fs::read(&path).unwrap(), b"", vouch, roots),
            None
        );
        let more = vec![b"node_modules".to_vec(), b"target".to_vec()];
        assert_eq!(
            ListingCache::vouched(&std::fs::read(&path).unwrap(), globs, vouch, &more),
            None
        );
        // Saved without a count (no daemon, or a listing cut short): never taken.
        let unvouched = ListingCache {
            vouch: None,
            ..sample()
        };
        unvouched.save(&path);
        assert_eq!(
            ListingCache::vouched(&std::fs::read(&path).unwrap(), globs, vouch, roots),
            None
        );
        // A torn file is not taken either.
        c.save(&path);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(
            ListingCache::vouched(&std::fs::read(&path).unwrap(), globs, vouch, roots),
            None
        );
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let c = sample();
        let bytes = encode(&c);
        assert_eq!(decode(&bytes), Some(sample()));
        for cut in [0, 1, 8, bytes.len() / 2, bytes.len() - 1] {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut zeroed = bytes.clone();
        zeroed[8..24].fill(0);
        assert_eq!(decode(&zeroed), None, "a damaged body");
        assert_eq!(decode(&vec![0; bytes.len()]), None, "a file of zeros");
    }

    #[test]
    fn a_foreign_or_missing_cache_is_empty() {
        let dir = std::env::temp_dir().join(format!("envgit-listing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("listing.cache");
        assert!(ListingCache::load(&path, b"").dirs.is_empty(), "missing");
        sample().save(&path);
        assert_eq!(ListingCache::load(&path, b"keys/*.pem"), sample());
        assert!(
            ListingCache::load(&path, b"other").dirs.is_empty(),
            "other globs"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_listing_holds_only_for_the_same_directory_changed_well_before_it() {
        let l = &sample().dirs[&b"node_modules".to_vec()];
        assert!(l.holds_for(7, 1_000));
        assert!(!l.holds_for(8, 1_000), "another inode");
        assert!(!l.holds_for(7, 1_001), "changed since");
        let racy = Listed {
            listed_ns: 1_000 + RACY_MARGIN_NS - 1,
            ..l.clone()
        };
        assert!(!racy.holds_for(7, 1_000), "listed within the margin");
    }
}
