//! Table tests of request-level judgement.

mod decide;
mod glob_semantics;
mod graphql;
mod identity;
mod matchers;
mod method_override;
mod normalize;
mod parse;
mod path_override;
mod preset;

use crate::{Policy, RequestInfo};

/// `target` is `path[?query]`; the body, when given, is complete.
pub(super) fn req<'a>(
    method: &'a str,
    host: &'a str,
    target: &'a str,
    body: Option<&'a [u8]>,
) -> RequestInfo<'a> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    RequestInfo {
        method,
        method_overrides: &[],
        host,
        port: 443,
        path,
        path_overrides: &[],
        query,
        body,
        body_complete: true,
        content_type: None,
        header_names: &[],
    }
}

/// A git pkt-line.
pub(super) fn pkt(payload: &str) -> String {
    format!("{:04x}{payload}", payload.len() + 4)
}

pub(super) const OLD: &str = "1111111111111111111111111111111111111111";
pub(super) const NEW: &str = "2222222222222222222222222222222222222222";
pub(super) const ZERO: &str = "0000000000000000000000000000000000000000";

/// The body of `git push origin main`: one command, flush, then the pack.
pub(super) fn push_body() -> Vec<u8> {
    let mut b = pkt(&format!(
        "{OLD} {NEW} refs/heads/main\0 report-status side-band-64k agent=git/2.47\n"
    ));
    b.push_str("0000PACK\0\0\0\x02");
    b.into_bytes()
}

pub(super) fn policy(yaml: &str) -> Policy {
    Policy::parse("envgit.yaml", yaml).unwrap()
}
