//! The protected paths the person's own settings add, each with the setting that names it:
//! their environment's variables ([`crate::host_loads`]) and their git configuration's keys
//! ([`crate::git_host_config`]). `envgit doctor` lists them; a put-back of one says why.

use std::path::Path;

/// Each project path (relative) the person's settings name, with what names it
/// (`NODE_OPTIONS`, `git's core.hookspath`).
pub(crate) fn list(root: &Path) -> Vec<(String, String)> {
    let mut named = crate::host_loads::named_by_environment(root);
    for (path, key) in crate::git_host_config::of(root) {
        if !named.iter().any(|(p, _)| *p == path) {
            named.push((path, format!("git's {key}")));
        }
    }
    named
}

/// Why `path` (a protected path put back) is protected, when a setting of the person's names
/// it or a directory above it: `NODE_OPTIONS names it`.
pub(crate) fn why(named: &[(String, String)], path: &str) -> Option<String> {
    named
        .iter()
        .find(|(p, _)| {
            path == p
                || path
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .map(|(_, by)| format!("{by} names it"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_or_one_below_it_is_named_by_its_setting() {
        let named = vec![
            (".pnp.cjs".to_string(), "NODE_OPTIONS".to_string()),
            (".githooks".to_string(), "git's core.hookspath".to_string()),
        ];
        assert_eq!(
            why(&named, ".pnp.cjs").as_deref(),
            Some("NODE_OPTIONS names it")
        );
        assert_eq!(
            why(&named, ".githooks/pre-commit").as_deref(),
            Some("git's core.hookspath names it")
        );
        assert_eq!(why(&named, ".githooksx"), None);
        assert_eq!(why(&named, ".git/hooks"), None);
    }
}
