//! Capture listeners (`0.0.0.0:P`) and forwards (`127.0.0.1:P`).
//!
//! A captured connection's local address is the fake address the DNS stub handed out; it
//! names the host. `CONNECT name:P` goes to the gate, marked `tls` for 443 and `http`
//! otherwise. Anything aimed at an address the stub did not hand out is closed — except
//! `127.0.0.1:P` on a port that is also a forward.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::time::Duration;

use super::Shared;
use super::gate;
use super::splice::{copy_all, drain, splice};

/// How long a refused client may keep sending before its connection is closed.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) fn handle_capture(client: TcpStream, shared: &Shared) -> io::Result<()> {
    let local = client.local_addr()?;
    let port = local.port();
    let ip = match local.ip() {
        IpAddr::V4(ip) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(ip) => ip,
            None => return Ok(()),
        },
    };
    if ip == Ipv4Addr::LOCALHOST
        && let Some(&target) = shared.forwards.get(&port)
    {
        return handle_forward(client, target, shared);
    }
    let Some(name) = shared.dns.name_of(ip) else {
        return Ok(()); // not a name the stub handed out: a direct IP, or 127.0.0.1
    };
    let kind = if port == 443 { "tls" } else { "http" };
    let (gate, answer) = gate::connect(shared, &format!("{name}:{port}"), kind)?;
    let mut client = client;
    if answer.status == 200 {
        client.write_all(&answer.rest)?;
        return splice(client, gate);
    }
    if kind == "http" {
        // Let the client see the gate's refusal (403 text and all).
        client.write_all(&answer.head)?;
        client.write_all(&answer.rest)?;
        let mut reader = client.try_clone()?;
        copy_all(gate, client);
        // Read what the client still sends (its request) so closing does not reset the
        // refusal away; bounded, since the client owes us nothing.
        reader.set_read_timeout(Some(DRAIN_TIMEOUT))?;
        drain(&mut reader, &mut [0u8; 4096]);
    }
    Ok(())
}

pub(crate) fn handle_forward(
    mut client: TcpStream,
    target: u16,
    shared: &Shared,
) -> io::Result<()> {
    let (gate, answer) = gate::connect(shared, &format!("127.0.0.1:{target}"), "forward")?;
    if answer.status != 200 {
        return Ok(());
    }
    client.write_all(&answer.rest)?;
    splice(client, gate)
}
