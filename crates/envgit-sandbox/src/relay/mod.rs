//! The in-netns relay: the sandbox's only way out, carrying every connection to the gate.
//!
//! Runs inside the sandbox's network namespace (only `lo` up), in a process the workload
//! cannot see, with the host's filesystem (so it can connect to the gate's unix socket).
//! Threads, no fork, blocking std sockets, bounded heads, no panics.
//!
//! Listeners:
//! - the explicit HTTP proxy on `127.0.0.1:proxy_port` (`proxy`): the client's first request
//!   head gets the token header, the rest is spliced unchanged;
//! - the DNS stub on `127.0.0.1:dns_port`, UDP and TCP (`dns`): fake loopback addresses
//!   from 127.1.0.0/16 for A queries of names `network.allow` could allow (and loopback
//!   names), NXDOMAIN for every other name, never forwarding anything;
//! - capture listeners on `0.0.0.0:P` (`capture`): a connection to a fake address becomes
//!   `CONNECT name:P` to the gate;
//! - forwards on `127.0.0.1:P`: `CONNECT 127.0.0.1:P` to the gate, which dials the host's
//!   loopback (when `network.allow` lists that port).
//!
//! The wire protocol towards the gate is described in `envgit_gate`'s crate docs: every
//! connection's first request head carries `X-Envgit-Token: <token>` and
//! `X-Envgit-Capture: tls|http|forward|proxy`.

mod capture;
mod dns;
mod gate;
mod proxy;
mod splice;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Header carrying the per-run secret (must match `envgit_gate::TOKEN_HEADER`).
pub const TOKEN_HEADER: &str = "X-Envgit-Token";
/// Header naming where a connection came from (must match `envgit_gate::CAPTURE_HEADER`).
pub const CAPTURE_HEADER: &str = "X-Envgit-Capture";

/// Connections relayed at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 512;
/// Stack of the per-connection threads (buffers live on the heap).
pub(crate) const THREAD_STACK: usize = 256 * 1024;

/// Travels to the sandbox process inside its spec, hence serde.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RelayConfig {
    /// Host-side unix socket of the gate.
    pub gate_socket: PathBuf,
    /// Per-run secret, sent on every connection to the gate as `X-Envgit-Token`.
    pub token: String,
    /// Explicit HTTP proxy listener on 127.0.0.1 (envgit uses 3128).
    pub proxy_port: u16,
    /// UDP and TCP DNS stub on 127.0.0.1 (53 in production).
    pub dns_port: u16,
    /// Listeners on 0.0.0.0:P for clients that ignore proxy variables (80, 443).
    pub capture_ports: Vec<u16>,
    /// For each loopback `host:P` in `network.allow`: listen on 127.0.0.1:P and carry to the
    /// host's 127.0.0.1:P through the gate (see `envgit_policy::loopback_forwards`).
    pub forwards: Vec<u16>,
    /// The `network.allow` entries as written (`host`, `host:port`, `*.domain[:port]`): the
    /// DNS stub answers only names one of them could allow, and loopback names; any other
    /// name gets NXDOMAIN, as on a network without that name.
    #[serde(default)]
    pub allow_names: Vec<String>,
}

/// Binds every listener, writes one byte to `ready`, then serves forever.
pub fn serve(cfg: RelayConfig, ready: OwnedFd) -> io::Result<Infallible> {
    let relay = Relay::bind(cfg)?;
    let mut ready = std::fs::File::from(ready);
    ready.write_all(&[1])?;
    drop(ready);
    relay.run()
}

/// What the listeners share.
pub(crate) struct Shared {
    pub(crate) gate_socket: PathBuf,
    pub(crate) token: String,
    pub(crate) dns: dns::FakeDns,
    /// Listen port → host port, for forwards and for loopback connections on capture ports.
    pub(crate) forwards: BTreeMap<u16, u16>,
    active: AtomicUsize,
}

/// Counts a connection against [`MAX_CONNECTIONS`] while it lives.
pub(crate) struct Slot<'a>(&'a AtomicUsize);

impl Shared {
    fn slot(&self) -> Option<Slot<'_>> {
        let before = self.active.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(&self.active);
        (before < MAX_CONNECTIONS).then_some(slot)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Every listener bound, not serving yet.
pub struct Relay {
    shared: Arc<Shared>,
    proxy: TcpListener,
    dns_udp: UdpSocket,
    dns_tcp: TcpListener,
    captures: Vec<TcpListener>,
    forwards: Vec<(TcpListener, u16)>,
}

impl Relay {
    pub fn bind(cfg: RelayConfig) -> io::Result<Relay> {
        let pairs: Vec<(u16, u16)> = cfg.forwards.iter().map(|&p| (p, p)).collect();
        Relay::bind_with(cfg, &pairs)
    }

    /// Like [`Relay::bind`], with forwards as (listen port, host port) pairs; `cfg.forwards`
    /// is ignored. Port 0 anywhere means "any free port" (tests).
    pub(crate) fn bind_with(cfg: RelayConfig, forwards: &[(u16, u16)]) -> io::Result<Relay> {
        let loopback = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let proxy = TcpListener::bind(loopback(cfg.proxy_port))?;
        let (dns_udp, dns_tcp) = bind_dns(cfg.dns_port)?;
        let mut captures = Vec::new();
        for &port in &cfg.capture_ports {
            captures.push(TcpListener::bind(SocketAddr::from((
                Ipv4Addr::UNSPECIFIED,
                port,
            )))?);
        }
        let capture_ports: Vec<u16> = captures
            .iter()
            .filter_map(|l| l.local_addr().ok().map(|a| a.port()))
            .collect();
        let mut forward_map = BTreeMap::new();
        let mut forward_listeners = Vec::new();
        for &(listen, target) in forwards {
            if listen != 0 && (listen == cfg.proxy_port || listen == cfg.dns_port) {
                continue; // envgit's own listeners win: never forwarded
            }
            if listen != 0 && capture_ports.contains(&listen) {
                // The capture listener on 0.0.0.0:P also takes 127.0.0.1:P and forwards it.
                forward_map.insert(listen, target);
                continue;
            }
            let listener = TcpListener::bind(loopback(listen))?;
            forward_map.insert(listener.local_addr()?.port(), target);
            forward_listeners.push((listener, target));
        }
        Ok(Relay {
            shared: Arc::new(Shared {
                gate_socket: cfg.gate_socket,
                token: cfg.token,
                dns: dns::FakeDns::new(&cfg.allow_names),
                forwards: forward_map,
                active: AtomicUsize::new(0),
            }),
            proxy,
            dns_udp,
            dns_tcp,
            captures,
            forwards: forward_listeners,
        })
    }

    pub fn proxy_port(&self) -> io::Result<u16> {
        Ok(self.proxy.local_addr()?.port())
    }

    pub fn dns_port(&self) -> io::Result<u16> {
        Ok(self.dns_udp.local_addr()?.port())
    }

    pub fn capture_ports(&self) -> io::Result<Vec<u16>> {
        self.captures
            .iter()
            .map(|l| Ok(l.local_addr()?.port()))
            .collect()
    }

    /// (listen port, host port) of every forward with its own listener.
    pub fn forward_ports(&self) -> io::Result<Vec<(u16, u16)>> {
        self.forwards
            .iter()
            .map(|(l, target)| Ok((l.local_addr()?.port(), *target)))
            .collect()
    }

    /// Serves forever: one accept thread for every TCP listener, the UDP DNS loop on this
    /// thread.
    pub fn run(self) -> io::Result<Infallible> {
        let Relay {
            shared,
            proxy,
            dns_udp,
            dns_tcp,
            captures,
            forwards,
        } = self;
        let mut listeners: Vec<(TcpListener, Handler)> = vec![
            (proxy, Arc::new(proxy::handle)),
            (dns_tcp, Arc::new(dns::handle_tcp)),
        ];
        for listener in captures {
            listeners.push((listener, Arc::new(capture::handle_capture)));
        }
        for (listener, target) in forwards {
            listeners.push((
                listener,
                Arc::new(move |stream, shared: &Shared| {
                    capture::handle_forward(stream, target, shared)
                }),
            ));
        }
        accept_loop(listeners, &shared)?;
        dns::serve_udp(&dns_udp, &shared.dns)
    }
}

fn bind_dns(port: u16) -> io::Result<(UdpSocket, TcpListener)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // With port 0 (tests) UDP picks a port and TCP must get the same number; retry a little.
    let mut last = None;
    for _ in 0..8 {
        let udp = UdpSocket::bind(addr)?;
        let got = udp.local_addr()?;
        match TcpListener::bind(got) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if port == 0 => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("cannot bind the DNS stub")))
}

/// What a connection accepted on one listener is handed to, on a thread of its own.
type Handler = Arc<dyn Fn(TcpStream, &Shared) -> io::Result<()> + Send + Sync>;

/// Accepts on every listener from one thread (a thread each cost the sandbox's start ~50 µs
/// of CPU apiece); each connection is handled on a thread of its own.
fn accept_loop(listeners: Vec<(TcpListener, Handler)>, shared: &Arc<Shared>) -> io::Result<()> {
    // Non-blocking: a connection reset between the poll and the accept must not stall the
    // others. What accept returns blocks as before.
    for (listener, _) in &listeners {
        listener.set_nonblocking(true)?;
    }
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("envgit-relay-accept".into())
        .spawn(move || {
            use rustix::event::{PollFd, PollFlags, poll};
            loop {
                let mut fds: Vec<PollFd<'_>> = listeners
                    .iter()
                    .map(|(l, _)| PollFd::new(l, PollFlags::IN))
                    .collect();
                if poll(&mut fds, None).is_err() {
                    // EINTR; or ENOMEM: back off instead of spinning.
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
                drop(fds);
                for ((listener, handle), _) in listeners.iter().zip(ready).filter(|(_, r)| *r) {
                    accept_ready(listener, handle, &shared);
                }
            }
        })?;
    Ok(())
}

/// Takes every connection waiting on `listener`, each to a thread running `handle`.
fn accept_ready(listener: &TcpListener, handle: &Handler, shared: &Arc<Shared>) {
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(_) => {
                // Out of descriptors and the like: back off instead of spinning.
                std::thread::sleep(Duration::from_millis(50));
                return;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        let shared = Arc::clone(shared);
        let handle = Arc::clone(handle);
        // A failed spawn drops the stream, which closes it.
        let _ = std::thread::Builder::new()
            .name("envgit-relay-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                if let Some(_slot) = shared.slot() {
                    let _ = stream.set_nodelay(true);
                    let _ = handle(stream, &shared);
                }
            });
    }
}
