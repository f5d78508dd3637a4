//! May a connection to `host:port` be opened at all? The one verdict every CONNECT, every
//! explicit-proxy request and every redial goes through: the ports a running `envgit ui`
//! reserved first, then `network.allow` (the policy's [`envgit_policy::decide_connect`]).
//! Each request inside is judged afterwards, in `forward.rs`.

use std::path::Path;

use envgit_policy::{ConnectDecision, Policy};

/// May a connection to `host:port` be opened? A port of this machine that a running `envgit
/// ui` registered in `reserved` (a file named by the port) is refused before the policy is
/// asked, unless its entry is stale (`reserved_ports.rs`); an entry that cannot be read
/// refuses too (fail closed).
pub(crate) fn connect(
    policy: &Policy,
    reserved: Option<&Path>,
    host: &str,
    port: u16,
) -> ConnectDecision {
    let is_reserved = |port: u16| {
        reserved
            .is_some_and(|dir| crate::reserved_ports::entry_is_live(&dir.join(port.to_string())))
    };
    if let Some(refusal) = envgit_policy::refuse_reserved(host, port, is_reserved) {
        return refusal;
    }
    envgit_policy::decide_connect(policy, host, port)
}
