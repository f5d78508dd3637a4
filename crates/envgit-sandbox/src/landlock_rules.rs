//! Landlock as a second layer behind the mounts: writes only where the mount plan allows them,
//! and abstract unix sockets and signals scoped to the sandbox. Best effort up to ABI 7 (what
//! this project's kernel offers); the ABI in use is reported.

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};

/// Apply the ruleset; returns a line describing what is enforced.
pub fn restrict(write_roots: &[PathBuf]) -> Result<String, String> {
    let abi = ABI::V6;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let err = |e: landlock::RulesetError| format!("landlock: {e}");
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(err)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(err)?
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(["/"], read))
        .map_err(err)?
        .add_rules(path_beneath_rules(write_roots, all))
        .map_err(err)?
        .restrict_self()
        .map_err(err)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => format!("landlock: enforced (ABI {})", abi as i32),
        RulesetStatus::PartiallyEnforced => "landlock: partially enforced (older kernel)".into(),
        RulesetStatus::NotEnforced => "landlock: not available on this kernel".into(),
    })
}
