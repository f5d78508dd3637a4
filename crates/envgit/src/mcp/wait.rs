//! Waiting for a cell: interrupted (again and again) when the client cancels, parked when it
//! asks a 2026-07-28 client ("MRTR": the call returns an input-required result with a token,
//! the client retries it with the answer and the cell goes on), refused its question when
//! nobody answers, and recorded when it ends.

use std::sync::Arc;
use std::time::Duration;

use envgit_gate::Answer;
use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, InputRequiredResult};
use rmcp::service::RequestContext;

use super::approver::{self, Parked};
use super::error::ExecuteError;
use super::running::Running;
use super::server::Inner;
use super::tool::{ExecuteArgs, tool_error};

/// How often a cancelled cell is interrupted again until it has ended.
const REINTERRUPT: Duration = Duration::from_millis(20);

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

impl Inner {
    /// Wait for the cell; park it when it asks a 2026-07-28 client (the client retries with the
    /// answer); record the step when it ends.
    pub(super) async fn drive(
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

    async fn park(self: &Arc<Self>, mut run: Running, ask: Parked) -> CallToolResponse {
        let Some(request) = approver::input_request(&ask.ask.summary, &ask.ask.rule) else {
            let _ = ask
                .reply
                .send(Answer::refused("the approval form could not be built"));
            return Box::pin(self.drive(run, None)).await;
        };
        let token = match crate::runtime::random_token() {
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
    pub(super) async fn resume(
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
}
