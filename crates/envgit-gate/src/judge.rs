//! Request-level judgement, after `network.allow` (DESIGN §5): the host's `l7` rule, then the
//! `irreversible` rules in order, first match deciding. When a rule needs the body (a GraphQL
//! operation, an LFS batch operation, git's pkt-line commands), a bounded prefix is read into
//! the connection's buffer without consuming it, so the request is forwarded intact if it
//! passes.

use envgit_policy::{BODY_PREFIX_MAX, Policy, RequestDecision, RequestInfo};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::conn::Prefixed;
use crate::head::RequestHead;

pub(crate) enum Verdict {
    /// Let it out; `Some(rule)` when it is irreversible and the step must be marked.
    Pass { marked: Option<String> },
    /// Refuse with this rule.
    Refuse { rule: String, summary: String },
    /// Hold until a person answers; `body_hash` (BLAKE3 of the body prefix the rule saw, hex)
    /// says exactly what is being approved.
    Ask {
        rule: String,
        summary: String,
        body_hash: String,
    },
}

pub(crate) struct Judged {
    pub(crate) verdict: Verdict,
    /// `100 Continue` was already sent to read the body: `forward` must not send another.
    pub(crate) continue_sent: bool,
}

pub(crate) async fn judge<C>(
    client: &mut Prefixed<C>,
    req: &RequestHead,
    host: &str,
    port: u16,
    origin: &str,
    policy: &Policy,
) -> Judged
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (path, query) = origin.split_once('?').unwrap_or((origin, ""));
    let mut info = RequestInfo {
        method: &req.method,
        host,
        port,
        path,
        query,
        body: None,
        body_complete: false,
    };
    let mut continue_sent = false;
    let body;
    if policy.needs_body(&info) {
        let expects_continue = req
            .header("expect")
            .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"100-continue"));
        if expects_continue {
            continue_sent = client
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_ok()
                && client.flush().await.is_ok();
        }
        body = body_prefix(client, req).await;
        if let Some((bytes, complete)) = &body {
            info.body = Some(bytes);
            info.body_complete = *complete;
        }
    }
    let verdict = match policy.decide_request(&info) {
        RequestDecision::Allow => Verdict::Pass { marked: None },
        RequestDecision::Marked { rule, .. } => Verdict::Pass { marked: Some(rule) },
        RequestDecision::Deny { rule, summary } => Verdict::Refuse { rule, summary },
        RequestDecision::Ask { rule, summary } => Verdict::Ask {
            rule,
            summary,
            body_hash: blake3::hash(info.body.unwrap_or_default())
                .to_hex()
                .to_string(),
        },
    };
    Judged {
        verdict,
        continue_sent,
    }
}

/// The first bytes of the body (de-chunked), and whether they are all of it. `None` when the
/// framing is broken (the rule then fails closed).
async fn body_prefix<C: AsyncRead + Unpin>(
    client: &mut Prefixed<C>,
    req: &RequestHead,
) -> Option<(Vec<u8>, bool)> {
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"chunked"));
    if chunked {
        return chunked_prefix(client).await;
    }
    let length: usize = match req.header("content-length") {
        Some(v) => std::str::from_utf8(v).ok()?.trim().parse().ok()?,
        None => 0,
    };
    let want = length.min(BODY_PREFIX_MAX);
    let got = client.peek(want).await.ok()?;
    let n = got.len().min(want);
    Some((got[..n].to_vec(), n == length))
}

/// Decode chunked framing from the buffered bytes, reading more as needed, without consuming.
async fn chunked_prefix<C: AsyncRead + Unpin>(client: &mut Prefixed<C>) -> Option<(Vec<u8>, bool)> {
    let mut want = 4096;
    loop {
        let raw = client.peek(want).await.ok()?.to_vec();
        match decode_chunks(&raw, BODY_PREFIX_MAX) {
            Decoded::Done(body) => return Some((body, true)),
            Decoded::Enough(body) => return Some((body, false)),
            Decoded::Broken => return None,
            Decoded::NeedMore => {
                if raw.len() < want {
                    return None; // the stream ended inside the body
                }
                if want >= BODY_PREFIX_MAX + 64 * 1024 {
                    return Some((Vec::new(), false));
                }
                want *= 2;
            }
        }
    }
}

enum Decoded {
    Done(Vec<u8>),
    Enough(Vec<u8>),
    NeedMore,
    Broken,
}

fn decode_chunks(raw: &[u8], max: usize) -> Decoded {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let Some(nl) = raw[pos..].iter().position(|&b| b == b'\n') else {
            return Decoded::NeedMore;
        };
        let line = &raw[pos..pos + nl];
        let Some(size) = std::str::from_utf8(line).ok().and_then(|l| {
            usize::from_str_radix(l.trim_end_matches('\r').split(';').next()?.trim(), 16).ok()
        }) else {
            return Decoded::Broken;
        };
        pos += nl + 1;
        if size == 0 {
            return Decoded::Done(out);
        }
        let end = pos + size;
        if raw.len() < end {
            let have = &raw[pos..];
            if out.len() + have.len() >= max {
                out.extend_from_slice(&have[..(max - out.len()).min(have.len())]);
                return Decoded::Enough(out);
            }
            return Decoded::NeedMore;
        }
        out.extend_from_slice(&raw[pos..end]);
        if out.len() >= max {
            out.truncate(max);
            return Decoded::Enough(out);
        }
        pos = end;
        match raw.get(pos..pos + 2) {
            Some(b"\r\n") => pos += 2,
            Some([b'\n', _]) => pos += 1,
            Some(_) => return Decoded::Broken,
            None => return Decoded::NeedMore,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_decode() {
        match decode_chunks(b"4\r\n0000\r\n0\r\n\r\n", 100) {
            Decoded::Done(b) => assert_eq!(b, b"0000"),
            _ => panic!("not done"),
        }
        match decode_chunks(b"3\r\nabc\r\n2\r\nde", 100) {
            Decoded::NeedMore => {}
            _ => panic!("should need more"),
        }
        match decode_chunks(b"a\r\n0123456789\r\n", 4) {
            Decoded::Enough(b) => assert_eq!(b, b"0123"),
            _ => panic!("should be enough"),
        }
        assert!(matches!(decode_chunks(b"zz\r\n", 10), Decoded::Broken));
    }
}
