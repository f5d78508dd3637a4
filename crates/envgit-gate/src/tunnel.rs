//! `CONNECT host:port`: decide, dial, answer 200, then look at the first bytes.
//!
//! TLS is terminated ([`crate::tls`]) unless the host is under `network.passthrough`, where it
//! is spliced and recorded as uninspected.

use std::sync::Arc;
use std::time::Duration;

use envgit_policy::ConnectDecision;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use crate::conn::Prefixed;
use crate::decide::{self, RULE_OPAQUE};
use crate::events::Recorder;
use crate::head::{self, RequestHead};
use crate::http;
use crate::listener::Shared;
use crate::splice::splice;
use crate::tls;
use crate::upstream::{self, DialError};

/// How long a client may stay silent after `200` before its tunnel is closed.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(30);
/// On a raw-TCP loopback entry the server may speak first: give the client this long to show
/// it speaks HTTP, then splice.
const RAW_SNIFF_WINDOW: Duration = Duration::from_millis(300);

pub(crate) async fn connect(
    mut client: Prefixed<UnixStream>,
    req: RequestHead,
    shared: &Arc<Shared>,
) {
    let mut rec = Recorder::new(&shared.events, "CONNECT");
    let Some((host, port)) = head::parse_authority(&req.target, None) else {
        rec.status(400);
        let answer =
            decide::plain(400, "Bad Request", "envgit: CONNECT needs host:port\n").to_http1();
        let _ = client.write_all(&answer).await;
        return;
    };
    rec.target(&host, port, "");
    let what = format!("CONNECT {}", head::authority(&host, port));
    let rule = match decide::connect(&shared.policy, &host, port) {
        ConnectDecision::Allowed { rule } => rule,
        ConnectDecision::Denied { rule, reason } => {
            http::refuse(&mut client, &mut rec, &what, &rule, &reason).await;
            return;
        }
    };
    let upstream = match upstream::dial(&host, port, &rule, &shared.resolve).await {
        Ok(stream) => stream,
        Err(DialError::Denied { rule, reason }) => {
            http::refuse(&mut client, &mut rec, &what, &rule, &reason).await;
            return;
        }
        Err(DialError::Failed(msg)) => {
            rec.decide(true, &rule);
            rec.status(502);
            let answer = decide::plain(502, "Bad Gateway", &format!("envgit: {msg}\n")).to_http1();
            let _ = client.write_all(&answer).await;
            return;
        }
    };
    rec.decide(true, &rule);
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    rec.status(200);
    if envgit_policy::raw_tcp_allowed(&rule) {
        // An explicit loopback host:port: HTTP on it is judged per request like any other;
        // anything else (a database, a server that speaks first) is raw TCP, uninspected.
        match tokio::time::timeout(RAW_SNIFF_WINDOW, sniff(&mut client)).await {
            Ok(Sniffed::Http) => {
                drop(rec);
                http::bound(client, upstream, &host, port, shared, false).await;
            }
            _ => {
                rec.uninspected();
                splice(client, upstream, &rec).await;
            }
        }
        return;
    }
    match tokio::time::timeout(SNIFF_TIMEOUT, sniff(&mut client)).await {
        Ok(Sniffed::Tls) if envgit_policy::is_passthrough(&shared.policy, &host, port) => {
            rec.uninspected();
            splice(client, upstream, &rec).await;
        }
        Ok(Sniffed::Tls) => tls::terminate(client, upstream, &host, port, rec, shared).await,
        Ok(Sniffed::Http) => {
            drop(rec);
            http::bound(client, upstream, &host, port, shared, false).await;
        }
        Ok(Sniffed::Other) | Err(_) => rec.decide(false, RULE_OPAQUE),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sniffed {
    /// A TLS handshake record (`16 03 0x`).
    Tls,
    /// An HTTP/1 request line (`TOKEN ` in capitals).
    Http,
    /// Anything else (SSH, raw protocols) or nothing at all.
    Other,
}

pub(crate) async fn sniff<S>(client: &mut Prefixed<S>) -> Sniffed
where
    S: tokio::io::AsyncRead + Unpin,
{
    let Ok(first) = client.peek(3).await else {
        return Sniffed::Other;
    };
    if first.len() < 3 {
        return Sniffed::Other;
    }
    if first[0] == 0x16 {
        return if first[1] == 0x03 && first[2] <= 0x04 {
            Sniffed::Tls
        } else {
            Sniffed::Other
        };
    }
    for n in 1..=24 {
        let Ok(bytes) = client.peek(n).await else {
            return Sniffed::Other;
        };
        let Some(&b) = bytes.get(n - 1) else {
            return Sniffed::Other;
        };
        match b {
            b' ' if n > 1 => return Sniffed::Http,
            b'A'..=b'Z' => {}
            _ => return Sniffed::Other,
        }
    }
    Sniffed::Other
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn sniff_bytes(bytes: &'static [u8]) -> Sniffed {
        let (mut a, b) = tokio::io::duplex(1024);
        a.write_all(bytes).await.unwrap();
        drop(a);
        sniff(&mut Prefixed::new(b)).await
    }

    #[tokio::test]
    async fn first_bytes() {
        assert_eq!(sniff_bytes(b"\x16\x03\x01\x02\x00").await, Sniffed::Tls);
        assert_eq!(sniff_bytes(b"GET / HTTP/1.1\r\n").await, Sniffed::Http);
        assert_eq!(
            sniff_bytes(b"PROPFIND /x HTTP/1.1\r\n").await,
            Sniffed::Http
        );
        assert_eq!(
            sniff_bytes(b"SSH-2.0-OpenSSH_9.6\r\n").await,
            Sniffed::Other
        );
        assert_eq!(sniff_bytes(b"\x16\x01\x00").await, Sniffed::Other);
        assert_eq!(sniff_bytes(b" GET").await, Sniffed::Other);
        assert_eq!(sniff_bytes(b"GE").await, Sniffed::Other);
        assert_eq!(sniff_bytes(b"").await, Sniffed::Other);
        assert_eq!(
            sniff_bytes(b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").await,
            Sniffed::Other
        );
    }
}
