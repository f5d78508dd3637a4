//! Objects from the step are taken only for what their content is. Git trusts an object's
//! name when it reads one: a loose object whose content hashes to another id, or a pack whose
//! `.idx` gives an id the host has other content, would make the host's `git checkout` write
//! what the step chose under an id the user trusts (and a later `make` run it). So a loose
//! object is hashed against its name here, and a pack is indexed again by the host's own
//! `git index-pack` (what `git fetch` runs on packs from untrusted remotes), never by the
//! step's `.idx`.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use sha1::Digest;

use super::write;
use crate::beneath::open_file;

/// Whether the loose object file `objects/xx/<rest>` holds, zlib-compressed, an object whose
/// id is `xx<rest>` (SHA-1 for 40 hex digits, SHA-256 for 64).
pub fn loose_matches(rel: &str, compressed: &[u8]) -> bool {
    let Some(name) = rel.strip_prefix("objects/").map(|n| n.replace('/', "")) else {
        return false;
    };
    let mut inflated = flate2::read::ZlibDecoder::new(compressed);
    let hex = match name.len() {
        40 => hash_hex(&mut inflated, sha1::Sha1::new()),
        64 => hash_hex(&mut inflated, sha2::Sha256::new()),
        _ => None,
    };
    hex.is_some_and(|h| h.eq_ignore_ascii_case(&name))
}

/// Whether the Git LFS object file `lfs/objects/xx/yy/<oid>` holds content whose SHA-256 is
/// `<oid>`.
pub fn lfs_matches(rel: &str, content: &[u8]) -> bool {
    let Some(oid) = rel
        .strip_prefix("lfs/objects/")
        .and_then(super::classify::lfs_oid)
    else {
        return false;
    };
    hash_hex(&mut &content[..], sha2::Sha256::new()).is_some_and(|h| h == oid)
}

/// The hex digest of everything `r` yields (git hashes the inflated header and content).
fn hash_hex<D: Digest>(r: &mut impl Read, mut digest: D) -> Option<String> {
    let mut buf = [0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => digest.update(&buf[..n]),
            Err(_) => return None,
        }
    }
    Some(to_hex(&digest.finalize()))
}

/// A digest in lowercase hex.
pub fn to_hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Gives the step's pack `rel` (in the upper layer `up`) to the host's `git index-pack
/// --stdin` in `git_dir`, which checks it, names every object by its content and writes the
/// pack with an index of its own. Returns the pack's name as git gave it, or why it was not
/// taken.
pub fn index_pack(
    git_dir: &Path,
    root: BorrowedFd<'_>,
    up: BorrowedFd<'_>,
    rel: &str,
) -> Result<String, String> {
    let pack = (|| {
        let dir = write::parent(up, rel, false)?;
        let name = crate::beneath::cstr(rel.rsplit('/').next().unwrap_or(rel).as_bytes())?;
        let fd = open_file(dir.as_fd(), &name)?;
        if rustix::fs::fstat(&fd)?.st_nlink != 1 {
            return Err(rustix::io::Errno::MLINK);
        }
        Ok(std::fs::File::from(fd))
    })()
    .map_err(|e| format!("not a plain file: {e}"))?;
    let out = git()
        .arg("--git-dir")
        .arg(git_dir)
        .args(["index-pack", "--stdin"])
        .stdin(Stdio::from(pack))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("the host's `git index-pack` could not run: {e}"))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "the host's `git index-pack` refused it: {}",
            why.trim().lines().last().unwrap_or("no reason given")
        ));
    }
    // `pack\t<hash>` (or `keep\t<hash>`), or the bare hash.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let hash = stdout
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    for ext in ["pack", "idx", "rev"] {
        // Best effort: the files are complete and in place whoever owns them.
        let _ = write::give_to_owner(root, &format!("objects/pack/pack-{hash}.{ext}"));
    }
    Ok(hash)
}

/// Why a loose object is refused when its content does not hash to its name.
pub const LOOSE_REFUSAL: &str =
    "its content does not hash to its name (git would take it for that object)";
/// Why a Git LFS object is refused when its content does not hash to its name.
pub const LFS_REFUSAL: &str =
    "its content does not hash to its name (git-lfs would write it for that object)";

/// Why a `shallow` file is refused when it names a commit the repository already has.
pub const SHALLOW_REFUSAL: &str = "it names a commit the repository already has as having no \
     parents: the history behind it would vanish from `git log`, and `git gc` would delete it";

/// Which of `ids` the host's repository at `git_dir` has (`git cat-file --batch-check`).
pub fn host_has(git_dir: &Path, ids: &BTreeSet<String>) -> Result<BTreeSet<String>, String> {
    let mut cmd = git();
    cmd.arg("--git-dir")
        .arg(git_dir)
        .args(["cat-file", "--batch-check=%(objectname)"]);
    let input: String = ids.iter().map(|id| format!("{id}\n")).collect();
    let out = with_input(cmd, input.into_bytes()).map_err(|e| {
        format!("the host's `git cat-file` could not say which commits it has: {e}")
    })?;
    // `<id>` for an object it has, `<id> missing` for one it lacks.
    Ok(out
        .lines()
        .filter(|l| !l.ends_with(" missing"))
        .map(str::to_owned)
        .collect())
}

/// The object ids a pack index lists, read by the host's `git show-index`.
pub fn index_ids(idx: Vec<u8>, sha256: bool) -> Result<BTreeSet<String>, String> {
    let mut cmd = git();
    let format = if sha256 { "sha256" } else { "sha1" };
    cmd.args(["show-index", &format!("--object-format={format}")]);
    let out = with_input(cmd, idx)
        .map_err(|e| format!("the host's `git show-index` could not read a pack index: {e}"))?;
    // `<offset> <id> (<crc>)`.
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect())
}

/// Runs `cmd` with `input` on its standard input: its standard output, or why it failed.
fn with_input(mut cmd: Command, input: Vec<u8>) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdin = child.stdin.take();
    // Written beside the read: a long input would fill both pipes otherwise.
    let (written, out) = std::thread::scope(|s| {
        let writer =
            s.spawn(move || stdin.map(|mut stdin| std::io::Write::write_all(&mut stdin, &input)));
        let out = child.wait_with_output();
        (writer.join().ok().flatten(), out)
    });
    let out = out.map_err(|e| e.to_string())?;
    if !out.status.success() || !matches!(written, Some(Ok(()))) {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Checks a pack against its index (and its reverse index, when there is one beside them)
/// with the host's `git verify-pack`, which indexes the pack again and compares: `idx` names
/// `<dir>/pack-<hash>.idx`, the pack beside it. `Err` says why the index does not name the
/// pack's objects by their content.
pub fn verify_pack(idx: &Path, sha256: bool) -> Result<(), String> {
    let mut cmd = git();
    // A `.rev` present is compared too; absent, git works without one.
    cmd.args(["-c", "pack.writeReverseIndex=true", "verify-pack"]);
    if sha256 {
        cmd.arg("--object-format=sha256");
    }
    let out = cmd
        .arg(idx)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("the host's `git verify-pack` could not run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "the host's `git verify-pack` found that its index does not name the pack's objects by \
         their content ({})",
        why.trim().lines().last().unwrap_or("no reason given")
    ))
}

/// Refs under `refs/replace/` make git read another object's content wherever the one they
/// name is asked for (`git checkout` included): a step may not add one, in whatever store the
/// refs live. Why a ref store's new content is refused, if it adds or changes one.
pub const REPLACE_REFUSAL: &str = "it adds a replace ref (refs/replace/…), which makes the host's git \
     read other content for an object the user trusts";

/// The `<id> refs/replace/<name>` lines of a `packed-refs` file.
pub fn packed_replace_refs(text: &[u8]) -> BTreeSet<String> {
    String::from_utf8_lossy(text)
        .lines()
        .filter(|l| {
            l.split_once(' ')
                .is_some_and(|(_, name)| name.starts_with("refs/replace/"))
        })
        .map(str::to_owned)
        .collect()
}

/// The host's replace refs in `git_dir`, as `<id> refs/replace/<name>` lines.
pub fn host_replace_refs(git_dir: &Path) -> Result<BTreeSet<String>, String> {
    refs_via_git(git_dir, "refs/replace/")
}

/// The host's refs in `git_dir` under `prefix`, as `<id> <name>` lines.
pub fn host_refs(git_dir: &Path, prefix: &str) -> Result<BTreeSet<String>, String> {
    refs_via_git(git_dir, prefix)
}

/// The replace refs a reftable `tables.list` would give a repository, each table it names
/// read by `table`: read by the host's git from a scratch repository holding only those
/// tables (the format asked for needs no object, so a ref naming one absent is listed too).
pub fn reftable_replace_refs(
    list: &[u8],
    table: impl FnMut(&str) -> Result<Vec<u8>, String>,
) -> Result<BTreeSet<String>, String> {
    reftable_refs(list, table, "refs/replace/")
}

/// The refs under `prefix` a reftable `tables.list` would give a repository, as
/// [`reftable_replace_refs`] reads them: `<id> <name>` lines.
pub fn reftable_refs(
    list: &[u8],
    table: impl FnMut(&str) -> Result<Vec<u8>, String>,
    prefix: &str,
) -> Result<BTreeSet<String>, String> {
    let (_scratch, repo) = reftable_scratch(list, table, None)?;
    refs_via_git(&repo, prefix)
}

/// What else a reftable `tables.list` names beside its refs, which a reftable keeps in its
/// tables too: a detached `HEAD` (`<id> HEAD`) and every reflog entry (`<id> <ref>@{log}`),
/// read from a scratch repository borrowing `objects` (git reads a reflog's commits).
pub fn reftable_named(
    list: &[u8],
    table: impl FnMut(&str) -> Result<Vec<u8>, String>,
    objects: &Path,
) -> Result<BTreeSet<String>, String> {
    let (_scratch, repo) = reftable_scratch(list, table, Some(objects))?;
    named_via_git(&repo)
}

/// [`reftable_named`] of the host's own repository.
pub fn host_named(git_dir: &Path) -> Result<BTreeSet<String>, String> {
    named_via_git(git_dir)
}

fn named_via_git(git_dir: &Path) -> Result<BTreeSet<String>, String> {
    let run = |args: &[&str]| {
        git()
            .arg("--git-dir")
            .arg(git_dir)
            .args(args)
            .output()
            .map_err(|e| format!("the host's git could not run: {e}"))
    };
    let mut named = BTreeSet::new();
    // `HEAD`'s id, then its name: `HEAD` itself when it is detached.
    let head = run(&["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"])?;
    if head.status.success() {
        let text = String::from_utf8_lossy(&head.stdout);
        let mut lines = text.lines();
        if let (Some(id), Some("HEAD")) = (lines.next(), lines.next()) {
            named.insert(format!("{id} HEAD"));
        }
    }
    let logs = run(&["log", "--walk-reflogs", "--all", "--format=%H %gD"])?;
    if !logs.status.success() {
        return Err(format!(
            "the host's git could not read the reflogs: {}",
            String::from_utf8_lossy(&logs.stderr).trim()
        ));
    }
    for line in String::from_utf8_lossy(&logs.stdout).lines() {
        // `<id> <ref>@{<n>}`: the entry's position changes as entries are added.
        if let Some((entry, _)) = line.rsplit_once("@{") {
            named.insert(format!("{entry}@{{log}}"));
        }
    }
    Ok(named)
}

/// A scratch bare reftable repository holding the tables `list` names (each read by
/// `table`), borrowing `objects` when given; kept while the returned directory lives.
fn reftable_scratch(
    list: &[u8],
    mut table: impl FnMut(&str) -> Result<Vec<u8>, String>,
    objects: Option<&Path>,
) -> Result<(tempfile::TempDir, std::path::PathBuf), String> {
    let scratch = tempfile::tempdir().map_err(|e| format!("a scratch repository: {e}"))?;
    let repo = scratch.path().join("r.git");
    let init = git()
        .args(["init", "-q", "--bare", "--ref-format=reftable"])
        .arg(&repo)
        .output()
        .map_err(|e| format!("the host's git could not run: {e}"))?;
    if !init.status.success() {
        return Err("the host's git cannot make a reftable repository to read it with".into());
    }
    let io = |e: std::io::Error| format!("a scratch repository: {e}");
    for name in String::from_utf8_lossy(list).lines() {
        std::fs::write(repo.join("reftable").join(name), table(name)?).map_err(io)?;
    }
    std::fs::write(repo.join("reftable/tables.list"), list).map_err(io)?;
    if let Some(objects) = objects {
        let mut line = objects.as_os_str().as_encoded_bytes().to_vec();
        line.push(b'\n');
        std::fs::write(repo.join("objects/info/alternates"), line).map_err(io)?;
    }
    Ok((scratch, repo))
}

fn refs_via_git(git_dir: &Path, prefix: &str) -> Result<BTreeSet<String>, String> {
    let out = git()
        .arg("--git-dir")
        .arg(git_dir)
        .args(["for-each-ref", "--format=%(objectname) %(refname)", prefix])
        .output()
        .map_err(|e| format!("the host's git could not run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the host's git could not list its refs: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// The host's git, with nothing of envgit's environment that would point it elsewhere, run
/// from `/` so that it never finds a repository on its own (the caller's directory may be in
/// one the step wrote). It is told the repository is safe to use: envgit names it with
/// `--git-dir`, which git 2.47 does not check for ownership, but a git that did would refuse
/// another user's repository to envgit running as root ("dubious ownership").
pub(super) fn git() -> Command {
    let mut git = Command::new("git");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GIT_") {
            git.env_remove(name);
        }
    }
    git.args(["-c", "safe.directory=*"])
        .current_dir("/")
        .stdin(Stdio::null());
    git
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_loose_object_is_checked_against_its_name() {
        // `printf hello | git hash-object --stdin`
        let id = "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0";
        let rel = format!("objects/{}/{}", &id[..2], &id[2..]);
        assert!(loose_matches(&rel, &zlib(b"blob 5\0hello")));
        assert!(!loose_matches(&rel, &zlib(b"blob 5\0HELLO")));
        assert!(!loose_matches(&rel, b"not zlib at all"));
        let other = format!("objects/{}/{}", &id[..2], "0".repeat(38));
        assert!(!loose_matches(&other, &zlib(b"blob 5\0hello")));
    }
}
