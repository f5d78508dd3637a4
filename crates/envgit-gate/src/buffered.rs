//! A stream with a read buffer in front ([`Buffered`]): the first request head is read into
//! the buffer, the first bytes of a tunnel are peeked at there, and whatever came after them
//! is served first by `AsyncRead`, so the stream can be handed on intact (to a splice, to the
//! TLS acceptor, or to hyper with the head put back).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// `inner`, with `buf[pos..]` read from it and not yet consumed.
pub(crate) struct Buffered<S> {
    inner: S,
    buf: Vec<u8>,
    pos: usize,
}

#[derive(Debug)]
pub(crate) enum HeadError {
    /// The peer closed before sending a byte.
    Closed,
    /// More than the limit without the blank line that ends a head.
    TooLarge,
    /// The stream failed or ended in the middle of a head.
    Broken,
}

impl<S: AsyncRead + Unpin> Buffered<S> {
    pub(crate) fn new(inner: S) -> Buffered<S> {
        Buffered {
            inner,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Bytes read from the stream but not consumed yet.
    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Puts `bytes` back in front of what is buffered, to be read again.
    pub(crate) fn unread(&mut self, bytes: &[u8]) {
        let mut buf = bytes.to_vec();
        buf.extend_from_slice(self.buffered());
        self.buf = buf;
        self.pos = 0;
    }

    /// Reads more into the buffer; `Ok(0)` at end of stream.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        let mut chunk = [0u8; 8192];
        let n = self.inner.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Reads until at least `n` bytes are buffered or the stream ends; returns what is
    /// buffered (maybe fewer than `n` at end of stream).
    pub(crate) async fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        while self.buffered().len() < n {
            if self.fill().await? == 0 {
                break;
            }
        }
        Ok(self.buffered())
    }

    /// One head, up to and including the blank line (`\r\n\r\n`), consumed from the buffer.
    pub(crate) async fn read_head(&mut self, limit: usize) -> Result<Vec<u8>, HeadError> {
        let mut searched: usize = 0;
        loop {
            let avail = self.buffered();
            if let Some(i) = find(&avail[searched.saturating_sub(3)..], b"\r\n\r\n") {
                let end = searched.saturating_sub(3) + i + 4;
                let head = avail[..end].to_vec();
                self.pos += end;
                return Ok(head);
            }
            searched = avail.len();
            if searched >= limit {
                return Err(HeadError::TooLarge);
            }
            match self.fill().await {
                Ok(0) if searched == 0 => return Err(HeadError::Closed),
                Ok(0) | Err(_) => return Err(HeadError::Broken),
                Ok(_) => {}
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl<S: AsyncRead + Unpin> AsyncRead for Buffered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.pos < this.buf.len() {
            let n = (this.buf.len() - this.pos).min(out.remaining());
            out.put_slice(&this.buf[this.pos..this.pos + n]);
            this.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, out)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Buffered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn head_then_rest_in_order() {
        let (mut a, b) = tokio::io::duplex(64);
        tokio::spawn(async move {
            for part in [
                &b"GET / HTTP/1.1\r"[..],
                b"\nHost: x\r\n\r",
                b"\nbody",
                b"more",
            ] {
                a.write_all(part).await.unwrap();
            }
        });
        let mut p = Buffered::new(b);
        let head = p.read_head(1024).await.unwrap();
        assert_eq!(head, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut rest = Vec::new();
        p.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"bodymore");
    }

    #[tokio::test]
    async fn head_limit_and_eof() {
        let (mut a, b) = tokio::io::duplex(64);
        tokio::spawn(async move {
            a.write_all(&[b'x'; 300]).await.unwrap();
        });
        let mut p = Buffered::new(b);
        assert!(matches!(p.read_head(100).await, Err(HeadError::TooLarge)));
        let (a, b) = tokio::io::duplex(64);
        drop(a);
        assert!(matches!(
            Buffered::new(b).read_head(100).await,
            Err(HeadError::Closed)
        ));
    }
}
