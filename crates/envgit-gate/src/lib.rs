//! The egress gate: every connection out of the sandbox ends here and is decided.
//!
//! The order of judgement: `network.allow` for the host and port (every resolved address
//! vetted), then, inside the tunnel (TLS terminated with the run's CA), each request by
//! method, host, path and, where a rule needs it, its decoded body (`l7` rules, then the
//! `irreversible` preset); `ask` holds a request until a person answers. What is not allowed
//! is refused; nothing is tunnelled undecided. ARCHITECTURE.md follows a request through the
//! modules.
//!
//! # Wire protocol (relay → gate)
//!
//! The gate listens on a unix socket (in a 0700 directory the caller made). Each connection
//! starts with one HTTP/1.1 request head that carries the run's secret as
//! `X-Envgit-Token: <token>`; a connection whose first head lacks it (or has it twice, or
//! wrong) gets `403 Forbidden` and is closed. The relay adds the header; the workload never
//! sees the token. Optionally `X-Envgit-Capture: tls|http|forward|proxy` says where the
//! connection came from (logging only: it grants nothing).
//!
//! - `CONNECT host:port HTTP/1.1` → decided by `verdict.rs` (ports a running `envgit ui`
//!   reserved, then [`envgit_policy::decide_connect`]); the name is resolved on the host and
//!   every address vetted ([`envgit_policy::vet_address`]); on success `HTTP/1.1 200 Connection
//!   established`, then the first client bytes are sniffed (`tunnel.rs`): TLS is terminated
//!   with a leaf of the run CA (`tls.rs`; spliced uninspected for a host under
//!   `network.passthrough`), plain HTTP is judged request by request (`Host` must name the
//!   CONNECT target, else 421), anything else is closed (rule `network.opaque`) — except on a
//!   loopback or private `host:port` entry the policy marks `raw: true`, where raw TCP is
//!   spliced unsniffed.
//! - `GET http://host[:port]/path HTTP/1.1` (absolute form) → the connection is bound to that
//!   host:port (default 80); each request on it is judged like any other, must name the same
//!   host, and is answered with `Connection: close`.
//! - A refusal is `403 Forbidden` with `X-Envgit-Decision: deny; rule=<id>` and the sentence
//!   `envgit: denied CONNECT host:port (rule <id>)` / `envgit: denied GET host/path (rule <id>)`,
//!   in the body shape the client shows a person (`reply.rs`).
//!
//! Every request on a connection, HTTP/1 or HTTP/2, is parsed once by hyper and judged on
//! its own (`forward.rs`), so a second request on a kept-alive connection never passes
//! undecided. The modules serving a connection call only downward (`listener` → `tunnel` →
//! `tls` → `forward` → `ask`) and share what the run set up through `shared.rs`.

mod approvals;
mod approver;
mod ask;
mod body;
mod buffered;
mod ca;
mod canonical;
mod control;
mod control_client;
mod credentials;
mod encoding;
mod events;
mod forward;
mod head;
mod listener;
mod pool;
mod redial;
mod reply;
mod reserved_ports;
mod resolve;
mod rules;
mod serving;
mod shared;
mod socket;
mod splice;
mod tls;
mod tunnel;
mod upstream;
mod upstream_tls;
mod verdict;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use approver::{Answer, Approver, AskFuture, PendingAsk, answered_over_control};
pub use ca::{CaError, RunCa, StoredCa};
pub use control::{CONTROL_TOKEN_FILE, ControlAnswer, ControlOp, ControlRequest};
pub use control_client::{control_request, control_request_via};
pub use credentials::Credential;
pub use events::{
    Announce, ApprovalAnswer, Decision, EventApproval, EventList, GateEvent, LISTED_MAX,
};
pub use reserved_ports::entry_is_live as reserved_port_entry_is_live;
pub use resolve::{Resolve, ResolveError, parse_list as parse_resolve_list};

/// Header carrying the per-run secret on the first request head of every connection.
pub const TOKEN_HEADER: &str = "X-Envgit-Token";
/// Header naming where a relayed connection came from: `tls`, `http`, `forward` or `proxy`.
pub const CAPTURE_HEADER: &str = "X-Envgit-Capture";

pub struct GateConfig {
    /// Where to create the unix socket; its directory must exist (the caller makes it 0700).
    pub socket_path: PathBuf,
    /// The per-run secret every connection must present as [`TOKEN_HEADER`].
    pub token: String,
    pub policy: Arc<envgit_policy::Policy>,
    /// Called with every refusal as it happens.
    pub announce: Option<Announce>,
    /// The CA whose leaves TLS clients inside the sandbox are shown (its certificate must be
    /// in their trust bundle).
    pub ca: Arc<RunCa>,
    /// Upstreams at other addresses (`--resolve`).
    pub resolve: Vec<Resolve>,
    /// PEM certificates trusted for upstreams besides the host's roots.
    pub upstream_ca_pem: Vec<u8>,
    /// Where people answer `ask`; `None` makes every `ask` a refusal.
    pub approvals: Option<ApprovalConfig>,
    /// Requests to a credential's host:port get its secret in place of its placeholder (the
    /// sandbox holds only the placeholder); requests there with a credential of their own are
    /// refused.
    pub credentials: Vec<Credential>,
    /// A directory of files named by port numbers: ports of this machine a running `envgit
    /// ui` serves, refused to the sandbox whatever the policy says (rule `ui.port`). Read on
    /// every connection to this machine, so a UI started after the run is refused too.
    pub reserved_ports: Option<PathBuf>,
}

pub struct ApprovalConfig {
    /// The control socket `envgit status/approve/deny` talk to (in a 0700 directory the
    /// sandbox cannot see).
    pub control_socket: PathBuf,
    /// The secret every control request must carry (the caller stores it, mode 0600, beside
    /// the socket as [`CONTROL_TOKEN_FILE`]); must not be empty.
    pub control_token: String,
    /// How long a request is held before it is refused.
    pub timeout: Duration,
    /// What `envgit status` shows as the run's project.
    pub label: String,
    /// Puts each held request's question to a person; answers come over the control channel
    /// (or from the approver itself). `None`: only `envgit status`/`approve` can see it.
    pub approver: Option<Box<dyn Approver>>,
}

/// Takes a running gate's events; see [`Gate::tap`].
#[derive(Clone)]
pub struct EventTap(Arc<events::Events>);

impl EventTap {
    /// Everything recorded since the last take (by this tap, another, or the gate).
    pub fn take(&self) -> Vec<GateEvent> {
        self.0.take()
    }
}

/// A running gate: one unix listener (and the control channel's), served by a tokio runtime
/// of its own from the first connection on ([`serving`]).
pub struct Gate {
    serving: serving::Serving,
    shutdown: Arc<tokio::sync::Notify>,
    events: Arc<events::Events>,
    socket_path: PathBuf,
    control_socket: Option<PathBuf>,
}

impl Gate {
    /// Binds the unix socket (mode 0600) and starts serving.
    pub fn start(cfg: GateConfig) -> std::io::Result<Gate> {
        if cfg.token.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "envgit-gate: the token must not be empty",
            ));
        }
        if let Err(why) = credentials::validate(&cfg.credentials) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("envgit-gate: {why}"),
            ));
        }
        let events = Arc::new(events::Events::new(cfg.announce));
        let shutdown = Arc::new(tokio::sync::Notify::new());
        let listener = socket::bind(&cfg.socket_path)?;
        let mut control_socket = None;
        let control = match cfg.approvals {
            Some(a) if a.control_token.is_empty() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "envgit-gate: the control token must not be empty",
                ));
            }
            Some(a) => {
                let listener = socket::bind(&a.control_socket)?;
                control_socket = Some(a.control_socket);
                Some(serving::ControlWork {
                    listener,
                    approvals: Arc::new(approvals::Approvals::new(a.timeout, a.approver)),
                    label: Arc::new(a.label),
                    token: Arc::new(a.control_token),
                })
            }
            None => None,
        };
        let shared = Arc::new(shared::Shared {
            token: cfg.token,
            policy: cfg.policy,
            events: Arc::clone(&events),
            ca: cfg.ca,
            resolve: cfg.resolve,
            upstream_trust: upstream_tls::UpstreamTrust::new(cfg.upstream_ca_pem),
            approvals: control.as_ref().map(|c| Arc::clone(&c.approvals)),
            credentials: cfg.credentials,
            reserved_ports: cfg.reserved_ports,
            requests: Arc::new(tokio::sync::Semaphore::new(forward::REQUESTS_AT_ONCE)),
        });
        let serving = serving::Serving::start(serving::Work {
            listener,
            shared,
            control,
            shutdown: Arc::clone(&shutdown),
        });
        let serving = match serving {
            Ok(serving) => serving,
            Err(e) => {
                let _ = std::fs::remove_file(&cfg.socket_path);
                if let Some(control) = &control_socket {
                    let _ = std::fs::remove_file(control);
                }
                return Err(e);
            }
        };
        Ok(Gate {
            serving,
            shutdown,
            events,
            socket_path: cfg.socket_path,
            control_socket,
        })
    }

    /// Whether a connection has come (and a runtime serves the gate since): a gate nobody
    /// connected to stops at once.
    pub fn is_serving(&self) -> bool {
        self.serving.is_serving()
    }

    /// Everything recorded since the last call, in the order connections and requests
    /// finished. A tunnel is recorded when it closes (with its byte counts); one still open
    /// shows up in a later call, or in what [`Gate::stop`] returns.
    pub fn take_events(&self) -> Vec<GateEvent> {
        self.events.take()
    }

    /// A handle that takes events while the gate runs, from another thread (a supervisor
    /// attributing requests to the step that is open when they finish).
    pub fn tap(&self) -> EventTap {
        EventTap(self.events.clone())
    }

    /// Stops accepting, ends open connections, removes the socket, and returns the events not
    /// yet taken (open tunnels included, with the bytes they carried so far).
    pub fn stop(mut self) -> Vec<GateEvent> {
        self.shutdown_now();
        self.events.take()
    }

    fn shutdown_now(&mut self) {
        self.shutdown.notify_one();
        self.serving.stop(Duration::from_millis(200));
        let _ = std::fs::remove_file(&self.socket_path);
        if let Some(control) = &self.control_socket {
            let _ = std::fs::remove_file(control);
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.shutdown_now();
    }
}
