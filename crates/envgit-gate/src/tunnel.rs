//! `CONNECT host:port`: decide, dial, answer 200, then look at the first bytes — never at
//! how long they take to come.
//!
//! TLS is terminated ([`crate::tls`]) unless the host is under `network.passthrough`, where it
//! is spliced and recorded as uninspected once its ClientHello's SNI names the CONNECT host
//! (read from peeked bytes, left for the splice); HTTP is judged request by request
//! ([`crate::forward`]); anything else is closed, except on a loopback or private `host:port`
//! entry the policy marks `raw: true`, where raw TCP is spliced and recorded as uninspected.

use std::sync::Arc;
use std::time::Duration;

use envgit_policy::ConnectDecision;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use crate::buffered::Buffered;
use crate::canonical::Proto;
use crate::events::Recorder;
use crate::forward;
use crate::head::{self, RequestHead};
use crate::pool::Pool;
use crate::redial::redialer;
use crate::reply;
use crate::rules::{RULE_OPAQUE, RULE_SNI};
use crate::shared::Shared;
use crate::splice::splice;
use crate::tls;
use crate::upstream::{self, DialError};
use crate::upstream_tls::HANDSHAKE_TIMEOUT;
use crate::verdict;

/// How long a client may stay silent after `200` before its tunnel is closed.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(30);
/// Empty lines a client may send before its first request line (RFC 9112 §2.2 lets a server
/// skip them; Node and httparse do).
const MAX_LEADING_EMPTY_LINES: usize = 8;

pub(crate) async fn connect(
    mut client: Buffered<UnixStream>,
    req: RequestHead,
    shared: &Arc<Shared>,
) {
    let mut rec = Recorder::new(&shared.events, "CONNECT");
    let Some((host, port)) = head::parse_authority(&req.target, None) else {
        rec.status(400);
        let answer =
            reply::plain(400, "Bad Request", "envgit: CONNECT needs host:port\n").to_http1();
        let _ = client.write_all(&answer).await;
        return;
    };
    rec.target(&host, port, "");
    let what = format!("CONNECT {}", head::authority(&host, port));
    let rule = match verdict::connect(
        &shared.policy,
        shared.reserved_ports.as_deref(),
        &host,
        port,
    ) {
        ConnectDecision::Allowed { rule } => rule,
        ConnectDecision::Denied { rule, reason } => {
            refuse(&mut client, &mut rec, &what, &rule, &reason).await;
            return;
        }
    };
    let upstream = match upstream::dial(&host, port, &rule, &shared.resolve).await {
        Ok(stream) => stream,
        Err(DialError::Denied { rule, reason }) => {
            refuse(&mut client, &mut rec, &what, &rule, &reason).await;
            return;
        }
        Err(DialError::Failed(msg)) => {
            rec.decide(true, &rule);
            rec.status(502);
            let answer = reply::plain(502, "Bad Gateway", &format!("envgit: {msg}\n")).to_http1();
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
    if raw_allowed(shared, &host, port) {
        // The policy says this entry carries raw TCP (a local database, say): uninspected.
        rec.uninspected();
        splice(client, upstream, &rec).await;
        return;
    }
    match tokio::time::timeout(SNIFF_TIMEOUT, sniff(&mut client)).await {
        Ok(Sniffed::Tls) if envgit_policy::is_passthrough(&shared.policy, &host, port) => {
            // Spliced unread, but only for the host the tunnel was allowed for: a ClientHello
            // naming another (domain fronting through an allowed CDN name), or none, is
            // refused as the terminated path refuses it, before a byte of it leaves.
            let sni = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls::peek_sni(&mut client)).await;
            let sni = match sni {
                Ok(Ok(sni)) => sni,
                _ => {
                    rec.decide(false, RULE_OPAQUE);
                    return;
                }
            };
            let nameless_ok = host.parse::<std::net::IpAddr>().is_ok();
            if let Some(why) = tls::sni_refusal(sni.as_deref(), &host, nameless_ok) {
                rec.reason(&why);
                rec.decide(false, RULE_SNI);
                return;
            }
            rec.uninspected();
            splice(client, upstream, &rec).await;
        }
        Ok(Sniffed::Tls) => tls::terminate(client, upstream, &host, port, rec, shared).await,
        Ok(Sniffed::Http) => {
            drop(rec);
            let pool = Pool::new(
                Some(Ok((Box::new(upstream), false))),
                redialer(shared, &host, port, true),
            );
            let conn = forward::Conn {
                shared: Arc::clone(shared),
                host,
                port,
                forwarded_https: false,
                https: false,
                proto: Proto::Http1,
                keep_alive: true,
                pool,
            };
            forward::serve(client, conn).await;
        }
        Ok(Sniffed::Other) | Err(_) => rec.decide(false, RULE_OPAQUE),
    }
}

/// A refused CONNECT: 403 with the rule, recorded.
async fn refuse(
    client: &mut Buffered<UnixStream>,
    rec: &mut Recorder,
    what: &str,
    rule: &str,
    reason: &str,
) {
    rec.reason(reason);
    rec.decide(false, rule);
    rec.status(403);
    let _ = client
        .write_all(&reply::forbidden(what, rule, reason).to_http1())
        .await;
}

/// Raw TCP only where the policy says so for this very `host:port`.
fn raw_allowed(shared: &Shared, host: &str, port: u16) -> bool {
    envgit_policy::raw_tcp_allowed_for(&shared.policy, host, port)
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

pub(crate) async fn sniff<S>(client: &mut Buffered<S>) -> Sniffed
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
    // Empty lines first (`\r\n` or `\n`), then a method token in capitals and a space.
    let mut at = 0;
    let mut empty_lines = 0;
    let mut method_len = 0;
    loop {
        let Ok(bytes) = client.peek(at + 1).await else {
            return Sniffed::Other;
        };
        let Some(&b) = bytes.get(at) else {
            return Sniffed::Other;
        };
        at += 1;
        match b {
            b'\r' | b'\n' if method_len == 0 => {
                if b == b'\n' {
                    empty_lines += 1;
                    if empty_lines > MAX_LEADING_EMPTY_LINES {
                        return Sniffed::Other;
                    }
                }
            }
            b' ' if method_len > 0 => return Sniffed::Http,
            b'A'..=b'Z' if method_len < 24 => method_len += 1,
            _ => return Sniffed::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn sniff_bytes(bytes: &'static [u8]) -> Sniffed {
        let (mut a, b) = tokio::io::duplex(1024);
        a.write_all(bytes).await.unwrap();
        drop(a);
        sniff(&mut Buffered::new(b)).await
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
        assert_eq!(sniff_bytes(b"\r\nPOST / HTTP/1.1").await, Sniffed::Http);
        assert_eq!(sniff_bytes(b"\n\nGET /").await, Sniffed::Http);
        assert_eq!(
            sniff_bytes(b"\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\nGET /").await,
            Sniffed::Other
        );
        assert_eq!(sniff_bytes(b"GE").await, Sniffed::Other);
        assert_eq!(sniff_bytes(b"").await, Sniffed::Other);
        assert_eq!(
            sniff_bytes(b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA").await,
            Sniffed::Other
        );
    }
}
