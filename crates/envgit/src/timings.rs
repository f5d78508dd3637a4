//! `ENVGIT_TIMINGS=1`: how long each phase of a command took, on stderr when it ends. This is
//! how the README's "where the time goes" figures are measured; off, a mark costs one relaxed
//! load.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

static ON: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());

/// Reads `ENVGIT_TIMINGS` once, at the start of `main`.
pub fn init() {
    if std::env::var_os("ENVGIT_TIMINGS").is_some_and(|v| !v.is_empty() && v != "0") {
        ON.store(true, Ordering::Relaxed);
        mark("start");
    }
}

/// The phase that ends now is `name`.
pub fn mark(name: &'static str) {
    if ON.load(Ordering::Relaxed) {
        let now = Instant::now();
        MARKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, now));
    }
}

/// One line per phase, `envgit: timing: NAME 1.23 ms`, and the total.
pub fn report() {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    mark("exit");
    let marks = MARKS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(&(_, first)) = marks.first() else {
        return;
    };
    let mut out = String::new();
    for pair in marks.windows(2) {
        let ms = pair[1].1.duration_since(pair[0].1).as_secs_f64() * 1e3;
        out.push_str(&format!("envgit: timing: {:<24} {ms:7.2} ms\n", pair[1].0));
    }
    if let Some(&(_, last)) = marks.last() {
        let ms = last.duration_since(first).as_secs_f64() * 1e3;
        out.push_str(&format!("envgit: timing: {:<24} {ms:7.2} ms\n", "total"));
    }
    eprint!("{out}");
}
