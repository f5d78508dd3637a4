//! `Approver`: the one way envgit puts an `ask` to a person, whoever asks (the gate holding a
//! request, the MCP REPL holding a downstream tool call) and however the person is reached:
//! the question at envgit's own terminal, a note naming `envgit approve ID`, an MCP client's
//! form. Every ask is a [`PendingAsk`] and ends as an [`Answer`]: one type for every asker and
//! every way of answering.
//!
//! Two ways an answer comes back. Over the gate's control channel (a key at envgit's terminal,
//! `envgit approve`/`deny`, the web page): the gate takes who answered from that connection,
//! never from what the answerer says, and the approver's own future never resolves
//! ([`answered_over_control`]). Or through the approver itself (an MCP client's form answers
//! the call that asked): its future resolves with the answer, naming the client.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

/// A question to a person: a held request as `envgit status` shows it (and as the control
/// channel lists it), or a downstream tool call of the MCP REPL.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PendingAsk {
    pub id: u64,
    pub method: String,
    pub host: String,
    /// The target as held: the path and, when there is one, `?query` (part of what is
    /// approved).
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

/// How an ask ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Approved by `by` (the person's user and terminal, `mcp-elicitation (client 1.2)`, …).
    Approved { by: String },
    /// Refused by `by`, or for want of a way to ask: then `by` says why (no approver, the
    /// form could not be built, the client went away).
    Refused { by: String },
    /// Nobody answered in time.
    TimedOut,
}

impl Answer {
    /// Refused for a reason rather than by a person.
    pub fn refused(why: impl Into<String>) -> Answer {
        Answer::Refused { by: why.into() }
    }

    pub fn is_approved(&self) -> bool {
        matches!(self, Answer::Approved { .. })
    }

    /// Who answered, or why nobody could, as a step records it.
    pub fn by(&self) -> &str {
        match self {
            Answer::Approved { by } | Answer::Refused { by } => by,
            Answer::TimedOut => "timeout",
        }
    }
}

/// What [`Approver::ask`] returns: the answer, when this approver receives it itself.
pub type AskFuture<'a> = Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

/// Puts an `ask` to a person.
pub trait Approver: Send + Sync {
    /// Puts `ask` to the person (synchronously, before returning: an answer may come the
    /// moment the question is shown) and returns the answer's future: resolved by an approver
    /// that receives the answer itself, [`answered_over_control`] for one whose person answers
    /// over the control channel.
    fn ask<'a>(&'a self, ask: &'a PendingAsk) -> AskFuture<'a>;
}

/// The future of an approver whose person answers over the gate's control channel: it never
/// resolves, so the control channel's answer (or the timeout) ends the ask.
pub fn answered_over_control<'a>() -> AskFuture<'a> {
    Box::pin(std::future::pending())
}
