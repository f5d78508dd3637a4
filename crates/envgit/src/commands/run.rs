//! `envgit run [--] CMD ARGS…`: one step, run in the sandbox.

use std::path::Path;
use std::process::ExitCode;

use crate::cli::RunArgs;
use crate::failure::CmdResult;
use crate::project::Project;
use crate::supervisor;
use crate::upstreams::Upstreams;

pub fn run(dir: Option<&Path>, args: &RunArgs) -> CmdResult<ExitCode> {
    let project = Project::find(dir)?;
    let cwd = crate::project::start_dir(dir)?;
    let upstreams = Upstreams::new(&args.resolve, args.upstream_ca.as_deref())?;
    let code = supervisor::run_step(
        &project,
        &cwd,
        args.command.clone(),
        &upstreams,
        args.notes.clone(),
    )?;
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}
