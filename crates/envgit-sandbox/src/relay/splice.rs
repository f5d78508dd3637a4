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

/// Splices until both directions end. End of stream is passed on as a half-close; an error on
/// either direction shuts both sockets down so the other direction ends too.
pub(crate) fn splice<A: Duplex, B: Duplex>(a: A, b: B) -> io::Result<()> {
    let (a_read, b_write) = (a.try_clone()?, b.try_clone()?);
    let worker = std::thread::Builder::new()
        .name("envgit-relay-splice".into())
        .stack_size(super::THREAD_STACK)
        .spawn(move || pump(a_read, b_write))?;
    pump(b, a);
    let _ = worker.join();
    Ok(())
}

/// Copies `from` → `to` until end of stream (then half-closes `to`) or an error (then shuts
/// both down).
fn pump<R: Duplex, W: Duplex>(mut from: R, mut to: W) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
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

/// Copies `from` → `to` until end of stream or error, on this thread only.
pub(crate) fn copy_all<R: Duplex, W: Duplex>(from: R, to: W) {
    pump(from, to);
}
