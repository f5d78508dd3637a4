//! mise's project configuration: its shell hook runs `env._.source` scripts, reads `env._.file`
//! variables and puts `env._.path` (and a `env._.python.venv`'s `bin`) first on `PATH` at every
//! prompt in a trusted project. Paths are relative to the project (mise's `config_root`).

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
