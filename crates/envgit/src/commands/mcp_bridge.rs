//! `envgit mcp-bridge URL` (hidden): what `envgit mcp` runs in the sandbox for a remote server
//! of `mcp.servers` (see `crate::mcp::bridge`).

use std::process::ExitCode;

use crate::cli::McpBridgeArgs;
use crate::failure::{CmdResult, Failure};

pub fn run(args: &McpBridgeArgs) -> CmdResult<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(crate::mcp::bridge::run(&args.url))
        .map_err(|e| Failure::failed(e.to_string()))?;
    Ok(ExitCode::SUCCESS)
}
