//! Every entry of the `default` preset, with requests it must catch and requests it must let
//! through (reference/gate.md §1).

use crate::{Policy, RequestDecision, RequestInfo, default_preset_ids};

use super::{NEW, OLD, ZERO, pkt, push_body, req};

/// (method, host, path?query, complete body, expected rule id or `None` for Allow)
type Row<'a> = (&'a str, &'a str, &'a str, Option<&'a [u8]>, Option<&'a str>);

fn decide(r: &RequestInfo<'_>) -> RequestDecision {
    Policy::default().decide_request(r)
}

fn check(rows: &[Row<'_>]) {
    for (i, (method, host, target, body, want)) in rows.iter().enumerate() {
        let got = decide(&req(method, host, target, *body));
        match (want, &got) {
            (None, RequestDecision::Allow) => {}
            (Some(id), RequestDecision::Deny { rule, summary }) => {
                assert_eq!(rule, id, "row {i}: {method} {host}{target}: {summary}");
                assert!(!summary.is_empty());
            }
            _ => panic!("row {i}: {method} {host}{target}: want {want:?}, got {got:?}"),
        }
    }
}

const EMPTY: Option<&[u8]> = Some(b"");

#[test]
fn ids_are_stable() {
    assert_eq!(
        default_preset_ids(),
        [
            "git.push",
            "git.lfs.upload",
            "git.lfs.lock",
            "github.graphql.mutation",
            "github.rest.write",
            "github.release.upload",
            "gitlab.graphql.mutation",
            "gitlab.api.write",
            "huggingface.commit",
            "huggingface.upload",
            "huggingface.repo",
            "npm.dist-tag",
            "npm.unpublish",
            "npm.owner",
            "npm.publish",
            "npm.deprecate",
            "npm.write",
            "pypi.upload",
            "crates.publish",
            "crates.yank",
            "crates.owners",
            "crates.write",
            "oci.push",
            "oci.delete",
            "rubygems.push",
            "rubygems.yank",
            "rubygems.owners",
            "rubygems.write",
        ]
    );
}

#[test]
fn git_push() {
    let push = push_body();
    let fetch = (pkt("command=ls-refs\n") + "0000").into_bytes();
    let delete =
        (pkt(&format!("{OLD} {ZERO} refs/heads/old\0 report-status\n")) + "0000").into_bytes();
    check(&[
        (
            "POST",
            "github.com",
            "/o/r.git/git-receive-pack",
            Some(&push),
            Some("git.push"),
        ),
        (
            "POST",
            "gitlab.com",
            "/g/sub/p/git-receive-pack",
            Some(&push),
            Some("git.push"),
        ),
        (
            "POST",
            "127.0.0.1",
            "/demo/app.git/git-receive-pack",
            Some(&push),
            Some("git.push"),
        ),
        (
            "POST",
            "dev.azure.com",
            "/org/p/_git/r/git-receive-pack",
            Some(&delete),
            Some("git.push"),
        ),
        (
            "POST",
            "github.com",
            "/a//b/./c/../git-receive-pack",
            Some(&push),
            Some("git.push"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/%67it-receive-pack",
            Some(&push),
            Some("git.push"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/GIT-RECEIVE-PACK",
            Some(&push),
            Some("git.push"),
        ),
        (
            "POST",
            "github.com",
            "/o/x/%2e%2e/r.git/git-receive-pack",
            Some(&push),
            Some("git.push"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/git-receive-pack;jsessionid=1",
            Some(&push),
            Some("git.push"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/git-receive-pack%00",
            Some(&push),
            Some("git.push"),
        ),
        (
            "post",
            "github.com",
            "/o/r.git/git-receive-pack",
            Some(&push),
            Some("git.push"),
        ),
        // body not read, gzip, garbage: fail closed
        (
            "POST",
            "github.com",
            "/o/r.git/git-receive-pack",
            None,
            Some("git.push"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/git-receive-pack",
            Some(b"\x1f\x8b\x08\x00"),
            Some("git.push"),
        ),
        // the 4-byte auth probe, ref discovery and fetches pass
        (
            "POST",
            "github.com",
            "/o/r.git/git-receive-pack",
            Some(b"0000"),
            None,
        ),
        (
            "GET",
            "github.com",
            "/o/r.git/info/refs?service=git-receive-pack",
            EMPTY,
            None,
        ),
        (
            "GET",
            "github.com",
            "/o/r.git/info/refs?service=git-upload-pack",
            EMPTY,
            None,
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/git-upload-pack",
            Some(&fetch),
            None,
        ),
        (
            "POST",
            "github.com",
            "/o/git-receive-pack.git/git-upload-pack",
            Some(&fetch),
            None,
        ),
        (
            "POST",
            "gitlab.com",
            "/api/v4/projects/g%2Fp/git-upload-pack",
            Some(&fetch),
            Some("gitlab.api.write"),
        ),
    ]);
}

#[test]
fn git_push_summary_names_the_ref_updates() {
    let push = push_body();
    let d = decide(&req(
        "POST",
        "github.com",
        "/o/r.git/git-receive-pack",
        Some(&push),
    ));
    assert_eq!(
        d.summary(),
        Some("git push github.com/o/r.git: refs/heads/main 1111111..2222222")
    );
    // a prefix cut inside the pack still names them
    let mut r = req(
        "POST",
        "github.com",
        "/o/r.git/git-receive-pack",
        Some(&push[..120]),
    );
    r.body_complete = false;
    let d = decide(&r);
    assert_eq!(d.rule(), Some("git.push"));
    assert!(d.summary().unwrap().contains("refs/heads/main"), "{d:?}");
    let d = decide(&req(
        "POST",
        "github.com",
        "/o/r.git/git-receive-pack",
        None,
    ));
    assert_eq!(
        d.summary(),
        Some("git push github.com/o/r.git [not evaluated: body not read]")
    );
    let many: String = (0..6)
        .map(|i| pkt(&format!("{ZERO} {NEW} refs/tags/v{i}\n")))
        .collect::<String>()
        + "0000";
    let d = decide(&req(
        "POST",
        "h",
        "/r/git-receive-pack",
        Some(many.as_bytes()),
    ));
    assert_eq!(
        d.summary(),
        Some(
            "git push h/r: create refs/tags/v0 at 2222222; create refs/tags/v1 at 2222222; \
             create refs/tags/v2 at 2222222; create refs/tags/v3 at 2222222; (+2 more)"
        )
    );
}

#[test]
fn git_lfs() {
    let upload =
        br#"{"operation":"upload","transfers":["basic"],"objects":[{"oid":"ab","size":3}]}"#;
    let download = br#"{"operation":"download","objects":[{"oid":"ab","size":3}]}"#;
    check(&[
        (
            "POST",
            "github.com",
            "/o/r.git/info/lfs/objects/batch",
            Some(upload),
            Some("git.lfs.upload"),
        ),
        (
            "POST",
            "huggingface.co",
            "/datasets/o/d.git/info/lfs/objects/batch",
            Some(upload),
            Some("git.lfs.upload"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/info/lfs/objects/batch",
            Some(b"{"),
            Some("git.lfs.upload"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/info/lfs/objects/batch",
            Some(download),
            None,
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/info/lfs/locks",
            Some(b"{\"path\":\"a\"}"),
            Some("git.lfs.lock"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/info/lfs/locks/12/unlock",
            EMPTY,
            Some("git.lfs.lock"),
        ),
        (
            "POST",
            "github.com",
            "/o/r.git/info/lfs/locks/verify",
            Some(b"{}"),
            None,
        ),
        ("GET", "github.com", "/o/r.git/info/lfs/locks", EMPTY, None),
    ]);
    let d = decide(&req(
        "POST",
        "github.com",
        "/o/r.git/info/lfs/objects/batch",
        Some(upload),
    ));
    assert_eq!(
        d.summary(),
        Some("git lfs upload to github.com/o/r.git (1 objects)")
    );
}

#[test]
fn github() {
    let query = br#"{"query":"query { viewer { login } }"}"#;
    let mutation = br#"{"query":"mutation PullRequestCreate($i: CreatePullRequestInput!) { createPullRequest(input: $i) { pullRequest { url } } }","variables":{"i":{}}}"#;
    let batch = br#"[{"query":"{ a }"},{"query":"mutation { b }"}]"#;
    let named = br#"{"query":"query A { a } mutation B { b }","operationName":"A"}"#;
    check(&[
        ("POST", "api.github.com", "/graphql", Some(query), None),
        ("POST", "api.github.com", "/graphql", Some(named), None),
        (
            "POST",
            "api.github.com",
            "/graphql",
            Some(mutation),
            Some("github.graphql.mutation"),
        ),
        (
            "POST",
            "api.github.com",
            "/graphql",
            Some(batch),
            Some("github.graphql.mutation"),
        ),
        (
            "POST",
            "api.github.com",
            "/graphql",
            Some(b"not json"),
            Some("github.graphql.mutation"),
        ),
        (
            "POST",
            "api.github.com",
            "/graphql",
            None,
            Some("github.graphql.mutation"),
        ),
        (
            "POST",
            "api.github.com",
            "/repos/o/r/issues",
            Some(b"{}"),
            Some("github.rest.write"),
        ),
        (
            "PUT",
            "api.github.com",
            "/repos/o/r/pulls/1/merge",
            EMPTY,
            Some("github.rest.write"),
        ),
        (
            "PATCH",
            "api.github.com",
            "/repos/o/r/git/refs/heads/main",
            EMPTY,
            Some("github.rest.write"),
        ),
        (
            "DELETE",
            "api.github.com",
            "/repos/o/r",
            EMPTY,
            Some("github.rest.write"),
        ),
        (
            "POST",
            "api.github.com",
            "/gists",
            EMPTY,
            Some("github.rest.write"),
        ),
        (
            "POST",
            "api.github.com",
            "/markdown",
            Some(b"{\"text\":\"x\"}"),
            None,
        ),
        ("POST", "api.github.com", "/markdown/raw", Some(b"x"), None),
        ("GET", "api.github.com", "/repos/o/r/pulls", EMPTY, None),
        ("HEAD", "api.github.com", "/", EMPTY, None),
        (
            "POST",
            "uploads.github.com",
            "/repos/o/r/releases/1/assets?name=a.tgz",
            Some(b"x"),
            Some("github.release.upload"),
        ),
        (
            "GET",
            "codeload.github.com",
            "/o/r/tar.gz/main",
            EMPTY,
            None,
        ),
    ]);
    let d = decide(&req("POST", "api.github.com", "/graphql", Some(mutation)));
    assert_eq!(
        d.summary(),
        Some("GraphQL api.github.com mutation PullRequestCreate: createPullRequest")
    );
}

#[test]
fn gitlab() {
    check(&[
        (
            "POST",
            "gitlab.com",
            "/api/v4/projects/1/issues",
            EMPTY,
            Some("gitlab.api.write"),
        ),
        (
            "PUT",
            "gitlab.com",
            "/api/v4/projects/g%2Fp/merge_requests/1/merge",
            EMPTY,
            Some("gitlab.api.write"),
        ),
        (
            "DELETE",
            "gitlab.com",
            "/api/v4/projects/1",
            EMPTY,
            Some("gitlab.api.write"),
        ),
        ("GET", "gitlab.com", "/api/v4/projects/g%2Fp", EMPTY, None),
        ("POST", "gitlab.com", "/api/v4/markdown", Some(b"{}"), None),
        (
            "POST",
            "gitlab.com",
            "/api/v4/projects/g%2Fp/ci/lint",
            Some(b"{}"),
            None,
        ),
        (
            "POST",
            "gitlab.com",
            "/api/graphql",
            Some(br#"{"query":"{ currentUser { id } }"}"#),
            None,
        ),
        (
            "POST",
            "gitlab.com",
            "/api/graphql",
            Some(br#"[{"query":"{ a }"},{"query":"mutation { b }"}]"#),
            Some("gitlab.graphql.mutation"),
        ),
        (
            "POST",
            "gitlab.com",
            "/g/p.git/git-upload-pack",
            Some(b"0000"),
            None,
        ),
    ]);
}

#[test]
fn huggingface() {
    let upload = br#"{"operation":"upload","objects":[]}"#;
    check(&[
        (
            "POST",
            "huggingface.co",
            "/api/models/o/m/commit/main",
            Some(b"{}"),
            Some("huggingface.commit"),
        ),
        (
            "POST",
            "huggingface.co",
            "/api/datasets/d/commit/refs%2Fpr%2F1?create_pr=1",
            Some(b"{}"),
            Some("huggingface.commit"),
        ),
        (
            "GET",
            "huggingface.co",
            "/api/models/o/m/xet-write-token/main",
            EMPTY,
            Some("huggingface.upload"),
        ),
        (
            "POST",
            "huggingface.co",
            "/o/m.git/info/lfs/objects/batch",
            Some(upload),
            Some("git.lfs.upload"),
        ),
        (
            "POST",
            "huggingface.co",
            "/api/repos/create",
            Some(b"{}"),
            Some("huggingface.repo"),
        ),
        (
            "DELETE",
            "huggingface.co",
            "/api/repos/delete",
            Some(b"{}"),
            Some("huggingface.repo"),
        ),
        (
            "POST",
            "huggingface.co",
            "/api/models/o/m/paths-info/main",
            Some(b"{}"),
            None,
        ),
        (
            "POST",
            "huggingface.co",
            "/api/models/o/m/preupload/main",
            Some(b"{}"),
            None,
        ),
        (
            "GET",
            "huggingface.co",
            "/api/models/o/m/revision/main",
            EMPTY,
            None,
        ),
        (
            "GET",
            "huggingface.co",
            "/api/models/o/m/xet-read-token/main",
            EMPTY,
            None,
        ),
    ]);
}

#[test]
fn npm() {
    let publish = br#"{"_id":"pkg","name":"pkg","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":{}},"access":null,"_attachments":{"pkg-1.0.0.tgz":{"data":"AAAA"}}}"#;
    let deprecate = br#"{"_id":"pkg","name":"pkg","versions":{"1.0.0":{"deprecated":"no"}}}"#;
    let owner = br#"{"_id":"pkg","_rev":"3-abc","maintainers":[{"name":"a"}]}"#;
    for host in ["registry.npmjs.org", "registry.yarnpkg.com"] {
        check(&[
            ("PUT", host, "/pkg", Some(publish), Some("npm.publish")),
            (
                "PUT",
                host,
                "/@scope%2fpkg",
                Some(publish),
                Some("npm.publish"),
            ),
            (
                "PUT",
                host,
                "/@scope%2Fpkg",
                Some(deprecate),
                Some("npm.deprecate"),
            ),
            ("PUT", host, "/pkg", None, Some("npm.publish")),
            (
                "POST",
                host,
                "/-/stage/package/pkg",
                Some(publish),
                Some("npm.publish"),
            ),
            ("PUT", host, "/pkg", Some(deprecate), Some("npm.deprecate")),
            (
                "PUT",
                host,
                "/-/package/pkg/dist-tags/beta",
                Some(b"\"1.0.0\""),
                Some("npm.dist-tag"),
            ),
            (
                "DELETE",
                host,
                "/-/package/@s%2fpkg/dist-tags/beta",
                EMPTY,
                Some("npm.dist-tag"),
            ),
            (
                "DELETE",
                host,
                "/pkg/-rev/3-abc",
                EMPTY,
                Some("npm.unpublish"),
            ),
            (
                "DELETE",
                host,
                "/pkg/-/pkg-1.0.0.tgz/-rev/3-abc",
                EMPTY,
                Some("npm.unpublish"),
            ),
            (
                "PUT",
                host,
                "/pkg/-rev/3-abc",
                Some(deprecate),
                Some("npm.unpublish"),
            ),
            (
                "PUT",
                host,
                "/pkg/-rev/3-abc",
                Some(owner),
                Some("npm.owner"),
            ),
            (
                "PUT",
                host,
                "/-/user/org.couchdb.user:me",
                Some(b"{}"),
                Some("npm.write"),
            ),
            (
                "POST",
                host,
                "/-/package/pkg/access",
                Some(b"{}"),
                Some("npm.write"),
            ),
            (
                "POST",
                host,
                "/-/npm/v1/security/advisories/bulk",
                Some(b"\x1f\x8b"),
                None,
            ),
            ("POST", host, "/-/npm/v1/security/audits", Some(b"{}"), None),
            (
                "POST",
                host,
                "/-/npm/v1/security/audits/quick",
                Some(b"{}"),
                None,
            ),
            ("GET", host, "/pkg", EMPTY, None),
            ("GET", host, "/@scope%2fpkg", EMPTY, None),
            ("GET", host, "/pkg?write=true", EMPTY, None),
        ]);
    }
    let d = decide(&req(
        "PUT",
        "registry.npmjs.org",
        "/@scope%2fpkg",
        Some(publish),
    ));
    assert_eq!(d.summary(), Some("npm publish @scope/pkg@1.0.0"));
    // a publish larger than the prefix: still a publish, version read from the prefix
    let mut r = req("PUT", "registry.npmjs.org", "/pkg", Some(&publish[..100]));
    r.body_complete = false;
    let d = decide(&r);
    assert_eq!(d.rule(), Some("npm.publish"));
    assert!(
        d.summary().unwrap().starts_with("npm publish pkg@1.0.0"),
        "{d:?}"
    );
    let d = decide(&req(
        "PUT",
        "registry.npmjs.org",
        "/-/package/pkg/dist-tags/beta",
        Some(b"\"1.0.0\""),
    ));
    assert_eq!(d.summary(), Some("npm dist-tag add pkg beta → 1.0.0"));
}

#[test]
fn pypi() {
    let form =
        b"--B0undary\r\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\ndemo\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"version\"\r\n\r\n0.1.0\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"content\"; filename=\"demo.whl\"\r\n\r\nPK";
    check(&[
        (
            "POST",
            "upload.pypi.org",
            "/legacy/",
            Some(form),
            Some("pypi.upload"),
        ),
        (
            "POST",
            "test.pypi.org",
            "/legacy/",
            Some(form),
            Some("pypi.upload"),
        ),
        ("GET", "pypi.org", "/simple/demo/", EMPTY, None),
        (
            "GET",
            "files.pythonhosted.org",
            "/packages/x/demo.whl",
            EMPTY,
            None,
        ),
        ("GET", "test.pypi.org", "/simple/demo/", EMPTY, None),
    ]);
    let mut r = req("POST", "upload.pypi.org", "/legacy/", Some(form));
    r.body_complete = false;
    assert_eq!(decide(&r).summary(), Some("PyPI upload demo==0.1.0"));
}

#[test]
fn crates() {
    let meta = br#"{"name":"demo","vers":"0.1.0","deps":[]}"#;
    let mut frame = (meta.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(meta);
    frame.extend_from_slice(&[4, 0, 0, 0, 1, 2]);
    check(&[
        (
            "PUT",
            "crates.io",
            "/api/v1/crates/new",
            Some(&frame),
            Some("crates.publish"),
        ),
        (
            "DELETE",
            "crates.io",
            "/api/v1/crates/demo/0.1.0/yank",
            EMPTY,
            Some("crates.yank"),
        ),
        (
            "PUT",
            "crates.io",
            "/api/v1/crates/demo/0.1.0/unyank",
            EMPTY,
            Some("crates.yank"),
        ),
        (
            "PUT",
            "crates.io",
            "/api/v1/crates/demo/owners",
            Some(br#"{"users":["a"]}"#),
            Some("crates.owners"),
        ),
        (
            "DELETE",
            "crates.io",
            "/api/v1/crates/demo/owners",
            Some(br#"{"users":["a"]}"#),
            Some("crates.owners"),
        ),
        (
            "PUT",
            "crates.io",
            "/api/v1/me/tokens",
            Some(b"{}"),
            Some("crates.write"),
        ),
        ("GET", "crates.io", "/api/v1/crates/demo", EMPTY, None),
        ("GET", "index.crates.io", "/de/mo/demo", EMPTY, None),
        (
            "GET",
            "static.crates.io",
            "/crates/demo/demo-0.1.0.crate",
            EMPTY,
            None,
        ),
    ]);
    let d = decide(&req("PUT", "crates.io", "/api/v1/crates/new", Some(&frame)));
    assert_eq!(d.summary(), Some("cargo publish demo@0.1.0"));
    let d = decide(&req(
        "DELETE",
        "crates.io",
        "/api/v1/crates/demo/0.1.0/yank",
        EMPTY,
    ));
    assert_eq!(d.summary(), Some("cargo yank demo@0.1.0"));
}

#[test]
fn oci() {
    for host in [
        "ghcr.io",
        "registry-1.docker.io",
        "127.0.0.1",
        "x.dkr.ecr.us-east-1.amazonaws.com",
    ] {
        check(&[
            (
                "POST",
                host,
                "/v2/o/img/blobs/uploads/",
                EMPTY,
                Some("oci.push"),
            ),
            (
                "POST",
                host,
                "/v2/o/img/blobs/uploads/?mount=sha256:ab&from=o/other",
                EMPTY,
                Some("oci.push"),
            ),
            (
                "PATCH",
                host,
                "/v2/o/img/blobs/uploads/uuid-1",
                Some(b"x"),
                Some("oci.push"),
            ),
            (
                "PUT",
                host,
                "/v2/o/img/blobs/uploads/uuid-1?digest=sha256:ab",
                EMPTY,
                Some("oci.push"),
            ),
            (
                "PUT",
                host,
                "/v2/a/b/c/manifests/latest",
                Some(b"{}"),
                Some("oci.push"),
            ),
            (
                "DELETE",
                host,
                "/v2/o/img/manifests/sha256:ab",
                EMPTY,
                Some("oci.delete"),
            ),
            (
                "DELETE",
                host,
                "/v2/o/img/blobs/sha256:ab",
                EMPTY,
                Some("oci.delete"),
            ),
            ("GET", host, "/v2/", EMPTY, None),
            ("GET", host, "/v2/o/img/manifests/latest", EMPTY, None),
            ("HEAD", host, "/v2/o/img/blobs/sha256:ab", EMPTY, None),
            ("GET", host, "/v2/o/img/blobs/sha256:ab", EMPTY, None),
            (
                "GET",
                host,
                "/token?scope=repository:o/img:pull,push",
                EMPTY,
                None,
            ),
        ]);
    }
    let d = decide(&req(
        "PUT",
        "ghcr.io",
        "/v2/o/img/manifests/v1.2",
        Some(b"{}"),
    ));
    assert_eq!(d.summary(), Some("OCI push ghcr.io/o/img:v1.2"));
}

#[test]
fn rubygems() {
    check(&[
        (
            "POST",
            "rubygems.org",
            "/api/v1/gems",
            Some(b"data.tar.gz"),
            Some("rubygems.push"),
        ),
        (
            "DELETE",
            "rubygems.org",
            "/api/v1/gems/yank",
            Some(b"gem_name=demo&version=1.0"),
            Some("rubygems.yank"),
        ),
        (
            "POST",
            "rubygems.org",
            "/api/v1/gems/demo/owners",
            Some(b"email=a"),
            Some("rubygems.owners"),
        ),
        (
            "POST",
            "rubygems.org",
            "/api/v1/web_hooks",
            Some(b"x"),
            Some("rubygems.write"),
        ),
        (
            "GET",
            "rubygems.org",
            "/api/v1/gems/rails.json",
            EMPTY,
            None,
        ),
        ("GET", "index.rubygems.org", "/info/rails", EMPTY, None),
    ]);
    let d = decide(&req(
        "DELETE",
        "rubygems.org",
        "/api/v1/gems/yank",
        Some(b"gem_name=demo&version=1.0"),
    ));
    assert_eq!(d.summary(), Some("gem yank demo 1.0"));
}
