//! The gate terminating TLS inside `envgit run`, against real servers on loopback named by
//! real-looking hostnames (`--resolve`): git smart HTTP behind an HTTPS front, a GitHub-shaped
//! API, and hostile clients. The TLS fronts present certificates from a test CA that only
//! the gate is told to trust (`--upstream-ca`); the clients inside trust the gate's per-run CA
//! through the bundle envgit mounts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

#[allow(dead_code)]
#[path = "../src/demo/git_server.rs"]
mod git_server;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::upstreams::{mint, spawn_py, support_script};
use support::{Env, Run};

const GIT_HOST: &str = "git.envgit.test";
const API_HOST: &str = "api.github.com";
const L7_HOST: &str = "l7.envgit.test";

struct World {
    env: Env,
    certs: PathBuf,
    children: Vec<Child>,
    resolve: Vec<String>,
    git: git_server::GitServer,
    bare: PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A bare repository with one commit served by git's http-backend behind an HTTPS front as
/// `git.envgit.test`; an echo server behind fronts as `api.github.com` and `l7.envgit.test`;
/// a project whose policy allows the three names.
fn world(policy_extra: &str) -> World {
    let env = Env::new();
    let certs = env.tmp.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    mint(&certs, &[GIT_HOST, API_HOST, L7_HOST]);
    let remotes = env.tmp.path().join("remotes");
    std::fs::create_dir_all(&remotes).unwrap();
    let bare = remotes.join("app.git");
    env.git(&remotes, &["init", "-q", "--bare", "-b", "main", "app.git"]);
    env.git(&bare, &["config", "http.receivepack", "true"]);
    let seed = env.tmp.path().join("seed");
    env.git(env.tmp.path(), &["init", "-q", "-b", "main", "seed"]);
    std::fs::write(seed.join("a.txt"), "a").unwrap();
    env.git(&seed, &["add", "-A"]);
    env.git(&seed, &["commit", "-q", "-m", "seed"]);
    env.git(&seed, &["push", "-q", bare.to_str().unwrap(), "HEAD:main"]);
    let git = git_server::GitServer::start(&remotes).unwrap();
    let (echo, echo_port) = spawn_py("echo_http.py", &[]);
    let mut children = vec![echo];
    let mut resolve = Vec::new();
    for (host, backend) in [
        (GIT_HOST, git.port),
        (API_HOST, echo_port),
        (L7_HOST, echo_port),
    ] {
        let cert = certs.join(format!("{host}.pem"));
        let key = certs.join(format!("{host}.key"));
        let (front, port) = spawn_py(
            "tls_front.py",
            &[
                cert.to_str().unwrap(),
                key.to_str().unwrap(),
                &backend.to_string(),
            ],
        );
        children.push(front);
        resolve.push(format!("{host}:443=127.0.0.1:{port}"));
    }
    std::fs::copy(support_script("tls_probe.py"), env.path(".probe.py")).unwrap();
    env.envgit(&[
        "init", "--allow", GIT_HOST, "--allow", API_HOST, "--allow", L7_HOST,
    ])
    .ok();
    if !policy_extra.is_empty() {
        let yaml = env.read("envgit.yaml");
        let yaml = yaml.replace("irreversible:\n", &format!("irreversible:\n{policy_extra}"));
        env.write("envgit.yaml", &yaml);
    }
    World {
        env,
        certs,
        children,
        resolve,
        git,
        bare,
    }
}

/// A world where an `l7` rule lets only GET reach `l7.envgit.test`.
fn world_get_only() -> World {
    let w = world("");
    let yaml = w.env.read("envgit.yaml").replacen(
        "network:\n",
        "network:\n  l7:\n    l7.envgit.test: { methods: [GET] }\n",
        1,
    );
    w.env.write("envgit.yaml", &yaml);
    w
}

/// A world whose default preset says `ask` instead of `deny`.
fn world_asking() -> World {
    let w = world("");
    let yaml = w.env.read("envgit.yaml");
    let preset = "  - preset: default";
    assert!(yaml.contains(preset), "{yaml}");
    let yaml = yaml.replacen(preset, "  - action: ask\n    preset: default", 1);
    w.env.write("envgit.yaml", &yaml);
    w
}

/// [`world_asking`] whose questions time out after `seconds` (`approvers.timeout`).
fn world_asking_within(seconds: u32) -> World {
    let w = world_asking();
    let yaml = w.env.read("envgit.yaml");
    w.env.write(
        "envgit.yaml",
        &format!("{yaml}\napprovers:\n  timeout: {seconds}\n"),
    );
    w
}

impl World {
    /// [`World::run`] started in the background, its output piped (a held request waits for
    /// an answer meanwhile).
    fn spawn_run(&self, script: &str) -> Child {
        self.run_cmd(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The command [`World::run`] runs.
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

    /// `envgit run` of a shell line with the resolve entries and the test CA for upstreams.
    fn run(&self, script: &str) -> Run {
        Run::from(self.run_cmd(script).output().unwrap())
    }

    fn remote_head(&self) -> String {
        let out = Command::new("git")
            .args(["rev-parse", "refs/heads/main"])
            .current_dir(&self.bare)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn last_log(&self) -> String {
        self.env.envgit(&["log", "-v", "-n", "1"]).ok().stdout
    }

    /// Runs the probe script, copied into the project: the sandbox has a /tmp of its own, so
    /// a checkout under /tmp would not be visible inside.
    fn probe(&self, kind: &str, host: &str) -> String {
        self.run(&format!("python3 .probe.py {kind} {host}")).stdout
    }
}

const CLONE: &str = "git clone -q https://git.envgit.test/app.git app";
const COMMIT: &str = "cd app && git -c user.name=a -c user.email=a@example.invalid \
                      commit -q --allow-empty -m change";

#[test]
fn git_over_https_clones_and_fetches_and_the_push_is_refused_at_the_request() {
    let w = world("");
    w.run(CLONE).ok();
    assert!(w.env.path("app/a.txt").exists());
    w.run("cd app && git fetch -q origin && git pull -q origin main")
        .ok();
    let before = w.remote_head();
    for push in [
        "git push origin HEAD:main",
        "g=git; $g push origin HEAD:main",
    ] {
        let seen = w.git.requests().len();
        let out = w.run(&format!("{COMMIT} && {push}"));
        assert_ne!(out.code, 0, "{push}: the push succeeded");
        assert!(
            out.stderr.contains(
                "envgit: denied POST git.envgit.test/app.git/git-receive-pack (rule git.push)"
            ),
            "{push}: {}",
            out.stderr
        );
        let saw: Vec<String> = w.git.requests().into_iter().skip(seen).collect();
        assert!(
            saw.iter().any(|s| s.contains("service=git-receive-pack")),
            "the ref advertisement should have gone through: {saw:?}"
        );
        assert!(!saw.iter().any(|s| s.starts_with("POST")), "{saw:?}");
        assert_eq!(w.remote_head(), before, "{push}: the remote's refs changed");
    }
    let log = w.last_log();
    assert!(
        log.contains("denied POST git.envgit.test/app.git/git-receive-pack rule=git.push"),
        "{log}"
    );
}

#[test]
fn an_allowed_push_over_https_goes_out_and_marks_the_step() {
    let w = world(
        "  - net: { host: \"git.envgit.test\", method: POST, path: \"/**/git-receive-pack\" }\n    action: allow\n    id: test.push\n",
    );
    w.run(CLONE).ok();
    let before = w.remote_head();
    w.run(&format!("{COMMIT} && git push -q origin HEAD:main"))
        .ok();
    assert_ne!(w.remote_head(), before, "the push did not land");
    let step = w.env.log_json().into_iter().next().unwrap();
    let flags = step["flags"].to_string();
    assert!(flags.contains("irreversible"), "{step}");
}

#[test]
fn graphql_queries_pass_and_mutations_are_refused_on_the_same_host() {
    let w = world("");
    let post = |body: &str| {
        format!(
            "curl -sS -X POST -H 'Content-Type: application/json' \
             --data '{body}' https://api.github.com/graphql"
        )
    };
    let q = w
        .run(&post(r#"{"query":"query { viewer { login } }"}"#))
        .ok();
    assert!(q.stdout.contains("seen POST /graphql"), "{}", q.stdout);
    let m = w.run(&post(
        r#"{"query":"mutation { addStar(input:{starrableId:\"x\"}) { clientMutationId } }"}"#,
    ));
    assert!(!m.stdout.contains("seen POST"), "{}", m.stdout);
    assert!(m.stdout.contains("github.graphql.mutation"), "{}", m.stdout);
    let log = w.last_log();
    assert!(log.contains("rule=github.graphql.mutation"), "{log}");
}

#[test]
fn an_l7_rule_limits_methods_and_unlisted_hosts_and_addresses_are_refused() {
    let w = world_get_only();
    let get = w.run("curl -sS https://l7.envgit.test/read").ok();
    assert!(get.stdout.contains("seen GET /read"), "{}", get.stdout);
    let post = w.run("curl -sS -X POST --data x https://l7.envgit.test/write");
    assert!(!post.stdout.contains("seen"), "{}", post.stdout);
    assert!(w.last_log().contains("denied POST l7.envgit.test/write"));
    // One kept-alive connection, each request judged on its own: two GETs pass, the POST
    // after them on the same connection does not.
    let three = w.run(
        "curl -sS https://l7.envgit.test/one https://l7.envgit.test/two \
         --next -X POST --data x https://l7.envgit.test/three",
    );
    assert!(
        three.stdout.contains("seen GET /one") && three.stdout.contains("seen GET /two"),
        "{}",
        three.stdout
    );
    assert!(!three.stdout.contains("seen POST"), "{}", three.stdout);
    let log = w.last_log();
    assert_eq!(
        log.matches("CONNECT l7.envgit.test:443").count(),
        1,
        "{log}"
    );
    assert!(log.contains("denied POST l7.envgit.test/three"), "{log}");
    // Through the proxy (`--noproxy ''`: curl skips it for loopback by default).
    for (url, rule) in [
        ("https://not-listed.envgit.test/", "network.allow"),
        ("https://127.0.0.1/", "network.private"),
        ("https://93.184.215.14/", "network.ip-literal"),
        ("https://l7.envgit.test:22/", "network.port22"),
    ] {
        let out = w.run(&format!("curl -sS --noproxy '' --max-time 10 {url}"));
        assert_ne!(out.code, 0, "{url}: {}", out.stdout);
        assert!(
            w.last_log().contains(&format!("rule={rule}")),
            "{url}: {}",
            w.last_log()
        );
    }
}

#[test]
fn hostile_tls_clients_are_refused_and_the_gate_keeps_serving() {
    let w = world("");
    let sni = w.probe("sni-mismatch", L7_HOST);
    assert!(!sni.contains("handshake completed: HTTP"), "{sni}");
    assert!(
        w.last_log().contains("rule=gate.sni-mismatch"),
        "{}",
        w.last_log()
    );
    let host = w.probe("host-mismatch", L7_HOST);
    assert!(host.contains("421"), "{host}");
    // A CONNECT inside the tunnel is not a request the gate forwards: malformed.
    let relayed = w.probe("relayed-connect", L7_HOST);
    assert!(relayed.contains("400"), "{relayed}");
    let big = w.probe("oversized-head", L7_HOST);
    assert!(big.contains("431") || big.contains("error"), "{big}");
    let garbage = w.probe("garbage", L7_HOST);
    assert!(!garbage.contains("HTTP/"), "{garbage}");
    let ssh = w.probe("ssh", L7_HOST);
    assert!(!ssh.contains("SSH-"), "{ssh}");
    assert!(
        w.last_log().contains("rule=network.opaque"),
        "{}",
        w.last_log()
    );
    // A client stalling in the middle of its head does not hold up anyone else.
    let both = w.run(&format!(
        "python3 .probe.py slowloris {L7_HOST} 5 & sleep 1; curl -sS --max-time 4 https://{L7_HOST}/other; wait"
    ));
    assert!(both.stdout.contains("seen GET /other"), "{}", both.stdout);
}

/// A listener standing in for an upstream (`accept_log.py`): every byte it received is in
/// `bytes()`.
struct Upstream {
    child: Child,
    log: PathBuf,
    addr: String,
}

impl Upstream {
    fn start(dir: &Path, name: &str) -> Upstream {
        let (log, ready) = (
            dir.join(format!("{name}.log")),
            dir.join(format!("{name}.ready")),
        );
        let child = Command::new("python3")
            .arg(support_script("accept_log.py"))
            .args([&log, &ready])
            .arg("127.0.0.1:0")
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !ready.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let addr = std::fs::read_to_string(&ready).unwrap().trim().to_owned();
        Upstream { child, log, addr }
    }

    fn bytes(&self) -> String {
        let seen = std::fs::read(self.log.with_extension("log.bytes")).unwrap_or_default();
        String::from_utf8_lossy(&seen).into_owned()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the gate refuses reaches no upstream: an SSH banner and non-TLS bytes in a tunnel to
/// an allowed host, and a request to its port 22, sent where listeners log every byte they
/// receive. An allowed request to another host's listener shows the gate does dial them.
#[test]
fn refused_tunnels_send_nothing_upstream() {
    let w = world("");
    let refused = Upstream::start(w.env.tmp.path(), "refused");
    let control = Upstream::start(w.env.tmp.path(), "control");
    let ca = w.certs.join("ca.pem");
    let resolve = [
        format!("{L7_HOST}:443={}", refused.addr),
        format!("{L7_HOST}:22={}", refused.addr),
        format!("{API_HOST}:443={}", control.addr),
    ];
    let mut args: Vec<&str> = vec!["run", "--upstream-ca", ca.to_str().unwrap()];
    for r in &resolve {
        args.extend(["--resolve", r.as_str()]);
    }
    let script = format!(
        "python3 .probe.py ssh {L7_HOST}; python3 .probe.py garbage {L7_HOST}; \
         curl -sS --noproxy '' --max-time 10 https://{L7_HOST}:22/; \
         curl -sS --max-time 10 https://{API_HOST}/control; echo done"
    );
    args.extend(["--", "sh", "-c", &script]);
    let out = w.env.envgit(&args);
    assert!(out.stdout.contains("done"), "{}{}", out.stdout, out.stderr);
    assert!(
        control.bytes().contains(API_HOST),
        "the allowed request reached no listener: {:?}\n{}",
        control.bytes(),
        out.stderr
    );
    let leaked = refused.bytes();
    for payload in ["SSH-2.0", "hello-not-a-client-hello"] {
        assert!(
            !leaked.contains(payload),
            "{payload} reached the upstream: {leaked:?}"
        );
    }
    let log = w.last_log();
    for rule in ["rule=network.opaque", "rule=network.port22"] {
        assert!(log.contains(rule), "{rule}: {log}");
    }
}

#[test]
fn an_upstream_the_gate_cannot_verify_gets_a_readable_502() {
    let w = world("");
    let mut args: Vec<&str> = vec!["run"];
    for r in &w.resolve {
        args.extend(["--resolve", r.as_str()]);
    }
    args.extend(["--", "curl", "-sS", "https://l7.envgit.test/x"]);
    let out = w.env.envgit(&args);
    assert!(
        out.stdout.contains("TLS to l7.envgit.test:443 failed"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("certificate"), "{}", out.stdout);
}

#[test]
fn a_plain_http_upstream_behind_the_terminated_tls_sees_the_original_host() {
    let w = world("");
    let (echo, port) = spawn_py("echo_http.py", &[]);
    let _guard = KillOnDrop(echo);
    let out = w
        .env
        .envgit(&[
            "run",
            "--resolve",
            &format!("{L7_HOST}:443=http://127.0.0.1:{port}"),
            "--",
            "curl",
            "-sS",
            "https://l7.envgit.test/plain",
        ])
        .ok();
    assert!(
        out.stdout
            .contains("seen GET /plain host=l7.envgit.test proto=https"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_malformed_resolve_entry_is_a_usage_error_naming_the_shape() {
    let w = world("");
    let out = w
        .env
        .envgit(&["run", "--resolve", "nonsense", "--", "true"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("HOST:PORT=ADDR:PORT"), "{}", out.stderr);
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `envgit status --json` until a request other than `seen` waits (bounded).
fn next_ask(env: &Env, seen: &[u64]) -> serde_json::Value {
    next_ask_or_end(env, seen, None).unwrap_or_else(|out| panic!("{out}"))
}

#[test]
fn an_ask_is_answered_from_another_terminal_and_covers_only_that_push() {
    let w = world_asking();
    w.run(CLONE).ok();
    let before = w.remote_head();
    // Two different pushes in one step: the first is approved, the second must be asked
    // about again (and is denied).
    let script = format!(
        "{COMMIT} && git push -q origin HEAD:main && git -c user.name=a \
         -c user.email=a@example.invalid commit -q --allow-empty -m two && \
         git push -q origin HEAD:main"
    );
    let child = w.spawn_run(&script);
    let first = next_ask(&w.env, &[]);
    assert_eq!(first["rule"], "git.push", "{first}");
    assert!(
        first["summary"]
            .as_str()
            .unwrap()
            .contains("refs/heads/main"),
        "{first}"
    );
    let id = first["id"].as_u64().unwrap();
    w.env.envgit(&["approve", &id.to_string()]).ok();
    let second = next_ask(&w.env, &[id]);
    assert_ne!(second["summary"], first["summary"]);
    w.env.envgit(&["deny"]).ok();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("envgit approve"), "{stderr}");
    let after = w.remote_head();
    assert_ne!(after, before, "the approved push did not land");
    // The remote has the first push, not the second.
    let local = Command::new("git")
        .args(["rev-parse", "HEAD~1", "HEAD"])
        .current_dir(w.env.path("app"))
        .output()
        .unwrap();
    let local = String::from_utf8_lossy(&local.stdout);
    let mut lines = local.lines();
    assert_eq!(lines.next(), Some(after.as_str()));
    assert_ne!(lines.next(), Some(after.as_str()));
    let step = w.env.log_json().into_iter().next().unwrap();
    let approvals = step["approvals"].as_array().unwrap();
    let answers: Vec<&str> = approvals
        .iter()
        .map(|a| a["answer"].as_str().unwrap())
        .collect();
    assert_eq!(answers, ["approved", "refused"], "{step}");
    assert!(
        approvals[0]["approver"]
            .as_str()
            .unwrap()
            .contains("envgit approve"),
        "{step}"
    );
    assert!(step["flags"].to_string().contains("irreversible"), "{step}");
    // Nothing waits any more.
    let rest = w.env.envgit(&["status", "--json"]).ok().json();
    assert_eq!(rest.as_array().unwrap().len(), 0);
}

/// `envgit approve N` on a terminal shows the request as envgit holds it and asks first: the
/// number the person was given may come from a message the command forged on the stream
/// envgit's own "answer with `envgit approve N`" goes to. `n` leaves it waiting; `y` lets it
/// out. (Scripts, not on a terminal, and `--yes` answer at once, as the test above does.)
#[test]
fn approving_from_a_terminal_shows_the_request_first() {
    let w = world_asking();
    w.run(CLONE).ok();
    let before = w.remote_head();
    let child = KillOnDrop(w.spawn_run(&format!("{COMMIT} && git push -q origin HEAD:main")));
    let ask = next_ask(&w.env, &[]);
    let id = ask["id"].as_u64().unwrap().to_string();
    let said = |answer: &str| {
        let out = w
            .env
            .on_terminal("[y/N]", answer, &["approve", &id])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = said("n\n");
    assert!(shown.contains("refs/heads/main"), "{shown}");
    assert!(shown.contains("rule=git.push"), "{shown}");
    assert!(shown.contains("not approved"), "{shown}");
    assert!(!shown.contains("EXIT=0"), "{shown}");
    let still = w.env.envgit(&["status", "--json"]).ok().json();
    assert_eq!(still.as_array().unwrap().len(), 1, "{still}");
    let shown = said("y\n");
    assert!(
        shown.contains("EXIT=0") && shown.contains("approved #"),
        "{shown}"
    );
    let mut child = child;
    assert!(child.0.wait().unwrap().success());
    assert_ne!(w.remote_head(), before, "the approved push did not land");
}

#[test]
fn an_ask_nobody_answers_is_refused_when_the_timeout_passes() {
    let w = world_asking_within(1);
    // The usual clients wait longer than an ask may hold their request.
    let env = w
        .run("echo pip=$PIP_DEFAULT_TIMEOUT npm=$npm_config_fetch_timeout")
        .ok();
    assert!(env.stdout.contains("pip=31 npm=31000"), "{}", env.stdout);
    w.run(CLONE).ok();
    let before = w.remote_head();
    let out = w.run(&format!("{COMMIT} && git push -q origin HEAD:main"));
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("(rule git.push)") && out.stderr.contains("holding POST"),
        "{}",
        out.stderr
    );
    assert_eq!(w.remote_head(), before);
    let step = w.env.log_json().into_iter().next().unwrap();
    assert_eq!(step["approvals"][0]["approver"], "timeout", "{step}");
    assert_eq!(step["approvals"][0]["answer"], "refused", "{step}");
}

impl World {
    /// `envgit run` on a pseudo-terminal (as from a person's terminal) that answers `answer`
    /// when envgit asks; what the terminal showed.
    fn run_on_terminal(&self, answer: &str, script: &str) -> String {
        self.run_on_terminal_with(answer, script, &[])
    }

    /// [`World::run_on_terminal`] with `pty_run.py`'s own variables.
    fn run_on_terminal_with(&self, answer: &str, script: &str, vars: &[(&str, &str)]) -> String {
        let ca = self.certs.join("ca.pem");
        let mut cmd = Command::new("python3");
        cmd.arg(support_script("pty_run.py"))
            .args(["[y/N]", answer, "--", support::envgit_bin(), "run"])
            .args(["--upstream-ca", ca.to_str().unwrap()]);
        for r in &self.resolve {
            cmd.args(["--resolve", r]);
        }
        let out = cmd
            .args(["--", "sh", "-c", script])
            .current_dir(&self.env.project)
            .env("ENVGIT_HOME", &self.env.home)
            .env("NO_COLOR", "1")
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A command cannot answer for the person by drawing over envgit's question. While a request
/// waits for an answer on the terminal, the command's output is held back (and shown after the
/// answer, nothing lost); and the question comes with the terminal's attributes reset, so text
/// the command made invisible (`ESC[8m`) does not hide it. Here the command keeps erasing the
/// line above and printing a question of its own, and the person answers only once it has
/// printed three more of them after envgit's appeared.
#[test]
fn while_envgit_asks_on_a_terminal_the_command_cannot_draw_over_the_question() {
    let w = world_asking();
    w.run(CLONE).ok();
    let before = w.remote_head();
    let script = format!(
        "printf '\\033[8m'; ( {COMMIT} && git push -q origin HEAD:main; echo done > ../push-done ) & \
         n=0; while [ ! -e push-done ] && [ $n -lt 3000 ]; do n=$((n+1)); \
         printf '\\r\\033[2K\\033[1ASPOOF-%d install the dependencies? (y/n) ' $n; \
         echo $n > spoof-count.tmp && mv spoof-count.tmp spoof-count; sleep 0.02; done; wait"
    );
    let count = w.env.project.join("spoof-count");
    let after = format!("{}:3", count.display());
    let shown = w.run_on_terminal_with("n", &script, &[("PTY_ANSWER_AFTER", &after)]);
    let asked = shown
        .find("envgit: let ")
        .unwrap_or_else(|| panic!("no question: {shown}"));
    let answered = shown
        .find("n: refused")
        .unwrap_or_else(|| panic!("no answer: {shown}"));
    assert!(
        !shown[asked..answered].contains("SPOOF"),
        "the command drew over the question: {:?}",
        &shown[asked..answered]
    );
    assert!(
        shown[..asked].ends_with("\x1b[0m\x0f\x1b(B\x1b)B\x1b[?5l\x1b[?7h\r\n\x1b#5"),
        "the question came in the command's attributes: {:?}",
        &shown[asked.saturating_sub(40)..asked + 20]
    );
    assert!(
        shown[answered..].contains("SPOOF-"),
        "the held output was lost: {shown}"
    );
    assert_eq!(w.remote_head(), before);
}

/// `transcript` as a real terminal emulator (pyte, `scripts/install-deps-terminal`) draws it on
/// a `columns`-wide screen: its rows, in order.
fn drawn(transcript: &str, columns: usize) -> Vec<String> {
    let pydeps = support::installed_by("install-deps-terminal", "ENVGIT_TERM_PYDEPS", "term-py");
    let out = support::output_with_stdin(
        Command::new("python3")
            .env("PYTHONPATH", pydeps)
            .arg(support_script("screen.py"))
            .args([columns.to_string(), "60".into()]),
        transcript.as_bytes(),
    );
    assert!(
        out.status.success(),
        "screen.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The question reads as text whatever state the command left the terminal in before it: the
/// line-drawing character set shifted in (letters become box lines), no autowrap (the end of a
/// long line, with the rule and what the request does, is drawn over in the last column),
/// reverse video, the line below made double-width (half of it off the screen), and the
/// default foreground set to the background's colour (default-coloured text invisible, as
/// envgit's question is: the command's own question, in colours of its own, would be the one
/// seen). What the person sees is drawn by a real terminal emulator.
#[test]
fn the_question_reads_as_text_whatever_the_command_left_the_terminal_in() {
    let w = world_asking();
    w.run(CLONE).ok();
    let before = w.remote_head();
    let script = format!(
        "printf '\\033(0\\033)0\\016\\033[?7l\\033[?5h\\n\\033#6\\033[1A'; \
         printf '\\033]10;#202020\\007\\033]11;#202020\\007'; \
         printf '\\033[38;2;255;255;255mProceed? (y/n)\\n'; \
         {COMMIT} && git push -q origin HEAD:main"
    );
    let shown = w.run_on_terminal_with("n", &script, &[]);
    assert!(shown.contains("n: refused"), "{shown}");
    assert_eq!(w.remote_head(), before);
    let rows = drawn(&shown, 80);
    // Long lines wrap: the screen read row after row, as one text.
    let text: String = rows.concat();
    for words in [
        "envgit: let POST ",
        "/git-receive-pack out? (rule git.push)",
        "[y/N]",
    ] {
        assert!(
            text.contains(words),
            "{words:?} cannot be read on the screen:\n{}",
            rows.join("\n")
        );
    }
    for gone in ["]10;#", "]11;#"] {
        assert!(
            !shown.contains(gone),
            "{gone:?} reached the terminal: {shown:?}"
        );
    }
    let asked = shown
        .find("envgit: let ")
        .unwrap_or_else(|| panic!("no question: {shown}"));
    // Every line of the question is single-width, whatever the command made of it before.
    assert!(
        shown[..asked].ends_with("\r\n\x1b#5"),
        "the question's line keeps the command's width: {:?}",
        &shown[asked.saturating_sub(60)..asked + 20]
    );
}

#[test]
fn on_a_terminal_envgit_asks_there_and_the_command_never_holds_the_real_terminal() {
    let w = world_asking();
    w.run(CLONE).ok();
    let before = w.remote_head();
    let shown = w.run_on_terminal(
        "y",
        &format!(
            "echo \"INNER_TTY_ID=$(stat -L -c %d:%i /proc/self/fd/0)\"; \
             {COMMIT} && git push -q origin HEAD:main"
        ),
    );
    assert!(shown.contains("EXIT=0"), "{shown}");
    assert!(shown.contains("(rule git.push)"), "{shown}");
    assert!(shown.contains("y: let out"), "{shown}");
    assert_ne!(
        w.remote_head(),
        before,
        "the approved push did not land: {shown}"
    );
    let id = |key: &str| {
        shown
            .lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key}: {shown}"))
            .trim()
            .to_owned()
    };
    let (inner, outer) = (id("INNER_TTY_ID="), id("OUTER_TTY_ID="));
    assert_ne!(inner, outer, "the command held the real terminal");
    let step = w.env.log_json().into_iter().next().unwrap();
    assert_eq!(
        step["approvals"][0]["approver"], "the terminal that started envgit run",
        "{step}"
    );
    // Another push, answered no at the terminal: refused, the remote unchanged.
    let after = w.remote_head();
    let shown = w.run_on_terminal("n", &format!("{COMMIT} && git push -q origin HEAD:main"));
    assert!(!shown.contains("EXIT=0"), "{shown}");
    assert!(shown.contains("n: refused"), "{shown}");
    assert_eq!(w.remote_head(), after);
}

/// A key already on its way when envgit's question appears (meant for a question the command
/// printed just before) does not answer it: the question takes keys only once `[y/N]` shows,
/// half a second later. Here the terminal types `y` the moment the question's text appears and
/// `n` once `[y/N]` does: the push is refused. (When the machine is so slow that `[y/N]` was
/// already there when the `y` went, the try says nothing and is made again.)
#[test]
fn a_key_typed_before_the_question_could_be_read_does_not_answer_it() {
    let w = world_asking();
    w.run(CLONE).ok();
    for _try in 0..3 {
        let before = w.remote_head();
        let shown = w.run_on_terminal_with(
            "n",
            &format!("{COMMIT} && git push -q origin HEAD:main"),
            &[("PTY_EARLY", "envgit: let :y")],
        );
        let early_at: usize = shown
            .lines()
            .find_map(|l| l.strip_prefix("EARLY_AT="))
            .unwrap_or_else(|| panic!("no question: {shown}"))
            .parse()
            .unwrap();
        // The terminal's transcript begins after the harness's own lines.
        let start = shown.find("OUTER_TTY_ID=").unwrap();
        let transcript = &shown[start + shown[start..].find('\n').unwrap() + 1..];
        if transcript.find("[y/N]").is_some_and(|at| at < early_at) {
            // `[y/N]` was read before the `y` went: this try cannot tell.
            continue;
        }
        assert!(shown.contains("n: refused"), "{shown}");
        assert!(!shown.contains("y: let out"), "{shown}");
        assert_eq!(w.remote_head(), before);
        return;
    }
    panic!(
        "[y/N] came with the question's text in every try: a key on its way when the question \
         appeared would answer it"
    );
}

/// However the question closes (here nobody answers and the ask times out), the terminal says
/// so and shows what the command wrote meanwhile: nothing stays held back.
#[test]
fn a_question_that_times_out_on_a_terminal_gives_the_held_output_back() {
    let w = world_asking_within(1);
    w.run(CLONE).ok();
    let before = w.remote_head();
    let script = format!(
        "( {COMMIT} && git push -q origin HEAD:main; echo done > ../push-done ) & \
         n=0; while [ ! -e push-done ] && [ $n -lt 3000 ]; do n=$((n+1)); \
         echo WHILE-ASKED-$n; sleep 0.02; done; wait; echo THE-END"
    );
    // The answer waits for text that never comes: nobody answers.
    let shown = w.run_on_terminal_with("n", &script, &[("PTY_ANSWER_AFTER", "/nonexistent:1")]);
    let closed = shown
        .find("the question was answered elsewhere or timed out")
        .unwrap_or_else(|| panic!("the question never closed: {shown}"));
    assert!(shown[closed..].contains("WHILE-ASKED-"), "{shown}");
    assert!(shown[closed..].contains("THE-END"), "{shown}");
    assert_eq!(w.remote_head(), before);
}

/// A question is answered by one key typed on its own: text that arrives at once (a paste,
/// or words typed into what the person took for their shell: here "yes, install it") is not a
/// `y`, however it starts. The question stays open (and times out here, refusing).
#[test]
fn pasted_text_does_not_answer_a_question() {
    let w = world_asking_within(3);
    w.run(CLONE).ok();
    let before = w.remote_head();
    let shown = w.run_on_terminal_with(
        "yes, install it\r",
        &format!("{COMMIT} && git push -q origin HEAD:main; echo PUSHED=$?"),
        &[],
    );
    assert_eq!(
        w.remote_head(),
        before,
        "a paste starting with y let the push out: {shown}"
    );
    assert!(
        shown.contains("the question was answered elsewhere or timed out"),
        "{shown}"
    );
}

#[test]
fn http2_requests_are_judged_one_by_one_too() {
    let w = world_get_only();
    // Two GETs and a POST on one HTTP/2 connection; the POST is refused by the l7 rule.
    let out = w.run(
        "curl -sS --http2 -w ' v=%{http_version} s=%{http_code}\\n' \
         https://l7.envgit.test/one https://l7.envgit.test/two \
         --next --http2 -w ' v=%{http_version} s=%{http_code}\\n' -X POST --data x \
         https://l7.envgit.test/three",
    );
    assert!(
        out.stdout.contains("seen GET /one") && out.stdout.contains("seen GET /two"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(" v=2 s=200"), "{}", out.stdout);
    assert!(out.stdout.contains(" v=2 s=403"), "{}", out.stdout);
    assert!(!out.stdout.contains("seen POST"), "{}", out.stdout);
    let log = w.last_log();
    assert!(log.contains("denied POST l7.envgit.test/three"), "{log}");
    // A GraphQL mutation over HTTP/2: the body is read and judged.
    let m = w.run(
        "curl -sS --http2 -X POST -H 'Content-Type: application/json' \
         --data '{\"query\":\"mutation { deleteRepository(input:{repositoryId:\\\"x\\\"}) { clientMutationId } }\"}' \
         https://api.github.com/graphql",
    );
    assert!(!m.stdout.contains("seen POST"), "{}", m.stdout);
    assert!(
        w.last_log().contains("rule=github.graphql.mutation"),
        "{}",
        w.last_log()
    );
    let q = w
        .run(
            "curl -sS --http2 -X POST -H 'Content-Type: application/json' \
             --data '{\"query\":\"query { viewer { login } }\"}' https://api.github.com/graphql",
        )
        .ok();
    assert!(q.stdout.contains("seen POST /graphql"), "{}", q.stdout);
}

/// An HTTPS server on loopback that speaks only HTTP/2 (ALPN `h2`), with the test CA's leaf
/// for `host`; answers every request with the protocol it saw. Returns its port.
fn h2_only_upstream(certs: &Path, host: &str) -> u16 {
    use http_body_util::Full;
    use hyper::body::Bytes;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(certs.join(format!("{host}.pem")))
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_file(certs.join(format!("{host}.key"))).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(|req: hyper::Request<_>| async move {
                        let text = format!(
                            "h2 upstream saw {:?} {} {}\n",
                            req.version(),
                            req.method(),
                            req.uri().path()
                        );
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from(text),
                        )))
                    });
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                });
            }
        });
    });
    port
}

#[test]
fn an_http2_client_reaches_an_http2_only_upstream_through_the_gate() {
    let w = world("");
    let port = h2_only_upstream(&w.certs, L7_HOST);
    let ca = w.certs.join("ca.pem");
    let out = w
        .env
        .envgit(&[
            "run",
            "--upstream-ca",
            ca.to_str().unwrap(),
            "--resolve",
            &format!("{L7_HOST}:443=127.0.0.1:{port}"),
            "--",
            "curl",
            "-sS",
            "--http2",
            "https://l7.envgit.test/a",
            "https://l7.envgit.test/b",
        ])
        .ok();
    assert!(
        out.stdout.contains("h2 upstream saw HTTP/2.0 GET /a")
            && out.stdout.contains("h2 upstream saw HTTP/2.0 GET /b"),
        "{}",
        out.stdout
    );
    let log = w.last_log();
    assert!(log.contains("allowed GET l7.envgit.test/a"), "{log}");
}

/// Polls `envgit status --json` until a request other than `seen` waits, or `child` (the run
/// that makes the requests, when given) has ended: `Err` then, with what it printed.
fn next_ask_or_end(
    env: &Env,
    seen: &[u64],
    mut child: Option<&mut Child>,
) -> Result<serde_json::Value, String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let list = env.envgit(&["status", "--json"]).ok().json();
        if let Some(ask) = list
            .as_array()
            .unwrap()
            .iter()
            .find(|a| !seen.contains(&a["id"].as_u64().unwrap()))
        {
            return Ok(ask.clone());
        }
        if let Some(child) = child.as_deref_mut()
            && child.try_wait().unwrap().is_some()
        {
            let mut out = String::new();
            use std::io::Read;
            child.stdout.take().unwrap().read_to_string(&mut out).ok();
            child.stderr.take().unwrap().read_to_string(&mut out).ok();
            return Err(out);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no request came to be asked about"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// An approval of `POST /deploy` does not cover `POST /deploy?env=production&force=1` with
/// the same body: the query is part of what the person is shown, of what the approval covers,
/// and of what the step records.
#[test]
fn an_approval_covers_its_query_and_the_query_is_shown_and_recorded() {
    let w = world(
        "  - net: { host: \"l7.envgit.test\", method: POST, path: \"/deploy\" }\n    action: ask\n    id: test.deploy\n",
    );
    let script = "curl -sS -X POST --data same https://l7.envgit.test/deploy; echo; \
                  curl -sS -X POST --data same \
                  'https://l7.envgit.test/deploy?env=production&force=1'; echo; echo done";
    let mut child = w.spawn_run(script);
    let first = next_ask(&w.env, &[]);
    assert_eq!(first["rule"], "test.deploy", "{first}");
    let id = first["id"].as_u64().unwrap();
    w.env.envgit(&["approve", &id.to_string()]).ok();
    // The request with a query must be asked about again, not let out by the approval above.
    let second = match next_ask_or_end(&w.env, &[id], Some(&mut child)) {
        Ok(ask) => ask,
        Err(out) => panic!(
            "the request with a query went out on the earlier approval (reached the upstream: {}):\n{out}",
            out.contains("seen POST /deploy?env=production&force=1")
        ),
    };
    let query = "?env=production&force=1";
    assert!(
        second["path"].as_str().unwrap().ends_with(query),
        "the person is not shown the query: {second}"
    );
    assert!(
        second["summary"].as_str().unwrap().contains(query),
        "{second}"
    );
    w.env.envgit(&["deny", &second["id"].to_string()]).ok();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("seen POST /deploy host="), "{stdout}");
    assert!(!stdout.contains("seen POST /deploy?"), "{stdout}");
    assert!(stdout.contains("done"), "{stdout}");
    let log = w.last_log();
    assert!(
        log.contains(&format!("l7.envgit.test/deploy{query}")),
        "the log does not record the query: {log}"
    );
}

/// The person's git token is only a placeholder inside; the gate puts the real one in the
/// headers that carry credentials and nowhere else, refuses TRACE and TRACK to the token's
/// host, and puts the placeholder back where the host echoes the secret in a response header.
/// A command that sends `base64("bot:" + placeholder)` in every header it can think of to an
/// upstream that reflects them never sees the real token.
#[test]
fn the_real_git_token_never_comes_back_into_the_sandbox() {
    let w = world("");
    let log = w.env.tmp.path().join("echo.log");
    let (echo, port) = spawn_py("header_echo.py", &[log.to_str().unwrap()]);
    let _echo = KillOnDrop(echo);
    let token = "ghp_canaryTOKEN0123456789";
    w.env.git(&w.env.project, &["init", "-q", "-b", "main"]);
    w.env.git(
        &w.env.project,
        &[
            "remote",
            "add",
            "origin",
            &format!("https://bot:{token}@{L7_HOST}/app.git"),
        ],
    );
    use base64::Engine;
    let secret = base64::engine::general_purpose::STANDARD.encode(format!("bot:{token}"));
    let script = format!(
        r#"PH=$(git remote get-url origin | sed -n 's#https://bot:\([^@]*\)@.*#\1#p')
echo "placeholder=$PH"
B=$(printf 'bot:%s' "$PH" | base64 -w0)
for v in --http1.1 --http2; do
  curl -sS -i $v -H "X-Debug: Basic $B" -H "x-lower: $B" -H "X-Raw: $PH" \
    -H "Cookie: s=$B" -H "X-Forwarded-Authorization: Basic $B" -H "Authorization-Debug: $B" \
    -H "Authorization: Basic $B" https://{L7_HOST}/headers
  curl -sS -i $v -X TRACE -H "Authorization: Basic $B" -H "X-Debug: $B" https://{L7_HOST}/trace
  curl -sS -i $v -X TRACK -H "Authorization: Basic $B" https://{L7_HOST}/track
done
echo done"#
    );
    let out = w
        .env
        .envgit(&[
            "run",
            "--resolve",
            &format!("{L7_HOST}:443=http://127.0.0.1:{port}"),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .ran_to("done");
    assert!(
        out.stdout.contains("placeholder=envgit-placeholder-"),
        "{}",
        out.stdout
    );
    for seen in [&secret, token] {
        assert!(
            !out.stdout.contains(seen),
            "the real token came back into the sandbox:\n{}",
            out.stdout
        );
    }
    // The host still gets the real token where a credential travels, and only there.
    let heads = std::fs::read_to_string(&log).unwrap();
    assert!(
        heads.contains(&format!("Authorization: Basic {secret}")),
        "the token did not reach its host: {heads}"
    );
    assert!(!heads.contains("X-Debug: Basic Ym90OmdocF9"), "{heads}");
    assert!(
        !heads.contains("TRACE") && !heads.contains("TRACK"),
        "{heads}"
    );
    let log = w.last_log();
    assert!(log.contains("rule=gate.trace"), "{log}");
}

/// A client inside that opens a CONNECT to `HOST:443` through the sandbox's proxy and starts
/// TLS naming `SNI` (`-`: no name at all), printing how the handshake ended.
const TLS_NAMING: &str = r#"
import socket, ssl, sys
host, sni = sys.argv[1], sys.argv[2]
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host.encode(), host.encode()))
head = b""
while b"\r\n\r\n" not in head:
    c = s.recv(1)
    if not c:
        break
    head += c
print(host, sni, head.split(b"\r\n")[0].decode())
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    ctx.wrap_socket(s, server_hostname=None if sni == "-" else sni)
    print(host, sni, "handshake completed")
except Exception as e:
    print(host, sni, "handshake failed", e.__class__.__name__)
"#;

/// `network.passthrough` splices TLS unread, but not for another site: a ClientHello whose
/// SNI names another host than the CONNECT (domain fronting through an allowed CDN name), or
/// no host at all, is refused before a byte of it reaches the upstream, naming the rule. A
/// handshake naming the CONNECT's host is still spliced.
#[test]
fn passthrough_tunnels_refuse_a_client_hello_for_another_host() {
    let w = world("");
    let yaml = w.env.read("envgit.yaml").replacen(
        "network:\n",
        &format!("network:\n  passthrough: [\"{L7_HOST}\", \"{API_HOST}\", \"{GIT_HOST}\"]\n"),
        1,
    );
    w.env.write("envgit.yaml", &yaml);
    w.env.write(".sni.py", TLS_NAMING);
    let fronted = Upstream::start(w.env.tmp.path(), "fronted");
    let nameless = Upstream::start(w.env.tmp.path(), "nameless");
    let control = Upstream::start(w.env.tmp.path(), "control");
    let resolve = [
        format!("{L7_HOST}:443={}", fronted.addr),
        format!("{API_HOST}:443={}", nameless.addr),
        format!("{GIT_HOST}:443={}", control.addr),
    ];
    let mut args: Vec<&str> = vec!["run"];
    for r in &resolve {
        args.extend(["--resolve", r.as_str()]);
    }
    let script = format!(
        "python3 .sni.py {L7_HOST} fronted.cdn.envgit.test; python3 .sni.py {API_HOST} -; \
         python3 .sni.py {GIT_HOST} {GIT_HOST}; echo done"
    );
    args.extend(["--", "sh", "-c", &script]);
    let out = w.env.envgit(&args).ran_to("done");
    let leaked = fronted.bytes();
    assert!(
        leaked.is_empty(),
        "the ClientHello for another host reached the upstream ({} bytes, naming \
         fronted.cdn.envgit.test: {})\n{}",
        leaked.len(),
        leaked.contains("fronted.cdn.envgit.test"),
        out.stdout
    );
    assert!(
        nameless.bytes().is_empty(),
        "the ClientHello naming no host reached the upstream ({} bytes)",
        nameless.bytes().len()
    );
    assert!(
        control.bytes().contains(GIT_HOST),
        "the passthrough for its own host reached no upstream: {:?}\n{}{}",
        control.bytes(),
        out.stdout,
        out.stderr
    );
    let log = w.last_log();
    for host in [L7_HOST, API_HOST] {
        assert!(
            log.lines()
                .any(|l| l.contains(&format!("CONNECT {host}:443"))
                    && l.contains("rule=gate.sni-mismatch")),
            "{host}: {log}"
        );
    }
}
