//! The disk's durability floor: every committed step pays at least one fdatasync, so per-step
//! figures are read against this (snapshots.md §6: 0.2 ms quiet, 4 ms when the host is busy).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::report::{Report, Row};
use crate::util::{Samples, timed};

pub fn measure(dir: &Path, n: usize, report: &mut Report) -> Result<()> {
    let path = dir.join("fdatasync.probe");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let block = vec![b'x'; 4096];
    let mut s = Samples::default();
    for _ in 0..n {
        let ((), ms) = timed(|| {
            f.write_all(&block)?;
            f.sync_data()?;
            Ok(())
        })?;
        s.push(ms);
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    report.push(
        Row::ms("disk floor: 4 KiB append + fdatasync, p50", s.p50()).note(format!(
            "{}; a committed step costs at least two of these (pack, journal), a no-change \
             step one",
            s.summary_ms()
        )),
    );
    Ok(())
}
