//! Talking to the gate: open a unix connection, send a `CONNECT` head with the token, read
//! the answer's head.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::{CAPTURE_HEADER, Shared, TOKEN_HEADER};

/// Upper bound of a request or response head the relay reads.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// How long the gate may take to answer a CONNECT (it may be waiting on a person, later).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// The gate's answer to a CONNECT.
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// The whole response head, blank line included.
    pub(crate) head: Vec<u8>,
    /// Bytes read after the head.
    pub(crate) rest: Vec<u8>,
}

/// Sends `CONNECT authority` marked with `capture` and reads the answer's head.
pub(crate) fn connect(
    shared: &Shared,
    authority: &str,
    capture: &str,
) -> io::Result<(UnixStream, Answer)> {
    let mut gate = UnixStream::connect(&shared.gate_socket)?;
    let head = format!(
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{CAPTURE_HEADER}: {capture}\r\n\
         {TOKEN_HEADER}: {}\r\n\r\n",
        shared.token
    );
    gate.write_all(head.as_bytes())?;
    gate.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    let (head, rest) = read_head(&mut gate, MAX_HEAD)?;
    gate.set_read_timeout(None)?;
    let status = status_of(&head).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, "malformed answer from the gate")
    })?;
    Ok((gate, Answer { status, head, rest }))
}

/// Reads up to and including the first `\r\n\r\n`; returns the head and what came after it.
pub(crate) fn read_head(stream: &mut impl Read, limit: usize) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let searched = buf.len();
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed before the end of a head",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        let from = searched.saturating_sub(3);
        if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(from + i + 4);
            return Ok((buf, rest));
        }
        if buf.len() > limit {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "head too large"));
        }
    }
}

/// `HTTP/1.x NNN …` → NNN.
fn status_of(head: &[u8]) -> Option<u16> {
    let rest = head.strip_prefix(b"HTTP/1.")?;
    let code = rest.get(2..5)?;
    if rest.get(1) != Some(&b' ') || !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(code).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(
            status_of(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            Some(200)
        );
        assert_eq!(status_of(b"HTTP/1.0 403 Forbidden\r\n\r\n"), Some(403));
        assert_eq!(status_of(b"HTTP/2 200\r\n\r\n"), None);
        assert_eq!(status_of(b"HTTP/1.1 2x0\r\n\r\n"), None);
    }

    #[test]
    fn heads_split_from_the_rest() {
        let mut input: &[u8] = b"HTTP/1.1 200 OK\r\n\r\nhello";
        let (head, rest) = read_head(&mut input, 1024).unwrap();
        assert_eq!(head, b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(rest, b"hello");
        let mut big: &[u8] = &[b'a'; 10_000];
        assert!(read_head(&mut big, 100).is_err());
    }
}
