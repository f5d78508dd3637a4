//! The control socket: how `envgit status`, `envgit approve` and `envgit deny` reach a running
//! gate. A unix socket in a 0700 directory under envgit's own state (`$ENVGIT_HOME`), which the
//! sandbox never sees whatever `TMPDIR` or `XDG_RUNTIME_DIR` say; one JSON request per line,
//! one JSON answer per line.
//!
//! Requests: `{"token":T,"op":"list"}`, `{"token":T,"op":"approve","id":N|null}`,
//! `{"token":T,"op":"deny","id":N|null}`. Answers: `{"project":…,"pending":[…]}`,
//! `{"answered":{…}}` or `{"error":"…"}`.
//!
//! Three checks before any request is read, each failing closed: the peer (from
//! `SO_PEERCRED`) runs as the gate's own user, in the gate's own pid namespace (a process of
//! the sandbox is in another one), and every request carries the run's control token (a 0600
//! file beside the socket). Who answered is never taken from the message: the gate derives it
//! from the peer (its user name and its terminal, or "the terminal that started envgit run"
//! when the peer is envgit itself answering its own prompt).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;

use crate::approvals::{AnswerError, Approvals};
use crate::approver::PendingAsk;

/// Longest request line accepted.
const MAX_LINE: u64 = 4096;
const IDLE: Duration = Duration::from_secs(10);

/// What a client asks; anything else in the message (a `by`, say) is ignored.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ControlOp {
    List,
    Approve { id: Option<u64> },
    Deny { id: Option<u64> },
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ControlRequest {
    /// The run's control token (the `control.token` file beside the socket).
    pub token: String,
    #[serde(flatten)]
    pub op: ControlOp,
    /// The channel the answer came through (`"web page"` from `envgit ui`). Recorded only when
    /// the peer runs envgit's own binary, and then beside the user the gate derived from the
    /// peer; from any other peer it is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ControlAnswer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<PendingAsk>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered: Option<PendingAsk>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The file beside the control socket that holds the run's control token (mode 0600).
pub const CONTROL_TOKEN_FILE: &str = "control.token";

/// The peer of one control connection, as the kernel reports it.
#[derive(Debug)]
struct Peer {
    uid: u32,
    pid: i32,
}

/// `pid:[…]` of a process's pid namespace; `None` when it cannot be read (fail closed).
fn pid_namespace(pid: &str) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()
}

/// Why this peer may not use the control socket, if it may not.
fn refuse_peer(stream: &UnixStream) -> Result<Peer, String> {
    let cred = stream
        .peer_cred()
        .map_err(|e| format!("cannot identify the peer: {e}"))?;
    let pid = cred
        .pid()
        .filter(|p| *p > 0)
        .ok_or("the peer has no process id here (another pid namespace)")?;
    let own_uid = own_uid().ok_or("cannot read the gate's own user")?;
    if cred.uid() != own_uid {
        return Err(format!(
            "the peer runs as uid {}, not {own_uid}",
            cred.uid()
        ));
    }
    let theirs = pid_namespace(&pid.to_string()).ok_or("cannot read the peer's pid namespace")?;
    let ours = pid_namespace("self").ok_or("cannot read the gate's pid namespace")?;
    if theirs != ours {
        return Err("the peer runs in another pid namespace (inside a sandbox)".into());
    }
    Ok(Peer {
        uid: cred.uid(),
        pid,
    })
}

/// The gate's real uid, from `/proc/self/status` (no libc here).
fn own_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

/// The user name of `uid` from `/etc/passwd`, else `uid N`.
fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|p| {
            p.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 3 && f[2].parse::<u32>().ok() == Some(uid)).then(|| f[0].to_owned())
            })
        })
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// Who answered, as the step records it: derived from the peer, never from the message. A
/// `via` channel label is kept only when the peer runs the gate's own binary (`envgit ui`).
fn answerer(peer: &Peer, via: Option<&str>) -> String {
    if peer.pid as u32 == std::process::id() {
        // envgit answering its own prompt (the pty relay): the person at its terminal.
        return "the terminal that started envgit run".to_owned();
    }
    let user = user_name(peer.uid);
    if let Some(via) = via.filter(|_| runs_own_binary(peer.pid)) {
        let via: String = via.chars().filter(|c| !c.is_control()).take(40).collect();
        return format!("{user} from the {via} (envgit ui)");
    }
    let tty = std::fs::read_link(format!("/proc/{}/fd/0", peer.pid))
        .ok()
        .map(|p| p.display().to_string())
        .filter(|p| p.starts_with("/dev/pts/") || p.starts_with("/dev/tty"));
    match tty {
        Some(tty) => format!("{user} with envgit approve/deny on {tty}"),
        None => format!("{user} with envgit approve/deny (no terminal)"),
    }
}

/// Does `pid` run the very file this process runs (same device and inode)?
fn runs_own_binary(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let theirs = std::fs::metadata(format!("/proc/{pid}/exe"));
    let ours = std::fs::metadata("/proc/self/exe");
    match (theirs, ours) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Equal in time independent of where they differ.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

pub(crate) async fn serve(
    listener: UnixListener,
    approvals: Arc<Approvals>,
    label: Arc<String>,
    token: Arc<String>,
    shutdown: Arc<Notify>,
) {
    loop {
        tokio::select! {
            () = shutdown.notified() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let approvals = Arc::clone(&approvals);
                    let label = Arc::clone(&label);
                    let token = Arc::clone(&token);
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(
                            IDLE,
                            handle(stream, &approvals, &label, &token),
                        )
                        .await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
}

async fn handle(
    stream: UnixStream,
    approvals: &Approvals,
    label: &str,
    token: &str,
) -> std::io::Result<()> {
    let peer = refuse_peer(&stream);
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_LINE)).lines();
    let peer = match peer {
        Ok(p) => p,
        Err(why) => {
            // Read (and drop) the request first, so the client sees the refusal rather than a
            // broken pipe; nothing in it is acted on.
            let _ = lines.next_line().await;
            let answer = ControlAnswer {
                error: Some(format!("refused: {why}")),
                ..ControlAnswer::default()
            };
            let mut out = serde_json::to_vec(&answer).unwrap_or_default();
            out.push(b'\n');
            return write.write_all(&out).await;
        }
    };
    while let Some(line) = lines.next_line().await? {
        let answer = match serde_json::from_str::<ControlRequest>(&line) {
            Ok(req) if !same_token(&req.token, token) => ControlAnswer {
                error: Some("refused: wrong control token".into()),
                ..ControlAnswer::default()
            },
            Ok(ControlRequest {
                op: ControlOp::List,
                ..
            }) => ControlAnswer {
                project: Some(label.to_owned()),
                pending: Some(approvals.list()),
                ..ControlAnswer::default()
            },
            Ok(ControlRequest {
                op: ControlOp::Approve { id },
                via,
                ..
            }) => reply(approvals.answer(id, true, &answerer(&peer, via.as_deref()))),
            Ok(ControlRequest {
                op: ControlOp::Deny { id },
                via,
                ..
            }) => reply(approvals.answer(id, false, &answerer(&peer, via.as_deref()))),
            Err(e) => ControlAnswer {
                error: Some(format!("bad request: {e}")),
                ..ControlAnswer::default()
            },
        };
        let mut out = serde_json::to_vec(&answer).unwrap_or_default();
        out.push(b'\n');
        write.write_all(&out).await?;
    }
    Ok(())
}

fn reply(result: Result<PendingAsk, AnswerError>) -> ControlAnswer {
    match result {
        Ok(ask) => ControlAnswer {
            answered: Some(ask),
            ..ControlAnswer::default()
        },
        Err(e) => ControlAnswer {
            error: Some(e.to_string()),
            ..ControlAnswer::default()
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::path::Path;

    /// A control server on a temporary socket; returns the socket's path.
    fn server(rt: &tokio::runtime::Runtime, dir: &Path) -> std::path::PathBuf {
        let path = dir.join("control.sock");
        let listener = {
            let _enter = rt.enter();
            tokio::net::UnixListener::from_std(crate::socket::bind(&path).unwrap()).unwrap()
        };
        let approvals = Arc::new(Approvals::new(Duration::from_secs(5), None));
        rt.spawn(serve(
            listener,
            approvals,
            Arc::new("p".into()),
            Arc::new("sekrit".into()),
            Arc::new(Notify::new()),
        ));
        path
    }

    fn ask(socket: &Path, line: &str, in_new_pid_ns: bool) -> String {
        let script = format!(
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect({socket:?})\ntry:\n    s.sendall({line:?}.encode()+b'\\n')\nexcept OSError:\n    pass\nsys.stdout.write(s.recv(4096).decode())"
        );
        let mut cmd = if in_new_pid_ns {
            let mut c = std::process::Command::new("unshare");
            c.args(["--pid", "--fork", "python3", "-c", &script]);
            c
        } else {
            let mut c = std::process::Command::new("python3");
            c.args(["-c", &script]);
            c
        };
        let out = cmd.output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    #[test]
    fn peers_in_another_pid_namespace_or_without_the_token_are_refused() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let socket = server(&rt, dir.path());
        let ok = ask(&socket, r#"{"token":"sekrit","op":"list"}"#, false);
        assert!(ok.contains("\"pending\":[]"), "{ok}");
        let no_token = ask(&socket, r#"{"op":"approve","id":null,"by":"alice"}"#, false);
        assert!(no_token.contains("bad request"), "{no_token}");
        let wrong = ask(&socket, r#"{"token":"guess","op":"list"}"#, false);
        assert!(wrong.contains("wrong control token"), "{wrong}");
        if std::process::Command::new("unshare")
            .args(["--pid", "--fork", "true"])
            .status()
            .is_ok_and(|s| s.success())
        {
            let other = ask(&socket, r#"{"token":"sekrit","op":"list"}"#, true);
            assert!(other.contains("another pid namespace"), "{other}");
        } else {
            println!("skipped the pid-namespace half: cannot unshare a pid namespace here");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
        assert!(!same_token("", "a"));
    }
}
