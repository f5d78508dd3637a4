//! A request is judged at every path it may be routed by: its own, and each path its
//! `X-Original-URL` or `X-Rewrite-URL` names (IIS's URL Rewrite, frameworks trusting a front
//! proxy). Where they differ, a `deny`/`ask` rule matching any of them matches (fail closed),
//! an `l7` permission must hold for all of them, and an `allow` rule that holds for some only
//! marks the request.

use crate::{RequestDecision, RequestInfo};

use super::{policy, req};

const POLICY: &str = "version: 1\nnetwork:\n  l7:\n    read.example.com: { paths: [\"/docs/**\"] }\nirreversible:\n  - net: { host: \"api.example.com\", method: GET, path: \"/items\" }\n    action: allow\n    id: list.items\n  - net: { host: \"api.example.com\", method: POST, path: \"/admin/**\" }\n    action: deny\n    id: admin\n";

fn decide(target: &str, overrides: &[&str]) -> RequestDecision {
    let (method, url) = target.split_once(' ').unwrap_or_default();
    let (host, path) = url.split_at(url.find('/').unwrap_or_default());
    let r = RequestInfo {
        path_overrides: overrides,
        ..req(method, host, path, Some(b""))
    };
    policy(POLICY).decide_request(&r)
}

fn rule(d: &RequestDecision) -> String {
    match d {
        RequestDecision::Allow => "allow".to_owned(),
        RequestDecision::Marked { rule, .. } => format!("marked:{rule}"),
        RequestDecision::Deny { rule, .. } | RequestDecision::Ask { rule, .. } => rule.clone(),
    }
}

#[test]
fn a_request_is_judged_at_every_path_it_names() {
    let rows: &[(&str, &[&str], &str)] = &[
        ("POST api.example.com/items", &[], "allow"),
        ("POST api.example.com/items", &["/admin/users"], "admin"),
        (
            "POST api.example.com/items",
            &["/a/../admin/users"],
            "admin",
        ),
        ("POST api.example.com/admin/users", &["/items"], "admin"),
        (
            "POST api.example.com/items",
            &["/items", "/admin/x"],
            "admin",
        ),
        // The same path again changes nothing.
        ("POST api.example.com/items", &["/items"], "allow"),
        // An allow rule that holds at one path only does not decide, and marks.
        (
            "GET api.example.com/items",
            &["/other"],
            "marked:list.items",
        ),
        (
            "GET api.example.com/items",
            &["/items"],
            "marked:list.items",
        ),
        // l7 must permit every path.
        ("GET read.example.com/docs/a", &[], "allow"),
        (
            "GET read.example.com/docs/a",
            &["/private/a"],
            "l7.read.example.com",
        ),
        ("GET read.example.com/docs/a", &["/docs/b"], "allow"),
    ];
    let mut failed = Vec::new();
    for (target, overrides, want) in rows {
        let got = decide(target, overrides);
        if rule(&got) != *want {
            failed.push(format!("{target} {overrides:?} => {want}: got {got:?}"));
        }
    }
    assert!(failed.is_empty(), "failed rows:\n{}", failed.join("\n"));
}
