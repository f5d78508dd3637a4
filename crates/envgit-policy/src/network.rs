//! `network.allow` decisions: may a connection to `host:port` be opened at all?
//!
//! Pure: the gate asks [`decide_connect`] with the name or literal the client named, and, after
//! resolving a name on the host, [`vet_address`] with each address it would dial.
//!
//! Semantics:
//! - a name without a port allows 443 and 80; `host:port` allows exactly that port;
//! - `*.example.com` matches every subdomain (any depth), never `example.com` itself;
//! - names compare case-insensitively, a trailing dot ignored;
//! - IP literals, `localhost`, and names resolving to loopback/private/link-local/metadata
//!   addresses need an explicit, non-glob `host:port` entry; a glob with an explicit port
//!   (`*.corp.internal:443`) also reaches private-network addresses, never loopback,
//!   link-local or cloud metadata ones (169.254.0.0/16, fd00:ec2::254);
//! - `localhost`, `127.0.0.1` and `::1` are one host for matching (`localhost:5432` allows a
//!   connection to `127.0.0.1:5432` and the other way round);
//! - port 22 is refused unless an explicit `host:22` entry names a loopback host;
//! - an entry may be a map `{ host, raw, websocket }`: `raw: true` (only on a loopback or
//!   private-address `host:port`) lets raw TCP through ([`raw_tcp_allowed_for`]); without it
//!   a connection is TLS or HTTP, judged per request. `websocket: true` lets WebSocket
//!   upgrades through ([`websocket_allowed`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::Policy;

/// Rule id when no `network.allow` entry matched.
pub const RULE_ALLOW: &str = "network.allow";
/// Rule id for port 22 (SSH) outside an explicit loopback entry.
pub const RULE_PORT22: &str = "network.port22";
/// Rule id for a public IP literal that is not listed with its port.
pub const RULE_IP_LITERAL: &str = "network.ip-literal";
/// Rule id for loopback/private/link-local/metadata addresses (and `localhost`) not listed
/// with an explicit port.
pub const RULE_PRIVATE: &str = "network.private";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectDecision {
    /// `rule` is the `network.allow` entry that matched, as written in the policy.
    Allowed { rule: String },
    /// `rule` is one of the `network.*` rule ids above.
    Denied { rule: String, reason: String },
}

impl ConnectDecision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, ConnectDecision::Allowed { .. })
    }

    /// The matched entry (allowed) or the rule id (denied).
    pub fn rule(&self) -> &str {
        match self {
            ConnectDecision::Allowed { rule } | ConnectDecision::Denied { rule, .. } => rule,
        }
    }
}

/// May a connection to `host:port` be opened? `host` is a name, an IPv4 literal, or an IPv6
/// literal with or without brackets.
pub fn decide_connect(policy: &Policy, host: &str, port: u16) -> ConnectDecision {
    let target = Host::parse(host);
    let matched = policy
        .network
        .allow
        .iter()
        .find(|entry| Entry::parse(entry).is_some_and(|e| e.matches(&target, port)));
    if port == 22 {
        return match matched {
            Some(entry)
                if target.is_loopback()
                    && Entry::parse(entry).is_some_and(|e| e.port == Some(22)) =>
            {
                allowed(entry)
            }
            _ => denied(
                RULE_PORT22,
                format!(
                    "port 22 (SSH) is refused; only an explicit loopback entry such as \
                     `127.0.0.1:22` in network.allow opens it (asked for {})",
                    target.display(port)
                ),
            ),
        };
    }
    if let Some(entry) = matched {
        return allowed(entry);
    }
    match &target {
        Host::Ip(ip) if is_special(*ip) => denied(
            RULE_PRIVATE,
            format!(
                "{} is a loopback, private, link-local or metadata address; {}",
                target.display(port),
                fix(&target.display(port))
            ),
        ),
        Host::Ip(_) => denied(
            RULE_IP_LITERAL,
            format!(
                "{} is an IP literal; {}",
                target.display(port),
                fix(&target.display(port))
            ),
        ),
        Host::Loopback | Host::Name(_) if target.is_private_name() => denied(
            RULE_PRIVATE,
            format!(
                "{} is a loopback name; {}",
                target.display(port),
                fix(&target.display(port))
            ),
        ),
        Host::Name(name) if port == 443 || port == 80 => denied(RULE_ALLOW, fix(name)),
        _ => denied(RULE_ALLOW, fix(&target.display(port))),
    }
}

/// Is `host:port` under `network.passthrough` (same entry syntax as `network.allow`)? Its TLS
/// is then tunnelled without inspection and recorded as uninspected.
pub fn is_passthrough(policy: &Policy, host: &str, port: u16) -> bool {
    let target = Host::parse(host);
    policy
        .network
        .passthrough
        .iter()
        .any(|entry| Entry::parse(entry).is_some_and(|e| e.matches(&target, port)))
}

/// After an allowed decision for a *name*, may the gate dial `addr`, one of the addresses the
/// name resolved to? Loopback/private/link-local/metadata addresses are only dialled for an
/// explicit, non-glob `host:port` entry (so a public name that resolves to `127.0.0.1`, or a
/// glob whose subdomains an attacker controls, never reaches the host's own services). A glob
/// with an explicit port (`*.corp.internal:443`) reaches private-network addresses (10/8,
/// 172.16/12, 192.168/16, 100.64/10, fc00::/7), never loopback, link-local or metadata ones.
pub fn vet_address(allowed_rule: &str, addr: IpAddr) -> ConnectDecision {
    if !is_special(addr) {
        return allowed(allowed_rule);
    }
    let reaches = Entry::parse(allowed_rule)
        .is_some_and(|e| e.port.is_some() && (!e.glob || is_private_range(addr)));
    if reaches {
        allowed(allowed_rule)
    } else {
        denied(
            RULE_PRIVATE,
            format!(
                "the name resolved to {addr}, a loopback, private, link-local or metadata \
                 address; only an explicit `host:port` entry in network.allow reaches it"
            ),
        )
    }
}

/// The reason for a refusal by [`vet_address`] of `host:port` (a name) at `addr`: which
/// address it resolved to and the entry that would reach it.
pub fn resolved_private_reason(host: &str, port: u16, addr: IpAddr) -> String {
    let target = Host::parse(host).display(port);
    let name = target.rsplit_once(':').map_or(target.as_str(), |(h, _)| h);
    format!(
        "{name} resolved to {addr}, a loopback, private, link-local or metadata address; {}",
        fix(&target)
    )
}

/// How to allow a refused target: the `network.allow` entry to add (plain ASCII: it travels
/// in a header too).
fn fix(entry: &str) -> String {
    format!("to allow it, add \"{entry}\" to network.allow in envgit.yaml")
}

/// Is raw TCP (neither TLS nor HTTP) let through for connections `allowed_rule` allowed
/// (the entry [`decide_connect`] returned)? Only when the policy writes that entry with
/// `raw: true` (a connection is raw only where the policy says raw). A bare
/// loopback `host:port` string is HTTP or TLS, judged per request.
pub fn raw_tcp_allowed(policy: &Policy, allowed_rule: &str) -> bool {
    policy
        .network
        .allow_options
        .get(allowed_rule)
        .is_some_and(|o| o.raw)
}

/// Is raw TCP let through to exactly `host:port`? True only for a `raw: true` entry naming
/// this host (`localhost`, `127.0.0.1` and `::1` are one host) and this port.
pub fn raw_tcp_allowed_for(policy: &Policy, host: &str, port: u16) -> bool {
    let target = Host::parse(host);
    policy.network.allow_options.iter().any(|(entry, o)| {
        o.raw
            && Entry::parse(entry)
                .is_some_and(|e| e.port == Some(port) && !e.glob && Host::parse(e.host) == target)
    })
}

/// May a connection to `host:port` upgrade to a WebSocket? True for an entry with
/// `websocket: true` that allows this host and port.
pub fn websocket_allowed(policy: &Policy, host: &str, port: u16) -> bool {
    let target = Host::parse(host);
    policy.network.allow_options.iter().any(|(entry, o)| {
        o.websocket && Entry::parse(entry).is_some_and(|e| e.matches(&target, port))
    })
}

/// Why `raw: true` is not valid on this `network.allow` host, if it is not: it must be a
/// loopback or private address (or `localhost`) with an explicit port, never a glob.
pub(crate) fn raw_entry(text: &str) -> Result<(), RawEntryError> {
    let entry = Entry::parse(text).ok_or(RawEntryError::NotAHost)?;
    if entry.glob {
        return Err(RawEntryError::Glob);
    }
    if entry.port.is_none() {
        return Err(RawEntryError::NoPort);
    }
    let private = match Host::parse(entry.host) {
        Host::Loopback => true,
        Host::Ip(IpAddr::V4(v4)) => v4.is_loopback() || v4.is_private(),
        Host::Ip(IpAddr::V6(v6)) => v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00,
        Host::Name(name) => name.ends_with(".localhost"),
    };
    if private {
        Ok(())
    } else {
        Err(RawEntryError::NotPrivate)
    }
}

/// Why a `network.allow` entry cannot carry `raw: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RawEntryError {
    #[error("not a host")]
    NotAHost,
    #[error("a glob names hosts the policy cannot vet")]
    Glob,
    #[error("it has no explicit port")]
    NoPort,
    #[error("it is not a loopback or private address")]
    NotPrivate,
}

/// The ports of every loopback `host:port` entry (`localhost`, `127.0.0.1`, `[::1]`): the
/// sandbox listens on `127.0.0.1:P` for each and forwards to the host's `127.0.0.1:P`.
/// Sorted, without duplicates.
pub fn loopback_forwards(policy: &Policy) -> Vec<u16> {
    let mut ports: Vec<u16> = policy
        .network
        .allow
        .iter()
        .filter_map(|entry| Entry::parse(entry))
        .filter(|e| !e.glob && matches!(Host::parse(e.host), Host::Loopback))
        .filter_map(|e| e.port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// A private-network address a glob with an explicit port may reach: 10/8, 172.16/12,
/// 192.168/16, CGNAT 100.64/10 and unique-local fc00::/7 (IPv4-mapped forms too). Never
/// loopback, link-local (169.254/16, fe80::/10), the cloud metadata addresses
/// (169.254.169.254, fd00:ec2::254), or any other special range.
fn is_private_range(addr: IpAddr) -> bool {
    match addr.to_canonical() {
        IpAddr::V4(v4) => {
            let [o0, o1, ..] = v4.octets();
            v4.is_private() || (o0 == 100 && (64..128).contains(&o1))
        }
        IpAddr::V6(v6) => {
            const METADATA: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
            (v6.segments()[0] & 0xfe00) == 0xfc00 && v6 != METADATA
        }
    }
}

/// Not a public unicast address: loopback, private, CGNAT, link-local (with the cloud metadata
/// address 169.254.169.254), unspecified, multicast, broadcast, reserved, documentation and
/// benchmarking ranges, and the IPv6 forms that embed such an IPv4 address.
pub fn is_special(addr: IpAddr) -> bool {
    match addr.to_canonical() {
        IpAddr::V4(v4) => is_special_v4(v4),
        IpAddr::V6(v6) => is_special_v6(v6),
    }
}

fn is_special_v4(a: Ipv4Addr) -> bool {
    let [o0, o1, o2, _] = a.octets();
    a.is_loopback()
        || a.is_private()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_documentation()
        || o0 == 0 // "this network"
        || (o0 == 100 && (64..128).contains(&o1)) // CGNAT 100.64/10
        || (o0 == 192 && o1 == 0 && o2 == 0) // IETF protocol assignments
        || (o0 == 198 && (18..20).contains(&o1)) // benchmarking 198.18/15
        || o0 >= 240 // reserved
}

fn is_special_v6(a: Ipv6Addr) -> bool {
    let s = a.segments();
    let embedded_v4 = |hi: u16, lo: u16| {
        is_special_v4(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        ))
    };
    a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated)
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x2001 && s[1] == 0) // Teredo: hides an IPv4 address
        || (s[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible ::a.b.c.d
        || (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && embedded_v4(s[6], s[7])) // NAT64
        || (s[0] == 0x2002 && embedded_v4(s[1], s[2])) // 6to4
}

/// Does a rule's host pattern (`*`, `*:port`, `host`, `host:port`, `*.example.com[:port]`,
/// `[v6][:port]`) name this request target? Without a port, any port matches; names compare
/// case-insensitively, a trailing dot ignored; `*.example.com` does not match `example.com`.
pub(crate) fn rule_host_matches(pattern: &str, host: &str, port: u16) -> bool {
    let Some(entry) = Entry::parse(pattern) else {
        return false;
    };
    if entry.port.is_some_and(|p| p != port) {
        return false;
    }
    if entry.host == "*" {
        return true;
    }
    let target = Host::parse(host);
    if entry.glob {
        let suffix = entry.host[1..].to_ascii_lowercase();
        return matches!(&target, Host::Name(name) if name.ends_with(&suffix) && name.len() > suffix.len());
    }
    Host::parse(entry.host) == target
}

fn allowed(entry: &str) -> ConnectDecision {
    ConnectDecision::Allowed {
        rule: entry.to_owned(),
    }
}

fn denied(rule: &str, reason: String) -> ConnectDecision {
    ConnectDecision::Denied {
        rule: rule.to_owned(),
        reason,
    }
}

/// A host as a connection names it, normalised for matching.
#[derive(Debug, PartialEq, Eq)]
enum Host {
    /// `localhost`, `127.0.0.1`, `::1` (and `::ffff:127.0.0.1`): one host for matching.
    Loopback,
    Ip(IpAddr),
    /// Lower-cased, without a trailing dot.
    Name(String),
}

impl Host {
    fn parse(text: &str) -> Host {
        let bare = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            let ip = ip.to_canonical();
            return if ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST)
            {
                Host::Loopback
            } else {
                Host::Ip(ip)
            };
        }
        let name = bare.strip_suffix('.').unwrap_or(bare).to_ascii_lowercase();
        if name == "localhost" {
            Host::Loopback
        } else {
            Host::Name(name)
        }
    }

    fn is_loopback(&self) -> bool {
        match self {
            Host::Loopback => true,
            Host::Ip(ip) => ip.is_loopback(),
            Host::Name(name) => name.ends_with(".localhost"),
        }
    }

    /// A name that always means this machine (needs an explicit port like a private address).
    fn is_private_name(&self) -> bool {
        match self {
            Host::Loopback => true,
            Host::Name(name) => name.ends_with(".localhost"),
            Host::Ip(_) => false,
        }
    }

    /// Needs an explicit `host:port` entry: every literal and every loopback name.
    fn needs_port(&self) -> bool {
        !matches!(self, Host::Name(_)) || self.is_private_name()
    }

    fn display(&self, port: u16) -> String {
        match self {
            Host::Loopback => format!("localhost:{port}"),
            Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
            Host::Ip(ip) => format!("{ip}:{port}"),
            Host::Name(name) => format!("{name}:{port}"),
        }
    }
}

/// One `network.allow` entry: `host`, `host:port`, `[v6]`, `[v6]:port`, `*.domain[:port]`.
struct Entry<'a> {
    host: &'a str,
    port: Option<u16>,
    glob: bool,
}

impl<'a> Entry<'a> {
    fn parse(text: &'a str) -> Option<Entry<'a>> {
        let (host, port) = if text.starts_with('[') {
            let close = text.find(']')?;
            let (host, rest) = text.split_at(close + 1);
            match rest {
                "" => (host, None),
                _ => (host, Some(rest.strip_prefix(':')?.parse().ok()?)),
            }
        } else {
            match text.split_once(':') {
                Some((host, port)) => (host, Some(port.parse().ok()?)),
                None => (text, None),
            }
        };
        if port == Some(0) || host.is_empty() {
            return None;
        }
        Some(Entry {
            host,
            port,
            glob: host.starts_with("*."),
        })
    }

    fn matches(&self, target: &Host, port: u16) -> bool {
        match self.port {
            Some(p) if p != port => return false,
            None if port != 443 && port != 80 => return false,
            None if target.needs_port() => return false,
            _ => {}
        }
        if self.glob {
            let suffix = self.host[1..].to_ascii_lowercase(); // ".example.com"
            return matches!(target, Host::Name(name) if name.ends_with(&suffix) && name.len() > suffix.len());
        }
        Host::parse(self.host) == *target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> Policy {
        let mut p = Policy::default();
        p.network.allow = allow.iter().map(|s| (*s).to_owned()).collect();
        p
    }

    /// (allow list, host, port, expected: Ok(matched entry) or Err(rule id))
    type Row = (
        &'static [&'static str],
        &'static str,
        u16,
        Result<&'static str, &'static str>,
    );

    const TABLE: &[Row] = &[
        // a name without a port: 443 and 80 only
        (
            &["registry.npmjs.org"],
            "registry.npmjs.org",
            443,
            Ok("registry.npmjs.org"),
        ),
        (
            &["registry.npmjs.org"],
            "registry.npmjs.org",
            80,
            Ok("registry.npmjs.org"),
        ),
        (
            &["registry.npmjs.org"],
            "registry.npmjs.org",
            8443,
            Err(RULE_ALLOW),
        ),
        (&["registry.npmjs.org"], "npmjs.org", 443, Err(RULE_ALLOW)),
        (
            &["registry.npmjs.org"],
            "evil-registry.npmjs.org",
            443,
            Err(RULE_ALLOW),
        ),
        (&[], "example.com", 443, Err(RULE_ALLOW)),
        // host:port: exactly that port
        (
            &["api.github.com:443"],
            "api.github.com",
            443,
            Ok("api.github.com:443"),
        ),
        (
            &["api.github.com:443"],
            "api.github.com",
            80,
            Err(RULE_ALLOW),
        ),
        (
            &["example.com:8443"],
            "example.com",
            8443,
            Ok("example.com:8443"),
        ),
        (&["example.com:8443"], "example.com", 443, Err(RULE_ALLOW)),
        // case and trailing dot
        (
            &["api.github.com"],
            "API.GitHub.COM",
            443,
            Ok("api.github.com"),
        ),
        (
            &["api.github.com"],
            "api.github.com.",
            443,
            Ok("api.github.com"),
        ),
        // globs: subdomains at any depth, never the bare domain
        (
            &["*.pythonhosted.org"],
            "files.pythonhosted.org",
            443,
            Ok("*.pythonhosted.org"),
        ),
        (
            &["*.pythonhosted.org"],
            "a.b.pythonhosted.org",
            80,
            Ok("*.pythonhosted.org"),
        ),
        (
            &["*.pythonhosted.org"],
            "pythonhosted.org",
            443,
            Err(RULE_ALLOW),
        ),
        (
            &["*.pythonhosted.org"],
            "evilpythonhosted.org",
            443,
            Err(RULE_ALLOW),
        ),
        (
            &["*.pythonhosted.org"],
            "files.pythonhosted.org",
            22,
            Err(RULE_PORT22),
        ),
        (
            &["*.example.com:8080"],
            "x.example.com",
            8080,
            Ok("*.example.com:8080"),
        ),
        (
            &["*.example.com:8080"],
            "x.example.com",
            443,
            Err(RULE_ALLOW),
        ),
        // the first matching entry is the one reported
        (&["a.com:443", "a.com"], "a.com", 443, Ok("a.com:443")),
        (&["a.com:8443", "a.com"], "a.com", 443, Ok("a.com")),
        // public IP literals need ip:port
        (
            &["93.184.216.34"],
            "93.184.216.34",
            443,
            Err(RULE_IP_LITERAL),
        ),
        (
            &["93.184.216.34:443"],
            "93.184.216.34",
            443,
            Ok("93.184.216.34:443"),
        ),
        (&[], "93.184.216.34", 80, Err(RULE_IP_LITERAL)),
        (
            &["[2606:4700::1111]:443"],
            "2606:4700::1111",
            443,
            Ok("[2606:4700::1111]:443"),
        ),
        (
            &["[2606:4700::1111]:443"],
            "[2606:4700:0::1111]",
            443,
            Ok("[2606:4700::1111]:443"),
        ),
        (
            &["[2606:4700::1111]"],
            "2606:4700::1111",
            443,
            Err(RULE_IP_LITERAL),
        ),
        // loopback, private, link-local, metadata: explicit port only
        (&["127.0.0.1"], "127.0.0.1", 443, Err(RULE_PRIVATE)),
        (&["127.0.0.1:5432"], "127.0.0.1", 5432, Ok("127.0.0.1:5432")),
        (&["127.0.0.1:5432"], "127.0.0.1", 5433, Err(RULE_PRIVATE)),
        (&["localhost"], "localhost", 80, Err(RULE_PRIVATE)),
        (&[], "localhost", 443, Err(RULE_PRIVATE)),
        (&[], "app.localhost", 443, Err(RULE_PRIVATE)),
        (&["localhost:3000"], "localhost", 3000, Ok("localhost:3000")),
        (&["localhost:3000"], "127.0.0.1", 3000, Ok("localhost:3000")),
        (&["127.0.0.1:3000"], "localhost", 3000, Ok("127.0.0.1:3000")),
        (&["[::1]:3000"], "127.0.0.1", 3000, Ok("[::1]:3000")),
        (
            &["localhost:3000"],
            "::ffff:127.0.0.1",
            3000,
            Ok("localhost:3000"),
        ),
        (&["localhost:3000"], "127.0.0.2", 3000, Err(RULE_PRIVATE)),
        (&["10.0.0.5"], "10.0.0.5", 443, Err(RULE_PRIVATE)),
        (&["10.0.0.5:443"], "10.0.0.5", 443, Ok("10.0.0.5:443")),
        (&[], "192.168.1.1", 80, Err(RULE_PRIVATE)),
        (&[], "172.16.0.1", 443, Err(RULE_PRIVATE)),
        (&[], "100.64.0.1", 443, Err(RULE_PRIVATE)),
        (&[], "169.254.169.254", 80, Err(RULE_PRIVATE)),
        (
            &["169.254.169.254"],
            "169.254.169.254",
            80,
            Err(RULE_PRIVATE),
        ),
        (&[], "0.0.0.0", 80, Err(RULE_PRIVATE)),
        (&[], "::1", 443, Err(RULE_PRIVATE)),
        (&[], "[fe80::1]", 443, Err(RULE_PRIVATE)),
        (&[], "fd00:ec2::254", 80, Err(RULE_PRIVATE)),
        (&[], "::ffff:10.0.0.1", 443, Err(RULE_PRIVATE)),
        (&[], "64:ff9b::a00:1", 443, Err(RULE_PRIVATE)),
        (&[], "64:ff9b::808:808", 443, Err(RULE_IP_LITERAL)),
        // port 22: refused unless an explicit loopback host:22
        (&["github.com"], "github.com", 22, Err(RULE_PORT22)),
        (&["github.com:22"], "github.com", 22, Err(RULE_PORT22)),
        (&["10.0.0.5:22"], "10.0.0.5", 22, Err(RULE_PORT22)),
        (&["127.0.0.1:22"], "127.0.0.1", 22, Ok("127.0.0.1:22")),
        (&["localhost:22"], "127.0.0.1", 22, Ok("localhost:22")),
        (&["127.0.0.1:2222"], "127.0.0.1", 22, Err(RULE_PORT22)),
        (&[], "127.0.0.1", 22, Err(RULE_PORT22)),
    ];

    #[test]
    fn decide_connect_table() {
        for (i, (allow, host, port, want)) in TABLE.iter().enumerate() {
            let got = decide_connect(&policy(allow), host, *port);
            match (want, &got) {
                (Ok(entry), ConnectDecision::Allowed { rule }) => {
                    assert_eq!(rule, entry, "row {i}: {host}:{port} under {allow:?}");
                }
                (Err(id), ConnectDecision::Denied { rule, reason }) => {
                    assert_eq!(rule, id, "row {i}: {host}:{port} under {allow:?}: {reason}");
                    assert!(!reason.is_empty());
                }
                _ => panic!("row {i}: {host}:{port} under {allow:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn vet_address_table() {
        let rows: &[(&str, &str, bool)] = &[
            ("example.com", "93.184.216.34", true),
            ("example.com", "127.0.0.1", false),
            ("example.com", "10.1.2.3", false),
            ("example.com", "169.254.169.254", false),
            ("example.com", "::ffff:192.168.0.1", false),
            ("example.com", "2002:c0a8:1::1", false),
            ("example.com", "2002:0808:0808::1", true),
            // a glob with an explicit port reaches private addresses, never loopback,
            // link-local, metadata or other special ones
            ("*.corp.example:443", "10.0.0.1", true),
            ("*.corp.example:443", "192.168.1.1", true),
            ("*.corp.example:8443", "172.16.5.4", true),
            ("*.corp.example:443", "100.64.0.1", true),
            ("*.corp.example:443", "fd12:3456::1", true),
            ("*.corp.example:443", "::ffff:10.0.0.1", true),
            ("*.corp.example", "10.0.0.1", false),
            ("*.corp.example:443", "127.0.0.1", false),
            ("*.corp.example:443", "::1", false),
            ("*.corp.example:443", "169.254.169.254", false),
            ("*.corp.example:443", "169.254.1.1", false),
            ("*.corp.example:443", "::ffff:169.254.169.254", false),
            ("*.corp.example:443", "fd00:ec2::254", false),
            ("*.corp.example:443", "fe80::1", false),
            ("*.corp.example:443", "0.0.0.0", false),
            ("*.corp.example:443", "224.0.0.1", false),
            ("*.corp.example:443", "255.255.255.255", false),
            ("*.corp.example:443", "2002:a00:1::1", false),
            ("*.corp.example:443", "::a00:1", false),
            ("*.corp.example:443", "192.0.2.1", false),
            ("*.corp.example:443", "93.184.216.34", true),
            // an explicit name still reaches what it names
            ("meta.corp.example:80", "169.254.169.254", true),
            ("db.corp.example:5432", "10.0.0.1", true),
            ("localhost:5432", "127.0.0.1", true),
            ("localhost:5432", "::1", true),
        ];
        for (rule, addr, ok) in rows {
            let addr: IpAddr = addr.parse().unwrap();
            let got = vet_address(rule, addr);
            assert_eq!(got.is_allowed(), *ok, "{rule} -> {addr}: {got:?}");
            if !ok {
                assert_eq!(got.rule(), RULE_PRIVATE);
            }
        }
    }

    #[test]
    fn raw_tcp_only_where_the_policy_says_raw() {
        // a bare entry never allows raw TCP, loopback or not; only `raw: true` does
        let p = policy(&[
            "127.0.0.1:5432",
            "localhost:5432",
            "[::1]:5432",
            "localhost",
        ]);
        for rule in [
            "127.0.0.1:5432",
            "localhost:5432",
            "[::1]:5432",
            "localhost",
        ] {
            assert!(!raw_tcp_allowed(&p, rule), "{rule}");
        }
        let mut p = p;
        p.network.allow_options.insert(
            "127.0.0.1:5432".into(),
            crate::AllowOptions {
                raw: true,
                websocket: false,
            },
        );
        assert!(raw_tcp_allowed(&p, "127.0.0.1:5432"));
        assert!(!raw_tcp_allowed(&p, "localhost:5432"));
        assert!(raw_tcp_allowed_for(&p, "localhost", 5432));
        assert!(raw_tcp_allowed_for(&p, "::1", 5432));
        assert!(!raw_tcp_allowed_for(&p, "127.0.0.1", 5433));
        for (host, ok) in [
            ("127.0.0.1:5432", true),
            ("localhost:5432", true),
            ("[::1]:5432", true),
            ("10.0.0.5:5432", true),
            ("192.168.1.2:5432", true),
            ("[fd00::1]:5432", true),
            ("db.localhost:5432", true),
            ("localhost", false),
            ("example.com:443", false),
            ("*.localhost:80", false),
            ("8.8.8.8:53", false),
            ("169.254.169.254:80", false),
        ] {
            assert_eq!(raw_entry(host).is_ok(), ok, "{host}");
        }
    }

    #[test]
    fn loopback_forwards_lists_explicit_loopback_ports() {
        let p = policy(&[
            "localhost:5432",
            "127.0.0.1:6379",
            "[::1]:5432",
            "localhost",
            "127.0.0.2:9000",
            "example.com:8080",
        ]);
        assert_eq!(loopback_forwards(&p), vec![5432, 6379]);
    }

    #[test]
    fn entries_from_a_parsed_policy_work() {
        let p = Policy::parse(
            "envgit.yaml",
            "version: 1\nnetwork:\n  allow: [\"API.GitHub.com:443\", \"*.PyPI.org\"]\n",
        );
        let p = p.unwrap();
        assert!(decide_connect(&p, "api.github.com", 443).is_allowed());
        assert!(decide_connect(&p, "files.pypi.org", 80).is_allowed());
    }
}

#[cfg(test)]
mod reason_tests {
    use super::*;

    #[test]
    fn refusals_name_the_entry_that_would_allow_them() {
        let p = Policy::default();
        let rows: &[(&str, u16, &str)] = &[
            ("example.com", 443, "add \"example.com\" to network.allow"),
            ("Example.COM.", 80, "add \"example.com\" to network.allow"),
            (
                "example.com",
                8443,
                "add \"example.com:8443\" to network.allow",
            ),
            ("10.0.0.5", 443, "add \"10.0.0.5:443\" to network.allow"),
            (
                "93.184.216.34",
                80,
                "add \"93.184.216.34:80\" to network.allow",
            ),
            ("::1", 3000, "add \"localhost:3000\" to network.allow"),
            ("fd00::1", 443, "add \"[fd00::1]:443\" to network.allow"),
        ];
        for (host, port, want) in rows {
            let ConnectDecision::Denied { reason, .. } = decide_connect(&p, host, *port) else {
                panic!("{host}:{port} allowed");
            };
            assert!(reason.contains(want), "{host}:{port}: {reason}");
            assert!(
                reason.ends_with("to network.allow in envgit.yaml"),
                "{reason}"
            );
            assert!(reason.is_ascii(), "{reason}");
        }
        let r = resolved_private_reason("Registry.npmjs.org", 443, "10.1.2.3".parse().unwrap());
        assert_eq!(
            r,
            "registry.npmjs.org resolved to 10.1.2.3, a loopback, private, link-local or \
             metadata address; to allow it, add \"registry.npmjs.org:443\" to network.allow \
             in envgit.yaml"
        );
    }
}
