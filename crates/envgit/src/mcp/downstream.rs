//! The downstream MCP servers of `mcp.servers`: started once per `envgit mcp`, their tools
//! listed, the allowed ones turned into the REPL's [`Catalog`], and every call a cell makes
//! decided by `mcp.tools` on the host before it is sent. Each server's own network requests
//! come back through its [`Feed`] and are recorded on the REPL steps (see `feed`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envgit_gate::{Approver, GateEvent};
use envgit_policy::{Action, McpSection, McpServer};
use envgit_repl::{
    Catalog, Host, HostCall, HostFuture, HostReply, Namespace, TAKEN_GLOBALS, ToolEntry,
    is_identifier, sanitize_identifier,
};
use envgit_store::{Approval, ApprovalAnswer, ReplCall, ToolDecision};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{Peer, RoleClient, ServiceExt};

use super::approver::tool_ask;
use super::error::DownstreamError;
use super::feed::{Feed, Feeds, flush_deadline};
use super::typescript;

/// Time a downstream server gets to start and list its tools.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Time one downstream call gets.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

struct Server {
    peer: Peer<RoleClient>,
    /// Taken at shutdown, to close the transport and wait for the server to exit.
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, ()>>>,
    /// Wire name → tool, allowed or asked (denied ones are left out).
    tools: BTreeMap<String, Tool>,
    /// What the server's gate records.
    feed: Feed,
}

pub struct Downstreams {
    servers: BTreeMap<String, Server>,
    policy: McpSection,
    pub catalog: Catalog,
    feeds: Feeds,
}

impl Downstreams {
    /// Pidfds of the servers' sandboxes, when every server has said its own; else why not.
    pub fn sandboxes(&self) -> Result<super::feed::Sandboxes, String> {
        let sandboxes = self.feeds.sandboxes();
        let said = sandboxes.lock().unwrap_or_else(|p| p.into_inner()).len();
        if said < self.servers.len() {
            return Err(format!(
                "{} of the {} downstream servers' sandboxes have not said where they are yet",
                self.servers.len() - said,
                self.servers.len()
            ));
        }
        Ok(sandboxes)
    }

    pub fn none(policy: McpSection) -> Self {
        Downstreams {
            servers: BTreeMap::new(),
            policy,
            catalog: Catalog::default(),
            feeds: Feeds::new(),
        }
    }

    /// Start every server of `mcp.servers` (in `project`) and build the catalog. A server that
    /// cannot start is an error naming it: the policy asked for it.
    pub async fn start(policy: &McpSection, project: &Path) -> Result<Self, DownstreamError> {
        let mut out = Downstreams::none(policy.clone());
        for (name, spec) in &policy.servers {
            let ns = namespace_name(name)?;
            let (events, feed) = out.feeds.open().map_err(|source| DownstreamError::Feed {
                name: name.clone(),
                source,
            })?;
            let server =
                tokio::time::timeout(START_TIMEOUT, start_one(name, spec, project, &events))
                    .await
                    .map_err(|_| DownstreamError::StartTimeout {
                        name: name.clone(),
                        command: spec.describe().to_string(),
                        secs: START_TIMEOUT.as_secs(),
                    })??;
            let mut tools = BTreeMap::new();
            let mut entries = Vec::new();
            let mut taken: BTreeMap<String, String> = BTreeMap::new();
            for tool in server.1 {
                let wire = tool.name.to_string();
                let (action, _) = policy.decide_tool(name, &wire);
                if action == Action::Deny {
                    continue;
                }
                let js = sanitize_identifier(&wire);
                if let Some(other) = taken.insert(js.clone(), wire.clone()) {
                    return Err(DownstreamError::ToolClash {
                        name: name.clone(),
                        other,
                        wire,
                        js: format!("{ns}.{js}"),
                    });
                }
                let description = tool.description.as_deref().unwrap_or("").to_string();
                let ts = typescript::declaration(
                    &js,
                    Some(&description),
                    &tool.input_schema,
                    tool.output_schema.as_deref(),
                );
                entries.push(ToolEntry {
                    name: js,
                    wire: wire.clone(),
                    description: description.lines().next().unwrap_or("").to_string(),
                    ts: format!("// {ns}.{}\n{ts}", sanitize_identifier(&wire)),
                });
                tools.insert(wire, tool);
            }
            out.catalog.namespaces.push(Namespace {
                name: ns,
                server: name.clone(),
                tools: entries,
            });
            out.servers.insert(
                name.clone(),
                Server {
                    peer: server.0.peer().clone(),
                    service: tokio::sync::Mutex::new(Some(server.0)),
                    tools,
                    feed,
                },
            );
        }
        Ok(out)
    }

    /// One line per server for the tool description: `name (N tools)`.
    pub fn index(&self) -> String {
        self.catalog
            .namespaces
            .iter()
            .map(|n| format!("{} ({} tools)", n.name, n.tools.len()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The requests the servers made through their gates since the last take, for the step
    /// about to be committed. `called` are the servers the step's cell called: they are asked
    /// to send what their gates hold first (bounded wait), so the requests they made for those
    /// calls are on this step. The others are not waited for: what they did on their own
    /// arrives by their feeds' poll, within a poll interval.
    pub async fn gate_events(&self, called: &BTreeSet<&str>) -> Vec<GateEvent> {
        let mut asked = Vec::new();
        for name in called {
            if let Some(s) = self.servers.get(*name)
                && let Some(n) = s.feed.ask().await
            {
                asked.push((&s.feed, n));
            }
        }
        if !asked.is_empty() {
            let deadline = flush_deadline();
            for (feed, n) in asked {
                feed.flushed(n, deadline).await;
            }
        }
        self.feeds.take()
    }

    /// Close every server's stdin and wait for it to exit (then SIGTERM, then kill): nothing
    /// of a server outlives `envgit mcp`. Returns the requests they made that no step took.
    pub async fn shutdown(&self) -> Vec<GateEvent> {
        for s in self.servers.values() {
            let service = s.service.lock().await.take();
            if let Some(mut service) = service {
                let _ = service.close().await;
            }
        }
        for s in self.servers.values() {
            s.feed.drain().await;
        }
        self.feeds.take()
    }

    /// Decide and make one call. Returns the reply for the REPL and the record for the step.
    async fn call(
        &self,
        call: HostCall,
        approver: &dyn Approver,
        approvals: &Mutex<Vec<Approval>>,
    ) -> (HostReply, ReplCall) {
        let started = Instant::now();
        let bytes_out = call.args.to_string().len() as u64;
        let mut rec = ReplCall {
            server: call.server.clone(),
            tool: call.tool.clone(),
            decision: ToolDecision::Unknown,
            bytes_out,
            ..ReplCall::default()
        };
        let (action, rule) = self.policy.decide_tool(&call.server, &call.tool);
        let rule = rule
            .map(|g| format!("mcp.tools.{g}"))
            .unwrap_or_else(|| envgit_policy::RULE_MCP_DEFAULT.into());
        let what = format!("{}.{}", call.server, call.tool);
        let reply = match action {
            Action::Deny => {
                rec.decision = ToolDecision::Deny;
                Err(format!("envgit: denied tool {what} (rule {rule})"))
            }
            Action::Ask => {
                rec.decision = ToolDecision::Ask;
                let ask = tool_ask(&call.server, &call.tool, &call.args, &rule);
                let answer = approver.ask(&ask).await;
                if let Ok(mut a) = approvals.lock() {
                    a.push(Approval {
                        what: format!("tool {}", ask.summary),
                        rule: rule.clone(),
                        approver: answer.by().to_owned(),
                        answer: if answer.is_approved() {
                            ApprovalAnswer::Approved
                        } else {
                            ApprovalAnswer::Refused
                        },
                        at_ms: envgit_store::now_ms(),
                    });
                }
                if answer.is_approved() {
                    self.send(&call, &mut rec).await
                } else {
                    Err(format!(
                        "envgit: tool {what} needs a person's approval (rule {rule}) and did not \
                         get it: {}",
                        answer.by()
                    ))
                }
            }
            Action::Allow => {
                rec.decision = ToolDecision::Allow;
                self.send(&call, &mut rec).await
            }
        };
        rec.is_error = reply.is_err();
        rec.ms = started.elapsed().as_millis() as u64;
        (reply, rec)
    }

    async fn send(&self, call: &HostCall, rec: &mut ReplCall) -> HostReply {
        let Some(server) = self.servers.get(&call.server) else {
            return Err(format!("no MCP server `{}` in mcp.servers", call.server));
        };
        if !server.tools.contains_key(&call.tool) {
            return Err(format!(
                "server `{}` has no tool `{}`; tools.list() shows the tools",
                call.server, call.tool
            ));
        }
        let args = match &call.args {
            serde_json::Value::Object(m) => m.clone(),
            serde_json::Value::Null => serde_json::Map::new(),
            other => {
                return Err(format!(
                    "arguments must be an object, found {}",
                    match other {
                        serde_json::Value::Array(_) => "an array",
                        serde_json::Value::String(_) => "a string",
                        _ => "a scalar",
                    }
                ));
            }
        };
        let params = CallToolRequestParams::new(call.tool.clone()).with_arguments(args);
        let result = match tokio::time::timeout(CALL_TIMEOUT, server.peer.call_tool(params)).await {
            Err(_) => {
                return Err(format!(
                    "no answer within {} s (cancelled)",
                    CALL_TIMEOUT.as_secs()
                ));
            }
            Ok(Err(e)) => return Err(format!("the server failed: {e}")),
            Ok(Ok(r)) => r,
        };
        rec.bytes_in = serde_json::to_string(&result)
            .map(|s| s.len() as u64)
            .unwrap_or(0);
        unwrap_result(result)
    }
}

/// The REPL's view of a result: `structuredContent` if present; else the text when every
/// block is text; else the content array. `isError` becomes a rejection with the text.
fn unwrap_result(result: CallToolResult) -> HostReply {
    let texts: Option<Vec<&str>> = result
        .content
        .iter()
        .map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        return Err(match texts {
            Some(t) if !t.is_empty() => t.join("\n"),
            _ => "the tool reported an error".into(),
        });
    }
    if let Some(s) = result.structured_content {
        return Ok(s);
    }
    match texts {
        Some(t) => Ok(serde_json::Value::String(t.join("\n"))),
        None => serde_json::to_value(&result.content).map_err(|e| e.to_string()),
    }
}

fn namespace_name(name: &str) -> Result<String, DownstreamError> {
    if !is_identifier(name) || TAKEN_GLOBALS.contains(&name) {
        return Err(DownstreamError::BadName {
            name: name.to_string(),
            taken: TAKEN_GLOBALS.join(", "),
        });
    }
    Ok(name.to_string())
}

async fn start_one(
    name: &str,
    spec: &McpServer,
    project: &Path,
    events: &Path,
) -> Result<(RunningService<RoleClient, ()>, Vec<Tool>), DownstreamError> {
    // Through `envgit mcp --downstream NAME`, which runs it in the sandbox behind the gate.
    let exe = std::env::current_exe().map_err(DownstreamError::OwnBinary)?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("mcp")
        .arg("--project")
        .arg(project)
        .arg("--downstream")
        .arg(name)
        .arg("--events")
        .arg(events)
        // So that it dies with this process (see `commands::mcp::die_with_parent`).
        .arg("--parent")
        .arg(std::process::id().to_string())
        .current_dir(project);
    let transport = TokioChildProcess::new(cmd).map_err(|source| DownstreamError::Spawn {
        name: name.to_string(),
        command: spec.describe().to_string(),
        source,
    })?;
    let client =
        ().serve(transport)
            .await
            .map_err(|source| match &spec.url {
                Some(url) => DownstreamError::Unreachable {
                    name: name.to_string(),
                    url: url.clone(),
                    source: Box::new(source),
                },
                None => DownstreamError::NotMcp {
                    name: name.to_string(),
                    command: spec.command.to_string(),
                    source: Box::new(source),
                },
            })?;
    let tools = client
        .list_all_tools()
        .await
        .map_err(|source| DownstreamError::ListTools {
            name: name.to_string(),
            source,
        })?;
    Ok((client, tools))
}

/// The host one cell talks to: the downstream servers, and a log of its calls for the step.
pub struct CellHost {
    pub downstreams: Arc<Downstreams>,
    pub log: Arc<Mutex<Vec<ReplCall>>>,
    pub approvals: Arc<Mutex<Vec<Approval>>>,
    pub approver: Arc<dyn Approver>,
}

impl Host for CellHost {
    fn call(&self, call: HostCall) -> HostFuture {
        let downstreams = self.downstreams.clone();
        let log = self.log.clone();
        let approvals = self.approvals.clone();
        let approver = self.approver.clone();
        Box::pin(async move {
            let (reply, rec) = downstreams.call(call, approver.as_ref(), &approvals).await;
            if let Ok(mut l) = log.lock() {
                l.push(rec);
            }
            reply
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A denied tool is refused on the host even when a call reaches it (the REPL never
    /// injects it; this is the second wall), and nothing is sent.
    #[tokio::test]
    async fn denied_and_unknown_tools_are_refused_on_the_host() {
        let mut policy = McpSection::default();
        policy.tools.insert("fx.delete_*".into(), Action::Deny);
        policy.tools.insert("fx.create_*".into(), Action::Ask);
        let d = Downstreams::none(policy);
        let approvals = Mutex::new(Vec::new());
        let refuse = crate::mcp::approver::Elicitation::Refuse("no approver in this test".into());
        let call = |tool: &str| HostCall {
            server: "fx".into(),
            tool: tool.into(),
            args: serde_json::json!({}),
        };
        let (reply, rec) = d.call(call("delete_all"), &refuse, &approvals).await;
        assert_eq!(rec.decision, "deny");
        assert!(
            reply
                .unwrap_err()
                .contains("denied tool fx.delete_all (rule mcp.tools.fx.delete_*)")
        );
        let (reply, rec) = d.call(call("create_issue"), &refuse, &approvals).await;
        assert_eq!(rec.decision, "ask");
        assert!(reply.unwrap_err().contains("no approver in this test"));
        assert_eq!(approvals.lock().unwrap()[0].answer, "refused");
        let (reply, rec) = d.call(call("read"), &refuse, &approvals).await;
        assert_eq!(rec.decision, "allow");
        assert!(reply.unwrap_err().contains("no MCP server `fx`"));
    }

    #[test]
    fn a_server_name_that_is_not_a_javascript_name_is_refused_naming_its_entry() {
        let e = namespace_name("my-server").unwrap_err();
        assert!(matches!(e, DownstreamError::BadName { .. }));
        let msg = e.to_string();
        assert!(msg.starts_with("mcp.servers.my-server: "), "{msg}");
        assert!(msg.ends_with("rename it"), "{msg}");
        assert!(namespace_name("console").is_err());
        assert_eq!(namespace_name("github").unwrap(), "github");
    }
}
