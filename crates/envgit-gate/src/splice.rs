//! Copying both ways between two streams, counting bytes into a [`Recorder`].

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::events::Recorder;

const CHUNK: usize = 64 * 1024;

/// Splices `client` and `upstream` until both directions end. An end of stream on one side is
/// passed on as a half-close; an error ends both directions, except that the upstream refusing
/// more of the client's bytes only ends that direction (see [`copy_draining`]) so the reply
/// still arrives whole.
pub(crate) async fn splice<C, U>(client: C, upstream: U, rec: &Recorder)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_r, mut client_w) = tokio::io::split(client);
    let (mut up_r, mut up_w) = tokio::io::split(upstream);
    let out = copy_draining(&mut client_r, &mut up_w, |n| rec.add_out(n));
    let back = copy(&mut up_r, &mut client_w, |n| rec.add_in(n));
    tokio::pin!(out, back);
    tokio::select! {
        r = &mut out => if r.is_ok() { let _ = back.await; },
        r = &mut back => if r.is_ok() { let _ = out.await; },
    }
}

/// Copies until end of stream, then shuts the writer down.
pub(crate) async fn copy<R, W>(r: &mut R, w: &mut W, count: impl Fn(usize)) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    copy_until(r, w, count, false).await
}

/// [`copy`] for the client's side: when the writer stops accepting (a server that closed after
/// its reply while the client was still sending), the rest of the input is read and dropped.
/// Closing a socket with unread input makes the kernel send a reset, and a reset can destroy
/// the reply the client has not read yet.
async fn copy_draining<R, W>(r: &mut R, w: &mut W, count: impl Fn(usize)) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    copy_until(r, w, count, true).await
}

async fn copy_until<R, W>(
    r: &mut R,
    w: &mut W,
    count: impl Fn(usize),
    drain_on_write_error: bool,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            let _ = w.shutdown().await;
            return Ok(());
        }
        if let Err(e) = w.write_all(&buf[..n]).await {
            if !drain_on_write_error {
                return Err(e);
            }
            let _ = w.shutdown().await;
            while r.read(&mut buf).await? > 0 {}
            return Ok(());
        }
        count(n);
    }
}
