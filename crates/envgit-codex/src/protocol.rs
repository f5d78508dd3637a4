//! The exec-server's messages as types: the params envgit reads and the results and
//! notifications it sends, in Codex 0.171.0's camelCase names (see the crate docs for the
//! lifecycle). Fields Codex sends that envgit does not use are ignored, as Codex ignores
//! fields it does not know in our answers.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rpc::{RpcError, RpcResult};

/// One line from Codex: a request (`id` and `method`), a notification (`method` only), or an
/// answer to a request we never send (`id` only).
#[derive(Debug, Deserialize)]
pub struct Incoming {
    #[serde(default)]
    pub id: Option<Value>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub params: Value,
}

/// The typed params of `method`, or an invalid-params error that names the method and the
/// field.
pub fn params<T: DeserializeOwned>(method: &str, params: &Value) -> Result<T, RpcError> {
    // Codex sends `params` for every call; a missing one reads as `{}`.
    let params = if params.is_null() {
        &Value::Object(Default::default())
    } else {
        params
    };
    T::deserialize(params).map_err(|e| RpcError::params(format!("{method}: invalid params: {e}")))
}

/// A typed result as the wire value.
pub fn result<T: Serialize>(value: &T) -> RpcResult {
    serde_json::to_value(value)
        .map_err(|e| RpcError::new(crate::rpc::INTERNAL, format!("cannot encode result: {e}")))
}

/// A notification's params as the wire value. These types encode to JSON objects whatever
/// their contents, so the `Null` fallback is never taken.
pub fn notification<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// An empty result, `{}`.
#[derive(Debug, Default, Serialize)]
pub struct Empty {}

// `initialize`

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub session_id: String,
    pub environment_info: EnvironmentInfo,
}

#[derive(Debug, Serialize)]
pub struct EnvironmentInfo {
    pub shell: Shell,
    /// A `file://` URI.
    pub cwd: String,
}

#[derive(Debug, Serialize)]
pub struct Shell {
    pub name: String,
    pub path: String,
}

// `process/*`

/// `process/start`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartParams {
    /// Chosen by Codex.
    pub process_id: String,
    pub argv: Vec<String>,
    /// A `file://` URI or an absolute path; the host's default when absent.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub tty: bool,
    #[serde(default)]
    pub pipe_stdin: bool,
    #[serde(default)]
    pub metadata: Option<StartMetadata>,
    /// Codex's own sandbox request (recorded as intent, never obeyed instead of envgit's).
    #[serde(default)]
    pub sandbox: Option<Value>,
    #[serde(default)]
    pub managed_network: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartMetadata {
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartResult {
    pub process_id: String,
    /// Always `none`: the sandbox is envgit's, outside Codex's view.
    pub sandbox_type: &'static str,
}

/// `process/terminate`, and the process part of the others.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessRef {
    pub process_id: String,
}

/// `process/write`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteParams {
    pub process_id: String,
    /// Base64.
    pub chunk: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum WriteStatus {
    Accepted,
    UnknownProcess,
    StdinClosed,
}

#[derive(Debug, Serialize)]
pub struct WriteResult {
    pub status: WriteStatus,
}

/// `process/signal`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalParams {
    pub process_id: String,
    /// `interrupt`, `terminate`, `kill`, `hangup`, `quit` (or `SIGINT`-style names).
    pub signal: String,
}

#[derive(Debug, Serialize)]
pub struct TerminateResult {
    pub running: bool,
}

/// `process/read`: a long poll.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadParams {
    pub process_id: String,
    #[serde(default)]
    pub after_seq: Option<u64>,
    #[serde(default)]
    pub max_bytes: Option<u64>,
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadResult {
    pub chunks: Vec<Chunk>,
    pub next_seq: u64,
    pub exited: bool,
    pub exit_code: Option<i32>,
    pub closed: bool,
    pub failure: Option<String>,
    pub sandbox_denied: bool,
}

/// Output of a process: in `process/read` and, with the process id, `process/output`.
#[derive(Debug, Serialize)]
pub struct Chunk {
    pub seq: u64,
    /// `stdout`, `stderr`, or `pty` for a tty process.
    pub stream: &'static str,
    /// Base64.
    pub chunk: String,
}

/// `process/output`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputNotification {
    pub process_id: String,
    #[serde(flatten)]
    pub chunk: Chunk,
}

/// `process/exited`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitedNotification {
    pub process_id: String,
    pub seq: u64,
    pub exit_code: i32,
    pub sandbox_denied: bool,
}

/// `process/closed`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClosedNotification {
    pub process_id: String,
    pub seq: u64,
}

// `fs/*`

/// `fs/getMetadata`, `fs/readFile`, `fs/readDirectory`, `fs/canonicalize`.
#[derive(Debug, Deserialize)]
pub struct PathParams {
    /// A `file://` URI or an absolute path.
    pub path: String,
}

/// `fs/writeFile`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteFileParams {
    pub path: String,
    pub data_base64: String,
}

/// `fs/createDirectory`.
#[derive(Debug, Deserialize)]
pub struct CreateDirectoryParams {
    pub path: String,
    #[serde(default)]
    pub recursive: bool,
}

/// `fs/remove`.
#[derive(Debug, Deserialize)]
pub struct RemoveParams {
    pub path: String,
    #[serde(default)]
    pub recursive: bool,
    #[serde(default)]
    pub force: bool,
}

/// `fs/copy`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyParams {
    pub source_path: String,
    pub destination_path: String,
    #[serde(default)]
    pub recursive: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub is_directory: bool,
    pub is_file: bool,
    pub is_symlink: bool,
    pub size: u64,
    pub created_at_ms: i64,
    pub modified_at_ms: i64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadFileResult {
    pub data_base64: String,
}

#[derive(Debug, Serialize)]
pub struct ReadDirectoryResult {
    pub entries: Vec<DirectoryEntry>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryEntry {
    pub file_name: String,
    pub is_directory: bool,
    pub is_file: bool,
}

/// `fs/canonicalize`.
#[derive(Debug, Serialize)]
pub struct CanonicalPath {
    /// A `file://` URI.
    pub path: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    /// A `process/start` as Codex 0.171.0 sent it (reference trace), extra fields and all.
    #[test]
    fn a_real_process_start_reads() {
        let wire = json!({
            "processId": "24034-23d20b7e",
            "metadata": {"threadId": "01a2", "toolCallId": "call_2"},
            "argv": ["/bin/bash", "-lc", "echo step1 > a.txt && cat a.txt"],
            "cwd": "file:///w",
            "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [], "set": {}, "includeOnly": []},
            "env": {"CODEX_TOOL_CALL_ID": "call_2", "TERM": "dumb"},
            "tty": false, "pipeStdin": false, "arg0": null,
            "sandbox": null, "enforceManagedNetwork": false, "managedNetwork": null
        });
        let p: StartParams = params("process/start", &wire).unwrap();
        assert_eq!(p.process_id, "24034-23d20b7e");
        assert_eq!(p.argv[0], "/bin/bash");
        assert_eq!(p.cwd.as_deref(), Some("file:///w"));
        assert_eq!(p.env.get("TERM").map(String::as_str), Some("dumb"));
        assert_eq!(
            p.metadata.and_then(|m| m.tool_call_id).as_deref(),
            Some("call_2")
        );
        assert!(p.sandbox.is_none() && !p.tty && !p.pipe_stdin);
    }

    #[test]
    fn bad_params_name_the_method_and_the_field() {
        let e = params::<StartParams>("process/start", &json!({"argv": ["x"]})).unwrap_err();
        assert_eq!(e.code, crate::rpc::INVALID_PARAMS);
        assert!(e.message.contains("process/start"), "{}", e.message);
        assert!(e.message.contains("processId"), "{}", e.message);
        let e = params::<WriteFileParams>("fs/writeFile", &json!({"path": 3})).unwrap_err();
        assert!(e.message.contains("fs/writeFile"), "{}", e.message);
    }

    #[test]
    fn answers_use_codex_names() {
        let r = result(&ReadResult {
            chunks: vec![Chunk {
                seq: 1,
                stream: "stdout",
                chunk: "eA==".into(),
            }],
            next_seq: 2,
            exited: true,
            exit_code: Some(0),
            closed: false,
            failure: None,
            sandbox_denied: false,
        })
        .unwrap();
        assert_eq!(
            r,
            json!({"chunks": [{"seq": 1, "stream": "stdout", "chunk": "eA=="}], "nextSeq": 2,
                   "exited": true, "exitCode": 0, "closed": false, "failure": null,
                   "sandboxDenied": false})
        );
        let n = notification(&OutputNotification {
            process_id: "p".into(),
            chunk: Chunk {
                seq: 3,
                stream: "pty",
                chunk: "eA==".into(),
            },
        });
        assert_eq!(
            n,
            json!({"processId": "p", "seq": 3, "stream": "pty", "chunk": "eA=="})
        );
        let w = result(&WriteResult {
            status: WriteStatus::StdinClosed,
        })
        .unwrap();
        assert_eq!(w, json!({"status": "stdinClosed"}));
    }
}
