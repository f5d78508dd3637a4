//! `.git/config` crosses key by key through an allow-list: keys git uses for ordinary work
//! (identity, branches, remotes' addresses) are applied to the host's config; every other
//! added, changed or removed key (`core.fsmonitor`, `core.hooksPath`, `include.path`,
//! `remote.*.uploadpack`, `credential.helper`, `alias.*`, ...) is dropped and listed.
//! Both files are read with `git config --file F --no-includes --list -z`, which never
//! follows an include and never runs anything.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Every value of every key, in file order; `None` is a key written without `=`.
pub type Entries = BTreeMap<String, Vec<Option<String>>>;

/// Whether a change of `key` (as `git config --list` prints it) may reach the host.
// One arm per family of keys reads as the list it is.
#[allow(clippy::match_like_matches_macro)]
fn allowed(key: &str) -> bool {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let (sub, name) = match rest.rsplit_once('.') {
        Some((s, n)) => (Some(s), n),
        None => (None, rest),
    };
    match (section, sub, name) {
        ("user" | "author" | "committer", None, _) => true,
        ("branch", Some(_), "remote" | "merge" | "rebase" | "description" | "pushremote") => true,
        (
            "remote",
            Some(_),
            "url" | "fetch" | "pushurl" | "tagopt" | "prune" | "push" | "mirror",
        ) => true,
        (
            "core",
            None,
            "repositoryformatversion"
            | "bare"
            | "filemode"
            | "logallrefupdates"
            | "ignorecase"
            | "symlinks"
            | "precomposeunicode",
        ) => true,
        ("submodule", Some(_), "url" | "active" | "branch") => true,
        ("init", None, "defaultbranch") | ("pull", None, "rebase" | "ff") => true,
        _ => false,
    }
}

/// Why a change of `key` from `before` to `after` may not reach the host, or `None`. Besides
/// the allow-list: the host's `git push` must go where it went before the step. An existing
/// remote's `url`, `pushurl`, `push` refspecs and `mirror` stay the host's (a changed
/// `pushurl` sends the user's next push, code and all, to the step's address; `mirror` makes
/// it delete what the remote has and the user does not), an initialised submodule's `url`
/// stays where `git submodule update` fetched from, and a branch may not be pointed at a
/// remote the step added (unless the step made the repository). A new remote, and a branch
/// following a remote the host had, arrive.
pub fn refusal(key: &str, before: &Entries, after: &Entries) -> Option<&'static str> {
    if !allowed(key) {
        return Some("the key is outside the config allow-list");
    }
    let (section, rest) = key.split_once('.')?;
    let (sub, name) = rest.rsplit_once('.')?;
    let had_remote = |remote: &str| {
        let prefix = format!("remote.{remote}.");
        before.keys().any(|k| k.starts_with(&prefix))
    };
    const PUSH: &str = "it changes where the host's `git push` sends, or what, for a remote the \
                        repository had before the step (or points a branch at a remote the step \
                        added); if that is wanted, make the change on the host (`git remote \
                        set-url`, `git config`)";
    const SUBMODULE: &str = "it changes where the host's git fetches an initialised submodule \
                             from; if that is wanted, make the change on the host (`git config`)";
    match (section, name) {
        ("remote", "url" | "pushurl" | "push" | "mirror") if had_remote(sub) => Some(PUSH),
        ("submodule", "url") => {
            let prefix = format!("submodule.{sub}.");
            before
                .keys()
                .any(|k| k.starts_with(&prefix))
                .then_some(SUBMODULE)
        }
        // In a repository the step made (a clone), its branches and remotes are its own.
        ("branch", "remote" | "pushremote") => {
            let aimed_elsewhere = after
                .get(key)
                .into_iter()
                .flatten()
                .flatten()
                .any(|remote| remote != "." && !had_remote(remote));
            (!before.is_empty() && aimed_elsewhere).then_some(PUSH)
        }
        _ => None,
    }
}

fn git() -> Command {
    let mut c = Command::new("git");
    // Nothing but the named file is read.
    c.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_CONFIG")
        .env_remove("GIT_CONFIG_PARAMETERS")
        .env_remove("GIT_CONFIG_COUNT");
    c
}

/// Why git could not read or write a config file: git's own words, or why it did not run.
#[derive(Debug, thiserror::Error)]
pub enum GitConfigError {
    #[error("running git: {0}")]
    Spawn(std::io::Error),
    /// git refused (its stderr, trimmed).
    #[error("{0}")]
    Git(String),
}

impl GitConfigError {
    fn from_stderr(stderr: &[u8]) -> GitConfigError {
        GitConfigError::Git(String::from_utf8_lossy(stderr).trim().to_string())
    }
}

/// Parse a config file's own entries from its bytes (given to git on stdin, so no path the
/// step could have turned into a link is ever opened); `Err` names why git could not read it.
pub fn read(text: &[u8]) -> Result<Entries, GitConfigError> {
    use std::io::Write;
    let mut child = git()
        .args(["config", "--no-includes", "--list", "-z", "--file", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(GitConfigError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        // A config git rejects may close stdin early; its exit status says why.
        let _ = stdin.write_all(text);
    }
    let out = child.wait_with_output().map_err(GitConfigError::Spawn)?;
    if !out.status.success() {
        return Err(GitConfigError::from_stderr(&out.stderr));
    }
    Ok(parse(&out.stdout))
}

/// Parse `git config --list -z` output.
pub fn parse(text: &[u8]) -> Entries {
    let mut e = Entries::new();
    for item in text.split(|&b| b == 0).filter(|i| !i.is_empty()) {
        let item = String::from_utf8_lossy(item);
        let (k, v) = match item.split_once('\n') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (item.to_string(), None),
        };
        e.entry(k).or_default().push(v);
    }
    e
}

/// Keys whose values differ between `before` and `after`.
pub fn changed(before: &Entries, after: &Entries) -> Vec<String> {
    let mut keys: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Give `key` in the host's config `values` (none: remove it).
pub fn apply(host: &Path, key: &str, values: &[Option<String>]) -> Result<(), GitConfigError> {
    let run = |args: &[&str]| -> Result<std::process::Output, GitConfigError> {
        git()
            .arg("config")
            .arg("--file")
            .arg(host)
            .args(args)
            .output()
            .map_err(GitConfigError::Spawn)
    };
    let out = run(&["--unset-all", key])?;
    // 5: the key was not there.
    if !out.status.success() && out.status.code() != Some(5) {
        return Err(GitConfigError::from_stderr(&out.stderr));
    }
    for v in values {
        let out = run(&["--add", key, v.as_deref().unwrap_or("true")])?;
        if !out.status.success() {
            return Err(GitConfigError::from_stderr(&out.stderr));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&str, &str)]) -> Entries {
        let mut e = Entries::new();
        for (k, v) in pairs {
            e.entry((*k).to_owned())
                .or_default()
                .push(Some((*v).to_owned()));
        }
        e
    }

    #[test]
    fn an_existing_remotes_push_target_stays_the_hosts() {
        let before = entries(&[
            ("remote.origin.url", "https://host.example/r.git"),
            ("branch.main.remote", "origin"),
        ]);
        let after = entries(&[
            ("remote.origin.url", "https://other.example/r.git"),
            ("remote.origin.pushurl", "https://other.example/r.git"),
            ("remote.origin.mirror", "true"),
            ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
            ("remote.fork.url", "https://other.example/r.git"),
            ("branch.main.remote", "origin"),
            ("branch.main.pushremote", "fork"),
            ("branch.topic.remote", "origin"),
            ("branch.local.remote", "."),
        ]);
        let mut before = before;
        before.insert(
            "submodule.lib.url".into(),
            vec![Some("https://host.example/l".into())],
        );
        let mut after = after;
        after.insert(
            "submodule.lib.url".into(),
            vec![Some("https://other.example/l".into())],
        );
        after.insert(
            "submodule.new.url".into(),
            vec![Some("https://other.example/n".into())],
        );
        assert!(refusal("submodule.lib.url", &before, &after).is_some());
        assert_eq!(refusal("submodule.new.url", &before, &after), None);
        for k in [
            "remote.origin.url",
            "remote.origin.pushurl",
            "remote.origin.mirror",
            "branch.main.pushremote",
        ] {
            assert!(refusal(k, &before, &after).is_some(), "{k}");
        }
        for k in [
            "remote.origin.fetch",
            "remote.fork.url",
            "branch.topic.remote",
            "branch.local.remote",
        ] {
            assert_eq!(refusal(k, &before, &after), None, "{k}");
        }
        let cloned = entries(&[("remote.origin.url", "u"), ("branch.main.remote", "origin")]);
        assert_eq!(
            refusal("branch.main.remote", &Entries::new(), &cloned),
            None
        );
        assert_eq!(
            refusal("core.fsmonitor", &before, &after),
            Some("the key is outside the config allow-list")
        );
    }

    #[test]
    fn the_allow_list() {
        for k in [
            "user.name",
            "branch.main.remote",
            "remote.origin.url",
            "remote.a.b.fetch",
            "core.bare",
            "submodule.x.url",
            "init.defaultbranch",
        ] {
            assert!(allowed(k), "{k}");
        }
        for k in [
            "core.fsmonitor",
            "core.hookspath",
            "core.sshcommand",
            "core.pager",
            "include.path",
            "includeif.gitdir:/x.path",
            "remote.origin.uploadpack",
            "remote.origin.receivepack",
            "remote.origin.vcs",
            "credential.helper",
            "alias.st",
            "submodule.x.update",
            "extensions.worktreeconfig",
            "filter.lfs.smudge",
            "diff.x.textconv",
            "user.x.name",
        ] {
            assert!(!allowed(k), "{k}");
        }
    }

    #[test]
    fn parse_and_diff() {
        let a = parse(b"user.name\nA\0core.bare\nfalse\0x.flag\0");
        let b = parse(b"user.name\nB\0core.bare\nfalse\0core.fsmonitor\nsh x\0");
        assert_eq!(a["x.flag"], vec![None]);
        assert_eq!(changed(&a, &b), ["core.fsmonitor", "user.name", "x.flag"]);
    }
}
