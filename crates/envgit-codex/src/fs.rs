//! `fs/*` calls applied on the host, inside the project only, under the same policy as the
//! sandbox: denied reads refused, protected paths read-only, and no symlink ever followed (every
//! path is opened beneath the project's directory fd with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`).

use std::ffi::{CString, OsStr};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use envgit_policy::is_secret_name;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use serde_json::Value;

use crate::b64;
use crate::paths;
use crate::protocol::{
    CanonicalPath, CopyParams, CreateDirectoryParams, DirectoryEntry, Empty, Metadata, PathParams,
    ReadDirectoryResult, ReadFileResult, RemoveParams, WriteFileParams, params, result,
};
use crate::rpc::{NOT_FOUND, RpcError, RpcResult};

/// Largest file `fs/readFile` returns.
const MAX_READ: u64 = 256 << 20;

/// Deepest directory `fs/remove` and `fs/copy` descend to beneath their target: the store's
/// bound on what a step snapshots (`MAX_TREE_DEPTH`). Both walk with an explicit stack, so a
/// deeper chain (a step's `mkdir d; cd d` loop) costs a refusal, not the server's own stack.
const MAX_DEPTH: usize = 1024;

fn too_deep(t: &Target) -> RpcError {
    RpcError::params(format!(
        "{}: holds directories more than {MAX_DEPTH} deep (fs/remove and fs/copy stop there)",
        t.show()
    ))
}

/// Why [`remove_at`] stopped.
enum Walk {
    Errno(Errno),
    TooDeep,
    /// This project-relative path is masked in the sandbox, where no step can remove it.
    Masked(Vec<u8>),
}

impl From<Errno> for Walk {
    fn from(e: Errno) -> Self {
        Walk::Errno(e)
    }
}

/// What the sandbox would refuse, as data.
#[derive(Debug, Clone)]
pub struct FsPolicy {
    /// The project (canonical): nothing outside it is served.
    pub root: PathBuf,
    /// Unreadable absolute paths (and everything beneath them): the sandbox's masks.
    pub deny_read: Vec<PathBuf>,
    /// Read-only paths relative to the project (and everything beneath them).
    pub protected: Vec<String>,
    /// The policy's `filesystem.deny_read` entries, as written: the relative globs among them
    /// (`**/*.pem`) are matched at each call, as the sandbox matches them at each step (their
    /// matches at the session's start are in `deny_read`, but not a file made since).
    pub deny_read_globs: Vec<String>,
}

/// The relative globs of `deny_read` (what the sandbox's mount plan matches against the
/// project's files: an entry with `~/` or `/` is a path of its own, one without a glob
/// character is in [`FsPolicy::deny_read`] already), gitignore-style from the project's root.
fn deny_read_matcher(root: &Path, entries: &[String]) -> Option<ignore::gitignore::Gitignore> {
    let mut b = ignore::gitignore::GitignoreBuilder::new(root);
    let mut any = false;
    for d in entries {
        if d.starts_with("~/") || d.starts_with('/') || !d.contains(['*', '?', '[']) {
            continue;
        }
        any |= b.add_line(None, d).is_ok();
    }
    any.then(|| b.build().ok()).flatten()
}

/// Whether the `fs/*` method `method` may change the project.
pub fn may_write(method: &str) -> bool {
    matches!(
        method,
        "fs/writeFile" | "fs/createDirectory" | "fs/remove" | "fs/copy"
    )
}

/// One thing envgit refused: `what` is `read PATH` or `write PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub what: String,
    pub rule: String,
}

/// What an `fs/*` call did that history must show.
#[derive(Debug, Default)]
pub struct Effect {
    /// Project-relative paths written, created or removed.
    pub wrote: Vec<String>,
    pub refused: Vec<Refusal>,
}

fn under(rel: &str, base: &str) -> bool {
    rel.strip_prefix(base)
        .is_some_and(|r| r.is_empty() || r.starts_with('/'))
}

pub struct Fs {
    policy: FsPolicy,
    /// Unreadable paths found since the session began ([`Fs::deny_also`]).
    denied_since: std::sync::RwLock<Vec<PathBuf>>,
    root: OwnedFd,
    deny_read_globs: Option<ignore::gitignore::Gitignore>,
}

struct Target {
    abs: PathBuf,
    rel: Vec<u8>,
}

impl Target {
    fn show(&self) -> String {
        paths::display(&self.rel)
    }
}

fn refusal(effect: &mut Effect, what: String, rule: &str) -> RpcError {
    let msg = format!("envgit: denied {what} (rule {rule})");
    effect.refused.push(Refusal {
        what,
        rule: rule.into(),
    });
    RpcError::refused(msg)
}

fn map_errno(e: Errno, t: &Target, effect: &mut Effect, op: &str) -> RpcError {
    match e {
        // RESOLVE_NO_SYMLINKS / O_NOFOLLOW met a link, or RESOLVE_BENEATH an escape.
        Errno::LOOP | Errno::XDEV => refusal(
            effect,
            format!("{op} {}", t.show()),
            "filesystem.no_symlinks",
        ),
        Errno::NOENT => RpcError::new(
            NOT_FOUND,
            format!("{}: No such file or directory", t.show()),
        ),
        e => RpcError::new(crate::rpc::INTERNAL, format!("{}: {e}", t.show())),
    }
}

fn os(rel: &[u8]) -> &OsStr {
    if rel.is_empty() {
        OsStr::new(".")
    } else {
        OsStr::from_bytes(rel)
    }
}

fn beneath(
    root: BorrowedFd<'_>,
    rel: &[u8],
    flags: OFlags,
    mode: Mode,
) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        root,
        os(rel),
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        mode,
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

fn open_dir(root: BorrowedFd<'_>, rel: &[u8]) -> rustix::io::Result<OwnedFd> {
    beneath(root, rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
}

fn split(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (b"", rel),
    }
}

fn cname(name: &[u8]) -> rustix::io::Result<CString> {
    CString::new(name).map_err(|_| Errno::INVAL)
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() {
        return b.to_vec();
    }
    let mut v = a.to_vec();
    v.push(b'/');
    v.extend_from_slice(b);
    v
}

fn names(dir: BorrowedFd<'_>) -> rustix::io::Result<Vec<CString>> {
    let mut d = Dir::read_from(dir)?;
    let mut out = Vec::new();
    while let Some(e) = d.read() {
        let e = e?;
        let n = e.file_name();
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            out.push(n.to_owned());
        }
    }
    out.sort();
    Ok(out)
}

impl Fs {
    pub fn new(policy: FsPolicy) -> std::io::Result<Self> {
        let root = rustix::fs::open(
            &policy.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let deny_read_globs = deny_read_matcher(&policy.root, &policy.deny_read_globs);
        Ok(Self {
            policy,
            denied_since: std::sync::RwLock::default(),
            root,
            deny_read_globs,
        })
    }

    /// Also refuse `denied` (absolute paths, as [`FsPolicy::deny_read`]): the sandbox's
    /// unreadable paths as found after a step, which may have made another.
    pub fn deny_also(&self, denied: Vec<PathBuf>) {
        if let Ok(mut d) = self.denied_since.write() {
            *d = denied;
        }
    }

    /// `abs` is, is beneath, or (`or_above`) holds a path the sandbox makes unreadable.
    fn is_denied(&self, abs: &Path, or_above: bool) -> bool {
        let hit = |d: &PathBuf| abs.starts_with(d) || (or_above && d.starts_with(abs));
        self.policy.deny_read.iter().any(hit)
            || self.denied_since.read().map_or(true, |d| d.iter().any(hit))
    }

    pub fn root(&self) -> &Path {
        &self.policy.root
    }

    /// The project-relative target of `text`, or a refusal when it lies outside the project.
    fn target(&self, text: &str, op: &str, effect: &mut Effect) -> Result<Target, RpcError> {
        let abs = paths::parse(text)?;
        match paths::relative(&self.policy.root, &abs) {
            Some(rel) => Ok(Target { abs, rel }),
            None => {
                let what = format!("{op} {}", abs.display());
                if op == "stat" {
                    // Codex walks up from the project looking for .git and AGENTS.md: outside
                    // the project there is nothing to find.
                    return Err(RpcError::new(
                        NOT_FOUND,
                        format!(
                            "{}: outside the envgit project {}",
                            abs.display(),
                            self.policy.root.display()
                        ),
                    ));
                }
                Err(refusal(effect, what, "filesystem.project"))
            }
        }
    }

    /// `t` or a directory above it matches a relative `deny_read` glob (as a file or as a
    /// directory: what it is may change under the call, and either is masked in the sandbox).
    fn glob_denied(&self, t: &Target) -> bool {
        let Some(globs) = &self.deny_read_globs else {
            return false;
        };
        !t.rel.is_empty()
            && [false, true].into_iter().any(|is_dir| {
                globs
                    .matched_path_or_any_parents(&t.abs, is_dir)
                    .is_ignore()
            })
    }

    /// The sandbox masks `t`: what [`Fs::check_read`] refuses.
    fn masked(&self, t: &Target) -> bool {
        let (_, name) = split(&t.rel);
        self.is_denied(&t.abs, false)
            || self.glob_denied(t)
            || t.rel.split(|&b| b == b'/').any(is_secret_name)
            || is_secret_name(name)
    }

    fn check_read(&self, t: &Target, effect: &mut Effect) -> Result<(), RpcError> {
        if self.masked(t) {
            return Err(refusal(
                effect,
                format!("read {}", t.show()),
                "filesystem.deny_read",
            ));
        }
        Ok(())
    }

    fn check_write(&self, t: &Target, effect: &mut Effect) -> Result<(), RpcError> {
        // fs/* writes land on the host directly, so nothing may reach a repository's `.git`
        // (directory or gitdir file, at any depth): git config, hooks and commondir there
        // would run on the user's next git command. The path is lexical (no link followed).
        // A directory laid out as a git directory is a repository's `.git` by another name,
        // and the layout can be written file by file (`target/HEAD`, `target/objects/`, …):
        // in the directories the snapshot leaves out, nothing after the calls would see it.
        if t.rel.split(|&b| b == b'/').any(|c| c == b".git") || self.in_git_layout(&t.rel) {
            return Err(refusal(
                effect,
                format!("write {}", t.show()),
                "git.data-only",
            ));
        }
        let rel = String::from_utf8_lossy(&t.rel);
        // A write to a protected path, beneath one, or to a directory holding one; what the
        // host runs by name wherever it is (a root-level pattern's new match, editor
        // configuration below the root, a hook manager's files at a nested repository's
        // root): a sandboxed step's write there is put back, and this one would land on the
        // host as it is.
        let hit = rel.is_empty()
            || self
                .policy
                .protected
                .iter()
                .any(|p| under(&rel, p) || under(p, &rel))
            || envgit_policy::is_protected(&rel)
            || envgit_policy::protected_below(&rel).is_some()
            || self.in_nested_repository_root(&t.rel);
        if hit {
            return Err(refusal(
                effect,
                format!("write {}", t.show()),
                "filesystem.protected",
            ));
        }
        if self.is_denied(&t.abs, true)
            || self.glob_denied(t)
            || t.rel.split(|&b| b == b'/').any(is_secret_name)
        {
            return Err(refusal(
                effect,
                format!("write {}", t.show()),
                "filesystem.deny_read",
            ));
        }
        Ok(())
    }

    /// Whether a write at `rel` lands in a directory git takes for a repository's own, or makes
    /// one: a directory on its way holding, with the name the write adds to it, `HEAD` with
    /// `objects` and `refs`, or `HEAD` with `commondir` (git's discovery, `envgit_store`'s
    /// `bare_repository.rs`; any kind of entry counts, which refuses more than git would take).
    /// Looked at beneath the root without following a link.
    fn in_git_layout(&self, rel: &[u8]) -> bool {
        let parts: Vec<&[u8]> = rel
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .collect();
        (0..parts.len()).any(|depth| {
            let Ok(d) = open_dir(self.root.as_fd(), &parts[..depth].join(&b'/')) else {
                // Not a directory (yet): the write makes it holding one name.
                return false;
            };
            let added = parts[depth];
            let has = |name: &[u8]| {
                name == added
                    || cname(name).is_ok_and(|n| {
                        rustix::fs::statat(&d, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok()
                    })
            };
            has(b"HEAD") && ((has(b"objects") && has(b"refs")) || has(b"commondir"))
        })
    }

    /// Whether `rel` is one of [`envgit_policy::REPOSITORY_ROOT_PATHS`] (`.husky`, `lefthook.*`,
    /// `.githooks`, …), or beneath one, at the root of a repository nested in the project: a
    /// directory on `rel`'s way holding a repository marker (`.git`, `.hg`, …), looked at
    /// beneath the root without following a link.
    fn in_nested_repository_root(&self, rel: &[u8]) -> bool {
        let parts: Vec<&[u8]> = rel.split(|&b| b == b'/').collect();
        (1..parts.len()).any(|depth| {
            let dir = parts[..depth].join(&b'/');
            let rest = String::from_utf8_lossy(&rel[dir.len() + 1..]).into_owned();
            if envgit_policy::repository_root_entry(&rest).is_none() {
                return false;
            }
            let Ok(d) = open_dir(self.root.as_fd(), &dir) else {
                // Not a directory (yet): nothing there holds a repository.
                return false;
            };
            envgit_policy::REPOSITORY_MARKERS
                .iter()
                .any(|m| rustix::fs::statat(&d, *m, AtFlags::SYMLINK_NOFOLLOW).is_ok())
        })
    }

    /// Answer one `fs/*` method; `None` when the method is not an fs method.
    pub fn call(&self, method: &str, p: &Value, effect: &mut Effect) -> Option<RpcResult> {
        Some(match method {
            "fs/getMetadata" => params(method, p).and_then(|p| self.metadata(&p, effect)),
            "fs/readFile" => params(method, p).and_then(|p| self.read_file(&p, effect)),
            "fs/writeFile" => params(method, p).and_then(|p| self.write_file(&p, effect)),
            "fs/createDirectory" => {
                params(method, p).and_then(|p| self.create_directory(&p, effect))
            }
            "fs/remove" => params(method, p).and_then(|p| self.remove(&p, effect)),
            "fs/copy" => params(method, p).and_then(|p| self.copy(&p, effect)),
            "fs/readDirectory" => params(method, p).and_then(|p| self.read_directory(&p, effect)),
            "fs/canonicalize" => params(method, p).and_then(|p| self.canonicalize(&p, effect)),
            _ => return None,
        })
    }

    fn metadata(&self, p: &PathParams, effect: &mut Effect) -> RpcResult {
        let t = self.target(&p.path, "stat", effect)?;
        // The sandbox shows a masked file empty and a masked directory empty: its real size,
        // times and entries are refused here as its content is.
        self.check_read(&t, effect)?;
        let (parent, name) = split(&t.rel);
        let st = if t.rel.is_empty() {
            rustix::fs::fstat(&self.root)
        } else {
            open_dir(self.root.as_fd(), parent).and_then(|d| {
                rustix::fs::statat(&d, cname(name)?.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
            })
        }
        .map_err(|e| map_errno(e, &t, effect, "stat"))?;
        let ft = FileType::from_raw_mode(st.st_mode);
        let ms = |s: i64, ns: i64| s.saturating_mul(1000).saturating_add(ns / 1_000_000);
        result(&Metadata {
            is_directory: ft == FileType::Directory,
            is_file: ft == FileType::RegularFile,
            is_symlink: ft == FileType::Symlink,
            size: st.st_size as u64,
            created_at_ms: 0,
            modified_at_ms: ms(st.st_mtime as i64, st.st_mtime_nsec as i64),
        })
    }

    fn read_bytes(&self, t: &Target, effect: &mut Effect) -> Result<Vec<u8>, RpcError> {
        self.check_read(t, effect)?;
        let fd = beneath(
            self.root.as_fd(),
            &t.rel,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map_err(|e| map_errno(e, t, effect, "read"))?;
        let st = rustix::fs::fstat(&fd).map_err(RpcError::errno)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(RpcError::params(format!(
                "{}: not a regular file",
                t.show()
            )));
        }
        if st.st_size as u64 > MAX_READ {
            return Err(RpcError::params(format!(
                "{}: larger than {} MiB",
                t.show(),
                MAX_READ >> 20
            )));
        }
        let mut data = Vec::new();
        std::fs::File::from(fd)
            .take(MAX_READ)
            .read_to_end(&mut data)
            .map_err(|e| RpcError::io(&e))?;
        Ok(data)
    }

    fn read_file(&self, p: &PathParams, effect: &mut Effect) -> RpcResult {
        let t = self.target(&p.path, "read", effect)?;
        let data = self.read_bytes(&t, effect)?;
        result(&ReadFileResult {
            data_base64: b64::encode(&data),
        })
    }

    /// Create the directories of `rel` (not following links); returns the fd of the last.
    fn mkdirs(&self, rel: &[u8]) -> rustix::io::Result<OwnedFd> {
        let mut cur = open_dir(self.root.as_fd(), b"")?;
        for comp in rel.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            let n = cname(comp)?;
            match rustix::fs::mkdirat(&cur, n.as_c_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e),
            }
            let st = rustix::fs::statat(&cur, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                return Err(Errno::LOOP);
            }
            cur = rustix::fs::openat(
                &cur,
                n.as_c_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )?;
        }
        Ok(cur)
    }

    fn write_bytes(&self, t: &Target, data: &[u8], effect: &mut Effect) -> Result<(), RpcError> {
        self.check_write(t, effect)?;
        let (parent, name) = split(&t.rel);
        let dir = self
            .mkdirs(parent)
            .map_err(|e| map_errno(e, t, effect, "write"))?;
        // Not truncated on open: what is opened is looked at first.
        let fd = rustix::fs::openat(
            &dir,
            cname(name).map_err(RpcError::errno)?.as_c_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| map_errno(e, t, effect, "write"))?;
        let st = rustix::fs::fstat(&fd).map_err(RpcError::errno)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(RpcError::params(format!(
                "{}: not a regular file",
                t.show()
            )));
        }
        // A file with another link (`ln ~/file project/x`, a pnpm store's files in
        // `node_modules/`, `git clone --local`) may be the same file outside the project: a
        // write in place would change it there, where the sandbox binds such a file read-only.
        if st.st_nlink > 1 {
            return Err(refusal(
                effect,
                format!("write {}", t.show()),
                "filesystem.hard_link",
            ));
        }
        rustix::fs::ftruncate(&fd, 0).map_err(RpcError::errno)?;
        std::fs::File::from(fd)
            .write_all(data)
            .map_err(|e| RpcError::io(&e))?;
        effect.wrote.push(t.show());
        Ok(())
    }

    fn write_file(&self, p: &WriteFileParams, effect: &mut Effect) -> RpcResult {
        let t = self.target(&p.path, "write", effect)?;
        let data = b64::decode(&p.data_base64)
            .ok_or_else(|| RpcError::params("dataBase64 is not base64"))?;
        self.write_bytes(&t, &data, effect)?;
        result(&Empty {})
    }

    fn create_directory(&self, p: &CreateDirectoryParams, effect: &mut Effect) -> RpcResult {
        let t = self.target(&p.path, "write", effect)?;
        self.check_write(&t, effect)?;
        if p.recursive {
            self.mkdirs(&t.rel)
                .map_err(|e| map_errno(e, &t, effect, "write"))?;
        } else {
            let (parent, name) = split(&t.rel);
            open_dir(self.root.as_fd(), parent)
                .and_then(|d| {
                    rustix::fs::mkdirat(&d, cname(name)?.as_c_str(), Mode::from_raw_mode(0o755))
                })
                .map_err(|e| map_errno(e, &t, effect, "write"))?;
        }
        effect.wrote.push(t.show());
        result(&Empty {})
    }

    fn remove(&self, p: &RemoveParams, effect: &mut Effect) -> RpcResult {
        let t = self.target(&p.path, "write", effect)?;
        self.check_write(&t, effect)?;
        let (parent, name) = split(&t.rel);
        let dir = match open_dir(self.root.as_fd(), parent) {
            Ok(d) => d,
            Err(Errno::NOENT) if p.force => return result(&Empty {}),
            Err(e) => return Err(map_errno(e, &t, effect, "write")),
        };
        let n = cname(name).map_err(RpcError::errno)?;
        // A masked file beneath is a mount in the sandbox, which no step's `rm -rf` removes
        // (and history holds no copy of a secret): the walk stops there.
        let masked = |rel: &[u8]| {
            self.masked(&Target {
                abs: self.policy.root.join(OsStr::from_bytes(rel)),
                rel: rel.to_vec(),
            })
        };
        match remove_at(dir.as_fd(), &n, p.recursive, &t.rel, &masked) {
            Ok(()) => {}
            Err(Walk::Masked(rel)) => {
                effect.wrote.push(t.show());
                return Err(refusal(
                    effect,
                    format!("write {}", paths::display(&rel)),
                    "filesystem.deny_read",
                ));
            }
            Err(Walk::Errno(Errno::NOENT)) if p.force => return result(&Empty {}),
            Err(Walk::Errno(e)) => return Err(map_errno(e, &t, effect, "write")),
            Err(Walk::TooDeep) => {
                // What lay above the bound is gone: history must show the call wrote.
                effect.wrote.push(t.show());
                return Err(too_deep(&t));
            }
        }
        effect.wrote.push(t.show());
        result(&Empty {})
    }

    fn copy(&self, p: &CopyParams, effect: &mut Effect) -> RpcResult {
        let src = self.target(&p.source_path, "read", effect)?;
        let dst = self.target(&p.destination_path, "write", effect)?;
        self.check_write(&dst, effect)?;
        if dst.rel == src.rel || dst.rel.starts_with(&[src.rel.as_slice(), b"/"].concat()) {
            return Err(RpcError::params(format!(
                "cannot copy {} into itself ({})",
                src.show(),
                dst.show()
            )));
        }
        self.copy_tree(src, dst, p.recursive, effect)?;
        result(&Empty {})
    }

    /// Depth first with an explicit stack of what is left to copy (never one call per level).
    fn copy_tree(
        &self,
        src: Target,
        dst: Target,
        recursive: bool,
        effect: &mut Effect,
    ) -> Result<(), RpcError> {
        let top = Target {
            abs: src.abs.clone(),
            rel: src.rel.clone(),
        };
        let mut todo = vec![(src, dst, 0usize)];
        while let Some((src, dst, depth)) = todo.pop() {
            if !self.copy_one(&src, &dst, recursive || depth > 0, effect)? {
                continue;
            }
            if depth >= MAX_DEPTH {
                return Err(too_deep(&top));
            }
            let d = open_dir(self.root.as_fd(), &src.rel)
                .map_err(|e| map_errno(e, &src, effect, "read"))?;
            // Reversed, so the first name is copied first.
            for n in names(d.as_fd()).map_err(RpcError::errno)?.iter().rev() {
                let n = n.to_bytes();
                let s = Target {
                    abs: src.abs.join(OsStr::from_bytes(n)),
                    rel: join(&src.rel, n),
                };
                let t = Target {
                    abs: dst.abs.join(OsStr::from_bytes(n)),
                    rel: join(&dst.rel, n),
                };
                todo.push((s, t, depth + 1));
            }
        }
        Ok(())
    }

    /// Copy `src` itself: a directory is made at `dst` (its entries are the caller's: true), a
    /// link is copied as a link, a file's content is copied.
    fn copy_one(
        &self,
        src: &Target,
        dst: &Target,
        recursive: bool,
        effect: &mut Effect,
    ) -> Result<bool, RpcError> {
        self.check_read(src, effect)?;
        let (parent, name) = split(&src.rel);
        let st = open_dir(self.root.as_fd(), parent)
            .and_then(|d| {
                rustix::fs::statat(&d, cname(name)?.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
            })
            .map_err(|e| map_errno(e, src, effect, "read"))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                if !recursive {
                    return Err(RpcError::params(format!(
                        "{} is a directory (recursive is false)",
                        src.show()
                    )));
                }
                self.check_write(dst, effect)?;
                self.mkdirs(&dst.rel)
                    .map_err(|e| map_errno(e, dst, effect, "write"))?;
                Ok(true)
            }
            FileType::Symlink => {
                // Copied as a link, never followed.
                self.check_write(dst, effect)?;
                let d = open_dir(self.root.as_fd(), parent).map_err(RpcError::errno)?;
                let target = rustix::fs::readlinkat(
                    &d,
                    cname(name).map_err(RpcError::errno)?.as_c_str(),
                    Vec::new(),
                )
                .map_err(RpcError::errno)?;
                let (dp, dn) = split(&dst.rel);
                let dd = self
                    .mkdirs(dp)
                    .map_err(|e| map_errno(e, dst, effect, "write"))?;
                rustix::fs::symlinkat(
                    target.as_c_str(),
                    &dd,
                    cname(dn).map_err(RpcError::errno)?.as_c_str(),
                )
                .map_err(|e| map_errno(e, dst, effect, "write"))?;
                effect.wrote.push(dst.show());
                Ok(false)
            }
            FileType::RegularFile => {
                let data = self.read_bytes(src, effect)?;
                self.write_bytes(dst, &data, effect)?;
                Ok(false)
            }
            _ => Err(RpcError::params(format!(
                "{}: not a file, directory or link",
                src.show()
            ))),
        }
    }

    fn read_directory(&self, p: &PathParams, effect: &mut Effect) -> RpcResult {
        let t = self.target(&p.path, "read", effect)?;
        self.check_read(&t, effect)?;
        let d =
            open_dir(self.root.as_fd(), &t.rel).map_err(|e| map_errno(e, &t, effect, "read"))?;
        let mut entries = Vec::new();
        for n in names(d.as_fd()).map_err(RpcError::errno)? {
            let st = rustix::fs::statat(&d, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW);
            let ft = st.map(|s| FileType::from_raw_mode(s.st_mode)).ok();
            entries.push(DirectoryEntry {
                file_name: String::from_utf8_lossy(n.to_bytes()).into_owned(),
                is_directory: ft == Some(FileType::Directory),
                is_file: ft == Some(FileType::RegularFile),
            });
        }
        result(&ReadDirectoryResult { entries })
    }

    /// Links inside the project are resolved (by the kernel, beneath the project root); a link
    /// leading out of it is refused.
    fn canonicalize(&self, p: &PathParams, effect: &mut Effect) -> RpcResult {
        let t = self.target(&p.path, "read", effect)?;
        // What lies beneath a masked directory does not exist in the sandbox: neither the
        // path asked for nor where its links lead may show it.
        self.check_read(&t, effect)?;
        let fd = rustix::fs::openat2(
            &self.root,
            os(&t.rel),
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| map_errno(e, &t, effect, "read"))?;
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        let real = std::fs::read_link(&link).map_err(|e| RpcError::io(&e))?;
        if let Some(rel) = paths::relative(&self.policy.root, &real) {
            self.check_read(
                &Target {
                    abs: real.clone(),
                    rel,
                },
                effect,
            )?;
        }
        result(&CanonicalPath {
            path: paths::to_uri(&real),
        })
    }
}

/// Remove `name` in `dir`, and with `recursive` what a directory holds, depth first with an
/// explicit stack of directory fds (each opened beneath the last without following a link),
/// never one call per level.
fn remove_at(
    dir: BorrowedFd<'_>,
    name: &CString,
    recursive: bool,
    rel: &[u8],
    masked: &dyn Fn(&[u8]) -> bool,
) -> Result<(), Walk> {
    let st = rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Ok(rustix::fs::unlinkat(
            dir,
            name.as_c_str(),
            AtFlags::empty(),
        )?);
    }
    if recursive {
        // Each open directory, the names left in it, its own name in the one above, and its
        // project-relative path.
        let top = open_sub(dir, name)?;
        let left = names(top.as_fd())?;
        let mut stack = vec![(top, left, name.clone(), rel.to_vec())];
        loop {
            let depth = stack.len();
            let Some((fd, left, _, at)) = stack.last_mut() else {
                break;
            };
            let Some(n) = left.pop() else {
                let (_, _, done, _) = stack.pop().ok_or(Walk::Errno(Errno::INVAL))?;
                if let Some((parent, _, _, _)) = stack.last() {
                    rustix::fs::unlinkat(parent, done.as_c_str(), AtFlags::REMOVEDIR)?;
                }
                continue;
            };
            let sub_rel = join(at, n.to_bytes());
            if masked(&sub_rel) {
                return Err(Walk::Masked(sub_rel));
            }
            let st = rustix::fs::statat(&*fd, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                rustix::fs::unlinkat(&*fd, n.as_c_str(), AtFlags::empty())?;
                continue;
            }
            if depth >= MAX_DEPTH {
                return Err(Walk::TooDeep);
            }
            let sub = open_sub(fd.as_fd(), &n)?;
            let left = names(sub.as_fd())?;
            stack.push((sub, left, n, sub_rel));
        }
    }
    Ok(rustix::fs::unlinkat(
        dir,
        name.as_c_str(),
        AtFlags::REMOVEDIR,
    )?)
}

fn open_sub(dir: BorrowedFd<'_>, name: &CString) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name.as_c_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
}
