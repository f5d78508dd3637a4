//! `network.allow` entries with options: `{ host, raw }` and `{ host, websocket }`.

use crate::{Policy, raw_tcp_allowed, raw_tcp_allowed_for, websocket_allowed};

fn parse(allow: &str) -> Result<Policy, String> {
    Policy::parse(
        "envgit.yaml",
        &format!("version: 1\nnetwork:\n  allow:\n{allow}"),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn entries_with_options_parse() {
    let p = parse(
        "    - \"api.github.com\"\n    - { host: \"127.0.0.1:5432\", raw: true }\n    - { host: \"chat.example.com\", websocket: true }\n    - { host: \"10.0.0.5:6379\", raw: true, websocket: false }\n    - { host: \"localhost:8080\" }\n",
    )
    .unwrap();
    // the host strings, as before, for every caller that reads `network.allow`
    assert_eq!(
        p.network.allow,
        [
            "api.github.com",
            "127.0.0.1:5432",
            "chat.example.com",
            "10.0.0.5:6379",
            "localhost:8080"
        ]
    );
    let rows: &[(&str, u16, bool, bool)] = &[
        // (host, port, raw, websocket)
        ("127.0.0.1", 5432, true, false),
        ("localhost", 5432, true, false),
        ("127.0.0.1", 5433, false, false),
        ("10.0.0.5", 6379, true, false),
        ("chat.example.com", 443, false, true),
        ("chat.example.com", 80, false, true),
        ("chat.example.com", 8443, false, false),
        ("api.github.com", 443, false, false),
        // a bare loopback `host:port` entry: HTTP judged per request, never raw
        ("localhost", 8080, false, false),
        ("127.0.0.1", 8080, false, false),
    ];
    for (host, port, raw, ws) in rows {
        assert_eq!(
            raw_tcp_allowed_for(&p, host, *port),
            *raw,
            "raw {host}:{port}"
        );
        assert_eq!(websocket_allowed(&p, host, *port), *ws, "ws {host}:{port}");
    }
    assert!(raw_tcp_allowed(&p, "127.0.0.1:5432"));
    assert!(!raw_tcp_allowed(&p, "localhost:8080"));
    assert!(!raw_tcp_allowed(&p, "api.github.com"));
    // options written out as their defaults mean the same as the bare string
    let plain = parse("    - \"localhost:8080\"\n").unwrap();
    let spelled =
        parse("    - { host: \"localhost:8080\", raw: false, websocket: false }\n").unwrap();
    assert_eq!(plain, spelled);
    assert_eq!(plain.hash(), spelled.hash());
}

#[test]
fn option_errors_name_the_entry_and_what_is_valid() {
    let rows: &[(&str, &[&str])] = &[
        (
            "    - { host: \"example.com:5432\", raw: true }\n",
            &[
                "envgit.yaml:4:7",
                "`raw: true`",
                "example.com:5432",
                "loopback or private-address `host:port`",
                "127.0.0.1:5432",
            ],
        ),
        (
            "    - { host: \"127.0.0.1\", raw: true }\n",
            &["envgit.yaml:4:7", "explicit port"],
        ),
        (
            "    - { host: \"*.internal:5432\", raw: true }\n",
            &["envgit.yaml:4:7", "a glob"],
        ),
        (
            "    - { host: \"8.8.8.8:53\", raw: true }\n",
            &["envgit.yaml:4:7", "8.8.8.8:53"],
        ),
        (
            "    - { host: \"db.internal:5432\", raw: true }\n",
            &["envgit.yaml:4:7", "db.internal:5432"],
        ),
        (
            "    - { host: \"a.com\", tcp: true }\n",
            &[
                "envgit.yaml:4:24",
                "unknown key `tcp`",
                "host, raw, websocket",
            ],
        ),
        (
            "    - { raw: true }\n",
            &["envgit.yaml:4:7", "missing `host`"],
        ),
        (
            "    - { host: \"a.com\", websocket: yes please }\n",
            &["envgit.yaml:4:35", "true or false"],
        ),
        (
            "    - { host: \"http://a.com\" }\n",
            &["envgit.yaml:4:15", "no scheme"],
        ),
        (
            "    - 5\n",
            &["envgit.yaml:4:7", "a host string or a mapping"],
        ),
    ];
    for (allow, want) in rows {
        let err = parse(allow).unwrap_err();
        for w in *want {
            assert!(err.contains(w), "{allow}: `{err}` lacks `{w}`");
        }
    }
}
