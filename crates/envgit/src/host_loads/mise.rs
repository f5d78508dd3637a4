//! mise's project configuration: its shell hook runs `env._.source` scripts, reads `env._.file`
//! variables and puts `env._.path` (and a `env._.python.venv`'s `bin`) first on `PATH` at every
//! prompt in a trusted project. Paths are relative to the project (mise's `config_root`).

use std::ffi::OsString;

use toml::{Table, Value};

use super::{HostLoads, add, join};

/// A mise configuration's text; nothing when it does not parse (mise then refuses it too).
pub(super) fn parse(text: &str) -> HostLoads {
    let mut out = HostLoads::default();
    let Ok(config) = text.parse::<Table>() else {
        return out;
    };
    let Some(directives) = config
        .get("env")
        .and_then(Value::as_table)
        .and_then(|env| env.get("_"))
        .and_then(Value::as_table)
    else {
        return out;
    };
    for key in ["source", "file"] {
        for p in paths(directives.get(key)) {
            add(p, &mut out.files);
        }
    }
    for p in paths(directives.get("path")) {
        add(p, &mut out.path_dirs);
    }
    if let Some(venv) = directives
        .get("python")
        .and_then(Value::as_table)
        .and_then(|python| python.get("venv"))
    {
        for p in paths(Some(venv)) {
            add(&join(p, "bin"), &mut out.path_dirs);
        }
    }
    out
}

/// mise's configuration files in a directory it trusts, for the environments the person's
/// `MISE_ENV` names (`mise.dev.toml` then too), relative to that directory.
pub(super) struct ConfigNames {
    /// The files to read for what they load (and each `*.toml` of [`CONF_D_DIRS`]).
    pub read: Vec<String>,
    /// What to protect: the files above outside `.mise/` and `.config/mise/`, and those
    /// directories whole (`conf.d/` with them), `mise/conf.d/` too.
    pub protect: Vec<String>,
}

/// mise's directories of configuration (`config.toml`, `config.ENV.toml`, `conf.d/*.toml`).
const CONFIG_DIRS: &[&str] = &[".mise", "mise", ".config/mise"];

/// The directories whose `*.toml` files mise merges into a directory's configuration.
pub(super) const CONF_D_DIRS: &[&str] = &["mise/conf.d", ".mise/conf.d", ".config/mise/conf.d"];

/// Those protected whole; in `mise/`, which may hold a project's code, its configuration only.
const WHOLE_CONFIG_DIRS: &[&str] = &[".mise", ".config/mise", "mise/conf.d"];

/// Files named after mise beside them (`mise.toml`, `.mise.local.toml`, `.config/mise.ENV.toml`).
const CONFIG_STEMS: &[&str] = &["mise", ".mise", ".config/mise"];

pub(super) fn config_names(mise_envs: &[String]) -> ConfigNames {
    let mut suffixes = vec![".toml".to_string(), ".local.toml".to_string()];
    for e in mise_envs {
        suffixes.push(format!(".{e}.toml"));
        suffixes.push(format!(".{e}.local.toml"));
    }
    let mut names = ConfigNames {
        read: Vec::new(),
        protect: WHOLE_CONFIG_DIRS.iter().map(|d| d.to_string()).collect(),
    };
    for suffix in &suffixes {
        for stem in CONFIG_STEMS {
            names.read.push(format!("{stem}{suffix}"));
            names.protect.push(format!("{stem}{suffix}"));
        }
        for dir in CONFIG_DIRS {
            names.read.push(format!("{dir}/config{suffix}"));
        }
        names.protect.push(format!("mise/config{suffix}"));
    }
    names
}

/// The environments the person's `MISE_ENV` (or the older `MISE_PROFILE`) names, for mise's
/// `mise.ENV.toml` files; a name that is not one file name's part is left out.
pub(super) fn environments(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (k, v) in vars {
        if k != "MISE_ENV" && k != "MISE_PROFILE" {
            continue;
        }
        for e in v.to_string_lossy().split(',').map(str::trim) {
            let plain = !e.is_empty() && e != "." && e != ".." && !e.contains('/');
            if plain && !out.iter().any(|o| o == e) {
                out.push(e.to_string());
            }
        }
    }
    out
}

/// A directive's paths: a string, a table with `path`, or an array of either.
fn paths(v: Option<&Value>) -> Vec<&str> {
    match v {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Table(t)) => t.get("path").and_then(Value::as_str).into_iter().collect(),
        Some(Value::Array(a)) => a.iter().flat_map(|v| paths(Some(v))).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_names_of_a_directory_with_the_persons_environments() {
        let vars = [("MISE_ENV", "dev, ci,../x"), ("PATH", "/bin")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let envs = environments(vars.into_iter());
        assert_eq!(envs, ["dev", "ci"]);
        let names = config_names(&envs);
        for read in [
            "mise.toml",
            ".mise.local.toml",
            ".config/mise.local.toml",
            "mise.dev.toml",
            ".config/mise.ci.local.toml",
            "mise/config.dev.toml",
            ".config/mise/config.toml",
        ] {
            assert!(names.read.iter().any(|n| n == read), "{read}");
        }
        for protected in [
            ".mise",
            ".config/mise",
            "mise/conf.d",
            "mise/config.dev.toml",
            "mise.dev.toml",
            ".config/mise.dev.toml",
        ] {
            assert!(names.protect.iter().any(|n| n == protected), "{protected}");
        }
        assert!(!names.protect.iter().any(|n| n == "mise"));
    }

    #[test]
    fn what_its_shell_hook_sources_reads_and_puts_on_path() {
        let l = parse(
            "[env]\nA = \"1\"\n_.source = \"scripts/env.sh\"\n\
             _.file = [\".env.json\", { path = \"config/dev.yaml\", redact = true }]\n\
             _.path = [\"bin\", \"{{config_root}}/tools/bin\", \"/opt/x/bin\"]\n\
             _.python.venv = { path = \".venv\", create = true }\n",
        );
        assert_eq!(l.files, ["scripts/env.sh", ".env.json", "config/dev.yaml"]);
        assert_eq!(l.path_dirs, ["bin", "tools/bin", ".venv/bin"]);
    }

    #[test]
    fn a_source_table_and_nothing_from_what_does_not_parse() {
        let l = parse("[env]\n_ = { source = { path = \"./x.sh\" }, path = \"../out\" }\n");
        assert_eq!(l.files, ["x.sh"]);
        assert!(l.path_dirs.is_empty());
        assert_eq!(parse("[env\n"), HostLoads::default());
    }
}
