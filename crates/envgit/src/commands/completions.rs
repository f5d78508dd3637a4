//! `envgit completions SHELL`: the completion script for SHELL, generated from the clap
//! definitions (so it never drifts from the commands), on stdout.

use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::failure::CmdResult;

pub fn run(args: &CompletionsArgs) -> CmdResult<ExitCode> {
    // Into memory first (clap_complete panics on a failed write), then `print!`, which ends
    // quietly when the reader went away (`output::quiet_on_broken_pipe`).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "envgit", &mut script);
    print!("{}", String::from_utf8_lossy(&script));
    Ok(ExitCode::SUCCESS)
}
