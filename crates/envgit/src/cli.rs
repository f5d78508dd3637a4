//! The command line. Every command has `--help`; those that print data have `--json`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::commands::step_ref::StepRef;

#[derive(Parser, Debug)]
#[command(
    name = "envgit",
    version = env!("ENVGIT_VERSION"),
    about = "Version control for the environment a coding agent works in",
    long_about = "Version control for the environment a coding agent works in.\n\n\
        After every step envgit keeps a content-addressed snapshot of the project and a record \
        of what the step did; `envgit rewind N` and `envgit fork N DIR` move through it.\n\n\
        The store lives outside the project, under $ENVGIT_HOME (else $XDG_DATA_HOME/envgit, \
        else ~/.local/share/envgit)."
)]
pub struct Cli {
    /// Run as if envgit was started in DIR.
    #[arg(short = 'C', global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Print `log`, `show` and `diff` straight to stdout instead of through a pager. Without
    /// it, on a terminal they go through $ENVGIT_PAGER, else $PAGER, else `less` (with
    /// LESS=FRX when LESS is unset), as git does; never when stdout is not a terminal or with
    /// --json.
    #[arg(long, global = true)]
    pub no_pager: bool,

    #[command(subcommand)]
    pub command: Command,
}

// `defer`: each command's arguments are built only when that command is parsed, so a start
// does not build the whole tree (cheaper start of every `envgit` a hook or agent runs).
#[derive(Subcommand, Debug)]
#[command(defer = true)]
pub enum Command {
    /// Make the current directory an envgit project: write a commented envgit.yaml and record
    /// step 1 (import).
    Init(InitArgs),
    /// Thirty seconds that show what envgit does: a scripted agent, a refused push, a rewind.
    Demo(DemoArgs),
    /// Run a command in the sandbox as one step: `envgit run -- CMD ARGS…`.
    Run(RunArgs),
    /// Record a step for the current state of the project.
    Record(RecordArgs),
    /// What each step did, newest first.
    Log(LogArgs),
    /// One step in detail.
    Show(ShowArgs),
    /// What step A did, or how step B differs from step A.
    Diff(DiffArgs),
    /// Make the project what it was after step N (itself a step, so it can be undone).
    Rewind(RewindArgs),
    /// Materialize step N into a new directory with a history of its own.
    Fork(ForkArgs),
    /// Verify every object and step of the store.
    Fsck(JsonArg),
    /// Check that this host can run envgit: one line per check, and for each failure the fix.
    Doctor(JsonArg),
    /// Prove that enforcement runs on this machine: a loopback upstream, and each way out
    /// of the sandbox and around the gate tried for real, one line per class (`ok`/`FAILED`).
    Selftest(SelftestArgs),
    /// One attack of `envgit selftest`, run inside the sandbox.
    #[command(name = "selftest-probe", hide = true)]
    SelftestProbe(SelftestProbeArgs),
    /// Keep the store under its disk budget; remove a captured secret from every snapshot.
    Gc(GcArgs),
    /// Where the history went on disk: packs, journal, the sandbox's home overlay (where a
    /// tool's files under ~ inside are on the host), steps in flight.
    Du(DuArgs),
    /// The requests running steps are holding until a person answers (`ask` rules).
    Status(JsonArg),
    /// Let a held request out: `envgit approve [ID]` (the only one waiting when no ID).
    Approve(AnswerArgs),
    /// Refuse a held request: `envgit deny [ID]`.
    Deny(AnswerArgs),
    /// Serve MCP on stdin/stdout: one tool, `execute`, a JavaScript REPL in which the MCP
    /// servers of envgit.yaml are functions; every call is a recorded step.
    Mcp(McpArgs),
    /// Run the Codex CLI with envgit as its only execution environment: every command is a step
    /// in the sandbox (`envgit codex exec 'fix the tests'`; all ARGS go to codex).
    Codex(CodexArgs),
    /// A remote MCP server (URL) as a stdio one, run in the sandbox by `envgit mcp`.
    #[command(name = "mcp-bridge", hide = true)]
    McpBridge(McpBridgeArgs),
    /// Codex's exec-server protocol on stdin/stdout (started by `envgit codex`).
    #[command(name = "codex-exec-server", hide = true)]
    CodexExecServer,
    /// Run the Claude Code CLI inside envgit's sandbox and gate, its own sandbox off
    /// (`envgit claude -p 'fix the tests'`; all ARGS go to claude).
    Claude(ClaudeArgs),
    /// Install or remove an agent's hooks: `envgit hooks install copilot [--user | --repo]`.
    Hooks(HooksArgs),
    /// What an installed hook runs (reads the agent's hook payload on stdin).
    #[command(hide = true)]
    Hook(HookArgs),
    /// Print a shell completion script: `envgit completions bash > ~/.local/share/bash-completion/completions/envgit`.
    Completions(CompletionsArgs),
    /// Write the man pages (envgit.1 and one per command) into a directory.
    Man(ManArgs),
    /// The history as a local web page: a timeline, each step's diff and requests, and
    /// Approve / Deny for held requests, live while a run goes on (`--export DIR` writes it
    /// as static files instead).
    Ui(UiArgs),
    /// Keep inotify watches on the project in a background daemon (git's fsmonitor idea), so
    /// that `envgit run` and `envgit rewind` read only what changed since the last step instead
    /// of walking the whole project: `envgit watch start | stop | status`.
    Watch(WatchArgs),
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    #[command(subcommand)]
    pub action: WatchAction,
}

#[derive(Subcommand, Debug)]
pub enum WatchAction {
    /// Start the project's daemon (detached); returns once it watches every directory.
    Start,
    /// Stop the project's daemon.
    Stop,
    /// Whether the project's daemon runs, and what it watches.
    Status(JsonArg),
    /// The daemon itself (what `start` runs in the background).
    #[command(hide = true)]
    Serve,
}

#[derive(Args, Debug)]
pub struct UiArgs {
    /// Listen on this port of 127.0.0.1 (a free one when not given).
    #[arg(long, value_name = "P")]
    pub port: Option<u16>,
    /// Open the link in the browser ($BROWSER, else xdg-open).
    #[arg(long)]
    pub open: bool,
    /// Print the link as JSON (`{"url":…,"port":…}`).
    #[arg(long)]
    pub json: bool,
    /// Write the pages and their data as static files into DIR (no server; masked files'
    /// content and request bodies are never included).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["port", "open"])]
    pub export: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// The directory to write the pages into (created if missing), e.g. ~/.local/share/man/man1.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct SelftestArgs {
    /// Only the few classes `envgit doctor` runs (a second or so).
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct SelftestProbeArgs {
    /// The attack and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct McpBridgeArgs {
    /// The server's Streamable HTTP endpoint.
    pub url: String,
}

#[derive(Args, Debug)]
pub struct JsonArg {
    /// Print data as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Add HOST, HOST:PORT or a glob to `network.allow` in the envgit.yaml written.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub allow: Vec<String>,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Keep everything (project, store, remote) in DIR instead of a removed temporary directory.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RecordKind {
    Record,
    Tool,
    Run,
    Repl,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// The kind of step.
    #[arg(long, value_enum, default_value = "record")]
    pub kind: RecordKind,
    /// What the step was (a command line, a tool call).
    #[arg(long, value_name = "TEXT")]
    pub summary: Option<String>,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct LogArgs {
    /// Detail: times, exit codes, flags, every file and request.
    #[arg(short, long)]
    pub verbose: bool,
    /// Show at most N steps.
    #[arg(short = 'n', long, value_name = "N")]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    #[arg(help = crate::commands::step_ref::HELP)]
    pub step: StepRef,
    /// Only these paths (files or directories), relative to the current directory as in git:
    /// `envgit show 4 -- src README.md`.
    #[arg(last = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// With one step: what it did. With two: how B differs from A. A step is a number, or
    /// relative to the newest: @ (the newest), @- (its parent), @--, @~3.
    pub a: StepRef,
    pub b: Option<StepRef>,
    /// Only these paths (files or directories), relative to the current directory as in git:
    /// `envgit diff @ -- src`.
    #[arg(last = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Only the list of changed paths.
    #[arg(long)]
    pub stat: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct RewindArgs {
    /// The step to go back (or forward) to: a number, or relative to the newest: @ (the
    /// newest), @- (its parent), @--, @~3.
    pub step: StepRef,
    /// Also bring back envgit.yaml and the protected files as they were at step N.
    #[arg(long)]
    pub restore_policy: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The step to materialize: a number, or relative to the newest: @ (the newest), @- (its
    /// parent), @--, @~3.
    pub step: StepRef,
    /// The new project's directory: created if missing, refused if not empty.
    pub target: PathBuf,
    /// Give the fork step N's envgit.yaml instead of the current one.
    #[arg(long)]
    pub restore_policy: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct DuArgs {
    /// Every project of this envgit home, not only the current one.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Remove PATH (relative to the project) from every snapshot, e.g. a secret that was captured.
    #[arg(long, value_name = "PATH")]
    pub purge: Vec<String>,
    /// Override `snapshot.budget` for this run (e.g. 500MiB).
    #[arg(long, value_name = "SIZE")]
    pub budget: Option<String>,
    #[command(flatten)]
    pub out: JsonArg,
}

#[derive(Args, Debug)]
pub struct AnswerArgs {
    /// The request's number, as `envgit status` shows it.
    pub id: Option<u64>,
    /// Print the answered request as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Approve without being shown the request first (on a terminal, `approve` shows it and
    /// asks `[y/N]`).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Reach HOST:PORT at ADDR:PORT (TLS), or at http://ADDR:PORT (plain HTTP behind the
    /// gate's TLS). Repeatable; also ENVGIT_RESOLVE.
    #[arg(long, value_name = "HOST:PORT=ADDR:PORT")]
    pub resolve: Vec<String>,
    /// Trust this PEM CA for upstreams besides the host's roots; also ENVGIT_UPSTREAM_CA.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,
    /// Keep TEXT with the step (shown by `show` and `log -v`); repeatable. Used by the agent
    /// integrations, e.g. to record a sandbox request envgit's policy overrode.
    #[arg(long = "note", value_name = "TEXT", hide = true)]
    pub notes: Vec<String>,
    /// The command and its arguments (`envgit run sh -c '…'` for a shell line).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct CodexArgs {
    /// Arguments for `codex`, passed verbatim.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct McpArgs {
    /// The project (a directory with envgit.yaml, or below one). MCP clients start servers with
    /// a stripped environment and an arbitrary working directory: give it here.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Internal: run the downstream server NAME of `mcp.servers` in the sandbox, its MCP on
    /// stdin/stdout (how `envgit mcp` starts each of them).
    #[arg(long, value_name = "NAME", hide = true)]
    pub downstream: Option<String>,
    /// Internal, with --downstream: the socket of `envgit mcp` that gets the server's gate
    /// events (its requests, recorded on the REPL steps).
    #[arg(long, value_name = "SOCKET", hide = true, requires = "downstream")]
    pub events: Option<PathBuf>,
    /// Internal, with --downstream: the pid of the `envgit mcp` that started it, which it dies
    /// with.
    #[arg(long, value_name = "PID", hide = true, requires = "downstream")]
    pub parent: Option<u32>,
}

#[derive(Args, Debug)]
pub struct HooksArgs {
    #[command(subcommand)]
    pub action: HooksAction,
}

#[derive(Subcommand, Debug)]
pub enum HooksAction {
    /// Write the agent's hooks file: every tool call in an envgit project becomes a step, and
    /// command lines matching `shell:` rules are refused.
    Install(HooksTarget),
    /// Remove the hooks file `install` wrote.
    Uninstall(HooksTarget),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum HookAgent {
    /// GitHub Copilot CLI.
    Copilot,
    /// Claude Code (its hooks are passed per run by `envgit claude`; nothing to install).
    Claude,
}

#[derive(Args, Debug)]
pub struct HooksTarget {
    pub agent: HookAgent,
    /// For every project of this user: $COPILOT_HOME/hooks/envgit.json (default ~/.copilot).
    #[arg(long, conflicts_with = "repo")]
    pub user: bool,
    /// For this repository only: .github/hooks/envgit.json at the project root (loaded only in
    /// folders Copilot trusts).
    #[arg(long)]
    pub repo: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum HookEvent {
    /// Before a tool call (may refuse it).
    Pre,
    /// After a tool call.
    Post,
    /// After a tool call that failed (Claude Code's PostToolUseFailure).
    PostFailure,
    /// The agent stopped (Claude Code's Stop and SessionEnd): calls still open are closed.
    Stop,
}

#[derive(Args, Debug)]
pub struct HookArgs {
    pub agent: HookAgent,
    pub event: HookEvent,
}

#[derive(Args, Debug)]
pub struct ClaudeArgs {
    /// Arguments for `claude`, passed verbatim.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}
