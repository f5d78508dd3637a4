//! Paths inside the project that the agent may not change (DESIGN §4).

/// Relative, `/`-separated. Read-only in the sandbox; `rewind` keeps their current version
/// unless `--restore-policy` is given. Directories protect everything beneath them.
pub const PROTECTED_PATHS: &[&str] = &[
    "envgit.yaml",
    // What the host's git reads as configuration or runs: its hooks, its config and the
    // files that extend or redirect it (a worktree's config, another repository's through
    // `commondir`, attributes and excludes in `info/` that name filters).
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    ".git/info",
    ".lfsconfig",
    ".husky",
    ".pre-commit-config.yaml",
    // Editor and agent configuration that runs commands when the project is opened.
    ".claude",
    ".codex",
    ".github/hooks",
    ".mcp.json",
    ".envrc",
    ".vscode",
    ".idea",
    ".devcontainer",
    ".devcontainer.json",
    ".cursor",
    ".gemini",
    ".zed",
];

/// Whether a project-relative, `/`-separated, already-normalized path is a protected path or
/// lies beneath one. (The `core.hooksPath` directory is the caller's to add.)
pub fn is_protected(rel: &str) -> bool {
    let rel = rel.trim_start_matches("./");
    PROTECTED_PATHS.iter().any(|p| {
        rel.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::is_protected;

    #[test]
    fn protected_paths_and_their_contents() {
        for (path, want) in [
            ("envgit.yaml", true),
            (".git/hooks", true),
            (".git/hooks/pre-commit", true),
            (".git/config", true),
            (".git/commondir", true),
            (".git/info/attributes", true),
            (".git/objects/ab", false),
            (".git/refs/heads/main", false),
            (".husky/pre-commit", true),
            (".cursor/mcp.json", true),
            (".claude/settings.json", true),
            (".claudeX", false),
            ("./.envrc", true),
            ("src/envgit.yaml", false),
            ("envgit.yaml.bak", false),
        ] {
            assert_eq!(is_protected(path), want, "{path}");
        }
    }
}
