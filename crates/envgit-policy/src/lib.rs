//! `envgit.yaml`: schema, strict parsing with `file:line:col` errors, the policy hash, and
//! every decision made from it: may a connection be opened ([`decide_connect`], an address
//! vetted with [`vet_address`]), what a request is ([`RequestDecision`]: `l7`, then the
//! `irreversible` rules), what a shell command or an MCP tool call matches, which paths are
//! secret or protected; and which registry hosts a project needs ([`registries`]).
//!
//! Pure: no file or network I/O. Callers read the file and hand the text to [`Policy::parse`];
//! the gate, the sandbox and the agents' hooks ask the same functions, so they agree.

mod error;
mod glob;
mod hash;
mod mcp;
mod network;
mod node;
mod parse;
mod protected;
mod read;
pub mod registries;
mod request;
mod reserved;
mod schema;
mod secrets;
mod shell;
mod shown_text;
mod size;
mod template;

pub use error::PolicyError;
pub use mcp::RULE_MCP_DEFAULT;
pub use network::{
    ConnectDecision, RULE_ALLOW, RULE_IP_LITERAL, RULE_PORT22, RULE_PRIVATE, decide_connect,
    is_passthrough, is_special, loopback_forwards, raw_tcp_allowed, raw_tcp_allowed_for,
    resolved_private_reason, vet_address, websocket_allowed,
};
pub use protected::{
    PROTECTED_NAMES_BELOW, PROTECTED_PATHS, REPOSITORY_MARKERS, REPOSITORY_ROOT_PATHS,
    is_protected, name_matches, protected_below, repository_root_entry,
};
pub use request::{
    BODY_PREFIX_MAX, Decided, PathError, RequestDecision, RequestInfo, default_preset_ids,
    normalize_path,
};
pub use reserved::{RULE_UI_PORT, is_this_machine, names_this_machine, refuse_reserved};
pub use schema::{
    Action, AllowOptions, ApproversSection, BodyMatch, EnvSection, FilesystemSection,
    GraphqlOperation, IrreversibleEntry, L7Rule, McpSection, McpServer, NetRule, NetworkSection,
    Policy, Preset, ShellAction, ShellRule, SnapshotSection,
};
pub use secrets::{PROJECT_DENIES, is_env_file, is_secret_name};
pub use shell::{ShellMatch, command_line};
pub use shown_text::{escape_controls, is_hiding};
pub use size::{SizeError, parse_size};
pub use template::INIT_TEMPLATE;

#[cfg(test)]
mod tests;
