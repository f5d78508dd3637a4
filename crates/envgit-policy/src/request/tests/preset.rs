//! Every entry of the `default` preset, with requests it must catch and requests it must let
//! through (reference/gate.md §1).
//!
//! A row reads `METHOD host/path?query [body] => rule` (or `=> allow`). `[name]` is a complete
//! body from the test's table, `[-]` a body the gate did not read, no brackets an empty body.

use crate::{Policy, RequestDecision, RequestInfo, default_preset_ids};

use super::{NEW, OLD, ZERO, pkt, push_body, req};

fn decide(r: &RequestInfo<'_>) -> RequestDecision {
    Policy::default().decide_request(r)
}

/// Every row is checked; the failures are reported together.
fn check(rows: &[&str], bodies: &[(&str, &[u8])]) {
    let failed: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            std::panic::catch_unwind(|| check_row(row, bodies))
                .err()
                .map(|_| (*row).to_owned())
        })
        .collect();
    assert!(failed.is_empty(), "failed rows:\n{}", failed.join("\n"));
}

fn check_row(row: &str, bodies: &[(&str, &[u8])]) {
    {
        let (request, want) = row.split_once(" => ").unwrap();
        let mut words = request.split(' ');
        let method = words.next().unwrap();
        let url = words.next().unwrap();
        let body: Option<&[u8]> = match words.next() {
            None => Some(b""),
            Some("[-]") => None,
            Some(name) => {
                let name = name.trim_start_matches('[').trim_end_matches(']');
                let found = bodies.iter().find(|(n, _)| *n == name);
                Some(found.unwrap_or_else(|| panic!("no body {name}")).1)
            }
        };
        let (authority, target) = url.split_at(url.find('/').unwrap());
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().unwrap()),
            None => (authority, 443),
        };
        let got = decide(&RequestInfo {
            port,
            ..req(method, host, target, body)
        });
        match (want, &got) {
            ("allow", RequestDecision::Allow) => {}
            (id, RequestDecision::Deny { rule, summary }) if id != "allow" => {
                assert_eq!(rule, id, "{row}: {summary}");
                assert!(!summary.is_empty());
            }
            _ => panic!("{row}: got {got:?}"),
        }
    }
}

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
            "maven.deploy",
            "nuget.push",
            "hex.publish",
            "pub.publish",
            "cocoapods.push",
            "jsr.publish",
            "git.dumb-push",
        ]
    );
}

#[test]
fn git_push() {
    let push = push_body();
    let fetch = (pkt("command=ls-refs\n") + "0000").into_bytes();
    let delete = pkt(&format!("{OLD} {ZERO} refs/heads/old\0 report-status\n")) + "0000";
    let bodies: &[(&str, &[u8])] = &[
        ("push", &push),
        ("delete", delete.as_bytes()),
        ("fetch", &fetch),
        ("probe", b"0000"),
        ("gzip", b"\x1f\x8b\x08\x00"),
    ];
    check(
        &[
            "POST github.com/o/r.git/git-receive-pack [push] => git.push",
            "POST gitlab.com/g/sub/p/git-receive-pack [push] => git.push",
            "POST 127.0.0.1/demo/app.git/git-receive-pack [push] => git.push",
            "POST dev.azure.com/org/p/_git/r/git-receive-pack [delete] => git.push",
            "POST github.com/a//b/./c/../git-receive-pack [push] => git.push",
            "POST github.com/o/r.git/%67it-receive-pack [push] => git.push",
            "POST github.com/o/r.git/GIT-RECEIVE-PACK [push] => git.push",
            "POST github.com/o/x/%2e%2e/r.git/git-receive-pack [push] => git.push",
            "POST github.com/o/r.git/git-receive-pack;jsessionid=1 [push] => git.push",
            "POST github.com/o/r.git/git-receive-pack%00 [push] => git.push",
            "post github.com/o/r.git/git-receive-pack [push] => git.push",
            // body not read, gzip: fail closed
            "POST github.com/o/r.git/git-receive-pack [-] => git.push",
            "POST github.com/o/r.git/git-receive-pack [gzip] => git.push",
            // the 4-byte auth probe, ref discovery and fetches pass
            "POST github.com/o/r.git/git-receive-pack [probe] => allow",
            "GET github.com/o/r.git/info/refs?service=git-receive-pack => allow",
            "GET github.com/o/r.git/info/refs?service=git-upload-pack => allow",
            "POST github.com/o/r.git/git-upload-pack [fetch] => allow",
            "POST github.com/o/git-receive-pack.git/git-upload-pack [fetch] => allow",
            "POST example.com/api/v1/items%2Fx [gzip] => allow",
        ],
        bodies,
    );
}

#[test]
fn git_push_summary_names_the_ref_updates() {
    let push = push_body();
    let path = "/o/r.git/git-receive-pack";
    let d = decide(&req("POST", "github.com", path, Some(&push)));
    assert_eq!(
        d.summary(),
        Some("git push github.com/o/r.git: refs/heads/main 1111111..2222222")
    );
    // a prefix cut inside the first command's capabilities still names it
    let mut r = req("POST", "github.com", path, Some(&push[..120]));
    r.body_complete = false;
    let d = decide(&r);
    assert_eq!(d.rule(), Some("git.push"));
    assert!(d.summary().unwrap().contains("refs/heads/main"), "{d:?}");
    let d = decide(&RequestInfo {
        content_type: Some("application/x-git-receive-pack-request"),
        ..req("POST", "github.com", path, None)
    });
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
    let bodies: &[(&str, &[u8])] = &[
        ("upload", upload),
        ("download", br#"{"operation":"download","objects":[]}"#),
        ("odd-case", br#"{"operation":"Upload"}"#),
        ("no-op", br#"{"objects":[]}"#),
        ("dup", br#"{"operation":"download","operation":"upload"}"#),
        ("cut", b"{"),
        ("lock", br#"{"path":"a"}"#),
        ("{}", b"{}"),
    ];
    check(
        &[
            "POST github.com/o/r.git/info/lfs/objects/batch [upload] => git.lfs.upload",
            "POST huggingface.co/datasets/o/d.git/info/lfs/objects/batch [upload] => git.lfs.upload",
            "POST github.com/o/r.git/info/lfs/objects/batch [odd-case] => git.lfs.upload",
            "POST github.com/o/r.git/info/lfs/objects/batch [no-op] => git.lfs.upload",
            "POST github.com/o/r.git/info/lfs/objects/batch [dup] => git.lfs.upload",
            "POST github.com/o/r.git/info/lfs/objects/batch [cut] => git.lfs.upload",
            "POST github.com/o/r.git/info/lfs/objects/batch [-] => git.lfs.upload",
            "POST github.com/o/r.git/info/lfs/objects/batch [download] => allow",
            "POST github.com/o/r.git/info/lfs/locks [lock] => git.lfs.lock",
            "POST github.com/o/r.git/info/lfs/locks/12/unlock => git.lfs.lock",
            "POST github.com/o/r.git/info/lfs/locks/verify [{}] => allow",
            "GET github.com/o/r.git/info/lfs/locks => allow",
        ],
        bodies,
    );
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
    let mutation = br#"{"query":"mutation PullRequestCreate($i: CreatePullRequestInput!) { createPullRequest(input: $i) { pullRequest { url } } }","variables":{"i":{}}}"#;
    let bodies: &[(&str, &[u8])] = &[
        ("query", br#"{"query":"query { viewer { login } }"}"#),
        ("mutation", mutation),
        (
            "batch",
            br#"[{"query":"{ a }"},{"query":"mutation { b }"}]"#,
        ),
        (
            "named-query",
            br#"{"query":"query A { a } mutation B { b }","operationName":"A"}"#,
        ),
        (
            "named-mutation",
            br#"{"query":"query A { a } mutation B { b }","operationName":"B"}"#,
        ),
        ("garbage", b"not json"),
        (
            "persisted",
            br#"{"extensions":{"persistedQuery":{"sha256Hash":"ab"}}}"#,
        ),
        ("{}", b"{}"),
        ("text", b"x"),
    ];
    check(
        &[
            "POST api.github.com/graphql [query] => allow",
            "POST api.github.com/graphql [named-query] => allow",
            "POST api.github.com/graphql [mutation] => github.graphql.mutation",
            "POST api.github.com/graphql [named-mutation] => github.graphql.mutation",
            "POST api.github.com/graphql [batch] => github.graphql.mutation",
            "POST api.github.com/graphql [garbage] => github.graphql.mutation",
            "POST api.github.com/graphql [persisted] => github.graphql.mutation",
            "POST api.github.com/graphql [-] => github.graphql.mutation",
            // the operation is read where servers read it: the query string too
            "POST api.github.com/graphql?query=mutation%20%7B%20b%20%7D [query] => github.graphql.mutation",
            "POST api.github.com/graphql?query=%7B%20a%20%7D [query] => allow",
            "GET api.github.com/graphql?query=mutation%20%7B%20b%20%7D => github.graphql.mutation",
            "GET api.github.com/graphql?query=%7B%20a%20%7D => allow",
            "GET api.github.com/graphql?query=query%20A%20%7B%20a%20%7D%20mutation%20B%20%7B%20b%20%7D&operationName=B => github.graphql.mutation",
            "GET api.github.com/graphql?query=query%20A%20%7B%20a%20%7D%20mutation%20B%20%7B%20b%20%7D&operationName=A => allow",
            "POST api.github.com/graphql?operationName=B [named-query] => github.graphql.mutation",
            "GET api.github.com/graphql?extensions=%7B%22persistedQuery%22%3A%7B%7D%7D => github.graphql.mutation",
            "GET api.github.com/graphql => github.graphql.mutation",
            // any suffix a router accepts
            "POST api.github.com/graphql/ [mutation] => github.graphql.mutation",
            "POST api.github.com/graphql.json [mutation] => github.graphql.mutation",
            "POST api.github.com/GraphQL.anything [mutation] => github.graphql.mutation",
            "POST api.github.com//graphql/./ [mutation] => github.graphql.mutation",
            "POST api.github.com/graphql.json [query] => allow",
            "POST api.github.com/graphql/ [query] => allow",
            "POST api.github.com/repos/o/r/issues [{}] => github.rest.write",
            "PUT api.github.com/repos/o/r/pulls/1/merge => github.rest.write",
            "PATCH api.github.com/repos/o/r/git/refs/heads/main => github.rest.write",
            "DELETE api.github.com/repos/o/r => github.rest.write",
            "POST api.github.com/gists => github.rest.write",
            "POST api.github.com/markdown [{}] => allow",
            "POST api.github.com/markdown/raw [text] => allow",
            "GET api.github.com/repos/o/r/pulls => allow",
            "HEAD api.github.com/ => allow",
            "POST uploads.github.com/repos/o/r/releases/1/assets?name=a.tgz [text] => github.release.upload",
            "GET codeload.github.com/o/r/tar.gz/main => allow",
        ],
        bodies,
    );
    let d = decide(&req("POST", "api.github.com", "/graphql", Some(mutation)));
    assert_eq!(
        d.summary(),
        Some("GraphQL api.github.com mutation PullRequestCreate: createPullRequest")
    );
}

#[test]
fn gitlab() {
    let bodies: &[(&str, &[u8])] = &[
        ("{}", b"{}"),
        ("query", br#"{"query":"{ currentUser { id } }"}"#),
        (
            "persisted",
            br#"{"operationName":"X","extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab"}}}"#,
        ),
        (
            "batch",
            br#"[{"query":"{ a }"},{"query":"mutation { b }"}]"#,
        ),
    ];
    check(
        &[
            "POST gitlab.com/api/v4/projects/1/issues [{}] => gitlab.api.write",
            "PUT gitlab.com/api/v4/projects/g%2Fp/merge_requests/1/merge => gitlab.api.write",
            "DELETE gitlab.com/api/v4/projects/1 => gitlab.api.write",
            "GET gitlab.com/api/v4/projects/g%2Fp => allow",
            "POST gitlab.com/api/v4/markdown [{}] => allow",
            "POST gitlab.com/api/v4/projects/g%2Fp/ci/lint [{}] => allow",
            "POST gitlab.com/api/graphql [query] => allow",
            "POST gitlab.com/api/graphql [batch] => gitlab.graphql.mutation",
            // Rails lets `?query=` override the body; a mutation in either is a mutation
            "POST gitlab.com/api/graphql?query=mutation%20%7B%20b%20%7D [query] => gitlab.graphql.mutation",
            "POST gitlab.com/api/graphql.json [batch] => gitlab.graphql.mutation",
            "POST gitlab.com/api/graphql.anything [batch] => gitlab.graphql.mutation",
            "POST gitlab.com/api/graphql/ [batch] => gitlab.graphql.mutation",
            "GET gitlab.com/api/graphql?query=mutation+%7B+b+%7D => gitlab.graphql.mutation",
            "GET gitlab.com/api/graphql.json?query=%7B+a+%7D => allow",
            "POST gitlab.com/api/graphql.json [query] => allow",
            "POST gitlab.com/api/graphql [persisted] => gitlab.graphql.mutation",
        ],
        bodies,
    );
}

#[test]
fn huggingface() {
    let bodies: &[(&str, &[u8])] = &[
        ("{}", b"{}"),
        ("upload", br#"{"operation":"upload","objects":[]}"#),
    ];
    check(
        &[
            "POST huggingface.co/api/models/o/m/commit/main [{}] => huggingface.commit",
            "POST huggingface.co/api/datasets/d/commit/refs%2Fpr%2F1?create_pr=1 [{}] => huggingface.commit",
            "GET huggingface.co/api/models/o/m/xet-write-token/main => huggingface.upload",
            "POST huggingface.co/o/m.git/info/lfs/objects/batch [upload] => git.lfs.upload",
            "POST huggingface.co/api/repos/create [{}] => huggingface.repo",
            "DELETE huggingface.co/api/repos/delete [{}] => huggingface.repo",
            "POST huggingface.co/api/models/o/m/paths-info/main [{}] => allow",
            "POST huggingface.co/api/models/o/m/preupload/main [{}] => allow",
            "GET huggingface.co/api/models/o/m/revision/main => allow",
            "GET huggingface.co/api/models/o/m/xet-read-token/main => allow",
        ],
        bodies,
    );
}

const PUBLISH: &[u8] = br#"{"_id":"pkg","name":"pkg","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":{}},"access":null,"_attachments":{"pkg-1.0.0.tgz":{"data":"AAAA"}}}"#;

#[test]
fn npm() {
    let bodies: &[(&str, &[u8])] = &[
        ("publish", PUBLISH),
        (
            "deprecate",
            br#"{"_id":"pkg","name":"pkg","versions":{"1.0.0":{"deprecated":"no"}}}"#,
        ),
        (
            "owner",
            br#"{"_id":"pkg","_rev":"3-abc","maintainers":[{"name":"a"}]}"#,
        ),
        ("version", b"\"1.0.0\""),
        ("gzip", b"\x1f\x8b"),
        ("{}", b"{}"),
    ];
    for host in ["registry.npmjs.org", "registry.yarnpkg.com"] {
        let rows = [
            "PUT H/pkg [publish] => npm.publish",
            "PUT H/@scope%2fpkg [publish] => npm.publish",
            "PUT H/pkg [-] => npm.publish",
            "POST H/-/stage/package/pkg [publish] => npm.publish",
            "PUT H/pkg [deprecate] => npm.deprecate",
            "PUT H/@scope%2Fpkg [deprecate] => npm.deprecate",
            "PUT H/-/package/pkg/dist-tags/beta [version] => npm.dist-tag",
            "DELETE H/-/package/@s%2fpkg/dist-tags/beta => npm.dist-tag",
            "DELETE H/pkg/-rev/3-abc => npm.unpublish",
            "DELETE H/pkg/-/pkg-1.0.0.tgz/-rev/3-abc => npm.unpublish",
            "PUT H/pkg/-rev/3-abc [deprecate] => npm.unpublish",
            "PUT H/pkg/-rev/3-abc [owner] => npm.owner",
            "PUT H/-/user/org.couchdb.user:me [{}] => npm.write",
            "POST H/-/package/pkg/access [{}] => npm.write",
            "POST H/-/npm/v1/security/advisories/bulk [gzip] => allow",
            "POST H/-/npm/v1/security/audits [{}] => allow",
            "POST H/-/npm/v1/security/audits/quick [{}] => allow",
            "GET H/pkg => allow",
            "GET H/@scope%2fpkg => allow",
            "GET H/pkg?write=true => allow",
        ]
        .map(|r| r.replace(" H/", &format!(" {host}/")));
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        check(&rows, bodies);
    }
    let d = decide(&req(
        "PUT",
        "registry.npmjs.org",
        "/@scope%2fpkg",
        Some(PUBLISH),
    ));
    assert_eq!(d.summary(), Some("npm publish @scope/pkg@1.0.0"));
    // a publish larger than the prefix: still a publish, version read from the prefix
    let mut r = req("PUT", "registry.npmjs.org", "/pkg", Some(&PUBLISH[..100]));
    r.body_complete = false;
    let d = decide(&r);
    assert_eq!(d.rule(), Some("npm.publish"));
    assert!(
        d.summary().unwrap().starts_with("npm publish pkg@1.0.0"),
        "{d:?}"
    );
    let tag = "/-/package/pkg/dist-tags/beta";
    let d = decide(&req("PUT", "registry.npmjs.org", tag, Some(b"\"1.0.0\"")));
    assert_eq!(d.summary(), Some("npm dist-tag add pkg beta → 1.0.0"));
}

#[test]
fn pypi() {
    let form =
        b"--B0undary\r\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\ndemo\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"version\"\r\n\r\n0.1.0\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"sha256_digest\"\r\n\r\n\
4f1e0a9cc3d2b1a0f9e8d7c6b5a4938271605f4e3d2c1b0a9f8e7d6c5b4a3921\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"content\"; filename=\"demo-0.1.0-py3-none-any.whl\"\r\n\r\nPK";
    check(
        &[
            "POST upload.pypi.org/legacy/ [form] => pypi.upload",
            "POST test.pypi.org/legacy/ [form] => pypi.upload",
            "GET pypi.org/simple/demo/ => allow",
            "GET files.pythonhosted.org/packages/x/demo.whl => allow",
            "GET test.pypi.org/simple/demo/ => allow",
        ],
        &[("form", form)],
    );
    let mut r = req("POST", "upload.pypi.org", "/legacy/", Some(form));
    r.body_complete = false;
    // a multipart body cut short may name another method further on: still a PyPI upload
    r.content_type = Some("multipart/form-data; boundary=B0undary");
    let d = decide(&r);
    assert_eq!(d.rule(), Some("pypi.upload"));
    // each file of a release is its own approval: the summary names the file and its digest
    assert!(
        d.summary().unwrap().starts_with(
            "PyPI upload demo==0.1.0: demo-0.1.0-py3-none-any.whl \
             sha256=4f1e0a9cc3d2b1a0f9e8d7c6b5a4938271605f4e3d2c1b0a9f8e7d6c5b4a3921"
        ),
        "{d:?}"
    );
    let sdist = String::from_utf8_lossy(form).replace("-py3-none-any.whl", ".tar.gz")
        + "\r\n--B0undary--\r\n";
    let d = decide(&req(
        "POST",
        "upload.pypi.org",
        "/legacy/",
        Some(sdist.as_bytes()),
    ));
    assert!(
        d.summary().unwrap().contains(": demo-0.1.0.tar.gz sha256="),
        "{d:?}"
    );
}

#[test]
fn crates() {
    let meta = br#"{"name":"demo","vers":"0.1.0","deps":[]}"#;
    let mut frame = (meta.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(meta);
    frame.extend_from_slice(&[4, 0, 0, 0, 1, 2]);
    let bodies: &[(&str, &[u8])] = &[
        ("frame", &frame),
        ("users", br#"{"users":["a"]}"#),
        ("{}", b"{}"),
    ];
    check(
        &[
            "PUT crates.io/api/v1/crates/new [frame] => crates.publish",
            "DELETE crates.io/api/v1/crates/demo/0.1.0/yank => crates.yank",
            "PUT crates.io/api/v1/crates/demo/0.1.0/unyank => crates.yank",
            "PUT crates.io/api/v1/crates/demo/owners [users] => crates.owners",
            "DELETE crates.io/api/v1/crates/demo/owners [users] => crates.owners",
            "PUT crates.io/api/v1/me/tokens [{}] => crates.write",
            "GET crates.io/api/v1/crates/demo => allow",
            "GET index.crates.io/de/mo/demo => allow",
            "GET static.crates.io/crates/demo/demo-0.1.0.crate => allow",
        ],
        bodies,
    );
    let d = decide(&req("PUT", "crates.io", "/api/v1/crates/new", Some(&frame)));
    assert_eq!(d.summary(), Some("cargo publish demo@0.1.0"));
    let yank = "/api/v1/crates/demo/0.1.0/yank";
    let d = decide(&req("DELETE", "crates.io", yank, Some(b"")));
    assert_eq!(d.summary(), Some("cargo yank demo@0.1.0"));
}

#[test]
fn oci() {
    let bodies: &[(&str, &[u8])] = &[("x", b"x"), ("{}", b"{}")];
    for host in [
        "ghcr.io",
        "registry-1.docker.io",
        "127.0.0.1",
        "x.dkr.ecr.us-east-1.amazonaws.com",
    ] {
        let rows = [
            "POST H/v2/o/img/blobs/uploads/ => oci.push",
            "POST H/v2/o/img/blobs/uploads/?mount=sha256:ab&from=o/other => oci.push",
            "PATCH H/v2/o/img/blobs/uploads/uuid-1 [x] => oci.push",
            "PUT H/v2/o/img/blobs/uploads/uuid-1?digest=sha256:ab => oci.push",
            "PUT H/v2/a/b/c/manifests/latest [{}] => oci.push",
            "DELETE H/v2/o/img/manifests/sha256:ab => oci.delete",
            "DELETE H/v2/o/img/blobs/sha256:ab => oci.delete",
            "GET H/v2/ => allow",
            "GET H/v2/o/img/manifests/latest => allow",
            "HEAD H/v2/o/img/blobs/sha256:ab => allow",
            "GET H/v2/o/img/blobs/sha256:ab => allow",
            "GET H/token?scope=repository:o/img:pull,push => allow",
        ]
        .map(|r| r.replace(" H/", &format!(" {host}/")));
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        check(&rows, bodies);
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
    let yank: &[u8] = b"gem_name=demo&version=1.0";
    let bodies: &[(&str, &[u8])] = &[
        ("gem", b"data.tar.gz"),
        ("yank", yank),
        ("owner", b"email=a"),
    ];
    check(
        &[
            "POST rubygems.org/api/v1/gems [gem] => rubygems.push",
            "DELETE rubygems.org/api/v1/gems/yank [yank] => rubygems.yank",
            "POST rubygems.org/api/v1/gems/demo/owners [owner] => rubygems.owners",
            "POST rubygems.org/api/v1/web_hooks [gem] => rubygems.write",
            "GET rubygems.org/api/v1/gems/rails.json => allow",
            "GET index.rubygems.org/info/rails => allow",
        ],
        bodies,
    );
    let d = decide(&req(
        "DELETE",
        "rubygems.org",
        "/api/v1/gems/yank",
        Some(yank),
    ));
    assert_eq!(d.summary(), Some("gem yank demo 1.0"));
}

/// The same wire shapes on registries the preset does not name: private npm, PyPI and cargo
/// registries, OCI registries and git servers. Their reads stay allowed.
#[test]
fn registries_on_any_host() {
    let meta = br#"{"name":"demo","vers":"0.1.0","deps":[]}"#;
    let mut frame = (meta.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(meta);
    let pypi =
        b"--B0undary\r\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\ndemo\r\n\
--B0undary\r\nContent-Disposition: form-data; name=\"content\"; filename=\"demo.whl\"\r\n\r\nPK\r\n\
--B0undary--\r\n";
    let upload = b"--B0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhi\r\n--B0undary--\r\n";
    let fetch = (pkt("command=ls-refs\n") + "0000").into_bytes();
    // Packuments a registry's `JSON.parse` (or body-parser, which strips a BOM and reads
    // UTF-16) takes and serde_json refuses: still judged, never read as "no packument".
    let deep = format!(
        r#"{{"name":"pkg","versions":{{"1.0.0":{{"x":{}1{}}}}},"_attachments":{{"a":{{}}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let surrogate = br#"{"name":"pkg","description":"\ud800","_attachments":{"a":{}}}"#;
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(PUBLISH);
    let utf16: Vec<u8> = b"\xFF\xFE"
        .iter()
        .copied()
        .chain(PUBLISH.iter().flat_map(|&b| [b, 0]))
        .collect();
    let bodies: &[(&str, &[u8])] = &[
        ("publish", PUBLISH),
        ("deep", deep.as_bytes()),
        ("surrogate", surrogate),
        ("bom", &bom),
        ("utf16", &utf16),
        (
            "deprecate",
            br#"{"_id":"pkg","name":"pkg","versions":{"1.0.0":{"deprecated":"no"}}}"#,
        ),
        (
            "owner",
            br#"{"_id":"pkg","_rev":"3-abc","maintainers":[{"name":"a"}]}"#,
        ),
        ("version", b"\"1.0.0\""),
        ("gzip", b"\x1f\x8b"),
        ("{}", b"{}"),
        ("doc", br#"{"name":"x","title":"y"}"#),
        ("text", b"hello"),
        ("frame", &frame),
        ("users", br#"{"users":["a"]}"#),
        ("pypi", pypi),
        ("upload", upload),
        ("form", b"a=1&b=2"),
        ("lfs-up", br#"{"operation":"upload","objects":[]}"#),
        ("lfs-down", br#"{"operation":"download","objects":[]}"#),
        ("fetch", &fetch),
    ];
    for host in [
        "verdaccio.internal:4873",
        "npm.pkg.github.com",
        "10.0.0.7:8080",
    ] {
        let rows = [
            "PUT H/pkg [publish] => npm.publish",
            "PUT H/@scope%2fpkg [publish] => npm.publish",
            "PUT H/@scope%2Fpkg [publish] => npm.publish",
            "PUT H/pkg [-] => npm.publish",
            "PUT H/pkg [deep] => npm.publish",
            "PUT H/pkg [surrogate] => npm.publish",
            "PUT H/@scope%2fpkg [bom] => npm.publish",
            "PUT H/pkg [utf16] => npm.publish",
            "POST H/-/stage/package/pkg [publish] => npm.publish",
            "PUT H/pkg [deprecate] => npm.deprecate",
            "PUT H/@scope%2fpkg [deprecate] => npm.deprecate",
            "PUT H/-/package/pkg/dist-tags/beta [version] => npm.dist-tag",
            "DELETE H/-/package/@s%2fpkg/dist-tags/beta => npm.dist-tag",
            "DELETE H/pkg/-rev/3-abc => npm.unpublish",
            "DELETE H/@s%2fpkg/-/pkg-1.0.0.tgz/-rev/3-abc => npm.unpublish",
            "PUT H/pkg/-rev/3-abc [deprecate] => npm.unpublish",
            "PUT H/pkg/-rev/3-abc [owner] => npm.owner",
            // reads, and writes that are not packuments
            "POST H/-/npm/v1/security/advisories/bulk [gzip] => allow",
            "POST H/-/npm/v1/security/audits [{}] => allow",
            "POST H/-/npm/v1/security/audits/quick [{}] => allow",
            "GET H/pkg => allow",
            "GET H/@scope%2fpkg => allow",
            "GET H/pkg/-/pkg-1.0.0.tgz => allow",
            "PUT H/pkg [{}] => allow",
            "PUT H/docs [doc] => allow",
            "PUT H/file.txt [text] => allow",
            "PUT H/a/b/c [{}] => allow",
        ]
        .map(|r| r.replace(" H/", &format!(" {host}/")));
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        check(&rows, bodies);
    }
    check(
        &[
            // npm registries under a path prefix (GitLab, Artifactory)
            "PUT gitlab.internal/api/v4/projects/1/packages/npm/@s%2fpkg [publish] => npm.publish",
            "PUT art.internal/artifactory/api/npm/npm-local/pkg [publish] => npm.publish",
            // PyPI uploads anywhere (devpi, Nexus, a private warehouse)
            "POST pypi.internal/legacy/ [pypi] => pypi.upload",
            "POST devpi.internal:3141/root/dev/ [pypi] => pypi.upload",
            "POST nexus.internal/repository/pypi-hosted/ [pypi] => pypi.upload",
            "POST example.com/upload [upload] => allow",
            "POST example.com/form [form] => allow",
            "GET pypi.internal/simple/demo/ => allow",
            // cargo's registry API anywhere
            "PUT cargo.internal/api/v1/crates/new [frame] => crates.publish",
            "PUT art.internal/artifactory/api/cargo/crates-local/api/v1/crates/new [frame] => crates.publish",
            "DELETE cargo.internal/api/v1/crates/demo/0.1.0/yank => crates.yank",
            "PUT cargo.internal/api/v1/crates/demo/0.1.0/unyank => crates.yank",
            "PUT cargo.internal/api/v1/crates/demo/owners [users] => crates.owners",
            "DELETE cargo.internal/api/v1/crates/demo/owners [users] => crates.owners",
            "GET cargo.internal/api/v1/crates/demo/owners => allow",
            "GET cargo.internal/api/v1/crates?q=demo => allow",
            "GET cargo.internal/index/de/mo/demo => allow",
            "GET cargo.internal/api/v1/crates/demo/0.1.0/download => allow",
            // OCI anywhere, token fetches included
            "POST registry.internal:5000/v2/o/img/blobs/uploads/ => oci.push",
            "PATCH registry.internal:5000/v2/o/img/blobs/uploads/u-1 [text] => oci.push",
            "PUT registry.internal:5000/v2/o/img/blobs/uploads/u-1?digest=sha256:ab => oci.push",
            "PUT registry.internal:5000/v2/o/img/manifests/v1 [{}] => oci.push",
            "DELETE registry.internal:5000/v2/o/img/manifests/v1 => oci.delete",
            "GET registry.internal:5000/v2/o/img/manifests/v1 => allow",
            "GET registry.internal:5000/v2/o/img/blobs/sha256:ab => allow",
            "GET auth.internal/token?scope=repository:o/img:pull,push&service=registry => allow",
            // the RubyGems API anywhere (GitHub Packages under `/OWNER`)
            "POST rubygems.pkg.github.com/acme/api/v1/gems [text] => rubygems.push",
            "POST gems.internal/api/v1/gems [text] => rubygems.push",
            "DELETE gems.internal/private/api/v1/gems/yank [form] => rubygems.yank",
            "POST gems.internal/api/v1/gems/demo/owners [form] => rubygems.owners",
            "GET rubygems.pkg.github.com/acme/api/v1/gems/demo.json => allow",
            // a Maven repository's deploy anywhere; its reads and lone checksums pass
            "PUT maven.pkg.github.com/acme/repo/com/acme/demo/1.0/demo-1.0.jar [text] => maven.deploy",
            "PUT nexus.internal/repository/releases/com/acme/demo/1.0/demo-1.0.pom [text] => maven.deploy",
            "PUT nexus.internal/repository/releases/com/acme/demo/maven-metadata.xml [text] => maven.deploy",
            "PUT repo.internal/releases/com/acme/demo/1.0/demo-1.0.module [text] => maven.deploy",
            "GET nexus.internal/repository/releases/com/acme/demo/1.0/demo-1.0.jar => allow",
            "GET nexus.internal/repository/releases/com/acme/demo/maven-metadata.xml => allow",
            // NuGet's push and unlist anywhere, GitHub Packages' NuGet host
            "PUT www.nuget.org/api/v2/package [text] => nuget.push",
            "PUT proget.internal/nuget/feed/api/v2/package [text] => nuget.push",
            "DELETE proget.internal/nuget/feed/api/v2/package/Demo/1.0.0 => nuget.push",
            "PUT nuget.pkg.github.com/acme/ [text] => nuget.push",
            "GET nuget.pkg.github.com/acme/index.json => allow",
            "GET api.nuget.org/v3-flatcontainer/demo/index.json => allow",
            // Hex's publish, revert, retirement and owners; its reads pass
            "POST hex.pm/api/publish?replace=false [text] => hex.publish",
            "POST hex.pm/api/packages/demo/releases [text] => hex.publish",
            "DELETE hex.pm/api/packages/demo/releases/1.0.0 => hex.publish",
            "POST hex.pm/api/packages/demo/releases/1.0.0/retire [{}] => hex.publish",
            "PUT hex.pm/api/packages/demo/owners/a%40example.com [{}] => hex.publish",
            "POST hex.pm/api/repos/acme/publish [text] => hex.publish",
            "GET hex.pm/api/packages/demo => allow",
            "POST hex.pm/api/keys [{}] => allow",
            // pub's upload form and its finish, whatever the method, on any host
            "GET pub.dev/api/packages/versions/new => pub.publish",
            "GET pub.dev/api/packages/versions/newUploadFinish?upload_id=1 => pub.publish",
            "POST pub.internal/pub/main/api/packages/versions/new [{}] => pub.publish",
            "POST pub.internal/pub/main/api/packages/versions/newUpload [text] => pub.publish",
            "GET pub.dev/api/packages/demo => allow",
            "GET pub.dev/api/packages/demo/versions/1.0.0 => allow",
            // CocoaPods trunk and JSR; their reads pass
            "POST trunk.cocoapods.org/api/v1/pods [{}] => cocoapods.push",
            "DELETE trunk.cocoapods.org/api/v1/pods/Demo/1.0.0 => cocoapods.push",
            "PATCH trunk.cocoapods.org/api/v1/pods/Demo/owners [{}] => cocoapods.push",
            "GET trunk.cocoapods.org/api/v1/pods/Demo => allow",
            "POST trunk.cocoapods.org/api/v1/sessions [{}] => allow",
            "POST api.jsr.io/scopes/acme/packages/demo/versions/1.0.0 [text] => jsr.publish",
            "POST api.jsr.io/scopes/acme/packages [{}] => jsr.publish",
            "GET api.jsr.io/scopes/acme/packages/demo => allow",
            // git and LFS anywhere
            "POST git.internal:8443/o/r.git/info/lfs/objects/batch [lfs-up] => git.lfs.upload",
            "POST git.internal:8443/o/r.git/info/lfs/objects/batch [lfs-down] => allow",
            "POST git.internal:8443/o/r.git/info/lfs/locks [{}] => git.lfs.lock",
            "POST git.internal:8443/o/r.git/info/lfs/locks/1/unlock [{}] => git.lfs.lock",
            "POST git.internal:8443/o/r.git/info/lfs/locks/verify [{}] => allow",
            "POST git.internal:8443/o/r.git/git-upload-pack [fetch] => allow",
            // git's dumb-HTTP (WebDAV) push anywhere; its reads pass
            "LOCK git.internal/o/r.git/info/refs [text] => git.dumb-push",
            "PUT git.internal/o/r.git/refs/heads/main [text] => git.dumb-push",
            "DELETE git.internal/o/r.git/refs/tags/v1 => git.dumb-push",
            "MKCOL git.internal/o/r.git/refs/heads/topic/ => git.dumb-push",
            "PUT git.internal/srv/r/info/refs [text] => git.dumb-push",
            "PUT git.internal/r.git/packed-refs [text] => git.dumb-push",
            "PROPFIND git.internal/o/r.git/refs/ => allow",
            "GET git.internal/o/r.git/info/refs => allow",
            "GET git.internal/o/r.git/refs/heads/main => allow",
        ],
        bodies,
    );
    let summary = |method, host, target, body: &[u8]| {
        decide(&req(method, host, target, Some(body)))
            .summary()
            .unwrap_or_default()
            .to_owned()
    };
    let gitlab = "/api/v4/projects/1/packages/npm/@s%2fpkg";
    assert_eq!(
        summary("PUT", "gitlab.internal", gitlab, PUBLISH),
        "npm publish @s/pkg@1.0.0"
    );
    let rev = "/@s%2fpkg/-/pkg-1.0.0.tgz/-rev/3-abc";
    assert_eq!(
        summary("DELETE", "npm.pkg.github.com", rev, b""),
        "npm unpublish @s/pkg"
    );
    let yank = "/prefix/api/v1/crates/demo/0.1.0/yank";
    assert_eq!(
        summary("DELETE", "cargo.internal", yank, b""),
        "cargo yank demo@0.1.0"
    );
    let owners = "/api/v1/crates/demo/owners";
    assert_eq!(
        summary("PUT", "cargo.internal", owners, br#"{"users":["a"]}"#),
        "cargo owner add demo a"
    );
    // a form the gate did not read may be an upload (or name any method): refused
    let r = RequestInfo {
        content_type: Some("multipart/form-data; boundary=B0undary"),
        ..req("POST", "pypi.internal", "/legacy/", None)
    };
    assert!(matches!(decide(&r), RequestDecision::Deny { .. }), "{r:?}");
}

/// A legacy PyPI form on any host, read as servers read it (Python's `cgi`, behind bottle
/// and WebOb; Rack): what a lenient parser may read as `:action` is judged, never missed.
#[test]
fn legacy_pypi_forms_however_spelled() {
    let real = "--B\r\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n\
                --B\r\nContent-Disposition: form-data; name=\"content\"; filename=\"x-1.0-py3-none-any.whl\"\r\n\r\nPK\r\n\
                --B--\r\n";
    let multipart = "multipart/form-data; boundary=B";
    let cases: Vec<(String, &str)> = vec![
        (real.to_owned(), multipart),
        (real.replace("name=\":action\"", "name=:action"), multipart),
        (real.replace("name=\":action\"", "NAME=\":action\""), multipart),
        (real.replace("name=\":action\"", "name = \":action\""), multipart),
        (real.to_owned(), "multipart/form-data; BOUNDARY=\"B\""),
        // a preamble that opens with another boundary, the one the body's first line names
        (
            format!(
                "--A\r\nContent-Disposition: form-data; name=\"pad\"\r\n\r\nx\r\n{real}\r\n--A--\r\n"
            ),
            multipart,
        ),
        // a delimiter line ending in a bare LF, or with more after it
        (
            format!("--B\r\nContent-Disposition: form-data; name=\"c\"\r\n\r\nhi\n{real}"),
            multipart,
        ),
        (
            real.replacen("--B--", "--B--x\r\n--B\r\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n--B", 1)
                .replacen("--B\r\nContent-Disposition: form-data; name=\":action\"", "--B\r\nContent-Disposition: form-data; name=\"a\"", 1),
            multipart,
        ),
        // headers ending in bare LFs; a folded or doubled Content-Disposition; RFC 2231
        (
            real.replace("name=\":action\"\r\n\r\n", "name=\"a\"\n\n"),
            multipart,
        ),
        (
            real.replace("name=\":action\"", "name=\"a\"; name=\":action\""),
            multipart,
        ),
        (
            real.replace("name=\":action\"", "name*=UTF-8''%3Aaction"),
            multipart,
        ),
        // urlencoded: another action, `;` as a separator
        (
            ":action=remove_pkg&name=x&version=1.0".to_owned(),
            "application/x-www-form-urlencoded",
        ),
        (
            "a=1;:action=remove_pkg&name=x&version=1.0".to_owned(),
            "application/x-www-form-urlencoded",
        ),
    ];
    let failed: Vec<String> = cases
        .iter()
        .filter_map(|(body, ct)| {
            let d = decide(&RequestInfo {
                content_type: Some(ct),
                ..req("POST", "pypi.internal", "/", Some(body.as_bytes()))
            });
            match &d {
                RequestDecision::Deny { rule, .. } if rule == "pypi.upload" => None,
                _ => Some(format!("{ct} {body:?}: {d:?}")),
            }
        })
        .collect();
    assert!(failed.is_empty(), "let through:\n{}", failed.join("\n"));
    // Ordinary forms elsewhere stay allowed.
    for (body, ct) in [
        (
            "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhi\r\n--B--\r\n",
            multipart,
        ),
        ("a=1&b=2", "application/x-www-form-urlencoded"),
    ] {
        let d = decide(&RequestInfo {
            content_type: Some(ct),
            ..req("POST", "example.com", "/upload", Some(body.as_bytes()))
        });
        assert_eq!(d, RequestDecision::Allow, "{body:?}");
    }
}

/// A NuGet feed anywhere (Azure Artifacts, Artifactory, GitLab) is pushed to by NuGet's
/// client with its API key header: a write carrying it is `nuget.push`; the same write
/// without it, and a read with it, are not.
#[test]
fn nuget_pushes_by_their_api_key_header() {
    let with_key: &[&str] = &["content-type", "x-nuget-apikey"];
    let cases = [
        (
            "PUT",
            "pkgs.dev.azure.com",
            "/acme/_packaging/feed/nuget/v2/",
            with_key,
            "nuget.push",
        ),
        (
            "PUT",
            "art.internal",
            "/artifactory/api/nuget/nuget-local",
            with_key,
            "nuget.push",
        ),
        (
            "DELETE",
            "art.internal",
            "/artifactory/api/nuget/nuget-local/Demo/1.0.0",
            with_key,
            "nuget.push",
        ),
        (
            "PUT",
            "pkgs.dev.azure.com",
            "/acme/_packaging/feed/nuget/v2/",
            &["content-type"],
            "allow",
        ),
        (
            "GET",
            "pkgs.dev.azure.com",
            "/acme/_packaging/feed/nuget/v3/index.json",
            with_key,
            "allow",
        ),
    ];
    for (method, host, path, header_names, want) in cases {
        let r = RequestInfo {
            header_names,
            ..req(method, host, path, Some(b"PK\x03\x04"))
        };
        let got = decide(&r);
        assert_eq!(
            got.rule().unwrap_or("allow"),
            want,
            "{method} {host}{path} {header_names:?}: {got:?}"
        );
    }
}
