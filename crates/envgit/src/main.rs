//! `envgit`: parse arguments, run one command, map its error to an exit code.

mod agents;
mod approvers;
mod bare_repositories;
mod below_root;
mod cli;
mod commands;
mod demo;
mod excluded_repos;
mod failure;
mod git_host_config;
mod git_layer;
mod home_claim;
mod host_loads;
mod leave_to_exit;
mod mcp;
mod nofollow;
mod output;
mod outside;
mod own_copies;
mod own_exe;
mod owner;
mod pager;
mod path_shadow;
mod project;
mod project_facts;
mod project_path;
mod protected_by_settings;
mod protected_links;
mod runtime;
mod scan_notes;
mod signal_watch;
mod snapshot_trees;
mod step;
mod step_ca;
mod supervisor;
mod terminal;
mod terminal_filter;
mod timings;
mod ui;
mod upstreams;
mod watch_daemon;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The sandbox re-executes this binary; that process must stay single-threaded and never
    // reach clap.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == envgit_sandbox::HIDDEN_SUBCOMMAND)
    {
        envgit_sandbox::sandbox_main();
    }
    // Mounts added to a running session's sandbox: `setns` wants a single-threaded process.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == envgit_sandbox::cover::SUBCOMMAND)
    {
        envgit_sandbox::cover::helper_main();
    }
    timings::init();
    output::quiet_on_broken_pipe();
    // The end a killed step owed is made by whichever command opens the store next: it reads
    // nested repositories' protected paths as a step's end does.
    envgit_store::set_nested_protected_reader(below_root::protected_in_repository);
    let cli = cli::Cli::parse();
    if matches!(cli.command, cli::Command::Run(_)) {
        // While envgit is single-threaded: its sandbox then starts as a fork, not a
        // re-execution of this binary.
        timings::mark("parse arguments");
        envgit_sandbox::prefork();
        timings::mark("zygote forked");
        envgit_sandbox::etc_walk::start_early(etc_walk_cache);
        envgit_sandbox::limits::prepare_early();
        timings::mark("cgroups made");
    } else {
        timings::mark("parse arguments");
        envgit_sandbox::etc_walk::cache_found_by(etc_walk_cache);
    }
    let code = match commands::run(cli) {
        Ok(code) => code,
        Err(f) => {
            output::error(&f.message);
            ExitCode::from(f.code)
        }
    };
    timings::mark("command returned");
    envgit_sandbox::limits::discard_early();
    // The last sandbox's cgroups, removed once its PID 1 is gone (after the step's record),
    // unless a child took them over (`close_detached`).
    envgit_sandbox::limits::finish_removals();
    timings::mark("cgroups removed");
    timings::report();
    code
}

/// Where the walk of `/etc` is cached: the user's runtime directory, which only they can write.
fn etc_walk_cache() -> Option<std::path::PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    runtime::runtime_dir(uid)
        .ok()
        .map(|dir| dir.join("etc-private.cache"))
}
