use super::*;

fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(p, c)| (p.to_string(), c.to_string()))
        .collect()
}

fn active(w: &[Wanted]) -> Vec<&str> {
    w.iter()
        .filter(|w| w.active)
        .map(|w| w.host.as_str())
        .collect()
}

fn commented(w: &[Wanted]) -> Vec<&str> {
    w.iter()
        .filter(|w| !w.active)
        .map(|w| w.host.as_str())
        .collect()
}

#[test]
fn each_ecosystem_asks_for_its_public_registries() {
    let cases: &[(&str, &[&str])] = &[
        ("package.json", &["registry.npmjs.org"]),
        (
            "requirements-dev.txt",
            &["pypi.org", "files.pythonhosted.org"],
        ),
        ("pyproject.toml", &["pypi.org", "files.pythonhosted.org"]),
        ("setup.py", &["pypi.org", "files.pythonhosted.org"]),
        ("setup.cfg", &["pypi.org", "files.pythonhosted.org"]),
        ("Pipfile", &["pypi.org", "files.pythonhosted.org"]),
        ("uv.lock", &["pypi.org", "files.pythonhosted.org"]),
        (
            "Cargo.toml",
            &["index.crates.io", "static.crates.io", "crates.io"],
        ),
        ("go.mod", &["proxy.golang.org", "sum.golang.org"]),
        ("Gemfile", &["rubygems.org", "index.rubygems.org"]),
    ];
    for (path, want) in cases {
        let w = merge(from_project(&files(&[(path, "")])));
        assert_eq!(active(&w), *want, "{path}");
        assert!(w.iter().all(|w| w.why == *path), "{path}: {w:?}");
    }
    assert!(from_project(&files(&[("README.md", "https://evil.example/")])).is_empty());
}

#[test]
fn a_lockfile_naming_a_foreign_host_is_commented_out() {
    let lock = r#"{ "packages": { "node_modules/a": {
        "resolved": "https://registry.npmjs.org/a/-/a-1.0.0.tgz" },
      "node_modules/b": { "resolved": "https://npm.evil.example:8443/b/-/b-1.0.0.tgz" } } }"#;
    let w = merge(from_project(&files(&[("package-lock.json", lock)])));
    assert_eq!(active(&w), ["registry.npmjs.org"]);
    assert_eq!(commented(&w), ["npm.evil.example:8443"]);
    assert_eq!(w[1].why, "named by package-lock.json");

    let yarn = "a@^1:\n  resolved \"https://registry.yarnpkg.com/a/-/a-1.tgz#abc\"\n";
    let w = merge(from_project(&files(&[("yarn.lock", yarn)])));
    assert_eq!(active(&w), ["registry.npmjs.org", "registry.yarnpkg.com"]);

    let pnpm = "  resolution: {tarball: https://pkgs.corp.example/x.tgz}\n";
    let w = merge(from_project(&files(&[("pnpm-lock.yaml", pnpm)])));
    assert_eq!(commented(&w), ["pkgs.corp.example"]);

    let req = "--extra-index-url https://tok:secret@py.corp.example/simple\nrequests==2\n";
    let w = merge(from_project(&files(&[("requirements.txt", req)])));
    assert_eq!(commented(&w), ["py.corp.example"]);

    let cargo =
        "[[package]]\nname = \"x\"\nsource = \"sparse+https://crates.corp.example/index/\"\n";
    let w = merge(from_project(&files(&[("Cargo.lock", cargo)])));
    assert_eq!(commented(&w), ["crates.corp.example"]);

    let cfg = "[source.crates-io]\nreplace-with = \"m\"\n[source.m]\nregistry = \"sparse+https://mirror.example/\"\n";
    let w = merge(from_project(&files(&[(".cargo/config.toml", cfg)])));
    assert_eq!(commented(&w), ["mirror.example"]);

    let gem = "source \"https://gems.corp.example\"\ngem \"rails\"\n";
    let w = merge(from_project(&files(&[("Gemfile", gem)])));
    assert_eq!(commented(&w), ["gems.corp.example"]);
}

#[test]
fn a_homepage_or_repository_url_is_not_egress() {
    let pkg = r#"{ "homepage": "https://docs.example", "repository": "https://github.com/a/b" }"#;
    let w = merge(from_project(&files(&[("package.json", pkg)])));
    assert_eq!(active(&w), ["registry.npmjs.org"]);
    assert!(commented(&w).is_empty());
}

#[test]
fn git_remotes_are_fetch_hosts() {
    let cfg = "[remote \"origin\"]\n\turl = https://user:ghp_x@github.com/a/b.git\n\
               [remote \"up\"]\n\turl = git@gitlab.com:a/b.git\n";
    let w = merge(from_project(&files(&[(".git/config", cfg)])));
    assert_eq!(active(&w), ["github.com"]);
    assert_eq!(commented(&w), ["gitlab.com"]);
}

#[test]
fn host_configuration_names_active_mirrors_never_credentials() {
    let npmrc = "registry=https://npm.mirror.example/\n\
                 //npm.mirror.example/:_authToken=npm_SECRET\n\
                 @corp:registry=https://me:hunter2@npm.corp.example/\n";
    let pip = "[global]\nindex-url = https://u:pw@py.mirror.example/simple\n\
               extra-index-url =\n    https://py2.example/simple\n    https://py3.example:8080/s\n\
               password = hunter2\n";
    let cargo = "[source.crates-io]\nreplace-with = \"m\"\n\
                 [source.m]\nregistry = \"sparse+https://crates.mirror.example/index/\"\n\
                 [registries.corp]\nindex = \"https://crates.corp.example/git/index\"\n\
                 token = \"cio_SECRET\"\n";
    let env = vec![
        (
            "GOPROXY".to_string(),
            "https://goproxy.example,direct".to_string(),
        ),
        (
            "CARGO_REGISTRIES_X_INDEX".to_string(),
            "sparse+https://x.example/".to_string(),
        ),
        (
            "HOME".to_string(),
            "https://not.a.registry.example".to_string(),
        ),
    ];
    let w = merge(from_host(
        &[
            (HostFile::Npmrc, "~/.npmrc".into(), npmrc.into()),
            (
                HostFile::PipConf,
                "~/.config/pip/pip.conf".into(),
                pip.into(),
            ),
            (
                HostFile::CargoConfig,
                "~/.cargo/config.toml".into(),
                cargo.into(),
            ),
        ],
        &env,
    ));
    assert_eq!(
        active(&w),
        [
            "npm.mirror.example",
            "npm.corp.example",
            "py.mirror.example",
            "py2.example",
            "py3.example:8080",
            "crates.mirror.example",
            "crates.corp.example",
            "goproxy.example",
            "x.example",
        ]
    );
    let text = render(&w, &[]);
    for secret in ["SECRET", "hunter2", "me:", "u:pw", "_authToken", "token"] {
        assert!(!text.contains(secret), "{secret} leaked:\n{text}");
    }
}

#[test]
fn rendered_block_is_a_valid_policy_with_only_active_hosts() {
    let mut all = from_project(&files(&[
        ("package.json", ""),
        (
            "package-lock.json",
            "\"resolved\": \"https://evil.example/x.tgz\"",
        ),
    ]));
    all.extend(from_host(
        &[(
            HostFile::Npmrc,
            "~/.npmrc".into(),
            "registry=https://m.example/".into(),
        )],
        &[],
    ));
    let w = merge(all);
    let text = format!("version: 1\n{}", render(&w, &["api.github.com:443".into()]));
    let p = crate::Policy::parse("envgit.yaml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        p.network.allow,
        ["api.github.com:443", "registry.npmjs.org", "m.example"]
    );
    assert!(
        text.contains("# - \"evil.example\"   # named by package-lock.json"),
        "{text}"
    );
    assert!(text.contains("\"m.example\"   # ~/.npmrc"), "{text}");
}

#[test]
fn masked_configuration_becomes_the_clients_own_variables() {
    let npmrc = "registry=https://npm.mirror.example/\n\
                 //npm.mirror.example/:_authToken=npm_SECRET\n\
                 @corp:registry = \"https://npm.corp.example/\"\n\
                 @env:registry=${CORP_REGISTRY}\n\
                 email=me@example.com\n";
    assert_eq!(
        client_vars(HostFile::Npmrc, npmrc),
        [
            (
                "npm_config_registry".to_string(),
                "https://npm.mirror.example/".to_string()
            ),
            (
                "npm_config_@corp:registry".to_string(),
                "https://npm.corp.example/".to_string()
            ),
        ]
    );
    let pip = "[global]\nindex-url = https://py.old.example/simple\n\
               index-url = https://py.mirror.example/simple\n\
               extra-index-url =\n    https://py2.example/simple\n    https://py3.example:8080/s\n\
               find-links = /opt/wheels\n\
               password = hunter2\ncert = /etc/ssl/certs/ca.pem\n";
    assert_eq!(
        client_vars(HostFile::PipConf, pip),
        [
            (
                "PIP_INDEX_URL".to_string(),
                "https://py.mirror.example/simple".to_string()
            ),
            (
                "PIP_EXTRA_INDEX_URL".to_string(),
                "https://py2.example/simple https://py3.example:8080/s".to_string()
            ),
            ("PIP_FIND_LINKS".to_string(), "/opt/wheels".to_string()),
        ]
    );
    let cargo = "[source.m]\nregistry = \"sparse+https://crates.mirror.example/index/\"\n";
    assert!(client_vars(HostFile::CargoConfig, cargo).is_empty());
}
