//! Why a query string or form body (`application/x-www-form-urlencoded`,
//! `multipart/form-data`) cannot be read. A matcher that needs it cannot decide, and says this.

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FormError {
    #[error("an invalid `%` escape")]
    InvalidEscape,
    #[error("not text")]
    NotText,
    #[error("no boundary line")]
    NoBoundaryLine,
    /// Shorter than `--` and one character, or longer than RFC 2046's 70 after `--`.
    #[error("bad boundary")]
    BadBoundary,
    #[error("bad part headers")]
    BadPartHeaders,
    #[error("bad part delimiter")]
    BadPartDelimiter,
    /// The whole body was read and the closing delimiter never came.
    #[error("multipart body ends early")]
    EndsEarly,
}
