//! lefthook's configuration: the hook it installs in `.git/hooks` sources the `rc` file before
//! every hook, and lefthook runs the commands of every file `extends` names, at each of the
//! person's commits. Both are named in a configuration that is protected; their content is not.
//! Paths are relative to the project (or absolute inside it); `extends` is followed into the
//! files it names, a few levels deep.

use serde::Deserialize;

use super::{HostLoads, add};

/// How deep `extends` is followed (lefthook's own configurations are one or two levels).
const MAX_EXTENDS_DEPTH: usize = 4;

#[derive(Deserialize, Default)]
struct Config {
    rc: Option<String>,
    #[serde(default)]
    extends: Extends,
}

#[derive(Deserialize, Default)]
#[serde(untagged)]
enum Extends {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

/// What the lefthook configuration `name` (its file name says its format) loads; `read` gives
/// a project file's text (`None` when there is none). `root` is the project's absolute path,
/// for absolute paths inside it.
pub(super) fn parse(
    name: &str,
    text: &str,
    root: &str,
    read: &dyn Fn(&str) -> Option<String>,
) -> HostLoads {
    let mut out = HostLoads::default();
    follow(name, text, root, read, 0, &mut out);
    out
}

fn follow(
    name: &str,
    text: &str,
    root: &str,
    read: &dyn Fn(&str) -> Option<String>,
    depth: usize,
    out: &mut HostLoads,
) {
    let Some(config) = config_of(name, text) else {
        return;
    };
    let in_project = |p: &str| match p.strip_prefix(root) {
        Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/').to_owned(),
        _ => p.to_owned(),
    };
    if let Some(rc) = &config.rc {
        add(&in_project(rc), &mut out.files);
    }
    let extends = match config.extends {
        Extends::None => Vec::new(),
        Extends::One(p) => vec![p],
        Extends::Many(ps) => ps,
    };
    for p in extends {
        let before = out.files.len();
        add(&in_project(&p), &mut out.files);
        if out.files.len() == before || depth + 1 >= MAX_EXTENDS_DEPTH {
            continue;
        }
        let rel = out.files[before].clone();
        if let Some(text) = read(&rel) {
            follow(&rel, &text, root, read, depth + 1, out);
        }
    }
}

fn config_of(name: &str, text: &str) -> Option<Config> {
    let ext = name.rsplit('.').next().unwrap_or("");
    match ext {
        "yml" | "yaml" => {
            let mut options = serde_saphyr::Options::default();
            options.budget = Some(serde_saphyr::Budget::default());
            serde_saphyr::from_str_with_options(text, options).ok()
        }
        "toml" => toml::from_str(text).ok(),
        "json" | "jsonc" => serde_json::from_str(text).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_rc_and_what_it_extends_followed() {
        let read = |p: &str| match p {
            "ci/extra.yml" => Some("extends: [ci/more.toml]\n".to_owned()),
            "ci/more.toml" => Some("rc = \"/p/ci/more.rc\"\n".to_owned()),
            _ => None,
        };
        let l = parse(
            "lefthook.yml",
            "rc: /p/.lefthookrc\nextends:\n  - ci/extra.yml\npre-commit:\n  commands: {}\n",
            "/p",
            &read,
        );
        assert_eq!(
            l.files,
            [".lefthookrc", "ci/extra.yml", "ci/more.toml", "ci/more.rc"]
        );
    }

    #[test]
    fn one_extends_in_json_and_nothing_outside_or_unparsed() {
        let none = |_: &str| None;
        assert_eq!(
            parse(
                "lefthook.json",
                r#"{"extends": "x.yml", "rc": "~/.lefthookrc"}"#,
                "/p",
                &none
            )
            .files,
            ["x.yml"]
        );
        assert_eq!(
            parse(
                "lefthook.yml",
                "rc: /elsewhere/rc\nextends: ../up.yml\n",
                "/p",
                &none
            )
            .files,
            Vec::<String>::new()
        );
        assert_eq!(
            parse("lefthook.yml", "rc: [", "/p", &none),
            HostLoads::default()
        );
    }
}
