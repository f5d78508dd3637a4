//! The explicit HTTP proxy on 127.0.0.1: the client speaks the proxy protocol (`CONNECT
//! host:port` or `GET http://host/path`). The relay adds the token to the first request head
//! (removing any `X-Envgit-*` header the client sent) and splices the rest unchanged; later
//! requests on the connection are the gate's to parse.

use std::io::{self, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::gate::{MAX_HEAD, read_head};
use super::splice::splice;
use super::{CAPTURE_HEADER, Shared, TOKEN_HEADER};

/// How long a client may take to send its first head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn handle(mut client: TcpStream, shared: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(HEAD_TIMEOUT))?;
    let (head, rest) = read_head(&mut client, MAX_HEAD)?;
    client.set_read_timeout(None)?;
    // One write: the gate may answer and close as soon as it has the head.
    let mut first = with_token(&head, &shared.token);
    first.extend_from_slice(&rest);
    let mut gate = UnixStream::connect(&shared.gate_socket)?;
    gate.write_all(&first)?;
    splice(client, gate)
}

/// The head with every `X-Envgit-*` header line removed and the token and capture headers
/// added right after the request line.
pub(crate) fn with_token(head: &[u8], token: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 128);
    let mut lines = head.split_inclusive(|&b| b == b'\n');
    if let Some(request_line) = lines.next() {
        out.extend_from_slice(request_line);
    }
    out.extend_from_slice(
        format!("{TOKEN_HEADER}: {token}\r\n{CAPTURE_HEADER}: proxy\r\n").as_bytes(),
    );
    for line in lines {
        let name = line.split(|&b| b == b':').next().unwrap_or(b"");
        if name.len() >= 9 && name[..9].eq_ignore_ascii_case(b"x-envgit-") {
            continue;
        }
        out.extend_from_slice(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_goes_in_and_client_envgit_headers_go_out() {
        let head = b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nx-envgit-token: forged\r\nX-Envgit-Capture: forward\r\n\r\n";
        let out = with_token(head, "s3cret");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "CONNECT a:443 HTTP/1.1\r\nX-Envgit-Token: s3cret\r\nX-Envgit-Capture: proxy\r\nHost: a:443\r\n\r\n"
        );
    }
}
