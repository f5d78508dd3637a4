//! The walk of `/etc` for what only root may read ([`crate::plan::etc_private`]), started as
//! early as possible. It is the plan's largest cost (1–4 ms for the ~1,200 entries of this
//! project's machines) and needs nothing from the step: `envgit run` starts it in `main`,
//! beside opening the store and scanning the project, and the plan takes it. While `/etc` is
//! as the last walk found it, that walk's finds are taken from its cache (`etc_cache.rs`:
//! ~470 `lstat`s, 0.3 ms) and the zygote's early start, which waits for them, begins sooner.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

type Walk = JoinHandle<Vec<PathBuf>>;

static EARLY: Mutex<Option<Walk>> = Mutex::new(None);

/// Where the walk is cached (`etc_cache.rs`), once [`start_early`] was
/// told.
static CACHE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// How the commands that do not start the walk early ([`start_early`]: `envgit run`) find
/// where it is cached, when a walk first needs it.
static FIND_CACHE: OnceLock<fn() -> Option<PathBuf>> = OnceLock::new();

/// Says how to find where the walk may be cached (see [`start_early`]), for a command that
/// walks later, or more than once (a session's look before each call).
pub fn cache_found_by(find: fn() -> Option<PathBuf>) {
    let _ = FIND_CACHE.set(find);
}

/// Where the walk is cached, if anywhere.
fn cache() -> Option<PathBuf> {
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if cache.is_none() {
        *cache = FIND_CACHE.get().and_then(|find| find());
    }
    cache.clone()
}

/// Starts the walk on a thread now, for the next [`take_or_start`]. Call it after
/// [`crate::prefork`]: the zygote is only forked while the process has one thread. The
/// zygote's early start waits for the walk's end ([`crate::enter_namespaces_early`]).
/// `cache` says, on that thread, where the walk may be cached: a file in a directory only
/// this user can write (none: every walk is whole).
pub fn start_early(cache: impl FnOnce() -> Option<PathBuf> + Send + 'static) {
    crate::zygote::walk_started();
    let walk = spawn(|| {
        let cache = cache();
        *CACHE.lock().unwrap_or_else(|p| p.into_inner()) = cache.clone();
        let private = of(cache.as_deref());
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

/// What the walk would find now, on this thread: for a session's look before each call
/// ([`crate::host_secrets::HostSecrets::now`]), so kept between calls while inotify reports
/// nothing in `/etc`'s directories (`etc_watch.rs`), else from the walk's cache while `/etc`
/// is unchanged.
pub fn now() -> Vec<PathBuf> {
    static WATCH: Mutex<Option<crate::etc_watch::EtcWatch>> = Mutex::new(None);
    let mut watch = WATCH.lock().unwrap_or_else(|p| p.into_inner());
    watch
        .get_or_insert_with(|| {
            crate::etc_watch::EtcWatch::new(std::path::Path::new("/etc"), cache())
        })
        .private_now()
}

fn start() -> Option<Walk> {
    spawn(move || of(cache().as_deref()))
}

/// Whether the last walk was taken from its cache (what `ENVGIT_TIMINGS` says).
static TAKEN_FROM_CACHE: AtomicBool = AtomicBool::new(false);

/// Whether the walk the step joined was its cache's, not a walk.
pub fn taken_from_cache() -> bool {
    TAKEN_FROM_CACHE.load(Ordering::Relaxed)
}

fn of(cache: Option<&std::path::Path>) -> Vec<PathBuf> {
    let (private, taken) = match cache {
        Some(cache) => crate::etc_cache::private_below_cached(std::path::Path::new("/etc"), cache),
        None => (crate::plan::etc_private(), false),
    };
    TAKEN_FROM_CACHE.store(taken, Ordering::Relaxed);
    private
}

fn spawn(walk: impl FnOnce() -> Vec<PathBuf> + Send + 'static) -> Option<Walk> {
    std::thread::Builder::new()
        .name("envgit-etc-walk".into())
        .spawn(walk)
        .ok()
}
