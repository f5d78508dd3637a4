//! The run's layer over the project's `.git` ("the host's git receives data, never
//! code"): opened before the sandbox starts, mounted inside as an overlay, imported at the end
//! of every step before the put-back and the snapshot, and its report put on the step: what
//! was not imported (hooks, config keys outside the allow-list, links, ...) is a refusal with
//! rule `git.data-only` and flags the step `git-dropped`; refs the host moved meanwhile are
//! noted as conflicts.

use std::path::Path;
use std::sync::Arc;

use envgit_store::{GitImport, GitLayer, HiddenConfig, Refusal, StepDraft, StepFlag};

use crate::failure::CmdResult;
use crate::output;

/// The rule a write into `.git` that was not imported is recorded under.
pub(crate) const RULE: &str = envgit_store::GIT_DATA_ONLY_RULE;

/// A layer over `root/.git` for one run, or `None` when the project has no `.git` directory of
/// its own (then the protected list alone stands between the agent and git's code paths).
pub(crate) fn open(store_dir: &Path, root: &Path) -> CmdResult<Option<Arc<GitLayer>>> {
    Ok(GitLayer::open(store_dir, root)?.map(Arc::new))
}

/// The protected list under a layer: `.git/config` is imported key by key through the
/// allow-list, so it is writable inside and never put back wholesale (that would undo the
/// keys the import let through); `.git/info` is never imported, so it may be written inside
/// (`git gc` updates `info/refs`) without reaching the host. The layer is told the list: its
/// imports keep out an index or a commit that changes a protected path behind the working
/// tree (the host's `git stash` or `git restore` would write it).
pub(crate) fn protected_under(layer: Option<&GitLayer>, mut protected: Vec<String>) -> Vec<String> {
    if let Some(layer) = layer {
        protected.retain(|p| p != ".git/config" && p != ".git/info");
        // The names put back below the root are judged there too (`**/.vscode`): the host's
        // `git reset --hard` would write a commit's `packages/web/.vscode/tasks.json`.
        let judged: Vec<String> = protected
            .iter()
            .cloned()
            .chain(
                envgit_policy::PROTECTED_NAMES_BELOW
                    .iter()
                    .map(|n| format!("{}{n}", envgit_store::GIT_PROTECTED_BELOW_ROOT)),
            )
            .collect();
        if let Err(e) = layer.protect(&judged) {
            // This run's imports still judge by it; only a recovery after a kill would not.
            output::warn(&format!(
                "saving the protected list beside the git layer: {e}"
            ));
        }
    }
    protected
}

/// How the sandbox mounts the layer.
pub(crate) fn overlay(layer: &GitLayer) -> envgit_sandbox::spec::Overlay {
    envgit_sandbox::spec::Overlay {
        path: layer.git_dir(),
        upper: layer.upper(),
        work: layer.work(),
        fresh: false,
        shared: None,
    }
}

/// Imports what the step wrote into `.git` and says so on the step. `put_back` returns once
/// the protected paths are back on disk (the import may need to read them as they were);
/// `existed_before` says whether the project held a directory before the step.
pub(crate) fn import_into(
    layer: &GitLayer,
    draft: &mut StepDraft,
    put_back: &mut dyn FnMut(),
    existed_before: &dyn Fn(&[u8]) -> bool,
) -> CmdResult<GitImport> {
    let report = layer.import_beside(put_back, existed_before)?;
    report_into(&report, draft);
    Ok(report)
}

/// The project's paths an import wrote or removed: each imported file, and `.git` itself
/// (the config a key went into, the index whose time moved forward). A pack stands for the
/// index files git wrote beside it, in the same directory.
pub(crate) fn written_paths(report: &GitImport) -> Vec<String> {
    report
        .imported
        .iter()
        .chain(&report.removed)
        .filter(|p| !p.starts_with("config "))
        .map(|p| format!(".git/{p}"))
        .chain([".git/config".to_string()])
        .collect()
}

/// Prints and records one import's report.
pub(crate) fn report_into(report: &GitImport, draft: &mut StepDraft) {
    for d in &report.dropped {
        output::warn(&format!(
            ".git/{} was not imported into the host's .git: {} (rule {RULE})",
            d.path, d.why
        ));
        draft.refusals.push(Refusal {
            what: format!("write .git/{}", d.path),
            rule: RULE.into(),
        });
    }
    if !report.dropped.is_empty() {
        draft.flag(StepFlag::GitDropped);
    }
    for c in &report.conflicts {
        output::warn(&format!(".git/{}: {}", c.path, c.why));
        draft.notes.push(format!(".git/{}: {}", c.path, c.why));
    }
    for p in report.imported.iter().filter(|p| p.starts_with("config ")) {
        draft
            .notes
            .push(format!("git {p}: imported into the host's .git/config"));
    }
}

/// The run is over: the last import (normally empty: every step imported its own), then the
/// layer is removed. Waits for no one: the caller has dropped every other handle.
pub(crate) fn finish(layer: Option<Arc<GitLayer>>) {
    let Some(layer) = layer else { return };
    let Ok(layer) = Arc::try_unwrap(layer) else {
        // Still shared: the next command's recovery imports and removes it.
        return;
    };
    match layer.finish() {
        Ok(report) => report_into(&report, &mut StepDraft::default()),
        Err(e) => output::error(&format!("importing the run's .git writes: {e}")),
    }
}

/// What hiding git's credentials gives the run: the gate swaps them back on requests to
/// their hosts; the sandbox sees configuration files with placeholders.
#[derive(Default)]
pub(crate) struct HiddenCredentials {
    pub credentials: Vec<envgit_gate::Credential>,
    /// `(sanitized copy, path inside)`: a user's git configuration in the home that holds a
    /// credential, shown read-only with placeholders.
    pub file_overrides: Vec<(std::path::PathBuf, std::path::PathBuf)>,
    pub notes: Vec<String>,
    /// Where the person's git configuration moves its credential store: masked.
    pub credential_stores: Vec<std::path::PathBuf>,
}

/// The most read of a git configuration file whose credentials are hidden.
const CONFIG_MAX_BYTES: u64 = 16 << 20;

/// Hides the credentials in the project's `.git/config` (through the layer) and in the
/// home's git configuration (a sanitized copy under `dir`, bound over it). A credential that
/// cannot be hidden fails the run: the file is never shown with it.
pub(crate) fn hide_credentials(
    layer: Option<&GitLayer>,
    home: Option<&Path>,
    dir: &Path,
) -> CmdResult<HiddenCredentials> {
    let mut out = HiddenCredentials::default();
    let base = crate::runtime::random_token()?;
    let mut n = 0u32;
    let mut token = || {
        n += 1;
        format!("envgit-placeholder-{base}-{n}")
    };
    // The file with its credentials replaced; `None` when it has none (or is not there).
    let mut hide = |file: &Path, out: &mut HiddenCredentials| -> CmdResult<Option<HiddenConfig>> {
        // Not there, or not a file git reads as one: nothing to hide. Anything else that
        // cannot be read fails the run (closed): the sandbox could read it.
        match std::fs::metadata(file) {
            Ok(m) if m.is_file() => {}
            _ => return Ok(None),
        }
        let text = match crate::nofollow::read_regular_bounded(file, CONFIG_MAX_BYTES) {
            Ok(text) => text,
            // envgit's own user cannot read it: nor can the sandbox, which runs as that user.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(None),
            Err(e) => {
                return Err(crate::failure::Failure::failed(format!(
                    "{}: {e}; envgit cannot read it to hide the credentials it may hold, so \
                     it will not show it to the sandbox: make it a readable git \
                     configuration file",
                    file.display()
                )));
            }
        };
        let hidden = envgit_store::hide_git_config_secrets(&text, &mut token).map_err(|e| {
            crate::failure::Failure::failed(format!(
                "{}: {e}; envgit will not show it to the sandbox: move the credential to a \
                 credential helper outside the project, or remove it",
                file.display()
            ))
        })?;
        if hidden.secrets.is_empty() {
            return Ok(None);
        }
        for key in &hidden.keys {
            out.notes.push(format!(
                "{}: {key} holds a credential; the sandbox sees a placeholder, the gate sends the real one to its host only",
                file.display()
            ));
        }
        out.credentials
            .extend(hidden.secrets.iter().map(|s| envgit_gate::Credential {
                host: s.host.clone(),
                port: s.port,
                placeholder: s.placeholder.clone(),
                secret: s.secret.clone(),
                header: s.header.clone(),
            }));
        Ok(Some(hidden))
    };
    // The project's through the layer's upper config.
    if let Some(layer) = layer
        && let Some(hidden) = hide(&layer.git_dir().join("config"), &mut out)?
    {
        layer.hide_config(&hidden)?;
    }
    // The system's and the person's (and what they include) as copies bound over them: over
    // the file a link leads to (a dotfiles manager's `~/.gitconfig -> dotfiles/gitconfig`),
    // which the sandbox reaches through the link and by its own path alike (a bind over the
    // link itself would not be made). Each file, wherever it is, may be read by its path.
    let person = crate::git_host_config::person_config(home);
    out.credential_stores = person.credential_stores;
    let mut seen: Vec<std::path::PathBuf> = Vec::new();
    for (i, named) in person.files.into_iter().enumerate() {
        let Ok(file) = std::fs::canonicalize(&named) else {
            continue;
        };
        if seen.contains(&file) {
            continue;
        }
        seen.push(file.clone());
        if let Some(hidden) = hide(&file, &mut out)? {
            let copy = dir.join(format!("gitconfig-{i}"));
            std::fs::write(&copy, &hidden.text)
                .map_err(|e| crate::failure::Failure::failed(format!("{}: {e}", copy.display())))?;
            out.file_overrides.push((copy, file));
        }
    }
    Ok(out)
}

/// Filters the configs of repositories the step made or changed inside the project through
/// the allow-list (keys outside it get their pre-step values back), saying so on the step.
/// Returns whether a file was rewritten, and the configs that could not be filtered: those are
/// put back whole (fail closed).
pub(crate) fn filter_nested_configs(
    store: &envgit_store::Store,
    before: &envgit_store::ObjectId,
    nested: &envgit_store::NestedGitCode,
    draft: &mut StepDraft,
) -> CmdResult<(bool, Vec<String>)> {
    let mut rewritten = false;
    let mut unfiltered = Vec::new();
    for rel in &nested.configs {
        let was = match envgit_store::entry_at(store, before, rel)? {
            Some(e) if e.kind == envgit_store::EntryKind::File => store.read_file(&e.id)?,
            _ => Vec::new(),
        };
        let dropped = match envgit_store::filter_nested_git_config(store.project(), rel, &was) {
            Ok(d) => d,
            Err(e) => {
                output::warn(&format!(
                    "{rel}: cannot filter it through the allow-list ({e}); it is put back whole"
                ));
                unfiltered.push(rel.clone());
                continue;
            }
        };
        rewritten |= !dropped.is_empty();
        for d in &dropped {
            let said = format!(
                "{} was put back in a repository inside the project: {} (rule {RULE})",
                d.path, d.why
            );
            crate::step::refuse_write(draft, &d.path, RULE, &said);
        }
        if !dropped.is_empty() {
            draft.flag(StepFlag::GitDropped);
        }
    }
    Ok((rewritten, unfiltered))
}
