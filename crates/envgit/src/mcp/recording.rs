//! Committing an `execute`'s step (its code, calls, approvals, the downstream servers'
//! requests, a snapshot) and the last step of what the servers requested after the last call.

use std::collections::BTreeSet;

use envgit_repl::CellOutcome;
use envgit_store::{
    Approval, ReplCall, ReplRecord, Step, StepDraft, StepFlag, StepKind, ToolDecision,
};
use rmcp::model::CallToolResult;

use super::error::ExecuteError;
use super::render::{Rendered, low_return, render, result, summary};
use super::running::Running;
use super::server::{Inner, Recorder};

impl Inner {
    /// The step of what the downstream servers requested after the last `execute`.
    pub(super) async fn record_rest(
        &self,
        events: Vec<envgit_gate::GateEvent>,
    ) -> Result<(), ExecuteError> {
        let started = events
            .iter()
            .map(|e| e.at_ms)
            .min()
            .unwrap_or_else(envgit_store::now_ms);
        let gate = crate::supervisor::requests_of(&events);
        let draft = StepDraft {
            kind: Some(StepKind::Repl),
            started_at_ms: started,
            summary: format!(
                "mcp servers after the last execute: {} request(s)",
                gate.requests.len()
            ),
            policy_hash: Some(self.policy_hash.clone()),
            requests: gate.requests,
            refusals: gate.refusals,
            approvals: gate.approvals,
            notes: gate.notes,
            ..Default::default()
        };
        let recorder = self.recorder.clone();
        tokio::task::spawn_blocking(move || -> Result<(), ExecuteError> {
            let mut r = recorder
                .lock()
                .map_err(|_| ExecuteError::RecorderPoisoned)?;
            r.store.catch_up()?;
            let step = crate::step::begin(&r.store, "mcp servers after the last execute")?;
            r.finish_repl_step(step, draft)?;
            Ok(())
        })
        .await
        .map_err(ExecuteError::task("recording"))?
    }

    /// Record the step and build the result.
    pub(super) async fn finish(
        &self,
        run: Running,
        outcome: Result<CellOutcome, ExecuteError>,
    ) -> CallToolResult {
        let Running {
            session_name,
            code,
            started,
            step,
            log,
            approvals,
            rewound,
            turn,
            ..
        } = run;
        let calls: Vec<ReplCall> = log.lock().map(|l| l.clone()).unwrap_or_default();
        let mut approvals: Vec<Approval> = approvals.lock().map(|l| l.clone()).unwrap_or_default();
        // The downstream servers' own requests since the last step: the servers
        // this cell called are flushed first, so what they requested for it is here.
        let called: BTreeSet<&str> = calls
            .iter()
            .filter(|c| c.decision != ToolDecision::Deny)
            .map(|c| c.server.as_str())
            .collect();
        let events = self.downstreams.gate_events(&called).await;
        let gate = crate::supervisor::requests_of(&events);
        approvals.extend(gate.approvals);
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
            requests: gate.requests,
            refusals: gate.refusals,
            notes: gate.notes,
            repl: Some(record),
            ..Default::default()
        };
        let recorder = self.recorder.clone();
        let step = tokio::task::spawn_blocking(move || -> Result<Step, ExecuteError> {
            let mut r = recorder
                .lock()
                .map_err(|_| ExecuteError::RecorderPoisoned)?;
            Ok(r.finish_repl_step(step, draft)?)
        })
        .await
        .map_err(ExecuteError::task("recording"))
        .and_then(|r| r);
        if let Ok(s) = &step {
            self.sessions.committed(&session_name, s.number).await;
        }
        // The session's next cell may start (its journal length above is this step's).
        drop(turn);
        result(Rendered {
            step: &step,
            session: &session_name,
            calls: calls.len(),
            bytes_in,
            bytes_out,
            status,
            text,
            is_error,
            rewound,
        })
    }
}

impl Recorder {
    /// Ends an `execute`'s step (or the downstream servers' last one): the downstream servers
    /// ran in the sandbox, so the protected paths are put back from the session's copy, and
    /// the tree is compared with the newest step's (repositories made inside the project);
    /// then the stat index is saved.
    fn finish_repl_step(
        &mut self,
        mut step: crate::step::OpenStep,
        draft: StepDraft,
    ) -> crate::failure::CmdResult<Step> {
        let Recorder {
            project,
            store,
            wt,
            copy,
            shadows,
            ..
        } = self;
        let before = store.head().and_then(|h| h.tree);
        let committed = step.finish(
            store,
            crate::step::Snapshot::Scan(wt, None),
            Some(crate::step::Sandboxed {
                protected: &[],
                copy: Some(copy),
                shadows: shadows.as_ref(),
                git: None,
                before,
                too_deep_before: &[],
                late: None,
                // The session's copy holds their code (`envgit mcp`'s start).
                excluded: Some(crate::excluded_repos::Excluded {
                    project,
                    copy: None,
                    unchanged: None,
                    roots_before: None,
                }),
            }),
            draft,
        )?;
        drop(step);
        let _ = wt.save_index(store);
        Ok(committed)
    }
}
