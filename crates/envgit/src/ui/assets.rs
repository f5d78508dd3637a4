//! The page: plain HTML, CSS and JavaScript files embedded in the binary (no build step).
//! Every script is a file of its own (the CSP allows no inline script) and inserts what the
//! agent wrote with `textContent`, never as HTML.

/// `(path, content type, bytes)` for each file the server and the export serve.
pub(crate) const ASSETS: &[(&str, &str, &[u8])] = &[
    ("/", HTML, include_bytes!("assets/index.html")),
    ("/step", HTML, include_bytes!("assets/step.html")),
    (
        "/ui.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/ui.css"),
    ),
    ("/mode.js", JS, include_bytes!("assets/mode.js")),
    ("/common.js", JS, include_bytes!("assets/common.js")),
    ("/timeline.js", JS, include_bytes!("assets/timeline.js")),
    ("/step.js", JS, include_bytes!("assets/step.js")),
];

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

pub(crate) fn find(path: &str) -> Option<(&'static str, &'static [u8])> {
    ASSETS
        .iter()
        .find(|(p, _, _)| *p == path)
        .map(|(_, t, b)| (*t, *b))
}
