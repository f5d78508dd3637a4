//! Copying both ways between two blocking sockets (TCP on the sandbox side, unix towards the
//! gate), on this thread and one more.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;

pub(crate) trait Duplex: Read + Write + Send + Sized + 'static {
    fn try_clone(&self) -> io::Result<Self>;
    fn shutdown(&self, how: Shutdown);
}

impl Duplex for TcpStream {
    fn try_clone(&self) -> io::Result<Self> {
        TcpStream::try_clone(self)
    }
    fn shutdown(&self, how: Shutdown) {
        let _ = TcpStream::shutdown(self, how);
    }
}

impl Duplex for UnixStream {
    fn try_clone(&self) -> io::Result<Self> {
        UnixStream::try_clone(self)
    }
    fn shutdown(&self, how: Shutdown) {
        let _ = UnixStream::shutdown(self, how);
    }
}

/// What a pump does when its writer stops accepting bytes.
#[derive(Clone, Copy)]
enum OnWriteError {
    /// The receiver is gone: end the whole connection.
    Abort,
    /// The receiver only stopped listening (the gate closes after one request even when the
    /// client pipelined more): read and drop the rest, so the reply flowing the other way
    /// arrives whole. Closing with unread input would make the kernel send a reset, and a
    /// reset can destroy a reply the client has not read yet.
    Drain,
}

/// Splices until both directions end: `client` is the sandboxed side, `gate` the side towards
/// the gate. End of stream is passed on as a half-close; a read error shuts both sockets down.
pub(crate) fn splice<A: Duplex, B: Duplex>(client: A, gate: B) -> io::Result<()> {
    let (client_read, gate_write) = (client.try_clone()?, gate.try_clone()?);
    let worker = std::thread::Builder::new()
        .name("envgit-relay-splice".into())
        .stack_size(super::THREAD_STACK)
        .spawn(move || pump(client_read, gate_write, OnWriteError::Drain))?;
    pump(gate, client, OnWriteError::Abort);
    let _ = worker.join();
    Ok(())
}

/// Copies `from` → `to` until end of stream (then half-closes `to`) or an error.
fn pump<R: Duplex, W: Duplex>(mut from: R, mut to: W, on_write_error: OnWriteError) {
    let mut buf = vec![0u8; 128 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    if let OnWriteError::Drain = on_write_error {
                        to.shutdown(Shutdown::Write);
                        drain(&mut from, &mut buf);
                        return;
                    }
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    from.shutdown(Shutdown::Both);
    to.shutdown(Shutdown::Both);
}

/// Reads and drops until end of stream or an error.
pub(crate) fn drain<R: Read>(from: &mut R, buf: &mut [u8]) {
    loop {
        match from.read(buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Copies the gate's answer to the client until it ends, on this thread only.
pub(crate) fn copy_all<R: Duplex, W: Duplex>(from: R, to: W) {
    pump(from, to, OnWriteError::Abort);
}
