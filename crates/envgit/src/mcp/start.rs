//! Starting an `execute`: its step opened, a rewind followed, its session and approver
//! chosen, and its cell started on the session.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envgit_repl::CellOptions;
use envgit_store::StepKind;
use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use tokio::sync::mpsc;

use super::approver::Elicitation;
use super::downstream;
use super::error::ExecuteError;
use super::feed::Sandboxes;
use super::running::Running;
use super::server::Inner;
use super::session::DEFAULT_SESSION;
use super::tool::{ExecuteArgs, tool_error};
use crate::supervisor::SandboxStarted;

impl Inner {
    /// Open the step, follow a rewind, pick the session and the approver, and start the cell.
    pub(super) async fn start(
        self: &Arc<Self>,
        args: ExecuteArgs,
        context: &RequestContext<RoleServer>,
    ) -> Result<Running, CallToolResult> {
        let session_name = args.session.unwrap_or_else(|| DEFAULT_SESSION.to_string());
        let started = envgit_store::now_ms();
        // The step is open from here: `rewind` refuses meanwhile, concurrent steps are flagged.
        let guard = {
            let recorder = self.recorder.clone();
            let what = format!("repl {session_name}");
            let sandboxes = self.downstreams.sandboxes();
            tokio::task::spawn_blocking(move || {
                let mut r = recorder
                    .lock()
                    .map_err(|_| ExecuteError::RecorderPoisoned)?;
                r.store.catch_up()?;
                let r = &mut *r;
                // The downstream servers' sandboxes were set up when the session began: a
                // secret they do not cover yet (a key the person saved into a new `.env`) is
                // masked in each, and files the person linked outside since (a `pnpm install`
                // in their own terminal) become the project's own copies. The scan finds what
                // was made since the last step's.
                r.wt.full_scan(&r.store, None)?;
                let held = held(sandboxes);
                crate::project_facts::before_session_call(
                    &r.project,
                    r.store.dir(),
                    &r.wt,
                    &mut r.cover,
                    held.as_ref()
                        .map(|(fds, started)| (fds.as_slice(), started.as_slice()))
                        .map_err(String::as_str),
                    "your MCP client starts `envgit mcp` again when it reconnects",
                )
                .map_err(|refused| ExecuteError::Step(refused.message))?;
                let steps: Vec<(u64, Option<u64>)> = r
                    .store
                    .steps()?
                    .iter()
                    .map(|s| (s.number, s.target.filter(|_| s.kind == StepKind::Rewind)))
                    .collect();
                let mut step = crate::step::begin(&r.store, &what)?;
                // The downstream servers write in the sandbox during the call: should envgit
                // die before its end, the next command checks the nested repositories
                // against the tree the call began from (best effort, as the record itself).
                if let Some(before) = r.store.head().and_then(|h| h.tree) {
                    let mut owed = r.project.owed_end(before);
                    owed.excluded_before = Some(r.excluded_before.clone());
                    let _ = step.guard().owe_end(owed);
                }
                Ok::<_, ExecuteError>((step, steps))
            })
            .await
            .map_err(ExecuteError::task("step opening"))
            .and_then(|r| r)
        };
        let (step, steps) =
            guard.map_err(|e| tool_error(format!("envgit could not open a step: {e}")))?;
        let rewound = self.sessions.follow_rewinds(&steps).await;
        let client = context
            .client_info()
            .map(|i| format!("{} {}", i.name, i.version))
            .unwrap_or_else(|| "unnamed client".into());
        let (tx, asks) = mpsc::unbounded_channel();
        let approver = Elicitation::choose(&self.approvers, context, &client, tx);
        let log = Arc::new(Mutex::new(Vec::new()));
        let approvals = Arc::new(Mutex::new(Vec::new()));
        let mut run = Running {
            session_name: session_name.clone(),
            code: args.code.clone(),
            started,
            step,
            log: log.clone(),
            approvals: approvals.clone(),
            rewound,
            task: None,
            early: None,
            asks,
            session: None,
            turn: None,
            cell: self.cells.fetch_add(1, Ordering::Relaxed) + 1,
            pending: None,
            client,
        };
        match self
            .sessions
            .get(&session_name, &self.downstreams.catalog)
            .await
        {
            Err(e) => run.early = Some(e),
            Ok(session) => {
                run.turn = Some(session.turn.clone().lock_owned().await);
                let host = Arc::new(downstream::CellHost {
                    downstreams: self.downstreams.clone(),
                    log,
                    approvals,
                    approver: Arc::new(approver),
                });
                let opts = CellOptions {
                    timeout: args.timeout_ms.map(Duration::from_millis),
                };
                let s = session.clone();
                let code = args.code;
                let cell = run.cell;
                run.task = Some(tokio::spawn(async move {
                    s.execute(cell, &code, &opts, host).await
                }));
                run.session = Some(session);
            }
        }
        Ok(run)
    }
}

/// The downstream servers' sandboxes, held for one call's check (their pidfds, and the homes
/// they see together); or why they cannot be.
fn held(
    sandboxes: Result<Sandboxes, String>,
) -> Result<(Vec<OwnedFd>, Vec<SandboxStarted>), String> {
    let sandboxes = sandboxes?;
    let said = sandboxes.lock().unwrap_or_else(|p| p.into_inner());
    let mut fds = Vec::new();
    let mut started = Vec::new();
    for (fd, theirs) in said.iter() {
        fds.push(fd.try_clone().map_err(|e| e.to_string())?);
        started.push(theirs.clone());
    }
    Ok((fds, started))
}
