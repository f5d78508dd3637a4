//! The control socket: how `envgit status`, `envgit approve` and `envgit deny` reach a running
//! gate. A unix socket in a 0700 directory outside the sandbox (the sandbox cannot see it);
//! one JSON request per line, one JSON answer per line.
//!
//! Requests: `{"op":"list"}`, `{"op":"approve","id":N|null,"by":"…"}`,
//! `{"op":"deny","id":N|null,"by":"…"}`. Answers: `{"project":…,"pending":[…]}`,
//! `{"answered":{…}}` or `{"error":"…"}`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;

use crate::approvals::{Approvals, PendingAsk};

/// Longest request line accepted.
const MAX_LINE: u64 = 4096;
const IDLE: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ControlRequest {
    List,
    Approve { id: Option<u64>, by: String },
    Deny { id: Option<u64>, by: String },
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

pub(crate) fn bind(path: &Path) -> std::io::Result<UnixListener> {
    crate::listener::bind(path)
}

pub(crate) async fn serve(
    listener: UnixListener,
    approvals: Arc<Approvals>,
    label: Arc<String>,
    shutdown: Arc<Notify>,
) {
    loop {
        tokio::select! {
            () = shutdown.notified() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let approvals = Arc::clone(&approvals);
                    let label = Arc::clone(&label);
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(IDLE, handle(stream, &approvals, &label)).await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
}

async fn handle(stream: UnixStream, approvals: &Approvals, label: &str) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_LINE)).lines();
    while let Some(line) = lines.next_line().await? {
        let answer = match serde_json::from_str::<ControlRequest>(&line) {
            Ok(ControlRequest::List) => ControlAnswer {
                project: Some(label.to_owned()),
                pending: Some(approvals.list()),
                ..ControlAnswer::default()
            },
            Ok(ControlRequest::Approve { id, by }) => reply(approvals.answer(id, true, &by)),
            Ok(ControlRequest::Deny { id, by }) => reply(approvals.answer(id, false, &by)),
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

fn reply(result: Result<PendingAsk, String>) -> ControlAnswer {
    match result {
        Ok(ask) => ControlAnswer {
            answered: Some(ask),
            ..ControlAnswer::default()
        },
        Err(e) => ControlAnswer {
            error: Some(e),
            ..ControlAnswer::default()
        },
    }
}
