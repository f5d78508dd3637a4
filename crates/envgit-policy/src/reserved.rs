//! Ports of this machine the sandbox may never reach, whatever `network.allow` says: a running
//! `envgit ui` serves the run's history and its Approve buttons on 127.0.0.1, and an agent
//! that could talk to it could approve its own held requests.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ConnectDecision;

/// Rule id for a connection to a port a running `envgit ui` registered.
pub const RULE_UI_PORT: &str = "ui.port";

/// Does `host` (a name or an IP literal, with or without brackets) name this machine itself:
/// `localhost` and `*.localhost`, loopback (`127/8`, `::1`, their IPv4-mapped forms) or the
/// unspecified address (`0.0.0.0`, `::`, which Linux dials as loopback)?
pub fn names_this_machine(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return is_this_machine(ip);
    }
    let name = bare.strip_suffix('.').unwrap_or(bare).to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// A loopback or unspecified address (IPv4-mapped forms too).
pub fn is_this_machine(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.is_loopback() || v4 == Ipv4Addr::UNSPECIFIED,
        IpAddr::V6(v6) => v6.is_loopback() || v6 == Ipv6Addr::UNSPECIFIED,
    }
}

/// The refusal for `host:port` when `reserved` says the port is an `envgit ui`'s and the host
/// is this machine; `None` otherwise. `reserved` is asked only for hosts of this machine.
pub fn refuse_reserved(
    host: &str,
    port: u16,
    reserved: impl FnOnce(u16) -> bool,
) -> Option<ConnectDecision> {
    (names_this_machine(host) && reserved(port)).then(|| ConnectDecision::Denied {
        rule: RULE_UI_PORT.to_owned(),
        reason: format!(
            "port {port} of this machine is served by a running `envgit ui` (its history and \
             Approve buttons), which the sandbox may never reach whatever network.allow says; \
             serve what the step needs on another port"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_this_machine_is_refused_on_a_reserved_port_only() {
        for host in [
            "127.0.0.1",
            "127.1.2.3",
            "localhost",
            "LOCALHOST.",
            "a.localhost",
            "[::1]",
            "::1",
            "0.0.0.0",
            "[::]",
            "::ffff:127.0.0.1",
        ] {
            let d = refuse_reserved(host, 4000, |p| p == 4000);
            assert!(
                matches!(&d, Some(ConnectDecision::Denied { rule, .. }) if rule == RULE_UI_PORT),
                "{host}: {d:?}"
            );
            assert_eq!(refuse_reserved(host, 4001, |p| p == 4000), None, "{host}");
        }
        for host in [
            "example.com",
            "10.0.0.1",
            "192.168.1.1",
            "localhost.example",
        ] {
            assert_eq!(refuse_reserved(host, 4000, |_| true), None, "{host}");
        }
    }
}
