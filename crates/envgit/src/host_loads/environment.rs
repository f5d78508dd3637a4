//! What the person's own environment has their programs load or run from the project: a
//! variable naming a project file (`BASH_ENV=$PWD/.bashenv`, Yarn's
//! `NODE_OPTIONS=--require $PWD/.pnp.cjs`, `LD_PRELOAD`, `GIT_CONFIG_GLOBAL`, an `EDITOR` of
//! the project's) makes every shell, node, program or git the person starts run that file. A
//! step that changed it would run on the host at their next command, so it is protected like
//! the configuration of a tool they trusted once. Read from envgit's own environment: the
//! person's, as their shell handed it over (a variable exported later is not seen).

use std::ffi::OsStr;
use std::path::Path;

/// Variables whose value is one file (or directory) that is read as code or as a
/// configuration that runs commands (git's aliases and pager, npm's `script-shell`, AWS's
/// `credential_process`).
const FILE_VARS: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "PYTHONSTARTUP",
    "INPUTRC",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG",
    "NPM_CONFIG_USERCONFIG",
    "npm_config_userconfig",
    "NPM_CONFIG_GLOBALCONFIG",
    "npm_config_globalconfig",
    "AWS_CONFIG_FILE",
    "WGETRC",
    // A directory: what `git init` and `git clone` copy into every new repository, hooks
    // included.
    "GIT_TEMPLATE_DIR",
];

/// Variables whose value is a list of such files: the dynamic loader's (`:` or space between
/// entries) and kubectl's (`:`; a kubeconfig's `exec` runs a program).
const LIST_VARS: &[&str] = &["LD_PRELOAD", "LD_AUDIT", "KUBECONFIG"];

/// Variables whose value is a command line the person's tools run: its program.
const COMMAND_VARS: &[&str] = &[
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PAGER",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "GIT_EXTERNAL_DIFF",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
];

/// zsh's start-up files, read from `$ZDOTDIR`.
const ZSH_FILES: &[&str] = &[".zshenv", ".zprofile", ".zshrc", ".zlogin", ".zlogout"];

/// node's options that load a module before the program: their argument, when it is a path.
const NODE_LOADS: &[&str] = &[
    "--require",
    "-r",
    "--import",
    "--loader",
    "--experimental-loader",
];

/// Whether `var` names a shell's start-up file, which runs what it sources too.
pub(super) fn is_shell_start_up(var: &str) -> bool {
    matches!(var, "BASH_ENV" | "ENV" | "ZDOTDIR")
}

/// Each project file (relative to `root`) that `vars` have programs load or run, with the
/// first variable that names it. A relative path is taken as relative to the root (where the
/// person most often starts them).
pub(super) fn named<K: AsRef<OsStr>, V: AsRef<OsStr>>(
    root: &Path,
    vars: impl IntoIterator<Item = (K, V)>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (key, value) in vars {
        let (Some(key), Some(value)) = (key.as_ref().to_str(), value.as_ref().to_str()) else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        let mut add = |p: &str| {
            if let Some(rel) = in_project(root, p)
                && !out.iter().any(|(r, _)| *r == rel)
            {
                out.push((rel, key.to_string()));
            }
        };
        // A program or library named without a `/` is looked for elsewhere (`PATH`, the
        // loader's directories), which other checks cover.
        let mut add_named = |p: &str| {
            if p.contains('/') {
                add(p);
            }
        };
        if FILE_VARS.contains(&key) {
            add(value);
        } else if LIST_VARS.contains(&key) {
            value.split([':', ' ']).for_each(&mut add_named);
        } else if COMMAND_VARS.contains(&key) {
            // Its program and the scripts it is given (`LESSOPEN='|/path/lesspipe %s'`,
            // `EDITOR='sh ./tools/edit.sh'`).
            crate::project_path::path_words(value)
                .into_iter()
                .for_each(&mut add_named);
        } else if key == "ZDOTDIR" {
            for f in ZSH_FILES {
                add(&format!("{}/{f}", value.trim_end_matches('/')));
            }
        } else if key == "NODE_OPTIONS" {
            node_loads(value).into_iter().for_each(&mut add);
        } else if key == "RUBYOPT" {
            ruby_requires(value).into_iter().for_each(&mut add);
        }
    }
    out
}

/// The paths among the modules `NODE_OPTIONS` has node load first (`--require X`, `-r X`,
/// `--import=X`, …): a bare module name is found in `node_modules`, not here.
fn node_loads(options: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(word) = words.next() {
        let arg = match word.split_once('=') {
            Some((flag, arg)) if NODE_LOADS.contains(&flag) => Some(arg),
            _ if NODE_LOADS.contains(&word) => words.next(),
            _ => None,
        };
        if let Some(arg) = arg.map(|a| a.trim_matches(['"', '\'']))
            && is_path(arg)
        {
            out.push(arg.strip_prefix("file://").unwrap_or(arg));
        }
    }
    out
}

/// The paths `RUBYOPT` has ruby require first (`-r./x`, `-r /abs/x.rb`).
fn ruby_requires(options: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(word) = words.next() {
        let arg = match word.strip_prefix("-r") {
            Some("") => words.next(),
            Some(arg) => Some(arg),
            None => None,
        };
        if let Some(arg) = arg.filter(|a| is_path(a)) {
            out.push(arg);
        }
    }
    out
}

fn is_path(arg: &str) -> bool {
    arg.starts_with(['/', '.']) || arg.starts_with("file://")
}

/// `p` (absolute, or relative to `root`) as a project path.
fn in_project(root: &Path, p: &str) -> Option<String> {
    crate::project_path::of(root, &root.join(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(vars: &[(&str, &str)]) -> Vec<String> {
        named(Path::new("/p/proj"), vars.iter().copied())
            .into_iter()
            .map(|(rel, _)| rel)
            .collect()
    }

    #[test]
    fn each_kind_of_variable_names_its_project_files() {
        assert_eq!(
            files(&[
                ("BASH_ENV", "/p/proj/.bashenv"),
                (
                    "LD_PRELOAD",
                    "/usr/lib/libfoo.so /p/proj/build/libhook.so:libc.so.6"
                ),
                (
                    "NODE_OPTIONS",
                    "--max-old-space-size=4096 --require /p/proj/.pnp.cjs"
                ),
                ("EDITOR", "/p/proj/scripts/edit.sh --wait"),
                ("LESSOPEN", "|/p/proj/bin/lesspipe %s"),
                ("ZDOTDIR", "/p/proj/dotfiles/"),
                ("RUBYOPT", "-W0 -r./boot.rb"),
                ("GIT_CONFIG_GLOBAL", "/p/proj/tools/../tools/gitconfig"),
                ("KUBECONFIG", "/home/me/.kube/config:/p/proj/kube.yaml"),
                ("GIT_TEMPLATE_DIR", "/p/proj/git-templates/"),
            ]),
            [
                ".bashenv",
                "build/libhook.so",
                ".pnp.cjs",
                "scripts/edit.sh",
                "bin/lesspipe",
                "dotfiles/.zshenv",
                "dotfiles/.zprofile",
                "dotfiles/.zshrc",
                "dotfiles/.zlogin",
                "dotfiles/.zlogout",
                "boot.rb",
                "tools/gitconfig",
                "kube.yaml",
                "git-templates",
            ]
        );
    }

    #[test]
    fn what_is_not_a_project_path_is_left_alone() {
        assert!(
            files(&[
                ("EDITOR", "vim"),
                ("PAGER", "less -R"),
                ("NODE_OPTIONS", "--require ts-node/register --import=tsx"),
                ("RUBYOPT", "-rbundler/setup"),
                ("BASH_ENV", "/p/project-other/.bashenv"),
                ("ENV", "/p/proj/../x"),
                ("GIT_CONFIG_GLOBAL", "/p/proj"),
                ("HOME", "/p/proj/home/.bashrc"),
                ("LD_PRELOAD", ""),
            ])
            .is_empty()
        );
    }

    #[test]
    fn node_options_forms() {
        assert_eq!(
            node_loads("-r ./a.js --import=file:///p/b.mjs --loader '/c.mjs' --inspect"),
            ["./a.js", "/p/b.mjs", "/c.mjs"]
        );
    }
}
