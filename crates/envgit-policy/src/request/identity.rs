//! What an approval covers: one request, or the follow-up requests of the same
//! identity. Where the deciding rule's summary names the effect exactly (ref updates old→new,
//! `name@version`, the PyPI file and its sha256, the OCI repository and tag), the summary is
//! the identity, so the parts of one approved action share it. Elsewhere the gate adds the
//! whole body's hash, so that an approved request does not cover another with other content.
//! The query is part of every identity but where the parts of one action carry their own
//! state in it (an OCI push's uploads).

use crate::{IrreversibleEntry, Policy};

use super::preset::default_rules;

/// The preset entries whose requests share one approval whatever their query: the parts of
/// one push, whose queries carry the upload's state and digest.
const QUERY_FREE: &[&str] = &["oci.push"];

/// The preset entries whose summary names the whole effect.
const NAMED_EFFECT: &[&str] = &[
    "git.push",
    "npm.publish",
    "npm.dist-tag",
    "pypi.upload",
    "crates.publish",
    "crates.yank",
    "crates.owners",
    "oci.push",
    "oci.delete",
];

impl Policy {
    /// Must the gate hash the whole body into the approval identity of a request decided by
    /// `rule_id`? `true` for the user's `net` rules (their summary is only `METHOD
    /// host/path`), for preset entries whose summary does not name the effect (API writes,
    /// GraphQL mutations whose variables are not shown, LFS batches), and for any id this
    /// policy does not know (fail closed).
    pub fn identity_needs_whole_body(&self, rule_id: &str) -> bool {
        if self.is_user_rule(rule_id) {
            return true;
        }
        let preset = default_rules().iter().any(|r| r.id == rule_id);
        !(preset && NAMED_EFFECT.contains(&rule_id))
    }

    /// May one approval of a request decided by `rule_id` cover requests that differ only in
    /// their query? Only for the parts of one OCI push (`oci.push`: a blob upload's chunks and
    /// its closing `PUT …?digest=` carry the upload's state in the query, and the summary names
    /// the repository the approval covers). Everywhere else the query is part of what the
    /// person approves: servers read it (`?force=1`), so an approval covers its own query only.
    pub fn identity_ignores_query(&self, rule_id: &str) -> bool {
        if self.is_user_rule(rule_id) {
            return false;
        }
        let preset = default_rules().iter().any(|r| r.id == rule_id);
        preset && QUERY_FREE.contains(&rule_id)
    }

    /// Is `rule_id` one of this policy's own `net` rules?
    fn is_user_rule(&self, rule_id: &str) -> bool {
        self.irreversible.iter().enumerate().any(|(i, entry)| {
            matches!(entry, IrreversibleEntry::Net { id, .. }
                if id.clone().unwrap_or_else(|| format!("net.{i}")) == rule_id)
        })
    }
}
