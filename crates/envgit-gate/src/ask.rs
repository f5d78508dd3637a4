//! The `ask` that holds a request until a person answers, and what its approval covers. (The
//! judgement itself is the policy's: `l7`, then the `irreversible` rules, for the request's
//! method and every method an override names.)

use crate::approvals;
use crate::approver::{Answer, PendingAsk};
use crate::events::{ApprovalAnswer, Recorder};
use crate::shared::Shared;

/// A request an `ask` rule matched.
pub(crate) struct Asked<'a> {
    pub(crate) method: &'a str,
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    /// The raw path as sent, without the query.
    pub(crate) path: &'a str,
    /// The raw query without `?` (may be empty).
    pub(crate) query: &'a str,
    pub(crate) rule: &'a str,
    pub(crate) summary: &'a str,
    /// BLAKE3 (hex) of the whole body, or of the prefix the rule read when its summary names
    /// the effect.
    pub(crate) body_hash: String,
    /// The body's first bytes, control bytes escaped: what the person is shown.
    pub(crate) body_preview: String,
    /// The summary does not name the whole effect (the gate read and hashed the whole body):
    /// the approval is bound to the method, target and body as well.
    pub(crate) whole_request: bool,
    /// The rule's requests share one approval whatever their queries.
    pub(crate) query_free: bool,
}

impl Asked<'_> {
    /// The origin-form target as sent: the path and, when there is one, `?query`.
    fn target(&self) -> String {
        if self.query.is_empty() {
            self.path.to_owned()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }
}

/// Does an approval of this request have to cover its exact body? When the summary says no
/// more than `METHOD host/path` (a plain `net` rule), it does: otherwise approving one POST
/// would let any other body through.
pub(crate) fn identity_needs_body(method: &str, host: &str, summary: &str) -> bool {
    approvals::is_generic(summary, method, host)
}

/// Why an asked request is refused (the text is the reason the client is shown).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AskRefused {
    #[error("{summary}: the rule says ask and no approver can answer")]
    NoApprover { summary: String },
    #[error("{summary}: refused by {by}")]
    By { summary: String, by: String },
    #[error("{summary}: nobody answered in time")]
    TimedOut { summary: String },
}

/// Holds an asked request until it is answered: `Ok` lets it out (the step marked, the
/// answer recorded), `Err` says why it is refused.
pub(crate) async fn settle(
    shared: &Shared,
    rec: &mut Recorder,
    a: Asked<'_>,
) -> Result<(), AskRefused> {
    let summary = a.summary;
    let target = a.target();
    let identity = approvals::identity(&approvals::Identity {
        rule: a.rule,
        summary,
        method: a.method,
        host: a.host,
        port: a.port,
        target: &target,
        query: a.query,
        body_hash: &a.body_hash,
        whole_request: a.whole_request,
        query_free: a.query_free,
    });
    let Some(approvals) = &shared.approvals else {
        return Err(AskRefused::NoApprover {
            summary: summary.to_owned(),
        });
    };
    if approvals.granted(&identity) {
        rec.approval(
            ApprovalAnswer::Approved,
            "an earlier approval of the same request",
            summary,
        );
        rec.mark(a.rule);
        return Ok(());
    }
    let ask = PendingAsk {
        id: 0,
        method: a.method.to_ascii_uppercase(),
        host: a.host.to_owned(),
        // The query is part of what is approved, so the person is shown it (whole: the
        // target is visible ASCII, escaped again in case that ever changes).
        path: crate::body::preview(target.as_bytes(), usize::MAX),
        rule: a.rule.to_owned(),
        summary: summary.to_owned(),
        body_hash: a.body_hash,
        body_preview: a.body_preview,
        asked_at_ms: 0,
        expires_at_ms: 0,
    };
    match approvals.ask(ask, identity).await {
        Answer::Approved { by } => {
            rec.approval(ApprovalAnswer::Approved, &by, summary);
            rec.mark(a.rule);
            Ok(())
        }
        Answer::Refused { by } => {
            rec.approval(ApprovalAnswer::Refused, &by, summary);
            Err(AskRefused::By {
                summary: summary.to_owned(),
                by,
            })
        }
        Answer::TimedOut => {
            rec.approval(ApprovalAnswer::Refused, "timeout", summary);
            Err(AskRefused::TimedOut {
                summary: summary.to_owned(),
            })
        }
    }
}
