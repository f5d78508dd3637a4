//! What the project's `.envrc` has direnv load at the person's prompt. `.envrc` is protected,
//! and direnv asks the person to allow it again whenever it changes; but the files it sources
//! are read afresh at every prompt in the project, allowed or not, and so is what a step puts
//! in the directories it adds to `PATH`. So the files `.envrc` names are protected like it, and
//! its `PATH` directories are checked after each step like the person's own
//! ([`crate::path_shadow`]).
//!
//! `.envrc` is bash: this reads each line's words, wherever the line is (a branch not taken
//! counts), and takes a path only when it is written out in the project (`$PWD/x` and `./x`
//! are; any other variable is not).

use std::path::{Component, Path};

use crate::nofollow::read_nofollow;

/// The project paths (relative, '/'-separated) `.envrc` has direnv load.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct DirenvLoads {
    /// Files its shell code reads, and nix-direnv's cache of the shell it built
    /// (`.direnv/*.rc`, sourced at the prompt while fresh).
    pub files: Vec<String>,
    /// Directories it puts first on `PATH`.
    pub path_dirs: Vec<String>,
}

/// What `root/.envrc` loads; nothing when there is none. A secret it loads (`dotenv`'s
/// `.env`) that exists is left out: the sandbox masks it, so a step cannot write it, and its
/// content stays out of the pre-step copy.
pub(crate) fn loads(root: &Path) -> DirenvLoads {
    let Ok(bytes) = read_nofollow(&root.join(".envrc")) else {
        return DirenvLoads::default();
    };
    let mut loads = parse(&String::from_utf8_lossy(&bytes), |rel| {
        root.join(rel).is_dir()
    });
    loads.files.retain(|f| {
        let name = f.rsplit('/').next().unwrap_or(f);
        !(envgit_policy::is_secret_name(name.as_bytes()) && root.join(f).symlink_metadata().is_ok())
    });
    loads
}

/// `.envrc`'s text; `is_dir` says whether a project path is a directory (`source_env DIR`
/// reads `DIR/.envrc`).
fn parse(text: &str, is_dir: impl Fn(&str) -> bool) -> DirenvLoads {
    let mut out = DirenvLoads::default();
    let file = |p: &str, out: &mut DirenvLoads| {
        if let Some(rel) = in_project(p)
            && !out.files.contains(&rel)
        {
            out.files.push(rel);
        }
    };
    for line in text.lines() {
        // A line is one command here; `a && b` and `a; b` are split too.
        for command in line.split(['&', ';', '|']) {
            let words = shlex::split(command.trim())
                .unwrap_or_else(|| command.split_whitespace().map(str::to_owned).collect());
            let mut words = words.iter().map(String::as_str);
            let Some(first) = words.next() else { continue };
            if first.starts_with('#') {
                break;
            }
            let args: Vec<&str> = words.filter(|w| !w.starts_with('-')).collect();
            match first {
                "source" | "." | "source_env" | "source_env_if_exists" => {
                    let Some(rel) = args.first().and_then(|a| in_project(a)) else {
                        continue;
                    };
                    if first.starts_with("source_env") && (rel.is_empty() || is_dir(&rel)) {
                        file(&join(&rel, ".envrc"), &mut out);
                    } else {
                        file(&rel, &mut out);
                    }
                }
                "dotenv" | "dotenv_if_exists" => {
                    file(args.first().copied().unwrap_or(".env"), &mut out)
                }
                "use" | "use_flake" | "use_nix" | "use_devenv" => {
                    let (what, rest) = match first.strip_prefix("use_") {
                        Some(what) => (what, &args[..]),
                        None => match args.split_first() {
                            Some((what, rest)) => (*what, rest),
                            None => continue,
                        },
                    };
                    let named: &[&str] = match what {
                        "flake" => {
                            let dir = rest
                                .first()
                                .map(|r| r.trim_start_matches("path:"))
                                .map(|r| r.split('#').next().unwrap_or(""))
                                .filter(|d| d.starts_with('.') || d.starts_with('/'))
                                .unwrap_or(".");
                            file(&join(dir, "flake.nix"), &mut out);
                            file(&join(dir, "flake.lock"), &mut out);
                            &[]
                        }
                        "nix" => {
                            let files: Vec<&&str> =
                                rest.iter().filter(|a| a.ends_with(".nix")).collect();
                            if files.is_empty() {
                                &["shell.nix", "default.nix"]
                            } else {
                                for f in files {
                                    file(f, &mut out);
                                }
                                &[]
                            }
                        }
                        "devenv" => &["devenv.nix", "devenv.yaml", "devenv.lock"],
                        _ => continue,
                    };
                    for f in named {
                        file(f, &mut out);
                    }
                    // nix-direnv keeps the shell it built as `.direnv/*.rc`, sourced at the
                    // prompt while newer than the files above.
                    file(".direnv", &mut out);
                }
                "PATH_add" => {
                    for a in args {
                        add_dir(a, &mut out.path_dirs);
                    }
                }
                "path_add" => {
                    if let Some((var, dirs)) = args.split_first()
                        && *var == "PATH"
                    {
                        for a in dirs {
                            add_dir(a, &mut out.path_dirs);
                        }
                    }
                }
                "load_prefix" => {
                    if let Some(a) = args.first() {
                        add_dir(&join(a, "bin"), &mut out.path_dirs);
                    }
                }
                "layout" if args.first() == Some(&"node") => {
                    add_dir("node_modules/.bin", &mut out.path_dirs);
                }
                _ => {}
            }
        }
    }
    out
}

fn add_dir(p: &str, dirs: &mut Vec<String>) {
    if let Some(rel) = in_project(p)
        && !dirs.contains(&rel)
    {
        dirs.push(rel);
    }
}

fn join(dir: &str, name: &str) -> String {
    let dir = dir.trim_end_matches('/');
    if dir.is_empty() || dir == "." {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// `p` as written in `.envrc` (relative to the project root, or `$PWD`-based) as a project
/// path: '/'-separated, no `.` or `..`; `None` for anything else (another variable, an
/// absolute path, a path out of the project). The root itself is `""`.
fn in_project(p: &str) -> Option<String> {
    let p = ["${PWD}/", "$PWD/", "\"$PWD\"/"]
        .iter()
        .find_map(|pre| p.strip_prefix(pre))
        .unwrap_or(p);
    if p.contains('$') || p.contains('`') || p.starts_with('/') || p.starts_with('~') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in Path::new(p).components() {
        match c {
            Component::Normal(n) => parts.push(n.to_str()?),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> DirenvLoads {
        parse(text, |rel| rel == "sub")
    }

    #[test]
    fn sourced_files_and_the_shells_nix_builds_are_what_it_loads() {
        let l = of(
            "source_env tools/dev.sh\nsource_env sub\nsource_env_if_exists .envrc.local\n\
                    dotenv\ndotenv_if_exists config/.env.dev\n. ./scripts/env.sh\n\
                    use flake . --impure\nuse nix shell-dev.nix\nuse_devenv\n",
        );
        assert_eq!(
            l.files,
            [
                "tools/dev.sh",
                "sub/.envrc",
                ".envrc.local",
                ".env",
                "config/.env.dev",
                "scripts/env.sh",
                "flake.nix",
                "flake.lock",
                ".direnv",
                "shell-dev.nix",
                "devenv.nix",
                "devenv.yaml",
                "devenv.lock",
            ]
        );
    }

    #[test]
    fn a_flake_elsewhere_in_the_project_and_nix_by_default() {
        assert_eq!(
            of("use flake ./nix#dev").files,
            ["nix/flake.nix", "nix/flake.lock", ".direnv"]
        );
        assert_eq!(
            of("use flake github:owner/repo").files,
            ["flake.nix", "flake.lock", ".direnv"]
        );
        assert_eq!(of("use nix").files, ["shell.nix", "default.nix", ".direnv"]);
    }

    #[test]
    fn the_directories_it_puts_on_path() {
        let l = of(
            "PATH_add bin\nPATH_add \"$PWD/scripts\" tools/bin\npath_add PATH ./x\n\
                    path_add PYTHONPATH src\nload_prefix vendor\nlayout node\n",
        );
        assert_eq!(
            l.path_dirs,
            [
                "bin",
                "scripts",
                "tools/bin",
                "x",
                "vendor/bin",
                "node_modules/.bin"
            ]
        );
    }

    #[test]
    fn only_paths_written_out_in_the_project() {
        let l = of(
            "# source_env commented.sh\nsource_env $HOME/x.sh\nsource_env ../up.sh\n\
                    source_env /etc/profile\nPATH_add ~/bin\nexport A=1 && source_env a.sh\n",
        );
        assert_eq!(l.files, ["a.sh"]);
        assert!(l.path_dirs.is_empty());
    }
}
