//! `ask`: a request held while a person decides. Each held request gets a small
//! id; `envgit approve ID` / `envgit deny ID` answer it over the control socket
//! ([`crate::control`]); past the timeout it is denied. An approval covers that request and
//! later requests of the same *identity* in this run — the same rule, host and port, and the
//! same summary (the same ref updates old→new, the same name@version, the same
//! repository+tag) and query, plus the same method, target and body when the summary does not
//! name the whole effect (`METHOD host/path?query`, an API write, a GraphQL mutation) — never
//! another push to the same repository, never the rest of the run.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::approver::{Answer, Approver, PendingAsk};
use crate::events::now_ms;

pub(crate) struct Approvals {
    next_id: AtomicU64,
    pending: Mutex<BTreeMap<u64, (PendingAsk, oneshot::Sender<Answer>)>>,
    granted: Mutex<HashSet<String>>,
    timeout: Duration,
    /// Puts each ask to a person (envgit's terminal, a note naming `envgit approve`).
    approver: Option<Box<dyn Approver>>,
}

impl Approvals {
    pub(crate) fn new(timeout: Duration, approver: Option<Box<dyn Approver>>) -> Approvals {
        Approvals {
            next_id: AtomicU64::new(1),
            pending: Mutex::default(),
            granted: Mutex::default(),
            timeout,
            approver,
        }
    }

    /// Was a request of this identity approved earlier in the run?
    pub(crate) fn granted(&self, identity: &str) -> bool {
        lock(&self.granted).contains(identity)
    }

    /// Holds until someone answers (over the control channel, or the approver itself) or the
    /// timeout passes.
    pub(crate) async fn ask(&self, mut ask: PendingAsk, identity: String) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        ask.id = id;
        ask.asked_at_ms = now;
        ask.expires_at_ms = now + u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let (tx, rx) = oneshot::channel();
        // Open before it is shown: an answer may come the moment the question appears.
        lock(&self.pending).insert(id, (ask.clone(), tx));
        let asked = match &self.approver {
            Some(approver) => approver.ask(&ask),
            None => crate::approver::answered_over_control(),
        };
        let answer = tokio::select! {
            over_control = rx => over_control.ok(),
            itself = asked => Some(itself),
            () = tokio::time::sleep(self.timeout) => None,
        };
        // However it ended, nobody may answer it any more (the sender vanished: timed out).
        lock(&self.pending).remove(&id);
        let answer = answer.unwrap_or(Answer::TimedOut);
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
    ) -> Result<PendingAsk, AnswerError> {
        let mut pending = lock(&self.pending);
        let id = match id {
            Some(id) => id,
            None => match pending.keys().copied().collect::<Vec<_>>().as_slice() {
                [only] => *only,
                [] => return Err(AnswerError::NothingWaiting),
                many => return Err(AnswerError::WhichOne(many.to_vec())),
            },
        };
        let (ask, tx) = pending.remove(&id).ok_or(AnswerError::NotWaiting(id))?;
        let by = by.to_owned();
        let _ = tx.send(if approve {
            Answer::Approved { by }
        } else {
            Answer::Refused { by }
        });
        Ok(ask)
    }
}

/// Why an answer from `envgit approve`/`deny` reached no held request (the text is what the
/// person is shown).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    #[error("nothing is waiting for an answer")]
    NothingWaiting,
    #[error("{} requests are waiting ({}); name one", .0.len(), list(.0))]
    WhichOne(Vec<u64>),
    #[error("no request #{0} is waiting (answered, or timed out)")]
    NotWaiting(u64),
}

/// `3, 5, 8`.
fn list(ids: &[u64]) -> String {
    ids.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A summary that says no more than `METHOD host/path` (whatever spelling of the path): it
/// does not name the effect.
pub(crate) fn is_generic(summary: &str, method: &str, host: &str) -> bool {
    summary.starts_with(&format!("{} {host}", method.to_ascii_uppercase()))
}

/// What an approval is bound to: one asked request, as the gate saw it.
pub(crate) struct Identity<'a> {
    pub(crate) rule: &'a str,
    pub(crate) summary: &'a str,
    pub(crate) method: &'a str,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    /// The origin-form target as sent: the raw path and, when there is one, `?query`.
    pub(crate) target: &'a str,
    /// The raw query without `?` (may be empty).
    pub(crate) query: &'a str,
    /// BLAKE3 (hex) of the body the gate read for the approval.
    pub(crate) body_hash: &'a str,
    /// The summary does not name the whole effect: the method, the target and the body are
    /// part of the identity.
    pub(crate) whole_request: bool,
    /// The rule's requests share one approval whatever their queries (the parts of one OCI
    /// push); otherwise the query is part of the identity.
    pub(crate) query_free: bool,
}

/// The identity an approval covers (see the module comment). Never shortened: the summary
/// a person reads is cut to a line, the identity holds the whole query and target.
pub(crate) fn identity(i: &Identity<'_>) -> String {
    let mut out = format!("{}\n{}:{}\n{}", i.rule, i.host, i.port, i.summary);
    if !i.query_free {
        out.push_str(&format!("\n?{}", i.query));
    }
    if i.whole_request || is_generic(i.summary, i.method, i.host) {
        out.push_str(&format!(
            "\n{} {}\n{}",
            i.method.to_ascii_uppercase(),
            i.target,
            i.body_hash
        ));
    }
    out
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
        assert!(
            a.answer(None, false, "t")
                .unwrap_err()
                .to_string()
                .contains("nothing")
        );
    }

    #[tokio::test]
    async fn an_unanswered_ask_times_out_and_grants_nothing() {
        let a = Approvals::new(Duration::from_millis(50), None);
        let answer = a.ask(ask("x"), "id".into()).await;
        assert_eq!(answer, Answer::TimedOut);
        assert!(!a.granted("id"));
        assert!(a.list().is_empty());
    }

    /// Asked through the approver first, answered over the control channel.
    struct Announced(std::sync::Arc<std::sync::Mutex<Vec<u64>>>);

    impl Approver for Announced {
        fn ask<'a>(&'a self, ask: &'a PendingAsk) -> crate::approver::AskFuture<'a> {
            self.0.lock().unwrap().push(ask.id);
            crate::approver::answered_over_control()
        }
    }

    /// Answers the ask itself, as an MCP client's form does.
    struct AnswersItself;

    impl Approver for AnswersItself {
        fn ask<'a>(&'a self, _: &'a PendingAsk) -> crate::approver::AskFuture<'a> {
            Box::pin(async {
                Answer::Approved {
                    by: "a form".into(),
                }
            })
        }
    }

    #[tokio::test]
    async fn the_approver_is_told_of_an_open_ask_and_the_control_channel_answers_it() {
        let announced = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let a = std::sync::Arc::new(Approvals::new(
            Duration::from_secs(5),
            Some(Box::new(Announced(announced.clone()))),
        ));
        let waiter = {
            let a = std::sync::Arc::clone(&a);
            tokio::spawn(async move { a.ask(ask("push a->b"), "id-1".into()).await })
        };
        while announced.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        // Told once it is open: an answer at once finds it.
        let id = announced.lock().unwrap()[0];
        assert_eq!(a.list()[0].id, id);
        a.answer(Some(id), false, "the control peer").unwrap();
        assert_eq!(
            waiter.await.unwrap(),
            Answer::Refused {
                by: "the control peer".into()
            }
        );
        assert!(a.list().is_empty());
    }

    #[tokio::test]
    async fn an_approver_that_answers_itself_ends_the_ask() {
        let a = Approvals::new(Duration::from_secs(5), Some(Box::new(AnswersItself)));
        let answer = a.ask(ask("npm publish a@1"), "id".into()).await;
        assert_eq!(
            answer,
            Answer::Approved {
                by: "a form".into()
            }
        );
        assert!(a.granted("id"));
        // Nobody may answer it over the control channel any more.
        assert!(a.list().is_empty());
    }

    fn id<'a>(summary: &'a str, target: &'a str, body: &'a str) -> Identity<'a> {
        let query = target.split_once('?').map_or("", |(_, q)| q);
        Identity {
            rule: "r",
            summary,
            method: "post",
            host: "h",
            port: 443,
            target,
            query,
            body_hash: body,
            whole_request: false,
            query_free: false,
        }
    }

    #[test]
    fn a_generic_summary_binds_the_body() {
        let g = identity(&id("POST h/p", "/p", "b1"));
        assert_ne!(g, identity(&id("POST h/p", "/p", "b2")));
        let s = identity(&id("npm publish a@1.0.0", "/a", "b1"));
        assert_eq!(s, identity(&id("npm publish a@1.0.0", "/a", "b2")));
        // A summary that does not name the whole effect binds the body when the policy says
        // so (a GraphQL mutation's variables, an API write).
        let whole = |body| {
            identity(&Identity {
                whole_request: true,
                ..id("GraphQL h mutation addStar: addStar", "/graphql", body)
            })
        };
        assert_ne!(whole("b1"), whole("b2"));
    }

    #[test]
    fn the_query_and_the_port_are_part_of_the_identity() {
        let plain = identity(&id("POST h/deploy", "/deploy", "b"));
        let query = id(
            "POST h/deploy?env=production&force=1",
            "/deploy?env=production&force=1",
            "b",
        );
        assert_ne!(plain, identity(&query));
        // A named effect binds its query too, and the whole query: the summary a person reads
        // is cut to a line, the identity never is.
        let long = "x".repeat(400);
        let named = |target: &str| {
            identity(&Identity {
                query: target.split_once('?').map_or("", |(_, q)| q),
                ..id("git push h/app.git: refs/heads/main a..b", "/", "b")
            })
        };
        assert_ne!(named(&format!("/p?{long}a")), named(&format!("/p?{long}b")));
        let generic_long = |tail: &str| {
            let target = format!("/p?{long}{tail}");
            let summary = cut(&format!("POST h{target}"));
            identity(&Identity {
                target: &target,
                query: &target[3..],
                ..id(&summary, "", "b")
            })
        };
        assert_ne!(generic_long("a"), generic_long("b"));
        // Another port of the same host is another destination.
        assert_ne!(
            plain,
            identity(&Identity {
                port: 8443,
                ..id("POST h/deploy", "/deploy", "b")
            })
        );
        // The parts of one OCI push share one approval whatever their queries.
        let oci = |target| {
            identity(&Identity {
                query_free: true,
                query: target,
                ..id("OCI blob upload to h/app", "/v2/app/blobs/uploads/1", "b")
            })
        };
        assert_eq!(oci("_state=1"), oci("_state=2&digest=sha256:00"));
    }

    /// The summary as the policy cuts it (300 characters).
    fn cut(s: &str) -> String {
        s.chars().take(300).collect()
    }
}
