//! What the mount plan takes from the project's files, read from envgit's stat index (the
//! pre-step scan, which already `lstat`s every entry) instead of a walk of its own:
//!
//! - the secrets to mask: `.env*` files and [`envgit_policy::PROJECT_DENIES`] at any depth, and the paths the
//!   policy's relative `deny_read` globs match. Directories the scan does not enter (excluded
//!   by `snapshot.exclude`: `node_modules/`, `target/`, `.venv/`; too deep) are not in the
//!   index, so they, and only they, are listed here by name: iteratively (any depth, no
//!   recursion) and bounded ([`MAX_LISTED`] entries per step);
//! - the regular files with hard links outside the project (`ln ~/file project/x`, a pnpm
//!   store, `git clone --local`): a write through such a link changes the file outside, so
//!   each is bound read-only over itself inside the sandbox. A file counts as linked outside
//!   when the index holds fewer of its links than its `st_nlink` (links in excluded
//!   directories count as outside: read-only is the safe side). At most [`MAX_LINK_BINDS`];
//!   more refuses the run (fail closed) with the count and how to turn them into copies.
//!   Files under the project's own `.git` are left out: inside it is an overlay, so a write
//!   through one (a chmod + write to an object `clone --local` hard-linked) lands in the
//!   run's layer, and the import never rewrites an object the host has.
//! - the regular files with more than one link in the directories the scan does not enter
//!   (a pnpm `node_modules/` linked to its store, a uv `.venv/` to its cache, both shared by
//!   every project of the person's): too many to bind one by one, so the caller gives the
//!   project its own copy of each before the step. Their listing `lstat`s each regular file
//!   it reads afresh; the cache keeps what it found.
//! - the repositories in the directories the scan does not enter (a `.git` in
//!   `.venv/src/pkg/`, a `target/` made a git directory by its layout): the snapshot holds
//!   nothing of them, so the caller copies their code before the step and puts it back after
//!   ([`excluded_repositories`] finds them again after it).

use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use envgit_policy::Policy;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

pub use crate::listing_cache::ListingVouch;
use crate::listing_cache::{Found, Listed, ListingCache, REPO_DOT_GIT, REPO_LAYOUT};

/// Read-only binds for hard-linked files: each is a mount in the sandbox's namespace (the
/// kernel caps a namespace at `fs.mount-max`, 100,000 by default) and costs its setup time.
pub const MAX_LINK_BINDS: usize = 4096;
/// Entries listed in the directories the scan did not enter, per step. A `node_modules/` of a
/// large monorepo holds a few hundred thousand; past this the rest is not searched (a
/// warning says so) rather than a step costing seconds.
pub const MAX_LISTED: usize = 1 << 20;

/// What the pre-step scan saw at one path of the project.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A regular file (captured, or a marker: too large, excluded, left out for the budget).
    File { dev: u64, ino: u64, nlink: u64 },
    /// A directory the scan read: its entries are in the index too.
    Dir,
    /// A directory the scan did not enter (excluded, too deep): listed by name here.
    Unwalked,
    /// A unix socket: a host process may be listening on it, whoever bound it and however
    /// (a relative path, a path through a symbolic link, from another network namespace: a
    /// container's socket directory mounted into the project), none of which the host's
    /// `/proc/net/unix` shows as this path.
    Socket,
    /// Anything else: a symlink, a fifo or device, what could not be read.
    Other,
}

/// The project as envgit's pre-step scan saw it.
pub trait ProjectIndex {
    /// Calls `f` once per entry with its path relative to the project root; the entries of a
    /// directory `skip_dir` says yes to (its relative path) may be left out, since none of
    /// them matters to the caller.
    fn visit(&self, skip_dir: &dyn Fn(&[u8]) -> bool, f: &mut dyn FnMut(&[u8], Seen));
}

/// What the plan needs of the project's files.
#[derive(Clone, Debug, Default)]
pub struct ProjectFacts {
    /// Masked (absolute paths): the secrets, and every unix socket (a host service
    /// reachable through it would be a way out that the gate never judges).
    pub secrets: Vec<PathBuf>,
    /// Regular files with links outside the project: bound read-only (absolute paths).
    pub linked_out: Vec<PathBuf>,
    /// Regular files with more than one link in the directories the scan does not enter, none
    /// of them masked (absolute paths): the caller makes each the project's own copy before
    /// the step, or adds it to [`Self::linked_out`].
    pub linked_excluded: Vec<PathBuf>,
    /// What the search could not cover, for a warning.
    pub notes: Vec<String>,
    /// Whether the directories the scan does not enter were taken from the cached listing on
    /// a watching daemon's word, without a look at them.
    pub listing_vouched: bool,
    /// The repositories in the directories the scan does not enter, sorted.
    pub excluded_repositories: Vec<ExcludedRepository>,
    /// The directories the scan did not enter that the listing started from (sorted, relative
    /// to the project): where [`excluded_repositories`] looks again after a step.
    pub unwalked: Vec<Vec<u8>>,
}

/// A repository in a directory the scan does not enter: the snapshot holds nothing of it, so
/// nothing of it is compared after a step, while the person's git runs its configuration and
/// hooks (a shell prompt's `git status` in it, an editor that opens every repository it finds
/// below the project).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExcludedRepository {
    /// The directory, relative to the project.
    pub dir: Vec<u8>,
    /// `false`: it holds a `.git` (a directory, a `gitdir:` file or a link); `true`: it is a
    /// git directory by its layout alone (`HEAD` with `objects/` and `refs/`, or with
    /// `commondir`).
    pub layout: bool,
}

impl ExcludedRepository {
    fn from_bits(dir: &[u8], bits: u8) -> impl Iterator<Item = ExcludedRepository> + '_ {
        [(REPO_DOT_GIT, false), (REPO_LAYOUT, true)]
            .into_iter()
            .filter(move |(bit, _)| bits & bit != 0)
            .map(move |(_, layout)| ExcludedRepository {
                dir: dir.to_vec(),
                layout,
            })
    }

    /// As a listing cache keeps it: its bits, then the directory.
    fn encoded(&self) -> Vec<u8> {
        let mut out = vec![if self.layout {
            REPO_LAYOUT
        } else {
            REPO_DOT_GIT
        }];
        out.extend_from_slice(&self.dir);
        out
    }

    fn decoded(bytes: &[u8]) -> impl Iterator<Item = ExcludedRepository> + '_ {
        let (bits, dir) = bytes.split_first().map_or((0, &[][..]), |(b, d)| (*b, d));
        Self::from_bits(dir, bits)
    }
}

fn is_secret_name(name: &[u8]) -> bool {
    // Every such name starts with a dot: most names are out after one byte.
    name.first() == Some(&b'.') && envgit_policy::is_secret_name(name)
}

/// Below a `.git` directory (its objects are data, never searched for secrets).
fn under_git(rel: &[u8]) -> bool {
    let mut parts = rel.split(|&b| b == b'/');
    parts.next_back();
    parts.any(|p| p == b".git")
}

fn last_name(rel: &[u8]) -> &[u8] {
    rel.rsplit(|&b| b == b'/').next().unwrap_or(rel)
}

fn abs(project: &Path, rel: &[u8]) -> PathBuf {
    project.join(std::ffi::OsStr::from_bytes(rel))
}

/// The policy's `deny_read` globs relative to the project.
/// The policy's relative `deny_read` globs as one matcher, and their lines (what a listing
/// cache was matched against).
fn project_globs(policy: &Policy, project: &Path) -> (Option<Gitignore>, Vec<u8>) {
    let mut b = GitignoreBuilder::new(project);
    let mut lines = Vec::new();
    for d in &policy.filesystem.deny_read {
        if d.starts_with("~/") || d.starts_with('/') || !d.contains(['*', '?', '[']) {
            continue;
        }
        if b.add_line(None, d).is_ok() {
            lines.extend_from_slice(d.as_bytes());
            lines.push(b'\n');
        }
    }
    if lines.is_empty() {
        return (None, lines);
    }
    (b.build().ok(), lines)
}

/// More files in the project are hard links to files outside it than the sandbox can make
/// read-only one by one: the step is refused (a write through one would change the outside).
#[derive(Debug, thiserror::Error)]
#[error(
    "{count} files in the project are hard links to files outside it ({}, …): a write \
     through one would change the file outside, and envgit makes each read-only in \
     the sandbox, but at most {MAX_LINK_BINDS}; refusing to run. Make them copies: \
     git objects from `git clone --local`: `git repack -a -d` in the project; a pnpm \
     store: `pnpm config set package-import-method copy` and reinstall; other files: \
     copy each over itself (`find . -type f -links +1` lists them)",
    examples.join(", ")
)]
pub struct TooManyHardLinks {
    /// How many files are linked out.
    pub count: usize,
    /// The first few, relative to the project.
    pub examples: Vec<String>,
}

/// The secrets to mask and the hard-linked files to make read-only, from `index`. The
/// directories the index does not cover are listed again only where they changed since the
/// listing kept at `listing_cache` (a file in the store), which is then replaced; not even
/// checked when a watching daemon's count (`vouch`, taken before this call) is the one that
/// listing was saved with.
pub fn project_facts(
    policy: &Policy,
    project: &Path,
    index: &dyn ProjectIndex,
    listing_cache: Option<&Path>,
    vouch: Option<ListingVouch>,
) -> Result<ProjectFacts, TooManyHardLinks> {
    let (globs, glob_lines) = project_globs(policy, project);
    let matches = |p: &Path, is_dir: bool| {
        globs
            .as_ref()
            .is_some_and(|g| g.matched(p, is_dir).is_ignore())
    };
    let mut facts = ProjectFacts::default();
    let mut unwalked: Vec<Vec<u8>> = Vec::new();
    // (dev, ino) -> (st_nlink, the links the index holds)
    let mut linked: HashMap<(u64, u64), (u64, Vec<PathBuf>)> = HashMap::new();
    // The secrets with more than one link: each link is the secret under another name.
    let mut linked_secrets: HashSet<(u64, u64)> = HashSet::new();
    // Nothing below the project's own `.git` counts (the two filters below): its records,
    // 20,000 loose objects' worth after a first `git add` of a large tree, are not read.
    let below_git = |dir: &[u8]| dir == b".git" || dir.starts_with(b".git/");
    index.visit(&below_git, &mut |rel, seen| {
        if let Seen::File { dev, ino, nlink } = seen
            && nlink > 1
            && !rel.starts_with(b".git/")
        {
            linked
                .entry((dev, ino))
                .or_insert_with(|| (nlink, Vec::new()))
                .1
                .push(abs(project, rel));
        }
        // A socket counts in a nested repository's `.git` too (a daemon's, such as git's
        // fsmonitor): it is bound into the sandbox like the rest of the project.
        if seen == Seen::Socket {
            facts.secrets.push(abs(project, rel));
            return;
        }
        let is_dir = matches!(seen, Seen::Dir | Seen::Unwalked);
        let secret = !is_dir && is_secret_name(last_name(rel));
        if (secret || globs.is_some() || seen == Seen::Unwalked) && !under_git(rel) {
            if secret || (globs.is_some() && matches(&abs(project, rel), is_dir)) {
                facts.secrets.push(abs(project, rel));
                if let Seen::File { dev, ino, nlink } = seen
                    && nlink > 1
                {
                    linked_secrets.insert((dev, ino));
                }
            }
            if seen == Seen::Unwalked && last_name(rel) != b".git" {
                unwalked.push(rel.to_vec());
            }
        }
    });
    // A file below a masked directory (a `deny_read` glob's or literal path's) is a secret
    // too: only files with more than one link are looked at, each up its parents.
    if !linked.is_empty() {
        let mut masked_dirs: HashSet<&Path> = facts.secrets.iter().map(PathBuf::as_path).collect();
        let relative_literal = |d: &&String| {
            !d.starts_with("~/") && !d.starts_with('/') && !d.contains(['*', '?', '['])
        };
        let literal: Vec<PathBuf> = policy
            .filesystem
            .deny_read
            .iter()
            .filter(relative_literal)
            .map(|d| project.join(d.trim_end_matches('/')))
            .collect();
        masked_dirs.extend(literal.iter().map(PathBuf::as_path));
        for (key, (_, paths)) in &linked {
            if !linked_secrets.contains(key)
                && paths
                    .iter()
                    .any(|p| p.ancestors().any(|a| masked_dirs.contains(a)))
            {
                linked_secrets.insert(*key);
            }
        }
    }
    // A secret's other links are masked like it (a step that plants `.env` and a link to it
    // reads what the person then writes into `.env`). Those the index does not hold are
    // looked for by inode number in the listing of the directories it does not cover (the
    // only other place in the project's mount a step could link it from); only then is that
    // listing made afresh, without its cache.
    let mut hunt: HashMap<u64, (PathBuf, u64)> = HashMap::new();
    for key in &linked_secrets {
        let Some((nlink, paths)) = linked.get(key) else {
            continue;
        };
        facts.secrets.extend(paths.iter().cloned());
        let missing = nlink.saturating_sub(paths.len() as u64);
        if missing > 0
            && let Some(first) = paths.first()
        {
            hunt.insert(key.1, (first.clone(), missing));
        }
    }
    let listing_cache = listing_cache.filter(|_| hunt.is_empty());
    unwalked.sort();
    facts.unwalked = unwalked.clone();
    if !unwalked.is_empty() {
        let cached = listing_cache.and_then(|p| std::fs::read(p).ok());
        let vouched = cached
            .as_deref()
            .zip(vouch)
            .and_then(|(bytes, v)| ListingCache::vouched(bytes, &glob_lines, v, &unwalked));
        match vouched {
            Some(found) => {
                facts
                    .secrets
                    .extend(found.secrets.iter().map(|rel| abs(project, rel)));
                facts
                    .linked_excluded
                    .extend(found.linked.iter().map(|rel| abs(project, rel)));
                facts.excluded_repositories.extend(
                    found
                        .repos
                        .iter()
                        .flat_map(|r| ExcludedRepository::decoded(r)),
                );
                facts.listing_vouched = true;
            }
            None => {
                let mut cache =
                    listing_cache.map(|_| ListingCache::from_bytes(cached.as_deref(), &glob_lines));
                let (secrets_before, notes_before) = (facts.secrets.len(), facts.notes.len());
                list_unwalked(
                    project,
                    unwalked.clone(),
                    globs.is_some(),
                    &matches,
                    &mut facts,
                    cache.as_mut(),
                    &mut hunt,
                );
                if let (Some(mut cache), Some(path)) = (cache, listing_cache) {
                    // A listing cut short is never vouched for.
                    let vouch = vouch.filter(|_| facts.notes.len() == notes_before);
                    let relative = |paths: &[PathBuf]| -> Vec<Vec<u8>> {
                        paths
                            .iter()
                            .filter_map(|p| p.strip_prefix(project).ok())
                            .map(|rel| rel.as_os_str().as_bytes().to_vec())
                            .collect()
                    };
                    let found = Found {
                        secrets: relative(&facts.secrets[secrets_before..]),
                        linked: relative(&facts.linked_excluded),
                        repos: facts
                            .excluded_repositories
                            .iter()
                            .map(ExcludedRepository::encoded)
                            .collect(),
                    };
                    // What it started from and found is only ever read with a count.
                    cache.changed |= cache.vouch != vouch
                        || (vouch.is_some() && (cache.roots != unwalked || cache.found != found));
                    (cache.vouch, cache.roots, cache.found) = (vouch, unwalked, found);
                    if cache.changed {
                        cache.save(path);
                    }
                }
            }
        }
    }
    for (secret, missing) in hunt.into_values().filter(|(_, missing)| *missing > 0) {
        facts.notes.push(format!(
            "{} has {missing} hard link(s) envgit did not find in the project: the secret is \
             readable inside through them (`find / -samefile` lists them)",
            secret.display()
        ));
    }
    let mut out: Vec<PathBuf> = linked
        .into_values()
        .filter(|(nlink, paths)| (paths.len() as u64) < *nlink)
        .flat_map(|(_, paths)| paths)
        .collect();
    out.sort();
    if out.len() > MAX_LINK_BINDS {
        let some: Vec<String> = out
            .iter()
            .take(3)
            .map(|p| p.strip_prefix(project).unwrap_or(p).display().to_string())
            .collect();
        return Err(TooManyHardLinks {
            count: out.len(),
            examples: some,
        });
    }
    facts.linked_out = out;
    facts.linked_excluded.sort();
    facts.excluded_repositories.sort();
    facts.secrets.sort();
    facts.secrets.dedup();
    Ok(facts)
}

/// The directories `index` holds as not entered by its scan (excluded, too deep), outside
/// every `.git`, sorted: where the listing of [`excluded_repositories`] starts.
pub fn unwalked_roots(index: &dyn ProjectIndex) -> Vec<Vec<u8>> {
    let below_git = |dir: &[u8]| dir == b".git" || dir.starts_with(b".git/");
    let mut roots = Vec::new();
    index.visit(&below_git, &mut |rel, seen| {
        if seen == Seen::Unwalked && !under_git(rel) && last_name(rel) != b".git" {
            roots.push(rel.to_vec());
        }
    });
    roots.sort();
    roots
}

/// The repositories below `roots` (directories the scan did not enter, [`unwalked_roots`]) as
/// they are now (after a step: the ones it made too), with what could not be looked at as
/// notes. The same listing as [`project_facts`]'s: a directory unchanged since the listing
/// cached at `listing_cache` (made with `policy`'s globs) is taken from it and not read; the
/// cache is left as it is.
pub fn excluded_repositories(
    policy: &Policy,
    project: &Path,
    roots: Vec<Vec<u8>>,
    listing_cache: Option<&Path>,
) -> (Vec<ExcludedRepository>, Vec<String>) {
    if roots.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let (_, glob_lines) = project_globs(policy, project);
    let cached = listing_cache.and_then(|p| std::fs::read(p).ok());
    let mut cache = ListingCache::from_bytes(cached.as_deref(), &glob_lines);
    let mut facts = ProjectFacts::default();
    // Only repositories are wanted: no glob is matched, no link hunted.
    list_unwalked(
        project,
        roots,
        false,
        &|_, _| false,
        &mut facts,
        Some(&mut cache),
        &mut HashMap::new(),
    );
    facts.excluded_repositories.sort();
    (facts.excluded_repositories, facts.notes)
}

/// Lists the directories the scan did not enter, depth first with an explicit stack, at most
/// [`MAX_LISTED`] entries. Each is opened beneath the project without following a symlink
/// (a directory swapped for a link since the scan is skipped); one whose inode and ctime (by
/// `lstat`) are those `cache` holds for it is taken from the cache, the others are read with
/// `getdents`:
/// subdirectories are known from the entry's type, only regular files are `lstat`ed (for
/// their link count), and a path is built only for a subdirectory, a match or a file with
/// more than one link. `cache` is left holding this step's listings. An entry
/// whose inode number (from `getdents`) is in `hunt`, a secret's link the index did not hold,
/// is masked too and counted off there (the caller lists without the cache then).
fn list_unwalked(
    project: &Path,
    mut stack: Vec<Vec<u8>>,
    globs: bool,
    matches: &dyn Fn(&Path, bool) -> bool,
    facts: &mut ProjectFacts,
    mut cache: Option<&mut ListingCache>,
    hunt: &mut HashMap<u64, (PathBuf, u64)>,
) {
    use rustix::fs::{Dir, FileType, Mode, OFlags, ResolveFlags};
    let Ok(root) = rustix::fs::open(
        project,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let mut old = cache
        .as_deref_mut()
        .map(|c| std::mem::take(&mut c.dirs))
        .unwrap_or_default();
    let mut new: HashMap<Vec<u8>, Listed> = HashMap::new();
    let child = |rel: &[u8], name: &[u8]| {
        let mut c = Vec::with_capacity(rel.len() + 1 + name.len());
        c.extend_from_slice(rel);
        c.push(b'/');
        c.extend_from_slice(name);
        c
    };
    let mut listed = 0usize;
    let mut listed_anew = false;
    let ctime_ns =
        |st: &rustix::fs::Stat| st.st_ctime.saturating_mul(1_000_000_000) + st.st_ctime_nsec as i64;
    'dirs: while let Some(rel) = stack.pop() {
        // The cache is checked with one `lstat` of the path: it reads nothing through it, and
        // a component swapped for a symlink since its parent was checked leads to another
        // inode, which the cache does not hold, and the listing below refuses to follow.
        if let Some(l) = old.remove(&rel)
            && let Ok(st) = rustix::fs::statat(
                &root,
                std::ffi::OsStr::from_bytes(&rel),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            && FileType::from_raw_mode(st.st_mode) == FileType::Directory
            && l.holds_for(st.st_ino, ctime_ns(&st))
        {
            facts
                .secrets
                .extend(l.secrets.iter().map(|n| abs(project, &child(&rel, n))));
            facts
                .linked_excluded
                .extend(l.linked.iter().map(|n| abs(project, &child(&rel, n))));
            facts
                .excluded_repositories
                .extend(ExcludedRepository::from_bits(&rel, l.repo));
            stack.extend(l.subdirs.iter().map(|n| child(&rel, n)));
            new.insert(rel, l);
            continue;
        }
        // Not served from the cache: whatever happens below, the cache changes.
        listed_anew = true;
        let Ok(fd) = rustix::fs::openat2(
            &root,
            std::ffi::OsStr::from_bytes(&rel),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) else {
            continue;
        };
        let Ok(st) = rustix::fs::fstat(&fd) else {
            continue;
        };
        let mut here = Listed {
            ino: st.st_ino,
            ctime_ns: ctime_ns(&st),
            listed_ns: now_ns(),
            subdirs: Vec::new(),
            secrets: Vec::new(),
            linked: Vec::new(),
            repo: 0,
        };
        // The names git tells a repository by (`setup.c`'s `is_git_directory`).
        let (mut head, mut objects, mut refs, mut commondir) = (false, false, false, false);
        let Ok(mut dir) = Dir::new(fd) else { continue };
        while let Some(entry) = dir.read() {
            // A read error leaves this directory unlisted, and out of the cache.
            let Ok(e) = entry else { continue 'dirs };
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            listed += 1;
            if listed > MAX_LISTED {
                facts.notes.push(format!(
                    "the directories snapshot.exclude leaves out hold more than {MAX_LISTED} \
                     entries: .env files past that (in {} and {} more directories) were not \
                     searched and are readable inside",
                    abs(project, &rel).display(),
                    stack.len()
                ));
                break 'dirs;
            }
            // A regular file's link count is read too: only `lstat` has it.
            let lstat = || {
                rustix::fs::statat(
                    dir.fd().ok().as_ref().map_or(root.as_fd(), |d| d.as_fd()),
                    e.file_name(),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                )
                .ok()
            };
            let (file_type, st) = match e.file_type() {
                FileType::Unknown | FileType::RegularFile => {
                    let st = lstat();
                    let t = st.map_or(FileType::Unknown, |st| FileType::from_raw_mode(st.st_mode));
                    (t, st)
                }
                known => (known, None),
            };
            let is_dir = file_type == FileType::Directory;
            let a_secrets_link = !hunt.is_empty()
                && !is_dir
                && hunt.get_mut(&e.ino()).is_some_and(|(_, missing)| {
                    *missing = missing.saturating_sub(1);
                    true
                });
            if file_type == FileType::Socket
                || a_secrets_link
                || (!is_dir && is_secret_name(name))
                || (globs && matches(&abs(project, &child(&rel, name)), is_dir))
            {
                facts.secrets.push(abs(project, &child(&rel, name)));
                here.secrets.push(name.to_vec());
            } else if file_type == FileType::RegularFile && st.is_some_and(|st| st.st_nlink > 1) {
                facts.linked_excluded.push(abs(project, &child(&rel, name)));
                here.linked.push(name.to_vec());
            }
            match name {
                b".git" => here.repo |= REPO_DOT_GIT,
                b"HEAD" => head = true,
                b"objects" => objects |= is_dir,
                b"refs" => refs |= is_dir,
                b"commondir" => commondir = true,
                _ => {}
            }
            if is_dir && name != b".git" {
                stack.push(child(&rel, name));
                here.subdirs.push(name.to_vec());
            }
        }
        if head && ((objects && refs) || commondir) {
            here.repo |= REPO_LAYOUT;
        }
        facts
            .excluded_repositories
            .extend(ExcludedRepository::from_bits(&rel, here.repo));
        new.insert(rel, here);
    }
    if let Some(cache) = cache {
        // Something was listed anew, or a directory listed last time is gone.
        cache.changed |= listed_anew || !old.is_empty();
        cache.dirs = new;
    }
}

/// The wall clock in nanoseconds since the epoch, as file stamps are kept.
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<(&'static str, Seen)>);

    impl ProjectIndex for Fixed {
        fn visit(&self, skip_dir: &dyn Fn(&[u8]) -> bool, f: &mut dyn FnMut(&[u8], Seen)) {
            for (p, s) in &self.0 {
                let dir = p.rsplit_once('/').map_or("", |(dir, _)| dir);
                if !skip_dir(dir.as_bytes()) {
                    f(p.as_bytes(), *s);
                }
            }
        }
    }

    fn file(ino: u64, nlink: u64) -> Seen {
        Seen::File { dev: 1, ino, nlink }
    }

    fn policy(yaml: &str) -> Policy {
        Policy::parse("envgit.yaml", &format!("version: 1\n{yaml}")).unwrap()
    }

    #[test]
    fn secrets_at_any_depth_and_links_to_outside() {
        let deep = "a/b/c/d/e/f/g/h/i/j/.env";
        let index = Fixed(vec![
            (".env", file(1, 1)),
            (".env.example", file(2, 1)),
            (deep, file(3, 1)),
            ("sub/.npmrc", file(4, 1)),
            (".git/objects/.env", file(5, 1)),
            ("keys/id.pem", file(6, 1)),
            // Two links of one inode, both in the project: writable.
            ("both/a", file(7, 2)),
            ("both/b", file(7, 2)),
            // One link of two in the project: the other is outside.
            ("linked.txt", file(8, 2)),
            (".git/objects/ab/cdef", file(9, 3)),
            ("dir", Seen::Dir),
        ]);
        let p = policy("filesystem:\n  deny_read: [\"keys/*.pem\"]\n");
        let root = Path::new("/proj");
        let facts = project_facts(&p, root, &index, None, None).unwrap();
        let rel: Vec<&Path> = facts
            .secrets
            .iter()
            .map(|s| s.strip_prefix(root).unwrap())
            .collect();
        assert_eq!(
            rel,
            [
                Path::new(".env"),
                Path::new(deep),
                Path::new("keys/id.pem"),
                Path::new("sub/.npmrc")
            ]
        );
        // The project's own `.git` is an overlay inside: its hard links need no bind.
        assert_eq!(facts.linked_out, [root.join("linked.txt")]);
    }

    /// A secret's other links are the secret by another name: masked with it. One the index
    /// does not hold (outside the project, or where nothing lists it) is named in a note.
    #[test]
    fn every_link_of_a_secret_is_masked() {
        let index = Fixed(vec![
            (".env", file(1, 2)),
            ("notes.txt", file(1, 2)),
            ("config/.env.local", file(2, 3)),
            ("config/README", file(2, 3)),
            ("plain", file(3, 2)),
            ("plain2", file(3, 2)),
        ]);
        let root = Path::new("/proj");
        let facts = project_facts(&policy(""), root, &index, None, None).unwrap();
        let rel: Vec<&Path> = facts
            .secrets
            .iter()
            .map(|s| s.strip_prefix(root).unwrap())
            .collect();
        assert_eq!(
            rel,
            [
                Path::new(".env"),
                Path::new("config/.env.local"),
                Path::new("config/README"),
                Path::new("notes.txt"),
            ]
        );
        assert!(
            facts
                .notes
                .iter()
                .any(|n| n.contains("config/.env.local") && n.contains("1 hard link(s)")),
            "{:?}",
            facts.notes
        );
    }

    /// Below a directory `deny_read` masks (a literal path or a glob's match), a file's other
    /// links are masked too.
    #[test]
    fn links_of_a_file_below_a_denied_directory_are_masked() {
        let index = Fixed(vec![
            ("private", Seen::Dir),
            ("private/api.key", file(1, 2)),
            ("copy1", file(1, 2)),
            ("vault1", Seen::Dir),
            ("vault1/db.key", file(2, 2)),
            ("copy2", file(2, 2)),
            ("open/x", file(3, 2)),
            ("open/y", file(3, 2)),
        ]);
        let root = Path::new("/proj");
        let p = policy("filesystem:\n  deny_read: [\"private\", \"vault*/\"]\n");
        let facts = project_facts(&p, root, &index, None, None).unwrap();
        for want in ["copy1", "copy2", "private/api.key", "vault1/db.key"] {
            assert!(
                facts.secrets.contains(&root.join(want)),
                "{want}: {:?}",
                facts.secrets
            );
        }
        assert!(
            !facts
                .secrets
                .iter()
                .any(|s| s.starts_with(root.join("open")))
        );
    }

    #[test]
    fn too_many_links_outside_refuse_the_run() {
        let names: Vec<&'static str> = (0..=MAX_LINK_BINDS)
            .map(|i| &*Box::leak(format!("f{i}").into_boxed_str()))
            .collect();
        let index = Fixed(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (*n, file(i as u64, 2)))
                .collect(),
        );
        let e = project_facts(&policy(""), Path::new("/proj"), &index, None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("{} files", MAX_LINK_BINDS + 1)), "{e}");
        assert!(e.contains("git repack -a -d"), "{e}");
    }

    #[test]
    fn excluded_directories_are_listed_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("node_modules/x/y")).unwrap();
        std::fs::write(root.join("node_modules/x/.env"), "S").unwrap();
        std::fs::write(root.join("node_modules/x/y/.env.local"), "S").unwrap();
        std::fs::write(root.join("node_modules/x/y/.env.sample"), "S").unwrap();
        std::fs::create_dir_all(root.join("node_modules/.git")).unwrap();
        std::fs::write(root.join("node_modules/.git/.env"), "S").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("node_modules/etc")).unwrap();
        let index = Fixed(vec![("node_modules", Seen::Unwalked)]);
        let facts = project_facts(&policy(""), root, &index, None, None).unwrap();
        assert_eq!(
            facts.secrets,
            [
                root.join("node_modules/x/.env"),
                root.join("node_modules/x/y/.env.local")
            ]
        );
        assert!(facts.notes.is_empty());
    }

    /// Repositories in excluded directories are found by their `.git` (any kind) or their
    /// layout, at any depth, by the plan's listing and by [`excluded_repositories`] after a
    /// step, from the cache while a directory is unchanged and afresh once it changed.
    #[test]
    fn repositories_in_excluded_directories_are_found_fresh_and_from_the_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, store) = (tmp.path().join("p"), tmp.path().join("store"));
        let cache = store.join("listing.cache");
        std::fs::create_dir_all(root.join(".venv/src/pkg/.git")).unwrap();
        std::fs::create_dir_all(root.join(".venv/src/sub")).unwrap();
        std::fs::write(root.join(".venv/src/sub/.git"), "gitdir: ../pkg/.git").unwrap();
        for d in ["objects", "refs"] {
            std::fs::create_dir_all(root.join(".venv/bare").join(d)).unwrap();
        }
        std::fs::write(root.join(".venv/bare/HEAD"), "ref: refs/heads/main\n").unwrap();
        // `HEAD` alone is no repository.
        std::fs::create_dir_all(root.join(".venv/notes")).unwrap();
        std::fs::write(root.join(".venv/notes/HEAD"), "").unwrap();
        std::fs::create_dir_all(&store).unwrap();
        let index = Fixed(vec![(".venv", Seen::Unwalked), ("src", Seen::Dir)]);
        let repo = |dir: &str, layout: bool| ExcludedRepository {
            dir: dir.as_bytes().to_vec(),
            layout,
        };
        let expected = vec![
            repo(".venv/bare", true),
            repo(".venv/src/pkg", false),
            repo(".venv/src/sub", false),
        ];
        let facts = project_facts(&policy(""), &root, &index, Some(&cache), None).unwrap();
        assert_eq!(facts.excluded_repositories, expected);
        // Listed long after each directory last changed (past the racy margin), and the
        // cache made to say `.venv/notes` is a repository: an unchanged directory is taken
        // from it, not read.
        let mut c = ListingCache::load(&cache, b"");
        for l in c.dirs.values_mut() {
            l.listed_ns += 10_000_000_000;
        }
        c.dirs.get_mut(&b".venv/notes"[..]).unwrap().repo = REPO_LAYOUT;
        c.save(&cache);
        let (found, notes) =
            excluded_repositories(&policy(""), &root, unwalked_roots(&index), Some(&cache));
        assert!(found.contains(&repo(".venv/notes", true)), "{found:?}");
        assert!(expected.iter().all(|r| found.contains(r)), "{found:?}");
        assert!(notes.is_empty());
        // A repository made since, in a directory the cache holds: its directory changed.
        std::fs::create_dir_all(root.join(".venv/src/new/.git")).unwrap();
        let (found, _) =
            excluded_repositories(&policy(""), &root, unwalked_roots(&index), Some(&cache));
        assert!(found.contains(&repo(".venv/src/new", false)), "{found:?}");
        // A listing an earlier envgit cached (without repositories) is not trusted.
        let mut bytes = std::fs::read(&cache).unwrap();
        bytes[..8].copy_from_slice(b"EGLIST04");
        std::fs::write(&cache, &bytes).unwrap();
        let (found, _) =
            excluded_repositories(&policy(""), &root, unwalked_roots(&index), Some(&cache));
        assert!(found.contains(&repo(".venv/src/pkg", false)), "{found:?}");
    }

    /// A file in an excluded directory with another link (a pnpm store's, outside the
    /// project) is listed for its own copy; a masked one is not (its copy would be readable),
    /// nor a file with one link, a symlink or a directory. The cache serves what it found
    /// while the directory stays unchanged; once the link is gone (the file replaced), the
    /// directory is read again and the file is no longer listed.
    #[test]
    fn files_with_other_links_in_excluded_directories_are_listed() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, store) = (tmp.path().join("p"), tmp.path().join("store"));
        std::fs::create_dir_all(root.join("node_modules/lodash/fp")).unwrap();
        std::fs::create_dir_all(&store).unwrap();
        for n in ["index.js", "map.js", "secret"] {
            std::fs::write(store.join(n), n).unwrap();
        }
        let link = |from: &str, to: &str| std::fs::hard_link(store.join(from), root.join(to));
        link("index.js", "node_modules/lodash/index.js").unwrap();
        link("map.js", "node_modules/lodash/fp/map.js").unwrap();
        link("secret", "node_modules/lodash/.env").unwrap();
        std::fs::write(root.join("node_modules/lodash/package.json"), "{}").unwrap();
        std::os::unix::fs::symlink(store.join("map.js"), root.join("node_modules/m.js")).unwrap();
        let index = Fixed(vec![("node_modules", Seen::Unwalked)]);
        let cache_path = tmp.path().join("listing.cache");
        let facts = || project_facts(&policy(""), &root, &index, Some(&cache_path), None).unwrap();
        let first = facts();
        let want = [
            root.join("node_modules/lodash/fp/map.js"),
            root.join("node_modules/lodash/index.js"),
        ];
        assert_eq!(first.linked_excluded, want);
        assert_eq!(first.secrets, [root.join("node_modules/lodash/.env")]);
        assert!(first.linked_out.is_empty(), "{:?}", first.linked_out);
        // Aged past the racy margin, the listing is served from the cache, links and all.
        // A name only the cache holds shows which directories it served.
        let mut c = ListingCache::load(&cache_path, b"");
        for (rel, l) in &mut c.dirs {
            l.listed_ns += 10 * crate::listing_cache::RACY_MARGIN_NS;
            if rel.as_slice() == b"node_modules/lodash/fp" {
                l.linked.push(b"ghost.js".to_vec());
            }
        }
        c.save(&cache_path);
        let ghost = root.join("node_modules/lodash/fp/ghost.js");
        let mut with_ghost = want.to_vec();
        with_ghost.insert(0, ghost.clone());
        assert_eq!(facts().linked_excluded, with_ghost);
        // The project's own copy in place of `index.js`: its directory is read again, the
        // unchanged `fp/` still served.
        let own = root.join("node_modules/lodash/index.js.own");
        std::fs::write(&own, "index.js").unwrap();
        std::fs::rename(&own, root.join("node_modules/lodash/index.js")).unwrap();
        assert_eq!(facts().linked_excluded, [ghost, want[0].clone()]);
    }

    /// A project whose `node_modules` (unwalked in `index`) holds `x/.env` and the directories
    /// `dirs` below it; its root and where its listing cache goes.
    fn node_modules_project(dirs: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("p");
        std::fs::create_dir_all(root.join("node_modules").join(dirs)).unwrap();
        std::fs::write(root.join("node_modules/x/.env"), "S").unwrap();
        let cache_path = tmp.path().join("listing.cache");
        (tmp, root, cache_path)
    }

    #[test]
    fn a_daemons_unmoved_count_serves_what_the_listing_found_without_a_look() {
        let (_tmp, root, cache_path) = node_modules_project("x");
        let index = Fixed(vec![("node_modules", Seen::Unwalked)]);
        let v = ListingVouch {
            instance: 9,
            count: 3,
        };
        let facts = |v: Option<ListingVouch>| {
            project_facts(&policy(""), &root, &index, Some(&cache_path), v).unwrap()
        };
        let first = facts(Some(v));
        assert!(
            !first.listing_vouched,
            "nothing was saved with that count yet"
        );
        assert_eq!(first.secrets, [root.join("node_modules/x/.env")]);
        // The same count: taken without a look (the directory's change here goes unseen,
        // which is why only a daemon that saw no event there gives the same count).
        std::fs::write(root.join("node_modules/x/.env.local"), "S").unwrap();
        let vouched = facts(Some(v));
        assert!(vouched.listing_vouched);
        assert_eq!(vouched.secrets, first.secrets);
        // Another count, or none: listed again, the new secret found.
        for other in [Some(ListingVouch { count: 4, ..v }), None] {
            let f = facts(other);
            assert!(!f.listing_vouched, "{other:?}");
            assert!(
                f.secrets.contains(&root.join("node_modules/x/.env.local")),
                "{other:?}: {:?}",
                f.secrets
            );
        }
    }

    #[test]
    fn a_cached_listing_is_used_only_for_directories_unchanged_since() {
        let (tmp, root, cache_path) = node_modules_project("x/y");
        let index = Fixed(vec![("node_modules", Seen::Unwalked)]);
        let facts = |p: &Policy| project_facts(p, &root, &index, Some(&cache_path), None).unwrap();
        let first = facts(&policy(""));
        assert_eq!(first.secrets, [root.join("node_modules/x/.env")]);
        assert_eq!(
            ListingCache::load(&cache_path, b"").dirs.len(),
            3,
            "node_modules, x, y"
        );
        // Made just now: every listing is within the racy margin of its directory's change.
        // Age them, and plant a name only the cache holds, to see which directories it served.
        let age = |plant: bool| {
            let mut c = ListingCache::load(&cache_path, b"");
            assert!(!c.dirs.is_empty(), "the listing was saved");
            for l in c.dirs.values_mut() {
                l.listed_ns += 10 * crate::listing_cache::RACY_MARGIN_NS;
                if plant && !l.secrets.iter().any(|s| s == b"ghost") {
                    l.secrets.push(b"ghost".to_vec());
                }
            }
            c.save(&cache_path);
        };
        age(true);
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let saved = inode(&cache_path);
        let cached = facts(&policy(""));
        assert_eq!(
            inode(&cache_path),
            saved,
            "an unchanged cache is not written again"
        );
        assert!(
            cached
                .secrets
                .contains(&root.join("node_modules/x/y/ghost")),
            "an unchanged directory comes from the cache: {:?}",
            cached.secrets
        );
        // A secret made deep down changes only its directory: that one is read again.
        std::fs::write(root.join("node_modules/x/y/.env.local"), "S").unwrap();
        age(false);
        let after = facts(&policy(""));
        assert!(
            after
                .secrets
                .contains(&root.join("node_modules/x/y/.env.local"))
        );
        assert!(!after.secrets.contains(&root.join("node_modules/x/y/ghost")));
        assert!(after.secrets.contains(&root.join("node_modules/x/ghost")));
        // A directory replaced by another (a new inode) is read again, whatever its ctime.
        std::fs::remove_dir_all(root.join("node_modules/x")).unwrap();
        std::fs::create_dir_all(root.join("node_modules/x")).unwrap();
        std::fs::write(root.join("node_modules/x/.npmrc"), "S").unwrap();
        let replaced = facts(&policy(""));
        assert_eq!(replaced.secrets, [root.join("node_modules/x/.npmrc")]);
        // A cached directory swapped for a symlink to one outside: nothing is read through it.
        age(false);
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("y")).unwrap();
        std::fs::write(outside.join(".env"), "S").unwrap();
        std::fs::rename(root.join("node_modules/x"), tmp.path().join("old-x")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("node_modules/x")).unwrap();
        let swapped = facts(&policy(""));
        assert!(
            swapped.secrets.is_empty(),
            "through the link: {:?}",
            swapped.secrets
        );
        std::fs::remove_file(root.join("node_modules/x")).unwrap();
        std::fs::rename(tmp.path().join("old-x"), root.join("node_modules/x")).unwrap();
        // Other deny_read globs: the cache is not used.
        age(true);
        let p = policy("filesystem:\n  deny_read: [\"**/*.pem\"]\n");
        assert!(!facts(&p).secrets.iter().any(|s| s.ends_with("ghost")));
    }
}
