//! `envgit watch start | stop | status`: the project's watching daemon (`crate::watch_daemon`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{ExitCode, Stdio};

use crate::cli::{WatchAction, WatchArgs};
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::Project;
use crate::watch_daemon::{client, serve, socket_path};

/// The daemon's stderr, in the store's directory.
const LOG: &str = "watch.log";

pub fn run(dir: Option<&Path>, args: &WatchArgs) -> CmdResult<ExitCode> {
    let project = Project::find(dir)?;
    match &args.action {
        WatchAction::Start => start(&project),
        WatchAction::Stop => {
            let said = match client::stop(&project.store_dir)? {
                client::Stopped::Daemon => {
                    format!("stopped watching {}\n", project.root.display())
                }
                client::Stopped::LeftSocket => "no daemon was watching this project; removed \
                                                the socket one that was killed left behind\n"
                    .to_owned(),
                client::Stopped::Nothing => "no daemon was watching this project\n".to_owned(),
            };
            output::print(&said)?;
            Ok(ExitCode::SUCCESS)
        }
        WatchAction::Status(a) => {
            let status = client::status(&project.store_dir);
            if a.json {
                output::json(
                    &serde_json::json!({ "running": status.is_some(), "daemon": status }),
                )?;
            } else if let Some(s) = status {
                let excluded = if s.excluded_counted {
                    format!(
                        "; {} excluded directories counted (their .env search is taken as \
                         cached while nothing changes there)",
                        s.excluded_watches
                    )
                } else {
                    "; excluded directories not counted (each step checks them)".to_owned()
                };
                output::print(&format!(
                    "watching {} (pid {}): {} directories, {} changes kept{excluded}{}\n",
                    s.project,
                    s.pid,
                    s.watches,
                    s.changes_kept,
                    if s.degraded {
                        "; out of inotify watches, so every step reads the whole project \
                         (raise fs.inotify.max_user_watches, then `envgit watch stop && envgit watch start`)"
                    } else {
                        ""
                    }
                ))?;
            } else {
                output::print("not watching: `envgit watch start` starts the daemon\n")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        WatchAction::Serve => {
            serve::serve(&project, &socket_path(&project.store_dir)?)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn start(project: &Project) -> CmdResult<ExitCode> {
    if let Some(s) = client::status(&project.store_dir) {
        output::print(&format!("already watching {} (pid {})\n", s.project, s.pid))?;
        return Ok(ExitCode::SUCCESS);
    }
    // The store's directory exists once the project was initialised; the log lives there.
    let log_path = project.store_dir.join(LOG);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Failure::failed(format!("{}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find envgit's own binary: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("-C")
        .arg(&project.root)
        .args(["watch", "serve"])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::failed(format!("cannot start the daemon: {e}")))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if line.trim() != "ready" {
        let _ = child.wait();
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let last = log.lines().last().unwrap_or("no message");
        return Err(Failure::failed(format!(
            "the watching daemon did not start: {last} (its log: {})",
            log_path.display()
        )));
    }
    // Not waited for: it outlives this command (its parent is then init).
    drop(child);
    let watches = client::status(&project.store_dir).map_or(0, |s| s.watches);
    output::print(&format!(
        "watching {} ({watches} directories): `envgit run` now reads only what changed; \
         `envgit watch stop` ends it\n",
        project.root.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}
