//! How a question to a person ended. One type for every asker and every way of answering:
//! the gate holding a request (answered by `envgit approve`/`deny` over the control socket or
//! at envgit's own terminal) and the MCP REPL holding a tool call (answered through the
//! client's elicitation form).

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
