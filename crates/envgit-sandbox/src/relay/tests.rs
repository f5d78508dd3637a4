//! The relay with a real gate, over loopback only: an upstream server on 127.0.0.1, a gate on
//! a temporary unix socket, and the relay in-process on ports picked by the kernel.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use envgit_gate::{Gate, GateConfig, GateEvent};
use simple_dns::rdata::RData;
use simple_dns::{CLASS, Name, Packet, Question, RCODE, TYPE};

use super::dns::{FakeDns, answer};
use super::{Relay, RelayConfig};

const TOKEN: &str = "test-token-0123456789";
const WAIT: Duration = Duration::from_secs(10);

/// A server on 127.0.0.1 that answers every connection: an HTTP request gets `200` with a
/// body naming the request line; anything else is echoed back.
fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(WAIT));
                let mut buf = [0u8; 4096];
                let Ok(n) = stream.read(&mut buf) else { return };
                let first = &buf[..n];
                if first.starts_with(b"GET ") || first.starts_with(b"POST ") {
                    let line = first.split(|&b| b == b'\r').next().unwrap_or(b"");
                    let body = format!("seen: {}", String::from_utf8_lossy(line));
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes());
                    return;
                }
                let _ = stream.write_all(first);
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    port
}

struct Setup {
    gate: Gate,
    _dir: tempfile::TempDir,
    proxy: u16,
    dns: u16,
    capture: u16,
    /// (listen, target) of the forward to the upstream.
    forward: u16,
    upstream: u16,
}

/// `UPSTREAM` and `CAPTURE` in the allow list stand for the upstream's and the capture
/// listener's ports; an entry starting `raw ` is marked `raw: true`.
fn setup(allow: &[String]) -> Setup {
    let upstream = upstream();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gate.sock");
    let cfg = RelayConfig {
        gate_socket: socket.clone(),
        token: TOKEN.to_owned(),
        proxy_port: 0,
        dns_port: 0,
        capture_ports: vec![0],
        forwards: Vec::new(),
        // Placeholders stand for ports only: the names are as the gate gets them.
        allow_names: allow
            .iter()
            .map(|a| a.strip_prefix("raw ").unwrap_or(a).to_owned())
            .collect(),
    };
    let relay = Relay::bind_with(cfg, &[(0, upstream)]).unwrap();
    let proxy = relay.proxy_port().unwrap();
    let dns = relay.dns_port().unwrap();
    let capture = relay.capture_ports().unwrap()[0];
    let forward = relay.forward_ports().unwrap()[0].0;
    let mut policy = envgit_policy::Policy::default();
    for a in allow {
        let (raw, entry) = match a.strip_prefix("raw ") {
            Some(rest) => (true, rest),
            None => (false, a.as_str()),
        };
        let entry = entry
            .replace("UPSTREAM", &upstream.to_string())
            .replace("CAPTURE", &capture.to_string());
        if raw {
            let options = envgit_policy::AllowOptions {
                raw: true,
                websocket: false,
            };
            policy.network.allow_options.insert(entry.clone(), options);
        }
        policy.network.allow.push(entry);
    }
    let gate = Gate::start(GateConfig {
        socket_path: socket,
        token: TOKEN.to_owned(),
        policy: Arc::new(policy),
        announce: None,
        ca: Arc::new(envgit_gate::RunCa::generate("relay test").unwrap()),
        resolve: Vec::new(),
        upstream_ca_pem: Vec::new(),
        approvals: None,
        credentials: Vec::new(),
        reserved_ports: None,
    })
    .unwrap();
    std::thread::spawn(move || relay.run());
    Setup {
        gate,
        _dir: dir,
        proxy,
        dns,
        capture,
        forward,
        upstream,
    }
}

fn connect(port: u16) -> TcpStream {
    connect_to(Ipv4Addr::LOCALHOST, port)
}

fn connect_to(ip: Ipv4Addr, port: u16) -> TcpStream {
    let s = TcpStream::connect(SocketAddr::from((ip, port))).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

fn read_to_end(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads up to and including the blank line after a head.
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Events, waiting until `n` have arrived (tunnels record when they close).
fn events(gate: &Gate, n: usize) -> Vec<GateEvent> {
    let mut all = Vec::new();
    for _ in 0..200 {
        all.extend(gate.take_events());
        if all.len() >= n {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    all
}

#[test]
fn connect_through_the_proxy_to_an_allowed_port_round_trips() {
    let s = setup(&["raw 127.0.0.1:UPSTREAM".into()]);
    let mut c = connect(s.proxy);
    let target = format!("127.0.0.1:{}", s.upstream);
    write!(c, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let head = read_head(&mut c);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A loopback entry marked `raw: true` carries raw TCP: the echo server answers.
    c.write_all(b"\x00\x01raw bytes").unwrap();
    let mut back = [0u8; 11];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"\x00\x01raw bytes");
    drop(c);
    let ev = events(&s.gate, 1);
    assert_eq!(ev.len(), 1, "{ev:?}");
    let e = &ev[0];
    assert_eq!(
        (e.method.as_str(), e.host.as_str(), e.port),
        ("CONNECT", "127.0.0.1", s.upstream)
    );
    assert_eq!(e.decision, "allowed");
    assert_eq!(e.rule.as_deref(), Some(target.as_str()));
    assert_eq!(e.status, Some(200));
    assert_eq!((e.bytes_out, e.bytes_in), (11, 11));
    assert_eq!(e.path, "");
}

#[test]
fn a_loopback_entry_not_marked_raw_carries_http_only() {
    let s = setup(&["127.0.0.1:UPSTREAM".into()]);
    let mut c = connect(s.forward);
    // Not HTTP, however long the client waits before or after: closed, nothing spliced.
    c.write_all(b"\x00\x01raw bytes").unwrap();
    let mut back = Vec::new();
    let _ = c.read_to_end(&mut back);
    assert!(back.is_empty(), "{back:?}");
    let ev = events(&s.gate, 1);
    assert_eq!(ev[0].rule.as_deref(), Some("network.opaque"), "{ev:?}");
}

#[test]
fn connect_to_a_denied_port_gets_403_naming_the_rule() {
    let s = setup(&["127.0.0.1:UPSTREAM".into()]);
    let mut c = connect(s.proxy);
    write!(
        c,
        "CONNECT example.com:8443 HTTP/1.1\r\nHost: example.com:8443\r\n\r\n"
    )
    .unwrap();
    let reply = read_to_end(c);
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
    assert!(
        reply.contains("X-Envgit-Decision: deny; rule=network.allow\r\n"),
        "{reply}"
    );
    assert!(
        reply.ends_with("\r\n\r\nenvgit: denied CONNECT example.com:8443 (rule network.allow)\n"),
        "{reply}"
    );
    let ev = events(&s.gate, 1);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].decision, "denied");
    assert_eq!(ev[0].rule.as_deref(), Some("network.allow"));
    assert_eq!(ev[0].status, Some(403));
    assert_eq!((ev[0].host.as_str(), ev[0].port), ("example.com", 8443));
    // The event carries the fix, for the announcement and the step's record.
    assert_eq!(
        ev[0].reason.as_deref(),
        Some("to allow it, add \"example.com:8443\" to network.allow in envgit.yaml")
    );
    assert!(
        reply.contains("X-Envgit-Reason: to allow it, add \"example.com:8443\""),
        "{reply}"
    );
}

#[test]
fn connect_to_port_22_and_private_addresses_is_refused() {
    let s = setup(&["github.com:22".into(), "10.0.0.1".into()]);
    for (target, rule) in [
        ("github.com:22", "network.port22"),
        ("10.0.0.1:443", "network.private"),
    ] {
        let mut c = connect(s.proxy);
        write!(c, "CONNECT {target} HTTP/1.1\r\n\r\n").unwrap();
        let reply = read_to_end(c);
        assert!(reply.contains(&format!("rule={rule}\r\n")), "{reply}");
    }
}

#[test]
fn absolute_form_get_allowed_and_denied() {
    let s = setup(&["127.0.0.1:UPSTREAM".into()]);
    let mut c = connect(s.proxy);
    write!(
        c,
        "GET http://127.0.0.1:{}/hello?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nProxy-Connection: keep-alive\r\n\r\n",
        s.upstream, s.upstream
    )
    .unwrap();
    let reply = read_to_end(c);
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(reply.contains("Connection: close\r\n"), "{reply}");
    assert!(!reply.contains("keep-alive"), "{reply}");
    assert!(reply.ends_with("seen: GET /hello?x=1 HTTP/1.1"), "{reply}");

    let mut c = connect(s.proxy);
    write!(
        c,
        "GET http://example.com/secret/path?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"
    )
    .unwrap();
    let reply = read_to_end(c);
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
    assert!(
        reply.ends_with("envgit: denied GET example.com/secret/path (rule network.allow)\n"),
        "{reply}"
    );

    let ev = events(&s.gate, 2);
    assert_eq!(ev.len(), 2, "{ev:?}");
    let allowed = ev.iter().find(|e| e.decision == "allowed").unwrap();
    assert_eq!(
        (allowed.method.as_str(), allowed.path.as_str()),
        ("GET", "/hello?x=1")
    );
    assert_eq!(allowed.status, Some(200));
    assert!(allowed.bytes_out > 0 && allowed.bytes_in > 0);
    let denied = ev.iter().find(|e| e.decision == "denied").unwrap();
    assert_eq!(
        (denied.host.as_str(), denied.port, denied.path.as_str()),
        ("example.com", 80, "/secret/path?q=1")
    );
    assert_eq!(denied.rule.as_deref(), Some("network.allow"));
}

#[test]
fn a_second_request_on_a_proxy_connection_never_passes() {
    let s = setup(&["127.0.0.1:UPSTREAM".into()]);
    let mut c = connect(s.proxy);
    // Pipelined: an allowed request, then one to a host that is not allowed.
    write!(
        c,
        "GET http://127.0.0.1:{p}/one HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n\
         GET http://example.com/two HTTP/1.1\r\nHost: example.com\r\n\r\n",
        p = s.upstream
    )
    .unwrap();
    let reply = read_to_end(c);
    assert!(reply.contains("seen: GET /one"), "{reply}");
    assert!(!reply.contains("/two"), "{reply}");
    let ev = events(&s.gate, 1);
    assert_eq!(ev.len(), 1, "{ev:?}");
}

#[test]
fn connect_to_a_localhost_entry_resolves_on_the_host_and_carries_raw_tcp() {
    let s = setup(&["raw localhost:UPSTREAM".into()]);
    let mut c = connect(s.proxy);
    let target = format!("localhost:{}", s.upstream);
    write!(c, "CONNECT {target} HTTP/1.1\r\n\r\n").unwrap();
    assert!(read_head(&mut c).starts_with("HTTP/1.1 200"));
    c.write_all(b"\x01not http").unwrap();
    let mut back = [0u8; 9];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"\x01not http");
}

#[test]
fn dns_answers_a_with_fake_loopback_addresses() {
    let s = setup(&[
        "registry.npmjs.org".into(),
        "*.pythonhosted.org".into(),
        "example.com:8443".into(),
    ]);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    sock.connect(("127.0.0.1", s.dns)).unwrap();
    let ask = |name: &str, ty: TYPE, id: u16| -> Vec<u8> {
        let mut q = Packet::new_query(id);
        q.questions.push(Question::new(
            Name::new_unchecked(name),
            ty.into(),
            CLASS::IN.into(),
            false,
        ));
        sock.send(&q.build_bytes_vec().unwrap()).unwrap();
        let mut buf = [0u8; 1500];
        let n = sock.recv(&mut buf).unwrap();
        buf[..n].to_vec()
    };
    let a_of = |reply: &[u8]| -> Option<Ipv4Addr> {
        let p = Packet::parse(reply).unwrap();
        p.answers.iter().find_map(|rr| match &rr.rdata {
            RData::A(a) => Some(Ipv4Addr::from(a.address)),
            _ => None,
        })
    };
    let r1 = ask("registry.npmjs.org", TYPE::A, 1);
    let ip1 = a_of(&r1).unwrap();
    assert_eq!(ip1.octets()[..2], [127, 1]);
    assert_eq!(Packet::parse(&r1).unwrap().id(), 1);
    let r2 = ask("Registry.NPMJS.org", TYPE::A, 2);
    assert_eq!(a_of(&r2), Some(ip1), "same name (any case), same address");
    let other = a_of(&ask("files.pythonhosted.org", TYPE::A, 3)).unwrap();
    assert_ne!(other, ip1);

    let aaaa = ask("registry.npmjs.org", TYPE::AAAA, 4);
    let aaaa = Packet::parse(&aaaa).unwrap();
    assert_eq!(aaaa.rcode(), RCODE::NoError);
    assert!(aaaa.answers.is_empty());
    let mx = ask("example.com", TYPE::MX, 5);
    let mx = Packet::parse(&mx).unwrap();
    assert_eq!(mx.rcode(), RCODE::NoError);
    assert!(mx.answers.is_empty());

    for bad in ["evil\r\nhost.com", "a b.com", "x\u{0}.com", "caf\u{e9}.com"] {
        let r = ask(bad, TYPE::A, 6);
        assert_eq!(
            Packet::parse(&r).unwrap().rcode(),
            RCODE::Refused,
            "{bad:?}"
        );
    }

    // DNS over TCP, same table.
    let mut t = connect(s.dns);
    let mut q = Packet::new_query(7);
    q.questions.push(Question::new(
        Name::new_unchecked("registry.npmjs.org"),
        TYPE::A.into(),
        CLASS::IN.into(),
        false,
    ));
    let q = q.build_bytes_vec().unwrap();
    t.write_all(&u16::try_from(q.len()).unwrap().to_be_bytes())
        .unwrap();
    t.write_all(&q).unwrap();
    let mut len = [0u8; 2];
    t.read_exact(&mut len).unwrap();
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    t.read_exact(&mut reply).unwrap();
    assert_eq!(a_of(&reply), Some(ip1));
    // The stub answered everything itself: the gate saw nothing.
    assert!(s.gate.take_events().is_empty());
}

#[test]
fn dns_table_is_one_to_one_and_never_forwards() {
    let dns = FakeDns::default();
    let mut seen = std::collections::HashSet::new();
    for i in 0..2000 {
        let ip = dns.address_for(&format!("host{i}.example")).unwrap();
        assert!(seen.insert(ip), "address reused");
        assert_eq!(dns.name_of(ip).unwrap(), format!("host{i}.example"));
        assert_ne!(ip.octets()[2..], [0, 0]);
        assert_ne!(ip.octets()[2..], [255, 255]);
    }
    assert_eq!(
        dns.address_for("host7.example"),
        dns.address_for("host7.example")
    );
    // Garbage and responses get no answer or FORMERR, never a lookup.
    assert!(answer(b"", &dns).is_none());
    assert!(answer(b"\x00", &dns).is_none());
    let formerr = answer(b"\x12\x34\x01\x00\x00\x01", &dns).unwrap();
    assert_eq!(Packet::parse(&formerr).unwrap().rcode(), RCODE::FormatError);
    let mut response = Packet::new_reply(9);
    response.questions.push(Question::new(
        Name::new_unchecked("a.example"),
        TYPE::A.into(),
        CLASS::IN.into(),
        false,
    ));
    assert!(answer(&response.build_bytes_vec().unwrap(), &dns).is_none());
}

/// The rcode and first A answer of `name` (type `ty`) through the stub, over UDP and TCP.
fn lookup(dns_port: u16, name: &str, ty: TYPE) -> (RCODE, Option<Ipv4Addr>) {
    let mut q = Packet::new_query(77);
    q.questions.push(Question::new(
        Name::new_unchecked(name),
        ty.into(),
        CLASS::IN.into(),
        false,
    ));
    let q = q.build_bytes_vec().unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    sock.send_to(&q, ("127.0.0.1", dns_port)).unwrap();
    let mut buf = [0u8; 1500];
    let n = sock.recv(&mut buf).unwrap();
    let mut t = connect(dns_port);
    t.write_all(&u16::try_from(q.len()).unwrap().to_be_bytes())
        .unwrap();
    t.write_all(&q).unwrap();
    let mut len = [0u8; 2];
    t.read_exact(&mut len).unwrap();
    let mut tcp = vec![0u8; usize::from(u16::from_be_bytes(len))];
    t.read_exact(&mut tcp).unwrap();
    let read = |bytes: &[u8]| {
        let p = Packet::parse(bytes).unwrap();
        let a = p.answers.iter().find_map(|rr| match &rr.rdata {
            RData::A(a) => Some(Ipv4Addr::from(a.address)),
            _ => None,
        });
        (p.rcode(), a)
    };
    let (udp, tcp) = (read(&buf[..n]), read(&tcp));
    assert_eq!(udp, tcp, "{name}: UDP and TCP agree");
    udp
}

#[test]
fn dns_answers_only_names_the_policy_could_allow() {
    let s = setup(&[
        "registry.npmjs.org".into(),
        "*.PythonHosted.org".into(),
        "db.corp.example:5432".into(),
        "[2606:4700::1111]:443".into(),
        "localhost:CAPTURE".into(),
    ]);
    for name in [
        "registry.npmjs.org",
        "REGISTRY.npmjs.org",
        "files.pythonhosted.org",
        "a.b.pythonhosted.org",
        "db.corp.example",
        "localhost",
        "app.localhost",
    ] {
        let (rcode, a) = lookup(s.dns, name, TYPE::A);
        assert_eq!(rcode, RCODE::NoError, "{name}");
        assert_eq!(
            a.map(|a| a.octets()[..2].to_vec()),
            Some(vec![127, 1]),
            "{name}"
        );
        let (rcode, a) = lookup(s.dns, name, TYPE::AAAA);
        assert_eq!((rcode, a), (RCODE::NoError, None), "{name} AAAA");
    }
    for name in [
        "example.com",
        "npmjs.org",
        "evil-registry.npmjs.org",
        "registry.npmjs.org.evil.com",
        "pythonhosted.org",
        "evilpythonhosted.org",
        "corp.example",
        "x.db.corp.example",
        "2606",
        "exfiltrated-secret.attacker.example",
    ] {
        for ty in [TYPE::A, TYPE::AAAA, TYPE::TXT] {
            let (rcode, a) = lookup(s.dns, name, ty);
            assert_eq!(rcode, RCODE::NameError, "{name} {ty:?}: NXDOMAIN (rcode 3)");
            assert_eq!(a, None, "{name}");
        }
    }
    assert!(s.gate.take_events().is_empty(), "the stub answered alone");
}

/// Resolves `name` through the stub, as a client inside the sandbox would.
fn resolve(dns_port: u16, name: &str) -> Ipv4Addr {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let mut q = Packet::new_query(42);
    q.questions.push(Question::new(
        Name::new_unchecked(name),
        TYPE::A.into(),
        CLASS::IN.into(),
        false,
    ));
    sock.send_to(&q.build_bytes_vec().unwrap(), ("127.0.0.1", dns_port))
        .unwrap();
    let mut buf = [0u8; 1500];
    let n = sock.recv(&mut buf).unwrap();
    let p = Packet::parse(&buf[..n]).unwrap();
    p.answers
        .iter()
        .find_map(|rr| match &rr.rdata {
            RData::A(a) => Some(Ipv4Addr::from(a.address)),
            _ => None,
        })
        .unwrap()
}

#[test]
fn captured_connection_to_a_fake_address_becomes_a_connect() {
    // Without namespaces the capture port is taken on the host too, so the gate's dial of
    // `localhost:<capture port>` lands on the relay's own capture listener at 127.0.0.1,
    // which closes it: enough to see the name travel and the decision taken on it.
    let s = setup(&["localhost:CAPTURE".into()]);
    let ip = resolve(s.dns, "LocalHost");
    assert_eq!(ip.octets()[..2], [127, 1]);
    let mut c = connect_to(ip, s.capture);
    let _ = c.write_all(b"GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let _ = read_to_end(c);
    // The CONNECT is decided on the name; the HTTP inside it (a loopback entry) is then
    // judged per request too, which may add a GET event.
    let ev = events(&s.gate, 1);
    let e = ev
        .iter()
        .find(|e| e.method == "CONNECT")
        .unwrap_or_else(|| panic!("no CONNECT event: {ev:?}"));
    assert_eq!(
        (e.method.as_str(), e.host.as_str(), e.port),
        ("CONNECT", "localhost", s.capture)
    );
    assert_eq!(e.decision, "allowed");
    assert_eq!(
        e.rule.as_deref(),
        Some(format!("localhost:{}", s.capture).as_str())
    );
}

#[test]
fn captured_http_to_a_denied_name_shows_the_403() {
    // The name resolves (the policy lists it), the capture port is not the one it allows.
    let s = setup(&["example.com:8443".into()]);
    let ip = resolve(s.dns, "example.com");
    let mut c = connect_to(ip, s.capture);
    write!(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n").unwrap();
    let reply = read_to_end(c);
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
    let port = s.capture;
    assert!(
        reply.ends_with(&format!(
            "envgit: denied CONNECT example.com:{port} (rule network.allow)\n"
        )),
        "{reply}"
    );
    let ev = events(&s.gate, 1);
    assert_eq!(ev[0].host, "example.com");
    assert_eq!(ev[0].decision, "denied");
}

#[test]
fn captured_connection_not_to_a_fake_address_is_closed() {
    let s = setup(&["127.0.0.1:UPSTREAM".into()]);
    for ip in [
        Ipv4Addr::LOCALHOST,
        Ipv4Addr::new(127, 1, 2, 3),
        Ipv4Addr::new(127, 0, 0, 2),
    ] {
        let mut c = connect_to(ip, s.capture);
        let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let reply = read_to_end(c);
        assert_eq!(reply, "", "{ip}");
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(s.gate.take_events().is_empty(), "nothing reached the gate");
}

#[test]
fn forward_carries_raw_tcp_to_the_host_port() {
    let s = setup(&["raw 127.0.0.1:UPSTREAM".into()]);
    assert_ne!(s.forward, s.upstream);
    let mut c = connect(s.forward);
    c.write_all(b"PING\x00").unwrap();
    let mut back = [0u8; 5];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"PING\x00");
    drop(c);
    let ev = events(&s.gate, 1);
    assert_eq!(ev[0].method, "CONNECT");
    assert_eq!((ev[0].host.as_str(), ev[0].port), ("127.0.0.1", s.upstream));
    assert_eq!(ev[0].decision, "allowed");
    assert_eq!((ev[0].bytes_out, ev[0].bytes_in), (5, 5));
}

#[test]
fn forward_to_a_port_not_listed_is_closed() {
    let s = setup(&[]);
    let c = connect(s.forward);
    assert_eq!(read_to_end(c), "");
    let ev = events(&s.gate, 1);
    assert_eq!(ev[0].decision, "denied");
    assert_eq!(ev[0].rule.as_deref(), Some("network.private"));
}

#[test]
fn the_gate_refuses_connections_without_the_token() {
    let s = setup(&["raw 127.0.0.1:UPSTREAM".into()]);
    let sock = s._dir.path().join("gate.sock");
    let target = format!("127.0.0.1:{}", s.upstream);
    for extra in ["", "X-Envgit-Token: wrong\r\n", "X-Envgit-Token: \r\n"] {
        let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        write!(c, "CONNECT {target} HTTP/1.1\r\n{extra}\r\n").unwrap();
        let mut reply = String::new();
        let _ = c.read_to_string(&mut reply);
        assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
        assert!(reply.contains("rule=gate.token"), "{reply}");
    }
    // Two token headers, one right: still refused.
    let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        c,
        "CONNECT {target} HTTP/1.1\r\nX-Envgit-Token: {TOKEN}\r\nX-Envgit-Token: x\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    let _ = c.read_to_string(&mut reply);
    assert!(reply.contains("rule=gate.token"), "{reply}");
    // With the token, the same CONNECT goes through.
    let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        c,
        "CONNECT {target} HTTP/1.1\r\nX-Envgit-Token: {TOKEN}\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 12];
    c.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    drop(c);
    let ev = events(&s.gate, 5);
    assert_eq!(
        ev.iter()
            .filter(|e| e.rule.as_deref() == Some("gate.token"))
            .count(),
        4
    );
    assert_eq!(ev.iter().filter(|e| e.decision == "allowed").count(), 1);
}
