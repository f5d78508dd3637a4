//! `envgit mcp-bridge URL`: a remote (`url:`) server of `mcp.servers`, seen by `envgit mcp` as
//! one more stdio server. It runs inside the sandbox like the stdio servers do, so its
//! Streamable HTTP requests leave through the sandbox's proxy and the gate judges each one
//! (and terminates its TLS with the run's CA, which the sandbox trusts) like any other request.
//!
//! Only tools cross the bridge: that is all `envgit mcp` asks of a downstream server.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams, ResultType,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ErrorData as McpError, Peer, RoleClient, RoleServer, ServerHandler, ServiceExt};

use super::error::BridgeError;

struct Bridge {
    remote: Peer<RoleClient>,
    info: ServerConfig,
}

fn remote_error(e: rmcp::ServiceError) -> McpError {
    McpError::internal_error(format!("the remote MCP server: {e}"), None)
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        self.info.clone()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self
            .remote
            .list_tools(request)
            .await
            .map_err(remote_error)?;
        // A result from an older-era remote has no result type; newer clients require one.
        tools.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(tools)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut result = self.remote.call_tool(request).await.map_err(remote_error)?;
        result.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(result.into())
    }
}

/// Connects to `url`, then serves MCP on stdin/stdout until `envgit mcp` closes it.
pub async fn run(url: &str) -> Result<(), BridgeError> {
    // reqwest is built without a TLS provider of its own: use the one the gate uses (ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let remote: RunningService<RoleClient, ()> =
        ().serve(StreamableHttpClientTransport::from_uri(url))
            .await
            .map_err(|source| BridgeError::Unreachable {
                url: url.to_string(),
                source: Box::new(source),
            })?;
    let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
    if let Some(peer) = remote.peer_info() {
        if let Some(server) = peer.server_info.clone() {
            info.server_info = server;
        }
        info.instructions = peer.instructions.clone();
    }
    let bridge = Bridge {
        remote: remote.peer().clone(),
        info,
    };
    let served = bridge
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| BridgeError::Handshake(Box::new(e)))?;
    let _ = served.waiting().await;
    let _ = remote.cancel().await;
    Ok(())
}
