//! `shell:` rules: command-line prefixes refused (or asked about) before a command starts. A
//! courtesy that gives an early, readable refusal; the gate is what actually stops a request.

use crate::schema::{Policy, ShellAction};

/// A shell rule that matched a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellMatch {
    /// `shell.deny` or `shell.ask`.
    pub rule: &'static str,
    pub action: ShellAction,
    /// The prefix as written in the policy.
    pub prefix: String,
}

/// The command line a person would read: `sh -c 'X'` and `bash -lc 'X'` are judged on X.
pub fn command_line(argv: &[String]) -> String {
    let is_shell = argv.first().is_some_and(|a| {
        let base = a.rsplit('/').next().unwrap_or(a);
        matches!(base, "sh" | "bash" | "dash" | "zsh")
    });
    if is_shell && argv.len() >= 3 && argv[1].starts_with('-') && argv[1].contains('c') {
        return argv[2].clone();
    }
    argv.join(" ")
}

/// Words of each simple command in `line` (split at `;`, `&&`, `||`, `|`, newlines).
fn segments(line: &str) -> Vec<Vec<&str>> {
    line.split(['\n', ';', '|', '&'])
        .map(|s| s.split_whitespace().collect::<Vec<_>>())
        .filter(|w| !w.is_empty())
        .collect()
}

impl Policy {
    /// The first rule whose prefix starts one of the simple commands of `argv`'s command line,
    /// word by word (`git push` matches `git push origin main`, not `git pushx`).
    pub fn check_command(&self, argv: &[String]) -> Option<ShellMatch> {
        let line = command_line(argv);
        let segs = segments(&line);
        for rule in &self.shell {
            for prefix in &rule.prefixes {
                let want: Vec<&str> = prefix.split_whitespace().collect();
                if want.is_empty() {
                    continue;
                }
                // Skip leading `VAR=value` assignments and `env`, `sudo`, `exec`, `command`.
                let hit = segs.iter().any(|words| {
                    let start = words
                        .iter()
                        .position(|w| {
                            !w.contains('=') && !matches!(*w, "env" | "sudo" | "exec" | "command")
                        })
                        .unwrap_or(words.len());
                    let rest = &words[start..];
                    rest.len() >= want.len() && rest[..want.len()] == want[..]
                });
                if hit {
                    return Some(ShellMatch {
                        rule: match rule.action {
                            ShellAction::Deny => "shell.deny",
                            ShellAction::Ask => "shell.ask",
                        },
                        action: rule.action,
                        prefix: prefix.clone(),
                    });
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::parse(
            "envgit.yaml",
            "version: 1\nshell:\n  - deny: [\"git push\", \"npm publish\"]\n",
        )
        .unwrap()
    }

    #[test]
    fn table() {
        let p = policy();
        let argv = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: &[(&[&str], bool)] = &[
            (&["git", "push", "origin", "main"], true),
            (&["git", "pushx"], false),
            (&["git", "fetch"], false),
            (&["sh", "-c", "git add . && git push"], true),
            (&["bash", "-lc", "FOO=1 git push"], true),
            (&["sh", "-c", "echo 'git push'"], false),
            (&["npm", "publish", "--dry-run"], true),
            (&["ls"], false),
        ];
        for (a, want) in cases {
            assert_eq!(p.check_command(&argv(a)).is_some(), *want, "{a:?}");
        }
        assert_eq!(
            p.check_command(&argv(&["git", "push"])).unwrap().rule,
            "shell.deny"
        );
    }
}
