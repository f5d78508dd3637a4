use crate::GraphqlOperation::{Mutation, Query, Subscription};
use crate::request::graphql::{document, operations};

fn kinds(body: &str) -> Result<Vec<crate::GraphqlOperation>, String> {
    operations(body.as_bytes()).map(|ops| ops.into_iter().map(|o| o.kind).collect())
}

#[test]
fn request_bodies() {
    let rows: &[(&str, Result<&[crate::GraphqlOperation], &str>)] = &[
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
        (
            r#"{"query":"query A { a }","operationName":"Nope"}"#,
            Err("no operation named"),
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
        (r#"[]"#, Ok(&[])),
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
        (r#"{"query":"Mutation { a }"}"#, Err("not an executable")),
        (
            r#"{"query":"type Query { a: Int }"}"#,
            Err("not an executable"),
        ),
        (r#"{"query":"query { a "}"#, Err("unbalanced")),
        (r#"{"query":"query { a } }"}"#, Err("not an executable")),
        (r#"{"query":"fragment F on T { a }"}"#, Err("no operation")),
        (r#"{"query":""}"#, Err("no operation")),
        (
            r#"{"extensions":{"persistedQuery":{"sha256Hash":"abc"}}}"#,
            Err("persisted"),
        ),
        (r#"{"query":null}"#, Err("not a string")),
        (
            r#"{"query":"{ a }","operationName":5}"#,
            Err("not a string"),
        ),
        ("mutation { a }", Err("not JSON")),
        (
            r#"{"query":"query { a(s: \"unterminated) }"}"#,
            Err("unterminated"),
        ),
        (r#"{"query":"query { a(x: %) }"}"#, Err("does not allow")),
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

#[test]
fn deep_and_large_documents_do_not_blow_up() {
    let deep = format!("{}{}", "{ a ".repeat(50_000), "}".repeat(50_000));
    assert!(document(&deep).is_ok());
    let unbalanced = "(".repeat(100_000);
    assert!(document(&format!("query {unbalanced}")).is_err());
}
