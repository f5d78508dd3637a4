use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::GraphqlOperation::{self, Mutation, Query, Subscription};
use crate::request::graphql::{document, operations};
use crate::request::matchers::parse_query;
use crate::request::payload::Body;

/// The operation kinds of `?query` + JSON `body` (no content type).
fn kinds_of(
    query: &str,
    body: &str,
    content_type: Option<&str>,
) -> Result<Vec<GraphqlOperation>, String> {
    let body = Body {
        bytes: Some(body.as_bytes()),
        complete: true,
    };
    operations(&parse_query(query), body, content_type)
        .map(|ops| ops.into_iter().map(|o| o.kind).collect())
        .map_err(|e| e.to_string())
}

fn kinds(body: &str) -> Result<Vec<GraphqlOperation>, String> {
    kinds_of("", body, None)
}

#[test]
fn request_bodies() {
    let rows: &[(&str, Result<&[GraphqlOperation], &str>)] = &[
        (r#"{"query":"query { viewer { login } }"}"#, Ok(&[Query])),
        (r#"{"query":"{ viewer { login } }"}"#, Ok(&[Query])),
        (
            r#"{"query":"mutation PullRequestCreate($input: CreatePullRequestInput!) { createPullRequest(input: $input) { pullRequest { url } } }","variables":{"input":{}}}"#,
            Ok(&[Mutation]),
        ),
        (r#"{"query":"subscription { x }"}"#, Ok(&[Subscription])),
        // operationName selects
        (
            r#"{"query":"query A { a } mutation B { b }","operationName":"A"}"#,
            Ok(&[Query]),
        ),
        (
            r#"{"query":"query A { a } mutation B { b }","operationName":"B"}"#,
            Ok(&[Mutation]),
        ),
        (
            r#"{"query":"query A { a } mutation B { b }","operationName":null}"#,
            Ok(&[Query, Mutation]),
        ),
        (
            r#"{"query":"query A { a } mutation B { b }"}"#,
            Ok(&[Query, Mutation]),
        ),
        // a name the document lacks: a lax server may run what is there
        (
            r#"{"query":"query A { a }","operationName":"Nope"}"#,
            Ok(&[Query]),
        ),
        (
            r#"{"query":"mutation A { a }","operationName":"Nope"}"#,
            Ok(&[Mutation]),
        ),
        // batches
        (
            r#"[{"query":"{ a }"},{"query":"mutation { b }"}]"#,
            Ok(&[Query, Mutation]),
        ),
        (
            r#"[{"query":"{ a }"},{"query":"{ b }"}]"#,
            Ok(&[Query, Query]),
        ),
        (r#"[]"#, Err("no `query`")),
        (r#"[1]"#, Err("JSON object")),
        // duplicate keys: every value counts
        (
            r#"{"query":"{ a }","query":"mutation { b }"}"#,
            Ok(&[Query, Mutation]),
        ),
        // comments, strings, block strings and fragments do not fool it
        (
            "{\"query\":\"# mutation { x }\\nquery Q { a(s: \\\"mutation { b }\\\") }\"}",
            Ok(&[Query]),
        ),
        (
            r#"{"query":"query { a(s: \"\"\"mutation { \\\"\"\" }\"\"\") }"}"#,
            Ok(&[Query]),
        ),
        (
            r#"{"query":"fragment F on Mutation { x } query { ...F }"}"#,
            Ok(&[Query]),
        ),
        (
            r#"{"query":"query Q($v: In = {a: [1, 2]}) @dir(x: {y: 1}) { a(v: $v) { ...on T { b } } }"}"#,
            Ok(&[Query]),
        ),
        // fail closed
        (
            r#"{"query":"Mutation { a }"}"#,
            Err("not a GraphQL document"),
        ),
        (
            r#"{"query":"type Query { a: Int }"}"#,
            Err("not an executable"),
        ),
        (r#"{"query":"query { a "}"#, Err("not a GraphQL document")),
        (
            r#"{"query":"query { a } }"}"#,
            Err("not a GraphQL document"),
        ),
        (r#"{"query":"fragment F on T { a }"}"#, Err("no operation")),
        (r#"{"query":""}"#, Err("not a GraphQL document")),
        (
            r#"{"extensions":{"persistedQuery":{"sha256Hash":"abc"}}}"#,
            Err("persisted"),
        ),
        (r#"{"id":"abc","variables":{}}"#, Err("persisted")),
        (r#"{"documentId":"abc"}"#, Err("persisted")),
        (
            r#"{"query":"{ a }","extensions":{"persistedQuery":{"sha256Hash":"abc"}}}"#,
            Err("persisted"),
        ),
        (r#"{"variables":{}}"#, Err("no `query`")),
        ("", Err("no `query`")),
        (r#"{"query":null}"#, Err("not a string")),
        (
            r#"{"query":"{ a }","operationName":5}"#,
            Err("not a string"),
        ),
        ("mutation { a }", Err("not JSON")),
        (
            r#"{"query":"query { a(s: \"unterminated) }"}"#,
            Err("not a GraphQL document"),
        ),
        (
            r#"{"query":"query { a(x: %) }"}"#,
            Err("not a GraphQL document"),
        ),
        (
            r#"{"query":"mutation { a } garbage"}"#,
            Err("not a GraphQL document"),
        ),
    ];
    for (body, want) in rows {
        let got = kinds(body);
        match (want, &got) {
            (Ok(w), Ok(g)) => assert_eq!(g.as_slice(), *w, "{body}"),
            (Err(w), Err(g)) => assert!(g.contains(w), "{body}: {g}"),
            _ => panic!("{body}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn root_fields_and_names() {
    let ops = document(
        "mutation PullRequestCreate($input: X!) { pr: createPullRequest(input: $input) { url } \
         addLabels(a: 1) @skip(if: false) ...Frag }",
    )
    .unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].name.as_deref(), Some("PullRequestCreate"));
    assert_eq!(
        ops[0].root_fields,
        ["createPullRequest", "addLabels", "...Frag"]
    );
}

/// `(query string, body, content type, operation kinds or an error containing this)`.
type Row<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    Result<&'a [GraphqlOperation], &'a str>,
);

#[test]
fn query_string_and_body_together() {
    let ab = "query%20A%20%7B%20a%20%7D%20mutation%20B%20%7B%20b%20%7D";
    let rows: &[Row<'_>] = &[
        ("query=%7B%20a%20%7D", "", None, Ok(&[Query])),
        ("query=mutation+%7B+a+%7D", "", None, Ok(&[Mutation])),
        // either source may carry the mutation
        (
            "query=mutation+%7B+a+%7D",
            r#"{"query":"{ b }"}"#,
            None,
            Ok(&[Mutation, Query]),
        ),
        (
            "query=%7B+a+%7D",
            r#"{"query":"mutation { b }"}"#,
            None,
            Ok(&[Query, Mutation]),
        ),
        // a name from either source selects in either document
        (
            &format!("query={ab}&operationName=A"),
            "",
            None,
            Ok(&[Query]),
        ),
        (
            &format!("query={ab}&operationName=B"),
            "",
            None,
            Ok(&[Mutation]),
        ),
        (
            "operationName=B",
            r#"{"query":"query A { a } mutation B { b }","operationName":"A"}"#,
            None,
            Ok(&[Mutation, Query]),
        ),
        // the query string alone fails closed on a persisted query or a bad escape
        (
            "extensions=%7B%22persistedQuery%22%3A%7B%7D%7D",
            "",
            None,
            Err("persisted"),
        ),
        ("query=%zz", "", None, Err("query string")),
        ("", "", None, Err("no `query`")),
        // bodies that are not JSON
        (
            "",
            "mutation { a }",
            Some("application/graphql"),
            Ok(&[Mutation]),
        ),
        (
            "",
            "query=mutation+%7B+a+%7D",
            Some("application/x-www-form-urlencoded; charset=utf-8"),
            Ok(&[Mutation]),
        ),
        (
            "",
            "--XyZ\r\nContent-Disposition: form-data; name=\"operations\"\r\n\r\n{\"query\":\"mutation { up }\"}\r\n--XyZ--",
            Some("multipart/form-data; boundary=XyZ"),
            Ok(&[Mutation]),
        ),
        ("", "mutation { a }", None, Err("not JSON")),
    ];
    for (query, body, content_type, want) in rows {
        let got = kinds_of(query, body, *content_type);
        match (want, &got) {
            (Ok(w), Ok(g)) => assert_eq!(g.as_slice(), *w, "{query} {body}"),
            (Err(w), Err(g)) => assert!(g.contains(w), "{query} {body}: {g}"),
            _ => panic!("{query} {body}: want {want:?}, got {got:?}"),
        }
    }
    // a body the gate has not read, or only part of, cannot be classified
    let cut = Body {
        bytes: Some(b"{"),
        complete: false,
    };
    assert!(operations(&parse_query("query=%7Ba%7D"), cut, None).is_err());
}

#[test]
fn deep_and_large_documents_are_refused_not_parsed() {
    let deep = format!("{}{}", "{ a ".repeat(50_000), "}".repeat(50_000));
    assert!(
        document(&deep)
            .unwrap_err()
            .to_string()
            .contains("recursion limit")
    );
    let unbalanced = "(".repeat(100_000);
    assert!(document(&format!("query {unbalanced}")).is_err());
    let many = format!("{{ {} }}", "a ".repeat(300_000));
    assert!(
        document(&many)
            .unwrap_err()
            .to_string()
            .contains("token limit")
    );
    let nested_ok = format!("{}{}", "{ a ".repeat(60), "}".repeat(60));
    assert!(document(&nested_ok).is_ok());
}

#[test]
fn arbitrary_documents_never_panic() {
    let pieces = [
        "{",
        "}",
        "(",
        ")",
        "[",
        "]",
        "query",
        "mutation",
        "subscription",
        "fragment",
        "on",
        "...",
        "@skip",
        "$v",
        ":",
        "=",
        "\"",
        "\"\"\"",
        "#",
        "\n",
        "a",
        "1",
        "-",
        "é",
        "\\",
        "\u{feff}",
        " ",
    ];
    let text = proptest::collection::vec(proptest::sample::select(pieces.to_vec()), 0..24)
        .prop_map(|v| v.concat());
    let config = Config {
        cases: 5_000,
        failure_persistence: None,
        ..Config::default()
    };
    let outcome = TestRunner::new(config).run(&text, |text| {
        let _ = document(&text);
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
