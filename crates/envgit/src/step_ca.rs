//! The sandbox's CA and trust bundle, one per project and day instead of one per step. Making
//! them cost every step 0.4-0.5 ms (two key generations, a signature, and the 220 KB merged
//! bundle written); taking them back costs reading two keys.
//!
//! They live in the directory of steps ([`crate::runtime::step_dirs`]): `/dev/shm/envgit-UID-…`,
//! memory, where `/dev/shm` is a tmpfs, else envgit's private runtime directory under
//! `$ENVGIT_HOME`. The sandbox sees neither (its `/dev` is its own, the store's home is hidden),
//! and both are this user's alone (mode 0700); the keys' file is 0600. Whoever could read it is
//! this user outside the sandbox, who can already read everything the gate sees. A CA serves a
//! day (its certificate stays valid a week, so a step that began with it ends with it) and is
//! then replaced; a host bundle that changed (a package update) gets a new merged bundle.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use envgit_gate::{RunCa, StoredCa};
use envgit_sandbox::trust::TrustFiles;

use crate::failure::{CmdResult, Failure};

/// A CA and the files the sandbox is given for it.
pub(crate) struct StepTrust {
    pub(crate) ca: Arc<RunCa>,
    pub(crate) files: TrustFiles,
}

/// The start of a project's CA directory's name in the directory of steps.
pub(crate) const DIR_PREFIX: &str = "ca-";
/// The state file: the CA's keys and certificate, and which host bundle the merged one holds.
const STATE: &str = "ca.json";
/// How long one CA serves a project's steps.
const ROTATE_S: i64 = 24 * 3600;
/// Files a newer CA or bundle replaced stay this long: a step that read the state just before
/// may still be about to mount them.
const KEEP_REPLACED_S: i64 = 3600;

#[derive(serde::Serialize, serde::Deserialize)]
struct State {
    ca: StoredCa,
    /// [`envgit_sandbox::trust::host_bundle_identity`] when the merged bundle was written.
    bundle_of: String,
}

/// The project's CA and trust files in `base`, the directory of steps: taken back when they
/// are from the last day and the host's bundle is as it was, else made (and kept for the next
/// steps).
pub(crate) fn for_project(base: &Path, root: &Path) -> CmdResult<StepTrust> {
    let hash = blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex();
    let dir = base.join(format!("{DIR_PREFIX}{}", &hash[..12]));
    crate::runtime::private_dir(&dir)?;
    let now = unix_now();
    let bundle_of = envgit_sandbox::trust::host_bundle_identity();
    let kept = read_state(&dir).filter(|s| (0..ROTATE_S).contains(&(now - s.ca.made_at())));
    if let Some(state) = &kept
        && state.bundle_of == bundle_of
    {
        let files = files_of(&dir, state.ca.certificate_pem(), &state.bundle_of);
        if is_file(&files.ca) && is_file(&files.bundle) {
            return Ok(StepTrust {
                ca: Arc::new(state.ca_restored()?),
                files,
            });
        }
    }
    // A CA of today with an older bundle keeps its CA; anything else is made anew.
    let ca = match kept {
        Some(state) => state.ca_restored()?,
        None => RunCa::generate(&format!("steps in {}", root.display()))
            .map_err(|e| Failure::failed(e.to_string()))?,
    };
    let files = files_of(&dir, ca.certificate_pem(), &bundle_of);
    write_new(&files.ca, 0o644, |f| {
        f.write_all(ca.certificate_pem().as_bytes())
    })?;
    let temp = temporary(&files.bundle);
    envgit_sandbox::trust::write_bundle(&temp, ca.certificate_pem())
        .and_then(|()| std::fs::rename(&temp, &files.bundle))
        .map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            Failure::failed(format!("{}: {e}", files.bundle.display()))
        })?;
    let state = serde_json::to_vec(&State {
        ca: ca.stored().clone(),
        bundle_of,
    })
    .map_err(|e| Failure::failed(e.to_string()))?;
    write_new(&dir.join(STATE), 0o600, |f| f.write_all(&state))?;
    remove_replaced(&dir, &files, now);
    remove_idle_projects(base, &dir, now);
    Ok(StepTrust {
        ca: Arc::new(ca),
        files,
    })
}

impl State {
    fn ca_restored(&self) -> CmdResult<RunCa> {
        RunCa::restore(self.ca.clone()).map_err(|e| Failure::failed(e.to_string()))
    }
}

fn read_state(dir: &Path) -> Option<State> {
    let path = dir.join(STATE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // Written by this user, readable by no one else; anything else is made anew.
    if meta.uid() != rustix::process::getuid().as_raw() || meta.mode() & 0o077 != 0 {
        return None;
    }
    serde_json::from_reader(std::io::BufReader::new(file)).ok()
}

/// The CA's and the merged bundle's files: named by the CA and the host bundle they hold, so
/// a step only ever mounts files that match the CA it holds in memory.
fn files_of(dir: &Path, ca_pem: &str, bundle_of: &str) -> TrustFiles {
    let ca_tag = &blake3::hash(ca_pem.as_bytes()).to_hex()[..16];
    let bundle_tag = &blake3::hash(bundle_of.as_bytes()).to_hex()[..8];
    TrustFiles {
        ca: dir.join(format!("ca-{ca_tag}.pem")),
        bundle: dir.join(format!("bundle-{ca_tag}-{bundle_tag}.pem")),
    }
}

fn is_file(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

fn temporary(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.tmp", std::process::id()));
    PathBuf::from(name)
}

/// Writes `path` whole or not at all: a new file beside it, renamed over it.
fn write_new(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> CmdResult<()> {
    let temp = temporary(path);
    let _ = std::fs::remove_file(&temp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)
        .and_then(|mut f| write(&mut f))
        .and_then(|()| std::fs::rename(&temp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        Failure::failed(format!("{}: {e}", path.display()))
    })
}

/// Removes the files of CAs and bundles replaced more than an hour ago.
fn remove_replaced(dir: &Path, current: &TrustFiles, now: i64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path == current.ca || path == current.bundle || e.file_name() == STATE {
            continue;
        }
        let old = e
            .metadata()
            .is_ok_and(|m| now - m.mtime() > KEEP_REPLACED_S);
        if old {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Other projects' CA directories whose CA is past its day (their next step makes a new one
/// anyway): what `/dev/shm` holds stays the projects of the last day, ~225 KB each.
fn remove_idle_projects(base: &Path, own: &Path, now: i64) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let ours = e.file_name().to_string_lossy().starts_with(DIR_PREFIX)
            && e.file_type().is_ok_and(|t| t.is_dir());
        if !ours || path == own {
            continue;
        }
        let idle = match read_state(&path) {
            Some(state) => now - state.ca.made_at() > ROTATE_S + KEEP_REPLACED_S,
            // No state (its first step is being set up, or it was left broken): by its age.
            None => e
                .metadata()
                .is_ok_and(|m| now - m.mtime() > ROTATE_S + KEEP_REPLACED_S),
        };
        if idle {
            let _ = envgit_store::remove_tree(&path);
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(t: &StepTrust) -> (String, String) {
        (
            std::fs::read_to_string(&t.files.ca).unwrap(),
            std::fs::read_to_string(&t.files.bundle).unwrap(),
        )
    }

    #[test]
    fn a_projects_steps_share_one_ca_and_another_project_has_its_own() {
        let base = tempfile::tempdir().unwrap();
        let a = for_project(base.path(), Path::new("/work/a")).unwrap();
        let again = for_project(base.path(), Path::new("/work/a")).unwrap();
        let b = for_project(base.path(), Path::new("/work/b")).unwrap();
        assert_eq!(a.ca.certificate_pem(), again.ca.certificate_pem());
        assert_eq!(a.files.bundle, again.files.bundle);
        assert_ne!(a.ca.certificate_pem(), b.ca.certificate_pem());
        let (ca, bundle) = files(&again);
        assert_eq!(ca, again.ca.certificate_pem());
        assert!(bundle.starts_with(again.ca.certificate_pem()));
        let state = a.files.ca.parent().unwrap().join(STATE);
        let mode = std::fs::metadata(&state).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    /// A day-old CA is replaced; a state file someone else could have written, or a broken
    /// one, is never trusted: a new CA is made.
    #[test]
    fn an_old_or_untrusted_state_gives_a_new_ca() {
        let base = tempfile::tempdir().unwrap();
        let root = Path::new("/work/a");
        let first = for_project(base.path(), root).unwrap();
        let dir = first.files.ca.parent().unwrap().to_path_buf();
        let state_path = dir.join(STATE);
        let mut state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&state_path).unwrap()).unwrap();
        state["ca"]["made_at"] = (unix_now() - ROTATE_S - 1).into();
        std::fs::write(&state_path, serde_json::to_vec(&state).unwrap()).unwrap();
        let aged = for_project(base.path(), root).unwrap();
        assert_ne!(aged.ca.certificate_pem(), first.ca.certificate_pem());

        std::fs::set_permissions(&state_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let widened = for_project(base.path(), root).unwrap();
        assert_ne!(widened.ca.certificate_pem(), aged.ca.certificate_pem());

        std::fs::write(&state_path, b"{").unwrap();
        std::fs::set_permissions(&state_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let broken = for_project(base.path(), root).unwrap();
        assert_ne!(broken.ca.certificate_pem(), widened.ca.certificate_pem());
        let (ca, bundle) = files(&broken);
        assert_eq!(ca, broken.ca.certificate_pem());
        assert!(bundle.starts_with(&ca));
    }

    /// A project whose CA is past its day loses its directory when another project makes a
    /// CA; one of today keeps it.
    #[test]
    fn idle_projects_lose_their_ca_directory() {
        let base = tempfile::tempdir().unwrap();
        let old = for_project(base.path(), Path::new("/work/old")).unwrap();
        let today = for_project(base.path(), Path::new("/work/today")).unwrap();
        let old_dir = old.files.ca.parent().unwrap().to_path_buf();
        let state_path = old_dir.join(STATE);
        let mut state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&state_path).unwrap()).unwrap();
        state["ca"]["made_at"] = (unix_now() - ROTATE_S - KEEP_REPLACED_S - 1).into();
        std::fs::write(&state_path, serde_json::to_vec(&state).unwrap()).unwrap();
        for_project(base.path(), Path::new("/work/new")).unwrap();
        assert!(!old_dir.exists());
        assert!(today.files.bundle.exists());
    }

    use std::os::unix::fs::PermissionsExt;
}
