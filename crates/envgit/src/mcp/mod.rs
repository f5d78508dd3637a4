//! `envgit mcp`: a stdio MCP server with one tool, `execute`, running JavaScript cells in an
//! envgit-repl session. Every call is a step of kind `repl`: its code, downstream
//! calls with their decisions, bytes in and out, and status, with a snapshot of the project.
//!
//! The life of a call, file by file:
//! - `server`: the shared state and the MCP handler;
//! - `tool`: the `execute` tool's schema, description and arguments;
//! - `running`: one call in flight, from its step opened to its step committed;
//! - `start`: its step opened, a rewind followed, its session and approver chosen, its cell run;
//! - `session`: the named REPL sessions and whose turn it is;
//! - `rewind`: sessions rebuilt when the project was rewound under them;
//! - `approver`: how a downstream tool's `ask` is put to the person (MCP elicitation);
//! - `wait`: the cell waited for, interrupted when cancelled, parked on a question;
//! - `recording`: the step committed;
//! - `render`: the text, footer and `_meta` the call returns;
//! - `downstream`, `feed`, `bridge`, `typescript`: the downstream servers, their requests
//!   through the gate, the bridge to a URL server, and their tools' declarations.

mod approver;
pub mod bridge;
mod downstream;
mod error;
pub(crate) mod feed;
mod recording;
mod render;
mod rewind;
mod running;
mod server;
mod session;
mod start;
mod tool;
mod typescript;
mod wait;

pub use downstream::Downstreams;
pub use server::{ExecuteServer, Recorder};
