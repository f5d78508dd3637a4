//! Paths whose content `envgit ui` never shows (page or export): what the sandbox masks in
//! the project — `.env` files, the credential files of `PROJECT_DENIES` — and the policy's
//! `filesystem.deny_read` entries that name project paths. Their names still appear in change
//! lists; their diffs say "masked" instead.

use envgit_policy::is_secret_name;
use envgit_policy::{Policy, name_matches};

pub(crate) struct Masks {
    /// `deny_read` entries relative to the project, `/`-separated.
    project_patterns: Vec<String>,
}

impl Masks {
    pub(crate) fn new(policy: Option<&Policy>, project_root: &std::path::Path) -> Masks {
        let root = project_root.display().to_string();
        let project_patterns = policy
            .map(|p| p.filesystem.deny_read.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|d| {
                if d.starts_with("~/") {
                    None
                } else if let Some(rest) = d.strip_prefix(&format!("{root}/")) {
                    Some(rest.to_owned())
                } else if d.starts_with('/') {
                    None
                } else {
                    Some(d.trim_start_matches("./").to_owned())
                }
            })
            .collect();
        Masks { project_patterns }
    }

    /// Is the content of this project-relative path never to be shown?
    pub(crate) fn is_masked(&self, path: &str) -> bool {
        let names: Vec<&str> = path.split('/').collect();
        if names.iter().any(|n| is_secret_name(n.as_bytes())) {
            return true;
        }
        self.project_patterns
            .iter()
            .any(|p| pattern_covers(p, &names))
    }
}

/// Does a `deny_read` pattern cover this path (or a directory above it)? `**/` matches any
/// number of directories, `*` any run within one name.
fn pattern_covers(pattern: &str, names: &[&str]) -> bool {
    let parts: Vec<&str> = pattern.trim_end_matches('/').split('/').collect();
    covers(&parts, names)
}

fn covers(parts: &[&str], names: &[&str]) -> bool {
    match parts.split_first() {
        // The pattern is used up: it named this path or a directory above it.
        None => true,
        Some((&"**", rest)) => (0..=names.len()).any(|skip| covers(rest, &names[skip..])),
        Some((part, rest)) => match names.split_first() {
            Some((name, tail)) => name_matches(part, name) && covers(rest, tail),
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_credentials_and_deny_read_are_masked() {
        let mut policy = Policy::default();
        policy.filesystem.deny_read = vec![
            "**/*.pem".into(),
            "secrets".into(),
            "~/.config/x".into(),
            "/proj/keys/*.key".into(),
        ];
        let m = Masks::new(Some(&policy), std::path::Path::new("/proj"));
        for p in [
            ".env",
            "app/.env.local",
            ".npmrc",
            "a/b/c.pem",
            "c.pem",
            "secrets/db.txt",
            "keys/a.key",
        ] {
            assert!(m.is_masked(p), "{p}");
        }
        for p in [
            ".env.example",
            "src/main.rs",
            "secretsx",
            "keys/a.txt",
            "x.pem.txt",
        ] {
            assert!(!m.is_masked(p), "{p}");
        }
    }
}
