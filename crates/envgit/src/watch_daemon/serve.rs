//! The daemon itself (`envgit watch serve`, started detached by `envgit watch start`): one
//! thread, polling the project's inotify queue and its socket.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use envgit_store::ChangeLog;
use rustix::event::{PollFd, PollFlags, Timespec, poll};

use super::wire::{self, Answer, Status};
use crate::failure::{CmdResult, Failure};
use crate::project::Project;

/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the daemon checks that its socket is still the one at its path.
const CHECK_EVERY_S: i64 = 30;

/// Watch the project, then answer on `socket` until told to stop. Prints `ready` on stdout
/// once the socket answers (what `envgit watch start` waits for).
pub(crate) fn serve(project: &Project, socket: &Path) -> CmdResult<()> {
    // A session of its own: a closed terminal or a ^C to the shell that started it does not
    // end it.
    let _ = rustix::process::setsid();
    let mut log = ChangeLog::start(
        &project.root,
        project.scan_config()?,
        Some(&project.store_dir),
    )?;
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)
        .map_err(|e| Failure::failed(format!("{}: {e}", socket.display())))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Failure::failed(e.to_string()))?;
    let ino = socket_inode(socket);
    let uid = rustix::process::getuid();
    println!("ready");
    let _ = std::io::stdout().flush();
    // `start` stops reading once it has its line: nothing more goes there.
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(&null);
    }
    loop {
        let (inotify_ready, client_ready) = {
            let inotify = log.fd();
            let mut fds = [
                PollFd::new(&inotify, PollFlags::IN),
                PollFd::new(&listener, PollFlags::IN),
            ];
            let wait = Timespec {
                tv_sec: CHECK_EVERY_S,
                tv_nsec: 0,
            };
            match poll(&mut fds, Some(&wait)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(Failure::failed(format!("poll: {e}"))),
            }
            (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
        };
        if inotify_ready && log.pump().is_err() {
            eprintln!(
                "envgit watch: {} moved or was removed; stopping",
                project.root.display()
            );
            break;
        }
        if client_ready {
            while let Ok((stream, _)) = listener.accept() {
                match answer(&mut log, stream, uid) {
                    Ok(Next::Go) => {}
                    Ok(Next::Stop) => {
                        let _ = std::fs::remove_file(socket);
                        return Ok(());
                    }
                    Err(e) => eprintln!("envgit watch: a client: {e}"),
                }
            }
        }
        // Removed or replaced (another daemon took over): this one is not reachable any more.
        if socket_inode(socket) != ino {
            break;
        }
    }
    if socket_inode(socket) == ino {
        let _ = std::fs::remove_file(socket);
    }
    Ok(())
}

enum Next {
    Go,
    Stop,
}

fn answer(
    log: &mut ChangeLog,
    stream: UnixStream,
    uid: rustix::process::Uid,
) -> std::io::Result<Next> {
    let peer = rustix::net::sockopt::socket_peercred(stream.as_fd())?;
    if peer.uid != uid {
        return Err(std::io::Error::other(format!(
            "refused uid {}",
            peer.uid.as_raw()
        )));
    }
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut reader = BufReader::new(&stream);
    // A command that connected when it opened the store and then had nothing to ask (a
    // `record`, a command its policy refused) closes without a word: nothing to answer.
    if reader.fill_buf()?.is_empty() {
        return Ok(Next::Go);
    }
    let line = wire::read_line(&mut reader)?;
    let mut out = &stream;
    match line.as_str() {
        "stop" => {
            out.write_all(b"ok\n")?;
            return Ok(Next::Stop);
        }
        "status" => {
            let (excluded_watches, excluded_counted) = log.unscanned_watches();
            let status = Status {
                pid: std::process::id(),
                project: log.root().display().to_string(),
                watches: log.watches(),
                changes_kept: log.kept(),
                token: log.token().to_string(),
                degraded: log.is_degraded(),
                fingerprint: log.fingerprint().to_owned(),
                excluded_watches,
                excluded_counted,
            };
            let json = serde_json::to_string(&status).map_err(std::io::Error::other)?;
            out.write_all(format!("{json}\n").as_bytes())?;
        }
        _ => {
            let Some(token) = line.strip_prefix("since ") else {
                return Err(std::io::Error::other(format!("unknown request {line:?}")));
            };
            let since = log
                .since(token.parse().ok())
                .map_err(|_| std::io::Error::other("the project root is gone"))?;
            wire::write_answer(
                &mut out,
                &Answer {
                    token: since.token,
                    fingerprint: log.fingerprint().to_owned(),
                    changes: since.changes,
                    unscanned: since.unscanned,
                },
            )?;
        }
    }
    Ok(Next::Go)
}

fn socket_inode(socket: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(socket).ok().map(|m| m.ino())
}
