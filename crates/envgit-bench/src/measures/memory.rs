//! G8: supervisor memory at 100k files. A child process (this binary, re-executed with a hidden
//! subcommand) opens the store, holds a `LiveTree` over the tree after one snapshot, and
//! reports its peak RSS (VmHWM), so nothing the benchmark itself allocated is counted.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use envgit_store::{LiveTree, Store};

use super::project_config;
use super::steps::Session;
use crate::report::{Goal, Report, Row};
use crate::util::{progress, run};

/// `VmHWM` and `VmRSS` of this process, in KiB.
fn vm_kib() -> Result<(u64, u64)> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmHWM:"), field("VmRSS:")))
}

/// The child's side: print one JSON line.
pub fn hold_live(root: &Path, store_dir: &Path) -> Result<()> {
    let (_, rss_start) = vm_kib()?;
    let store = Store::open(store_dir)?;
    let (_, rss_store) = vm_kib()?;
    let cfg = project_config(root)?;
    let mut live = LiveTree::new(root, cfg.scan, Some(store_dir))?;
    live.tree_mut().load_index(&store);
    let (_, scan, mode) = live.snapshot(&store)?;
    let (hwm, rss) = vm_kib()?;
    println!(
        "{}",
        serde_json::json!({
            "vm_hwm_kib": hwm,
            "vm_rss_kib": rss,
            "rss_at_start_kib": rss_start,
            "rss_after_store_open_kib": rss_store,
            "files": live.tree().file_count(),
            "hashed": scan.hashed,
            "mode": format!("{mode:?}"),
            "degraded": live.is_degraded(),
        })
    );
    Ok(())
}

pub fn measure(s: &Session, report: &mut Report) -> Result<()> {
    progress("memory: child process holding a LiveTree");
    let exe = std::env::current_exe().context("locating the benchmark binary")?;
    let child = run(Command::new(exe)
        .arg("hold-live")
        .arg("--root")
        .arg(&s.root)
        .arg("--store")
        .arg(&s.store_dir))?;
    let v: serde_json::Value =
        serde_json::from_slice(&child.out.stdout).context("parsing the child's report")?;
    let kib = |k: &str| v[k].as_u64().unwrap_or(0) as f64;
    report.push(
        Row::bytes(
            format!("supervisor peak RSS, {}k files", s.files / 1000),
            kib("vm_hwm_kib") * 1024.0,
        )
        .goal(Goal::AtMost(64.0 * 1024.0 * 1024.0))
        .note(format!(
            "VmHWM of a process that opened the store, started a LiveTree, loaded the stat cache \
             and took one snapshot ({} files re-read, {}); RSS at start {:.1} MiB, after \
             Store::open {:.1} MiB, at the end {:.1} MiB",
            kib("hashed"),
            v["mode"].as_str().unwrap_or("?"),
            kib("rss_at_start_kib") / 1024.0,
            kib("rss_after_store_open_kib") / 1024.0,
            kib("vm_rss_kib") / 1024.0
        )),
    );
    Ok(())
}
