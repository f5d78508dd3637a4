//! One file per subcommand; the agents' commands (`claude`, `codex`, `hooks`, `hook`) are in
//! `crate::agents`.

pub(crate) mod approve;
mod completions;
mod demo;
pub(crate) mod diff;
mod doctor;
mod du;
mod fork;
mod fsck;
mod gc;
mod init;
mod log;
mod man;
mod mcp;
mod mcp_bridge;
mod path_filter;
mod proc;
pub(crate) mod progress;
mod record;
mod rewind;
mod run;
pub(crate) mod selftest;
pub(crate) mod show;
pub(crate) mod step_ref;
mod watch;

use std::process::ExitCode;

use crate::agents;
use crate::cli::{Cli, Command};
use crate::failure::CmdResult;

pub fn run(cli: Cli) -> CmdResult<ExitCode> {
    let dir = cli.dir.as_deref();
    crate::pager::disable(cli.no_pager);
    match cli.command {
        Command::Init(a) => init::run(dir, &a),
        Command::Demo(a) => demo::run(dir, &a),
        Command::Run(a) => run::run(dir, &a),
        Command::Record(a) => record::run(dir, &a),
        Command::Log(a) => log::run(dir, &a),
        Command::Show(a) => show::run(dir, &a),
        Command::Diff(a) => diff::run(dir, &a),
        Command::Rewind(a) => rewind::run(dir, &a),
        Command::Fork(a) => fork::run(dir, &a),
        Command::Fsck(a) => fsck::run(dir, &a),
        Command::Doctor(a) => doctor::run(dir, &a),
        Command::Selftest(a) => selftest::run(&a),
        Command::SelftestProbe(a) => selftest::probe::run(&a.args),
        Command::Gc(a) => gc::run(dir, &a),
        Command::Du(a) => du::run(dir, &a),
        Command::Status(a) => approve::status(dir, &a),
        Command::Approve(a) => approve::answer(dir, &a, true),
        Command::Deny(a) => approve::answer(dir, &a, false),
        Command::Mcp(a) => mcp::run(dir, &a),
        Command::McpBridge(a) => mcp_bridge::run(&a),
        Command::Codex(a) => agents::codex::run(dir, &a),
        Command::CodexExecServer => agents::codex::exec_server(dir),
        Command::Claude(a) => agents::claude::run(dir, &a),
        Command::Watch(a) => watch::run(dir, &a),
        Command::Hooks(a) => agents::copilot::run(dir, &a),
        Command::Hook(a) => agents::hook(dir, &a),
        Command::Completions(a) => completions::run(&a),
        Command::Man(a) => man::run(&a),
        Command::Ui(a) => crate::ui::run(dir, &a),
    }
}
