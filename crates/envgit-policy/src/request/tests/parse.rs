use crate::{BodyMatch, GraphqlOperation, IrreversibleEntry, Policy};

fn body_of(yaml: &str) -> BodyMatch {
    let p = Policy::parse("envgit.yaml", yaml).unwrap();
    match &p.irreversible[0] {
        IrreversibleEntry::Net { rule, .. } => rule.body.clone().unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn body_matchers_parse() {
    let b = body_of(
        "version: 1\nirreversible:\n  - net:\n      host: \"*\"\n      method: POST\n      body:\n        graphql_operation: mutation\n        json_field: { operation: upload, size: 12 }\n        form_field: { \":action\": file_upload }\n        pktline_commands: true\n        body_exact: \"0000\"\n    action: deny\n",
    );
    assert_eq!(b.graphql_operation, Some(GraphqlOperation::Mutation));
    assert_eq!(b.json_field["operation"], "upload");
    assert_eq!(b.json_field["size"], "12");
    assert_eq!(b.form_field[":action"], "file_upload");
    assert_eq!(b.pktline_commands, Some(true));
    assert_eq!(b.body_exact.as_deref(), Some("0000"));
}

#[test]
fn any_host_only_in_net_rules() {
    for host in ["\"*\"", "\"*:8080\""] {
        let text =
            format!("version: 1\nirreversible:\n  - net: {{ host: {host} }}\n    action: deny\n");
        assert!(Policy::parse("envgit.yaml", &text).is_ok(), "{host}");
    }
    let bad = [
        "version: 1\nirreversible:\n  - net: { host: \"*:x\" }\n    action: deny\n",
        "version: 1\nirreversible:\n  - net: { host: \"*x\" }\n    action: deny\n",
        "version: 1\nnetwork: { allow: [\"*\"] }\n",
    ];
    for text in bad {
        assert!(Policy::parse("envgit.yaml", text).is_err(), "{text}");
    }
}

#[test]
fn body_errors_have_positions() {
    let rows: &[(&str, usize, usize, &str)] = &[
        (
            "version: 1\nirreversible:\n  - net: { host: a.com, body: { graphql: mutation } }\n    action: deny\n",
            3,
            33,
            "unknown key `graphql` in `irreversible[0].net.body`; valid keys: graphql_operation",
        ),
        (
            "version: 1\nirreversible:\n  - net: { host: a.com, body: { graphql_operation: mutate } }\n    action: deny\n",
            3,
            52,
            "invalid GraphQL operation `mutate`",
        ),
        (
            "version: 1\nirreversible:\n  - net: { host: a.com, body: {} }\n    action: deny\n",
            3,
            31,
            "needs at least one matcher",
        ),
        (
            "version: 1\nirreversible:\n  - net: { host: a.com, body: { json_field: {} } }\n    action: deny\n",
            3,
            45,
            "must name at least one field",
        ),
        (
            "version: 1\nirreversible:\n  - net: { host: a.com, body: { json_field: { a: [1] } } }\n    action: deny\n",
            3,
            50,
            "`irreversible[0].net.body.json_field.a` must be a string",
        ),
        (
            "version: 1\nirreversible:\n  - net: { host: a.com, body: { pktline_commands: yes } }\n    action: deny\n",
            3,
            51,
            "must be true or false",
        ),
        (
            "version: 1\nirreversible:\n  - net: { host: a.com, body: { body_exact: 4 } }\n    action: deny\n",
            3,
            45,
            "must be a string",
        ),
    ];
    for (text, line, col, msg) in rows {
        let e = Policy::parse("envgit.yaml", text).unwrap_err();
        assert!(e.message.contains(msg), "{text}: {e}");
        assert_eq!((e.line, e.column), (*line, *col), "{text}: {e}");
    }
}
