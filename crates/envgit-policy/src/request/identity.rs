//! What an approval covers: one request, or the follow-up requests of the same
//! identity. Where the deciding rule's summary names the effect exactly (ref updates old→new,
//! `name@version`, the PyPI file and its sha256, the OCI repository and tag), the summary is
//! the identity, so the parts of one approved action share it. Elsewhere the gate adds the
//! whole body's hash, so that an approved request does not cover another with other content.

use crate::{IrreversibleEntry, Policy};

use super::preset::default_rules;

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
        let user_rule = self.irreversible.iter().enumerate().any(|(i, entry)| {
            matches!(entry, IrreversibleEntry::Net { id, .. }
                if id.clone().unwrap_or_else(|| format!("net.{i}")) == rule_id)
        });
        if user_rule {
            return true;
        }
        let preset = default_rules().iter().any(|r| r.id == rule_id);
        !(preset && NAMED_EFFECT.contains(&rule_id))
    }
}
