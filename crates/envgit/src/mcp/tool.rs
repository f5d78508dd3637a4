//! The `execute` tool as the client sees it: its schema and description, and its arguments
//! read and checked.

use std::sync::Arc;

use envgit_repl::Limits;
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::{Value, json};

use super::error::ArgsError;

pub(super) fn tool_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

pub(super) struct ExecuteArgs {
    pub(super) code: String,
    pub(super) session: Option<String>,
    pub(super) timeout_ms: Option<u64>,
}

pub(super) fn parse_args(
    args: Option<&serde_json::Map<String, Value>>,
) -> Result<ExecuteArgs, ArgsError> {
    let empty = serde_json::Map::new();
    let args = args.unwrap_or(&empty);
    for k in args.keys() {
        if !["code", "session", "timeout_ms"].contains(&k.as_str()) {
            return Err(ArgsError::Unknown(k.clone()));
        }
    }
    let code = match args.get("code") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ArgsError::CodeNotText),
        None => return Err(ArgsError::CodeMissing),
    };
    let session = match args.get("session") {
        None | Some(Value::Null) => None,
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= 64
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
        {
            Some(s.clone())
        }
        Some(_) => {
            return Err(ArgsError::BadSession);
        }
    };
    let timeout_ms = match args.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            _ => return Err(ArgsError::BadTimeout),
        },
    };
    Ok(ExecuteArgs {
        code,
        session,
        timeout_ms,
    })
}

pub(super) fn description(index: &str, limits: &Limits) -> String {
    let tools = if index.is_empty() {
        "No downstream MCP servers are configured (mcp.servers in envgit.yaml).".to_string()
    } else {
        format!(
            "Downstream servers, as globals of async functions `server.tool(args)`: {index}. \
             `tools.list()`, `tools.search(words)` and `tools.describe(\"server.tool\")` (its \
             TypeScript declaration) show what exists."
        )
    };
    format!(
        "Run JavaScript in a sandboxed REPL (QuickJS). The value of the last expression is \
         returned, with anything printed by console.log. Top-level await works. Declarations \
         persist between calls of the same `session` (omit it for the default session; a new \
         name starts a fresh one). There is no filesystem, network, require, process or timers: \
         the only way out is the tool functions. {tools} Helpers: sample(x, n), schema(x), \
         assert(cond, msg). Keep what you return small: filter and summarise in code. Limits: \
         {} s per call by default (timeout_ms, up to {} s), {} MiB heap, {} characters of \
         output. Every call is recorded as an envgit step.",
        limits.timeout.as_secs(),
        limits.max_timeout.as_secs(),
        limits.memory >> 20,
        limits.output_chars
    )
}

pub(super) fn execute_tool(description: &str) -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "JavaScript to run; the value of the last expression is returned"},
            "session": {"type": "string", "description": "REPL session name; omit for the default session"},
            "timeout_ms": {"type": "integer", "minimum": 1, "description": "wall-clock budget of this call in milliseconds"}
        },
        "required": ["code"],
        "additionalProperties": false
    });
    let schema = match schema {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    let mut tool = Tool::new("execute", description.to_string(), Arc::new(schema));
    let mut ann = ToolAnnotations::default();
    ann.read_only_hint = Some(false);
    ann.open_world_hint = Some(true);
    tool.annotations = Some(ann);
    tool
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(v: Value) -> Result<ExecuteArgs, ArgsError> {
        parse_args(v.as_object())
    }

    #[test]
    fn arguments_are_checked_and_each_refusal_says_what_to_send() {
        let ok = parse(json!({"code": "1+1", "session": "a-1", "timeout_ms": 5})).unwrap();
        assert_eq!(
            (ok.code.as_str(), ok.session.as_deref(), ok.timeout_ms),
            ("1+1", Some("a-1"), Some(5))
        );
        let refused = |v: Value| parse(v).err().map(|e| (e.to_string(), e));
        let (msg, e) = refused(json!({"code": "1", "cwd": "/"})).unwrap();
        assert_eq!(e, ArgsError::Unknown("cwd".into()));
        assert!(msg.contains("`cwd`") && msg.contains("execute takes code, session, timeout_ms"));
        assert_eq!(refused(json!({})).unwrap().1, ArgsError::CodeMissing);
        assert_eq!(
            refused(json!({"code": 1})).unwrap().1,
            ArgsError::CodeNotText
        );
        assert_eq!(
            refused(json!({"code": "1", "session": "a b"})).unwrap().1,
            ArgsError::BadSession
        );
        assert_eq!(
            refused(json!({"code": "1", "timeout_ms": 0})).unwrap().1,
            ArgsError::BadTimeout
        );
    }
}
