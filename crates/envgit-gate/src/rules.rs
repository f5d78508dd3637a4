//! The gate's own rule ids: what a refusal names (in `X-Envgit-Decision`, its body and the
//! step's record) when the gate refused by itself rather than by a rule of `envgit.yaml`.

/// A tunnel whose first bytes were neither TLS nor HTTP.
pub(crate) const RULE_OPAQUE: &str = "network.opaque";
/// A connection without the run's token.
pub(crate) const RULE_TOKEN: &str = "gate.token";
/// A request whose `Host` does not name the connection's target.
pub(crate) const RULE_MISDIRECTED: &str = "gate.host-mismatch";
/// A TLS handshake whose SNI names another host than the CONNECT it came through.
pub(crate) const RULE_SNI: &str = "gate.sni-mismatch";
/// A request to a credential's host carrying a credential other than envgit's placeholder.
pub(crate) const RULE_CREDENTIAL: &str = "gate.credential";
/// TRACE or TRACK to a credential's host: the answer would be the request, secret included.
pub(crate) const RULE_TRACE: &str = "gate.trace";
/// A request whose framing, target or headers could be read two ways.
pub(crate) const RULE_MALFORMED: &str = "gate.malformed";
/// A WebSocket request the policy did not mark `websocket: true` for its host.
pub(crate) const RULE_WEBSOCKET: &str = "gate.websocket";
/// A body that did not arrive in time for the rule that reads it.
pub(crate) const RULE_TIMEOUT: &str = "gate.timeout";
/// A request past the most the gate holds at once ([`crate::forward::REQUESTS_AT_ONCE`]).
pub(crate) const RULE_BUSY: &str = "gate.busy";
