//! `ENVGIT_TIMINGS=1`: how long each phase of a command took, on stderr when it ends. This is
//! how the README's "where the time goes" figures are measured; off, a mark costs one relaxed
//! load.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

static ON: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<(&'static str, Instant)>> = Mutex::new(Vec::new());
static NOTES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

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

/// Something about how the command went that is not a phase (from any thread), printed
/// after the phases as `envgit: timing: note: WHAT`.
pub fn note(what: &'static str) {
    if ON.load(Ordering::Relaxed) {
        NOTES.lock().unwrap_or_else(|p| p.into_inner()).push(what);
    }
}

/// One line per phase, `envgit: timing: NAME 1.23 ms`, and the total; then the notes.
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
    for n in NOTES.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        out.push_str(&format!("envgit: timing: note: {n}\n"));
    }
    eprint!("{out}");
}
