//! `ask`: a request held while a person decides (DESIGN §5). Each held request gets a small
//! id; `envgit approve ID` / `envgit deny ID` answer it over the control socket
//! ([`crate::control`]); past the timeout it is denied. An approval covers that request and
//! later requests of the same *identity* in this run — the same rule and the same summary
//! (the same ref updates old→new, the same name@version, the same repository+tag), plus the
//! same body when the summary says no more than `METHOD host/path` — never another push to
//! the same repository, never the rest of the run.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::answer::Answer;
use crate::events::now_ms;

/// A held request, as `envgit status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PendingAsk {
    pub id: u64,
    pub method: String,
    pub host: String,
    pub path: String,
    pub rule: String,
    pub summary: String,
    /// BLAKE3 of the body, hex (what exactly is being approved): the whole body when the
    /// summary says no more than `METHOD host/path`, else the prefix the rule read.
    pub body_hash: String,
    /// The body's first bytes with control bytes escaped, so the person sees what they
    /// approve.
    #[serde(default)]
    pub body_preview: String,
    pub asked_at_ms: u64,
    pub expires_at_ms: u64,
}

/// Told when a request starts waiting (envgit prints how to answer it).
pub type AskAnnounce = Box<dyn Fn(&PendingAsk) + Send + Sync>;

pub(crate) struct Approvals {
    next_id: AtomicU64,
    pending: Mutex<BTreeMap<u64, (PendingAsk, oneshot::Sender<Answer>)>>,
    granted: Mutex<HashSet<String>>,
    timeout: Duration,
    announce: Option<AskAnnounce>,
}

impl Approvals {
    pub(crate) fn new(timeout: Duration, announce: Option<AskAnnounce>) -> Approvals {
        Approvals {
            next_id: AtomicU64::new(1),
            pending: Mutex::default(),
            granted: Mutex::default(),
            timeout,
            announce,
        }
    }

    /// Was a request of this identity approved earlier in the run?
    pub(crate) fn granted(&self, identity: &str) -> bool {
        lock(&self.granted).contains(identity)
    }

    /// Holds until someone answers or the timeout passes.
    pub(crate) async fn ask(&self, mut ask: PendingAsk, identity: String) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        ask.id = id;
        ask.asked_at_ms = now;
        ask.expires_at_ms = now + u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, (ask.clone(), tx));
        if let Some(announce) = &self.announce {
            announce(&ask);
        }
        let answer = match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(answer)) => answer,
            // Timed out (or the sender vanished): nobody may answer it any more.
            _ => {
                lock(&self.pending).remove(&id);
                Answer::TimedOut
            }
        };
        if let Answer::Approved { .. } = answer {
            lock(&self.granted).insert(identity);
        }
        answer
    }

    pub(crate) fn list(&self) -> Vec<PendingAsk> {
        lock(&self.pending)
            .values()
            .map(|(a, _)| a.clone())
            .collect()
    }

    /// Answers ask `id`, or the only one pending when `id` is `None`.
    pub(crate) fn answer(
        &self,
        id: Option<u64>,
        approve: bool,
        by: &str,
    ) -> Result<PendingAsk, String> {
        let mut pending = lock(&self.pending);
        let id = match id {
            Some(id) => id,
            None => match pending.keys().copied().collect::<Vec<_>>().as_slice() {
                [only] => *only,
                [] => return Err("nothing is waiting for an answer".into()),
                many => {
                    return Err(format!(
                        "{} requests are waiting ({}); name one",
                        many.len(),
                        many.iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            },
        };
        let (ask, tx) = pending
            .remove(&id)
            .ok_or_else(|| format!("no request #{id} is waiting (answered, or timed out)"))?;
        let by = by.to_owned();
        let _ = tx.send(if approve {
            Answer::Approved { by }
        } else {
            Answer::Refused { by }
        });
        Ok(ask)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A summary that says no more than `METHOD host/path` (whatever spelling of the path): it
/// does not name the effect.
pub(crate) fn is_generic(summary: &str, method: &str, host: &str) -> bool {
    summary.starts_with(&format!("{} {host}", method.to_ascii_uppercase()))
}

/// The identity an approval covers (see the module comment).
pub(crate) fn identity(
    rule: &str,
    summary: &str,
    method: &str,
    host: &str,
    body_hash: &str,
) -> String {
    if is_generic(summary, method, host) {
        format!("{rule}\n{summary}\n{body_hash}")
    } else {
        format!("{rule}\n{summary}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(summary: &str) -> PendingAsk {
        PendingAsk {
            id: 0,
            method: "POST".into(),
            host: "h".into(),
            path: "/p".into(),
            rule: "r".into(),
            summary: summary.into(),
            body_hash: "b".into(),
            body_preview: String::new(),
            asked_at_ms: 0,
            expires_at_ms: 0,
        }
    }

    #[tokio::test]
    async fn an_answer_releases_the_request_and_an_approval_covers_its_identity_only() {
        let a = std::sync::Arc::new(Approvals::new(Duration::from_secs(5), None));
        let waiter = {
            let a = std::sync::Arc::clone(&a);
            tokio::spawn(async move { a.ask(ask("push a->b"), "id-1".into()).await })
        };
        while a.list().is_empty() {
            tokio::task::yield_now().await;
        }
        let listed = a.list();
        assert_eq!(listed.len(), 1);
        assert!(a.answer(Some(99), true, "t").is_err());
        a.answer(None, true, "tester").unwrap();
        let answer = waiter.await.unwrap();
        assert_eq!(
            answer,
            Answer::Approved {
                by: "tester".into()
            }
        );
        assert!(a.granted("id-1"));
        assert!(!a.granted("id-2"));
        assert!(a.list().is_empty());
        assert!(a.answer(None, false, "t").unwrap_err().contains("nothing"));
    }

    #[tokio::test]
    async fn an_unanswered_ask_times_out_and_grants_nothing() {
        let a = Approvals::new(Duration::from_millis(50), None);
        let answer = a.ask(ask("x"), "id".into()).await;
        assert_eq!(answer, Answer::TimedOut);
        assert!(!a.granted("id"));
        assert!(a.list().is_empty());
    }

    #[test]
    fn a_generic_summary_binds_the_body() {
        let g = identity("r", "POST h/p", "post", "h", "b1");
        assert_ne!(g, identity("r", "POST h/p", "post", "h", "b2"));
        let s = identity("r", "npm publish a@1.0.0", "PUT", "h", "b1");
        assert_eq!(s, identity("r", "npm publish a@1.0.0", "PUT", "h", "b2"));
    }
}
