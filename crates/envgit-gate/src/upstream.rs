//! Reaching the upstream: resolve once on the host, vet every address against the entry that
//! allowed the connection, dial a vetted address (never resolving again, so DNS rebinding
//! cannot swap the address after the check).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use envgit_policy::ConnectDecision;
use tokio::net::TcpStream;

use crate::resolve::{self, Resolve};

const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) enum DialError {
    /// Every address the name resolved to was refused (`network.private`).
    Denied { rule: String, reason: String },
    /// Resolution or connection failed.
    Failed(String),
}

/// Connects to `host:port`, which `allowed_rule` allowed (at the address a `--resolve` entry
/// names, if one does).
pub(crate) async fn dial(
    host: &str,
    port: u16,
    allowed_rule: &str,
    resolve: &[Resolve],
) -> Result<TcpStream, DialError> {
    if let Some(r) = resolve::find(resolve, host, port) {
        return match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(r.to)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                Ok(stream)
            }
            Ok(Err(e)) => Err(DialError::Failed(format!(
                "cannot connect to {} (--resolve {host}:{port}): {e}",
                r.to
            ))),
            Err(_) => Err(DialError::Failed(format!(
                "connecting to {} timed out",
                r.to
            ))),
        };
    }
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await
            {
                Ok(Ok(found)) => found.collect(),
                Ok(Err(e)) => return Err(DialError::Failed(format!("cannot resolve {host}: {e}"))),
                Err(_) => return Err(DialError::Failed(format!("resolving {host} timed out"))),
            }
        }
    };
    let mut refusal = None;
    let mut tried = false;
    let mut last_error = format!("{host} has no address");
    for addr in addrs {
        match envgit_policy::vet_address(allowed_rule, addr.ip()) {
            ConnectDecision::Allowed { .. } => {}
            ConnectDecision::Denied { rule, .. } => {
                let reason = envgit_policy::resolved_private_reason(host, port, addr.ip());
                refusal.get_or_insert(DialError::Denied { rule, reason });
                continue;
            }
        }
        tried = true;
        match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last_error = format!("cannot connect to {addr}: {e}"),
            Err(_) => last_error = format!("connecting to {addr} timed out"),
        }
    }
    match refusal {
        Some(denied) if !tried => Err(denied),
        _ => Err(DialError::Failed(last_error)),
    }
}
