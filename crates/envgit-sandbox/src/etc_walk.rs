//! The walk of `/etc` for what only root may read ([`crate::plan::etc_private`]), started as
//! early as possible. It is the plan's largest cost (1–4 ms for the ~1,200 entries of this
//! project's machines, one `statx` each) and needs nothing from the step: `envgit run` starts
//! it in `main`, beside opening the store and scanning the project, and the plan takes it.

use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::JoinHandle;

type Walk = JoinHandle<Vec<PathBuf>>;

static EARLY: Mutex<Option<Walk>> = Mutex::new(None);

/// Starts the walk on a thread now, for the next [`take_or_start`]. Call it after
/// [`crate::prefork`]: the zygote is only forked while the process has one thread. The
/// zygote's early start waits for the walk's end ([`crate::enter_namespaces_early`]).
pub fn start_early() {
    crate::zygote::walk_started();
    let walk = spawn(|| {
        let private = crate::plan::etc_private();
        crate::zygote::walk_finished(&private);
        private
    });
    if walk.is_none() {
        crate::zygote::walk_finished(&[]);
    }
    *EARLY.lock().unwrap_or_else(|p| p.into_inner()) = walk;
}

/// The walk [`start_early`] began, once; otherwise (a later step of a long-lived process,
/// which must see `/etc` as it is now) one started now. `None` when no thread can start:
/// the plan then walks on its own thread.
pub fn take_or_start() -> Option<Walk> {
    let early = EARLY.lock().unwrap_or_else(|p| p.into_inner()).take();
    early.or_else(start)
}

fn start() -> Option<Walk> {
    spawn(crate::plan::etc_private)
}

fn spawn(walk: impl FnOnce() -> Vec<PathBuf> + Send + 'static) -> Option<Walk> {
    std::thread::Builder::new()
        .name("envgit-etc-walk".into())
        .spawn(walk)
        .ok()
}
