//! envgit's own answers to a client: a refusal (`403` naming the rule, in the shape the
//! client shows a person), or a `400`/`408`/`421`/`431`/`502`/`504` the gate writes itself.
//! What is refused is decided elsewhere (`verdict.rs`, the policy, `canonical.rs`).

use crate::rules::RULE_MALFORMED;

/// An answer of envgit's own: a refusal, or a 400/421/431/502. HTTP/1 connections get it as
/// bytes ([`Reply::to_http1`]); HTTP/2 streams build a response from its parts.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) phrase: String,
    /// `X-Envgit-*` headers, already header-safe.
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) content_type: &'static str,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn to_http1(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, self.phrase);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!(
            "Content-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.content_type,
            self.body.len()
        ));
        let mut out = head.into_bytes();
        out.extend_from_slice(self.body.as_bytes());
        out
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// `X-Envgit-Decision: deny; rule=<id>` and, when there is one, `X-Envgit-Reason`.
fn decision_headers(rule: &str, reason: &str) -> Vec<(&'static str, String)> {
    let mut headers = vec![(
        "X-Envgit-Decision",
        format!("deny; rule={}", header_safe(rule)),
    )];
    if !reason.is_empty() {
        headers.push(("X-Envgit-Reason", header_safe(reason)));
    }
    headers
}

/// `403 Forbidden` with `X-Envgit-Decision: deny; rule=<id>` and the body
/// `envgit: denied <what> (rule <id>)\n`. `what` is `CONNECT host:port` or `GET host/path`.
pub(crate) fn forbidden(what: &str, rule: &str, reason: &str) -> Reply {
    Reply {
        status: 403,
        phrase: "Forbidden".into(),
        headers: decision_headers(rule, reason),
        content_type: TEXT,
        body: format!("envgit: denied {what} (rule {rule})\n"),
    }
}

/// The error shape a client shows a person, read off the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Git LFS shows only the `message` of an `application/vnd.git-lfs+json` body.
    Lfs,
    /// OCI clients (skopeo, crane, oras) show `errors[].message`, code `DENIED`.
    Oci,
    /// Decided by the rule's family (npm, cargo, GitHub) or plain text.
    ByRule,
}

impl Shape {
    pub(crate) fn of(path: &str, content_type: Option<&str>) -> Shape {
        let lfs_type = content_type.is_some_and(|t| t.contains("application/vnd.git-lfs"));
        if lfs_type || path.contains("/info/lfs/") {
            Shape::Lfs
        } else if path.starts_with("/v2/") {
            Shape::Oci
        } else {
            Shape::ByRule
        }
    }
}

/// A refusal in the shape the client shows a person: npm and cargo print a JSON `error` /
/// `errors[].detail`, GitHub clients a JSON `message`, git-lfs a `message` in its own media
/// type, OCI clients `errors[].message`; git and everything else print text. The reason
/// phrase carries the sentence too (twine prints only the status line).
pub(crate) fn forbidden_for_client(what: &str, rule: &str, reason: &str, shape: Shape) -> Reply {
    let text = format!("envgit: denied {what} (rule {rule})");
    let json = |value: serde_json::Value| value.to_string() + "\n";
    let (content_type, body) = if shape == Shape::Lfs {
        (
            "application/vnd.git-lfs+json",
            json(serde_json::json!({ "message": text })),
        )
    } else if shape == Shape::Oci {
        (
            "application/json",
            json(
                serde_json::json!({ "errors": [{ "code": "DENIED", "message": text, "detail": reason }] }),
            ),
        )
    } else if rule.starts_with("npm.") {
        (
            "application/json",
            json(serde_json::json!({ "error": text, "reason": reason })),
        )
    } else if rule.starts_with("crates.") {
        (
            "application/json",
            json(serde_json::json!({ "errors": [{ "detail": text }] })),
        )
    } else if rule.starts_with("github.") {
        (
            "application/json",
            json(
                serde_json::json!({ "message": text, "documentation_url": "https://envgit.invalid/rules" }),
            ),
        )
    } else {
        (TEXT, format!("{text}\n"))
    };
    Reply {
        status: 403,
        phrase: header_safe(&format!("Forbidden ({text})")),
        headers: decision_headers(rule, reason),
        content_type,
        body,
    }
}

/// `400` for a request the gate cannot read one way only (rule `gate.malformed`).
pub(crate) fn malformed(why: &str) -> Reply {
    Reply {
        status: 400,
        phrase: "Bad Request".into(),
        headers: decision_headers(RULE_MALFORMED, why),
        content_type: TEXT,
        body: format!("envgit: refused a malformed request: {why} (rule {RULE_MALFORMED})\n"),
    }
}

/// A short plain-text answer of envgit's own (400, 421, 502 …).
pub(crate) fn plain(status: u16, phrase: &str, body: &str) -> Reply {
    Reply {
        status,
        phrase: phrase.to_owned(),
        headers: Vec::new(),
        content_type: TEXT,
        body: body.to_owned(),
    }
}

/// Printable ASCII only, so nothing from a request can end a header line.
fn header_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// `host/path` for messages, with `:port` when it is not 80 or 443: the one spelling of a
/// target, in refusals and in envgit's own lines alike.
pub(crate) fn http_what(method: &str, host: &str, port: u16, path: &str) -> String {
    if port == 80 || port == 443 {
        format!("{method} {host}{path}")
    } else {
        format!("{method} {}{path}", crate::head::authority(host, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_json(r: &Reply) -> serde_json::Value {
        serde_json::from_str(&r.body).unwrap()
    }

    /// Each client shows the sentence where it looks: twine the reason phrase, git-lfs a
    /// `message` in its own media type, OCI clients `errors[].message` with code DENIED,
    /// npm `error`, cargo `errors[].detail`, GitHub clients `message`, git the text.
    #[test]
    fn refusals_come_in_the_shape_each_client_shows() {
        let what = "POST upload.pypi.org/legacy/";
        let sentence = format!("envgit: denied {what} (rule pypi.upload)");
        let twine = forbidden_for_client(what, "pypi.upload", "r", Shape::of("/legacy/", None));
        assert_eq!(twine.phrase, format!("Forbidden ({sentence})"));
        assert_eq!(twine.body, format!("{sentence}\n"));

        let lfs_type = Some("application/vnd.git-lfs+json");
        let lfs = forbidden_for_client(
            "POST h/r.git/info/lfs/objects/batch",
            "lfs.upload",
            "r",
            Shape::of("/r.git/info/lfs/objects/batch", lfs_type),
        );
        assert_eq!(lfs.content_type, "application/vnd.git-lfs+json");
        assert!(
            body_json(&lfs)["message"]
                .as_str()
                .unwrap()
                .contains("(rule lfs.upload)")
        );

        let oci = forbidden_for_client(
            "PUT ghcr.io/v2/o/i/manifests/1",
            "oci.push",
            "r",
            Shape::of("/v2/o/i/manifests/1", None),
        );
        let e = &body_json(&oci)["errors"][0];
        assert_eq!(e["code"], "DENIED");
        assert!(e["message"].as_str().unwrap().contains("(rule oci.push)"));

        let npm = forbidden_for_client("PUT r/x", "npm.publish", "r", Shape::ByRule);
        assert!(
            body_json(&npm)["error"]
                .as_str()
                .unwrap()
                .contains("(rule npm.publish)")
        );
        let cargo = forbidden_for_client("PUT c/x", "crates.publish", "r", Shape::ByRule);
        assert!(
            body_json(&cargo)["errors"][0]["detail"]
                .as_str()
                .unwrap()
                .contains("crates.publish")
        );
        let gh = forbidden_for_client("POST a/x", "github.rest.write", "r", Shape::ByRule);
        assert!(
            body_json(&gh)["message"]
                .as_str()
                .unwrap()
                .contains("github.rest.write")
        );
        // Nothing from the request can end the status line.
        let odd = forbidden_for_client("POST h/a\r\nx", "r", "", Shape::ByRule);
        assert!(!odd.phrase.contains('\r') && !odd.phrase.contains('\n'));
    }

    #[test]
    fn one_spelling_of_a_target() {
        assert_eq!(http_what("GET", "h", 443, "/p"), "GET h/p");
        assert_eq!(http_what("GET", "h", 80, "/p"), "GET h/p");
        assert_eq!(
            http_what("GET", "127.0.0.1", 8080, "/p"),
            "GET 127.0.0.1:8080/p"
        );
    }
}
