//! Starts the relay from its spec (kept apart so the relay module stays independent of how the
//! sandbox process is organised).

use std::os::fd::OwnedFd;

use crate::relay::{RelayConfig, serve as relay_serve};
use crate::spec::RelaySpec;

pub fn serve(r: &RelaySpec, ready: OwnedFd) -> std::io::Error {
    let cfg = RelayConfig {
        gate_socket: r.gate_socket.clone(),
        token: r.token.clone(),
        proxy_port: r.proxy_port,
        dns_port: r.dns_port,
        capture_ports: r.capture_ports.clone(),
        forwards: r.forwards.clone(),
    };
    match relay_serve(cfg, ready) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}
