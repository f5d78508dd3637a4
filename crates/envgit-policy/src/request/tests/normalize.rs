use crate::normalize_path;
use crate::request::normalize::path_views;

#[test]
fn normalize_path_table() {
    let rows: &[(&str, Result<&str, &str>)] = &[
        ("", Ok("/")),
        ("/", Ok("/")),
        ("//", Ok("/")),
        ("/a/b", Ok("/a/b")),
        ("/a/b/", Ok("/a/b/")),
        ("/a//b/./c/../git-receive-pack", Ok("/a/b/git-receive-pack")),
        ("/a/b/..", Ok("/a/")),
        ("/a/b/.", Ok("/a/b/")),
        ("/a/./", Ok("/a/")),
        ("/a/..", Ok("/")),
        ("/%41", Ok("/A")),
        ("/%67it-receive-pack", Ok("/git-receive-pack")),
        ("/a%7Eb%2d%5F", Ok("/a~b-_")),
        ("/a/file%2ejson", Ok("/a/file.json")),
        ("/a/...", Ok("/a/...")),
        ("/a%20b", Ok("/a%20b")),
        ("/a%3ab", Ok("/a%3Ab")),
        ("/a;b=c", Ok("/a;b=c")),
        ("/caf\u{e9}", Ok("/caf\u{e9}")),
        // ambiguous or invalid: callers fail closed
        ("/a%2Fb", Err("encoded `/`")),
        ("/a%2fb", Err("encoded `/`")),
        ("/a%5Cb", Err("encoded `/`")),
        ("/a\\b", Err("encoded `/`")),
        ("/%2e%2e/x", Err("%2e")),
        ("/a/%2e%2e/x", Err("%2e")),
        ("/a/.%2E/x", Err("%2e")),
        ("/a/%2e", Err("%2e")),
        ("/a%252Fb", Err("double")),
        ("/a%252e%252e/b", Err("double")),
        ("/..", Err("above the root")),
        ("/../x", Err("above the root")),
        ("/a/../../x", Err("above the root")),
        ("/a%00", Err("NUL")),
        ("/a\u{0}", Err("control")),
        ("/a\r\nb", Err("control")),
        ("/a%zz", Err("invalid `%`")),
        ("/a%4", Err("invalid `%`")),
        ("/a%", Err("invalid `%`")),
        ("a/b", Err("start with `/`")),
        ("*", Err("start with `/`")),
    ];
    for (raw, want) in rows {
        let got = normalize_path(raw);
        match (want, &got) {
            (Ok(w), Ok(g)) => assert_eq!(g, w, "{raw:?}"),
            (Err(w), Err(g)) => assert!(g.to_string().contains(w), "{raw:?}: {g}"),
            _ => panic!("{raw:?}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn path_views_list_every_reading() {
    let v = |raw: &str| path_views(raw).unwrap();
    let s = |segs: &[&str]| segs.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(v("/a//b/"), vec![s(&["a", "b"])]);
    assert_eq!(v("/a%2Fb"), vec![s(&["a%2Fb"]), s(&["a", "b"])]);
    assert_eq!(v("/x/%2e%2e/y"), vec![s(&["x", "..", "y"]), s(&["y"])]);
    assert_eq!(v("/x/file%2ejson"), vec![s(&["x", "file.json"])]);
    assert_eq!(v("/a;p/b"), vec![s(&["a;p", "b"]), s(&["a", "b"])]);
    assert_eq!(
        v("/a%252Fb"),
        vec![s(&["a%252Fb"]), s(&["a%2Fb"]), s(&["a", "b"])]
    );
    assert_eq!(v("/../x"), vec![s(&["x"])]);
    assert!(path_views("/a%00").is_err());
    assert!(path_views("/a%2500").is_err());
    // A long path of repeated escapes stays cheap.
    let long = "/%2525".repeat(10_000);
    assert!(path_views(&long).is_ok());
    // Past 64 KiB a path is not judged segment by segment (fail closed).
    assert!(path_views(&"/a".repeat(40_000)).is_err());
    assert!(normalize_path(&"/a".repeat(40_000)).is_ok());
}
