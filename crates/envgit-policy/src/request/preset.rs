//! The `default` preset (reference/gate.md §1): the irreversible actions envgit knows, each
//! with a stable id that appears in refusals and the log. Order matters only between entries
//! that can match the same request (first match decides).
//!
//! Registry writes are caught by wire shape on every host (a private npm, PyPI, cargo or OCI
//! registry, a git server); where a shape alone would also catch other services' requests
//! (a `PUT` of a package-shaped path, a multipart `POST`), the body decides.

use std::sync::OnceLock;

use crate::GraphqlOperation;

use super::body::Matcher;
use super::matchers::{Methods, pattern_segments};
use super::rule::{Rule, Shape};
use super::summary::Summary;

/// The ids of the `default` preset, in evaluation order.
pub fn default_preset_ids() -> Vec<&'static str> {
    default_rules().iter().map(|r| r.id.as_str()).collect()
}

const SAFE: &[&str] = &["GET", "HEAD", "OPTIONS"];
const NPM: &[&str] = &["registry.npmjs.org", "registry.yarnpkg.com"];
/// Registries the preset does not name (Verdaccio, GitHub Packages, Artifactory, devpi, a
/// private cargo registry): matched by wire shape alone.
const ANY: &[&str] = &["*"];

fn shape(hosts: &[&str], methods: Methods, path: Option<&str>) -> Shape {
    Shape {
        hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        methods,
        paths: path.map(|p| vec![pattern_segments(p)]),
        query: Vec::new(),
        headers: Vec::new(),
        body: Vec::new(),
    }
}

/// An npm package document: `/name` or `/@scope/name` (`/@scope%2fname` is read both ways).
fn package(hosts: &[&str], methods: Methods) -> Shape {
    let mut s = shape(hosts, methods, Some("/*"));
    s.paths = Some(vec![pattern_segments("/*"), pattern_segments("/@*/*")]);
    s
}

/// A GraphQL endpoint at `base` as routers accept it: with a trailing `/` or any format
/// suffix (`/graphql.json`, Rails' `/api/graphql.anything`).
fn graphql(host: &str, base: &str) -> Shape {
    let mut s = shape(&[host], Methods::Any, None);
    s.paths = Some(vec![
        pattern_segments(base),
        pattern_segments(&format!("{base}.*")),
    ]);
    s
}

fn only(methods: &[&str]) -> Methods {
    Methods::Only(methods.iter().map(|m| (*m).to_owned()).collect())
}

fn writes() -> Methods {
    Methods::Except(SAFE.iter().map(|m| (*m).to_owned()).collect())
}

fn with_body(mut s: Shape, m: Matcher) -> Shape {
    s.body.push(m);
    s
}

fn rule(id: &str, summary: Summary, shapes: Vec<Shape>, except: Vec<Shape>) -> Rule {
    Rule {
        id: id.to_owned(),
        shapes,
        except,
        summary,
    }
}

/// The preset's rules, built once.
pub(crate) fn default_rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(build)
}

fn build() -> Vec<Rule> {
    let any = &["*"];
    let post = || only(&["POST"]);
    vec![
        // Smart HTTP push on any host; git's 4-byte `0000` auth probe carries no command.
        rule(
            "git.push",
            Summary::GitPush,
            vec![with_body(
                shape(any, post(), Some("/**/git-receive-pack")),
                Matcher::Pktline(true),
            )],
            vec![],
        ),
        // The LFS batch request is the egress point (upload hrefs may point anywhere). Anything
        // but a plain `"operation":"download"` counts (an odd case or a missing field too).
        rule(
            "git.lfs.upload",
            Summary::Lfs,
            vec![with_body(
                shape(any, post(), Some("/**/info/lfs/objects/batch")),
                Matcher::JsonFieldOtherThan("operation".into(), "download".into()),
            )],
            vec![],
        ),
        // Lock creation and release (`locks/verify`, run by the pre-push hook, is a read).
        rule(
            "git.lfs.lock",
            Summary::Lfs,
            vec![
                shape(any, post(), Some("/**/info/lfs/locks")),
                shape(any, post(), Some("/**/info/lfs/locks/*/unlock")),
            ],
            vec![],
        ),
        rule(
            "github.graphql.mutation",
            Summary::Graphql,
            vec![with_body(
                graphql("api.github.com", "/graphql"),
                Matcher::Graphql(GraphqlOperation::Mutation),
            )],
            vec![],
        ),
        rule(
            "github.rest.write",
            Summary::Request,
            vec![shape(&["api.github.com"], writes(), None)],
            vec![
                // Judged by `github.graphql.mutation`, whatever the method.
                graphql("api.github.com", "/graphql"),
                shape(&["api.github.com"], post(), Some("/markdown")),
                shape(&["api.github.com"], post(), Some("/markdown/raw")),
            ],
        ),
        rule(
            "github.release.upload",
            Summary::Request,
            vec![shape(&["uploads.github.com"], writes(), None)],
            vec![],
        ),
        rule(
            "gitlab.graphql.mutation",
            Summary::Graphql,
            vec![with_body(
                graphql("gitlab.com", "/api/graphql"),
                Matcher::Graphql(GraphqlOperation::Mutation),
            )],
            vec![],
        ),
        rule(
            "gitlab.api.write",
            Summary::Request,
            vec![shape(&["gitlab.com"], writes(), Some("/api/v4/**"))],
            vec![
                shape(&["gitlab.com"], post(), Some("/api/v4/markdown")),
                shape(&["gitlab.com"], post(), Some("/api/v4/ci/lint")),
                shape(&["gitlab.com"], post(), Some("/api/v4/projects/**/ci/lint")),
            ],
        ),
        rule(
            "huggingface.commit",
            Summary::Request,
            vec![shape(
                &["huggingface.co"],
                post(),
                Some("/api/*/**/commit/**"),
            )],
            vec![],
        ),
        // The Xet write token is the cleanest early signal of an upload (gate.md §1.5); LFS
        // uploads to the Hub are `git.lfs.upload`.
        rule(
            "huggingface.upload",
            Summary::Request,
            vec![shape(
                &["huggingface.co"],
                only(&["GET"]),
                Some("/api/*/**/xet-write-token/**"),
            )],
            vec![],
        ),
        // Repository admin (create, delete, move, settings, branches, tags, discussions); the
        // POSTs that only read are excepted.
        rule(
            "huggingface.repo",
            Summary::Request,
            vec![shape(&["huggingface.co"], writes(), Some("/api/**"))],
            vec![
                shape(&["huggingface.co"], post(), Some("/api/*/**/paths-info/**")),
                shape(&["huggingface.co"], post(), Some("/api/*/**/preupload/**")),
            ],
        ),
        rule(
            "npm.dist-tag",
            Summary::Npm,
            vec![
                shape(
                    NPM,
                    only(&["PUT", "DELETE"]),
                    Some("/-/package/**/dist-tags/**"),
                ),
                shape(
                    ANY,
                    only(&["PUT", "DELETE"]),
                    Some("/**/-/package/**/dist-tags/*"),
                ),
            ],
            vec![],
        ),
        // Whole-package DELETE, tarball DELETE, and the packument PUT that drops a version
        // (it carries `versions`; an owner change does not).
        rule(
            "npm.unpublish",
            Summary::Npm,
            vec![
                shape(NPM, only(&["DELETE"]), Some("/**/-rev/**")),
                with_body(
                    shape(NPM, only(&["PUT"]), Some("/**/-rev/*")),
                    Matcher::JsonField("versions".into(), "*".into()),
                ),
                // `-rev` is npm's own path shape (CouchDB itself uses `?rev=`).
                shape(ANY, only(&["DELETE"]), Some("/**/-rev/*")),
                with_body(
                    shape(ANY, only(&["PUT"]), Some("/**/-rev/*")),
                    Matcher::JsonField("versions".into(), "*".into()),
                ),
            ],
            vec![],
        ),
        rule(
            "npm.owner",
            Summary::Npm,
            vec![
                shape(NPM, only(&["PUT"]), Some("/**/-rev/*")),
                shape(ANY, only(&["PUT"]), Some("/**/-rev/*")),
            ],
            vec![],
        ),
        // A packument PUT with a tarball attached (or a staged publish); without one it is a
        // deprecation (the whole packument, modified).
        rule(
            "npm.publish",
            Summary::Npm,
            vec![
                with_body(
                    package(NPM, only(&["PUT"])),
                    Matcher::JsonNonEmpty("_attachments".into()),
                ),
                shape(NPM, post(), Some("/-/stage/package/**")),
                // Elsewhere the body decides, on any path (GitLab and Artifactory serve npm
                // under a prefix).
                with_body(shape(ANY, only(&["PUT"]), None), Matcher::Packument(true)),
                shape(ANY, post(), Some("/**/-/stage/package/**")),
            ],
            vec![],
        ),
        rule(
            "npm.deprecate",
            Summary::Npm,
            vec![
                package(NPM, only(&["PUT"])),
                with_body(package(ANY, only(&["PUT"])), Matcher::Packument(false)),
            ],
            vec![],
        ),
        // Everything else that writes (access, teams, tokens, login); `npm audit` is a read.
        rule(
            "npm.write",
            Summary::Npm,
            vec![shape(NPM, writes(), None)],
            vec![
                shape(NPM, post(), Some("/-/npm/v1/security/advisories/bulk")),
                shape(NPM, post(), Some("/-/npm/v1/security/audits")),
                shape(NPM, post(), Some("/-/npm/v1/security/audits/quick")),
            ],
        ),
        rule(
            "pypi.upload",
            Summary::Pypi,
            vec![
                shape(&["upload.pypi.org", "test.pypi.org"], writes(), None),
                // twine's upload form, wherever it is sent (devpi, Nexus, a private index), and
                // the legacy API's other actions there (`remove_pkg`, `doc_upload`, `submit`):
                // a form with an `:action` field is that API.
                with_body(
                    shape(ANY, post(), None),
                    Matcher::UploadForm(":action".into(), "*".into()),
                ),
            ],
            vec![],
        ),
        rule(
            "crates.publish",
            Summary::Cargo,
            vec![shape(ANY, only(&["PUT"]), Some("/**/api/v1/crates/new"))],
            vec![],
        ),
        rule(
            "crates.yank",
            Summary::Cargo,
            vec![
                shape(ANY, only(&["DELETE"]), Some("/**/api/v1/crates/*/*/yank")),
                shape(ANY, only(&["PUT"]), Some("/**/api/v1/crates/*/*/unyank")),
            ],
            vec![],
        ),
        rule(
            "crates.owners",
            Summary::Cargo,
            vec![shape(
                ANY,
                only(&["PUT", "DELETE"]),
                Some("/**/api/v1/crates/*/owners"),
            )],
            vec![],
        ),
        rule(
            "crates.write",
            Summary::Cargo,
            vec![shape(&["crates.io"], writes(), Some("/api/**"))],
            vec![],
        ),
        // Blob uploads (the egress point) and manifest PUTs (the commit point), any host.
        // `{name*}` is at least one segment.
        rule(
            "oci.push",
            Summary::Oci,
            vec![
                shape(
                    any,
                    only(&["POST", "PUT", "PATCH"]),
                    Some("/v2/*/**/blobs/uploads/**"),
                ),
                shape(any, only(&["PUT"]), Some("/v2/*/**/manifests/*")),
            ],
            vec![],
        ),
        rule(
            "oci.delete",
            Summary::Oci,
            vec![
                shape(any, only(&["DELETE"]), Some("/v2/*/**/manifests/*")),
                shape(any, only(&["DELETE"]), Some("/v2/*/**/blobs/*")),
            ],
            vec![],
        ),
        // The RubyGems API on every host (GitHub Packages serves it under `/OWNER`,
        // Gemfury, Artifactory and Gemstash under other prefixes).
        rule(
            "rubygems.push",
            Summary::Gem,
            vec![shape(ANY, post(), Some("/**/api/v1/gems"))],
            vec![],
        ),
        rule(
            "rubygems.yank",
            Summary::Gem,
            vec![shape(ANY, only(&["DELETE"]), Some("/**/api/v1/gems/yank"))],
            vec![],
        ),
        rule(
            "rubygems.owners",
            Summary::Gem,
            vec![shape(
                ANY,
                only(&["POST", "PUT", "DELETE"]),
                Some("/**/api/v1/gems/*/owners"),
            )],
            vec![],
        ),
        rule(
            "rubygems.write",
            Summary::Request,
            vec![shape(&["rubygems.org"], writes(), Some("/api/**"))],
            vec![],
        ),
        // A Maven repository's deploy (`mvn deploy`, Gradle's `publish`): a PUT of each
        // artifact, its POM and the metadata, on every host (Sonatype, GitHub Packages,
        // Nexus, Artifactory, reposilite). Checksums and signatures alone publish nothing.
        rule(
            "maven.deploy",
            Summary::Request,
            ["pom", "jar", "war", "aar", "module", "klib"]
                .iter()
                .map(|ext| shape(ANY, only(&["PUT", "POST"]), Some(&format!("/**/*.{ext}"))))
                .chain([shape(
                    ANY,
                    only(&["PUT", "POST"]),
                    Some("/**/maven-metadata.xml"),
                )])
                .collect(),
            vec![],
        ),
        // NuGet's push and delete (unlist) where its V2 publish resource is (nuget.org,
        // ProGet, Nexus, BaGet), GitHub Packages' NuGet host, which publishes at the owner's
        // root, and a write carrying NuGet's API key header anywhere.
        rule(
            "nuget.push",
            Summary::Request,
            vec![
                shape(
                    ANY,
                    only(&["PUT", "POST", "DELETE"]),
                    Some("/**/api/v2/package"),
                ),
                shape(
                    ANY,
                    only(&["PUT", "POST", "DELETE"]),
                    Some("/**/api/v2/package/**"),
                ),
                shape(&["nuget.pkg.github.com"], writes(), None),
                // Any other feed (Azure Artifacts' `…/nuget/v2/`, Artifactory's
                // `api/nuget/REPO`, GitLab's): NuGet's client sends its API key header with
                // every push and delete, and reads carry none.
                Shape {
                    headers: vec!["x-nuget-apikey".to_owned()],
                    ..shape(ANY, only(&["PUT", "POST", "DELETE"]), None)
                },
            ],
            vec![],
        ),
        // Hex (Elixir, Erlang): `mix hex.publish` and `rebar3 hex publish` post the tarball to
        // `/api/publish` (older clients to `/api/packages/NAME/releases`), an organization's
        // below `/api/repos/ORG/`; a release's revert, retirement, docs and a package's owners
        // are writes below the package.
        rule(
            "hex.publish",
            Summary::Request,
            [
                "/api/publish",
                "/api/packages/**",
                "/api/repos/*/publish",
                "/api/repos/*/packages/**",
            ]
            .iter()
            .map(|path| shape(&["hex.pm"], writes(), Some(path)))
            .collect(),
            vec![],
        ),
        // pub (Dart, Flutter): `dart pub publish` asks `api/packages/versions/new` for an
        // upload form (a `GET` in pub's repository spec, a `POST` on some servers), sends the
        // archive where it says, and makes the version with a `GET` of `newUploadFinish`:
        // judged at each of pub's own paths whatever the method, on any host (a private
        // repository serves them below its prefix).
        rule(
            "pub.publish",
            Summary::Request,
            ["new", "newUpload", "newUploadFinish"]
                .iter()
                .map(|last| {
                    let path = format!("/**/api/packages/versions/{last}");
                    shape(ANY, Methods::Any, Some(&path))
                })
                .collect(),
            vec![],
        ),
        // CocoaPods trunk: `pod trunk push` posts the podspec; a version's deletion and
        // deprecation and a pod's owners are writes below it.
        rule(
            "cocoapods.push",
            Summary::Request,
            ["/api/v1/pods", "/api/v1/pods/**"]
                .iter()
                .map(|path| shape(&["trunk.cocoapods.org"], writes(), Some(path)))
                .collect(),
            vec![],
        ),
        // JSR (Deno, npm): `deno publish` and `npx jsr publish` post a version's tarball below
        // its scope and package; a package's creation and settings are writes there too.
        rule(
            "jsr.publish",
            Summary::Request,
            vec![
                shape(&["api.jsr.io"], writes(), Some("/scopes/*/packages/**")),
                shape(&["api.jsr.io"], writes(), Some("/scopes/*/packages")),
            ],
            vec![],
        ),
        // git's dumb-HTTP push (`git http-push`, what `git push` falls back to on a remote
        // without smart HTTP): WebDAV writes of a repository's refs on any host, the `LOCK`
        // of `info/refs` it opens with, and the `PUT` of each ref that moves it. Reads
        // (`GET`, `PROPFIND`) pass.
        rule(
            "git.dumb-push",
            Summary::Request,
            ["/**/refs/*/**", "/**/info/refs", "/**/packed-refs"]
                .iter()
                .map(|path| shape(ANY, only(DAV_WRITES), Some(path)))
                .collect(),
            vec![],
        ),
    ]
}

/// The methods that write through WebDAV (RFC 4918) and plain HTTP.
const DAV_WRITES: &[&str] = &[
    "PUT",
    "POST",
    "PATCH",
    "DELETE",
    "MOVE",
    "COPY",
    "LOCK",
    "MKCOL",
    "PROPPATCH",
];
