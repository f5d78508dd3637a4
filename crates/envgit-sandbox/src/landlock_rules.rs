//! Landlock as a second layer behind the mounts: writes only where the mount plan allows them,
//! and abstract unix sockets and signals scoped to the sandbox. Best effort up to ABI 7 (what
//! this project's kernel offers); the ABI in use is reported.

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};

/// Where the command may connect to pathname unix sockets once the kernel can say so
/// (Landlock ABI 9, Linux 7.1): its private scratch directories and envgit's own sockets
/// under `/run/envgit` — never the project or the home, where a host service may listen.
const UNIX_CONNECT_ROOTS: &[&str] = &["/tmp", "/var/tmp", "/run/envgit"];

/// The ruleset could not be built or applied (the command must not start without it).
#[derive(Debug, thiserror::Error)]
#[error("landlock: {0}")]
pub struct LandlockError(#[from] landlock::RulesetError);

/// Apply the ruleset; returns a line describing what is enforced.
pub fn restrict(write_roots: &[PathBuf]) -> Result<String, LandlockError> {
    let abi = ABI::V6;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let unix_roots: Vec<&str> = UNIX_CONNECT_ROOTS
        .iter()
        .copied()
        .filter(|p| std::path::Path::new(p).exists())
        .collect();
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        // ABI 9 adds connecting to pathname unix sockets; older kernels drop it (best effort).
        .handle_access(all | AccessFs::ResolveUnix)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?
        .add_rules(path_beneath_rules(["/"], read))?
        .add_rules(path_beneath_rules(write_roots, all))?
        .add_rules(path_beneath_rules(unix_roots, AccessFs::ResolveUnix))?
        .restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => format!("landlock: enforced (ABI {})", abi as i32),
        RulesetStatus::PartiallyEnforced => "landlock: partially enforced (older kernel)".into(),
        RulesetStatus::NotEnforced => "landlock: not available on this kernel".into(),
    })
}
