//! Registry and mirror variables the caller set: passed into the sandbox so package managers
//! use the same mirror inside, unless the value carries a credential.

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
}
