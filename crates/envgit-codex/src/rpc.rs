//! The wire: JSON-RPC-shaped objects without a `"jsonrpc"` field, one per line.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL: i64 = -32603;
/// What Codex's own server answers for a path that does not exist.
pub const NOT_FOUND: i64 = -32004;
/// envgit refused the call (policy).
pub const REFUSED: i64 = -32003;

/// An error answer: code, message, optional data.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(REFUSED, message)
    }

    pub fn io(e: &std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::NotFound {
            Self::new(NOT_FOUND, e.to_string())
        } else {
            Self::new(INTERNAL, e.to_string())
        }
    }

    pub fn errno(e: rustix::io::Errno) -> Self {
        Self::io(&std::io::Error::from(e))
    }
}

pub type RpcResult = Result<Value, RpcError>;

/// The shared output: every thread that answers or notifies writes whole lines through it.
#[derive(Clone)]
pub struct Out(Arc<Mutex<Box<dyn Write + Send>>>, Trace);

/// Where a wire trace goes (`$ENVGIT_CODEX_TRACE`): every line in and out, JSONL.
#[derive(Clone, Default)]
pub struct Trace(Option<Arc<Mutex<std::fs::File>>>);

impl Trace {
    pub fn to_file(f: std::fs::File) -> Self {
        Self(Some(Arc::new(Mutex::new(f))))
    }

    pub fn line(&self, dir: &str, line: &[u8]) {
        if let Some(f) = &self.0
            && let Ok(mut f) = f.lock()
        {
            let _ = f.write_all(dir.as_bytes());
            let _ = f.write_all(line.strip_suffix(b"\n").unwrap_or(line));
            let _ = f.write_all(b"\n");
        }
    }
}

impl Out {
    pub fn new(w: Box<dyn Write + Send>, trace: Trace) -> Self {
        Self(Arc::new(Mutex::new(w)), trace)
    }

    pub fn trace(&self) -> &Trace {
        &self.1
    }

    fn send(&self, v: &Value) {
        let Ok(mut line) = serde_json::to_vec(v) else {
            return;
        };
        line.push(b'\n');
        self.1.line("< ", &line);
        if let Ok(mut w) = self.0.lock() {
            // A closed peer ends the session through the read side; nothing to do here.
            let _ = w.write_all(&line).and_then(|()| w.flush());
        }
    }

    pub fn answer(&self, id: &Value, result: RpcResult) {
        match result {
            Ok(r) => self.send(&json!({"id": id, "result": r})),
            Err(e) => {
                let mut err = json!({"code": e.code, "message": e.message});
                if let Some(d) = e.data {
                    err["data"] = d;
                }
                self.send(&json!({"id": id, "error": err}));
            }
        }
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"method": method, "params": params}));
    }
}
