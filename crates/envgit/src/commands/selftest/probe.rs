//! `envgit selftest-probe KIND ARGS…`: one attack, run inside the sandbox by `envgit selftest`
//! (as `/run/envgit/envgit`, the binary the sandbox is given). It prints one line saying what
//! happened; the host side decides whether that is a pass. Never run by people.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::time::Duration;

use crate::failure::{CmdResult, Failure};

const IO_TIMEOUT: Duration = Duration::from_secs(20);

pub fn run(args: &[String]) -> CmdResult<ExitCode> {
    let arg = |i: usize| {
        args.get(i)
            .map(String::as_str)
            .ok_or_else(|| Failure::usage(format!("selftest-probe: argument {i} is missing")))
    };
    let line = match arg(0)? {
        "http" => http(arg(1)?, arg(2)?, arg(3)?),
        "read" => match std::fs::read(arg(1)?) {
            Ok(bytes) => format!("read ok {}", String::from_utf8_lossy(&bytes).trim()),
            Err(e) => format!("read denied {}", e.kind()),
        },
        "write" => match std::fs::write(arg(1)?, b"written from inside") {
            Ok(()) => "write ok".to_owned(),
            Err(e) => format!("write denied {}", e.kind()),
        },
        "connect" => {
            let addr: SocketAddr = arg(1)?
                .parse()
                .map_err(|e| Failure::usage(format!("selftest-probe: {e}")))?;
            match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                Ok(_) => "connect ok".to_owned(),
                Err(e) => format!("connect failed {}", e.kind()),
            }
        }
        "udp" => udp(arg(1)?),
        other => {
            return Err(Failure::usage(format!(
                "selftest-probe: unknown kind {other}"
            )));
        }
    };
    println!("{line}");
    Ok(ExitCode::SUCCESS)
}

/// Sends hex-encoded bytes to 127.0.0.1:PORT after DELAY ms, half-closes, and prints the
/// first status line that came back (`reply none` if nothing did).
fn http(port: &str, hex: &str, delay_ms: &str) -> String {
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let (Some(bytes), Ok(port), Ok(delay)) = (bytes, port.parse::<u16>(), delay_ms.parse::<u64>())
    else {
        return "http bad-arguments".to_owned();
    };
    let mut s = match TcpStream::connect(("127.0.0.1", port)) {
        Ok(s) => s,
        Err(e) => return format!("http connect-failed {}", e.kind()),
    };
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    std::thread::sleep(Duration::from_millis(delay));
    if let Err(e) = s.write_all(&bytes) {
        return format!("http send-failed {}", e.kind());
    }
    let _ = s.shutdown(Shutdown::Write);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    let statuses: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("HTTP/1."))
        .map(|l| l.get(9..12).unwrap_or("?"))
        .collect();
    if statuses.is_empty() {
        "reply none".to_owned()
    } else {
        format!("reply {}", statuses.join(","))
    }
}

/// A DNS query for example.com to ADDR (a resolver outside): any answer is a way out.
fn udp(addr: &str) -> String {
    let Ok(sock) = UdpSocket::bind("0.0.0.0:0") else {
        return "udp failed bind".to_owned();
    };
    let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
    let query = [
        0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 3,
        b'c', b'o', b'm', 0, 0, 1, 0, 1,
    ];
    if let Err(e) = sock.send_to(&query, addr) {
        return format!("udp failed {}", e.kind());
    }
    let mut buf = [0u8; 512];
    match sock.recv_from(&mut buf) {
        Ok((n, from)) => format!("udp answered {n} bytes from {from}"),
        Err(e) => format!("udp failed {}", e.kind()),
    }
}
