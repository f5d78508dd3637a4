//! The parsed policy. Field order and map types are part of the policy hash (`hash.rs`):
//! maps are `BTreeMap`s so the order keys were written in never matters.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::size::{GIB, MIB};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    pub version: u32,
    pub env: EnvSection,
    pub network: NetworkSection,
    /// Evaluated in order; the first matching rule decides.
    pub irreversible: Vec<IrreversibleEntry>,
    pub approvers: ApproversSection,
    pub filesystem: FilesystemSection,
    pub shell: Vec<ShellRule>,
    pub snapshot: SnapshotSection,
    pub mcp: McpSection,
}

impl Default for Policy {
    /// What a file holding only `version: 1` means. A missing `irreversible` key keeps the
    /// default preset (safe by default); `irreversible: []` is how to switch it off.
    fn default() -> Self {
        Policy {
            version: 1,
            env: EnvSection::default(),
            network: NetworkSection::default(),
            irreversible: vec![IrreversibleEntry::Preset {
                preset: Preset::Default,
                action: Action::Deny,
            }],
            approvers: ApproversSection::default(),
            filesystem: FilesystemSection::default(),
            shell: Vec::new(),
            snapshot: SnapshotSection::default(),
            mcp: McpSection::default(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnvSection {
    /// Variable names let into the sandbox beside the safe defaults.
    pub pass: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetworkSection {
    /// `host`, `host:port`, `[v6]:port`, or a glob like `*.pythonhosted.org`: every entry's
    /// host, whether written as a string or as a map with options.
    pub allow: Vec<String>,
    /// The options of entries written as maps (`{ host, raw, websocket }`), keyed by the host
    /// as it appears in `allow`; an entry without options has none here. Left out of the
    /// hash when empty, so policies without options keep their hash.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allow_options: BTreeMap<String, AllowOptions>,
    /// Per-host request restrictions, keyed by host as written.
    pub l7: BTreeMap<String, L7Rule>,
    /// Hosts tunnelled without TLS interception.
    pub passthrough: Vec<String>,
}

/// What a `network.allow` entry lets through beyond TLS and HTTP.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AllowOptions {
    /// Raw TCP (a database, a server that speaks first), uninspected. Valid only on a
    /// loopback or private-address `host:port` entry with an explicit port.
    pub raw: bool,
    /// WebSocket upgrades; the frames after the upgrade are not inspected.
    pub websocket: bool,
}

/// A request to the host is permitted when its method and its path both match; an empty list
/// means "any".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct L7Rule {
    /// Upper-cased.
    pub methods: Vec<String>,
    /// Path globs (`*` within a segment, `**` across segments).
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IrreversibleEntry {
    /// Expands in place to the preset's rules, each with `action` (default `deny`).
    Preset { preset: Preset, action: Action },
    Net {
        rule: NetRule,
        action: Action,
        /// Rule name shown in refusals and the log; the caller picks one when absent.
        id: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    Default,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Deny,
    Ask,
    Allow,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetRule {
    /// Matches any port unless written `host:port`.
    pub host: String,
    /// Upper-cased; empty means any method.
    pub methods: Vec<String>,
    /// Path glob; `None` means any path.
    pub path: Option<String>,
    /// Query parameters that must all be present with these values (values may be globs).
    pub query: BTreeMap<String, String>,
    /// Body matchers; all that are given must hold. `None` means the body is not looked at.
    pub body: Option<BodyMatch>,
}

/// What a `net` rule asks of the request body (a bounded prefix, see
/// [`crate::BODY_PREFIX_MAX`]). A body that cannot be evaluated (not read, cut short where the
/// matcher needs all of it, unparseable) fails closed: a `deny`/`ask` rule matches; an `allow`
/// rule does not decide (a later rule still may), and marks the request when none does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BodyMatch {
    /// The GraphQL operation that could run: `query`/`operationName` from the query string
    /// and the body (JSON object or batch, `application/graphql`, a form); a mutation in
    /// either counts. A persisted query (no query text) cannot be evaluated.
    pub graphql_operation: Option<GraphqlOperation>,
    /// Top-level JSON fields and the values they must have (`*` globs; non-strings compare as
    /// their JSON text).
    pub json_field: BTreeMap<String, String>,
    /// Form fields (`application/x-www-form-urlencoded` or `multipart/form-data`) and values.
    pub form_field: BTreeMap<String, String>,
    /// `true`: the body carries git receive-pack commands (`old new ref`); `false`: it carries
    /// none (e.g. git's `0000` probe).
    pub pktline_commands: Option<bool>,
    /// The whole body is exactly this text.
    pub body_exact: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphqlOperation {
    Query,
    Mutation,
    Subscription,
}

/// Who may answer an `ask`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApproversSection {
    /// A prompt on envgit's own terminal, when no agent UI owns it.
    pub terminal: bool,
    /// `envgit approve` / `envgit deny` from another terminal.
    pub socket: bool,
    /// The agent's MCP client asking the user; off by default because the agent's UI sits
    /// between the question and the person. Never used for irreversible rules.
    pub mcp_elicitation: bool,
    /// Seconds an `ask` waits before it becomes a `deny`.
    pub timeout: u64,
}

impl Default for ApproversSection {
    fn default() -> Self {
        ApproversSection {
            terminal: true,
            socket: true,
            mcp_elicitation: false,
            timeout: 120,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilesystemSection {
    /// Extra paths made unreadable (`~/` is the home; globs allowed).
    pub deny_read: Vec<String>,
    /// Extra writable paths outside the project.
    pub allow_write: Vec<String>,
    /// Names of programs (libraries, Python and Perl modules) a step may put in a writable
    /// directory of the person's `PATH` (`LD_LIBRARY_PATH`, `PYTHONPATH`, `PERL5LIB`) ahead
    /// of the host's own (`tsc` in a venv or `node_modules/.bin`); any other is removed after
    /// the step.
    pub allow_shadowing: Vec<String>,
    /// The built-in masks; only `default` exists.
    pub preset: Preset,
}

impl Default for FilesystemSection {
    fn default() -> Self {
        FilesystemSection {
            deny_read: Vec::new(),
            allow_write: Vec::new(),
            allow_shadowing: Vec::new(),
            preset: Preset::Default,
        }
    }
}

/// A command-line prefix rule: an early, readable refusal (the gate is the real control).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShellRule {
    pub action: ShellAction,
    pub prefixes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellAction {
    Deny,
    Ask,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotSection {
    /// gitignore-style patterns; nothing is excluded unless listed.
    pub exclude: Vec<String>,
    /// Bytes; larger files are recorded as markers.
    pub max_file_size: u64,
    /// Bytes; gc keeps the store under this.
    pub budget: u64,
}

impl Default for SnapshotSection {
    fn default() -> Self {
        SnapshotSection {
            exclude: Vec::new(),
            max_file_size: 100 * MIB,
            budget: 20 * GIB,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct McpSection {
    pub servers: BTreeMap<String, McpServer>,
    /// Tool-name glob (`server.tool`) to action.
    pub tools: BTreeMap<String, Action>,
}

/// A downstream MCP server: a program started in the sandbox (`command`, `args`, `env`), or a
/// remote one (`url`, Streamable HTTP) reached from the sandbox through the gate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct McpServer {
    /// Empty for a remote server.
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl McpServer {
    /// What the server is, for messages: its command or its URL.
    pub fn describe(&self) -> &str {
        self.url.as_deref().unwrap_or(&self.command)
    }
}
