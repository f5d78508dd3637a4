//! The `execute` server: the state every call shares, and the MCP handler that hands each
//! call to a new cell ([`super::start`], then [`super::wait`]) or to the parked cell it answers.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use envgit_policy::ApproversSection;
use envgit_repl::Limits;
use envgit_store::{Store, WorkTree};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use super::downstream::Downstreams;
use super::running::Running;
use super::session::Sessions;
use super::tool::{description, execute_tool, parse_args, tool_error};
use crate::project::Project;

/// What a step needs to be recorded: the store and the working tree with its stat cache.
pub struct Recorder {
    pub project: Project,
    pub store: Store,
    pub wt: WorkTree,
    /// The protected paths as `envgit mcp` found them, before any downstream server started:
    /// every step puts back what differs (a server's `mv .git .g` included).
    pub copy: envgit_store::ProtectedCopy,
    /// The writable directories of the person's `PATH` as `envgit mcp` found them.
    pub shadows: Option<crate::path_shadow::PathShadows>,
    /// What the downstream servers' sandboxes hide, as found before they started.
    pub cover: crate::project_facts::SessionCover,
    /// The repositories in the excluded directories before any server started, whose code
    /// `copy` holds: what an interrupted call's end leaves armed.
    pub excluded_before: Vec<envgit_store::ExcludedRepositoryAt>,
}

/// The `execute` server (cheap to clone: the state is shared).
#[derive(Clone)]
pub struct ExecuteServer(Arc<Inner>);

pub(super) struct Inner {
    pub(super) recorder: Arc<Mutex<Recorder>>,
    pub(super) policy_hash: String,
    pub(super) downstreams: Arc<Downstreams>,
    pub(super) sessions: Sessions,
    description: String,
    pub(super) approvers: ApproversSection,
    /// Cells waiting for a 2026-07-28 client to answer a question, by request state.
    pub(super) parked: tokio::sync::Mutex<HashMap<String, Running>>,
    /// Numbers the cells, so an interrupt names the cell it is for.
    pub(super) cells: AtomicU64,
}

impl ExecuteServer {
    pub fn new(recorder: Recorder, downstreams: Downstreams, limits: Limits) -> Self {
        ExecuteServer(Arc::new(Inner::new(recorder, downstreams, limits)))
    }

    /// After the client went away: stop the downstream servers and wait for them. Requests
    /// they made after the last step (a server's own work, its exit) become one last step.
    pub async fn shutdown(&self) {
        self.0.sessions.clear().await;
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
            sessions: Sessions::new(limits, seen),
            description,
            approvers,
            parked: tokio::sync::Mutex::new(HashMap::new()),
            cells: AtomicU64::new(0),
        }
    }
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
            Err(e) => return Ok(tool_error(e.to_string()).into()),
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
