//! Where a sandbox's secrets outside the project are: every mask of its plan but the project's
//! own (its index gives those). The plan takes them once; a session that keeps one sandbox
//! for many calls keeps this and looks again before each ([`HostSecrets::now`]), since a
//! sandbox's masks are mounts on what was there when it was set up: a credential the person
//! makes during the session at one of these places (`aws configure` into the file
//! `AWS_SHARED_CREDENTIALS_FILE` names, a token under a path `filesystem.deny_read` lists) is
//! masked in the running sandbox then.

use std::path::{Path, PathBuf};

use envgit_policy::Policy;
use serde::{Deserialize, Serialize};

use crate::plan::{
    PlanInput, ROOT_DENIES, env_denies, existing_and_resolved, home_secrets_unresolved,
    host_sockets,
};

/// The places a sandbox's plan looks for secrets outside the project, as that plan saw them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSecrets {
    /// The homes the sandbox sees: the credentials' usual names there and a bounded walk
    /// (`.env` files, sockets, `filesystem.deny_read`'s `~/` globs).
    pub homes: Vec<PathBuf>,
    /// `filesystem.deny_read`'s entries (its `~/` ones are looked for in each home).
    deny_read: Vec<String>,
    /// The paths named elsewhere: by the caller's environment (`GOOGLE_APPLICATION_CREDENTIALS`,
    /// moved XDG directories), by its git configuration (`more_masks`), by
    /// `filesystem.deny_read` (absolute or in the project), and root's own files for root.
    named: Vec<PathBuf>,
    /// Where the view reaches: a host service's socket there is masked.
    visible: Vec<PathBuf>,
    /// envgit runs as root: the other homes under `/home` are masked.
    root: bool,
    project: PathBuf,
}

/// The inputs of a plan that say where it looks for secrets outside the project (see
/// [`PlanInput`]).
pub struct Places<'a> {
    pub homes: &'a [PathBuf],
    pub policy: &'a Policy,
    /// The caller's environment, and the directory its relative paths are taken from.
    pub caller_env: &'a [(String, String)],
    pub cwd: &'a Path,
    pub project: &'a Path,
    /// Credential files the caller found elsewhere (git's credential store where the person's
    /// configuration moves it).
    pub more_masks: &'a [PathBuf],
    /// Whom envgit runs as.
    pub uid: u32,
    /// The view's system directories.
    pub system: &'a [PathBuf],
}

impl HostSecrets {
    /// Where `input`'s plan looks, `system` being the spec's system directories.
    pub fn of(input: &PlanInput<'_>, system: &[PathBuf]) -> Self {
        Self::new(Places {
            homes: &input.homes,
            policy: input.policy,
            caller_env: &input.caller_env,
            cwd: &input.cwd,
            project: input.project,
            more_masks: &input.more_masks,
            uid: input.uid,
            system,
        })
    }

    /// Where a plan of these inputs looks.
    pub fn new(p: Places<'_>) -> Self {
        let mut named: Vec<PathBuf> = p.more_masks.to_vec();
        // A variable set to the project, a home or above one (`HISTFILE=/`) names no
        // credential file of its own: masking it would hide what the step works on.
        named.extend(
            env_denies(p.caller_env, p.cwd)
                .into_iter()
                .filter(|d| !p.project.starts_with(d) && !p.homes.iter().any(|h| h.starts_with(d))),
        );
        for d in &p.policy.filesystem.deny_read {
            // The homes' are looked for in each home; the project's globs are matched in its
            // index (the plan's facts).
            if d.starts_with("~/") || d.contains(['*', '?', '[']) {
                continue;
            }
            named.push(match d.strip_prefix('/') {
                Some(rest) => Path::new("/").join(rest),
                None => p.project.join(d),
            });
        }
        if p.uid == 0 {
            named.extend(ROOT_DENIES.iter().map(PathBuf::from));
        }
        let mut visible: Vec<PathBuf> = p.system.to_vec();
        visible.push(p.project.to_path_buf());
        visible.extend(p.homes.iter().cloned());
        HostSecrets {
            homes: p.homes.to_vec(),
            deny_read: p.policy.filesystem.deny_read.clone(),
            named,
            visible,
            root: p.uid == 0,
            project: p.project.to_path_buf(),
        }
    }

    /// What is at these places now, without `/etc`'s walk (the plan takes that on another
    /// thread) and before links are resolved.
    pub(crate) fn unresolved(&self) -> Vec<PathBuf> {
        let mut out = home_secrets_unresolved(&self.homes, &self.deny_read);
        out.extend(self.named.iter().cloned());
        out.extend(host_sockets(&self.visible));
        if self.root
            && let Ok(entries) = std::fs::read_dir("/home")
        {
            for e in entries.flatten() {
                let p = e.path();
                if !self.homes.contains(&p) && !self.project.starts_with(&p) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// Every secret at these places now, with what `/etc` holds that others may not read (from
    /// the walk's cache while `/etc` is unchanged), each that exists and, for one that is a
    /// link or under one, its real path too: what a plan made now would mask outside the
    /// project.
    pub fn now(&self) -> Vec<PathBuf> {
        let mut out = self.unresolved();
        out.extend(crate::etc_walk::now());
        existing_and_resolved(out)
    }
}
