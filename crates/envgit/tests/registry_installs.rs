//! `npm install`, `pip install` and `cargo build` right after `envgit init`, with no edit to
//! envgit.yaml, against real registries on loopback reached under their public names
//! (`--resolve`, behind TLS fronts whose test CA only the gate trusts, `--upstream-ca`); and
//! the publishes refused by the gate, naming the rule, with nothing arriving at the registry.
//! The registries: verdaccio for npm, pypiserver for PyPI, and for crates.io a sparse index
//! laid out on disk and served by python's http.server (cargo's registry docs describe the
//! layout). scripts/install-deps-registries installs verdaccio, pypiserver and twine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use support::{Env, Run, envgit_bin};

/// How long a server may take to listen, and a command inside the sandbox to finish.
const SERVER_UP: Duration = Duration::from_secs(30);
const COMMAND_LIMIT: &str = "120";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder scripts/install-deps-registries fills (`node_modules/verdaccio`, `py/` with
/// pypiserver, twine and flit_core): `$ENVGIT_REGISTRY_DEPS`, else
/// `$ENVGIT_TEST_DEPS/registries`, else /opt/envgit-test-deps/registries, where the sandbox
/// sees it (twine runs inside). The script runs once per test binary; it is quick when present.
fn deps() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("ENVGIT_REGISTRY_DEPS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                std::env::var_os("ENVGIT_TEST_DEPS")
                    .map_or_else(|| PathBuf::from("/opt/envgit-test-deps"), PathBuf::from)
                    .join("registries")
            });
        let out = Command::new(workspace().join("scripts/install-deps-registries"))
            .env("ENVGIT_REGISTRY_DEPS", &dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/install-deps-registries failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir.canonicalize().unwrap()
    })
}

/// Variables of the runner that would steer a package manager or the gate elsewhere (a
/// mirror, another target directory, find-links): removed from every command here, so init
/// sees only the project and the registries are the ones on loopback.
fn is_steering(name: &str) -> bool {
    [
        "PIP_",
        "UV_",
        "NPM_CONFIG_",
        "npm_config_",
        "CARGO_",
        "ENVGIT_RESOLVE",
        "ENVGIT_UPSTREAM_CA",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

fn hermetic(c: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str().filter(|k| is_steering(k)) {
            c.env_remove(k);
        }
    }
    c
}

/// A test CA (`ca.pem`) and one leaf for all `hosts` (`leaf.pem`, `leaf.key`) in `dir`.
fn mint(dir: &Path, hosts: &[&str]) {
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "envgit test registry CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf =
        CertificateParams::new(hosts.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>()).unwrap();
    leaf.use_authority_key_identifier_extension = true;
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("leaf.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("leaf.key"), key.serialize_pem()).unwrap();
}

/// A port nobody listens on now, for servers that cannot report the one they chose.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `cmd` on the host with `dir` as its working directory; panics with its output when it
/// fails.
fn host(cmd: &mut Command, dir: &Path) -> String {
    let out = hermetic(cmd).current_dir(dir).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One ecosystem's world: a project, the test CA, the registry and its TLS front.
struct World {
    env: Env,
    certs: PathBuf,
    /// Servers (name, process, log file), killed before the temporary directory goes.
    servers: Vec<(&'static str, Child, PathBuf)>,
    resolve: Vec<String>,
}

impl Drop for World {
    fn drop(&mut self) {
        for (_, c, _) in &mut self.servers {
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
        World {
            env,
            certs,
            servers: Vec::new(),
            resolve: Vec::new(),
        }
    }

    /// A directory of its own under the test's temporary directory (outside the project).
    fn dir(&self, name: &str) -> PathBuf {
        let d = self.env.tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Starts a server with its output in `NAME.log`; with `port`, waits (bounded) until it
    /// accepts connections there, failing early with its log if it exits first.
    fn serve(&mut self, name: &'static str, cmd: &mut Command, port: Option<u16>) -> usize {
        let log = self.env.tmp.path().join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = hermetic(cmd)
            .stdin(Stdio::null())
            .stdout(if port.is_some() {
                Stdio::from(f.try_clone().unwrap())
            } else {
                Stdio::piped()
            })
            .stderr(f)
            .spawn()
            .unwrap();
        self.servers.push((name, child, log));
        let i = self.servers.len() - 1;
        if let Some(port) = port {
            let deadline = Instant::now() + SERVER_UP;
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                let exited = self.servers[i].1.try_wait().unwrap();
                assert!(
                    exited.is_none() && Instant::now() < deadline,
                    "{name} is not listening on {port} ({exited:?}):\n{}",
                    self.log(name)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        i
    }

    /// The first line a server started with a piped stdout printed.
    fn first_line(&mut self, i: usize) -> String {
        let mut line = String::new();
        BufReader::new(self.servers[i].1.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line
    }

    fn log(&self, name: &str) -> String {
        let (_, _, log) = self.servers.iter().find(|(n, _, _)| *n == name).unwrap();
        std::fs::read_to_string(log).unwrap_or_default()
    }

    /// A TLS front presenting the leaf for `hosts` before the plain server on `backend`, and
    /// `--resolve` entries sending `HOST:443` of each host there.
    fn front(&mut self, hosts: &[&str], backend: u16) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/tls_front.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script)
            .arg(self.certs.join("leaf.pem"))
            .arg(self.certs.join("leaf.key"))
            .arg(backend.to_string());
        let i = self.serve("tls-front", &mut cmd, None);
        let port: u16 = self.first_line(i).trim().parse().expect("tls_front port");
        for h in hosts {
            self.resolve.push(format!("{h}:443=127.0.0.1:{port}"));
        }
    }

    /// `envgit` in the project with this test's store and home and without the runner's
    /// registry variables, bounded in time.
    fn envgit(&self, args: &[&str], vars: &[(&str, &Path)]) -> Run {
        let mut c = Command::new("timeout");
        c.args(["-k", "10", COMMAND_LIMIT, envgit_bin()])
            .args(args)
            .current_dir(&self.env.project)
            .env("ENVGIT_HOME", &self.env.home)
            .env("HOME", self.env.user_home())
            .env("NO_COLOR", "1");
        hermetic(&mut c);
        for (k, v) in vars {
            c.env(k, v);
        }
        Run::from(c.output().unwrap())
    }

    /// `envgit init`, and the policy it wrote: `hosts` must be live in `network.allow`.
    fn init(&self, hosts: &[&str]) {
        let r = self.envgit(&["init"], &[]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let yaml = self.env.read("envgit.yaml");
        for h in hosts {
            assert!(yaml.contains(&format!("    - \"{h}\"")), "{h}:\n{yaml}");
        }
    }

    /// `envgit run` of `cmd` (argv), the registries reached through the resolve entries.
    fn run(&self, cmd: &[&str], vars: &[(&str, &Path)]) -> Run {
        let ca = self.certs.join("ca.pem");
        let mut args: Vec<&str> = vec!["run", "--upstream-ca", ca.to_str().unwrap()];
        for r in &self.resolve {
            args.extend(["--resolve", r.as_str()]);
        }
        args.push("--");
        args.extend(cmd);
        self.envgit(&args, vars)
    }
}

fn no_refusal(r: &Run) {
    assert!(
        !r.stderr.contains("envgit: denied"),
        "a request was refused:\n{}",
        r.stderr
    );
}

// ---------------------------------------------------------------------------------------
// npm: verdaccio as registry.npmjs.org

const NPM_HOSTS: &[&str] = &["registry.npmjs.org"];

const VERDACCIO_CONFIG: &str = "\
storage: ./storage
auth:
  htpasswd:
    file: ./htpasswd
    max_users: 10
uplinks: {}
packages:
  '**':
    access: $all
    publish: $authenticated
    unpublish: $authenticated
web:
  enable: false
log: { type: stdout, format: pretty, level: http }
";

/// Verdaccio on a loopback port, advertising tarballs under `public` (`https://HOST/`) as a
/// registry behind a TLS terminator does, with a user whose token can publish, and
/// `envgit-demo-lib@1.0.0` published from the host: (port, token).
fn verdaccio(w: &mut World, public: &str) -> (u16, String) {
    let dir = w.dir("verdaccio");
    std::fs::write(dir.join("config.yaml"), VERDACCIO_CONFIG).unwrap();
    let port = free_port();
    let mut cmd = Command::new("node");
    cmd.arg(deps().join("node_modules/verdaccio/bin/verdaccio"))
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("VERDACCIO_PUBLIC_URL", public)
        .current_dir(&dir);
    w.serve("verdaccio", &mut cmd, Some(port));
    let out = host(
        Command::new("curl").args([
            "-sf",
            "-X",
            "PUT",
            "-H",
            "content-type: application/json",
            "-d",
            r#"{"name":"publisher","password":"publisher-pw"}"#,
            &format!("http://127.0.0.1:{port}/-/user/org.couchdb.user:publisher"),
        ]),
        &dir,
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let token = v["token"].as_str().unwrap().to_owned();
    let lib = w.dir("envgit-demo-lib");
    std::fs::write(
        lib.join("package.json"),
        r#"{"name":"envgit-demo-lib","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    std::fs::write(lib.join("index.js"), DEMO_LIB).unwrap();
    npm_publish(w, &lib, port, &token);
    assert_eq!(status_of(port, "/envgit-demo-lib"), "200");
    (port, token)
}

const DEMO_LIB: &str = "module.exports = \"hello from envgit-demo-lib\";\n";

/// `npm publish` of `dir` to the registry on `port`, from the host.
fn npm_publish(w: &World, dir: &Path, port: u16, token: &str) {
    let npm_home = w.dir("npm-home");
    host(
        Command::new("npm")
            .args([
                "publish",
                "--registry",
                &format!("http://127.0.0.1:{port}/"),
            ])
            .arg(format!("--//127.0.0.1:{port}/:_authToken={token}"))
            .env("HOME", &npm_home),
        dir,
    );
}

/// The HTTP status the registry answers for `path`, asked directly on loopback.
fn status_of(port: u16, path: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn npm_install_works_after_init_and_publish_is_refused() {
    let mut w = World::new(NPM_HOSTS);
    let (port, token) = verdaccio(&mut w, "https://registry.npmjs.org/");
    w.front(NPM_HOSTS, port);

    w.env.write(
        "package.json",
        r#"{"name":"app","version":"1.0.0","private":true,"dependencies":{"envgit-demo-lib":"^1.0.0"}}"#,
    );
    w.init(NPM_HOSTS);
    let r = w.run(&["npm", "install"], &[]);
    assert_eq!(r.code, 0, "npm install:\n{}\n{}", r.stdout, r.stderr);
    no_refusal(&r);
    assert_eq!(
        w.env.read("node_modules/envgit-demo-lib/index.js"),
        DEMO_LIB
    );
    assert!(
        w.env
            .read("package-lock.json")
            .contains("https://registry.npmjs.org/envgit-demo-lib/-/envgit-demo-lib-1.0.0.tgz"),
        "{}",
        w.env.read("package-lock.json")
    );

    // A publish with a token the registry accepts (it published the fixture) is refused at
    // the request, and the registry never sees the package.
    w.env.write(
        "agent-pkg/package.json",
        r#"{"name":"envgit-agent-pkg","version":"0.1.0"}"#,
    );
    let publish = format!("cd agent-pkg && npm publish --//registry.npmjs.org/:_authToken={token}");
    let r = w.run(&["sh", "-c", &publish], &[]);
    assert_ne!(r.code, 0, "npm publish succeeded:\n{}", r.stderr);
    assert!(
        r.stderr
            .contains("envgit: denied PUT registry.npmjs.org/envgit-agent-pkg (rule npm.publish)"),
        "{}",
        r.stderr
    );
    assert_eq!(status_of(port, "/envgit-agent-pkg"), "404");
    assert!(
        !w.log("verdaccio").contains("PUT /envgit-agent-pkg"),
        "{}",
        w.log("verdaccio")
    );
}

/// The user's own mirror, named in `~/.npmrc` (which the sandbox masks, for its tokens): init
/// allows it, and npm inside uses it, as it does outside. The public registry leads nowhere
/// here, so an install that went there instead fails.
#[test]
fn npm_install_goes_to_the_mirror_the_users_npmrc_names() {
    let mirror = "npm.mirror.example";
    let mut w = World::new(&[mirror]);
    let (port, _token) = verdaccio(&mut w, &format!("https://{mirror}/"));
    w.front(&[mirror], port);
    w.resolve.push("registry.npmjs.org:443=127.0.0.1:1".into());
    std::fs::write(
        w.env.user_home().join(".npmrc"),
        format!("registry=https://{mirror}/\n//{mirror}/:_authToken=MIRROR_SECRET\n"),
    )
    .unwrap();
    w.env.write(
        "package.json",
        r#"{"name":"app","version":"1.0.0","private":true,"dependencies":{"envgit-demo-lib":"^1.0.0"}}"#,
    );
    w.init(&[mirror, "registry.npmjs.org"]);
    // No retries: a request sent to the dead public registry fails at once.
    let r = w.run(&["npm", "install", "--fetch-retries=0"], &[]);
    assert_eq!(r.code, 0, "npm install:\n{}\n{}", r.stdout, r.stderr);
    no_refusal(&r);
    assert_eq!(
        w.env.read("node_modules/envgit-demo-lib/index.js"),
        DEMO_LIB
    );
    let lock = w.env.read("package-lock.json");
    assert!(
        lock.contains(&format!(
            "https://{mirror}/envgit-demo-lib/-/envgit-demo-lib-1.0.0.tgz"
        )),
        "{lock}"
    );
    // The token stays behind the mask.
    let r = w.run(&["sh", "-c", "env; npm config list 2>&1"], &[]);
    assert!(!r.stdout.contains("MIRROR_SECRET"), "{}", r.stdout);
}

/// Publishes to a private npm registry (GitHub Packages' host, served by verdaccio), where the
/// gate judges a `PUT` by its body, with the preset's `action: allow` when `marking`: a plain
/// package (the control), one whose packument nests deeper than serde_json's 128 levels, and
/// one with a lone surrogate `\ud800` (the registry's `JSON.parse` reads both). Each `npm
/// publish` runs in a step of its own; `check` gets the package's name, the step's run and
/// the registry's port.
fn publish_unreadable_packuments(marking: bool, check: impl Fn(&World, &str, &Run, u16)) {
    let registry = "npm.pkg.github.com";
    let mut w = World::new(&[registry]);
    let (port, token) = verdaccio(&mut w, &format!("https://{registry}/"));
    w.front(&[registry], port);
    std::fs::write(
        w.env.user_home().join(".npmrc"),
        format!("registry=https://{registry}/\n"),
    )
    .unwrap();
    w.env.write(
        "package.json",
        r#"{"name":"app","version":"1.0.0","private":true}"#,
    );
    w.init(&[registry]);
    if marking {
        let yaml = w.env.read("envgit.yaml");
        let marked = yaml.replacen(
            "  - preset: default",
            "  - preset: default\n    action: allow",
            1,
        );
        assert_ne!(marked, yaml, "no preset entry in:\n{yaml}");
        w.env.write("envgit.yaml", &marked);
    }
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    for (name, extra) in [
        ("envgit-plain-pkg", String::new()),
        ("envgit-deep-pkg", format!(r#","nested":{deep}"#)),
        (
            "envgit-surrogate-pkg",
            r#","description":"\ud800""#.to_owned(),
        ),
    ] {
        w.env.write(
            &format!("{name}/package.json"),
            &format!(r#"{{"name":"{name}","version":"0.1.0"{extra}}}"#),
        );
        let publish = format!(
            "cd {name} && npm publish --registry https://{registry}/ --//{registry}/:_authToken={token}"
        );
        let r = w.run(&["sh", "-c", &publish], &[]);
        check(&w, name, &r, port);
    }
}

/// A publish whose packument a strict JSON reader refuses while the registry reads it is still
/// a publish, and is refused, as the plain one beside it is.
#[test]
fn a_publish_whose_packument_a_strict_json_reader_refuses_is_still_judged() {
    publish_unreadable_packuments(false, |_, name, r, port| {
        assert_eq!(
            status_of(port, &format!("/{name}")),
            "404",
            "{name} reached the registry (npm exit {}):\n{}",
            r.code,
            r.stderr
        );
        assert!(
            r.stderr.contains(&format!(
                "envgit: denied PUT npm.pkg.github.com/{name} (rule npm.publish)"
            )),
            "{name}:\n{}",
            r.stderr
        );
    });
}

/// The same publishes with the preset letting irreversible requests out and marking them: a
/// packument the gate cannot read cannot be ruled out as a publish, so when it is let out its
/// step must say so, under the rule that could not rule it out, exactly as the readable
/// publish beside it is.
#[test]
fn in_mark_mode_a_publish_the_gate_cannot_read_is_let_out_and_marked() {
    publish_unreadable_packuments(true, |w, name, r, port| {
        assert_eq!(r.code, 0, "{name}: npm publish failed:\n{}", r.stderr);
        assert_eq!(
            status_of(port, &format!("/{name}")),
            "200",
            "{name} did not reach the registry"
        );
        let log = w.env.log_json();
        let puts: Vec<&serde_json::Value> = log[0]["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| q["method"] == "PUT")
            .collect();
        assert!(
            !puts.is_empty()
                && puts
                    .iter()
                    .all(|q| q["irreversible"] == true && q["rule"] == "npm.publish"),
            "{name} left the sandbox unmarked: {puts:?}"
        );
        assert!(
            log[0]["flags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == "irreversible"),
            "{name}: the step is not marked: {}",
            log[0]
        );
    });
}

// ---------------------------------------------------------------------------------------
// PyPI: pypiserver as pypi.org and files.pythonhosted.org

const PYPI_HOSTS: &[&str] = &["pypi.org", "files.pythonhosted.org"];

/// A wheel of a one-module package `name` (import name with `_`), built with flit_core into
/// `out`; the file name.
fn wheel(w: &World, name: &str, out: &Path) -> String {
    let module = name.replace('-', "_");
    let src = w.dir(&format!("src-{name}"));
    std::fs::create_dir_all(src.join(&module)).unwrap();
    std::fs::write(
        src.join("pyproject.toml"),
        format!(
            "[build-system]\nrequires = [\"flit_core\"]\nbuild-backend = \"flit_core.buildapi\"\n\n\
             [project]\nname = \"{name}\"\nversion = \"1.0\"\ndescription = \"{name}, for envgit's tests\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        src.join(&module).join("__init__.py"),
        format!("GREETING = \"hello from {name}\"\n"),
    )
    .unwrap();
    host(
        Command::new("python3")
            .args(["-m", "flit_core.wheel", "--outdir"])
            .arg(out)
            .env("PYTHONPATH", deps().join("py")),
        &src,
    );
    format!("{module}-1.0-py2.py3-none-any.whl")
}

#[test]
fn pip_install_works_after_init_and_upload_is_refused() {
    let mut w = World::new(PYPI_HOSTS);
    let packages = w.dir("packages");
    wheel(&w, "envgit-demo-py", &packages);
    let extra = wheel(&w, "envgit-demo-direct", &packages);
    let port = free_port();
    // Uploads need no password, so one the gate let through would land in `packages`.
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "pypiserver", "run", "-i", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["-a", ".", "-P", ".", "--disable-fallback"])
        .arg(&packages)
        .env("PYTHONPATH", deps().join("py"));
    w.serve("pypiserver", &mut cmd, Some(port));
    w.front(PYPI_HOSTS, port);

    // pypiserver links its files under its own host, so the index is pypi.org; a direct
    // reference reaches files.pythonhosted.org (the same server behind it).
    w.env.write(
        "requirements.txt",
        &format!(
            "envgit-demo-py==1.0\nenvgit-demo-direct @ https://files.pythonhosted.org/packages/{extra}\n"
        ),
    );
    w.init(PYPI_HOSTS);
    // Into a virtual environment, as one installs a project's requirements. Its pip is the
    // interpreter's own (`--system-site-packages`): seeding one with ensurepip takes 15 s here.
    // (Not pyenv's `pip` shim: it rehashes after an install and exits 1 when the pyenv root
    // is read-only, as it is here, where the test's $HOME is not the one pyenv lives in.)
    w.run(
        &[
            "python3",
            "-m",
            "venv",
            "--without-pip",
            "--system-site-packages",
            ".venv",
        ],
        &[],
    )
    .ok();
    let r = w.run(
        &[
            ".venv/bin/python",
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "-r",
            "requirements.txt",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "pip install:\n{}\n{}", r.stdout, r.stderr);
    no_refusal(&r);
    let r = w.run(
        &[
            ".venv/bin/python",
            "-c",
            "import envgit_demo_py, envgit_demo_direct; \
             print(envgit_demo_py.__file__); print(envgit_demo_direct.GREETING)",
        ],
        &[],
    );
    let venv = w.env.project.canonicalize().unwrap().join(".venv/lib/");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines.len() == 2
            && lines[0].starts_with(venv.to_str().unwrap())
            && lines[0].ends_with("/site-packages/envgit_demo_py/__init__.py")
            && lines[1] == "hello from envgit-demo-direct",
        "{}\n{}",
        r.stdout,
        r.stderr
    );

    // twine's upload form: to pypi.org (an allowed host) it is refused by the upload rule; to
    // its default, upload.pypi.org, which init does not allow, at the connection.
    std::fs::create_dir_all(w.env.path("dist")).unwrap();
    let agent = wheel(&w, "envgit-agent-py", &w.env.path("dist"));
    let twine = format!(
        "PYTHONPATH={} python3 -m twine upload --non-interactive --disable-progress-bar \
         -u agent -p secret",
        deps().join("py").display()
    );
    let r = w.run(
        &[
            "sh",
            "-c",
            &format!("{twine} --repository-url https://pypi.org/ dist/{agent}"),
        ],
        &[],
    );
    assert_ne!(r.code, 0, "twine upload succeeded:\n{}", r.stdout);
    assert!(
        r.stderr
            .contains("envgit: denied POST pypi.org/ (rule pypi.upload)"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    let r = w.run(&["sh", "-c", &format!("{twine} dist/{agent}")], &[]);
    assert_ne!(r.code, 0, "twine upload succeeded:\n{}", r.stdout);
    assert!(
        r.stderr
            .contains("envgit: denied CONNECT upload.pypi.org:443 (rule network.allow)"),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    let mut files: Vec<String> = std::fs::read_dir(&packages)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [extra.as_str(), "envgit_demo_py-1.0-py2.py3-none-any.whl"],
        "the upload arrived"
    );
}

/// Legacy PyPI upload forms, sent by python's own HTTP client to pypiserver as a private
/// index: the gate must read the form as the server does (cgi.FieldStorage, behind bottle),
/// whatever the spelling: an unquoted or upper-case `name` parameter, the boundary the
/// `Content-Type` names after a preamble that opens with another, a delimiter line ending in
/// a bare LF; and a legacy action other than `file_upload` (pypiserver's `remove_pkg` deletes
/// a release). The plain form first, as the control.
const LEGACY_FORMS: &str = r#"
import sys, urllib.request, urllib.error
case = sys.argv[1]
wheel = "envgit_%s-1.0-py3-none-any.whl" % case
def part(disposition, value, end=b"\r\n"):
    return b"Content-Disposition: form-data; " + disposition + b"\r\n\r\n" + value + end
real = (b"--B\r\n" + part(b'name=":action"', b"file_upload") + b"--B\r\n"
        + part(b'name="content"; filename="' + wheel.encode() + b'"', b"PK\x03\x04")
        + b"--B--\r\n")
ct = "multipart/form-data; boundary=B"
if case == "plain":
    body = real
elif case == "unquoted":
    body = real.replace(b'name=":action"', b"name=:action")
elif case == "upper":
    body = real.replace(b'name=":action"', b'NAME=":action"')
elif case == "preamble":
    body = b"--A\r\n" + part(b'name="pad"', b"x\r\n" + real, b"\r\n--A--\r\n")
elif case == "lf":
    body = b"--B\r\n" + part(b'name="comment"', b"hi", b"\n") + real
elif case == "remove":
    body = b":action=remove_pkg&name=envgit_demo_py&version=1.0"
    ct = "application/x-www-form-urlencoded"
req = urllib.request.Request("https://pypi.internal.example/", data=body, method="POST",
                             headers={"Content-Type": ct})
try:
    with urllib.request.urlopen(req) as r:
        print(case, r.status)
except urllib.error.HTTPError as e:
    print(case, e.code, e.reason)
"#;

#[test]
fn legacy_pypi_forms_are_judged_as_the_index_reads_them() {
    let index = "pypi.internal.example";
    let mut w = World::new(&[index]);
    let packages = w.dir("packages");
    let demo = wheel(&w, "envgit-demo-py", &packages);
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "pypiserver", "run", "-i", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["-a", ".", "-P", ".", "--disable-fallback"])
        .arg(&packages)
        .env("PYTHONPATH", deps().join("py"));
    w.serve("pypiserver", &mut cmd, Some(port));
    w.front(&[index], port);
    w.env.write("legacy_form.py", LEGACY_FORMS);
    let r = w.envgit(&["init", "--allow", index], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut let_out = Vec::new();
    for case in ["plain", "unquoted", "upper", "preamble", "lf", "remove"] {
        let r = w.run(&["python3", "legacy_form.py", case], &[]);
        if !r
            .stderr
            .contains(&format!("envgit: denied POST {index}/ (rule pypi.upload)"))
        {
            let_out.push(format!("{case}: {}{}", r.stdout, r.stderr));
        }
    }
    let mut files: Vec<String> = std::fs::read_dir(&packages)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert!(
        let_out.is_empty() && files == [demo.as_str()],
        "forms let out unjudged:\n{}\nthe index now holds {files:?}\n{}",
        let_out.join("\n"),
        w.log("pypiserver")
    );
}

// ---------------------------------------------------------------------------------------
// crates.io: a sparse index and its downloads as index.crates.io, static.crates.io and
// crates.io (the API), served by python's http.server

const CARGO_HOSTS: &[&str] = &["index.crates.io", "static.crates.io", "crates.io"];

/// `cargo package` of a tiny library crate, laid out in `www` as crates.io's sparse index
/// and download host serve it: `config.json`, the index file `en/vg/envgit-demo-crate`, and
/// `crates/envgit-demo-crate/0.1.0/download` (crates.io's `dl` has no markers, so cargo
/// appends `/{crate}/{version}/download`).
fn sparse_registry(w: &World, www: &Path) {
    let src = w.dir("envgit-demo-crate");
    std::fs::create_dir_all(src.join("src")).unwrap();
    std::fs::write(
        src.join("Cargo.toml"),
        "[package]\nname = \"envgit-demo-crate\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         description = \"A crate for envgit's tests\"\nlicense = \"MIT\"\n",
    )
    .unwrap();
    std::fs::write(
        src.join("src/lib.rs"),
        "pub fn greeting() -> &'static str {\n    \"hello from envgit-demo-crate\"\n}\n",
    )
    .unwrap();
    let target = w.dir("crate-target");
    host(
        Command::new("cargo")
            .args([
                "package",
                "--no-verify",
                "--allow-dirty",
                "--offline",
                "--target-dir",
            ])
            .arg(&target),
        &src,
    );
    let dl = www.join("crates/envgit-demo-crate/0.1.0");
    std::fs::create_dir_all(&dl).unwrap();
    std::fs::copy(
        target.join("package/envgit-demo-crate-0.1.0.crate"),
        dl.join("download"),
    )
    .unwrap();
    let sum = host(Command::new("sha256sum").arg(dl.join("download")), www);
    let cksum = sum.split_whitespace().next().unwrap();
    std::fs::write(
        www.join("config.json"),
        r#"{"dl":"https://static.crates.io/crates","api":"https://crates.io"}"#,
    )
    .unwrap();
    std::fs::create_dir_all(www.join("en/vg")).unwrap();
    std::fs::write(
        www.join("en/vg/envgit-demo-crate"),
        format!(
            "{{\"name\":\"envgit-demo-crate\",\"vers\":\"0.1.0\",\"deps\":[],\"cksum\":\"{cksum}\",\
             \"features\":{{}},\"yanked\":false}}\n"
        ),
    )
    .unwrap();
}

/// The rustup home the host's `cargo` proxy uses; inside, `$HOME` is the test's, so it is
/// named explicitly (a toolchain variable: shown read-only).
fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".rustup"))
}

#[test]
fn cargo_build_works_after_init_and_publish_is_refused() {
    let mut w = World::new(CARGO_HOSTS);
    let www = w.dir("www");
    sparse_registry(&w, &www);
    let mut cmd = Command::new("python3");
    cmd.args([
        "-u",
        "-m",
        "http.server",
        "--bind",
        "127.0.0.1",
        "--directory",
    ])
    .arg(&www)
    .arg("0");
    let i = w.serve("http.server", &mut cmd, None);
    // "Serving HTTP on 127.0.0.1 port N (http://127.0.0.1:N/) ..."
    let line = w.first_line(i);
    let port: u16 = line
        .split_whitespace()
        .skip_while(|t| *t != "port")
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("http.server said {line:?}"));
    w.front(CARGO_HOSTS, port);

    w.env.write(
        "Cargo.toml",
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         description = \"app\"\nlicense = \"MIT\"\n\n\
         [dependencies]\nenvgit-demo-crate = \"0.1\"\n",
    );
    w.env.write(
        "src/main.rs",
        "fn main() {\n    println!(\"{}\", envgit_demo_crate::greeting());\n}\n",
    );
    w.init(CARGO_HOSTS);
    // CARGO_HOME is left to its default, ~/.cargo in the home overlay.
    let rustup = rustup_home();
    let vars: &[(&str, &Path)] = &[("RUSTUP_HOME", &rustup)];
    let r = w.run(&["cargo", "build"], vars);
    assert_eq!(r.code, 0, "cargo build:\n{}\n{}", r.stdout, r.stderr);
    no_refusal(&r);
    let log = w.log("http.server");
    for path in [
        "GET /config.json",
        "GET /en/vg/envgit-demo-crate",
        "GET /crates/envgit-demo-crate/0.1.0/download",
    ] {
        assert!(log.contains(path), "{path} not served:\n{log}");
    }
    let out = Command::new(w.env.path("target/debug/app"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from envgit-demo-crate\n"
    );

    let r = w.run(
        &[
            "cargo",
            "publish",
            "--no-verify",
            "--allow-dirty",
            "--token",
            "agent-token",
        ],
        vars,
    );
    assert_ne!(r.code, 0, "cargo publish succeeded:\n{}", r.stderr);
    assert!(
        r.stderr
            .contains("envgit: denied PUT crates.io/api/v1/crates/new (rule crates.publish)"),
        "{}",
        r.stderr
    );
    let log = w.log("http.server");
    assert!(!log.contains("\"PUT "), "the publish arrived:\n{log}");
}
