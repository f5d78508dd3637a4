//! The Content-Security-Policy of the pages: scripts only from files of the page's own origin
//! (never inline), so agent-written text that slipped into markup still could not run.

/// Sent as a header by `envgit ui`.
pub(crate) const SERVED: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                                 img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'";

/// Written as a `<meta>` element into an export's pages (opened from disk, there is no header).
/// The same, less what a page with no server needs or a meta element cannot carry: no
/// `connect-src` (nothing is fetched) and no `frame-ancestors` (ignored in a meta element).
pub(crate) const EXPORTED: &str =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:";
