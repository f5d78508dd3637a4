//! Registry and mirror variables the caller set: passed into the sandbox so package managers
//! use the same mirror inside, unless the value carries a credential; and the registries named
//! by the configuration files the sandbox masks, as the same variables.

use std::path::Path;

use envgit_policy::registries::{self, HostFile};

/// Passed through besides the registry variables `init` reads
/// ([`envgit_policy::registries::REGISTRY_VARS`]): the ones that only steer a client.
/// `CARGO_REGISTRIES_<NAME>_INDEX` and `npm_config_<scope>:registry` are matched by pattern.
const STEERING: &[&str] = &[
    "CARGO_REGISTRY_DEFAULT",
    "GONOSUMDB",
    "GONOSUMCHECK",
    "GOPRIVATE",
    "GONOPROXY",
    "GOSUMDB",
];

pub fn is_registry_var(name: &str) -> bool {
    envgit_policy::registries::REGISTRY_VARS.contains(&name)
        || STEERING.contains(&name)
        || (name.starts_with("CARGO_REGISTRIES_") && name.ends_with("_INDEX"))
        || (name.starts_with("npm_config_") && name.ends_with(":registry"))
}

/// Why a value may not be passed, if it carries a credential.
pub fn credential_in(value: &str) -> Option<&'static str> {
    let lower = value.to_ascii_lowercase();
    if lower.contains("_authtoken") || lower.contains("token=") || lower.contains("password=") {
        return Some("it carries a token");
    }
    let has_userinfo = value.split("://").skip(1).any(|rest| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        authority.contains('@')
    });
    has_userinfo.then_some("its URL carries a user name or password")
}

/// `(name, value)` pairs of an environment, or `(name, reason)` for a refused one.
pub type Vars = Vec<(String, String)>;

/// Configuration files the sandbox masks for the tokens they hold ([`crate::plan::HOME_DENIES`],
/// [`envgit_policy::PROJECT_DENIES`]) that also say which registry to use, lowest precedence
/// first: pip's legacy then current user file, the user's `.npmrc`, then the project's.
const MASKED_CONFIG: &[(HostFile, bool, &str)] = &[
    (HostFile::PipConf, false, ".pip/pip.conf"),
    (HostFile::PipConf, false, ".config/pip/pip.conf"),
    (HostFile::Npmrc, false, ".npmrc"),
    (HostFile::Npmrc, true, ".npmrc"),
];

/// Larger configuration files are not read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The registries the masked configuration files of `home` and `project` name, as the
/// variables that tell npm and pip the same (`npm_config_registry`, `PIP_INDEX_URL`, ...), so
/// the client inside uses the registry it uses outside and `envgit init` allowed, never the
/// public one instead. `caller_env` wins for a variable it sets (npm's names in any case), as
/// the clients let the environment win over their files. Still to go through [`split`], which
/// refuses a value carrying a credential. Symlinks are not followed.
pub fn from_masked_config(
    home: Option<&Path>,
    project: &Path,
    caller_env: &[(String, String)],
) -> Vars {
    let mut out: Vars = Vec::new();
    for (kind, in_project, rel) in MASKED_CONFIG {
        let base = if *in_project { Some(project) } else { home };
        let Some(text) = base.and_then(|b| read_config(&b.join(rel))) else {
            continue;
        };
        for (k, v) in registries::client_vars(*kind, &text) {
            out.retain(|(n, _)| *n != k);
            out.push((k, v));
        }
    }
    out.retain(|(k, _)| !caller_env.iter().any(|(c, _)| c.eq_ignore_ascii_case(k)));
    out
}

fn read_config(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(MAX_CONFIG_BYTES).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The registry variables of `caller_env` split into passed and refused `(name, reason)`.
pub fn split(caller_env: &[(String, String)]) -> (Vars, Vars) {
    let mut pass = Vec::new();
    let mut refused = Vec::new();
    for (k, v) in caller_env.iter().filter(|(k, _)| is_registry_var(k)) {
        match credential_in(v) {
            Some(why) => refused.push((k.clone(), why.to_string())),
            None => pass.push((k.clone(), v.clone())),
        }
    }
    (pass, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn mirrors_pass_credentials_are_refused() {
        let (pass, refused) = split(&env(&[
            ("NPM_CONFIG_REGISTRY", "https://npm.mirror.example/"),
            ("PIP_INDEX_URL", "https://user:pw@py.example/simple"),
            ("PIP_EXTRA_INDEX_URL", "https://py2.example/simple"),
            ("CARGO_REGISTRIES_CORP_INDEX", "sparse+https://c.example/"),
            ("CARGO_REGISTRIES_CORP_TOKEN", "secret"),
            ("GOPROXY", "https://goproxy.example,direct"),
            ("npm_config_//r.example/:_authToken", "secret"),
            ("UV_INDEX_URL", "https://x.example/?token=abc"),
            ("SECRET_THING", "x"),
        ]));
        let names: Vec<&str> = pass.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "NPM_CONFIG_REGISTRY",
                "PIP_EXTRA_INDEX_URL",
                "CARGO_REGISTRIES_CORP_INDEX",
                "GOPROXY"
            ]
        );
        let names: Vec<&str> = refused.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PIP_INDEX_URL", "UV_INDEX_URL"]);
        assert!(refused[0].1.contains("user name or password"));
    }

    #[test]
    fn masked_configuration_names_the_same_registries_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let project = tmp.path().join("project");
        std::fs::create_dir_all(home.join(".config/pip")).unwrap();
        std::fs::create_dir_all(home.join(".pip")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(
            home.join(".npmrc"),
            "registry=https://npm.mirror.example/\n//npm.mirror.example/:_authToken=SECRET\n\
             @corp:registry=https://npm.corp.example/\n",
        )
        .unwrap();
        std::fs::write(
            home.join(".pip/pip.conf"),
            "[global]\nindex-url = https://py.legacy.example/simple\n",
        )
        .unwrap();
        std::fs::write(
            home.join(".config/pip/pip.conf"),
            "[global]\nindex-url = https://u:pw@py.mirror.example/simple\n\
             extra-index-url = https://py2.example/simple\n",
        )
        .unwrap();
        // The project's own .npmrc wins over the user's, as in npm.
        std::fs::write(
            project.join(".npmrc"),
            "@corp:registry=https://npm.project.example/\n",
        )
        .unwrap();
        let caller = env(&[("PIP_EXTRA_INDEX_URL", "https://py.caller.example/simple")]);
        let vars = from_masked_config(Some(&home), &project, &caller);
        assert_eq!(
            vars,
            env(&[
                ("PIP_INDEX_URL", "https://u:pw@py.mirror.example/simple"),
                ("npm_config_registry", "https://npm.mirror.example/"),
                ("npm_config_@corp:registry", "https://npm.project.example/"),
            ])
        );
        let (pass, refused) = split(&vars);
        assert_eq!(pass.len(), 2);
        assert_eq!(refused[0].0, "PIP_INDEX_URL");
        assert!(!format!("{pass:?}").contains("SECRET"));

        // The caller's variable wins, whatever its case; a symlinked .npmrc is not followed.
        let elsewhere = tmp.path().join("elsewhere.npmrc");
        std::fs::write(&elsewhere, "@evil:registry=https://evil.example/\n").unwrap();
        std::fs::remove_file(project.join(".npmrc")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, project.join(".npmrc")).unwrap();
        let caller = env(&[("NPM_CONFIG_REGISTRY", "https://npm.caller.example/")]);
        let vars = from_masked_config(Some(&home), &project, &caller);
        let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "PIP_INDEX_URL",
                "PIP_EXTRA_INDEX_URL",
                "npm_config_@corp:registry"
            ]
        );
    }
}
