//! Steps an agent's hooks open and close while the agent's whole process runs in one sandbox
//! (`envgit claude`): PreToolUse opens a step (or refuses the call),
//! PostToolUse/PostToolUseFailure close it, Stop/SessionEnd close whatever is left, and when
//! the agent exits the rest of the session (its model requests, files changed between calls)
//! becomes one last step.
//!
//! The hooks run inside the sandbox and reach this server over a unix socket bound at
//! `/run/envgit/hooks.sock`. One JSON line each way per connection:
//! `{"event":"pre"|"post"|"post_failure"|"stop","payload":{…the agent's hook payload…}}`,
//! answered `{"allow":true}` or `{"allow":false,"reason":"…"}`. Everything in a message came
//! from inside, so it is bounded, and it only ever decides how steps are cut and named: what a
//! call may do is still decided by the sandbox and the gate.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use envgit_gate::{EventList, EventTap, GateEvent};
use envgit_store::{
    GitLayer, LiveTree, ObjectId, ProtectedCopy, Refusal, StepDraft, StepFlag, StepKind, Store,
    now_ms,
};
use serde_json::{Value, json};

use super::tool_call::{refusal_of, tool_summary};
use crate::failure::CmdResult;
use crate::output;
use crate::path_shadow::PathShadows;
use crate::project::Project;
use crate::project_facts::SessionCover;
use crate::step::{OpenStep, Sandboxed, Snapshot};
use crate::supervisor::{EXIT_REFUSED, SandboxStarted, requests_of};

/// Where the hooks socket is inside the sandbox (a `/run/envgit` file).
pub(crate) const HOOKS_SOCKET_NAME: &str = "hooks.sock";
/// A hook message longer than this is refused: payloads carry a tool's input, not its output.
const MAX_MESSAGE: u64 = 4 << 20;
/// How often a session looks at its protected paths.
const SWEEP_EVERY_MS: i64 = 200;
/// How long a hook may take to send its message.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A tool call between its PreToolUse and its PostToolUse.
struct OpenCall {
    id: String,
    summary: String,
    started: u64,
    events: EventList,
}

/// The open run: its store, its working tree, one step guard for all its steps.
pub(crate) struct ToolSteps<'a> {
    project: &'a Project,
    agent: &'static str,
    cwd: PathBuf,
    store: Store,
    /// Kept current by inotify: a call's step reads only the directories that changed.
    live: LiveTree,
    step: OpenStep,
    protected: Vec<String>,
    /// The protected paths as the session found them: each call's put-back restores them.
    copy: ProtectedCopy,
    /// The writable directories of the person's `PATH`, as the session found them.
    shadows: Option<PathShadows>,
    /// The session's layer over `.git`: each call's writes there are imported as data.
    git: Option<Arc<GitLayer>>,
    /// Put back by the sweep since the last step: that step says so.
    swept: Vec<String>,
    /// The tree of the last step committed: protected paths are put back to it.
    last_tree: ObjectId,
    /// Oldest first.
    open: Vec<OpenCall>,
    /// Requests that finished while no call was open (the agent's own model traffic).
    between: EventList,
    tap: Option<EventTap>,
    tap_rx: Receiver<EventTap>,
    calls: u64,
    /// What the session's sandbox hides ([`ToolSteps::project_facts`]); none until it is
    /// planned: then every secret is uncovered.
    cover: SessionCover,
    /// The repositories in the excluded directories before the session, whose code its copy
    /// holds: what an interrupted call's end leaves armed.
    excluded_before: Vec<envgit_store::ExcludedRepositoryAt>,
    /// The session sandbox's first process and homes, once it runs.
    sandbox: Arc<std::sync::OnceLock<SandboxStarted>>,
    /// A pidfd of that process, opened when first needed (it is envgit's child: its pid
    /// cannot name another process before envgit waits for it).
    sandbox_fd: Option<OwnedFd>,
}

impl<'a> ToolSteps<'a> {
    pub fn begin(
        project: &'a Project,
        agent: &'static str,
        cwd: &Path,
        protected: Vec<String>,
        tap_rx: Receiver<EventTap>,
    ) -> CmdResult<Self> {
        let mut store = project.open_store()?;
        let mut live = project.live_tree(&store)?;
        // The first snapshot walks everything once and sets up the watches.
        let (last_tree, _, _) = live.snapshot(&store)?;
        // No sandboxed process of the project is alive yet: what changed is the user's.
        crate::outside::record_outside_edits(project, &mut store, &last_tree)?;
        let step = crate::step::begin(&store, &format!("{agent} session"))?;
        let git = crate::git_layer::open(store.dir(), &project.root)?;
        let protected = crate::git_layer::protected_under(git.as_deref(), protected);
        // With the code of the repositories in excluded directories, which no snapshot holds
        // (copied only: bound read-only, it would keep `rm -rf node_modules` from working).
        let mut copied = protected.clone();
        let (code, excluded_before) =
            crate::excluded_repos::code_before(project, store.dir(), live.tree());
        copied.extend(code);
        let copy = ProtectedCopy::take(store.dir(), &project.root, &copied)?;
        copy.wait_durable()?;
        let shadows = PathShadows::of_project(project, cwd);
        if let Some(shadows) = &shadows {
            crate::path_shadow::keep_owed_sweep_with(&copy, shadows)?;
        }
        Ok(ToolSteps {
            project,
            agent,
            cwd: cwd.to_path_buf(),
            store,
            live,
            step,
            protected,
            copy,
            shadows,
            git,
            swept: Vec::new(),
            last_tree,
            open: Vec::new(),
            between: EventList::default(),
            tap: None,
            tap_rx,
            calls: 0,
            cover: SessionCover::default(),
            excluded_before,
            sandbox: Arc::default(),
            sandbox_fd: None,
        })
    }

    /// The protected paths of the session (under its git layer), for the sandbox's mounts.
    pub fn protected(&self) -> &[String] {
        &self.protected
    }

    /// The session's layer over `.git`, for the sandbox to mount.
    pub fn git_layer(&self) -> Option<Arc<GitLayer>> {
        self.git.clone()
    }

    /// The project's secrets and hard-linked files for the sandbox's plan, from the session's
    /// first snapshot.
    pub fn project_facts(&mut self) -> CmdResult<envgit_sandbox::plan::ProjectFacts> {
        let facts =
            crate::project_facts::of(self.project, self.store.dir(), self.live.tree(), None)?;
        let homes = crate::supervisor::homes(rustix::process::getuid().as_raw());
        self.cover = SessionCover::of(&facts, &homes, &self.project.policy);
        Ok(facts)
    }

    /// A pidfd of the session sandbox's first process, or why there is none.
    fn sandbox_fd(&mut self) -> Result<OwnedFd, String> {
        if let Some(fd) = &self.sandbox_fd {
            return fd.try_clone().map_err(|e| e.to_string());
        }
        let pid = self
            .sandbox
            .get()
            .and_then(|s| rustix::process::Pid::from_raw(s.pid as i32))
            .ok_or("the session's sandbox has not started")?;
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
            .map_err(|e| format!("the session's sandbox (pid {pid:?}): {e}"))?;
        self.sandbox_fd = Some(fd.try_clone().map_err(|e| e.to_string())?);
        Ok(fd)
    }

    /// A call refused before it ran: its refused step, and PreToolUse's answer with `reason`.
    fn refused(&mut self, summary: String, refusal: Refusal, reason: String) -> Value {
        let draft = StepDraft {
            exit_code: Some(EXIT_REFUSED),
            refusals: vec![refusal],
            ..self.draft(summary, now_ms())
        };
        if let Err(f) = self.commit(draft) {
            output::error(&format!("recording the refused call: {}", f.message));
        }
        json!({"allow": false, "reason": reason})
    }

    /// Where the session's sandbox says its pid once spawned (`RunExtras::sandbox`).
    pub fn sandbox_slot(&self) -> Arc<std::sync::OnceLock<SandboxStarted>> {
        self.sandbox.clone()
    }

    /// The project's store directory (the sandbox keeps its home overlay there).
    pub fn state_dir(&self) -> PathBuf {
        self.store.dir().to_path_buf()
    }

    /// What the gate recorded since the last look.
    fn fresh_events(&mut self) -> Vec<GateEvent> {
        if self.tap.is_none() {
            self.tap = self.tap_rx.try_recv().ok();
        }
        self.tap.as_ref().map(EventTap::take).unwrap_or_default()
    }

    /// Files requests under the newest open call, or between calls when none is open.
    fn file(&mut self, events: Vec<GateEvent>) {
        match self.open.last_mut() {
            Some(call) => call.events.extend(events),
            None => self.between.extend(events),
        }
    }

    /// One hook message; returns the answer line.
    fn handle(&mut self, message: &Value) -> Value {
        let fresh = self.fresh_events();
        let payload = &message["payload"];
        let tool = payload["tool_name"].as_str().unwrap_or("tool");
        let input = &payload["tool_input"];
        let id = payload["tool_use_id"].as_str().unwrap_or("").to_owned();
        let summary = tool_summary(self.agent, tool, input);
        match message["event"].as_str() {
            Some("pre") => {
                // Finished before this call began: not its requests.
                self.file(fresh);
                if let Some((what, rule)) = refusal_of(self.project, &self.cwd, tool, input) {
                    let reason = super::tool_call::refusal_reason(&what, &rule);
                    output::error(&format!("denied {what} (rule {rule})"));
                    return self.refused(summary, Refusal { what, rule }, reason);
                }
                // What the session's sandbox does not cover yet (a key the person saved into a
                // new `.env`: masked in it), and files the person linked outside since it began
                // (a `pnpm install` in their own terminal: copies of the project's own).
                let sandbox = self.sandbox_fd();
                let started = self.sandbox.get();
                if let Err(refused) = crate::project_facts::before_session_call(
                    self.project,
                    self.store.dir(),
                    self.live.tree(),
                    &mut self.cover,
                    sandbox
                        .as_ref()
                        .map(|fd| {
                            (
                                std::slice::from_ref(fd),
                                started.map(std::slice::from_ref).unwrap_or_default(),
                            )
                        })
                        .map_err(String::as_str),
                    "`envgit claude --continue` keeps the conversation",
                ) {
                    output::error(&refused.message);
                    let refusal = Refusal {
                        what: refused.what,
                        rule: refused.rule.to_string(),
                    };
                    return self.refused(summary, refusal, refused.message);
                }
                // A crash during the call leaves it for the next command to record, and to
                // check the nested repositories for (best effort, as the record itself).
                self.step.guard().keep_if_uncommitted();
                let mut owed = self.project.owed_end(self.last_tree);
                owed.excluded_before = Some(self.excluded_before.clone());
                let _ = self.step.guard().owe_end(owed);
                self.open.push(OpenCall {
                    id,
                    summary,
                    started: now_ms(),
                    events: EventList::default(),
                });
                json!({"allow": true})
            }
            Some(event @ ("post" | "post_failure")) => {
                // A call whose PreToolUse envgit never saw still gets its step.
                let mut call = match self.open.iter().position(|c| c.id == id) {
                    Some(i) => self.open.remove(i),
                    None => OpenCall {
                        id,
                        summary,
                        started: now_ms(),
                        events: EventList::default(),
                    },
                };
                // Finished by the time this call ended: with calls in parallel, the one
                // ending now is the likeliest to have made them.
                call.events.extend(fresh);
                self.close(call, event == "post_failure");
                json!({"allow": true})
            }
            Some("stop") => {
                self.file(fresh);
                self.close_all();
                json!({"allow": true})
            }
            other => {
                self.file(fresh);
                json!({
                "allow": false,
                    "reason": format!("envgit: unknown hook event {other:?}"),
                })
            }
        }
    }

    fn draft(&self, summary: String, started: u64) -> StepDraft {
        StepDraft {
            kind: Some(StepKind::Tool),
            started_at_ms: started,
            summary,
            cwd: Some(self.cwd.display().to_string()),
            policy_hash: Some(self.project.policy.hash()),
            ..Default::default()
        }
    }

    fn close(&mut self, call: OpenCall, failed: bool) {
        self.calls += 1;
        let record = requests_of(&call.events.into_events());
        let summary = if failed {
            format!("{} (failed)", call.summary)
        } else {
            call.summary
        };
        let mut draft = StepDraft {
            requests: record.requests,
            refusals: record.refusals,
            approvals: record.approvals,
            ..self.draft(summary, call.started)
        };
        draft.notes.extend(record.notes);
        if let Err(f) = self.commit(draft) {
            output::error(&format!("recording a tool call: {}", f.message));
        }
    }

    fn close_all(&mut self) {
        for call in std::mem::take(&mut self.open) {
            self.close(call, false);
        }
    }

    /// Puts back protected paths that changed since the last look; the next step is
    /// flagged and lists them.
    fn sweep_protected(&mut self) {
        match self.copy.put_back() {
            Ok(paths) => {
                for p in paths {
                    output::warn(&format!(
                        "{p} changed during the session and was put back (protected path)"
                    ));
                    if !self.swept.contains(&p) {
                        self.swept.push(p);
                    }
                }
            }
            Err(e) => output::error(&format!("putting protected paths back: {e}")),
        }
    }

    fn commit(&mut self, mut draft: StepDraft) -> CmdResult<()> {
        for p in std::mem::take(&mut self.swept) {
            draft.refusals.push(Refusal {
                what: format!("write {p}"),
                rule: "filesystem.protected".into(),
            });
            draft.flag(StepFlag::ProtectedRestored);
        }
        let sandboxed = Sandboxed {
            protected: &self.protected,
            copy: Some(&self.copy),
            shadows: self.shadows.as_ref(),
            git: self.git.as_deref(),
            before: Some(self.last_tree),
            too_deep_before: &[],
            late: None,
            // The session's copy holds their code (taken at its start).
            excluded: Some(crate::excluded_repos::Excluded {
                project: self.project,
                copy: None,
                unchanged: None,
                roots_before: None,
            }),
        };
        let step = self.step.finish(
            &mut self.store,
            Snapshot::Live(&mut self.live),
            Some(sandboxed),
            draft,
        )?;
        if let Some(tree) = step.tree {
            self.last_tree = tree;
        }
        Ok(())
    }

    /// The agent exited with `code`: calls still open become steps, then the session itself
    /// (the agent's command line, its requests between calls, files changed since the last
    /// step). `rest` is what the gate still held when it stopped.
    pub fn finish(
        mut self,
        argv: Vec<String>,
        started: u64,
        code: i32,
        rest: Vec<GateEvent>,
    ) -> CmdResult<()> {
        let mut events = self.fresh_events();
        events.extend(rest);
        self.file(events);
        self.close_all();
        let record = requests_of(&self.between.take());
        let line = envgit_policy::command_line(&argv);
        let mut draft = StepDraft {
            kind: Some(StepKind::Run),
            summary: format!("{line} (session: {} tool call(s))", self.calls),
            command: Some(argv),
            exit_code: Some(code),
            requests: record.requests,
            refusals: record.refusals,
            approvals: record.approvals,
            ..self.draft(String::new(), started)
        };
        draft.notes.extend(record.notes);
        self.commit(draft)?;
        let ToolSteps {
            store, live, git, ..
        } = self;
        crate::git_layer::finish(git);
        live.tree().save_index(&store)?;
        Ok(())
    }

    /// Answers hook connections until `stop` becomes readable (the agent exited).
    pub fn serve(&mut self, listener: &UnixListener, stop: &OwnedFd) {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        // Between and during calls, protected paths are put back within this long of a
        // change (a background process re-planting a hook after a call's put-back).
        let sweep = Timespec {
            tv_sec: 0,
            tv_nsec: SWEEP_EVERY_MS * 1_000_000,
        };
        loop {
            self.sweep_protected();
            let mut fds = [
                PollFd::new(listener, PollFlags::IN),
                PollFd::new(stop, PollFlags::IN),
            ];
            match poll(&mut fds, Some(&sweep)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    output::error(&format!("hooks socket: {e}"));
                    return;
                }
            }
            if !fds[1].revents().is_empty() {
                return;
            }
            if fds[0].revents().is_empty() {
                continue;
            }
            match listener.accept() {
                Ok((stream, _)) => self.answer(stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    output::error(&format!("hooks socket: {e}"));
                    return;
                }
            }
        }
    }

    /// One hook connection. Everything on it came from inside, so the session keeps sweeping
    /// its protected paths while it waits for the message and for room to answer: a
    /// connection that sends nothing, or never reads, holds up only itself.
    fn answer(&mut self, stream: UnixStream) {
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let mut message = Vec::new();
        let mut chunk = [0u8; 64 << 10];
        let complete = loop {
            if message.len() as u64 > MAX_MESSAGE || !self.wait_sweeping(&stream, true, deadline) {
                break false;
            }
            match (&stream).read(&mut chunk) {
                Ok(0) => break true,
                Ok(n) => {
                    message.extend_from_slice(&chunk[..n]);
                    if chunk[..n].contains(&b'\n') {
                        break true;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => break false,
            }
        };
        let line = message.split(|&b| b == b'\n').next().unwrap_or_default();
        let parsed = (complete && line.len() as u64 <= MAX_MESSAGE)
            .then(|| serde_json::from_slice::<Value>(line).ok())
            .flatten();
        let reply = match parsed {
            Some(message) => self.handle(&message),
            None => json!({"allow": false, "reason": "envgit: unreadable hook message"}),
        };
        let mut out = format!("{reply}\n").into_bytes();
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        while !out.is_empty() && self.wait_sweeping(&stream, false, deadline) {
            match (&stream).write(&out) {
                Ok(0) => return,
                Ok(n) => {
                    out.drain(..n);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return,
            }
        }
    }

    /// Waits until `stream` can be read (`read`) or written, sweeping the protected paths at
    /// the session's pace meanwhile; false once `deadline` has passed.
    fn wait_sweeping(
        &mut self,
        stream: &UnixStream,
        read: bool,
        deadline: std::time::Instant,
    ) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let flags = if read { PollFlags::IN } else { PollFlags::OUT };
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            let wait = left.min(Duration::from_millis(SWEEP_EVERY_MS as u64));
            let timeout = Timespec {
                tv_sec: wait.as_secs() as i64,
                tv_nsec: i64::from(wait.subsec_nanos()),
            };
            let mut fds = [PollFd::new(stream, flags)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => self.sweep_protected(),
                Ok(_) => return true,
                Err(_) => return false,
            }
        }
    }
}
