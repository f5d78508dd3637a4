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
    pub(crate) path: &'a str,
    pub(crate) rule: &'a str,
    pub(crate) summary: &'a str,
    /// BLAKE3 (hex) of the whole body, or of the prefix the rule read when its summary names
    /// the effect.
    pub(crate) body_hash: String,
    /// The body's first bytes, control bytes escaped: what the person is shown.
    pub(crate) body_preview: String,
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
    let identity = approvals::identity(a.rule, summary, a.method, a.host, &a.body_hash);
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
        path: a.path.to_owned(),
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
