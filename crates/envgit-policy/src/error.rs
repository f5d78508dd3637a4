//! The one error type: every problem in a policy file points at `file:line:col`.

/// A policy file problem, with the 1-based position of the offending node and a message that
/// says what would be valid. Displays as `{file}:{line}:{column}: {message}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct PolicyError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl PolicyError {
    pub(crate) fn new(file: &str, line: usize, column: usize, message: impl Into<String>) -> Self {
        PolicyError {
            file: file.to_owned(),
            line: line.max(1),
            column: column.max(1),
            message: message.into(),
        }
    }
}
