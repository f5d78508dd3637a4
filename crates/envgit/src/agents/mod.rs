//! The agents envgit attaches to, one file each: they only decide where steps
//! begin and end; every step goes through `crate::step` and every request through the gate.
//!
//! - `claude`: `envgit claude`, the whole `claude` process in the sandbox and gate, a step per
//!   tool call (`tool_steps`, fed by `claude_hook` inside), its credential kept outside
//!   (`claude_login`);
//! - `codex`: `envgit codex`, envgit as Codex's only exec-server (`crates/envgit-codex`);
//! - `copilot`: `envgit hooks install copilot` and the hooks it installs: recorded, with
//!   obvious command lines refused, not enforced at the request;
//! - `tool_call`: what a tool call of any of them reads as, and what envgit refuses in one.
//!
//! `envgit mcp` (any MCP client) has its own module, `crate::mcp`.

pub(crate) mod claude;
mod claude_hook;
mod claude_login;
pub(crate) mod codex;
pub(crate) mod copilot;
mod tool_call;
mod tool_steps;

use std::path::Path;
use std::process::ExitCode;

use crate::cli::{HookAgent, HookArgs};
use crate::failure::CmdResult;

/// `envgit hook claude|copilot EVENT`: what the installed hooks run, with the event on stdin.
pub fn hook(dir: Option<&Path>, args: &HookArgs) -> CmdResult<ExitCode> {
    match args.agent {
        HookAgent::Claude => Ok(claude_hook::run(dir, &args.event)),
        HookAgent::Copilot => copilot::hook(dir, args),
    }
}
