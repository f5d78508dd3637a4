//! Registries out of the box: `envgit init` writes the hosts the project and the user's own
//! package configuration need, and registry variables reach the sandbox unless they carry a
//! credential.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{Env, Run};

#[test]
fn init_allows_the_registries_the_project_and_the_host_ask_for() {
    let env = Env::new();
    env.write("package.json", r#"{"name":"x","dependencies":{"a":"1"}}"#);
    env.write(
        "package-lock.json",
        r#"{"packages":{"node_modules/a":{"resolved":"https://npm.elsewhere.example/a.tgz"}}}"#,
    );
    env.write("requirements.txt", "requests\n");
    env.write("Cargo.toml", "[package]\nname = \"x\"\n");
    let npmrc = env.user_home().join(".npmrc");
    std::fs::write(
        &npmrc,
        "registry=https://npm.mirror.example/\n//npm.mirror.example/:_authToken=NPM_SECRET\n",
    )
    .unwrap();
    env.init();
    let yaml = env.read("envgit.yaml");
    assert!(
        !yaml.contains("NPM_SECRET") && !yaml.contains("_authToken"),
        "{yaml}"
    );
    assert!(
        yaml.contains("# - \"npm.elsewhere.example\"   # named by package-lock.json"),
        "{yaml}"
    );
    assert!(
        yaml.contains("\"npm.mirror.example\"   # ~/.npmrc"),
        "{yaml}"
    );
    // The policy parses, and lists exactly the public registries and the user's mirror.
    let r = env.envgit(&["run", "--", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for host in [
        "registry.npmjs.org",
        "pypi.org",
        "files.pythonhosted.org",
        "index.crates.io",
        "static.crates.io",
        "crates.io",
        "npm.mirror.example",
    ] {
        assert!(
            yaml.contains(&format!("    - \"{host}\"")),
            "{host} missing:\n{yaml}"
        );
    }
}

fn run_with(env: &Env, vars: &[(&str, &str)], script: &str) -> Run {
    let mut c = env.cmd(&env.path(""));
    c.args(["run", "--", "sh", "-c", script]);
    for (k, v) in vars {
        c.env(k, v);
    }
    Run::from(c.output().unwrap())
}

#[test]
fn mirror_variables_reach_the_sandbox_and_credentials_do_not() {
    let env = Env::new();
    env.init();
    let r = run_with(
        &env,
        &[
            ("NPM_CONFIG_REGISTRY", "https://npm.mirror.example/"),
            ("GOPROXY", "https://goproxy.example,direct"),
            ("PIP_INDEX_URL", "https://user:hunter2@py.example/simple"),
        ],
        "echo npm=$NPM_CONFIG_REGISTRY go=$GOPROXY pip=$PIP_INDEX_URL",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("npm=https://npm.mirror.example/"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("go=https://goproxy.example,direct"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("pip=\n") || r.stdout.trim_end().ends_with("pip="),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("hunter2"));
    assert!(
        r.stderr.contains(
            "PIP_INDEX_URL is not passed into the sandbox: its URL carries a user name or password"
        ),
        "{}",
        r.stderr
    );
}
