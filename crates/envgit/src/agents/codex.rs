//! `envgit codex [ARGS…]`: the real `codex` CLI with envgit as its only execution environment.
//!
//! Codex runs on the host with a temporary `CODEX_HOME` derived from the user's (auth and model
//! settings kept; MCP servers, plugins, apps, notify programs and web search left out) whose
//! `environments.toml` names one environment, envgit's exec-server (`envgit codex-exec-server`,
//! hidden, over stdio), with `include_local = false`: nothing Codex runs for the model runs
//! anywhere else. Every `process/start` becomes `envgit run` (one step, in the sandbox, its
//! requests through the gate); `fs/*` calls are applied in the project under the same policy.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use envgit_codex::config::{COPIED, HomeSpec, user_codex_home, write_home};
use envgit_codex::{Effect, FsPolicy, Host, StepCommandError, StepIntent};
use envgit_store::{Refusal, StepDraft, StepKind, now_ms};

use crate::cli::CodexArgs;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{Project, start_dir};
use crate::step::{Sandboxed, Snapshot};

/// `codex` from `$ENVGIT_CODEX`, else the first on PATH.
fn find_codex() -> CmdResult<PathBuf> {
    if let Some(p) = std::env::var_os("ENVGIT_CODEX").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let c = dir.join("codex");
        if c.is_file() {
            return Ok(c);
        }
    }
    Err(Failure::usage(
        "the Codex CLI (`codex`) is not on PATH: install it (`npm install -g @openai/codex`) \
         or set ENVGIT_CODEX=/path/to/codex",
    ))
}

pub fn run(dir: Option<&Path>, args: &CodexArgs) -> CmdResult<ExitCode> {
    let project = Project::find(dir)?;
    let cwd = start_dir(dir)?;
    let codex = find_codex()?;
    // No command of the session runs yet: what changed since the last step is the user's.
    record_outside(&project)?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find envgit's own binary: {e}")))?;
    let envgit_home = envgit_store::envgit_home()?;
    let homes_dir = project.store_dir.join("codex");
    remove_stale_homes(&homes_dir);
    let home_dir = homes_dir.join(format!("{}-{}", std::process::id(), now_ms()));
    crate::runtime::private_dir(&home_dir)?;
    let user_home = user_codex_home(
        std::env::var_os("CODEX_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    );
    let server_args = vec![
        "-C".to_string(),
        cwd.display().to_string(),
        "codex-exec-server".to_string(),
    ];
    let lock_path = home_dir.join("exec-server.lock");
    let mut server_env = vec![
        ("ENVGIT_HOME".to_string(), envgit_home.display().to_string()),
        (LOCK_ENV.to_string(), lock_path.display().to_string()),
    ];
    if let Some(t) = std::env::var_os("ENVGIT_CODEX_TRACE") {
        server_env.push((
            "ENVGIT_CODEX_TRACE".to_string(),
            t.to_string_lossy().into_owned(),
        ));
    }
    let dropped = write_home(&HomeSpec {
        user_home: user_home.as_deref(),
        dir: &home_dir,
        program: &exe,
        args: &server_args,
        env: &server_env,
    })
    .map_err(|e| {
        let _ = envgit_store::remove_tree(&home_dir);
        Failure::failed(format!("preparing Codex's configuration: {e}"))
    })?;
    output::note(
        "Codex runs with envgit as its only environment: every command is a step in the sandbox, \
         every request goes through the gate",
    );
    if !dropped.is_empty() {
        output::note(&format!(
            "left out of your Codex configuration for this run (they could start programs on the host): {}",
            dropped.join(", ")
        ));
    }
    let status = {
        let _signals = envgit_sandbox::SignalGuard::ignore_terminal_signals();
        Command::new(&codex)
            .args(&args.args)
            .current_dir(&cwd)
            .env("CODEX_HOME", &home_dir)
            .env_remove("CODEX_EXEC_SERVER_URL")
            .status()
    };
    // The exec-server records what is left when its connection closes: wait for it.
    wait_for_servers(&lock_path, std::time::Duration::from_secs(30));
    // A refreshed login goes back to the user's own file.
    if let Some(user) = &user_home {
        for name in COPIED {
            let (ours, theirs) = (home_dir.join(name), user.join(name));
            if let Ok(new) = std::fs::read(&ours)
                && std::fs::read(&theirs).ok().as_deref() != Some(&new[..])
            {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                let _ = std::fs::create_dir_all(user);
                let written = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&theirs)
                    .and_then(|mut f| f.write_all(&new));
                if let Err(e) = written {
                    output::warn(&format!("could not write {} back: {e}", theirs.display()));
                }
            }
        }
    }
    let _ = envgit_store::remove_tree(&home_dir);
    let status = status.map_err(|e| Failure::failed(format!("{}: {e}", codex.display())))?;
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Remove the Codex homes of earlier runs whose envgit is gone (killed before it cleaned up):
/// they hold copies of the user's credentials.
fn remove_stale_homes(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name
            .to_string_lossy()
            .split('-')
            .next()
            .unwrap_or("")
            .to_string();
        if !pid.is_empty() && !Path::new("/proc").join(&pid).exists() {
            let _ = envgit_store::remove_tree(&e.path());
        }
    }
}

/// Set in the server proper (see [`exec_server`]).
const INNER_ENV: &str = "ENVGIT_CODEX_SERVER_INNER";

/// The exec-server holds a shared lock on this file while it lives.
const LOCK_ENV: &str = "ENVGIT_CODEX_SERVER_LOCK";

fn lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
}

/// Wait (bounded) until no exec-server of this run holds the lock.
fn wait_for_servers(path: &Path, limit: std::time::Duration) {
    use rustix::fs::FlockOperation;
    let Ok(f) = lock_file(path) else { return };
    let deadline = std::time::Instant::now() + limit;
    while rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_err() {
        if std::time::Instant::now() > deadline {
            output::warn("Codex's exec-server did not finish recording in time");
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

struct CodexHost {
    project: Project,
    exe: PathBuf,
    cwd: PathBuf,
    /// The writable directories of the person's `PATH` as the server found them: `fs/*` calls
    /// run on the host, so each is checked like a step in the sandbox.
    shadows: Option<crate::path_shadow::PathShadows>,
}

impl Host for CodexHost {
    fn step_command(&self, intent: &StepIntent) -> Result<Command, StepCommandError> {
        let cwd = intent
            .cwd
            .canonicalize()
            .unwrap_or_else(|_| intent.cwd.clone());
        if !cwd.starts_with(&self.project.root) {
            return Err(StepCommandError::CwdOutsideProject {
                cwd,
                project: self.project.root.clone(),
            });
        }
        if intent.sandbox.is_some() || intent.managed_network.is_some() {
            output::note(
                "Codex sent its own sandbox settings for this command; envgit's policy applies instead",
            );
        }
        let mut c = Command::new(&self.exe);
        c.arg("-C").arg(&cwd).arg("run");
        for note in intent_notes(intent) {
            c.arg("--note").arg(note);
        }
        c.arg("--")
            .args(&intent.argv)
            .envs(intent.env.iter().map(|(k, v)| (k, v)));
        Ok(c)
    }

    fn record_fs(&self, effect: Effect) {
        if let Err(f) = record_fs(&self.project, self.shadows.as_ref(), effect) {
            output::error(&format!("recording Codex's file changes: {}", f.message));
        }
    }

    fn denied_reads(&self) -> Option<Vec<PathBuf>> {
        denied_reads(&self.project, &self.cwd).ok()
    }

    fn before_fs_writes(&self) {
        if let Err(f) = record_outside(&self.project) {
            output::error(&format!(
                "recording your edits before Codex's: {}",
                f.message
            ));
        }
    }

    fn default_cwd(&self) -> PathBuf {
        self.cwd.clone()
    }
}

/// How much of Codex's own sandbox request a step's note keeps.
const NOTE_JSON_CHARS: usize = 500;

/// Codex's own sandbox settings, kept with the step as intent: envgit's policy is the one that
/// applies.
fn intent_notes(intent: &StepIntent) -> Vec<String> {
    [
        ("sandbox", &intent.sandbox),
        ("managedNetwork", &intent.managed_network),
    ]
    .into_iter()
    .filter_map(|(name, v)| {
        let v = v.as_ref().filter(|v| !v.is_null())?;
        let json = v.to_string();
        let shown = match json.char_indices().nth(NOTE_JSON_CHARS) {
            Some((cut, _)) => format!("{}…", &json[..cut]),
            None => json,
        };
        Some(format!(
            "codex asked for {name} {shown}; envgit's policy applied instead"
        ))
    })
    .collect()
}

/// What changed in the project since its last step, recorded as the person's edits.
fn record_outside(project: &Project) -> CmdResult<()> {
    let mut store = project.open_store()?;
    let mut wt = project.worktree(&store)?;
    let (now, _) = wt.full_scan(&store, None)?;
    crate::outside::record_outside_edits(project, &mut store, &now)?;
    wt.save_index(&store)?;
    Ok(())
}

fn record_fs(
    project: &Project,
    shadows: Option<&crate::path_shadow::PathShadows>,
    effect: Effect,
) -> CmdResult<()> {
    let mut store = project.open_store()?;
    let mut parts = Vec::new();
    if !effect.wrote.is_empty() {
        parts.push(format!("write {}", effect.wrote.join(", ")));
    }
    for r in &effect.refused {
        parts.push(format!("denied {}", r.what));
    }
    let summary = format!("codex fs: {}", parts.join("; "));
    let started = now_ms();
    let mut step = crate::step::begin(&store, &summary)?;
    let mut wt = project.worktree(&store)?;
    let draft = StepDraft {
        kind: Some(StepKind::Tool),
        started_at_ms: started,
        summary,
        policy_hash: Some(project.policy.hash()),
        refusals: effect
            .refused
            .into_iter()
            .map(|r| Refusal {
                what: r.what,
                rule: r.rule,
            })
            .collect(),
        ..Default::default()
    };
    // The calls were judged one by one against the protected paths already, and nothing of
    // the sandbox's ran (no copy, no git layer); what the snapshot's diff from the newest step
    // (the person's edits were recorded before the burst began, `before_fs_writes`) shows is
    // checked as for a sandboxed step all the same: a repository's code the calls
    // made or changed inside the project (its hooks, its `core.hooksPath`'s scripts, a bare
    // layout's config) and what the host runs below the root go back, and the search paths.
    let checked = Some(Sandboxed {
        protected: &[],
        copy: None,
        shadows,
        git: None,
        before: store.head().and_then(|h| h.tree),
        too_deep_before: &[],
        late: None,
        // The calls write on the host, refused anywhere in a `.git`, in or making a git
        // directory's layout and at a path the host runs by name: a repository in an excluded
        // directory is already out of their reach.
        excluded: None,
    });
    step.finish(&mut store, Snapshot::Scan(&mut wt, None), checked, draft)?;
    wt.save_index(&store)?;
    Ok(())
}

/// The unreadable paths of the sandbox's mount plan, for `fs/*` calls.
fn denied_reads(project: &Project, cwd: &Path) -> CmdResult<Vec<PathBuf>> {
    let facts = crate::project_facts::from_cache(project, &project.open_store()?)?;
    let uid = rustix::process::getuid().as_raw();
    let spec = envgit_sandbox::plan::plan(envgit_sandbox::plan::PlanInput {
        policy: &project.policy,
        project: &project.root,
        cwd: cwd.to_path_buf(),
        argv: Vec::new(),
        homes: crate::supervisor::homes(uid),
        uid,
        gid: rustix::process::getgid().as_raw(),
        state_dirs: Vec::new(),
        staging: PathBuf::new(),
        home_overlay: None,
        // The person's: the credentials it moves into the project are masked there too.
        caller_env: std::env::vars().collect(),
        extra_env: Vec::new(),
        trust: None,
        envgit_exe: None,
        relay: None,
        protected: Vec::new(),
        more_masks: crate::git_host_config::person_config(
            crate::supervisor::homes(uid).first().map(PathBuf::as_path),
        )
        .credential_stores,
        facts,
        etc_private: None,
        system: None,
    });
    Ok(spec.masks)
}

/// `$ENVGIT_CODEX_TRACE=FILE`: append the wire (`> ` in, `< ` out) to FILE.
fn trace() -> envgit_codex::Trace {
    std::env::var_os("ENVGIT_CODEX_TRACE")
        .and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
        })
        .map(envgit_codex::Trace::to_file)
        .unwrap_or_default()
}

/// `envgit codex-exec-server`: serve Codex's exec-server protocol on stdin/stdout.
pub fn exec_server(dir: Option<&Path>) -> CmdResult<ExitCode> {
    // Codex kills the program it started when it exits, before closing the connection. The
    // server proper is a child that shares this process's stdin and stdout: it outlives that
    // kill, sees the connection close, kills the connection's processes and records what is
    // left.
    if std::env::var_os(INNER_ENV).is_none() {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe()
            .map_err(|e| Failure::failed(format!("cannot find envgit's own binary: {e}")))?;
        let mut c = Command::new(exe);
        if let Some(d) = dir {
            c.arg("-C").arg(d);
        }
        let status = c
            .arg("codex-exec-server")
            .env(INNER_ENV, "1")
            .process_group(0)
            .status()
            .map_err(|e| Failure::failed(format!("exec-server: {e}")))?;
        return Ok(ExitCode::from(
            status.code().unwrap_or(1).clamp(0, 255) as u8
        ));
    }
    // Held until this process exits, so `envgit codex` knows when recording is over.
    let _lock = std::env::var_os(LOCK_ENV).and_then(|p| {
        let f = lock_file(Path::new(&p)).ok()?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockShared).ok()?;
        Some(f)
    });
    let project = Project::find(dir)?;
    let cwd = start_dir(dir)?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find envgit's own binary: {e}")))?;
    let policy = FsPolicy {
        root: project.root.clone(),
        deny_read: denied_reads(&project, &cwd)?,
        protected: project.protected_paths(),
        deny_read_globs: project.policy.filesystem.deny_read.clone(),
    };
    let shadows = crate::path_shadow::PathShadows::of_project(&project, &cwd);
    let host = Arc::new(CodexHost {
        project,
        exe,
        cwd,
        shadows,
    });
    let stdin = std::io::stdin();
    envgit_codex::serve(
        stdin.lock(),
        Box::new(std::io::stdout()),
        host,
        policy,
        trace(),
    )
    .map_err(|e| Failure::failed(format!("exec-server: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{NOTE_JSON_CHARS, intent_notes};
    use envgit_codex::StepIntent;
    use serde_json::json;

    fn intent(sandbox: Option<serde_json::Value>, net: Option<serde_json::Value>) -> StepIntent {
        StepIntent {
            cwd: "/w".into(),
            argv: vec!["true".into()],
            env: Vec::new(),
            tool_call: None,
            sandbox,
            managed_network: net,
        }
    }

    #[test]
    fn codex_sandbox_settings_become_notes_compact_and_clipped() {
        assert!(intent_notes(&intent(None, None)).is_empty());
        assert!(intent_notes(&intent(Some(json!(null)), None)).is_empty());
        let notes = intent_notes(&intent(
            Some(json!({"type": "workspace-write"})),
            Some(json!({"allowedDomains": ["example.com"]})),
        ));
        assert_eq!(
            notes,
            [
                r#"codex asked for sandbox {"type":"workspace-write"}; envgit's policy applied instead"#,
                r#"codex asked for managedNetwork {"allowedDomains":["example.com"]}; envgit's policy applied instead"#,
            ]
        );
        // Clipped by characters, never inside one.
        let long = "é".repeat(2 * NOTE_JSON_CHARS);
        let notes = intent_notes(&intent(Some(json!(long)), None));
        let shown = notes[0]
            .strip_prefix("codex asked for sandbox ")
            .and_then(|n| n.strip_suffix("…; envgit's policy applied instead"))
            .unwrap_or_default();
        assert_eq!(shown.chars().count(), NOTE_JSON_CHARS);
        assert!(shown.starts_with("\"é"));
    }
}
