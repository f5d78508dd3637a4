//! Request and response bodies on their way through: the bounded prefix a rule reads (as soon
//! as it is there or the body ends, under a deadline), the whole body an approval's identity
//! hashes (capped), draining what a refused client is still sending, and the byte counting
//! that feeds the step's record.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::events::Recorder;

pub(crate) type Out = BoxBody<Bytes, hyper::Error>;

/// How long a client may take to send the part of a body a rule reads.
pub(crate) const BODY_DEADLINE: Duration = Duration::from_secs(60);
/// The most an approval's identity reads of a body it hashes whole (held in the gate's
/// memory, outside the sandbox); a longer body under such a rule is refused.
pub(crate) const WHOLE_BODY_MAX: usize = 64 << 20;
/// How many bodies this process holds for judgement at once, for every gate and connection in
/// it: that memory is the host's, outside the sandbox's memory limit, and a step may open
/// hundreds of requests. The first MiB a rule reads of a body (and its decoded copy as much
/// again) is held in one of [`PREFIXES_AT_ONCE`] turns; a whole body ([`WHOLE_BODY_MAX`] and its
/// decoded copy) in one of [`WHOLE_BODIES_AT_ONCE`]. A request past them waits its turn (within
/// [`BODY_DEADLINE`]); a turn lasts until the body has gone upstream or been dropped. A request
/// takes its prefix turn before its whole one, and nothing holding a whole turn waits for
/// another, so no two requests wait for each other.
const PREFIXES_AT_ONCE: usize = 64;
const WHOLE_BODIES_AT_ONCE: usize = 2;
static PREFIXES: Semaphore = Semaphore::const_new(PREFIXES_AT_ONCE);
static WHOLE_BODIES: Semaphore = Semaphore::const_new(WHOLE_BODIES_AT_ONCE);

/// A turn to hold a body for judgement.
type Turn = SemaphorePermit<'static>;

/// How much of a body a read holds, and so which turn it takes.
#[derive(Clone, Copy)]
pub(crate) enum Hold {
    /// The first MiB a rule reads.
    Prefix,
    /// The whole body, up to [`WHOLE_BODY_MAX`].
    Whole,
}

/// The turns a read holds, kept with its bytes until they have gone upstream.
#[derive(Default)]
pub(crate) struct Turns {
    prefix: Option<Turn>,
    whole: Option<Turn>,
}

impl Turns {
    fn any(&self) -> bool {
        self.prefix.is_some() || self.whole.is_some()
    }
}

/// Waits for a turn to hold a body as `hold` says, up to `deadline`.
async fn take_turn(hold: Hold, deadline: Duration) -> Result<Turn, BodyError> {
    let turns = match hold {
        Hold::Prefix => &PREFIXES,
        Hold::Whole => &WHOLE_BODIES,
    };
    match tokio::time::timeout(deadline, turns.acquire()).await {
        Ok(Ok(turn)) => Ok(turn),
        // Never closed; waiting out the deadline is the busy case.
        Ok(Err(_)) | Err(_) => Err(BodyError::Busy),
    }
}

/// What is read and dropped of a refused request's body so the client sees the refusal
/// (closing on unread input makes the kernel reset the connection, losing the answer).
const DRAIN_MAX: u64 = 64 << 20;
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

pub(crate) fn full(bytes: impl Into<Bytes>) -> Out {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// Why a body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// The framing broke or the client went away.
    Broken,
    /// The deadline passed first.
    TimedOut,
    /// Longer than the cap.
    TooLarge,
    /// No turn to hold it came within the deadline: other requests held theirs.
    Busy,
}

/// What was read of a body.
pub(crate) struct Read {
    pub(crate) bytes: Vec<u8>,
    /// `bytes` is all of it.
    pub(crate) ended: bool,
    /// Held with `bytes` until they are sent.
    pub(crate) turns: Turns,
}

impl Read {
    /// Nothing read yet; `ended` when the body has none.
    pub(crate) fn empty(ended: bool) -> Read {
        Read {
            bytes: Vec::new(),
            ended,
            turns: Turns::default(),
        }
    }
}

/// Reads until at least `want` bytes are there or the body ends; the bytes may run past
/// `want` by the end of the last frame (nothing read is lost: it goes upstream first).
pub(crate) async fn read_at_least(
    body: &mut Incoming,
    mut have: Read,
    want: usize,
    deadline: Duration,
) -> Result<Read, BodyError> {
    let reading = async {
        while !have.ended && have.bytes.len() < want {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        have.bytes.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) => return Err(BodyError::Broken),
                None => have.ended = true,
            }
        }
        Ok(())
    };
    match tokio::time::timeout(deadline, reading).await {
        Ok(Ok(())) => Ok(have),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(BodyError::TimedOut),
    }
}

/// Reads the whole body (after what is already `have`) in a turn to hold it, refusing past
/// [`WHOLE_BODY_MAX`].
pub(crate) async fn read_whole(
    body: &mut Incoming,
    have: Read,
    deadline: Duration,
) -> Result<Read, BodyError> {
    let read = read_held(body, have, WHOLE_BODY_MAX + 1, deadline, Hold::Whole).await?;
    if !read.ended || read.bytes.len() > WHOLE_BODY_MAX {
        return Err(BodyError::TooLarge);
    }
    Ok(read)
}

/// [`read_at_least`] in a turn to hold what it reads as `hold` says, which the read keeps.
pub(crate) async fn read_held(
    body: &mut Incoming,
    mut have: Read,
    want: usize,
    deadline: Duration,
    hold: Hold,
) -> Result<Read, BodyError> {
    if !have.ended && have.bytes.len() < want {
        let slot = match hold {
            Hold::Prefix => &mut have.turns.prefix,
            Hold::Whole => &mut have.turns.whole,
        };
        if slot.is_none() {
            *slot = Some(take_turn(hold, deadline).await?);
        }
    }
    read_at_least(body, have, want, deadline).await
}

/// Reads and drops the rest of a refused request's body, within bounds.
pub(crate) async fn drain(body: &mut Incoming) {
    let draining = async {
        let mut n: u64 = 0;
        while n < DRAIN_MAX {
            match body.frame().await {
                Some(Ok(frame)) => {
                    n += frame.data_ref().map_or(0, |d| d.len() as u64);
                }
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_DEADLINE, draining).await;
}

/// `body`, holding `permit` until it is sent or dropped.
pub(crate) fn holding(body: Out, permit: tokio::sync::OwnedSemaphorePermit) -> Out {
    Holding {
        body,
        _permit: permit,
    }
    .boxed()
}

/// A body and what it holds while it lives. Its size is the body's: an answer with a known
/// length keeps its `Content-Length` (a combinator such as `map_frame` forgets it, and HTTP/1
/// answers went out chunked).
struct Holding {
    body: Out,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Body for Holding {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The body to send upstream: what was read for the judgement, then (unless it ended) the
/// rest as it arrives, counted into `count`.
pub(crate) fn onward(read: Read, rest: Incoming, count: Arc<AtomicU64>) -> Out {
    count.fetch_add(read.bytes.len() as u64, Ordering::Relaxed);
    let Read {
        bytes,
        ended,
        turns,
    } = read;
    if ended && !turns.any() {
        return full(bytes);
    }
    PrefixThen {
        prefix: (!bytes.is_empty()).then(|| Bytes::from(bytes)),
        rest: (!ended).then_some(Counted {
            inner: rest,
            count,
            rec: None,
        }),
        _turns: turns,
    }
    .boxed()
}

/// A response body on its way back, counted; the request's event is recorded when it ends
/// (the recorder is dropped with it).
pub(crate) fn counted_response(inner: Incoming, rec: Recorder) -> Out {
    Counted {
        count: Arc::clone(&rec.bytes_in),
        inner,
        rec: Some(rec),
    }
    .boxed()
}

/// The prefix read for judgement, then the rest of the client's body (none when the prefix is
/// all of it), its data only; the read's turns are kept until this is dropped.
struct PrefixThen {
    prefix: Option<Bytes>,
    rest: Option<Counted>,
    _turns: Turns,
}

impl Body for PrefixThen {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        let Some(rest) = self.rest.as_mut() else {
            return Poll::Ready(None);
        };
        // Trailer fields are not passed on: no rule reads them, and a server that takes them
        // as headers (a method override, a credential) would act on what was never judged.
        loop {
            match Pin::new(&mut *rest).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) if !frame.is_data() => continue,
                polled => return polled,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    /// Exact when the client framed its body by length, so the upstream leg gets a
    /// `Content-Length` of the same value.
    fn size_hint(&self) -> SizeHint {
        let have = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + have);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + have);
        }
        hint
    }
}

/// A body passing through, its data bytes added to `count`.
struct Counted {
    inner: Incoming,
    count: Arc<AtomicU64>,
    rec: Option<Recorder>,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.count.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        if let Poll::Ready(None) = &polled {
            // The event is complete: record it now, not when hyper drops the body.
            self.rec.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The first bytes of a body as a person can read them: printable ASCII kept, everything
/// else escaped (`\n`, `\x00`), cut at `max` characters.
pub(crate) fn preview(bytes: &[u8], max: usize) -> String {
    let mut out = String::new();
    for &b in bytes {
        if out.len() >= max {
            out.push('…');
            break;
        }
        match b {
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            b' '..=b'~' => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_escape_control_bytes() {
        assert_eq!(preview(b"a\nb\x00\x1b[2J", 100), "a\\nb\\x00\\x1b[2J");
        assert_eq!(preview(b"abcdef", 3), "abc…");
    }
}
