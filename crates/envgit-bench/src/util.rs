//! Timing, percentiles, child processes and directory sizes.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context, Result, bail};

static START: OnceLock<Instant> = OnceLock::new();

/// Start the clock progress lines are stamped with.
pub fn start_clock() -> Instant {
    *START.get_or_init(Instant::now)
}

/// A progress line on stderr, stamped with the time since the run began.
pub fn progress(msg: &str) {
    let t = start_clock().elapsed().as_secs_f64();
    eprintln!("[{t:7.1}s] {msg}");
}

/// Run `f` and return its result with its wall time in milliseconds.
pub fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, ms_since(t)))
}

pub fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A finished child process.
pub struct Ran {
    /// Wall time from spawn to exit.
    pub ms: f64,
    /// Its user + system CPU time (all its threads and its own children), 10 ms resolution.
    pub cpu_ms: f64,
    pub out: Output,
}

/// Run a process to completion (output captured); fail with its stderr if it fails.
pub fn run(cmd: &mut Command) -> Result<Ran> {
    let what = format!("{cmd:?}");
    let cpu_before = cpu_ms(Whose::Children);
    let t = Instant::now();
    let out = cmd.output().with_context(|| format!("starting {what}"))?;
    let ms = ms_since(t);
    // Children's CPU is added to ours once they are waited for, which `output` does.
    let cpu_ms = cpu_ms(Whose::Children) - cpu_before;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(Ran { ms, cpu_ms, out })
}

pub enum Whose {
    /// This process, every thread.
    Own,
    /// Children that were waited for.
    Children,
}

/// User + system CPU time from /proc/self/stat, in ms (clock ticks are USER_HZ = 100 on
/// Linux); 0 if it cannot be read.
pub fn cpu_ms(whose: Whose) -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesized command name; utime is field 14 of the whole line.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let (a, b) = match whose {
        Whose::Own => (11, 12),
        Whose::Children => (13, 14),
    };
    (f.get(a).copied().unwrap_or(0.0) + f.get(b).copied().unwrap_or(0.0)) * 10.0
}

/// The 1-minute load average: the machine is shared, so wall times depend on it.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}

/// Samples of one figure (milliseconds or bytes).
#[derive(Default, Clone, Debug)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn push(&mut self, v: f64) {
        self.0.push(v);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Nearest-rank percentile (`q` in 0..=1); NaN when empty.
    pub fn pct(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        crate::percentile::percentile(&v, q)
    }

    pub fn p50(&self) -> f64 {
        self.pct(0.5)
    }

    pub fn p90(&self) -> f64 {
        self.pct(0.9)
    }

    pub fn max(&self) -> f64 {
        self.pct(1.0)
    }

    /// `p50 a / p90 b / max c` in ms, for notes.
    pub fn summary_ms(&self) -> String {
        format!(
            "p50 {:.1} / p90 {:.1} / max {:.1} ms (n={})",
            self.p50(),
            self.p90(),
            self.max(),
            self.len()
        )
    }
}

/// Apparent size (sum of file lengths) of everything under `path`; symlinks not followed.
pub fn dir_size(path: &Path) -> Result<u64> {
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let ft = entry.file_type()?;
            if ft.is_dir() {
                stack.push(entry.path());
            } else if ft.is_file() {
                total += entry.metadata()?.len();
            }
        }
    }
    Ok(total)
}

pub fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::default();
        for v in [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 9.0, 8.0, 7.0, 6.0] {
            s.push(v);
        }
        assert_eq!(s.p50(), 5.0);
        assert_eq!(s.p90(), 9.0);
        assert_eq!(s.max(), 10.0);
        assert!(Samples::default().p50().is_nan());
    }
}
