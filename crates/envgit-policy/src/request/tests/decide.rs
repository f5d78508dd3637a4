//! Order of judgement: `l7`, then `irreversible` in order with presets expanded in place.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::{Policy, RequestDecision, RequestInfo};

use super::{policy, push_body, req};

fn marked(rule: &str, summary: &str) -> RequestDecision {
    RequestDecision::Marked {
        rule: rule.into(),
        summary: summary.into(),
    }
}

#[test]
fn an_allow_above_the_preset_overrides_it() {
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"github.com\", method: POST, path: \"/me/**/git-receive-pack\" }\n    action: allow\n    id: push.mine\n  - net: { host: \"*.example.com\" }\n    action: allow\n  - preset: default\n",
    );
    let push = push_body();
    assert_eq!(
        p.decide_request(&req(
            "POST",
            "github.com",
            "/me/app.git/git-receive-pack",
            Some(&push)
        )),
        marked("push.mine", "POST github.com/me/app.git/git-receive-pack")
    );
    assert_eq!(
        p.decide_request(&req(
            "POST",
            "git.example.com",
            "/x/git-receive-pack",
            Some(&push)
        ))
        .rule(),
        Some("net.1")
    );
    // not covered by the allow: the preset still denies
    let d = p.decide_request(&req(
        "POST",
        "github.com",
        "/other/app.git/git-receive-pack",
        Some(&push),
    ));
    assert!(
        matches!(&d, RequestDecision::Deny { rule, .. } if rule == "git.push"),
        "{d:?}"
    );
    // the probe matches no rule at all
    assert_eq!(
        p.decide_request(&req(
            "POST",
            "github.com",
            "/other/app.git/git-receive-pack",
            Some(b"0000")
        )),
        RequestDecision::Allow
    );
}

#[test]
fn preset_action_applies_to_every_entry() {
    let p = policy("version: 1\nirreversible:\n  - preset: default\n    action: ask\n");
    let d = p.decide_request(&req("PUT", "registry.npmjs.org", "/pkg", None));
    assert!(
        matches!(&d, RequestDecision::Ask { rule, .. } if rule == "npm.publish"),
        "{d:?}"
    );
    let p = policy("version: 1\nirreversible:\n  - preset: default\n    action: allow\n");
    let d = p.decide_request(&req("DELETE", "api.github.com", "/repos/o/r", Some(b"")));
    assert!(
        matches!(&d, RequestDecision::Marked { rule, .. } if rule == "github.rest.write"),
        "{d:?}"
    );
}

#[test]
fn allow_rules_do_not_match_what_they_cannot_evaluate() {
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: api.github.com, method: POST, path: /graphql, body: { graphql_operation: query } }\n    action: allow\n  - net: { host: api.github.com, method: POST, path: /graphql }\n    action: deny\n    id: gql.rest\n",
    );
    let q = br#"{"query":"{ viewer { login } }"}"#;
    assert_eq!(
        p.decide_request(&req("POST", "api.github.com", "/graphql", Some(q)))
            .rule(),
        Some("net.0")
    );
    for body in [None, Some(&b"garbage"[..])] {
        let d = p.decide_request(&req("POST", "api.github.com", "/graphql", body));
        assert_eq!(d.rule(), Some("gql.rest"), "{d:?}");
    }
    // an allow whose path readings disagree does not apply either
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"*\", path: \"/ok/*\" }\n    action: allow\n  - net: { host: \"*\" }\n    action: deny\n",
    );
    assert_eq!(
        p.decide_request(&req("GET", "h", "/ok/a", Some(b"")))
            .rule(),
        Some("net.0")
    );
    assert_eq!(
        p.decide_request(&req("GET", "h", "/ok/a%2Fb", Some(b"")))
            .rule(),
        Some("net.1")
    );
}

/// In mark mode (the preset's `action: allow`) a request a rule cannot rule out is let out
/// marked by that rule, as a deny-mode preset would have refused it: never let out unmarked.
#[test]
fn mark_mode_marks_what_it_cannot_rule_out() {
    let p = policy("version: 1\nirreversible:\n  - preset: default\n    action: allow\n");
    let deny = policy("version: 1\nirreversible:\n  - preset: default\n");
    let deep = format!(
        r#"{{"name":"x","versions":{{}},"n":{}1{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let form = "multipart/form-data; boundary=B";
    let bare_lf =
        b"--B\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n--B--\r\n";
    let cases: Vec<(RequestInfo<'_>, &str)> = vec![
        // a packument serde_json cannot read, on a host where the body decides
        (
            req("PUT", "npm.example.com", "/pkg", Some(deep.as_bytes())),
            "npm.publish",
        ),
        (
            req("PUT", "npm.example.com", "/pkg", Some(br#"{"d":"\ud800"}"#)),
            "npm.publish",
        ),
        // a packument longer than the prefix the gate reads
        (
            RequestInfo {
                body_complete: false,
                ..req("PUT", "npm.example.com", "/pkg", Some(br#"{"name":"pkg""#))
            },
            "npm.publish",
        ),
        // a body never read
        (req("PUT", "npm.example.com", "/pkg", None), "npm.publish"),
        // an upload form a lenient parser reads another way
        (
            RequestInfo {
                content_type: Some(form),
                ..req("POST", "pypi.example.com", "/legacy/", Some(bare_lf))
            },
            "pypi.upload",
        ),
    ];
    for (r, rule) in cases {
        let d = p.decide_request(&r);
        assert!(
            matches!(&d, RequestDecision::Marked { rule: got, summary }
                if got == rule && summary.contains("[not evaluated: ")),
            "{} {}{}: {d:?}",
            r.method,
            r.host,
            r.path
        );
        // the same request is refused by the same rule in deny mode
        assert_eq!(deny.decide_request(&r).rule(), Some(rule), "{}", r.path);
    }
    // what the rules rule out is still not marked
    assert_eq!(
        p.decide_request(&req("PUT", "npm.example.com", "/pkg", Some(b"[1]"))),
        RequestDecision::Allow
    );
    assert!(p.needs_body(&req("PUT", "npm.example.com", "/pkg", None)));
}

/// An `allow` that cannot be evaluated does not decide: a `deny` or `ask` after it still
/// takes the request; a later rule that surely matches decides; the allow's mark is only
/// what is left when no later rule decides. An allow that matches still overrides the preset.
#[test]
fn an_allow_that_cannot_be_evaluated_never_preempts_a_later_rule() {
    let mine = "  - net: { host: \"npm.example.com\", method: PUT, body: { json_field: { name: mine } } }\n    action: allow\n    id: publish.mine\n";
    let p = policy(&format!(
        "version: 1\nirreversible:\n{mine}  - preset: default\n"
    ));
    let unreadable = br#"{"name":"mine","versions":{"1.0.0":{}},"d":"\ud800"}"#;
    let d = p.decide_request(&req("PUT", "npm.example.com", "/mine", Some(unreadable)));
    assert!(
        matches!(&d, RequestDecision::Deny { rule, .. } if rule == "npm.publish"),
        "{d:?}"
    );
    let d = p.decide_request(&req("PUT", "npm.example.com", "/mine", None));
    assert!(matches!(&d, RequestDecision::Deny { .. }), "{d:?}");
    // the user's allow for exactly this request: out, marked by it
    let ok = br#"{"name":"mine","versions":{"1.0.0":{}},"_attachments":{"a":{}}}"#;
    assert_eq!(
        p.decide_request(&req("PUT", "npm.example.com", "/mine", Some(ok)))
            .rule(),
        Some("publish.mine")
    );
    let p = policy(&format!(
        "version: 1\nirreversible:\n{mine}  - preset: default\n    action: ask\n"
    ));
    let d = p.decide_request(&req("PUT", "npm.example.com", "/mine", Some(unreadable)));
    assert!(matches!(&d, RequestDecision::Ask { .. }), "{d:?}");
    // a later allow that surely matches decides; else the first undecided allow marks
    let p = policy(&format!(
        "version: 1\nirreversible:\n{mine}  - net: {{ host: \"npm.example.com\", path: \"/mine\" }}\n    action: allow\n    id: all.mine\n"
    ));
    assert_eq!(
        p.decide_request(&req("PUT", "npm.example.com", "/mine", Some(unreadable)))
            .rule(),
        Some("all.mine")
    );
    let d = p.decide_request(&req("PUT", "npm.example.com", "/other", Some(unreadable)));
    assert!(
        matches!(&d, RequestDecision::Marked { rule, summary }
            if rule == "publish.mine" && summary.contains("not evaluated")),
        "{d:?}"
    );
}

#[test]
fn deny_rules_fail_closed() {
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"*\", path: \"/admin/*\" }\n    action: deny\n  - net: { host: \"*\", method: POST, body: { json_field: { op: drop } } }\n    action: ask\n",
    );
    let d = p.decide_request(&req("GET", "h", "/admin/a%2Fb", Some(b"")));
    assert_eq!(d.rule(), Some("net.0"));
    assert!(d.summary().unwrap().contains("not evaluated"), "{d:?}");
    assert_eq!(
        p.decide_request(&req("GET", "h", "/public/a%2Fb", Some(b""))),
        RequestDecision::Allow
    );
    let d = p.decide_request(&req("POST", "h", "/x", None));
    assert!(
        matches!(&d, RequestDecision::Ask { rule, .. } if rule == "net.1"),
        "{d:?}"
    );
    assert_eq!(
        p.decide_request(&req("POST", "h", "/x", Some(br#"{"op":"read"}"#))),
        RequestDecision::Allow
    );
}

#[test]
fn net_rule_matchers() {
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"git.corp:8443\", method: GET, path: \"/**/info/refs\", query: { service: git-receive-pack } }\n    action: ask\n    id: push.intent\n",
    );
    let mut r = req(
        "GET",
        "git.corp",
        "/r.git/info/refs?service=git-receive-pack",
        Some(b""),
    );
    assert_eq!(p.decide_request(&r), RequestDecision::Allow, "port 443");
    r.port = 8443;
    assert!(matches!(p.decide_request(&r), RequestDecision::Ask { .. }));
    r.query = "service=git-upload-pack";
    assert_eq!(p.decide_request(&r), RequestDecision::Allow);
}

#[test]
fn l7_comes_first() {
    let p = policy(
        "version: 1\nnetwork:\n  l7:\n    api.github.com: { methods: [GET] }\n    \"*.corp.example\": { methods: [GET, POST], paths: [\"/api/**\"] }\n",
    );
    let d = p.decide_request(&req(
        "POST",
        "api.github.com",
        "/graphql",
        Some(br#"{"query":"{ a }"}"#),
    ));
    assert_eq!(
        d,
        RequestDecision::Deny {
            rule: "l7.api.github.com".into(),
            summary: "POST api.github.com/graphql is not permitted by network.l7".into(),
        }
    );
    assert_eq!(
        p.decide_request(&req("get", "api.github.com", "/x", Some(b""))),
        RequestDecision::Allow
    );
    assert_eq!(
        p.decide_request(&req("POST", "a.corp.example", "/api/x", Some(b""))),
        RequestDecision::Allow
    );
    assert_eq!(
        p.decide_request(&req("POST", "a.corp.example", "/other", Some(b"")))
            .rule(),
        Some("l7.*.corp.example")
    );
    assert_eq!(
        p.decide_request(&req(
            "GET",
            "a.corp.example",
            "/api/%2e%2e/other",
            Some(b"")
        ))
        .rule(),
        Some("l7.*.corp.example")
    );
    // other hosts are not restricted by l7; the preset still applies after l7 permits
    assert_eq!(
        p.decide_request(&req("GET", "example.org", "/", Some(b""))),
        RequestDecision::Allow
    );
    let p = policy("version: 1\nnetwork:\n  l7:\n    github.com: { methods: [GET, POST] }\n");
    let push = push_body();
    assert_eq!(
        p.decide_request(&req(
            "POST",
            "github.com",
            "/o/r/git-receive-pack",
            Some(&push)
        ))
        .rule(),
        Some("git.push")
    );
}

#[test]
fn needs_body() {
    let d = Policy::default();
    const JSON: Option<&str> = Some("application/json");
    let rows: &[(&str, &str, &str, Option<&str>, bool)] = &[
        (
            "POST",
            "github.com",
            "/o/r.git/git-receive-pack",
            Some("application/x-git-receive-pack-request"),
            true,
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/git-upload-pack",
            Some("application/x-git-upload-pack-request"),
            false,
        ),
        (
            "GET",
            "github.com",
            "/o/r.git/info/refs?service=git-receive-pack",
            None,
            false,
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/info/lfs/objects/batch",
            Some("application/vnd.git-lfs+json"),
            true,
        ),
        ("POST", "api.github.com", "/graphql", JSON, true),
        (
            "GET",
            "api.github.com",
            "/graphql?query=%7Ba%7D",
            None,
            true,
        ),
        // a JSON POST may name another method (Laravel, Slim): its body is read where that
        // could change the decision, not where a write is refused whatever it names
        ("POST", "api.github.com", "/repos/o/r/issues", JSON, false),
        ("GET", "api.github.com", "/repos/o/r", None, false),
        ("PUT", "registry.npmjs.org", "/pkg", JSON, true),
        (
            "POST",
            "registry.npmjs.org",
            "/-/npm/v1/security/advisories/bulk",
            JSON,
            true,
        ),
        (
            "POST",
            "upload.pypi.org",
            "/legacy/",
            Some("multipart/form-data; boundary=x"),
            true,
        ),
        (
            "PUT",
            "crates.io",
            "/api/v1/crates/new",
            Some("application/octet-stream"),
            true,
        ),
        // a PUT on any host may be an npm publish: its body says
        (
            "PUT",
            "ghcr.io",
            "/v2/o/i/manifests/latest",
            Some("application/vnd.oci.image.manifest.v1+json"),
            true,
        ),
        ("DELETE", "ghcr.io", "/v2/o/i/manifests/latest", None, false),
        // a form body may carry `_method`; so may a POST without a content type
        (
            "POST",
            "example.com",
            "/items/1",
            Some("application/x-www-form-urlencoded"),
            true,
        ),
        (
            "PUT",
            "example.com",
            "/items/1",
            Some("multipart/form-data"),
            true,
        ),
        ("POST", "example.com", "/items/1", None, true),
        ("POST", "example.com", "/items/1", JSON, true),
        ("POST", "example.com", "/items/1", Some("text/plain"), false),
        // a streaming RPC is never held for a prefix its client may not send yet
        (
            "POST",
            "example.com",
            "/svc/Chat",
            Some("application/grpc+json"),
            false,
        ),
        ("GET", "example.com", "/items/1", None, false),
    ];
    for (method, host, target, content_type, want) in rows {
        let r = RequestInfo {
            content_type: *content_type,
            ..req(method, host, target, None)
        };
        assert_eq!(
            d.needs_body(&r),
            *want,
            "{method} {host}{target} {content_type:?}"
        );
    }
    let off = policy("version: 1\nirreversible: []\n");
    assert!(!off.needs_body(&req("POST", "github.com", "/r/git-receive-pack", None)));
    assert!(!off.needs_body(&req("POST", "example.com", "/items/1", None)));
    // an allow rule that reads the body is consulted before the preset
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"*\", method: POST, body: { body_exact: ping } }\n    action: allow\n",
    );
    assert!(p.needs_body(&req("POST", "h", "/x", None)));
    assert!(!p.needs_body(&req("GET", "h", "/x", None)));
}

#[test]
fn arbitrary_requests_never_panic() {
    let p = Policy::default();
    let pieces: &[&str] = &[
        "/",
        "//",
        ".",
        "..",
        "%2e",
        "%2F",
        "%25",
        "%",
        "%zz",
        ";",
        "\\",
        "git-receive-pack",
        "info",
        "lfs",
        "objects",
        "batch",
        "v2",
        "blobs",
        "uploads",
        "manifests",
        "graphql",
        "é",
        "@s%2fp",
        "-rev",
        "api",
        "v4",
        "commit",
        "0000",
        "{",
        "\"",
        "\0",
        "?query=",
        "mutation",
        "&_method=",
        "&operationName=",
        "=",
        "&",
        "--B\r\n",
        "Content-Disposition: form-data; name=\"",
        "\r\n\r\n",
        "graphql.json",
        "api/v1/crates",
        "/-/package/",
        "_attachments",
    ];
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "x"];
    let content_types = [
        None,
        Some("application/json"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=B"),
        Some("application/graphql"),
        Some(";"),
    ];
    let overrides: [&[&str]; 3] = [&[], &["DELETE"], &["GET", "x, PUT", ""]];
    let hosts = [
        "github.com",
        "api.github.com",
        "registry.npmjs.org",
        "huggingface.co",
        "h",
    ];
    let joined = |max: usize| {
        proptest::collection::vec(proptest::sample::select(pieces.to_vec()), 0..max)
            .prop_map(|v| v.concat())
    };
    let request = (
        joined(8),
        proptest::collection::vec(any::<u8>(), 0..64),
        joined(8),
        proptest::sample::select(methods.to_vec()),
        proptest::sample::select(hosts.to_vec()),
        any::<bool>(),
        proptest::sample::select(content_types.to_vec()),
        proptest::sample::select(overrides.to_vec()),
    );
    let config = Config {
        cases: 3_000,
        failure_persistence: None,
        ..Config::default()
    };
    let outcome = TestRunner::new(config).run(
        &request,
        |(path, body, text_body, method, host, complete, content_type, overrides)| {
            for b in [&body[..], text_body.as_bytes()] {
                let mut r = req(method, host, &path, Some(b));
                r.body_complete = complete;
                r.content_type = content_type;
                r.method_overrides = overrides;
                let (path, query) = path.split_once('?').unwrap_or((&path, ""));
                r.path = path;
                r.query = query;
                let _ = p.decide_request(&r);
                let _ = p.needs_body(&r);
                let _ = crate::normalize_path(path);
            }
            Ok(())
        },
    );
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

/// A summary that names the request names its query: the server reads it (`?force=1`), and
/// the person approving it must see it. GitHub's REST writes, npm's other writes and the
/// rest of the preset's request-shaped lines alike.
#[test]
fn a_summary_of_the_request_names_its_query() {
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"deploy.example.com\", method: POST, path: \"/deploy\" }\n    action: ask\n    id: deploy\n  - preset: default\n",
    );
    let rows: &[(&str, &str, &str, &str)] = &[
        (
            "deploy.example.com",
            "POST",
            "/deploy?env=production&force=1",
            "POST deploy.example.com/deploy?env=production&force=1",
        ),
        (
            "deploy.example.com",
            "POST",
            "/deploy",
            "POST deploy.example.com/deploy",
        ),
        (
            "api.github.com",
            "DELETE",
            "/repos/o/r?confirm=1",
            "DELETE api.github.com/repos/o/r?confirm=1",
        ),
        (
            "registry.npmjs.org",
            "POST",
            "/-/org/acme/team?x=1",
            "npm POST registry.npmjs.org/-/org/acme/team?x=1",
        ),
        (
            "crates.io",
            "POST",
            "/api/v1/me/tokens?scope=all",
            "crates.io POST /api/v1/me/tokens?scope=all",
        ),
    ];
    for (host, method, target, want) in rows {
        let d = p.decide_request(&req(method, host, target, Some(b"")));
        assert_eq!(d.summary(), Some(*want), "{target}: {d:?}");
    }
    // What a line shows is cut to one line of 300 characters, control characters replaced.
    let long = format!("/deploy?{}", "a".repeat(400));
    let d = p.decide_request(&req("POST", "deploy.example.com", &long, Some(b"")));
    assert_eq!(d.summary().unwrap().chars().count(), 301, "{d:?}");
}
