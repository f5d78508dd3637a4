//! What is a secret by its name alone, wherever it is in the project: `.env` files and the
//! registry and direnv credential files. The sandbox masks them at every step (found by name
//! at any depth), `envgit codex`'s `fs/*` calls and the hooks refuse them by name, and
//! `envgit ui` never shows their content: one definition, so no path can disagree.

/// Unreadable wherever they are in the project (at any depth, excluded directories
/// included), besides `.env` files: registry credentials and direnv files.
pub const PROJECT_DENIES: &[&str] = &[".npmrc", ".pypirc", ".envrc"];

/// `.env` and `.env.*`, and Cloudflare Wrangler's `.dev.vars` and `.dev.vars.*` (its local
/// secrets, read as `.env` is), except the example, sample and template files. Bytes, since a
/// file name need not be UTF-8 (`.env.\xff` is an env file).
pub fn is_env_file(name: &[u8]) -> bool {
    [&b".env"[..], b".dev.vars"].iter().any(|stem| {
        name == *stem
            || name
                .strip_prefix(*stem)
                .and_then(|rest| rest.strip_prefix(b"."))
                .is_some_and(|rest| !matches!(rest, b"example" | b"sample" | b"template"))
    })
}

/// A file name that is a secret wherever it is: a `.env` file or one of [`PROJECT_DENIES`].
pub fn is_secret_name(name: &[u8]) -> bool {
    is_env_file(name) || PROJECT_DENIES.iter().any(|d| d.as_bytes() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names() {
        for yes in [
            ".env",
            ".env.local",
            ".env.production",
            ".npmrc",
            ".pypirc",
            ".envrc",
            ".dev.vars",
            ".dev.vars.staging",
        ] {
            assert!(is_secret_name(yes.as_bytes()), "{yes}");
        }
        assert!(is_env_file(b".env.\xff"));
        for no in [
            ".env.example",
            ".env.sample",
            ".env.template",
            ".dev.vars.example",
            ".dev.varsx",
            "env",
            ".environment",
            "npmrc",
        ] {
            assert!(!is_secret_name(no.as_bytes()), "{no}");
        }
    }
}
