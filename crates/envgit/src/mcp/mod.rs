//! `envgit mcp`: a stdio MCP server with one tool, `execute`, running JavaScript cells in an
//! envgit-repl session (DESIGN §7). Every call is a step of kind `repl`: its code, downstream
//! calls with their decisions, bytes in and out, and status, with a snapshot of the project.

mod approver;
pub mod bridge;
mod downstream;
mod error;
pub(crate) mod feed;
mod typescript;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envgit_policy::ApproversSection;
use envgit_repl::{CellOptions, CellOutcome, CellStatus, Limits, Session};
use envgit_store::{
    Approval, ReplCall, ReplRecord, Step, StepDraft, StepFlag, StepKind, Store, ToolDecision,
    WorkTree,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InputRequiredResult, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use approver::{Approver, ParkedAsk};
pub use downstream::Downstreams;
use envgit_gate::Answer;
use error::ExecuteError;

use crate::project::Project;

/// A step is flagged `low-return` when it read at least this much…
pub const LOW_RETURN_MIN_IN: u64 = 64 * 1024;
/// …and returned at most this percentage of it.
pub const LOW_RETURN_PERCENT: u64 = 1;
/// Live sessions at most; a new name beyond this is refused.
const MAX_SESSIONS: usize = 16;
const DEFAULT_SESSION: &str = "default";
/// How often a cancelled cell is interrupted again until it has ended.
const REINTERRUPT: Duration = Duration::from_millis(20);

/// What a step needs to be recorded: the store and the working tree with its stat cache.
pub struct Recorder {
    pub project: Project,
    pub store: Store,
    pub wt: WorkTree,
    /// The protected paths as `envgit mcp` found them, before any downstream server started:
    /// every step puts back what differs (a server's `mv .git .g` included).
    pub copy: envgit_store::ProtectedCopy,
}

/// The `execute` server (cheap to clone: the state is shared).
#[derive(Clone)]
pub struct ExecuteServer(Arc<Inner>);

struct Inner {
    recorder: Arc<Mutex<Recorder>>,
    policy_hash: String,
    downstreams: Arc<Downstreams>,
    sessions: tokio::sync::Mutex<HashMap<String, Arc<Live>>>,
    limits: Limits,
    seeds: AtomicU32,
    description: String,
    /// Per session: (step, journal cells after it), to rebuild the session as of a step.
    marks: Mutex<HashMap<String, Vec<(u64, usize)>>>,
    /// The newest step this server has seen.
    seen: AtomicU64,
    approvers: ApproversSection,
    /// Cells waiting for a 2026-07-28 client to answer a question, by request state.
    parked: tokio::sync::Mutex<HashMap<String, Running>>,
    /// Numbers the cells, so an interrupt names the cell it is for.
    cells: AtomicU64,
}

/// A live session and whose turn it is.
///
/// [`Session::interrupt`] raises one flag per session, and [`Session::execute`] lowers it as it
/// takes a cell. When a client gives up on a call it sends `notifications/cancelled` and, at
/// once, its next call: if that next cell was handed to the session while the cancelled one
/// still ran, it lowered the flag before the running cell saw it, and the cancelled cell ran
/// to its timeout (the test's 1-in-5 flake; rmcp delivered the cancellation every time). So
/// here a call takes its session's turn before its cell starts and gives it back once its
/// step is committed (so a session's steps are also numbered in the order of its cells), an
/// interrupt reaches a cell only while it runs, and it is repeated until the cell ends (it can
/// land just before `execute` lowers the flag for the cell it was meant for).
struct Live {
    session: Session,
    /// Held by a call (in its [`Running`]) from before its cell starts until its step is
    /// committed; handed out first come, first served.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// The cell running now (0: none).
    running: Mutex<u64>,
}

impl Live {
    fn new(session: Session) -> Arc<Self> {
        Arc::new(Live {
            session,
            turn: Arc::new(tokio::sync::Mutex::new(())),
            running: Mutex::new(0),
        })
    }

    /// Runs cell number `id`; its call holds the turn.
    async fn execute(
        &self,
        id: u64,
        code: &str,
        opts: &CellOptions,
        host: Arc<dyn envgit_repl::Host>,
    ) -> Result<CellOutcome, ExecuteError> {
        self.set_running(id);
        let r = self.session.execute(code, opts, host).await;
        self.set_running(0);
        Ok(r?)
    }

    fn set_running(&self, id: u64) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = id;
    }

    /// Interrupts cell `id` if it is the one running (an interrupt that comes as the cell ends
    /// must not reach the next one; one that comes before it runs is repeated by the caller).
    fn interrupt(&self, id: u64) {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if *running == id {
            self.session.interrupt();
        }
    }
}

/// One `execute` in flight: its open step, the cell's task, what it logged.
struct Running {
    session_name: String,
    code: String,
    started: u64,
    step: crate::step::OpenStep,
    log: Arc<Mutex<Vec<ReplCall>>>,
    approvals: Arc<Mutex<Vec<Approval>>>,
    rewound: Option<String>,
    task: Option<tokio::task::JoinHandle<Result<CellOutcome, ExecuteError>>>,
    /// Why the cell could not start.
    early: Option<ExecuteError>,
    asks: mpsc::UnboundedReceiver<ParkedAsk>,
    session: Option<Arc<Live>>,
    /// The session's turn, from before the cell starts until the step is committed.
    turn: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// The cell's number (for [`Live::interrupt`]).
    cell: u64,
    /// The question the parked cell waits on.
    pending: Option<ParkedAsk>,
    client: String,
}

/// Drop a parked cell nobody answered: refuse its question, let it end, record the step.
fn expire(
    inner: Arc<Inner>,
    token: String,
    after: Duration,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        tokio::time::sleep(after).await;
        let run = inner.parked.lock().await.remove(&token);
        if let Some(mut run) = run {
            if let Some(p) = run.pending.take() {
                let _ = p.reply.send(Answer::refused(format!(
                    "no answer within {} s",
                    after.as_secs()
                )));
            }
            let _ = inner.drive(run, None).await;
        }
    })
}

/// 128 random bits, hex: an unguessable handle (the supervisor's getrandom helper).
pub(crate) fn random_token() -> crate::failure::CmdResult<String> {
    crate::runtime::random_token()
}

impl ExecuteServer {
    pub fn new(recorder: Recorder, downstreams: Downstreams, limits: Limits) -> Self {
        ExecuteServer(Arc::new(Inner::new(recorder, downstreams, limits)))
    }

    /// After the client went away: stop the downstream servers and wait for them. Requests
    /// they made after the last step (a server's own work, its exit) become one last step.
    pub async fn shutdown(&self) {
        self.0.sessions.lock().await.clear();
        let rest = self.0.downstreams.shutdown().await;
        if !rest.is_empty()
            && let Err(e) = self.0.record_rest(rest).await
        {
            crate::output::error(&format!(
                "recording the downstream servers' last requests: {e}"
            ));
        }
    }
}

impl Inner {
    /// The step of what the downstream servers requested after the last `execute`.
    async fn record_rest(&self, events: Vec<envgit_gate::GateEvent>) -> Result<(), ExecuteError> {
        let started = events
            .iter()
            .map(|e| e.at_ms)
            .min()
            .unwrap_or_else(envgit_store::now_ms);
        let (requests, refusals, approvals) = crate::supervisor::requests_of(&events);
        let draft = StepDraft {
            kind: Some(StepKind::Repl),
            started_at_ms: started,
            summary: format!(
                "mcp servers after the last execute: {} request(s)",
                requests.len()
            ),
            policy_hash: Some(self.policy_hash.clone()),
            requests,
            refusals,
            approvals,
            ..Default::default()
        };
        let recorder = self.recorder.clone();
        tokio::task::spawn_blocking(move || -> Result<(), ExecuteError> {
            let mut r = recorder
                .lock()
                .map_err(|_| ExecuteError::RecorderPoisoned)?;
            let Recorder {
                store, wt, copy, ..
            } = &mut *r;
            store.catch_up()?;
            let mut step = crate::step::begin(store, "mcp servers after the last execute")?;
            finish_repl_step(&mut step, store, wt, copy, draft)?;
            drop(step);
            let _ = wt.save_index(store);
            Ok(())
        })
        .await
        .map_err(ExecuteError::task("recording"))?
    }

    fn new(recorder: Recorder, downstreams: Downstreams, limits: Limits) -> Self {
        let policy_hash = recorder.project.policy.hash();
        let index = downstreams.index();
        let description = description(&index, &limits);
        let seen = recorder.store.head().map(|s| s.number).unwrap_or(0);
        let approvers = recorder.project.policy.approvers.clone();
        Inner {
            recorder: Arc::new(Mutex::new(recorder)),
            policy_hash,
            downstreams: Arc::new(downstreams),
            sessions: tokio::sync::Mutex::new(HashMap::new()),
            limits,
            seeds: AtomicU32::new(seed_base()),
            description,
            marks: Mutex::new(HashMap::new()),
            seen: AtomicU64::new(seen),
            approvers,
            parked: tokio::sync::Mutex::new(HashMap::new()),
            cells: AtomicU64::new(0),
        }
    }

    async fn session(&self, name: &str) -> Result<Arc<Live>, ExecuteError> {
        let mut sessions = self.sessions.lock().await;
        if let Some(s) = sessions.get(name) {
            return Ok(s.clone());
        }
        if sessions.len() >= MAX_SESSIONS {
            return Err(ExecuteError::TooManySessions {
                max: MAX_SESSIONS,
                names: sessions.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
        let seed = self.seeds.fetch_add(0x9e37_79b9, Ordering::Relaxed);
        let s =
            Live::new(Session::new(&self.downstreams.catalog, self.limits.clone(), seed).await?);
        sessions.insert(name.to_string(), s.clone());
        Ok(s)
    }

    /// When a step committed since we last looked is a rewind (from any terminal), every
    /// session goes back to its state as of the rewind's target, rebuilt by replaying its
    /// journal up to there (downstream results from the journal, never sent again). Returns a
    /// note for the model.
    async fn follow_rewinds(&self, steps: &[(u64, Option<u64>)]) -> Option<String> {
        let seen = self.seen.load(Ordering::SeqCst);
        let target = steps
            .iter()
            .filter(|(n, _)| *n > seen)
            .filter_map(|(_, t)| *t)
            .next_back()?;
        if let Some(head) = steps.last() {
            self.seen.fetch_max(head.0, Ordering::SeqCst);
        }
        let mut sessions = self.sessions.lock().await;
        let names: Vec<String> = sessions.keys().cloned().collect();
        let mut notes = Vec::new();
        for name in names {
            let keep = self
                .marks
                .lock()
                .ok()
                .and_then(|m| {
                    m.get(&name)
                        .and_then(|v| v.iter().rev().find(|(step, _)| *step <= target).copied())
                })
                .map(|(_, cells)| cells)
                .unwrap_or(0);
            let Some(old) = sessions.remove(&name) else {
                continue;
            };
            let mut journal = old.session.journal();
            drop(old);
            journal.cells.truncate(keep);
            let replayed = journal
                .cells
                .iter()
                .filter(|c| c.status == CellStatus::Ok)
                .count();
            match Session::replay(&journal, self.limits.clone()).await {
                Ok(fresh) => {
                    sessions.insert(name.clone(), Live::new(fresh));
                    notes.push(format!("session {name}: {replayed} cell(s) replayed"));
                }
                Err(e) => notes.push(format!(
                    "session {name} could not be rebuilt ({e}) and starts empty"
                )),
            }
            if let Ok(mut m) = self.marks.lock()
                && let Some(v) = m.get_mut(&name)
            {
                v.retain(|(step, _)| *step <= target);
            }
        }
        Some(format!(
            "the project was rewound to step {target}; the REPL went back with it ({})",
            if notes.is_empty() {
                "no sessions".to_string()
            } else {
                notes.join("; ")
            }
        ))
    }

    /// Open the step, follow a rewind, pick the session and the approver, and start the cell.
    async fn start(
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
            tokio::task::spawn_blocking(move || {
                let mut r = recorder
                    .lock()
                    .map_err(|_| ExecuteError::RecorderPoisoned)?;
                r.store.catch_up()?;
                let steps: Vec<(u64, Option<u64>)> = r
                    .store
                    .steps()
                    .iter()
                    .map(|s| (s.number, s.target.filter(|_| s.kind == StepKind::Rewind)))
                    .collect();
                let step = crate::step::begin(&r.store, &what)?;
                Ok::<_, ExecuteError>((step, steps))
            })
            .await
            .map_err(ExecuteError::task("step opening"))
            .and_then(|r| r)
        };
        let (step, steps) =
            guard.map_err(|e| tool_error(format!("envgit could not open a step: {e}")))?;
        let rewound = self.follow_rewinds(&steps).await;
        let client = context
            .client_info()
            .map(|i| format!("{} {}", i.name, i.version))
            .unwrap_or_else(|| "unnamed client".into());
        let (tx, asks) = mpsc::unbounded_channel();
        let timeout = Duration::from_secs(self.approvers.timeout.max(1));
        let elicits = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        let modern = context
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        let approver = if !self.approvers.mcp_elicitation {
            Approver::Refuse(
                "approvers.mcp_elicitation is false in envgit.yaml, so envgit does not ask \
                 through the MCP client (set it to true to be asked there)"
                    .into(),
            )
        } else if !elicits {
            Approver::Refuse(format!(
                "the MCP client ({client}) does not support elicitation, so nobody could be asked"
            ))
        } else if modern {
            Approver::Park { tx, timeout }
        } else {
            Approver::Legacy {
                peer: context.peer.clone(),
                client: client.clone(),
                timeout,
            }
        };
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
        match self.session(&session_name).await {
            Err(e) => run.early = Some(e),
            Ok(session) => {
                run.turn = Some(session.turn.clone().lock_owned().await);
                let host = Arc::new(downstream::CellHost {
                    downstreams: self.downstreams.clone(),
                    log,
                    approvals,
                    approver,
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

    /// Wait for the cell; park it when it asks a 2026-07-28 client (the client retries with the
    /// answer); record the step when it ends.
    async fn drive(
        self: &Arc<Self>,
        mut run: Running,
        context: Option<&RequestContext<RoleServer>>,
    ) -> CallToolResponse {
        let outcome = match run.task.take() {
            None => Err(run.early.take().unwrap_or(ExecuteError::NotStarted)),
            Some(mut task) => {
                let mut armed = context.is_some();
                // Cancelled: interrupt now and again until the cell has ended (see `Live`).
                let mut interrupting = false;
                loop {
                    let cancelled = async move {
                        match context {
                            _ if interrupting => tokio::time::sleep(REINTERRUPT).await,
                            Some(c) if armed => c.ct.cancelled().await,
                            _ => std::future::pending::<()>().await,
                        }
                    };
                    tokio::select! {
                        // A cell that has ended wins over a cancellation that came with its end.
                        biased;
                        r = &mut task => {
                            break r
                                .map_err(ExecuteError::task("cell"))
                                .and_then(|r| r);
                        }
                        Some(ask) = run.asks.recv() => {
                            if context.is_none() {
                                // Expired while parked: nobody can be asked any more.
                                let _ = ask.reply.send(Answer::refused(
                                    "the client never answered the earlier question",
                                ));
                                continue;
                            }
                            run.task = Some(task);
                            return self.park(run, ask).await;
                        }
                        _ = cancelled => {
                            armed = false;
                            interrupting = true;
                            if let Some(s) = &run.session {
                                s.interrupt(run.cell);
                            }
                        }
                    }
                }
            }
        };
        self.finish(run, outcome).await.into()
    }

    async fn park(self: &Arc<Self>, mut run: Running, ask: ParkedAsk) -> CallToolResponse {
        let Some(request) = approver::input_request(&ask.what, &ask.rule) else {
            let _ = ask
                .reply
                .send(Answer::refused("the approval form could not be built"));
            return Box::pin(self.drive(run, None)).await;
        };
        let token = match crate::mcp::random_token() {
            Ok(t) => t,
            Err(e) => {
                let _ = ask.reply.send(Answer::refused(e.message));
                return Box::pin(self.drive(run, None)).await;
            }
        };
        run.pending = Some(ask);
        self.parked.lock().await.insert(token.clone(), run);
        tokio::spawn(expire(
            self.clone(),
            token.clone(),
            Duration::from_secs(self.approvers.timeout.max(1)),
        ));
        let mut requests = std::collections::BTreeMap::new();
        requests.insert(approver::FIELD.to_string(), request);
        CallToolResponse::InputRequired(InputRequiredResult::new(Some(requests), Some(token)))
    }

    /// The retry of a parked call (2026-07-28): answer the question, continue the cell.
    async fn resume(
        self: &Arc<Self>,
        token: &str,
        args: &ExecuteArgs,
        responses: Option<&rmcp::model::InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let Some(mut run) = self.parked.lock().await.remove(token) else {
            return tool_error(
                "this approval is unknown or has expired (the step was recorded without it): \
                 run the cell again"
                    .into(),
            )
            .into();
        };
        if run.code != args.code {
            self.parked.lock().await.insert(token.to_string(), run);
            return tool_error(
                "the retried call's code differs from the call that asked: retry it unchanged"
                    .into(),
            )
            .into();
        }
        match responses.and_then(|r| r.get(approver::FIELD)) {
            None => {
                // No answer: ask again.
                let Some(ask) = run.pending.take() else {
                    return Box::pin(self.drive(run, Some(context))).await;
                };
                self.park(run, ask).await
            }
            Some(v) => {
                let answer = approver::read_answer(v, &run.client);
                if let Some(p) = run.pending.take() {
                    let _ = p.reply.send(answer);
                }
                Box::pin(self.drive(run, Some(context))).await
            }
        }
    }

    /// Record the step and build the result.
    async fn finish(
        &self,
        run: Running,
        outcome: Result<CellOutcome, ExecuteError>,
    ) -> CallToolResult {
        let Running {
            session_name,
            code,
            started,
            mut step,
            log,
            approvals,
            rewound,
            turn,
            ..
        } = run;
        let calls: Vec<ReplCall> = log.lock().map(|l| l.clone()).unwrap_or_default();
        let mut approvals: Vec<Approval> = approvals.lock().map(|l| l.clone()).unwrap_or_default();
        // The downstream servers' own requests since the last step (DESIGN §5): the servers
        // this cell called are flushed first, so what they requested for it is here.
        let called: BTreeSet<&str> = calls
            .iter()
            .filter(|c| c.decision != ToolDecision::Deny)
            .map(|c| c.server.as_str())
            .collect();
        let events = self.downstreams.gate_events(&called).await;
        let (requests, refusals, gate_approvals) = crate::supervisor::requests_of(&events);
        approvals.extend(gate_approvals);
        let (status, text, is_error, truncated) = render(&outcome);
        let bytes_in: u64 = calls.iter().map(|c| c.bytes_in).sum();
        let bytes_out = text.len() as u64;
        let mut flags = Vec::new();
        if low_return(bytes_in, bytes_out) {
            flags.push(StepFlag::LowReturn);
        }
        let record = ReplRecord {
            session: session_name.clone(),
            code: code.clone(),
            status: status.to_string(),
            error: outcome
                .as_ref()
                .err()
                .map(ExecuteError::to_string)
                .or_else(|| outcome.as_ref().ok().and_then(|o| o.error.clone())),
            bytes_in,
            bytes_out,
            calls: calls.clone(),
            truncated_chars: truncated,
        };
        let draft = StepDraft {
            kind: Some(StepKind::Repl),
            started_at_ms: started,
            summary: summary(&session_name, &code, bytes_in, bytes_out),
            policy_hash: Some(self.policy_hash.clone()),
            flags,
            approvals,
            requests,
            refusals,
            repl: Some(record),
            ..Default::default()
        };
        let recorder = self.recorder.clone();
        let step = tokio::task::spawn_blocking(move || -> Result<Step, ExecuteError> {
            let mut r = recorder
                .lock()
                .map_err(|_| ExecuteError::RecorderPoisoned)?;
            let Recorder {
                store, wt, copy, ..
            } = &mut *r;
            let committed = finish_repl_step(&mut step, store, wt, copy, draft)?;
            drop(step);
            let _ = wt.save_index(store);
            Ok(committed)
        })
        .await
        .map_err(ExecuteError::task("recording"))
        .and_then(|r| r);
        if let Ok(s) = &step {
            self.seen.fetch_max(s.number, Ordering::SeqCst);
            let cells = match self.sessions.lock().await.get(&session_name) {
                Some(sess) => sess.session.journal_len(),
                None => 0,
            };
            if let Ok(mut m) = self.marks.lock() {
                m.entry(session_name.clone())
                    .or_default()
                    .push((s.number, cells));
            }
        }
        // The session's next cell may start (its journal length above is this step's).
        drop(turn);
        let (footer, step_no, is_error) = match &step {
            Ok(s) => (
                format!(
                    "[step {} · session {session_name} · read {} in {} call{} · returned {}{}]",
                    s.number,
                    crate::output::size(bytes_in),
                    calls.len(),
                    if calls.len() == 1 { "" } else { "s" },
                    crate::output::size(bytes_out),
                    if s.has_flag(StepFlag::LowReturn) {
                        " · low-return"
                    } else {
                        ""
                    }
                ),
                Some(s.number),
                is_error,
            ),
            Err(e) => (
                format!("[envgit could not record this step: {e}]"),
                None,
                true,
            ),
        };
        let text = match rewound {
            Some(note) if text.is_empty() => format!("(note: {note})"),
            Some(note) => format!("(note: {note})\n{text}"),
            None => text,
        };
        let body = if text.is_empty() {
            footer
        } else {
            format!("{text}\n{footer}")
        };
        let mut result = if is_error {
            CallToolResult::error(vec![ContentBlock::text(body)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(body)])
        };
        let mut meta = serde_json::Map::new();
        meta.insert("envgit/step".into(), json!(step_no));
        meta.insert("envgit/session".into(), json!(session_name));
        meta.insert("envgit/status".into(), json!(status));
        meta.insert("envgit/bytesIn".into(), json!(bytes_in));
        meta.insert("envgit/bytesOut".into(), json!(bytes_out));
        result.meta = Some(MetaObject(meta));
        result
    }
}

fn seed_base() -> u32 {
    (envgit_store::now_ms() as u32) ^ std::process::id().rotate_left(16)
}

pub fn low_return(bytes_in: u64, bytes_out: u64) -> bool {
    bytes_in >= LOW_RETURN_MIN_IN && bytes_out * 100 <= bytes_in * LOW_RETURN_PERCENT
}

/// `(status, text, is_error, characters cut)`.
fn render(outcome: &Result<CellOutcome, ExecuteError>) -> (&'static str, String, bool, u64) {
    match outcome {
        Err(e) => ("error", format!("envgit: {e}"), true, 0),
        Ok(o) => {
            let mut text = o.text.clone();
            if let Some(e) = &o.error {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(e);
            }
            if o.wrapped {
                text.push_str(
                    "\n(note: the cell has a top-level `return`, so it ran as a function and its \
                     declarations do not persist; end with an expression instead)",
                );
            }
            if let Some(n) = &o.notice {
                text.push_str(&format!("\n(note: {n})"));
            }
            (
                o.status.as_str(),
                text,
                o.status != CellStatus::Ok,
                o.truncated_chars as u64,
            )
        }
    }
}

fn summary(session: &str, code: &str, bytes_in: u64, bytes_out: u64) -> String {
    let first = code
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut line: String = first.chars().take(60).collect();
    if first.chars().count() > 60 || code.lines().filter(|l| !l.trim().is_empty()).count() > 1 {
        line.push('…');
    }
    let mut s = format!("execute[{session}] {line}");
    if bytes_in > 0 {
        s.push_str(&format!(
            "  (in {}, out {})",
            crate::output::size(bytes_in),
            crate::output::size(bytes_out)
        ));
    }
    s
}

fn tool_error(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

struct ExecuteArgs {
    code: String,
    session: Option<String>,
    timeout_ms: Option<u64>,
}

fn parse_args(args: Option<&serde_json::Map<String, Value>>) -> Result<ExecuteArgs, String> {
    let empty = serde_json::Map::new();
    let args = args.unwrap_or(&empty);
    for k in args.keys() {
        if !["code", "session", "timeout_ms"].contains(&k.as_str()) {
            return Err(format!(
                "unknown argument `{k}`; execute takes code, session, timeout_ms"
            ));
        }
    }
    let code = match args.get("code") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("`code` must be a string of JavaScript".into()),
        None => return Err("`code` is required: the JavaScript to run".into()),
    };
    let session = match args.get("session") {
        None | Some(Value::Null) => None,
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= 64
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
        {
            Some(s.clone())
        }
        Some(_) => {
            return Err("`session` must be a name of 1-64 letters, digits, `-` or `_`".into());
        }
    };
    let timeout_ms = match args.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            _ => return Err("`timeout_ms` must be a positive integer (milliseconds)".into()),
        },
    };
    Ok(ExecuteArgs {
        code,
        session,
        timeout_ms,
    })
}

fn description(index: &str, limits: &Limits) -> String {
    let tools = if index.is_empty() {
        "No downstream MCP servers are configured (mcp.servers in envgit.yaml).".to_string()
    } else {
        format!(
            "Downstream servers, as globals of async functions `server.tool(args)`: {index}. \
             `tools.list()`, `tools.search(words)` and `tools.describe(\"server.tool\")` (its \
             TypeScript declaration) show what exists."
        )
    };
    format!(
        "Run JavaScript in a sandboxed REPL (QuickJS). The value of the last expression is \
         returned, with anything printed by console.log. Top-level await works. Declarations \
         persist between calls of the same `session` (omit it for the default session; a new \
         name starts a fresh one). There is no filesystem, network, require, process or timers: \
         the only way out is the tool functions. {tools} Helpers: sample(x, n), schema(x), \
         assert(cond, msg). Keep what you return small: filter and summarise in code. Limits: \
         {} s per call by default (timeout_ms, up to {} s), {} MiB heap, {} characters of \
         output. Every call is recorded as an envgit step.",
        limits.timeout.as_secs(),
        limits.max_timeout.as_secs(),
        limits.memory >> 20,
        limits.output_chars
    )
}

fn execute_tool(description: &str) -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "JavaScript to run; the value of the last expression is returned"},
            "session": {"type": "string", "description": "REPL session name; omit for the default session"},
            "timeout_ms": {"type": "integer", "minimum": 1, "description": "wall-clock budget of this call in milliseconds"}
        },
        "required": ["code"],
        "additionalProperties": false
    });
    let schema = match schema {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    let mut tool = Tool::new("execute", description.to_string(), Arc::new(schema));
    let mut ann = ToolAnnotations::default();
    ann.read_only_hint = Some(false);
    ann.open_world_hint = Some(true);
    tool.annotations = Some(ann);
    tool
}

impl ServerHandler for ExecuteServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(
                "envgit: one tool, `execute`, runs JavaScript that calls the allowed MCP servers \
                 as functions; every call is a recorded step.",
            );
        info.server_info = Implementation::new("envgit", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![execute_tool(
            &self.0.description,
        )]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == "execute").then(|| execute_tool(&self.0.description))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != "execute" {
            return Err(McpError::invalid_params(
                format!("no tool `{}`; the only tool is `execute`", request.name),
                None,
            ));
        }
        let args = match parse_args(request.arguments.as_ref()) {
            Ok(a) => a,
            Err(e) => return Ok(tool_error(e).into()),
        };
        if let Some(token) = request.request_state.as_deref() {
            return Ok(self
                .0
                .resume(token, &args, request.input_responses.as_ref(), &context)
                .await);
        }
        match self.0.start(args, &context).await {
            Ok(run) => Ok(self.0.drive(run, Some(&context)).await),
            Err(e) => Ok(e.into()),
        }
    }
}

/// Ends an `execute`'s step (or the downstream servers' last one): the downstream servers ran
/// in the sandbox, so the protected paths are put back from the session's copy, and the tree
/// is compared with the newest step's (repositories made inside the project).
fn finish_repl_step(
    step: &mut crate::step::OpenStep,
    store: &mut envgit_store::Store,
    wt: &mut envgit_store::WorkTree,
    copy: &envgit_store::ProtectedCopy,
    draft: StepDraft,
) -> crate::failure::CmdResult<Step> {
    let before = store.head().and_then(|h| h.tree);
    step.finish(
        store,
        crate::step::Snapshot::Scan(wt, None),
        Some(crate::step::Sandboxed {
            protected: &[],
            copy: Some(copy),
            git: None,
            before,
        }),
        draft,
    )
}
