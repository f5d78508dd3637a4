//! Request-level judgement: `l7`, then the `irreversible` rules in order with
//! presets expanded in place; the first rule that matches decides.
//!
//! Pure: the gate hands over what it knows about one request ([`RequestInfo`]) and gets a
//! [`RequestDecision`]. When [`Policy::needs_body`](crate::Policy::needs_body) says so, it
//! first reads a prefix of the body (at most [`BODY_PREFIX_MAX`] bytes).

mod body;
mod content_type;
mod decide;
mod form_error;
mod graphql;
mod identity;
mod json;
mod matchers;
mod method;
mod normalize;
mod packument;
mod payload;
mod pktline;
mod prepared;
mod preset;
mod rule;
mod summary;

#[cfg(test)]
mod tests;

pub use decide::Decided;
pub use normalize::{PathError, normalize_path};
pub use preset::default_preset_ids;

/// The most body the gate buffers for a decision (1 MiB). A body longer than this is passed
/// with `body_complete: false`; matchers that need all of it then fail closed.
pub const BODY_PREFIX_MAX: usize = 1 << 20;

/// One request as the gate saw it.
#[derive(Debug, Clone, Copy)]
pub struct RequestInfo<'a> {
    /// As sent (compared case-insensitively).
    pub method: &'a str,
    /// Every value of the request's `X-HTTP-Method-Override`, `X-HTTP-Method` and
    /// `X-Method-Override` headers, as sent (empty when there are none). The request is
    /// judged as its own method and each of these (and any `_method` in the query or a form
    /// body).
    pub method_overrides: &'a [&'a str],
    /// From the CONNECT target or the absolute URI (never the `Host` header), without port.
    pub host: &'a str,
    pub port: u16,
    /// The raw path as sent (may contain `%xx`, `//`, `./`, `../`), without the query.
    pub path: &'a str,
    /// Every path the request's `X-Original-URL` and `X-Rewrite-URL` headers name (their
    /// query cut off), as sent: a server behind IIS's URL Rewrite, or a framework trusting a
    /// front proxy, routes the request by them. The request is judged at its own path and at
    /// each of these; a rule decides only when it reads them all alike.
    pub path_overrides: &'a [&'a str],
    /// The raw query without `?`; may be empty.
    pub query: &'a str,
    /// A bounded prefix of the body, when the caller read one. A request without a body is
    /// `Some(b"")` with `body_complete: true`.
    pub body: Option<&'a [u8]>,
    /// `true` when `body` is the whole body.
    pub body_complete: bool,
    /// The `Content-Type` header's value, as sent (`None` when absent).
    pub content_type: Option<&'a str>,
    /// The names of the request's headers, lowercase (as hyper and HTTP/2 give them).
    pub header_names: &'a [&'a str],
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestDecision {
    /// No rule matched.
    Allow,
    /// An `allow` rule matched, or could not be ruled out and no later rule decided: the
    /// request goes out and its step is marked.
    Marked {
        rule: String,
        summary: String,
    },
    Deny {
        rule: String,
        summary: String,
    },
    /// Hold the request until a person answers.
    Ask {
        rule: String,
        summary: String,
    },
}

impl RequestDecision {
    /// The deciding rule's id (`None` for [`RequestDecision::Allow`]).
    pub fn rule(&self) -> Option<&str> {
        match self {
            RequestDecision::Allow => None,
            RequestDecision::Marked { rule, .. }
            | RequestDecision::Deny { rule, .. }
            | RequestDecision::Ask { rule, .. } => Some(rule),
        }
    }

    pub fn summary(&self) -> Option<&str> {
        match self {
            RequestDecision::Allow => None,
            RequestDecision::Marked { summary, .. }
            | RequestDecision::Deny { summary, .. }
            | RequestDecision::Ask { summary, .. } => Some(summary),
        }
    }

    /// The same decision, its summary ending with `note` (why it could not be settled).
    pub fn noted(mut self, note: &str) -> RequestDecision {
        match &mut self {
            RequestDecision::Allow => {}
            RequestDecision::Marked { summary, .. }
            | RequestDecision::Deny { summary, .. }
            | RequestDecision::Ask { summary, .. } => {
                summary.push_str(" (");
                summary.push_str(note);
                summary.push(')');
            }
        }
        self
    }
}
