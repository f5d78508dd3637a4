//! `ENVGIT_TIMINGS=1` inside the sandbox process: each phase of its set-up on stderr, as the
//! supervisor prints its own (`envgit: timing: sandbox NAME 1.23 ms`), so a step's
//! `sandbox ran` can be split without a tracer (which slows the process it watches tenfold).

use std::sync::Mutex;
use std::time::Instant;

static LAST: Mutex<Option<Instant>> = Mutex::new(None);

/// Starts the clock when `ENVGIT_TIMINGS` is set (and not `0`); marks are free otherwise.
pub(crate) fn start() {
    if std::env::var_os("ENVGIT_TIMINGS").is_some_and(|v| !v.is_empty() && v != "0") {
        *LAST.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }
}

/// The phase that ends now is `name` (in this process; a forked child carries the clock on).
pub(crate) fn mark(name: &str) {
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(then) = *last {
        let now = Instant::now();
        eprintln!(
            "envgit: timing: sandbox {name:<22} {:6.2} ms",
            (now - then).as_secs_f64() * 1e3
        );
        *last = Some(now);
    }
}
