//! `envgit`: parse arguments, run one command, map its error to an exit code.

mod cli;
mod commands;
mod failure;
mod output;
mod project;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(f) => {
            output::error(&f.message);
            ExitCode::from(f.code)
        }
    }
}
