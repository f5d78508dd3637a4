//! The unix listener: accept, read the first request head, check the token, dispatch to the
//! CONNECT tunnel or to plain-HTTP forwarding.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Notify, Semaphore};

use crate::buffered::{Buffered, HeadError};
use crate::canonical::Proto;
use crate::events::Recorder;
use crate::head::{self, HEAD_TIMEOUT, MAX_HEAD, RequestHead};
use crate::pool::Pool;
use crate::redial::redialer;
use crate::reply;
use crate::rules::RULE_TOKEN;
use crate::shared::Shared;
use crate::{TOKEN_HEADER, forward, tunnel};

/// Connections handled at once; more are closed at accept.
const MAX_CONNECTIONS: usize = 1024;

pub(crate) async fn serve(listener: UnixListener, shared: Arc<Shared>, shutdown: Arc<Notify>) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            () = shutdown.notified() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Ok(permit) = Arc::clone(&limit).try_acquire_owned() else {
                        continue; // over the limit: the stream is dropped, i.e. closed
                    };
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        handle(stream, &shared).await;
                        drop(permit);
                    });
                }
                // Out of descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
}

async fn handle(stream: UnixStream, shared: &Arc<Shared>) {
    let mut client = Buffered::new(stream);
    let head = match tokio::time::timeout(HEAD_TIMEOUT, client.read_head(MAX_HEAD)).await {
        Ok(Ok(head)) => head,
        Ok(Err(HeadError::TooLarge)) => {
            let answer = reply::plain(
                431,
                "Request Header Fields Too Large",
                "envgit: head too large\n",
            )
            .to_http1();
            let _ = client.write_all(&answer).await;
            return;
        }
        _ => return,
    };
    let Some(req) = RequestHead::parse(&head) else {
        let _ = client
            .write_all(
                &reply::plain(400, "Bad Request", "envgit: malformed request head\n").to_http1(),
            )
            .await;
        return;
    };
    if !token_ok(&req, &shared.token) {
        let mut rec = Recorder::new(&shared.events, &req.method);
        if let Some((host, port)) = head::parse_authority(&req.target, None)
            .or_else(|| head::parse_absolute(&req.target).map(|(h, p, _)| (h, p)))
        {
            rec.target(&host, port, "");
        }
        rec.decide(false, RULE_TOKEN);
        rec.status(403);
        let answer = reply::forbidden(
            "a connection without the run's token",
            RULE_TOKEN,
            "every connection to the gate must come through envgit's relay",
        )
        .to_http1();
        let _ = client.write_all(&answer).await;
        return;
    }
    if req.method == "CONNECT" {
        tunnel::connect(client, req, shared).await;
    } else {
        proxy(client, head, &req, shared).await;
    }
}

/// An explicit-proxy connection (`GET http://host[:port]/path`): bound to the host its first
/// request names, every request on it judged like any other and required to name that host;
/// the upstream is dialled only once a request passed.
async fn proxy(
    mut client: Buffered<UnixStream>,
    head: Vec<u8>,
    req: &RequestHead,
    shared: &Arc<Shared>,
) {
    let Some((host, port, _)) = head::parse_absolute(&req.target) else {
        let mut rec = Recorder::new(&shared.events, &req.method);
        rec.status(400);
        let body = "envgit: expected `CONNECT host:port` or an absolute `http://` URL\n";
        let _ = client
            .write_all(&reply::plain(400, "Bad Request", body).to_http1())
            .await;
        return;
    };
    // hyper reads the connection from its first byte: the head goes back in front.
    client.unread(&head);
    let conn = forward::Conn {
        shared: Arc::clone(shared),
        pool: Pool::new(None, redialer(shared, &host, port, true)),
        host,
        port,
        forwarded_https: false,
        https: false,
        proto: Proto::Http1,
        keep_alive: false,
    };
    forward::serve(client, conn).await;
}

/// Exactly one token header, equal to the run's token (compared in constant time).
fn token_ok(req: &RequestHead, token: &str) -> bool {
    if req.count(TOKEN_HEADER) != 1 {
        return false;
    }
    let Some(given) = req.header(TOKEN_HEADER) else {
        return false;
    };
    let want = token.as_bytes();
    if given.len() != want.len() {
        return false;
    }
    given
        .iter()
        .zip(want)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}
