//! Inside a project: its policy parses, its store passes `fsck`, and sandboxed commands can
//! write its files. Outside one these are skipped, and the report says so.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use envgit_policy::Policy;
use envgit_store::{Store, envgit_home, store_dir_for};

use super::Check;
use crate::commands::progress::Ticker;
use crate::nofollow::read_nofollow;
use crate::project::{POLICY_FILE, start_dir};

/// The nearest directory from `start` upward that holds `envgit.yaml`, as other commands find
/// the project (but without parsing the policy, which is one of the checks).
fn find_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join(POLICY_FILE).symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

/// Where `envgit doctor` runs, as far as projects go.
pub enum Location {
    /// Inside the project with this root.
    Inside(PathBuf),
    /// Outside any project; the directory started from.
    Outside(PathBuf),
    /// The starting directory itself is unusable.
    Unusable(String),
}

impl Location {
    pub fn find(dir: Option<&Path>) -> Self {
        match start_dir(dir) {
            Ok(start) => match find_root(&start) {
                Some(root) => Self::Inside(root),
                None => Self::Outside(start),
            },
            Err(f) => Self::Unusable(f.message),
        }
    }
}

pub fn checks(at: &Location) -> Vec<Check> {
    match at {
        Location::Inside(root) => vec![
            policy(root),
            fsck(root),
            writable(root),
            watch(root),
            named_by_settings(root),
        ],
        Location::Outside(start) => vec![Check::skip(
            "project",
            format!(
                "{} is not in an envgit project (no {POLICY_FILE} here or above): policy and fsck checks skipped",
                start.display()
            ),
        )],
        Location::Unusable(why) => vec![Check::fail(
            "project",
            why.clone(),
            "run `envgit doctor` from (or with -C) an existing directory",
        )],
    }
}

/// The user sandboxed commands run as (envgit's own, or the project's owner when envgit runs
/// as root on another user's project) can write the project: its root and a bounded sample
/// of entries near it ([`crate::owner::sample_unwritable`]), never a walk of the whole tree.
fn writable(root: &Path) -> Check {
    const NAME: &str = "project files";
    let w = crate::owner::sample_unwritable(root);
    if let Some((detail, fix)) = w.problem(root) {
        return Check::fail(NAME, detail, fix);
    }
    let whom = match crate::owner::project_owner(root) {
        Some(_) => format!(
            "uid {} (the project's owner: envgit runs as root, commands run as them)",
            w.uid
        ),
        None => format!("uid {}", w.uid),
    };
    Check::pass(
        NAME,
        format!(
            "writable by {whom}, which sandboxed commands run as ({} entries sampled)",
            w.checked
        ),
    )
}

fn policy(root: &Path) -> Check {
    const NAME: &str = "policy";
    let path = root.join(POLICY_FILE);
    let bytes = match read_nofollow(&path) {
        Ok(b) => b,
        Err(e) => {
            return Check::fail(
                NAME,
                format!("{}: {e}", path.display()),
                format!(
                    "make {} a regular file you can read (not a symlink)",
                    path.display()
                ),
            );
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    match Policy::parse(&path.display().to_string(), &text) {
        Ok(_) => Check::pass(NAME, format!("{} parses", path.display())),
        Err(e) => Check::fail(
            NAME,
            e.to_string(),
            format!(
                "edit {} at line {}, column {}: {}",
                path.display(),
                e.line,
                e.column,
                e.message
            ),
        ),
    }
}

fn fsck(root: &Path) -> Check {
    const NAME: &str = "project store";
    let dir = match envgit_home() {
        Ok(h) => store_dir_for(&h, root),
        Err(e) => {
            return Check::fail(
                NAME,
                e.to_string(),
                "export ENVGIT_HOME=DIR (the directory that holds the project's store)",
            );
        }
    };
    let d = dir.display();
    if !dir.join("store.json").exists() {
        return Check::fail(
            NAME,
            format!(
                "{} has an {POLICY_FILE} but no store at {d} (was the project moved, or ENVGIT_HOME changed?)",
                root.display()
            ),
            format!(
                "point ENVGIT_HOME at the store's directory, or move {POLICY_FILE} aside and run `envgit init`"
            ),
        );
    }
    let store = match Store::open(&dir) {
        Ok(s) => s,
        Err(e) => {
            return Check::fail(
                NAME,
                format!("cannot open the store at {d}: {e}"),
                format!("chmod -R u+rwX {d}; if that is not it, `envgit fsck` says more"),
            );
        }
    };
    let done = Arc::new(AtomicU64::new(0));
    let total = store.object_count();
    let report = {
        let d = done.clone();
        let _t = Ticker::start(move || {
            format!(
                "fsck: checking objects: {}/{total}",
                d.load(Ordering::Relaxed)
            )
        });
        envgit_store::fsck(&store, Some(&done))
    };
    match report {
        Ok(r) if r.is_clean() => Check::pass(
            NAME,
            format!(
                "fsck: {} objects, {} steps checked: clean ({d})",
                r.objects_checked, r.steps_checked
            ),
        ),
        Ok(r) => Check::fail(
            NAME,
            format!(
                "fsck: {} objects, {} steps checked: CORRUPT ({} bad object(s), {} step(s) cannot be fully restored)",
                r.objects_checked,
                r.steps_checked,
                r.bad_objects.len(),
                r.broken_steps.len()
            ),
            "run `envgit fsck` to see which objects and steps are affected",
        ),
        Err(e) => Check::fail(
            NAME,
            format!("fsck of {d} failed: {e}"),
            "run `envgit fsck` for details",
        ),
    }
}

/// `envgit watch`, informational: whether the project's daemon runs, and if it does, whether
/// its word can be taken (watches left, the scan configuration it was started with).
fn watch(root: &Path) -> Check {
    const NAME: &str = "watch daemon";
    let Ok(project) = crate::project::Project::find(Some(root)) else {
        return Check::skip(NAME, "the policy does not load (see above)");
    };
    let Some(status) = crate::watch_daemon::client::status(&project.store_dir) else {
        return Check::pass(
            NAME,
            "not running (optional: `envgit watch start` lets `envgit run` and `envgit \
             rewind` read only what changed instead of walking the project)",
        )
        .optional();
    };
    let restart = "envgit watch stop && envgit watch start";
    if status.degraded {
        return Check::fail(
            NAME,
            format!(
                "pid {} ran out of inotify watches: every step reads the whole project",
                status.pid
            ),
            format!("sudo sysctl fs.inotify.max_user_watches=1048576, then {restart}"),
        )
        .optional();
    }
    match project.scan_config() {
        Ok(config) if config.fingerprint != status.fingerprint => Check::fail(
            NAME,
            format!(
                "pid {} was started before `snapshot:` in {POLICY_FILE} changed: steps read the \
                 whole project",
                status.pid
            ),
            restart,
        )
        .optional(),
        _ => Check::pass(
            NAME,
            format!("pid {}, {} directories watched", status.pid, status.watches),
        )
        .optional(),
    }
}

/// The project files a step cannot change because the person's own settings (their
/// environment, their git configuration) have the host run or read them: a tool that must
/// rewrite one fails with "read-only file system", and this says why.
fn named_by_settings(root: &Path) -> Check {
    const NAME: &str = "read-only by your settings";
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let named = crate::protected_by_settings::list(&root);
    if named.is_empty() {
        return Check::pass(
            NAME,
            "none: neither your environment nor your git configuration names a project file",
        )
        .optional();
    }
    let list: Vec<String> = named
        .iter()
        .map(|(path, by)| format!("{path} ({by})"))
        .collect();
    Check::pass(
        NAME,
        format!(
            "steps cannot change {}: the host runs or reads them by your settings (a tool that \
             must rewrite one fails with \"read-only file system\"; unset the setting for the \
             session, or run that tool outside envgit)",
            list.join(", ")
        ),
    )
    .optional()
}
