//! `ask` for a downstream tool: the MCP client's [`Approver`], a question to the person through
//! MCP elicitation, in whichever form the client speaks: a server-sent `elicitation/create` (2025-11-25 and before), or an
//! input-required result the client answers by retrying the call (2026-07-28, "MRTR"). The form
//! has one required field, approve or deny, with no default: an empty form, which some clients
//! accept by themselves, cannot say yes.

use std::time::Duration;

use envgit_gate::{Answer, Approver, AskFuture, PendingAsk};
use envgit_policy::ApproversSection;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema, InputRequest};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// An `ask` parked until a 2026-07-28 client retries its call with the answer (handed to the
/// `execute` handler, which returns an input-required result meanwhile), and where the answer
/// goes.
pub struct Parked {
    pub ask: PendingAsk,
    pub reply: oneshot::Sender<Answer>,
}

/// A downstream tool call as a question: `CALL server/tool`, summarised
/// `server.tool(ARGUMENTS)`, the arguments being what the call does (the agent's code chose
/// them; the person must see them to know what they approve). They are shown as the JSON that
/// is sent, control and direction-changing characters escaped, and cut at [`ARGS_SHOWN`]
/// characters with the rest counted. It has no body, and no control channel lists it (the
/// client's form is the only way to answer).
pub fn tool_ask(server: &str, tool: &str, args: &Value, rule: &str) -> PendingAsk {
    let json = args.to_string();
    let shown = shown_args(&json);
    PendingAsk {
        id: 0,
        method: "CALL".into(),
        host: server.into(),
        path: format!("/{tool}"),
        rule: rule.into(),
        summary: format!("{server}.{tool}({shown})"),
        body_hash: blake3::hash(json.as_bytes()).to_hex().to_string(),
        body_preview: shown,
        asked_at_ms: envgit_store::now_ms(),
        expires_at_ms: 0,
    }
}

/// Characters of a call's arguments a question shows.
pub const ARGS_SHOWN: usize = 2000;

/// The arguments as the person reads them: controls and the characters that reorder or hide
/// text (bidirectional overrides, zero-width) escaped, cut with what was left out counted.
fn shown_args(json: &str) -> String {
    let hidden = |c: char| c.is_control() || envgit_policy::is_hiding(c);
    let mut out = String::new();
    let total = json.chars().count();
    for (count, c) in json.chars().enumerate() {
        if count >= ARGS_SHOWN {
            out.push_str(&format!(
                "… [{} more characters not shown: deny unless you know what they hold]",
                total - count
            ));
            break;
        }
        if hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// How a cell's `ask` is put to the person.
#[derive(Clone)]
pub enum Elicitation {
    /// No way to ask: refused, with the reason.
    Refuse(String),
    /// A legacy client: a server-sent `elicitation/create`.
    Legacy {
        peer: Peer<RoleServer>,
        client: String,
        timeout: Duration,
    },
    /// A 2026-07-28 client: the handler returns an input-required result.
    Park {
        tx: mpsc::UnboundedSender<Parked>,
        timeout: Duration,
    },
}

pub const FIELD: &str = "decision";

fn form_schema() -> Option<ElicitationSchema> {
    serde_json::from_value(json!({
        "type": "object",
        "properties": {
            FIELD: {
                "type": "string",
                "title": "Decision",
                "description": "approve lets this one call go; deny refuses it",
                "enum": ["approve", "deny"]
            }
        },
        "required": [FIELD]
    }))
    .ok()
}

pub fn message(what: &str, rule: &str) -> String {
    format!(
        "envgit: the agent's code wants to call the tool {what} (rule {rule}). Approve this one call?"
    )
}

/// The `elicitation/create` request of an input-required result.
pub fn input_request(what: &str, rule: &str) -> Option<InputRequest> {
    let schema = serde_json::to_value(form_schema()?).ok()?;
    serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message(what, rule), "requestedSchema": schema}
    }))
    .ok()
}

/// Read an elicitation result (as JSON): approved only on `accept` with `decision: approve`.
pub fn read_answer(result: &Value, client: &str) -> Answer {
    let action = result.get("action").and_then(Value::as_str).unwrap_or("");
    let decision = result
        .get("content")
        .and_then(|c| c.get(FIELD))
        .and_then(Value::as_str)
        .unwrap_or("");
    elicited(action == "accept" && decision == "approve", client)
}

/// The person answered through the client's form.
fn elicited(approved: bool, client: &str) -> Answer {
    let by = format!("mcp-elicitation ({client})");
    if approved {
        Answer::Approved { by }
    } else {
        Answer::Refused { by }
    }
}

impl Elicitation {
    /// How this call's asks are put: refused when `approvers.mcp_elicitation` is off or the
    /// client cannot elicit, parked for a 2026-07-28 client, a server-sent request otherwise.
    pub fn choose(
        approvers: &ApproversSection,
        context: &RequestContext<RoleServer>,
        client: &str,
        tx: mpsc::UnboundedSender<Parked>,
    ) -> Elicitation {
        let timeout = Duration::from_secs(approvers.timeout.max(1));
        let elicits = context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        let modern = context
            .protocol_version()
            .is_some_and(|v| !v.has_initialize());
        if !approvers.mcp_elicitation {
            Elicitation::Refuse(
                "approvers.mcp_elicitation is false in envgit.yaml, so envgit does not ask \
                 through the MCP client (set it to true to be asked there)"
                    .into(),
            )
        } else if !elicits {
            Elicitation::Refuse(format!(
                "the MCP client ({client}) does not support elicitation, so nobody could be asked"
            ))
        } else if modern {
            Elicitation::Park { tx, timeout }
        } else {
            Elicitation::Legacy {
                peer: context.peer.clone(),
                client: client.to_string(),
                timeout,
            }
        }
    }

    async fn answer(&self, ask: &PendingAsk) -> Answer {
        let (what, rule) = (ask.summary.as_str(), ask.rule.as_str());
        match self {
            Elicitation::Refuse(reason) => Answer::refused(reason.clone()),
            Elicitation::Legacy {
                peer,
                client,
                timeout,
            } => {
                let Some(schema) = form_schema() else {
                    return Answer::refused("the approval form could not be built");
                };
                let params = ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: message(what, rule),
                    requested_schema: schema,
                };
                match peer
                    .create_elicitation_with_timeout(params, Some(*timeout))
                    .await
                {
                    Ok(r) => elicited(
                        r.action == ElicitationAction::Accept
                            && r.content.as_ref().and_then(|c| c.get(FIELD))
                                == Some(&json!("approve")),
                        client,
                    ),
                    Err(e) => Answer::refused(format!("the elicitation failed: {e}")),
                }
            }
            Elicitation::Park { tx, timeout } => {
                let (reply, rx) = oneshot::channel();
                let parked = Parked {
                    ask: ask.clone(),
                    reply,
                };
                if tx.send(parked).is_err() {
                    return Answer::refused("the call that asked has ended");
                }
                match tokio::time::timeout(*timeout, rx).await {
                    Ok(Ok(a)) => a,
                    Ok(Err(_)) => {
                        Answer::refused("the question was abandoned (no answer came back)")
                    }
                    // Said in seconds rather than as `timeout`, as steps recorded it before.
                    Err(_) => Answer::refused(format!("no answer within {} s", timeout.as_secs())),
                }
            }
        }
    }
}

/// The client's form answers the call that asked, so the answer comes from here (naming the
/// client), not over a control channel.
impl Approver for Elicitation {
    fn ask<'a>(&'a self, ask: &'a PendingAsk) -> AskFuture<'a> {
        Box::pin(self.answer(ask))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_question_shows_the_arguments_escaped_and_says_what_it_cut() {
        let ask = tool_ask(
            "gh",
            "create_issue",
            &json!({"title": "a\u{202e}b\u{1b}[2J"}),
            "mcp.tools.gh.*",
        );
        assert_eq!(
            ask.summary,
            "gh.create_issue({\"title\":\"a\\u{202e}b\\u001b[2J\"})"
        );
        let long = tool_ask("gh", "t", &json!({"x": "y".repeat(5000)}), "r");
        assert!(
            long.summary.contains("more characters not shown"),
            "{}",
            long.summary
        );
        assert!(long.summary.chars().count() < ARGS_SHOWN + 200);
    }
}
