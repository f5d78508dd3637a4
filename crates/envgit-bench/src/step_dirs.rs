//! A benchmark's temporary `ENVGIT_HOME`s leave nothing in `/dev/shm` (each binary, and the
//! store bench, includes this file by path or as a module).

use std::path::PathBuf;

/// When dropped, removes the directory of steps envgit keeps on tmpfs for each of these
/// `ENVGIT_HOME`s (`/dev/shm/envgit-UID-HASH`, HASH naming the home; `runtime.rs`), with the
/// projects' CAs in it (~225 KB each): a benchmark's temporary home's would otherwise stay
/// until the machine restarts. Drop it while the homes still exist (they are named by their
/// canonical paths).
pub struct ForgetsStepDirs(pub Vec<PathBuf>);

impl Drop for ForgetsStepDirs {
    fn drop(&mut self) {
        forget_step_dirs(&self.0);
    }
}

/// [`ForgetsStepDirs`], now.
pub fn forget_step_dirs(homes: &[PathBuf]) {
    use std::os::unix::fs::MetadataExt;
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return;
    };
    for home in homes {
        let home = home.canonicalize().unwrap_or_else(|_| home.clone());
        let hash = blake3::hash(home.as_os_str().as_encoded_bytes()).to_hex();
        let _ = std::fs::remove_dir_all(format!("/dev/shm/envgit-{uid}-{}", &hash[..12]));
    }
}
