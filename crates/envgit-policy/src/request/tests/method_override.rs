//! A request is judged as every method it names: its own, `X-HTTP-Method-Override` and
//! friends, and `_method` in the query, a form body or a JSON `POST`'s top-level keys. Where they differ, a `deny`/`ask`
//! rule matching any of them matches (fail closed); an `l7` permission must hold for all of
//! them, and so must an `allow` rule to decide (to preempt a later rule). An `allow` rule that
//! holds for some of them only still marks the request when no later rule decides.

use crate::{Decided, Policy, RequestDecision, RequestInfo};

use super::{policy, req};

const FORM: &str = "application/x-www-form-urlencoded";

const POLICY: &str = "version: 1\nnetwork:\n  l7:\n    read.example.com: { methods: [GET] }\nirreversible:\n  - net: { host: \"api.example.com\", method: GET, path: \"/items\" }\n    action: allow\n    id: list.items\n  - net: { host: \"api.example.com\", method: DELETE, path: \"/items/*\" }\n    action: deny\n    id: delete.item\n  - preset: default\n";

/// A row: `METHOD host/path?query [body] [content-type] => rule` (or `=> allow`, or
/// `=> marked:rule`).
fn check(p: &Policy, rows: &[(&str, &[u8], Option<&str>, &str)]) {
    let mut failed = Vec::new();
    for (request, body, content_type, want) in rows {
        let (method, url) = request.split_once(' ').unwrap_or_default();
        let (host, target) = url.split_at(url.find('/').unwrap_or_default());
        let r = RequestInfo {
            content_type: *content_type,
            ..req(method, host, target, Some(body))
        };
        let got = p.decide_request(&r);
        let ok = match (*want, &got) {
            ("allow", RequestDecision::Allow) => true,
            (w, RequestDecision::Marked { rule, .. }) => w.strip_prefix("marked:") == Some(rule),
            (w, RequestDecision::Deny { rule, .. }) => w == rule,
            _ => false,
        };
        if !ok {
            failed.push(format!("{request} {content_type:?} => {want}: got {got:?}"));
        }
    }
    assert!(failed.is_empty(), "failed rows:\n{}", failed.join("\n"));
}

#[test]
fn method_named_in_the_query_or_a_form_body() {
    let p = policy(POLICY);
    check(
        &p,
        &[
            ("POST api.example.com/items/1", b"", None, "allow"),
            ("POST api.example.com/items/1?_method=DELETE", b"", None, "delete.item"),
            ("POST api.example.com/items/1?_method=delete", b"", None, "delete.item"),
            ("GET api.example.com/items/1?_method=DELETE", b"", None, "delete.item"),
            ("POST api.example.com/items/1", b"_method=DELETE", Some(FORM), "delete.item"),
            (
                "POST api.example.com/items/1",
                b"a=1&_method=DELETE",
                Some("Application/X-WWW-Form-Urlencoded; charset=UTF-8"),
                "delete.item",
            ),
            ("POST api.example.com/items/1", b"_method=DELETE", None, "delete.item"),
            (
                "POST api.example.com/items/1",
                b"--B0undary\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--B0undary--\r\n",
                Some("multipart/form-data; boundary=B0undary"),
                "delete.item",
            ),
            // Rack reads `multipart/mixed` and `multipart/related` as forms too (Rails'
            // `Rack::MethodOverride`); without a boundary, any method (fail closed)
            (
                "POST api.example.com/items/1",
                b"--B0undary\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--B0undary--\r\n",
                Some("multipart/mixed; boundary=B0undary"),
                "delete.item",
            ),
            (
                "POST api.example.com/items/1",
                b"--B0undary\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--B0undary--\r\n",
                Some("Multipart/Related; boundary=\"B0undary\""),
                "delete.item",
            ),
            (
                "POST api.example.com/items/1",
                b"--B0undary\r\nContent-Type: application/json\r\n\r\n{}\r\n--B0undary--\r\n",
                Some("multipart/related; boundary=B0undary"),
                "allow",
            ),
            ("POST api.example.com/items/1", b"_method=DELETE", Some("multipart/mixed"), "delete.item"),
            // the media type ends where Rack (`;`, `,`) or PHP (and a space) ends it
            (
                "POST api.example.com/items/1",
                b"_method=DELETE",
                Some("application/x-www-form-urlencoded, text/plain"),
                "delete.item",
            ),
            (
                "POST api.example.com/items/1",
                b"_method=DELETE",
                Some(" Application/X-WWW-Form-Urlencoded charset=x"),
                "delete.item",
            ),
            ("POST api.example.com/items/1", b"_method=DELETE", Some("text/plain, x"), "allow"),
            // Slim reads `_METHOD`; a name is read in any case
            ("POST api.example.com/items/1", b"_METHOD=DELETE", Some(FORM), "delete.item"),
            ("POST api.example.com/items/1?_Method=DELETE", b"", None, "delete.item"),
            ("POST api.example.com/items/1", b"_METHOD=DELETE", None, "delete.item"),
            (
                "POST api.example.com/items/1",
                b"--B0undary\r\nContent-Disposition: form-data; name=\"_METHOD\"\r\n\r\nDELETE\r\n--B0undary--\r\n",
                Some("multipart/form-data; boundary=B0undary"),
                "delete.item",
            ),
            ("POST api.example.com/items/1?_method=PATCH", b"", None, "allow"),
            // an allow rule must hold for every method the request names to decide; read as
            // the GET it lets out, the request is still marked
            ("GET api.example.com/items", b"", None, "marked:list.items"),
            ("GET api.example.com/items?_method=POST", b"", None, "marked:list.items"),
            // the preset: a read by its own method, a write by the one it names
            (
                "GET crates.io/api/v1/crates/demo/0.1.0/yank?_method=DELETE",
                b"",
                None,
                "crates.yank",
            ),
            (
                "POST registry.npmjs.org/-/npm/v1/security/audits?_method=PUT",
                b"{}",
                Some("application/json"),
                "npm.write",
            ),
            (
                "POST registry.npmjs.org/-/npm/v1/security/audits",
                b"{}",
                Some("application/json"),
                "allow",
            ),
            ("GET api.github.com/repos/o/r?_method=DELETE", b"", None, "github.rest.write"),
            // l7: every method named must be permitted
            ("GET read.example.com/x", b"", None, "allow"),
            ("GET read.example.com/x?_method=DELETE", b"", None, "l7.read.example.com"),
            ("POST read.example.com/x", b"_method=GET", Some(FORM), "l7.read.example.com"),
            // a query that cannot be decoded may name any method: fail closed
            ("POST api.example.com/items/1?_method=%zz", b"", None, "delete.item"),
        ],
    );
}

/// Laravel (its JSON input) and Slim (its parsed body) read `_method` from a JSON `POST`'s
/// top-level object: every one is read, however deep the values around it or whatever numbers
/// they hold; a body that is not read as JSON may name any method.
#[test]
fn method_named_in_a_json_post() {
    let p = policy(POLICY);
    let json = Some("application/json");
    let deep = format!(
        r#"{{"a":{}1{},"_method":"DELETE"}}"#,
        "[".repeat(5000),
        "]".repeat(5000)
    );
    check(
        &p,
        &[
            ("POST api.example.com/items/1", br#"{"_method":"DELETE"}"#, json, "delete.item"),
            (
                "POST api.example.com/items/1",
                br#"{"a":1,"_METHOD":"delete"}"#,
                Some("application/vnd.api+json; charset=utf-8"),
                "delete.item",
            ),
            // Laravel's `isJson` looks for `/json` anywhere in the header
            (
                "POST api.example.com/items/1",
                br#"{"_method":"DELETE"}"#,
                Some("text/plain; profile=/json"),
                "delete.item",
            ),
            // a key spelled with an escape is the same key
            (
                "POST api.example.com/items/1",
                br#"{"\u005fmethod":"DELETE"}"#,
                json,
                "delete.item",
            ),
            // duplicate keys: PHP keeps the last, another parser the first
            (
                "POST api.example.com/items/1",
                br#"{"_method":"DELETE","_method":"GET"}"#,
                json,
                "delete.item",
            ),
            ("POST api.example.com/items/1", deep.as_bytes(), json, "delete.item"),
            (
                "POST api.example.com/items/1",
                br#"{"a":1E400,"b":[-0.0e-999],"_method":"DELETE"}"#,
                json,
                "delete.item",
            ),
            // not read as JSON here: any method (fail closed)
            ("POST api.example.com/items/1", br#"{"_method":"#, json, "delete.item"),
            ("POST api.example.com/items/1", br#"{"a":1} x"#, json, "delete.item"),
            // none named: nested, in an array, not a string, no body at all
            (
                "POST api.example.com/items/1",
                br#"{"a":{"_method":"DELETE"}}"#,
                json,
                "allow",
            ),
            ("POST api.example.com/items/1", br#"[{"_method":"DELETE"}]"#, json, "allow"),
            (
                "POST api.example.com/items/1",
                br#"{"_method":["DELETE"],"x":{"_method":"DELETE"}}"#,
                json,
                "allow",
            ),
            ("POST api.example.com/items/1", b" \n", json, "allow"),
            ("POST api.example.com/items/1", b"{}", json, "allow"),
            // not a streaming RPC's messages, which no such framework serves
            (
                "POST api.example.com/items/1",
                br#"{"_method":"DELETE"}"#,
                Some("application/grpc+json"),
                "allow",
            ),
            (
                "POST api.example.com/items/1",
                br#"{"_method":"DELETE"}"#,
                Some("application/connect+json"),
                "allow",
            ),
            // read for a POST only, as the frameworks do
            ("PATCH api.example.com/items/1", br#"{"_method":"DELETE"}"#, json, "allow"),
            // a packument POSTed as a PUT is a publish on any host
            (
                "POST registry.example.org/demo-pkg",
                br#"{"_method":"PUT","name":"demo-pkg","versions":{"1.0.0":{}},"_attachments":{"demo-pkg-1.0.0.tgz":{"data":"AAAA"}}}"#,
                json,
                "npm.publish",
            ),
        ],
    );
}

/// (request, body, content type, complete, rule or `allow`, rest of the body needed)
type PrefixRow<'a> = (&'a str, &'a [u8], &'a str, bool, &'a str, bool);

/// A decision resting on what a prefix could not show says the rest of the body is needed,
/// so that the gate reads it whole and decides again; one the prefix settled does not.
#[test]
fn a_decision_resting_on_the_rest_of_the_body_says_so() {
    let p = policy(POLICY);
    let upload =
        b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nAAAA";
    let rows: &[PrefixRow<'_>] = &[
        (
            "POST api.example.com/items/1",
            br#"{"a":"AAAA"#,
            "application/json",
            false,
            "delete.item",
            true,
        ),
        (
            "POST api.example.com/items/1",
            br#"{"a":"AAAA"}"#,
            "application/json",
            true,
            "allow",
            false,
        ),
        (
            "DELETE api.example.com/items/1",
            br#"{"a":"#,
            "application/json",
            false,
            "delete.item",
            false,
        ),
        (
            "POST upload.example.org/files",
            upload,
            "multipart/form-data; boundary=B",
            false,
            "pypi.upload",
            true,
        ),
        (
            "POST read.example.com/x",
            b"a=1&b=",
            FORM,
            false,
            "l7.read.example.com",
            true,
        ),
        (
            "GET read.example.com/x?_method=DELETE",
            b"{",
            "application/json",
            false,
            "l7.read.example.com",
            false,
        ),
    ];
    for (request, body, content_type, complete, want, rest) in rows {
        let (method, url) = request.split_once(' ').unwrap_or_default();
        let (host, target) = url.split_at(url.find('/').unwrap_or_default());
        let r = RequestInfo {
            content_type: Some(content_type),
            body_complete: *complete,
            ..req(method, host, target, Some(body))
        };
        let Decided {
            decision,
            rest_of_body_needed,
        } = p.decide_request_from_prefix(&r);
        assert_eq!(
            (decision.rule().unwrap_or("allow"), rest_of_body_needed),
            (*want, *rest),
            "{request} complete={complete}: {decision:?}"
        );
    }
}

#[test]
fn method_named_in_override_headers() {
    let p = policy(POLICY);
    let rows: &[(&str, &[&str], &str)] = &[
        ("POST", &["DELETE"], "delete.item"),
        ("POST", &["delete"], "delete.item"),
        ("POST", &[" DELETE "], "delete.item"),
        ("POST", &["PATCH, DELETE"], "delete.item"),
        // the headers disagree: a deny rule matching any of them matches
        ("POST", &["GET", "DELETE"], "delete.item"),
        ("POST", &["GET"], "allow"),
        ("POST", &[], "allow"),
        ("DELETE", &[], "delete.item"),
        ("DELETE", &["GET"], "delete.item"),
    ];
    for (method, overrides, want) in rows {
        let r = RequestInfo {
            method_overrides: overrides,
            content_type: Some("application/json"),
            ..req(method, "api.example.com", "/items/1", Some(b"{}"))
        };
        let got = p.decide_request(&r);
        assert_eq!(
            got.rule().unwrap_or("allow"),
            *want,
            "{method} {overrides:?}"
        );
    }
    // the allow rule must hold for every method named to decide; where it cannot, the request
    // (which may be the GET it lets out) is marked, saying why; the summary shows the methods
    let r = RequestInfo {
        method_overrides: &["DELETE"],
        ..req("GET", "api.example.com", "/items", Some(b""))
    };
    assert_eq!(
        p.decide_request(&r),
        RequestDecision::Marked {
            rule: "list.items".into(),
            summary: "GET (as DELETE) api.example.com/items [not evaluated: the request names several methods (GET, DELETE)]".into(),
        }
    );
    let r = RequestInfo {
        method_overrides: &["DELETE"],
        ..req("POST", "api.example.com", "/items/1", Some(b""))
    };
    assert_eq!(
        p.decide_request(&r).summary(),
        Some(
            "POST (as DELETE) api.example.com/items/1 [not evaluated: the request names several methods (POST, DELETE)]"
        )
    );
    let r = RequestInfo {
        method_overrides: &["PUT"],
        ..req("GET", "api.github.com", "/repos/o/r", Some(b""))
    };
    assert_eq!(p.decide_request(&r).rule(), Some("github.rest.write"));
    let r = RequestInfo {
        method_overrides: &["DELETE"],
        ..req("GET", "read.example.com", "/x", Some(b""))
    };
    assert_eq!(p.decide_request(&r).rule(), Some("l7.read.example.com"));
}

/// A body left unread because no method it could name would change the decision does not
/// make the refusal say it was not evaluated: a JSON write to GitHub's API is refused as the
/// `POST` it is.
#[test]
fn a_body_not_read_for_its_method_leaves_the_summary_plain() {
    let p = policy(POLICY);
    let r = RequestInfo {
        content_type: Some("application/json"),
        ..req("POST", "api.github.com", "/repos/o/r/issues", None)
    };
    assert!(!p.needs_body(&r));
    let decision = p.decide_request(&r);
    assert_eq!(decision.rule(), Some("github.rest.write"), "{decision:?}");
    let summary = decision.summary().unwrap_or_default();
    assert!(
        !summary.contains("not evaluated") && !summary.contains("as any method"),
        "{summary}"
    );
}

/// Where a person is asked (or the step marked), a body is read for the method it names even
/// when that cannot change the rule: the question says what the request is.
#[test]
fn an_ask_says_the_method_a_body_names() {
    let p = policy(
        "version: 1\nirreversible:\n  - net: { host: \"api.example.com\", method: [POST, DELETE], path: \"/items/*\" }\n    action: ask\n    id: items.write\n",
    );
    let form = RequestInfo {
        content_type: Some(FORM),
        ..req("POST", "api.example.com", "/items/1", None)
    };
    assert!(p.needs_body(&form));
    let read = RequestInfo {
        body: Some(b"_method=DELETE"),
        ..form
    };
    let decision = p.decide_request(&read);
    assert_eq!(decision.rule(), Some("items.write"));
    assert!(
        decision
            .summary()
            .is_some_and(|s| s.contains("POST (as DELETE)")),
        "{decision:?}"
    );
}
