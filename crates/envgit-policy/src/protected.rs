//! Paths inside the project that the agent may not change.

use crate::glob::{Case, star_match};

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
    // Other version control systems' repository configuration, read by their every command:
    // Mercurial's `[hooks]` and `[extensions]` (Python it imports), and what a shared
    // repository reads through `sharedpath`; Sapling's; Jujutsu's (its pager, editor, aliases
    // and `fix.tools` are commands).
    ".hg/hgrc",
    ".hg/hgrc-not-shared",
    ".hg/sharedpath",
    ".sl/config",
    ".jj/repo/config.toml",
    ".husky",
    ".pre-commit-config.yaml",
    // Git hook managers installed on the host read their configuration from the project each
    // time the person runs git (the hook in `.git/hooks` only calls the manager): lefthook's
    // in each of its formats, the `-local` one it merges, the same two under `.config/`, and
    // its scripts folders; overcommit's, and its repository hooks.
    "lefthook.*",
    ".lefthook.*",
    "lefthook-local.*",
    ".lefthook-local.*",
    ".lefthook",
    ".lefthook-local",
    ".config/lefthook.yml",
    ".config/lefthook.yaml",
    ".config/lefthook.toml",
    ".config/lefthook.json",
    ".config/lefthook.jsonc",
    ".config/lefthook-local.yml",
    ".config/lefthook-local.yaml",
    ".config/lefthook-local.toml",
    ".config/lefthook-local.json",
    ".config/lefthook-local.jsonc",
    ".overcommit.yml",
    ".git-hooks",
    // mise's shell hook loads the project's configuration at every prompt once the person
    // trusted it, by its path, not its content (`_.source` runs a script, `[hooks]` commands):
    // its files at the root (`mise.toml`, `.mise.local.toml`, `mise.ENV.toml`, …), the
    // directories `.mise/`, `.config/mise/` (`config.toml`, `config.ENV.toml`, `conf.d/*.toml`),
    // `mise/`'s configuration (a project's `mise/` may hold its code), `.config/mise.toml`
    // and `.config/mise.local.toml` (the person's `MISE_ENV` names more there and in `mise/`:
    // `envgit`'s `host_loads` adds them).
    "mise.*",
    ".mise.*",
    ".mise",
    "mise/config.toml",
    "mise/config.local.toml",
    "mise/conf.d",
    ".config/mise",
    ".config/mise.toml",
    ".config/mise.local.toml",
    ".miserc.toml",
    ".config/miserc.toml",
    // Toolchain files the person's version managers read from the directory they are in
    // (and its parents), naming a directory whose programs they then run for the person's
    // `rustc`, `node`, …, as shell prompts do at every prompt (starship's `rustc --version`):
    // rustup's `path = "…"` toolchain, asdf's and mise's `path:` versions.
    "rust-toolchain",
    "rust-toolchain.toml",
    ".tool-versions",
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
    // Vim's and Neovim's `exrc` files: with `set exrc` Vim sources one from the directory it
    // starts in without asking (Neovim asks again when one changes).
    ".exrc",
    ".vimrc",
    ".gvimrc",
    ".nvimrc",
    ".nvim.lua",
    // Helix's workspace configuration (the language servers it starts); coding agents' project
    // configuration with the MCP servers, hooks, plugins and language servers they start, or
    // the commands they run after each edit (Roo Code, Kilo Code, Kiro, Amazon Q, Continue,
    // Junie, Qwen Code, Cline's and Windsurf's hooks, aider's lint and test commands, opencode,
    // Crush).
    ".helix",
    ".roo",
    ".kilocode/mcp.json",
    ".kiro",
    ".amazonq",
    ".continue",
    ".junie",
    ".qwen",
    ".clinerules/hooks",
    ".windsurf/hooks.json",
    ".aider.conf.yml",
    "opencode.json",
    "opencode.jsonc",
    ".opencode",
    "crush.json",
    ".crush.json",
    // A pattern (it holds `*`) names entries at the top of the project only: VS Code runs a
    // workspace file's tasks when it is opened. The guard lists the root to expand it.
    "*.code-workspace",
];

/// Names the tools that read them take from whatever directory they are opened or started in,
/// not only the project's root: VS Code's workspace trust covers the subfolders of a trusted
/// folder (its `tasks.json` runs on opening one), an agent started in a subfolder reads its
/// configuration there, Vim's `exrc` is the directory Vim starts in, rustup and asdf look in
/// the directory the person is in and each parent. Below the root (where
/// [`PROTECTED_PATHS`] has them) a step's change to one in a directory that was there before
/// the step is put back after it, as the snapshot's diff shows it.
pub const PROTECTED_NAMES_BELOW: &[&str] = &[
    "rust-toolchain",
    "rust-toolchain.toml",
    ".tool-versions",
    ".claude",
    ".codex",
    ".mcp.json",
    ".vscode",
    ".idea",
    ".devcontainer",
    ".devcontainer.json",
    ".cursor",
    ".gemini",
    ".zed",
    ".helix",
    ".roo",
    ".kiro",
    ".amazonq",
    ".continue",
    ".junie",
    ".qwen",
    ".aider.conf.yml",
    "opencode.json",
    "opencode.jsonc",
    ".opencode",
    "crush.json",
    ".crush.json",
    ".exrc",
    ".vimrc",
    ".gvimrc",
    ".nvimrc",
    ".nvim.lua",
];

/// For a project-relative path below the root, the first `DIR/NAME` on it whose `NAME` is in
/// [`PROTECTED_NAMES_BELOW`] (`packages/web/.vscode` for `packages/web/.vscode/tasks.json`),
/// with `DIR`; `None` when there is none, or only at the root (which [`PROTECTED_PATHS`]
/// covers).
pub fn protected_below(rel: &str) -> Option<(&str, &str)> {
    let mut start = 0;
    for part in rel.split('/') {
        let end = start + part.len();
        if PROTECTED_NAMES_BELOW.contains(&part) {
            return (start > 0).then(|| (&rel[..end], &rel[..start - 1]));
        }
        start = end + 1;
    }
    None
}

/// What the host runs or reads from a repository's own root (the entries of
/// [`PROTECTED_PATHS`] for husky, pre-commit, lefthook and overcommit, the `.githooks` a
/// `core.hooksPath` names by habit, and the other version control systems' repository
/// configuration): a repository nested in the project has them at its own root.
pub const REPOSITORY_ROOT_PATHS: &[&str] = &[
    ".husky",
    ".pre-commit-config.yaml",
    "lefthook.*",
    ".lefthook.*",
    "lefthook-local.*",
    ".lefthook-local.*",
    ".lefthook",
    ".lefthook-local",
    ".config/lefthook.*",
    ".config/lefthook-local.*",
    ".overcommit.yml",
    ".git-hooks",
    ".githooks",
    ".hg/hgrc",
    ".hg/hgrc-not-shared",
    ".hg/sharedpath",
    ".sl/config",
    ".jj/repo/config.toml",
];

/// What makes a directory a repository's root, for the version control systems of
/// [`REPOSITORY_ROOT_PATHS`]: git's `.git` (a directory, or a file naming one), Mercurial's
/// `.hg`, Sapling's `.sl`, Jujutsu's `.jj`.
pub const REPOSITORY_MARKERS: &[&str] = &[".git", ".hg", ".sl", ".jj"];

/// For a path relative to a repository's root, the entry of [`REPOSITORY_ROOT_PATHS`] it is
/// or lies below (`.husky` for `.husky/pre-commit`, `lefthook.yml` and `.hg/hgrc` themselves).
pub fn repository_root_entry(rel: &str) -> Option<&str> {
    REPOSITORY_ROOT_PATHS.iter().find_map(|p| {
        let depth = p.matches('/').count() + 1;
        let mut end = 0;
        for (i, part) in rel.split('/').enumerate() {
            end += part.len() + usize::from(i > 0);
            if i + 1 == depth {
                let candidate = &rel[..end];
                let matched = match p.split_once('/') {
                    Some((dir, name)) => candidate
                        .strip_prefix(dir)
                        .and_then(|r| r.strip_prefix('/'))
                        .is_some_and(|n| name_matches(name, n)),
                    None => name_matches(p, candidate),
                };
                return matched.then_some(candidate);
            }
        }
        None
    })
}

/// Whether a project-relative, `/`-separated, already-normalized path is a protected path or
/// lies beneath one. (The `core.hooksPath` directory is the caller's to add.)
pub fn is_protected(rel: &str) -> bool {
    let rel = rel.trim_start_matches("./");
    let top = rel.split('/').next().unwrap_or(rel);
    PROTECTED_PATHS.iter().any(|p| {
        if p.contains('*') {
            return name_matches(p, top);
        }
        rel.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Whether a single name matches a root-level protected pattern (`*` is any run of characters).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    star_match(pattern, name, Case::Exact)
}

#[cfg(test)]
mod tests {
    use super::{is_protected, name_matches, protected_below, repository_root_entry};

    #[test]
    fn entries_at_a_repositorys_root() {
        assert_eq!(repository_root_entry(".husky/pre-commit"), Some(".husky"));
        assert_eq!(repository_root_entry("lefthook.yml"), Some("lefthook.yml"));
        assert_eq!(
            repository_root_entry(".config/lefthook.yaml"),
            Some(".config/lefthook.yaml")
        );
        assert_eq!(repository_root_entry(".githooks/x/y"), Some(".githooks"));
        assert_eq!(repository_root_entry("src/.husky"), None);
        assert_eq!(repository_root_entry(".config/other.yml"), None);
        assert_eq!(repository_root_entry(".huskyx"), None);
        assert_eq!(repository_root_entry(".hg/hgrc"), Some(".hg/hgrc"));
        assert_eq!(
            repository_root_entry(".jj/repo/config.toml"),
            Some(".jj/repo/config.toml")
        );
        assert_eq!(repository_root_entry(".hg/store/data/a.i"), None);
    }

    /// The entries at a nested repository's root are those the root has protected (and
    /// `.githooks`, protected at the root only when `core.hooksPath` names it).
    #[test]
    fn repository_root_entries_are_protected_at_the_root() {
        for entry in super::REPOSITORY_ROOT_PATHS {
            let sample = entry.replace('*', "yml");
            assert!(
                *entry == ".githooks" || is_protected(&sample),
                "{entry} is a repository's, not in PROTECTED_PATHS"
            );
        }
    }

    #[test]
    fn names_below_the_root() {
        assert_eq!(
            protected_below("packages/web/.vscode/tasks.json"),
            Some(("packages/web/.vscode", "packages/web"))
        );
        assert_eq!(protected_below("a/.mcp.json"), Some(("a/.mcp.json", "a")));
        assert_eq!(protected_below(".vscode/tasks.json"), None);
        assert_eq!(protected_below("src/vscode/x"), None);
        assert_eq!(protected_below("a/.claudeX/y"), None);
        assert_eq!(
            protected_below("a/.vscode/b/.claude/x"),
            Some(("a/.vscode", "a"))
        );
    }

    /// What a protected-name pattern matches: `*` is any run (possibly empty), everything
    /// else literal and case-sensitive.
    #[test]
    fn name_patterns_match_exactly_these() {
        for (pattern, name, want) in [
            ("*.code-workspace", "a.code-workspace", true),
            ("*.code-workspace", ".code-workspace", true),
            ("*.code-workspace", "a.CODE-workspace", false),
            ("*.code-workspace", "a.code-workspace.txt", false),
            ("*", "", true),
            ("*", "anything", true),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("a*b*b", "abb", true),
            ("a*b*c", "acb", false),
            ("a**b", "ab", true),
            ("x", "x", true),
            ("x", "xx", false),
            ("?", "a", false),
            ("[a]", "a", false),
            ("[a]", "[a]", true),
            ("a\\*", "a\\b", true),
        ] {
            assert_eq!(name_matches(pattern, name), want, "{pattern:?} vs {name:?}");
        }
    }

    #[test]
    fn protected_paths_and_their_contents() {
        for (path, want) in [
            ("envgit.yaml", true),
            (".git/hooks", true),
            (".git/hooks/pre-commit", true),
            (".git/config", true),
            (".git/commondir", true),
            (".git/info/attributes", true),
            (".hg/hgrc", true),
            (".hg/store/data/a.i", false),
            (".jj/repo/config.toml", true),
            (".jj/repo/store/x", false),
            (".git/objects/ab", false),
            (".git/refs/heads/main", false),
            (".husky/pre-commit", true),
            (".cursor/mcp.json", true),
            (".claude/settings.json", true),
            (".claudeX", false),
            ("./.envrc", true),
            ("src/envgit.yaml", false),
            ("envgit.yaml.bak", false),
            ("evil.code-workspace", true),
            (".code-workspace", true),
            ("sub/evil.code-workspace", false),
            ("a.code-workspace.txt", false),
            (".devcontainer.json", true),
            (".devcontainer/devcontainer.json", true),
            ("lefthook.yml", true),
            (".lefthook.jsonc", true),
            ("lefthook-local.toml", true),
            (".lefthook/pre-commit/x.sh", true),
            (".config/lefthook-local.yml", true),
            (".config/nextest.toml", false),
            ("sub/lefthook.yml", false),
            (".overcommit.yml", true),
            (".git-hooks/pre_commit/x.rb", true),
            ("mise.toml", true),
            (".helix/languages.toml", true),
            (".roo/mcp.json", true),
            (".kiro/settings/mcp.json", true),
            ("opencode.json", true),
            ("src/opencode.json", false),
            (".crush.json", true),
            (".clinerules/hooks/PreToolUse", true),
            (".clinerules/style.md", false),
            (".windsurf/hooks.json", true),
            (".windsurf/rules/x.md", false),
            ("mise.dev.local.toml", true),
            (".mise.local.toml", true),
            (".mise/config.toml", true),
            ("mise/config.local.toml", true),
            ("mise/conf.d/x.toml", true),
            (".config/mise.local.toml", true),
            ("mise/src/main.rs", false),
            (".config/mise/conf.d/x.toml", true),
            (".config/mise.toml", true),
            (".config/miserc.toml", true),
        ] {
            assert_eq!(is_protected(path), want, "{path}");
        }
    }
}
