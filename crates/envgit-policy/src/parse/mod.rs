//! Text → `Policy`: the YAML tree is walked section by section; the first problem found is
//! returned with its position.

mod network;
mod sections;
mod values;

use crate::node::{self, Kind};
use crate::read::Reader;
use crate::{Policy, PolicyError};

const TOP_KEYS: &[&str] = &[
    "version",
    "env",
    "network",
    "irreversible",
    "approvers",
    "filesystem",
    "shell",
    "snapshot",
    "mcp",
];

pub(crate) fn parse(file: &str, text: &str) -> Result<Policy, PolicyError> {
    let root = node::parse_yaml(file, text)?;
    let r = Reader { file };
    let missing_version = || PolicyError::new(file, 1, 1, "missing `version: 1`");
    if root.kind == Kind::Null {
        return Err(missing_version());
    }
    let top = r.fields(&root, "", TOP_KEYS)?;

    let version = top.get("version").ok_or_else(missing_version)?;
    match version.kind {
        Kind::Int(1) => {}
        Kind::Int(n) => {
            return Err(r.err(
                version,
                format!("unsupported version `{n}`; the only valid version is 1"),
            ));
        }
        ref other => {
            return Err(r.err(
                version,
                format!("`version` must be the number 1, found {}", other.describe()),
            ));
        }
    }

    let mut policy = Policy::default();
    if let Some(n) = top.get("env") {
        policy.env = sections::env(&r, n)?;
    }
    if let Some(n) = top.get("network") {
        policy.network = network::network(&r, n)?;
    }
    if let Some(n) = top.get("irreversible") {
        policy.irreversible = network::irreversible(&r, n)?;
    }
    if let Some(n) = top.get("approvers") {
        policy.approvers = sections::approvers(&r, n)?;
    }
    if let Some(n) = top.get("filesystem") {
        policy.filesystem = sections::filesystem(&r, n)?;
    }
    if let Some(n) = top.get("shell") {
        policy.shell = sections::shell(&r, n)?;
    }
    if let Some(n) = top.get("snapshot") {
        policy.snapshot = sections::snapshot(&r, n)?;
    }
    if let Some(n) = top.get("mcp") {
        policy.mcp = sections::mcp(&r, n)?;
    }
    Ok(policy)
}

impl Policy {
    /// Parses and validates a policy. `file` is only used in error messages (e.g.
    /// `envgit.yaml` or a full path).
    pub fn parse(file: &str, text: &str) -> Result<Policy, PolicyError> {
        parse(file, text)
    }
}
