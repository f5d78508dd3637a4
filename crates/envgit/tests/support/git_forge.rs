//! Git data forged the way an attacker inside a step would: objects under names not their
//! own, pack indexes and commit-graphs that lie, made with real git and fixed up so git reads
//! them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha1::Digest;

use super::Env;

/// A scratch repository beside the project, for objects the host must not have.
pub fn scratch(env: &Env) -> PathBuf {
    let dir = env.tmp.path().join("scratch");
    std::fs::create_dir_all(&dir).unwrap();
    env.git(&dir, &["init", "-q"]);
    dir
}

/// `content` as a blob written into `repo`: its id.
pub fn blob(env: &Env, repo: &Path, content: &str) -> String {
    let path = repo.join("blob-content");
    std::fs::write(&path, content).unwrap();
    let id = env.git(repo, &["hash-object", "-w", path.to_str().unwrap()]);
    id.trim().to_owned()
}

/// A pack of `repo` holding the one object `id`, written into `repo`: the pack's name.
pub fn one_object_pack(repo: &Path, id: &str) -> String {
    let pack = Command::new("git")
        .args(["pack-objects", "-q", "pack"])
        .current_dir(repo)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    pack.stdin
        .as_ref()
        .unwrap()
        .write_all(format!("{id}\n").as_bytes())
        .unwrap();
    let out = pack.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Sets the trailing SHA-1 of a git data file (pack index, commit-graph) to match its content.
fn fix_checksum(b: &mut [u8]) {
    let len = b.len();
    let sum = sha1::Sha1::digest(&b[..len - 20]);
    b[len - 20..].copy_from_slice(&sum);
}

/// Rewrites a one-object pack index (version 2) so that it claims the object id `claim`
/// (hex, SHA-1) for the object its pack holds: fan-out and trailing checksum made right,
/// so git reads it.
pub fn forge_index(idx: &[u8], claim: &str) -> Vec<u8> {
    let claim = unhex(claim);
    let mut b = idx.to_vec();
    assert_eq!(&b[..8], b"\xfftOc\x00\x00\x00\x02", "not a version 2 index");
    assert_eq!(
        &b[8 + 255 * 4..8 + 256 * 4],
        &[0, 0, 0, 1],
        "not one object"
    );
    let names = 8 + 256 * 4;
    b[names..names + 20].copy_from_slice(&claim);
    for i in 0..256usize {
        let count: u32 = if i >= usize::from(claim[0]) { 1 } else { 0 };
        b[8 + i * 4..12 + i * 4].copy_from_slice(&count.to_be_bytes());
    }
    fix_checksum(&mut b);
    b
}

/// Rewrites a commit-graph (SHA-1) so that it gives `commit` the root tree `tree`: git then
/// takes that tree for the commit wherever it trusts the graph (`git status`, `git diff HEAD`,
/// `git show`) while the commit object itself says otherwise.
pub fn forge_commit_graph(graph: &[u8], commit: &str, tree: &str) -> Vec<u8> {
    let (commit, tree) = (unhex(commit), unhex(tree));
    let mut b = graph.to_vec();
    assert_eq!(&b[..4], b"CGPH", "not a commit-graph");
    let chunks = usize::from(b[6]);
    let offset = |id: &[u8]| -> usize {
        (0..chunks)
            .map(|i| 8 + 12 * i)
            .find(|&at| &b[at..at + 4] == id)
            .map(|at| usize::try_from(u64::from_be_bytes(b[at + 4..at + 12].try_into().unwrap())))
            .expect("a chunk the graph lacks")
            .unwrap()
    };
    let (fanout, lookup, data) = (offset(b"OIDF"), offset(b"OIDL"), offset(b"CDAT"));
    let n = u32::from_be_bytes(b[fanout + 255 * 4..fanout + 256 * 4].try_into().unwrap());
    let n = usize::try_from(n).unwrap();
    let i = (0..n)
        .find(|i| b[lookup + 20 * i..lookup + 20 * i + 20] == commit[..])
        .expect("the commit is not in the graph");
    // Each commit's data: its root tree's id, two parent positions, generation and date.
    b[data + 36 * i..data + 36 * i + 20].copy_from_slice(&tree);
    fix_checksum(&mut b);
    b
}

/// Writes into the project's `forged/` a pack holding the blob `echo PWNED` and an index that
/// gives that blob the id `trusted` (an object the user has). Returns the blob's real id.
pub fn lying_pack(env: &Env, trusted: &str) -> String {
    let other = scratch(env);
    let evil = blob(env, &other, "echo PWNED\n");
    let name = one_object_pack(&other, &evil);
    let forged_dir = env.path("forged");
    std::fs::create_dir_all(&forged_dir).unwrap();
    std::fs::copy(
        other.join(format!("pack-{name}.pack")),
        forged_dir.join(format!("pack-{name}.pack")),
    )
    .unwrap();
    let idx = std::fs::read(other.join(format!("pack-{name}.idx"))).unwrap();
    std::fs::write(
        forged_dir.join(format!("pack-{name}.idx")),
        forge_index(&idx, trusted),
    )
    .unwrap();
    evil
}

/// Commits `content` as `name` in `repo`, tracked by Git LFS (its smudge filter configured in
/// the repository): the object's oid, whose file is `.git/lfs/objects/xx/yy/<oid>`.
pub fn lfs_commit(env: &Env, repo: &Path, name: &str, content: &str) -> String {
    let lfs = Command::new("git").args(["lfs", "version"]).output();
    assert!(
        lfs.is_ok_and(|o| o.status.success()),
        "git-lfs is missing: scripts/install-deps installs it"
    );
    env.git(repo, &["lfs", "install", "--local"]);
    env.git(repo, &["lfs", "track", name]);
    std::fs::write(repo.join(name), content).unwrap();
    env.git(repo, &["add", ".gitattributes", name]);
    env.git(repo, &["commit", "-q", "-m", "lfs"]);
    let listed = env.git(repo, &["lfs", "ls-files", "-l"]);
    listed.split_whitespace().next().unwrap().to_owned()
}

/// Where Git LFS keeps the object `oid`, relative to the repository's `.git`.
pub fn lfs_path(oid: &str) -> String {
    format!("lfs/objects/{}/{}/{oid}", &oid[..2], &oid[2..4])
}

/// A Python script, run inside a step as the agent would, that rewrites `.git/index` (a
/// version 2 index of SHA-1 ids) and its checksum: `tree NAME HEX` gives the cache-tree
/// (`TREE` extension) node named `NAME` the tree `HEX` while every entry stays as it was;
/// `reuc PATH HEX` adds a resolve-undo (`REUC`) record for `PATH` whose three stages are the
/// blob `HEX`.
pub const PATCH_INDEX: &str = r#"
import hashlib, struct, sys
d = open('.git/index', 'rb').read()[:-20]
n = struct.unpack('>I', d[8:12])[0]
off = 12
for _ in range(n):
    off += (62 + (struct.unpack('>H', d[off + 60:off + 62])[0] & 0xfff) + 8) & ~7
entries, exts = d[:off], []
while off + 8 <= len(d):
    size = struct.unpack('>I', d[off + 4:off + 8])[0]
    exts.append([d[off:off + 4], d[off + 8:off + 8 + size]])
    off += 8 + size
what, name, new = sys.argv[1], sys.argv[2].encode(), bytes.fromhex(sys.argv[3])
if what == 'tree':
    found = False
    for ext in exts:
        if ext[0] != b'TREE':
            continue
        t, i, out = ext[1], 0, b''
        while i < len(t):
            z = t.index(b'\0', i)
            nl = t.index(b'\n', z)
            valid = int(t[z + 1:nl].split(b' ')[0]) >= 0
            here = t[i:z] == name and valid
            out += t[i:nl + 1] + (new if here else t[nl + 1:nl + 21] if valid else b'')
            found |= here
            i = nl + 1 + (20 if valid else 0)
        ext[1] = out
    assert found, 'no valid cache-tree node ' + sys.argv[2]
else:
    exts.append([b'REUC', name + b'\0' + b'100755\0' * 3 + new * 3])
body = entries + b''.join(s + struct.pack('>I', len(b)) + b for s, b in exts)
open('.git/index', 'wb').write(body + hashlib.sha1(body).digest())
"#;
