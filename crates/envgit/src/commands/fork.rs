//! `envgit fork N DIR`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use envgit_store::{EntryKind, ForkOptions, Store};

use super::rewind::Skipped;

use crate::cli::ForkArgs;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{POLICY_FILE, store_dir};

pub fn run(dir: Option<&Path>, args: &ForkArgs) -> CmdResult<ExitCode> {
    let (project, store, n) = super::rewind::load(dir, args.restore_policy, "fork", args.step)?;
    store.step_tree(n)?;
    let base = crate::project::start_dir(dir)?;
    let target = resolve(&base.join(&args.target))?;
    let home = envgit_store::envgit_home()?;
    let home = resolve(&home).unwrap_or(home);
    refuse_inside(&target, &project.root, &home)?;
    if let Ok(mut entries) = std::fs::read_dir(&target)
        && entries.next().is_some()
    {
        return Err(Failure::usage(format!(
            "{} is not empty: fork into a new or empty directory",
            target.display()
        )));
    }
    std::fs::create_dir_all(&target)
        .map_err(|e| Failure::failed(format!("{}: {e}", target.display())))?;
    let canonical = target
        .canonicalize()
        .map_err(|e| Failure::failed(format!("{}: {e}", target.display())))?;
    // Resolved again once it exists: a link swapped in meanwhile must not carry it inside.
    refuse_inside(&canonical, &project.root, &home)?;
    let new_store = store_dir(&canonical)?;
    // Its stat index says which of the origin's files still hold what step N recorded: those
    // are cloned where the filesystem can. Without one (a missing or unreadable index) every
    // file is written from the store.
    let origin_tree = project.worktree(&store).ok();
    let opts = ForkOptions {
        step: n,
        clone_from: origin_tree.as_ref(),
        replace_root_file: (!args.restore_policy)
            .then_some((POLICY_FILE, project.policy_bytes.as_slice())),
        policy_hash: Some(project.policy.hash()),
    };
    let (mut forked, tree, draft) = envgit_store::fork(&store, &canonical, &new_store, &opts)?;
    let step = crate::step::begin(&forked, "fork")?.finish(
        &mut forked,
        crate::step::Snapshot::Tree(tree),
        None,
        draft,
    )?;
    let mut skipped = markers(&store, n)?;
    if !args.restore_policy {
        // The current policy was written in its place.
        skipped.retain(|s| s.path != POLICY_FILE);
    }
    for s in &skipped {
        s.say(n);
    }
    if args.out.json {
        let mut v = serde_json::to_value(&step)
            .map_err(|e| Failure::failed(format!("encoding the step: {e}")))?;
        if let Some(o) = v.as_object_mut() {
            let list = serde_json::to_value(&skipped)
                .map_err(|e| Failure::failed(format!("encoding the step: {e}")))?;
            o.insert("not_restored".into(), list);
        }
        output::json(&v)?;
    } else {
        println!(
            "forked step {} of {} into {} (step {} of its own history)",
            n,
            project.root.display(),
            canonical.display(),
            step.number
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `path` (absolute) as the filesystem resolves it: its deepest existing ancestor
/// canonicalized (symlinks followed, as the kernel would when creating the directory), the
/// rest appended with `.` dropped and `..` taken lexically (those names do not exist, so none
/// is a link). An existing non-directory on the way is refused.
fn resolve(path: &Path) -> CmdResult<PathBuf> {
    let mut existing = path;
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut names = path.components().rev();
    let canonical = loop {
        match std::fs::metadata(existing) {
            Ok(m) if m.is_dir() => {
                break existing
                    .canonicalize()
                    .map_err(|e| Failure::failed(format!("{}: {e}", existing.display())))?;
            }
            Ok(_) => {
                return Err(Failure::usage(format!(
                    "{} is not a directory: fork into a new or empty directory",
                    existing.display()
                )));
            }
            Err(_) => {}
        }
        let (Some(parent), Some(last)) = (existing.parent(), names.next()) else {
            return Err(Failure::usage(format!(
                "{}: no part of this path exists",
                path.display()
            )));
        };
        rest.push(last.as_os_str());
        existing = parent;
    };
    let mut out = canonical;
    for name in rest.into_iter().rev() {
        match name.to_str() {
            Some(".") => {}
            Some("..") => {
                out.pop();
            }
            _ => out.push(name),
        }
    }
    Ok(out)
}

/// A fork inside the project would be snapshotted by it; inside the store, it would be in
/// envgit's own data.
fn refuse_inside(target: &Path, project: &Path, home: &Path) -> CmdResult<()> {
    if target.starts_with(project) {
        return Err(Failure::usage(format!(
            "{} is inside the project {}: fork into a directory outside it",
            target.display(),
            project.display()
        )));
    }
    if target.starts_with(home) {
        return Err(Failure::usage(format!(
            "{} is inside the envgit store {} ($ENVGIT_HOME): fork into a directory outside it",
            target.display(),
            home.display()
        )));
    }
    Ok(())
}

/// Every marker of step `n`: a fork writes none of them (excluded paths, files over the size
/// limit, sockets, too-deep directories). Depth first with an explicit stack, in path order.
fn markers(store: &Store, n: u64) -> CmdResult<Vec<Skipped>> {
    let mut out = Vec::new();
    let mut stack: Vec<(String, envgit_store::ObjectId)> =
        vec![(String::new(), store.step_tree(n)?)];
    while let Some((prefix, id)) = stack.pop() {
        let tree = store.read_tree(&id)?;
        let mut dirs = Vec::new();
        for e in &tree.entries {
            let name = String::from_utf8_lossy(&e.name);
            let path = if prefix.is_empty() {
                name.into_owned()
            } else {
                format!("{prefix}/{name}")
            };
            match e.kind {
                EntryKind::Marker(r) => out.push(Skipped::new(&path, r, true)),
                EntryKind::Dir => dirs.push((path, e.id)),
                _ => {}
            }
        }
        stack.extend(dirs.into_iter().rev());
    }
    Ok(out)
}
