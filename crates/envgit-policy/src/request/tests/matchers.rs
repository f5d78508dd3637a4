use crate::GraphqlOperation;
use crate::network::rule_host_matches;
use crate::request::body::Matcher;
use crate::request::matchers::{
    Methods, Tri, glob, parse_query, path_matches, path_tri, pattern_segments, query_tri,
};
use crate::request::method::MethodSet;
use crate::request::normalize::path_views;
use crate::request::payload::Body;
use crate::request::prepared::Prepared;

use super::{NEW, OLD, ZERO, pkt, push_body};

#[test]
fn host_patterns() {
    let rows: &[(&str, &str, u16, bool)] = &[
        ("*", "anything.example", 443, true),
        ("*", "127.0.0.1", 8080, true),
        ("*:8080", "a.com", 8080, true),
        ("*:8080", "a.com", 443, false),
        ("api.github.com", "API.GitHub.com", 443, true),
        ("api.github.com", "api.github.com.", 80, true),
        ("api.github.com", "api.github.com", 8443, true),
        ("api.github.com:443", "api.github.com", 8443, false),
        ("api.github.com", "github.com", 443, false),
        ("*.example.com", "a.b.example.com", 443, true),
        ("*.example.com", "example.com", 443, false),
        ("*.example.com", "badexample.com", 443, false),
        ("localhost:5000", "127.0.0.1", 5000, true),
        ("[::1]:5000", "::1", 5000, true),
    ];
    for (pattern, host, port, want) in rows {
        assert_eq!(
            rule_host_matches(pattern, host, *port),
            *want,
            "{pattern} vs {host}:{port}"
        );
    }
}

#[test]
fn methods() {
    let only = Methods::Only(vec!["POST".into(), "PUT".into()]);
    assert!(only.matches("post") && only.matches("PUT") && !only.matches("GET"));
    let writes = Methods::Except(vec!["GET".into(), "HEAD".into(), "OPTIONS".into()]);
    assert!(writes.matches("DELETE") && writes.matches("PROPPATCH") && !writes.matches("get"));
    assert!(Methods::Any.matches("TRACE"));
}

#[test]
fn segment_globs() {
    assert!(glob("*.git", "repo.GIT"));
    assert!(glob("a*b*c", "aXXbYYc"));
    assert!(!glob("a*b*c", "aXXbYY"));
    assert!(glob("*", ""));
    assert!(!glob("x", "xy"));
}

#[test]
fn path_globs() {
    let rows: &[(&str, &str, bool)] = &[
        ("/**/git-receive-pack", "/git-receive-pack", true),
        ("/**/git-receive-pack", "/o/r.git/git-receive-pack", true),
        ("/**/git-receive-pack", "/a/b/c/git-receive-pack/", true),
        ("/**/git-receive-pack", "/o/r.git/git-upload-pack", false),
        ("/**/git-receive-pack", "/o/git-receive-pack/x", false),
        ("/repos/*/*/issues", "/repos/o/r/issues", true),
        ("/repos/*/*/issues", "/repos/o/issues", false),
        ("/repos/*/*/issues", "/repos/o/r/x/issues", false),
        ("/v2/**/blobs/uploads/**", "/v2/a/b/c/blobs/uploads/", true),
        (
            "/v2/**/blobs/uploads/**",
            "/v2/a/blobs/uploads/uuid-1",
            true,
        ),
        ("/v2/**/manifests/*", "/v2/a/b/manifests/latest", true),
        ("/v2/**/manifests/*", "/v2/a/b/manifests", false),
        ("/", "/", true),
        ("/", "/a", false),
        ("/**", "/", true),
        ("/**", "/a/b", true),
        ("/**/a/**/b/**/c", "/a/x/b/y/c", true),
        ("/**/a/**/b/**/c", "/a/x/b/y/d", false),
    ];
    for (pattern, path, want) in rows {
        let views = path_views(path).unwrap();
        assert_eq!(
            path_matches(&pattern_segments(pattern), &views[0]),
            *want,
            "{pattern} vs {path}"
        );
    }
    // Many `**` against a long path: no exponential backtracking.
    let long: Vec<String> = (0..5_000).map(|i| format!("s{i}")).collect();
    let pattern = pattern_segments("/**/a/**/a/**/a/**/a/**/zzz");
    assert!(!path_matches(&pattern, &long));
}

#[test]
fn path_readings_must_agree() {
    let p = |pat: &str| vec![pattern_segments(pat)];
    let tri = |pat: &str, raw: &str| path_tri(&p(pat), &path_views(raw));
    assert_eq!(
        tri("/**/git-receive-pack", "/x/%2e%2e/git-receive-pack"),
        Tri::Match
    );
    assert_eq!(
        tri("/**/git-receive-pack", "/api/v4/projects/g%2Fp/issues"),
        Tri::NoMatch
    );
    assert!(matches!(
        tri("/**/git-receive-pack", "/r/git-receive-pack;x=1"),
        Tri::Unknown(_)
    ));
    assert!(matches!(tri("/a/*", "/a/b%2Fc"), Tri::Unknown(_)));
    assert!(matches!(tri("/a/*", "/a/%zz"), Tri::Unknown(_)));
}

#[test]
fn query_params() {
    let want = vec![("service".to_owned(), "git-receive-pack".to_owned())];
    let q = |raw: &str| query_tri(&want, &parse_query(raw));
    assert_eq!(q("service=git-receive-pack"), Tri::Match);
    assert_eq!(q("a=1&service=git%2Dreceive-pack"), Tri::Match);
    assert_eq!(q("service=git-upload-pack"), Tri::NoMatch);
    assert_eq!(q(""), Tri::NoMatch);
    assert_eq!(
        q("service=git-upload-pack&service=git-receive-pack"),
        Tri::Match
    );
    assert!(matches!(q("service=%zz"), Tri::Unknown(_)));
    let glob = vec![("name".to_owned(), "*.tar.gz".to_owned())];
    assert_eq!(query_tri(&glob, &parse_query("name=x.tar.gz")), Tri::Match);
    assert_eq!(
        query_tri(&glob, &parse_query("name=x.TAR.gz")),
        Tri::NoMatch
    );
    assert_eq!(query_tri(&[], &parse_query("%zz")), Tri::Match);
}

fn eval(m: &Matcher, body: Option<&[u8]>, complete: bool) -> Tri {
    m.eval(&Prepared {
        methods: MethodSet {
            known: vec!["POST".to_owned()],
            any: None,
        },
        host: "h",
        port: 443,
        views: Ok(Vec::new()),
        query: Ok(Vec::new()),
        body: Body {
            bytes: body,
            complete,
        },
        content_type: None,
        header_names: &[],
    })
}

fn is_unknown(t: Tri) -> bool {
    matches!(t, Tri::Unknown(_))
}

#[test]
fn json_field() {
    let m = Matcher::JsonField("operation".into(), "upload".into());
    let e = |b: &str| eval(&m, Some(b.as_bytes()), true);
    assert_eq!(e(r#"{"operation":"upload","objects":[]}"#), Tri::Match);
    assert_eq!(e(r#"{"operation":"download"}"#), Tri::NoMatch);
    assert_eq!(e(r#"{"objects":[]}"#), Tri::NoMatch);
    assert_eq!(
        e(r#"{"operation":"download","operation":"upload"}"#),
        Tri::Match
    );
    assert_eq!(e(r#"{"\u006fperation":"upload"}"#), Tri::Match);
    assert_eq!(
        e(r#"[{"operation":"download"},{"operation":"upload"}]"#),
        Tri::Match
    );
    assert_eq!(e(r#""upload""#), Tri::NoMatch);
    assert!(is_unknown(eval(&m, Some(b"\x1f\x8b\x08gzip"), true)));
    assert!(is_unknown(e(r#"{"operation":"upl"#)));
    assert!(is_unknown(eval(&m, None, false)));
    assert!(is_unknown(eval(
        &m,
        Some(br#"{"operation":"download"}"#),
        false
    )));
    let n = Matcher::JsonField("size".into(), "12".into());
    assert_eq!(eval(&n, Some(br#"{"size":12}"#), true), Tri::Match);
    let any = Matcher::JsonField("versions".into(), "*".into());
    assert_eq!(eval(&any, Some(br#"{"versions":{}}"#), true), Tri::Match);
    assert_eq!(
        eval(&any, Some(br#"{"maintainers":[]}"#), true),
        Tri::NoMatch
    );
    let other = Matcher::JsonFieldOtherThan("operation".into(), "download".into());
    let o = |b: &str| eval(&other, Some(b.as_bytes()), true);
    assert_eq!(o(r#"{"operation":"download"}"#), Tri::NoMatch);
    assert_eq!(
        o(r#"{"operation":"download","operation":"download"}"#),
        Tri::NoMatch
    );
    assert_eq!(o(r#"{"operation":"upload"}"#), Tri::Match);
    assert_eq!(o(r#"{"operation":"DOWNLOAD"}"#), Tri::Match);
    assert_eq!(o(r#"{"objects":[]}"#), Tri::Match);
    assert!(is_unknown(o("{")));
    let ne = Matcher::JsonNonEmpty("_attachments".into());
    assert_eq!(
        eval(&ne, Some(br#"{"_attachments":{"a":1}}"#), true),
        Tri::Match
    );
    assert_eq!(
        eval(&ne, Some(br#"{"_attachments":{}}"#), true),
        Tri::NoMatch
    );
}

#[test]
fn form_field() {
    let m = Matcher::FormField(":action".into(), "file_upload".into());
    let e = |b: &str, complete: bool| eval(&m, Some(b.as_bytes()), complete);
    assert_eq!(e("%3Aaction=file_upload&name=x", true), Tri::Match);
    assert_eq!(e("name=x&:action=other", true), Tri::NoMatch);
    assert!(is_unknown(e("name=x&:act", false)));
    assert!(is_unknown(e("name=%zz", true)));
    let multipart = "--XyZ\r\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n\
                     --XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\ndemo\r\n\
                     --XyZ\r\nContent-Disposition: form-data; name=\"content\"; filename=\"d.whl\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\nPK\x03\x04";
    assert_eq!(e(multipart, false), Tri::Match);
    let other = multipart.replace("file_upload", "other");
    assert!(is_unknown(e(&other, false)));
    let closed = "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--XyZ--\r\n";
    assert_eq!(e(closed, true), Tri::NoMatch);
    assert!(is_unknown(e(
        "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1",
        true
    )));
}

#[test]
fn pktline_commands() {
    let yes = Matcher::Pktline(true);
    let no = Matcher::Pktline(false);
    let push = push_body();
    assert_eq!(eval(&yes, Some(&push), true), Tri::Match);
    assert_eq!(eval(&no, Some(&push), true), Tri::NoMatch);
    // cut short inside the first command's capabilities: still a push; before its refname:
    // cannot tell
    assert_eq!(eval(&yes, Some(&push[..120]), false), Tri::Match);
    assert!(is_unknown(eval(&yes, Some(&push[..60]), false)));
    assert_eq!(eval(&yes, Some(b"0000"), true), Tri::NoMatch);
    assert_eq!(eval(&no, Some(b"0000"), true), Tri::Match);
    assert!(is_unknown(eval(&yes, Some(b"0000"), false)));
    assert!(is_unknown(eval(&yes, Some(b"0000PACK"), true)));
    assert!(is_unknown(eval(&yes, Some(b""), true)));
    assert!(is_unknown(eval(&yes, Some(b"\x1f\x8b\x08\x00"), true)));
    assert!(is_unknown(eval(&yes, Some(b"0001"), true)));
    assert!(is_unknown(eval(&yes, None, false)));
    let junk = pkt("hello world\n") + "0000";
    assert!(is_unknown(eval(&yes, Some(junk.as_bytes()), true)));
    let shallow =
        pkt(&format!("shallow {OLD}\n")) + &pkt(&format!("{ZERO} {NEW} refs/tags/v1\n")) + "0000";
    assert_eq!(eval(&yes, Some(shallow.as_bytes()), true), Tri::Match);
    let cert = pkt("push-cert\0 report-status\n") + &pkt("certificate version 0.1\n");
    assert_eq!(eval(&yes, Some(cert.as_bytes()), false), Tri::Match);
}

#[test]
fn body_exact() {
    let m = Matcher::Exact(b"0000".to_vec());
    assert_eq!(eval(&m, Some(b"0000"), true), Tri::Match);
    assert_eq!(eval(&m, Some(b"00000"), true), Tri::NoMatch);
    assert_eq!(eval(&m, Some(b"0000"), false), Tri::NoMatch);
    assert_eq!(eval(&m, Some(b"01"), false), Tri::NoMatch);
    assert!(is_unknown(eval(&m, Some(b"00"), false)));
    assert!(is_unknown(eval(&m, None, false)));
}

#[test]
fn graphql_operation_matcher() {
    let m = Matcher::Graphql(GraphqlOperation::Mutation);
    assert_eq!(
        eval(&m, Some(br#"{"query":"mutation { a }"}"#), true),
        Tri::Match
    );
    assert_eq!(eval(&m, Some(br#"{"query":"{ a }"}"#), true), Tri::NoMatch);
    assert!(is_unknown(eval(&m, Some(br#"{"query":"{ a }"}"#), false)));
    assert!(is_unknown(eval(&m, Some(b"query { a }"), true)));
}
