//! Further writes through the gate from inside a step, with real clients, against loopback
//! upstreams reached under their public names (`--resolve`, behind TLS fronts whose test CA
//! only the gate trusts, `--upstream-ca`): each must be judged by the rule for it, and an
//! upstream that records every request shows that nothing arrived.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::{Child, Command};

use support::upstreams::{mint, spawn_py};
use support::{Env, Run};

/// A project whose policy allows `hosts`, each served by `echo_http.py` (which answers every
/// request with `seen METHOD PATH …`) behind an HTTPS front.
struct World {
    env: Env,
    certs: PathBuf,
    children: Vec<Child>,
    resolve: Vec<String>,
    /// The plain `echo_http.py` behind the fronts, for a test that reaches it without TLS.
    echo_port: u16,
}

impl Drop for World {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl World {
    fn new(hosts: &[&str]) -> World {
        let env = Env::new();
        let certs = env.tmp.path().join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        mint(&certs, hosts);
        let (echo, echo_port) = spawn_py("echo_http.py", &[]);
        let mut children = vec![echo];
        let mut resolve = Vec::new();
        let mut init = vec!["init"];
        for host in hosts {
            let cert = certs.join(format!("{host}.pem"));
            let key = certs.join(format!("{host}.key"));
            let (front, port) = spawn_py(
                "tls_front.py",
                &[
                    cert.to_str().unwrap(),
                    key.to_str().unwrap(),
                    &echo_port.to_string(),
                ],
            );
            children.push(front);
            resolve.push(format!("{host}:443=127.0.0.1:{port}"));
            init.extend(["--allow", host]);
        }
        env.envgit(&init).ok();
        World {
            env,
            certs,
            children,
            resolve,
            echo_port,
        }
    }

    /// `envgit run` of a shell line with the resolve entries and the test CA for upstreams.
    fn run(&self, script: &str) -> Run {
        Run::from(self.run_cmd(script).output().unwrap())
    }

    fn run_cmd(&self, script: &str) -> Command {
        let ca = self.certs.join("ca.pem");
        let mut cmd = self.env.cmd(&self.env.project);
        cmd.args(["run", "--upstream-ca", ca.to_str().unwrap()]);
        for r in &self.resolve {
            cmd.args(["--resolve", r]);
        }
        cmd.args(["--", "sh", "-c", script]);
        cmd
    }

    /// [`World::run`] of a script that writes `sent` in the project when what it measures is
    /// under way, then waits for a `go` file ([`WAIT_FOR_GO`]): envgit's peak memory (MiB,
    /// `VmHWM`) when `sent` appeared, and the run.
    fn peak_memory(&self, script: &str) -> (u64, Run) {
        let sent = self.env.path("sent");
        let go = self.env.path("go");
        let _ = std::fs::remove_file(&sent);
        let _ = std::fs::remove_file(&go);
        let child = self
            .run_cmd(script)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = format!("/proc/{}/status", child.id());
        // Bounded: the script writes `sent` within its own bounds or the step ends without it.
        let mut peak_kib = None;
        for _ in 0..6000 {
            if sent.exists() {
                peak_kib = std::fs::read_to_string(&status).ok().and_then(|s| {
                    let line = s.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
                    line.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                });
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::fs::write(&go, "").unwrap();
        let run = Run::from(child.wait_with_output().unwrap());
        let peak = peak_kib.unwrap_or_else(|| {
            panic!(
                "the step never wrote `sent`:\n{}\n{}",
                run.stdout, run.stderr
            )
        });
        (peak >> 10, run)
    }
}

/// `gem push` to a RubyGems host other than rubygems.org (GitHub Packages serves the same
/// API under `/OWNER`; Gemfury, Artifactory and Gemstash under other prefixes) is a publish:
/// refused by `rubygems.push`, the upstream never answering it.
#[test]
fn gem_push_to_a_private_gem_host_is_refused() {
    let host = "rubygems.pkg.github.com";
    let w = World::new(&[host]);
    w.env.write(
        "demo.gemspec",
        "Gem::Specification.new do |s|\n  s.name = \"envgit-demo-gem\"\n  s.version = \"0.1.0\"\n  \
         s.summary = \"demo\"\n  s.authors = [\"a\"]\n  s.files = []\nend\n",
    );
    let built = Command::new("gem")
        .args(["build", "demo.gemspec"])
        .current_dir(&w.env.project)
        .env("HOME", w.env.user_home())
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let r = w.run(&format!(
        "GEM_HOST_API_KEY=k gem push --host https://{host}/acme envgit-demo-gem-0.1.0.gem"
    ));
    assert!(
        !r.stdout.contains("seen POST"),
        "the push reached the upstream:\n{}\n{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!(
            "envgit: denied POST {host}/acme/api/v1/gems (rule rubygems.push)"
        )) || r.stdout.contains(&format!(
            "envgit: denied POST {host}/acme/api/v1/gems (rule rubygems.push)"
        )),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
}

/// A Maven repository's deploy is a PUT of each artifact (what `mvn deploy` and Gradle's
/// `publish` send, here with curl as they send it) and a NuGet push a PUT to the publish
/// resource, on whatever host the project's repository is: each refused by its rule, the
/// upstream never seeing it; a read of the same repository passes.
#[test]
fn maven_deploys_and_nuget_pushes_are_refused_on_any_host() {
    let (maven, nuget, azure) = (
        "maven.pkg.github.com",
        "nuget.pkg.github.com",
        "pkgs.dev.azure.com",
    );
    let w = World::new(&[maven, nuget, azure]);
    w.env.write("demo-1.0.jar", "PK\u{3}\u{4}");
    w.env.write("demo.nupkg", "PK\u{3}\u{4}");
    let jar = format!("https://{maven}/acme/repo/com/acme/demo/1.0/demo-1.0.jar");
    // Azure Artifacts' feed takes pushes at `…/nuget/v2/`, known by NuGet's key header.
    let feed = format!("https://{azure}/acme/_packaging/feed/nuget/v2/");
    let r = w.run(&format!(
        "curl -sS -T demo-1.0.jar {jar}; echo; \
         curl -sS -X PUT -H 'X-NuGet-ApiKey: k' -F package=@demo.nupkg https://{nuget}/acme/; echo; \
         curl -sS -X PUT -H 'X-NuGet-ApiKey: az' -F package=@demo.nupkg {feed}; echo; \
         curl -sS {jar}; echo"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    assert!(
        !said.contains("seen PUT"),
        "a publish reached the upstream:\n{said}"
    );
    for (line, rule) in [
        (
            format!("PUT {maven}/acme/repo/com/acme/demo/1.0/demo-1.0.jar"),
            "maven.deploy",
        ),
        (format!("PUT {nuget}/acme/"), "nuget.push"),
        (
            format!("PUT {azure}/acme/_packaging/feed/nuget/v2/"),
            "nuget.push",
        ),
    ] {
        assert!(
            said.contains(&format!("envgit: denied {line} (rule {rule})")),
            "{line}:\n{said}"
        );
    }
    assert!(said.contains("seen GET"), "the read did not pass:\n{said}");
}

/// Hex's publish (`mix hex.publish` posts the tarball to `hex.pm/api/publish`), pub's (`dart
/// pub publish` begins and ends with a `GET` of pub's own paths, on pub.dev or a private
/// repository below its prefix), CocoaPods trunk's and JSR's are refused naming their rules,
/// the upstream never seeing them; the same registries' reads pass.
#[test]
fn hex_pub_cocoapods_and_jsr_publishes_are_refused() {
    let hosts = [
        "hex.pm",
        "pub.dev",
        "pub.internal",
        "trunk.cocoapods.org",
        "api.jsr.io",
    ];
    let w = World::new(&hosts);
    w.env.write("demo.tar", "tarball");
    let r = w.run(
        "curl -sS -X POST --data-binary @demo.tar 'https://hex.pm/api/publish?replace=false'; echo; \
         curl -sS https://pub.dev/api/packages/versions/new; echo; \
         curl -sS 'https://pub.dev/api/packages/versions/newUploadFinish?upload_id=1'; echo; \
         curl -sS -X POST -d '{}' https://pub.internal/pub/main/api/packages/versions/new; echo; \
         curl -sS -X POST -H 'Content-Type: application/json' -d '{}' \
           https://trunk.cocoapods.org/api/v1/pods; echo; \
         curl -sS -X POST --data-binary @demo.tar \
           https://api.jsr.io/scopes/acme/packages/demo/versions/1.0.0; echo; \
         curl -sS https://hex.pm/api/packages/demo; echo; \
         curl -sS https://pub.dev/api/packages/demo; echo",
    );
    let said = format!("{}\n{}", r.stdout, r.stderr);
    assert!(
        !said.contains("seen POST") && !said.contains("seen GET /api/packages/versions"),
        "a publish reached the upstream:\n{said}"
    );
    for (line, rule) in [
        ("POST hex.pm/api/publish", "hex.publish"),
        ("GET pub.dev/api/packages/versions/new", "pub.publish"),
        (
            "GET pub.dev/api/packages/versions/newUploadFinish",
            "pub.publish",
        ),
        (
            "POST pub.internal/pub/main/api/packages/versions/new",
            "pub.publish",
        ),
        ("POST trunk.cocoapods.org/api/v1/pods", "cocoapods.push"),
        (
            "POST api.jsr.io/scopes/acme/packages/demo/versions/1.0.0",
            "jsr.publish",
        ),
    ] {
        assert!(
            said.contains(&format!("envgit: denied {line}"))
                && said.contains(&format!("(rule {rule})")),
            "{line}:\n{said}"
        );
    }
    assert_eq!(
        said.matches("seen GET").count(),
        2,
        "the reads did not pass:\n{said}"
    );
}

/// git's dumb-HTTP push (`git http-push`, which `git push` falls back to on a WebDAV remote
/// without smart HTTP: Apache mod_dav and the like) moves refs with WebDAV writes, not a
/// `git-receive-pack` POST: the `LOCK` of `info/refs` it opens with, a `PUT` of each ref
/// (`refs/heads/main` holding the new id), a `DELETE` for a deleted ref. Each is refused by
/// `git.dumb-push` on any host, the upstream never seeing it; the reads of the same
/// repository (`GET`, `PROPFIND`) pass.
#[test]
fn dumb_http_pushes_are_refused_on_any_host() {
    let host = "git.example.org";
    let w = World::new(&[host]);
    let repo = format!("https://{host}/srv/app.git");
    let sha = "1111111111111111111111111111111111111111";
    let r = w.run(&format!(
        "curl -sS -X LOCK -H 'Timeout: Second-600' --data-binary '<lockinfo/>' {repo}/info/refs; echo; \
         curl -sS -X PUT --data-binary '{sha}' {repo}/refs/heads/main; echo; \
         curl -sS -X DELETE {repo}/refs/tags/v1; echo; \
         curl -sS {repo}/info/refs; echo; \
         curl -sS -X PROPFIND -H 'Depth: 1' {repo}/refs/; echo"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    for method in ["LOCK", "PUT", "DELETE"] {
        assert!(
            !said.contains(&format!("seen {method}")),
            "a dumb-HTTP push reached the upstream ({method}):\n{said}"
        );
    }
    for line in [
        format!("LOCK {host}/srv/app.git/info/refs"),
        format!("PUT {host}/srv/app.git/refs/heads/main"),
        format!("DELETE {host}/srv/app.git/refs/tags/v1"),
    ] {
        assert!(
            said.contains(&format!("envgit: denied {line} (rule git.dumb-push)")),
            "{line}:\n{said}"
        );
    }
    assert!(
        said.contains("seen GET /srv/app.git/info/refs")
            && said.contains("seen PROPFIND /srv/app.git/refs/"),
        "the reads did not pass:\n{said}"
    );
}

/// `X-Original-URL` and `X-Rewrite-URL` name the path a server behind IIS's URL Rewrite, or a
/// framework that trusts them (Symfony and Zend before 2018, apps configured for a front
/// proxy), routes the request by instead of its own: a fetch (`git-upload-pack`) naming
/// `git-receive-pack` there is a push. The request is judged at every path it names, so
/// `git.push` refuses it and the upstream never sees it; one naming its own path passes.
#[test]
fn a_header_naming_another_path_is_judged_at_that_path() {
    let host = "git.example.org";
    let w = World::new(&[host]);
    let repo = format!("https://{host}/srv/app.git");
    // A ref update as git sends it: one command, then the flush.
    let zero = "0".repeat(40);
    let one = "1".repeat(40);
    w.env.write(
        "push.pkt",
        &format!("0074{zero} {one} refs/heads/main\0report-status\n0000"),
    );
    let fetch = "-X POST -H 'Content-Type: application/x-git-upload-pack-request' \
                 --data-binary @push.pkt";
    let r = w.run(&format!(
        "curl -sS {fetch} -H 'X-Original-URL: /srv/app.git/git-receive-pack' \
           {repo}/git-upload-pack; echo; \
         curl -sS {fetch} -H 'X-Rewrite-URL: /srv/app.git/git-receive-pack?x=1' \
           {repo}/git-upload-pack; echo; \
         curl -sS {fetch} -H 'X-Original-URL: /srv/app.git/git-upload-pack' \
           {repo}/git-upload-pack; echo"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    let seen = said
        .matches("seen POST /srv/app.git/git-upload-pack")
        .count();
    assert_eq!(
        seen, 1,
        "a request naming another path reached the upstream, or the plain one did not:\n{said}"
    );
    let refused = format!("envgit: denied POST {host}/srv/app.git/git-upload-pack (rule git.push)");
    assert_eq!(
        r.stdout.matches(&refused).count(),
        2,
        "not both refused by git.push:\n{said}"
    );
}

/// Fields a request may carry twice, read as a server reads them: `Content-Encoding` is a list,
/// so `identity` then `gzip` is a gzip body (the gate had judged the compressed bytes by the
/// first line, so a gzip packument went out as no publish); two `Content-Type`s that disagree
/// (servers take the first, the last or both) are refused as malformed.
#[test]
fn fields_sent_twice_are_read_as_the_server_reads_them() {
    let host = "registry.example.org";
    let w = World::new(&[host]);
    w.env.write(
        "pkg.json",
        r#"{"_id":"demo-pkg","name":"demo-pkg","versions":{"1.0.0":{"name":"demo-pkg"}},"_attachments":{"demo-pkg-1.0.0.tgz":{"data":"AAAA"}}}"#,
    );
    let r = w.run(&format!(
        "gzip -c pkg.json > pkg.json.gz && \
         curl -sS -X PUT -H 'Content-Type: application/json' -H 'Content-Encoding: identity' \
           -H 'Content-Encoding: gzip' --data-binary @pkg.json.gz https://{host}/demo-pkg; echo; \
         curl -sS -X POST -H 'Content-Type: text/plain' \
           -H 'Content-Type: application/x-www-form-urlencoded' --data-binary _method=DELETE \
           https://{host}/demo-pkg/-rev/1; echo; \
         curl -sS -X PUT -H 'Content-Type: application/json' -H 'Content-Encoding: identity' \
           --data-binary '{{\"ok\":1}}' https://{host}/-/v1/login; echo"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    assert!(
        !said.contains("seen PUT /demo-pkg") && !said.contains("seen POST"),
        "a request read one way by the gate reached the upstream:\n{said}"
    );
    assert!(
        r.stdout.contains(&format!(
            "envgit: denied PUT {host}/demo-pkg (rule npm.publish)"
        )),
        "{said}"
    );
    assert!(
        said.contains("Content-Type") && said.contains("gate.malformed"),
        "{said}"
    );
    assert!(
        said.contains("seen PUT /-/v1/login"),
        "a plain request did not pass:\n{said}"
    );
}

/// Laravel (its JSON input) and Slim (its parsed body) read `_method` from a JSON `POST`'s
/// top-level keys, so `POST {"_method":"PUT", …packument}` is a publish to a registry served
/// by one. The key is read however far into the body it comes: a body longer than the prefix
/// the gate inspects is read whole (bounded) when its decision rests on the rest. Bodies that
/// name no other method go out whole, large ones included, and a large upload form that is not
/// PyPI's is not refused as one.
#[test]
fn a_json_body_naming_another_method_is_judged_as_it() {
    let host = "registry.example.org";
    let w = World::new(&[host]);
    let packument = r#""name":"demo-pkg","versions":{"1.0.0":{"name":"demo-pkg"}},"_attachments":{"demo-pkg-1.0.0.tgz":{"data":"AAAA"}}"#;
    // Past the 1 MiB the gate inspects first.
    let pad = "A".repeat(3 << 19);
    w.env
        .write("small.json", &format!(r#"{{"_method":"PUT",{packument}}}"#));
    w.env.write(
        "late.json",
        &format!(r#"{{{packument},"pad":"{pad}","_METHOD":"put"}}"#),
    );
    w.env
        .write("plain.json", &format!(r#"{{"model":"m","pad":"{pad}"}}"#));
    w.env.write(
        "upload.bin",
        &format!(
            "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n\r\n\
             {pad}\r\n--B--\r\n"
        ),
    );
    // Past the 64 MiB the gate holds, what the first MiB could not rule out is refused.
    let huge = "A".repeat(65 << 20);
    w.env
        .write("huge.json", &format!(r#"{{"model":"m","pad":"{huge}"}}"#));
    let json = "-X POST -H 'Content-Type: application/json'";
    let r = w.run(&format!(
        "curl -sS {json} --data-binary @small.json https://{host}/demo-pkg; echo; \
         curl -sS {json} --data-binary @late.json https://{host}/demo-pkg; echo; \
         curl -sS {json} --data-binary @plain.json https://{host}/v1/messages; echo; \
         curl -sS {json} --data-binary @huge.json https://{host}/v1/huge; echo; \
         curl -sS -X POST -H 'Content-Type: multipart/form-data; boundary=B' \
           --data-binary @upload.bin https://{host}/files; echo"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    assert!(
        !said.contains("seen POST /demo-pkg"),
        "a JSON body naming PUT reached the upstream as a POST:\n{said}"
    );
    let refused = format!("envgit: denied POST {host}/demo-pkg (rule npm.publish)");
    assert_eq!(
        r.stdout.matches(&refused).count(),
        2,
        "not both refused by npm.publish:\n{said}"
    );
    assert!(
        !said.contains("seen POST /v1/huge")
            && r.stdout
                .contains(&format!("envgit: denied POST {host}/v1/huge (rule "))
            && said.contains("over the 64 MiB envgit reads"),
        "a body past what the gate holds went out, or was refused without saying why:\n{said}"
    );
    let plain = std::fs::metadata(w.env.path("plain.json")).unwrap().len();
    let upload = std::fs::metadata(w.env.path("upload.bin")).unwrap().len();
    for (path, len) in [("/v1/messages", plain), ("/files", upload)] {
        let whole = said.lines().any(|l| {
            l.starts_with(&format!("seen POST {path} host={host} "))
                && l.ends_with(&format!(" body={len}"))
        });
        assert!(
            whole,
            "a large POST naming no other method did not go out whole ({len} bytes):\n{said}"
        );
    }
}

/// Bodies the gate reads whole to judge (up to 64 MiB each, beside their decoded copy) are held
/// in envgit's memory, outside the sandbox's memory limit: a step that sends many at once must
/// not make the host hold them all. Eight 40 MiB JSON POSTs, each read whole (the first MiB
/// cannot rule out a `_method` later), go out all the same, while envgit's peak memory stays
/// within a few of them.
#[test]
fn many_large_bodies_at_once_do_not_fill_the_hosts_memory() {
    let host = "registry.example.org";
    let w = World::new(&[host]);
    let pad = "A".repeat(40 << 20);
    w.env
        .write("big.json", &format!(r#"{{"model":"m","pad":"{pad}"}}"#));
    drop(pad);
    let one = format!(
        "curl -sS -X POST -H 'Content-Type: application/json' -H 'Expect:' -T big.json \
           -o /dev/null -w 'status %{{http_code}}\\n' https://{host}/v1/big"
    );
    let (peak_mib, r) = w.peak_memory(&format!(
        "for i in 1 2 3 4 5 6 7 8; do {one} & done; wait; : > sent; {WAIT_FOR_GO}"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.matches("status 200\n").count(),
        8,
        "not every large POST went out:\n{said}"
    );
    // Eight bodies held at once are 320 MiB beside envgit's own (~350 MiB at its peak when
    // they were); two at a time, ~150 MiB.
    assert!(
        peak_mib < 250,
        "envgit held {peak_mib} MiB at its peak: the bodies were held all at once"
    );
}

/// The same for the first MiB a rule reads of every body it judges: a step's requests whose
/// bodies stop short of it are each held while the gate waits for the rest (up to 60 s), and a
/// step may open hundreds. Two hundred such POSTs, 1 MB each so far, hold no more of envgit's
/// memory than a bounded number of them could; all go out once their bodies end.
#[test]
fn many_bodies_stopped_short_do_not_fill_the_hosts_memory() {
    let host = "registry.example.org";
    let w = World::new(&[host]);
    std::fs::copy(
        support::upstreams::support_script("stalled_posts.py"),
        w.env.path("stalled_posts.py"),
    )
    .unwrap();
    let posts = |count: u32| {
        let (peak, r) = w.peak_memory(&format!(
            "python3 stalled_posts.py {host} /v1/part {count} 1000000; {WAIT_FOR_GO}"
        ));
        let said = format!("{}\n{}", r.stdout, r.stderr);
        assert_eq!(
            r.stdout.matches("status 200\n").count(),
            count as usize,
            "not every POST went out:\n{said}"
        );
        peak
    };
    let one = posts(1);
    let many = posts(200);
    // Held all at once, two hundred were ~220 MiB more than one; the gate holds 64 at a time
    // (~95 MiB more, with the connections' own).
    assert!(
        many.saturating_sub(one) < 150,
        "envgit's peak was {many} MiB with 200 bodies held short, {one} MiB with one"
    );
}

/// HTTP/2 multiplies what a connection costs the gate: each of a step's 1,024 connections
/// carried 200 requests at once, and every one of them was held (its head decoded, up to 16 KiB)
/// while it waited, here for a body that never comes. Forty connections of 200 such POSTs: a
/// connection now carries 100 at once (the rest refused by HTTP/2 itself, `REFUSED_STREAM`),
/// and the gate holds 1,024 requests at once, however they are multiplexed, answering the
/// others at once (`503`, rule `gate.busy`) rather than hold them on the host.
#[test]
fn many_http2_streams_at_once_do_not_fill_the_hosts_memory() {
    let host = "registry.example.org";
    let w = World::new(&[host]);
    std::fs::copy(
        support::upstreams::support_script("h2_streams.py"),
        w.env.path("h2_streams.py"),
    )
    .unwrap();
    let streams = |conns: u32| {
        let (peak, r) = w.peak_memory(&format!(
            "python3 h2_streams.py {host} /v1/part {conns} 200 12000; {WAIT_FOR_GO}"
        ));
        let said = format!("{}\n{}", r.stdout, r.stderr);
        assert!(!said.contains("error "), "{said}");
        let answered: u32 = said
            .split("answered ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count of the answers:\n{said}"));
        (peak, answered, w.env.log_json()[0].clone())
    };
    let (one, answered_one, _) = streams(1);
    assert_eq!(answered_one, 100, "past 100 streams a connection refuses");
    let (many, answered, step) = streams(40);
    // Held all at once, 8,000 streams were ~255 MiB more than 200; now ~75.
    assert!(
        many.saturating_sub(one) < 150,
        "envgit's peak was {many} MiB with 8,000 streams waiting, {one} MiB with 200"
    );
    assert_eq!(
        answered,
        40 * 200 - 1024,
        "past the 1024 held, each stream is answered at once"
    );
    assert!(
        step.to_string().contains("gate.busy"),
        "the refusals are not on the step: {step}"
    );
}

/// A step's requests are listed one by one in its record up to 10,000; past them they are
/// counted per host, decision and rule, so that neither the record nor envgit's memory (the
/// host's) grows with whatever a step sends (a crawler, a load test, a loop). Refused npm
/// dist-tag removals on one HTTP/2 connection: the gate answers them itself, quickly.
#[test]
fn a_step_past_ten_thousand_requests_lists_the_rest_as_counts() {
    let host = "registry.example.org";
    let w = World::new(&[host]);
    let sent = 10_050;
    let urls: String = (0..sent)
        .map(|i| {
            format!(
                "url = \"https://{host}/-/package/demo/dist-tags/t{i}\"\noutput = \"/dev/null\"\n"
            )
        })
        .collect();
    w.env.write("urls.cfg", &urls);
    let r = w.run("curl -sS --http2 -X DELETE -K urls.cfg -w '%{http_code}\\n'");
    let said = format!("{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.matches("403\n").count(),
        sent,
        "not every removal was refused:\n{}",
        said.chars().take(2000).collect::<String>()
    );
    let log = w.env.log_json();
    let listed = log[0]["requests"].as_array().unwrap();
    assert_eq!(
        listed.len(),
        10_000,
        "the step listed {} requests",
        listed.len()
    );
    let connects = listed.iter().filter(|q| q["method"] == "CONNECT").count();
    let notes = log[0]["notes"].to_string();
    assert!(
        notes.contains(&format!(
            "{} more request(s) to {host}, denied (rule npm.dist-tag), past the 10000 listed",
            sent + connects - 10_000
        )),
        "no count of the requests past the listed ones: {notes}"
    );
    let refusals = log[0]["refusals"].to_string();
    assert!(
        refusals.contains("more request(s) to"),
        "the counted refusals are not among the step's refusals"
    );
}

/// What a script waits with for the test's `go` file, once it wrote `sent` (60 s at most).
const WAIT_FOR_GO: &str =
    "i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done";

/// Rack (and so Rails' `Rack::MethodOverride`) reads `_method` from a `multipart/mixed` or
/// `multipart/related` POST as from a form, and Rack and PHP take a `Content-Type` up to a
/// comma (PHP up to a space too) as its media type: such a body naming `DELETE` at npm's
/// `-rev` path is an unpublish, refused by `npm.unpublish`; one naming nothing goes out.
#[test]
fn a_body_a_server_reads_as_a_form_is_judged_by_the_method_it_names() {
    let host = "registry.example.org";
    let w = World::new(&[host]);
    let part = |name: &str, value: &str| {
        format!("--B\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
    };
    w.env.write(
        "delete.bin",
        &format!("{}--B--\r\n", part("_method", "DELETE")),
    );
    w.env
        .write("plain.bin", &format!("{}--B--\r\n", part("note", "DELETE")));
    w.env.write("delete.form", "_method=DELETE");
    let post = |ty: &str, file: &str| {
        format!(
            "curl -sS -X POST -H 'Content-Type: {ty}' --data-binary @{file} \
               https://{host}/demo-pkg/-rev/1; echo; "
        )
    };
    let r = w.run(
        &[
            post("multipart/mixed; boundary=B", "delete.bin"),
            post("Multipart/Related; boundary=B", "delete.bin"),
            post(
                "application/x-www-form-urlencoded, text/plain",
                "delete.form",
            ),
            post("application/x-www-form-urlencoded x", "delete.form"),
            post("multipart/mixed; boundary=B", "plain.bin"),
        ]
        .concat(),
    );
    let said = format!("{}\n{}", r.stdout, r.stderr);
    let refused = format!("envgit: denied POST {host}/demo-pkg/-rev/1 (rule npm.unpublish)");
    assert_eq!(
        r.stdout.matches(&refused).count(),
        4,
        "a body naming DELETE was not refused as the unpublish it is:\n{said}"
    );
    assert_eq!(
        said.matches("seen POST /demo-pkg/-rev/1").count(),
        1,
        "one naming no method did not go out, or one naming DELETE did:\n{said}"
    );
}

/// Servers that hand headers to the application as CGI variables (WEBrick, PHP's own server,
/// Puma before it dropped them) read `X_HTTP_Method_Override` as `X-HTTP-Method-Override` and
/// `X_Original_URL` as `X-Original-URL`: spelled with underscores, they are judged all the same;
/// a `Content_Encoding`, which one server would decode by and another not, is refused.
#[test]
fn override_headers_spelled_with_underscores_are_judged() {
    let host = "registry.example.org";
    let w = World::new(&[host]);
    let zero = "0".repeat(40);
    let one = "1".repeat(40);
    w.env.write(
        "push.pkt",
        &format!("0074{zero} {one} refs/heads/main\0report-status\n0000"),
    );
    let r = w.run(&format!(
        "curl -sS -X POST -H 'X_HTTP_Method_Override: DELETE' https://{host}/demo-pkg/-rev/1; echo; \
         curl -sS -X POST -H 'x_method_override: DELETE' https://{host}/demo-pkg/-rev/1; echo; \
         curl -sS -X POST -H 'Content-Type: application/x-git-upload-pack-request' \
           --data-binary @push.pkt -H 'X_Original_URL: /srv/app.git/git-receive-pack' \
           https://{host}/srv/app.git/git-upload-pack; echo; \
         curl -sS -X POST -H 'Content_Encoding: gzip' --data-binary 'a=1' \
           https://{host}/items; echo"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    assert!(
        !said.contains("seen POST"),
        "a request overridden under an underscored name reached the upstream:\n{said}"
    );
    let unpublish = format!("envgit: denied POST {host}/demo-pkg/-rev/1 (rule npm.unpublish)");
    let push = format!("envgit: denied POST {host}/srv/app.git/git-upload-pack (rule git.push)");
    assert_eq!(r.stdout.matches(&unpublish).count(), 2, "{said}");
    assert_eq!(r.stdout.matches(&push).count(), 1, "{said}");
    assert!(
        said.contains("content_encoding header") && said.contains("gate.malformed"),
        "a body coding under an underscored name was not refused:\n{said}"
    );
}

/// A WebDAV `MOVE` (or `COPY`) writes where its `Destination` header says, which the rule
/// never reads: a ref file `PUT` at a path no rule names, then moved onto
/// `refs/heads/main`, moves the branch with `git.dumb-push` never consulted.
#[test]
fn a_webdav_move_onto_a_ref_is_refused() {
    let host = "git.example.org";
    let w = World::new(&[host]);
    let repo = format!("https://{host}/srv/app.git");
    let r = w.run(&format!(
        "curl -sS -X MOVE -H 'Destination: {repo}/refs/heads/main' -H 'Overwrite: T' \
         {repo}/objects/tmp-ref; echo; \
         curl -sS -X COPY -H 'Destination: /srv/app.git/refs/tags/v1' {repo}/objects/tmp-ref; echo; \
         curl -sS -X MOVE -H 'Destination: https://elsewhere.example/srv/app.git/x' \
         {repo}/objects/tmp-ref; echo"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    for method in ["MOVE", "COPY"] {
        assert!(
            !said.contains(&format!("seen {method}")),
            "a {method} onto a ref or another host reached the upstream:\n{said}"
        );
    }
    assert!(
        said.contains("(rule git.dumb-push)") && said.contains("(rule gate.host-mismatch)"),
        "the refusals name no rule:\n{said}"
    );
    // A move that writes no ref still passes.
    let r = w.run(&format!(
        "curl -sS -X MOVE -H 'Destination: {repo}/objects/other' {repo}/objects/tmp-ref; echo"
    ));
    assert!(r.stdout.contains("seen MOVE"), "{}\n{}", r.stdout, r.stderr);
}

/// With the preset letting irreversible requests out and marking them (`action: allow`), a
/// request a rule cannot rule out is let out marked by that rule, on every path a request
/// takes: an npm packument longer than the prefix the gate reads (its verdict is reached
/// before the whole body arrives), sent over HTTP/2 and over HTTP/1.1 on a connection a read
/// already used, through a CONNECT tunnel to a plain-HTTP port and as an explicit-proxy
/// request (`PUT http://…` to the proxy, no tunnel); and an upload form a
/// lenient parser reads otherwise (a bare-LF delimiter). The upstream gets each; the step's
/// record must mark each, naming the rule.
#[test]
fn in_mark_mode_requests_a_rule_cannot_rule_out_are_let_out_marked() {
    let (npm, pypi) = ("npm.pkg.github.com", "pypi.example.org");
    let mut w = World::new(&[npm, pypi]);
    // The same upstream unencrypted on port 8080, reached through `CONNECT npm…:8080`.
    w.resolve
        .push(format!("{npm}:8080=127.0.0.1:{}", w.echo_port));
    let yaml = w.env.read("envgit.yaml");
    let marking = yaml
        .replacen(
            "  - preset: default",
            "  - preset: default\n    action: allow",
            1,
        )
        .replacen(
            &format!("    - \"{npm}\""),
            &format!("    - \"{npm}\"\n    - \"{npm}:8080\""),
            1,
        );
    assert_eq!(marking.lines().count(), yaml.lines().count() + 2, "{yaml}");
    w.env.write("envgit.yaml", &marking);
    // npm's own layout: the attachment comes last, past the 1 MiB the gate reads.
    let data = "A".repeat(3 << 19);
    w.env.write(
        "big.json",
        &format!(
            r#"{{"_id":"big-pkg","name":"big-pkg","versions":{{"1.0.0":{{"name":"big-pkg"}}}},"_attachments":{{"big-pkg-1.0.0.tgz":{{"data":"{data}"}}}}}}"#
        ),
    );
    w.env.write(
        "form.bin",
        "--B\nContent-Disposition: form-data; name=\":action\"\r\n\r\nfile_upload\r\n--B--\r\n",
    );
    let out = "-o /dev/null -w '%{http_version} %{response_code} connects=%{num_connects}\\n'";
    let r = w.run(&format!(
        "for v in --http2 --http1.1; do \
           curl -sS $v https://{npm}/-/ping {out} --next -sS $v -X PUT \
             -H 'Content-Type: application/json' --data-binary @big.json \
             https://{npm}/big-pkg {out}; \
         done; \
         curl -sS -p http://{npm}:8080/-/ping {out} --next -sS -p -X PUT \
           -H 'Content-Type: application/json' --data-binary @big.json \
           http://{npm}:8080/big-pkg {out}; \
         curl -sS -X PUT -H 'Content-Type: application/json' --data-binary @big.json \
           http://{npm}:8080/big-pkg {out}; \
         curl -sS -X POST -H 'Content-Type: multipart/form-data; boundary=B' \
           --data-binary @form.bin https://{pypi}/legacy/ {out}"
    ));
    let said = format!("{}\n{}", r.stdout, r.stderr);
    // Each PUT went out on the connection the read before it opened.
    assert_eq!(
        said.matches(" 200 connects=0").count(),
        3,
        "a PUT did not go out on the read's connection:\n{said}"
    );
    assert!(said.contains("2 200 connects=0"), "no HTTP/2:\n{said}");
    let log = w.env.log_json();
    let requests = log[0]["requests"].as_array().unwrap();
    let sent: Vec<&serde_json::Value> = requests
        .iter()
        .filter(|q| q["method"] == "PUT" || q["method"] == "POST")
        .collect();
    assert_eq!(sent.len(), 5, "{requests:?}\n{said}");
    let unmarked: Vec<String> = sent
        .iter()
        .filter(|q| {
            let rule = if q["method"] == "PUT" {
                "npm.publish"
            } else {
                "pypi.upload"
            };
            q["status"] != 200 || q["irreversible"] != true || q["rule"] != rule
        })
        .map(|q| q.to_string())
        .collect();
    assert!(
        unmarked.is_empty(),
        "let out unmarked:\n{}",
        unmarked.join("\n")
    );
}

/// In mark mode a WebDAV `MOVE` onto a ref is let out marked by the rule that judges its
/// `Destination`; the same `MOVE` refused by a rule of its own (its source) left nothing, so
/// its record carries no mark and the step is not said to have sent anything irreversible.
#[test]
fn in_mark_mode_a_move_is_marked_by_its_destination_only_when_it_goes_out() {
    let host = "git.example.org";
    let w = World::new(&[host]);
    let yaml = w.env.read("envgit.yaml");
    let held = format!(
        "  - net: {{ host: \"{host}\", method: MOVE, path: \"/srv/app.git/objects/held/**\" }}\n    \
         action: deny\n    id: held.objects\n  - preset: default\n    action: allow"
    );
    let policy = yaml.replacen("  - preset: default", &held, 1);
    assert_ne!(policy, yaml, "no preset entry in:\n{yaml}");
    w.env.write("envgit.yaml", &policy);
    let repo = format!("https://{host}/srv/app.git");
    let mv = |from: &str| {
        w.run(&format!(
            "curl -sS -X MOVE -H 'Destination: {repo}/refs/heads/main' {repo}/objects/{from}; echo"
        ))
    };
    let r = mv("held/tmp-ref");
    assert!(
        !r.stdout.contains("seen MOVE"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    let log = w.env.log_json();
    let moves: Vec<&serde_json::Value> = log[0]["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["method"] == "MOVE")
        .collect();
    assert!(
        moves.len() == 1 && moves[0]["rule"] == "held.objects" && moves[0]["irreversible"] == false,
        "the refused MOVE: {moves:?}"
    );
    assert!(
        !log[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "irreversible"),
        "a step whose MOVE was refused is marked: {}",
        log[0]
    );
    let r = mv("tmp-ref");
    assert!(r.stdout.contains("seen MOVE"), "{}\n{}", r.stdout, r.stderr);
    let log = w.env.log_json();
    assert!(
        log[0]["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["method"] == "MOVE"
                && q["irreversible"] == true
                && q["rule"] == "git.dumb-push"),
        "the MOVE let out is not marked: {}",
        log[0]
    );
}
