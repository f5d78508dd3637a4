//! The gate's cost, against an HTTPS server on loopback: the same client reaches it directly,
//! through envgit (relay proxy → gate on its unix socket → TLS terminated with the run CA →
//! judged → TLS to the upstream) and, when installed, through mitmproxy's mitmdump on the
//! same workload. Prints each figure and its ratio to direct, measured in this run.
//!
//! `scripts/bench-gate` installs mitmproxy into target/bench-py and runs this.

#[path = "../percentile.rs"]
mod percentile;
use percentile::percentile;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use envgit_gate::{Gate, GateConfig, Resolve, RunCa};
use envgit_sandbox::relay::{Relay, RelayConfig};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector, client::TlsStream};

const HOST: &str = "bench.envgit.test";
const SMALL: usize = 64;
const BIG: u64 = 100 * 1024 * 1024;

#[derive(Parser)]
struct Args {
    /// Requests on one kept-alive connection.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Requests each of 8 connections sends.
    #[arg(long, default_value_t = 400)]
    per_connection: usize,
    /// New connections, one request each.
    #[arg(long, default_value_t = 200)]
    connections: usize,
    /// Where mitmproxy is installed (`pip install --target`); skipped when absent.
    #[arg(long, default_value = "target/bench-py")]
    mitmproxy: PathBuf,
}

/// How a client reaches the upstream.
#[derive(Clone)]
enum Route {
    Direct { port: u16 },
    Proxy { port: u16, target: String },
}

#[derive(Clone)]
struct Client {
    route: Route,
    tls: TlsConnector,
}

struct Conn {
    io: BufReader<TlsStream<TcpStream>>,
}

impl Client {
    async fn connect(&self) -> Result<Conn> {
        let tcp = match &self.route {
            Route::Direct { port } => TcpStream::connect(("127.0.0.1", *port)).await?,
            Route::Proxy { port, target } => {
                let mut s = TcpStream::connect(("127.0.0.1", *port)).await?;
                s.write_all(
                    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
                )
                .await?;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut byte).await? == 0 {
                        bail!("the proxy closed during CONNECT");
                    }
                    head.push(byte[0]);
                }
                if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.0 200") {
                    bail!("CONNECT refused: {}", String::from_utf8_lossy(&head));
                }
                s
            }
        };
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(HOST.to_owned())?;
        let tls = self.tls.connect(name, tcp).await?;
        Ok(Conn {
            io: BufReader::new(tls),
        })
    }
}

impl Conn {
    /// One GET; returns the body length.
    async fn get(&mut self, path: &str) -> Result<u64> {
        self.io
            .get_mut()
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes())
            .await?;
        let mut length = None;
        let mut line = String::new();
        let mut first = true;
        loop {
            line.clear();
            if self.io.read_line(&mut line).await? == 0 {
                bail!("the connection closed before a response");
            }
            if first {
                if !line.starts_with("HTTP/1.1 200") {
                    bail!("got {}", line.trim());
                }
                first = false;
                continue;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = Some(value.trim().parse::<u64>()?);
            }
        }
        let n = length.context("no Content-Length")?;
        let mut left = n;
        let mut buf = vec![0u8; 64 * 1024];
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
            let got = self.io.read(&mut buf[..want]).await?;
            if got == 0 {
                bail!("the body ended early");
            }
            left -= got as u64;
        }
        Ok(n)
    }
}

/// A keep-alive HTTPS server: `/small` answers 64 bytes, `/big` 100 MiB.
async fn upstream(acceptor: TlsAcceptor) -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut io = BufReader::new(tls);
                let mut line = String::new();
                loop {
                    let mut path = String::new();
                    loop {
                        line.clear();
                        match io.read_line(&mut line).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if path.is_empty() {
                            path = line.split(' ').nth(1).unwrap_or("/").to_owned();
                        } else if line == "\r\n" {
                            break;
                        }
                    }
                    let out = io.get_mut();
                    let ok = if path == "/big" {
                        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n");
                        let chunk = vec![b'x'; 256 * 1024];
                        let mut res = out.write_all(head.as_bytes()).await;
                        let mut left = BIG;
                        while res.is_ok() && left > 0 {
                            let n = usize::try_from(left).unwrap_or(usize::MAX).min(chunk.len());
                            res = out.write_all(&chunk[..n]).await;
                            left -= n as u64;
                        }
                        res
                    } else {
                        let body = "y".repeat(SMALL);
                        out.write_all(
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {SMALL}\r\n\r\n{body}")
                                .as_bytes(),
                        )
                        .await
                    };
                    if ok.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(port)
}

fn connector(roots_pem: &[u8]) -> Result<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(roots_pem) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The upstream's certificate, from a CA the client (direct) and the gate trust.
fn upstream_tls() -> Result<(TlsAcceptor, String)> {
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "envgit bench upstream CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(vec![HOST.to_owned()])?;
    leaf.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &issuer)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::try_from(key.serialize_der()).map_err(anyhow::Error::msg)?,
        )?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((TlsAcceptor::from(Arc::new(config)), ca_pem))
}

#[derive(Default)]
struct Figures {
    p50_us: f64,
    p99_us: f64,
    rps1: f64,
    rps8: f64,
    new_p50_us: f64,
    download_mb_s: f64,
}

/// A percentile in microseconds.
fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    percentile(sorted, p).as_secs_f64() * 1e6
}

async fn measure(client: &Client, args: &Args, download: bool) -> Result<Figures> {
    let mut f = Figures::default();
    // Keep-alive, one connection.
    let mut conn = client.connect().await?;
    for _ in 0..50 {
        conn.get("/small").await?;
    }
    let mut lat = Vec::with_capacity(args.requests);
    let start = Instant::now();
    for _ in 0..args.requests {
        let t = Instant::now();
        conn.get("/small").await?;
        lat.push(t.elapsed());
    }
    f.rps1 = args.requests as f64 / start.elapsed().as_secs_f64();
    lat.sort();
    f.p50_us = percentile_us(&lat, 0.5);
    f.p99_us = percentile_us(&lat, 0.99);
    // Keep-alive, 8 connections at once.
    let mut conns = Vec::new();
    for _ in 0..8 {
        conns.push(client.connect().await?);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for mut c in conns {
        let n = args.per_connection;
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                c.get("/small").await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    f.rps8 = (8 * args.per_connection) as f64 / start.elapsed().as_secs_f64();
    // A new connection (CONNECT + both handshakes) per request.
    let mut lat = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let t = Instant::now();
        let mut c = client.connect().await?;
        c.get("/small").await?;
        lat.push(t.elapsed());
    }
    lat.sort();
    f.new_p50_us = percentile_us(&lat, 0.5);
    if download {
        let mut c = client.connect().await?;
        let t = Instant::now();
        let n = c.get("/big").await?;
        f.download_mb_s = n as f64 / 1e6 / t.elapsed().as_secs_f64();
    }
    Ok(f)
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// mitmdump on a free port, its CA in a private confdir; `None` when not installed.
fn start_mitmproxy(
    dir: &std::path::Path,
    site: &std::path::Path,
) -> Option<(std::process::Child, u16, Vec<u8>)> {
    if !site.join("mitmproxy").is_dir() {
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = std::process::Command::new("python3")
        .env("PYTHONPATH", site)
        .args([
            "-c",
            "from mitmproxy.tools.main import mitmdump; mitmdump()",
        ])
        .args([
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            &port.to_string(),
        ])
        .args(["--set", &format!("confdir={}", dir.display())])
        .args(["--ssl-insecure", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let ca = dir.join("mitmproxy-ca-cert.pem");
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && let Ok(pem) = std::fs::read(&ca)
        {
            return Some((child, port, pem));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (acceptor, upstream_ca) = upstream_tls()?;
    let up_port = runtime.block_on(upstream(acceptor))?;

    // envgit: the gate on a unix socket and the relay's proxy in front of it, as in a step.
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("gate.sock");
    let token = "bench-token-0123456789".to_owned();
    let mut policy = envgit_policy::Policy::default();
    policy.network.allow = vec![HOST.to_owned()];
    let ca = Arc::new(RunCa::generate("bench")?);
    let run_ca_pem = ca.certificate_pem().as_bytes().to_vec();
    let gate = Gate::start(GateConfig {
        socket_path: socket.clone(),
        token: token.clone(),
        policy: Arc::new(policy),
        announce: None,
        ca,
        resolve: vec![
            format!("{HOST}:443=127.0.0.1:{up_port}")
                .parse::<Resolve>()
                .map_err(anyhow::Error::msg)?,
        ],
        upstream_ca_pem: upstream_ca.as_bytes().to_vec(),
        approvals: None,
        credentials: Vec::new(),
        reserved_ports: None,
    })?;
    let relay = Relay::bind(RelayConfig {
        gate_socket: socket,
        token,
        proxy_port: 0,
        dns_port: 0,
        capture_ports: Vec::new(),
        forwards: Vec::new(),
        allow_names: Vec::new(),
    })?;
    let proxy_port = relay.proxy_port()?;
    std::thread::spawn(move || relay.run());

    let direct = Client {
        route: Route::Direct { port: up_port },
        tls: connector(upstream_ca.as_bytes())?,
    };
    let through = Client {
        route: Route::Proxy {
            port: proxy_port,
            target: format!("{HOST}:443"),
        },
        tls: connector(&run_ca_pem)?,
    };
    println!("gate benchmark: HTTPS server on loopback, {SMALL}-byte GETs, 100 MiB download");
    let d = runtime.block_on(measure(&direct, &args, true))?;
    let hwm_before = vm_hwm_kib();
    let g = runtime.block_on(measure(&through, &args, true))?;
    let hwm_after = vm_hwm_kib();
    drop(gate);

    let confdir = tempfile::tempdir()?;
    let mitm = start_mitmproxy(confdir.path(), &args.mitmproxy);
    let m = match &mitm {
        Some((_, port, ca_pem)) => {
            let client = Client {
                route: Route::Proxy {
                    port: *port,
                    target: format!("127.0.0.1:{up_port}"),
                },
                tls: connector(ca_pem)?,
            };
            let small = Args {
                requests: args.requests / 4,
                per_connection: args.per_connection / 4,
                connections: args.connections / 4,
                mitmproxy: PathBuf::new(),
            };
            Some(runtime.block_on(measure(&client, &small, false))?)
        }
        None => None,
    };
    if let Some((mut child, _, _)) = mitm {
        let _ = child.kill();
        let _ = child.wait();
    }

    println!();
    println!(
        "{:<34} {:>12} {:>12} {:>8}  goal",
        "", "direct", "envgit", "ratio"
    );
    let row = |name: &str, a: f64, b: f64, unit: &str, goal: &str| {
        println!(
            "{name:<34} {:>9.0} {unit:<2} {:>9.0} {unit:<2} {:>7.2}x  {goal}",
            a,
            b,
            ratio(b, a)
        );
    };
    row("keep-alive p50", d.p50_us, g.p50_us, "us", "<= 3x");
    row("keep-alive p99", d.p99_us, g.p99_us, "us", "");
    row("keep-alive req/s, 1 conn", d.rps1, g.rps1, "/s", "");
    row("keep-alive req/s, 8 conns", d.rps8, g.rps8, "/s", "");
    row(
        "new connection p50",
        d.new_p50_us,
        g.new_p50_us,
        "us",
        "<= 1.5x",
    );
    row(
        "100 MiB download",
        d.download_mb_s,
        g.download_mb_s,
        "MB",
        ">= 0.6x",
    );
    println!(
        "peak RSS of this process during the download through envgit: {} MiB (before {} MiB)",
        hwm_after / 1024,
        hwm_before / 1024
    );
    match m {
        Some(m) => {
            println!(
                "mitmproxy (mitmdump) on the same workload: keep-alive p50 {:.0} us, {:.0} req/s on 1 conn, {:.0} req/s on 8 conns, new connection p50 {:.0} us",
                m.p50_us, m.rps1, m.rps8, m.new_p50_us
            );
            println!(
                "envgit / mitmproxy req/s on 8 connections: {:.1}x (goal >= 20x)",
                ratio(g.rps8, m.rps8)
            );
        }
        None => println!(
            "mitmproxy: not installed in {} (scripts/bench-gate installs it)",
            args.mitmproxy.display()
        ),
    }
    Ok(())
}
