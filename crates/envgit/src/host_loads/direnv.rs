//! `.envrc`, which direnv runs at every prompt in the project once the person allowed it. It
//! is bash: this reads each line's words, wherever the line is (a branch not taken counts),
//! and takes a path only when it is written out in the project (`$PWD/x` and `./x` are; any
//! other variable is not).

use super::{HostLoads, add, in_project, join};

/// `.envrc`'s text; `is_dir` says whether a project path is a directory (`source_env DIR`
/// reads `DIR/.envrc`).
pub(super) fn parse(text: &str, is_dir: impl Fn(&str) -> bool) -> HostLoads {
    let mut out = HostLoads::default();
    let file = |p: &str, out: &mut HostLoads| add(p, &mut out.files);
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
                        add(a, &mut out.path_dirs);
                    }
                }
                "path_add" => {
                    if let Some((var, dirs)) = args.split_first()
                        && *var == "PATH"
                    {
                        for a in dirs {
                            add(a, &mut out.path_dirs);
                        }
                    }
                }
                "load_prefix" => {
                    if let Some(a) = args.first() {
                        add(&join(a, "bin"), &mut out.path_dirs);
                    }
                }
                "layout" if args.first() == Some(&"node") => {
                    add("node_modules/.bin", &mut out.path_dirs);
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> HostLoads {
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
