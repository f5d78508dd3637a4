//! What a call returns: the cell's text, notes, and a footer naming the step, with the step's
//! numbers in `_meta`; and the step's one-line summary and `low-return` flag.

use envgit_repl::{CellOutcome, CellStatus};
use envgit_store::{Step, StepFlag};
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::json;

use super::error::ExecuteError;

/// A step is flagged `low-return` when it read at least this much…
pub const LOW_RETURN_MIN_IN: u64 = 64 * 1024;
/// …and returned at most this percentage of it.
pub const LOW_RETURN_PERCENT: u64 = 1;

pub fn low_return(bytes_in: u64, bytes_out: u64) -> bool {
    bytes_in >= LOW_RETURN_MIN_IN && bytes_out * 100 <= bytes_in * LOW_RETURN_PERCENT
}

/// `(status, text, is_error, characters cut)`.
pub(super) fn render(
    outcome: &Result<CellOutcome, ExecuteError>,
) -> (&'static str, String, bool, u64) {
    match outcome {
        Err(e) => ("error", format!("envgit: {e}"), true, 0),
        Ok(o) => {
            let mut text = o.text.clone();
            if let Some(e) = &o.error {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(e);
            }
            if o.wrapped {
                text.push_str(
                    "\n(note: the cell has a top-level `return`, so it ran as a function and its \
                     declarations do not persist; end with an expression instead)",
                );
            }
            if let Some(n) = &o.notice {
                text.push_str(&format!("\n(note: {n})"));
            }
            (
                o.status.as_str(),
                text,
                o.status != CellStatus::Ok,
                o.truncated_chars as u64,
            )
        }
    }
}

pub(super) fn summary(session: &str, code: &str, bytes_in: u64, bytes_out: u64) -> String {
    let first = code
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut line: String = first.chars().take(60).collect();
    if first.chars().count() > 60 || code.lines().filter(|l| !l.trim().is_empty()).count() > 1 {
        line.push('…');
    }
    let mut s = format!("execute[{session}] {line}");
    if bytes_in > 0 {
        s.push_str(&format!(
            "  (in {}, out {})",
            crate::output::size(bytes_in),
            crate::output::size(bytes_out)
        ));
    }
    s
}

/// A committed (or failed) step's call, as the call's result shows it.
pub(super) struct Rendered<'a> {
    pub(super) step: &'a Result<Step, ExecuteError>,
    pub(super) session: &'a str,
    pub(super) calls: usize,
    pub(super) bytes_in: u64,
    pub(super) bytes_out: u64,
    pub(super) status: &'static str,
    pub(super) text: String,
    pub(super) is_error: bool,
    /// The note on a rewind followed before the cell ran.
    pub(super) rewound: Option<String>,
}

/// The call's result: the text, a footer naming the step, and the step's numbers in `_meta`.
pub(super) fn result(r: Rendered<'_>) -> CallToolResult {
    let Rendered {
        step,
        session: session_name,
        calls,
        bytes_in,
        bytes_out,
        status,
        text,
        is_error,
        rewound,
    } = r;
    let (footer, step_no, is_error) = match &step {
        Ok(s) => (
            format!(
                "[step {} · session {session_name} · read {} in {} call{} · returned {}{}]",
                s.number,
                crate::output::size(bytes_in),
                calls,
                if calls == 1 { "" } else { "s" },
                crate::output::size(bytes_out),
                if s.has_flag(StepFlag::LowReturn) {
                    " · low-return"
                } else {
                    ""
                }
            ),
            Some(s.number),
            is_error,
        ),
        Err(e) => (
            format!("[envgit could not record this step: {e}]"),
            None,
            true,
        ),
    };
    let text = match rewound {
        Some(note) if text.is_empty() => format!("(note: {note})"),
        Some(note) => format!("(note: {note})\n{text}"),
        None => text,
    };
    let body = if text.is_empty() {
        footer
    } else {
        format!("{text}\n{footer}")
    };
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(body)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(body)])
    };
    let mut meta = serde_json::Map::new();
    meta.insert("envgit/step".into(), json!(step_no));
    meta.insert("envgit/session".into(), json!(session_name));
    meta.insert("envgit/status".into(), json!(status));
    meta.insert("envgit/bytesIn".into(), json!(bytes_in));
    meta.insert("envgit/bytesOut".into(), json!(bytes_out));
    result.meta = Some(MetaObject(meta));
    result
}
