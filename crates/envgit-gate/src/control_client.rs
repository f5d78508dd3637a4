//! The client side of the control socket ([`crate::control`]): one request, one answer, with
//! the run's control token read from the file beside the socket. `envgit status`, `envgit
//! approve/deny` and the terminal's own prompt all go through it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::control::{CONTROL_TOKEN_FILE, ControlAnswer, ControlOp, ControlRequest};

/// How long a client waits on a gate that accepted the connection.
const TALK_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `op` to the gate listening on `socket` and returns its answer. A socket left by a
/// run that died refuses the connection (an error, not an answer).
pub fn control_request(socket: &Path, op: ControlOp) -> std::io::Result<ControlAnswer> {
    control_request_via(socket, op, None)
}

/// [`control_request`] naming the channel the answer came through (`"web page"`); the gate
/// records it only when this process runs envgit's own binary.
pub fn control_request_via(
    socket: &Path,
    op: ControlOp,
    via: Option<&str>,
) -> std::io::Result<ControlAnswer> {
    let token = std::fs::read_to_string(socket.with_file_name(CONTROL_TOKEN_FILE))?;
    let req = ControlRequest {
        token: token.trim().to_owned(),
        op,
        via: via.map(str::to_owned),
    };
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(TALK_TIMEOUT))?;
    stream.set_write_timeout(Some(TALK_TIMEOUT))?;
    let mut line = serde_json::to_vec(&req).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    serde_json::from_str(&answer).map_err(std::io::Error::other)
}
