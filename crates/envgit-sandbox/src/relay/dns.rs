//! The DNS stub, like an offline network that knows only the names the policy could allow:
//! a name that a `network.allow` entry (or its glob) could allow, or a loopback name
//! (`localhost`, `*.localhost`), gets for an A query a fake loopback address from
//! 127.1.0.0/16, one per name for the whole run (the capture listeners turn it back into the
//! name), and for AAAA and every other type an empty NOERROR answer. Every other name gets
//! NXDOMAIN, whatever the type. Nothing is ever forwarded: query names are an exfiltration
//! channel. Names are limited to `[A-Za-z0-9._-]` (others: REFUSED), so a name can never
//! inject a line break into a CONNECT head.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpStream, UdpSocket};
use std::sync::Mutex;
use std::time::Duration;

use simple_dns::rdata::{A, RData};
use simple_dns::{
    CLASS, Name, OPCODE, Packet, PacketFlag, QCLASS, QTYPE, RCODE, ResourceRecord, TYPE,
};

use super::Shared;

/// Addresses 127.1.0.1 ..= 127.1.255.254.
const POOL_SIZE: u32 = 0xfffe;
const TTL: u32 = 60;
/// How long a TCP DNS client may stay idle.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The name ↔ fake address table of one run, and the names it answers.
#[derive(Default)]
pub(crate) struct FakeDns {
    table: Mutex<Table>,
    names: AllowedNames,
}

/// The names `network.allow` entries could allow: exact names and glob suffixes, lower-case,
/// without a trailing dot. Ports do not matter here (the gate judges them).
#[derive(Default)]
struct AllowedNames {
    exact: HashSet<String>,
    /// `.example.com` for `*.example.com`: subdomains at any depth, not the bare domain.
    suffixes: Vec<String>,
}

impl AllowedNames {
    fn new(entries: &[String]) -> AllowedNames {
        let mut names = AllowedNames::default();
        for entry in entries {
            if entry.starts_with('[') {
                continue; // an IPv6 literal: no name
            }
            let host = entry.split_once(':').map_or(entry.as_str(), |(h, _)| h);
            let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
            match host.strip_prefix("*.") {
                Some(domain) if !domain.is_empty() => names.suffixes.push(format!(".{domain}")),
                Some(_) => {}
                None => {
                    names.exact.insert(host);
                }
            }
        }
        names
    }

    /// `name` is lower-case without a trailing dot.
    fn allows(&self, name: &str) -> bool {
        name == "localhost"
            || name.ends_with(".localhost")
            || self.exact.contains(name)
            || self
                .suffixes
                .iter()
                .any(|s| name.ends_with(s.as_str()) && name.len() > s.len())
    }
}

#[derive(Default)]
struct Table {
    by_name: HashMap<String, Ipv4Addr>,
    by_ip: HashMap<Ipv4Addr, String>,
}

impl FakeDns {
    /// A stub answering the names `allow` (the `network.allow` entries) could allow.
    pub(crate) fn new(allow: &[String]) -> FakeDns {
        FakeDns {
            table: Mutex::default(),
            names: AllowedNames::new(allow),
        }
    }

    /// The address of `name` (lower-case, no trailing dot): the same every time within the
    /// run, never another name's. `None` once the pool is exhausted.
    pub(crate) fn address_for(&self, name: &str) -> Option<Ipv4Addr> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ip) = table.by_name.get(name) {
            return Some(*ip);
        }
        let start = fnv1a(name.as_bytes()) % POOL_SIZE;
        for probe in 0..POOL_SIZE {
            let slot = (start + probe) % POOL_SIZE + 1;
            let ip = Ipv4Addr::new(127, 1, (slot >> 8) as u8, slot as u8);
            if let std::collections::hash_map::Entry::Vacant(slot) = table.by_ip.entry(ip) {
                slot.insert(name.to_owned());
                table.by_name.insert(name.to_owned(), ip);
                return Some(ip);
            }
        }
        None
    }

    /// The name a fake address was handed out for.
    pub(crate) fn name_of(&self, ip: Ipv4Addr) -> Option<String> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.by_ip.get(&ip).cloned()
    }
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The answer to one DNS message, or `None` when it deserves no answer (not a query, or too
/// broken to carry an id).
pub(crate) fn answer(query: &[u8], dns: &FakeDns) -> Option<Vec<u8>> {
    let Ok(packet) = Packet::parse(query) else {
        // Malformed: FORMERR with the id, if there is one.
        let id = u16::from_be_bytes([*query.first()?, *query.get(1)?]);
        if query.get(2).is_some_and(|b| b & 0x80 != 0) {
            return None;
        }
        return error_reply(id, RCODE::FormatError, None);
    };
    if packet.has_flags(PacketFlag::RESPONSE) {
        return None;
    }
    let id = packet.id();
    if packet.opcode() != OPCODE::StandardQuery {
        return error_reply(id, RCODE::NotImplemented, None);
    }
    let [question] = packet.questions.as_slice() else {
        return error_reply(id, RCODE::FormatError, None);
    };
    let Some(name) = plain_name(&question.qname) else {
        return error_reply(id, RCODE::Refused, Some(question.clone()));
    };
    if !dns.names.allows(&name) {
        return error_reply(id, RCODE::NameError, Some(question.clone()));
    }
    let mut reply = Packet::new_reply(id);
    reply.set_flags(PacketFlag::RECURSION_AVAILABLE);
    if packet.has_flags(PacketFlag::RECURSION_DESIRED) {
        reply.set_flags(PacketFlag::RECURSION_DESIRED);
    }
    reply.questions.push(question.clone());
    let is_a = question.qtype == QTYPE::TYPE(TYPE::A);
    let is_in = matches!(question.qclass, QCLASS::CLASS(CLASS::IN) | QCLASS::ANY);
    if is_a && is_in {
        let Some(ip) = dns.address_for(&name) else {
            return error_reply(id, RCODE::ServerFailure, Some(question.clone()));
        };
        reply.answers.push(ResourceRecord::new(
            question.qname.clone(),
            CLASS::IN,
            TTL,
            RData::A(A {
                address: u32::from(ip),
            }),
        ));
    }
    reply.build_bytes_vec().ok()
}

fn error_reply(
    id: u16,
    rcode: RCODE,
    question: Option<simple_dns::Question<'_>>,
) -> Option<Vec<u8>> {
    let mut reply = Packet::new_reply(id);
    *reply.rcode_mut() = rcode;
    reply.questions.extend(question);
    reply.build_bytes_vec().ok()
}

/// The name as lower-case text, if every label is `[A-Za-z0-9_-]` (so the whole name is
/// `[A-Za-z0-9._-]`) and there is at least one label.
fn plain_name(name: &Name<'_>) -> Option<String> {
    let labels = name.get_labels();
    if labels.is_empty() {
        return None;
    }
    let mut out = String::new();
    for label in labels {
        let bytes: &[u8] = label.as_ref();
        if bytes.is_empty()
            || !bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        {
            return None;
        }
        if !out.is_empty() {
            out.push('.');
        }
        out.extend(bytes.iter().map(|b| char::from(b.to_ascii_lowercase())));
    }
    Some(out)
}

/// Answers UDP queries forever.
pub(crate) fn serve_udp(socket: &UdpSocket, dns: &FakeDns) -> ! {
    let mut buf = [0u8; 4096];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if let Some(reply) = answer(&buf[..n], dns) {
            let _ = socket.send_to(&reply, from);
        }
    }
}

/// DNS over TCP: length-prefixed messages until the client closes or idles.
pub(crate) fn handle_tcp(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(TCP_IDLE))?;
    loop {
        let mut len = [0u8; 2];
        match stream.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut msg)?;
        let Some(reply) = answer(&msg, &shared.dns) else {
            return Ok(());
        };
        let Ok(reply_len) = u16::try_from(reply.len()) else {
            return Ok(());
        };
        let mut out = Vec::with_capacity(reply.len() + 2);
        out.extend_from_slice(&reply_len.to_be_bytes());
        out.extend_from_slice(&reply);
        stream.write_all(&out)?;
    }
}
