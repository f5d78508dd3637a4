//! `envgit mcp [--project DIR]`: the `execute` MCP server on stdin/stdout (see `crate::mcp`).
//! stdout carries MCP only; envgit's own messages go to stderr.

use std::path::Path;
use std::process::ExitCode;

use envgit_repl::Limits;
use rmcp::ServiceExt;

use crate::cli::McpArgs;
use crate::failure::{CmdResult, Failure};
use crate::mcp::feed::Forwarder;
use crate::mcp::{Downstreams, ExecuteServer, Recorder};
use crate::project::Project;
use crate::signal_watch::SignalWatch;
use crate::upstreams::Upstreams;
use crate::{output, supervisor};

pub fn run(dir: Option<&Path>, args: &McpArgs) -> CmdResult<ExitCode> {
    let project = Project::find(args.project.as_deref().or(dir))?;
    if let Some(name) = &args.downstream {
        if let Some(parent) = args.parent {
            die_with_parent(parent)?;
        }
        return downstream(&project, name, args.events.as_deref());
    }
    let mut store = project.open_store()?;
    let mut wt = project.worktree(&store)?;
    // No downstream server runs yet: what changed since the last step is the user's.
    let (now, _) = wt.full_scan(&store, None)?;
    crate::outside::record_outside_edits(&project, &mut store, &now)?;
    // The downstream servers' sandboxes read the project's secrets and hard links from it.
    wt.save_index(&store)?;
    let homes = crate::supervisor::homes(rustix::process::getuid().as_raw());
    let cover = crate::project_facts::cover_of(&project, store.dir(), &wt, &homes)?;
    // Before any downstream server runs: what every step puts protected paths back to.
    // With the code of the repositories in excluded directories, which no snapshot holds.
    let mut protected = project.protected_paths();
    let (code, excluded_before) = crate::excluded_repos::code_before(&project, store.dir(), &wt);
    protected.extend(code);
    let copy = envgit_store::ProtectedCopy::take(store.dir(), &project.root, &protected)?;
    copy.wait_durable()?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| project.root.clone());
    let shadows = crate::path_shadow::PathShadows::of_project(&project, &cwd);
    if let Some(shadows) = &shadows {
        crate::path_shadow::keep_owed_sweep_with(&copy, shadows)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the async runtime: {e}")))?;
    let served = rt.block_on(async move {
        let downstreams = Downstreams::start(&project.policy.mcp, &project.root)
            .await
            .map_err(|e| {
                Failure::usage(format!(
                    "{}: {e}",
                    project.root.join("envgit.yaml").display()
                ))
            })?;
        let server = ExecuteServer::new(
            Recorder {
                project,
                store,
                wt,
                copy,
                shadows,
                cover,
                excluded_before,
            },
            downstreams,
            Limits::default(),
        );
        let handle = server.clone();
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| Failure::failed(format!("MCP handshake on stdin/stdout failed: {e}")))?;
        // MCP clients stop a server with SIGTERM soon after closing its stdin: end as if stdin
        // had closed, so the last steps are still committed.
        let mut token = Some(running.cancellation_token());
        let _term = SignalWatch::start(
            &[signal_hook::consts::SIGTERM],
            "envgit-sigterm",
            move |_| {
                // The first one ends the service; later ones are ignored while it winds down.
                if let Some(t) = token.take() {
                    t.cancel();
                }
            },
        )
        .map_err(|e| Failure::failed(format!("cannot handle SIGTERM: {e}")))?;
        let _ = running.waiting().await;
        handle.shutdown().await;
        Ok::<(), Failure>(())
    });
    // A read of stdin may still be pending on a blocking thread (after SIGTERM, stdin is still
    // open): do not wait for it.
    rt.shutdown_background();
    served?;
    Ok(ExitCode::SUCCESS)
}

/// A downstream server's host dies (`SIGKILL`) with the `envgit mcp` that started it, and its
/// sandbox with it (the sandbox dies with its host): killed mid-call (`kill -9`, the OOM
/// killer), envgit mcp would otherwise leave the server running, free to write into the
/// project after the next command made the check the dead step owed. The signal is armed for
/// the thread that spawned this process: envgit mcp spawns its hosts from its main thread.
fn die_with_parent(parent: u32) -> CmdResult<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| Failure::failed(format!("cannot arm the parent-death signal: {e}")))?;
    // Gone before the signal was armed: it will never come.
    let still_there = rustix::process::getppid()
        .is_some_and(|p| u32::try_from(p.as_raw_nonzero().get()) == Ok(parent));
    if !still_there {
        return Err(Failure::failed(format!(
            "envgit mcp (pid {parent}) that started this server is gone"
        )));
    }
    Ok(())
}

/// `envgit mcp --downstream NAME`: the server `mcp.servers.NAME` in the sandbox, behind the
/// gate, with this process's stdin and stdout (the pipes `envgit mcp` talks MCP on). Its
/// requests are judged by the gate like those of any `envgit run`, and sent as they happen to
/// `envgit mcp` on the `events` socket, which records them on its REPL steps (`mcp::feed`).
/// Without that socket (or once it fails) they are only summarised on stderr at exit.
fn downstream(project: &Project, name: &str, events: Option<&Path>) -> CmdResult<ExitCode> {
    let spec = project.policy.mcp.servers.get(name).ok_or_else(|| {
        Failure::usage(format!("no server `{name}` in mcp.servers of envgit.yaml"))
    })?;
    let store = project.open_store()?;
    // The server's own `env:` travels on its command line: the sandbox lets in only the safe
    // defaults and `env.pass` from envgit's environment.
    let argv = match &spec.url {
        // A remote server: envgit's own bridge, in the sandbox, so its requests go through the
        // gate (the supervisor mounts envgit's binary there).
        Some(url) => vec![
            envgit_sandbox::plan::ENVGIT_INSIDE.to_string(),
            "mcp-bridge".to_string(),
            url.clone(),
        ],
        None => {
            let mut argv = vec!["env".to_string()];
            argv.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
            argv.push(spec.command.clone());
            argv.extend(spec.args.iter().cloned());
            argv
        }
    };
    // The server's writes into `.git` land in a layer of its own, imported as data when it
    // ends (or by the next command, if this process is killed).
    let git = crate::git_layer::open(store.dir(), &project.root)?;
    let protected = crate::git_layer::protected_under(git.as_deref(), project.protected_paths());
    let upstreams = Upstreams::new(&[], None)?;
    let (tap_tx, tap_rx) = std::sync::mpsc::channel();
    let sandbox = std::sync::Arc::new(std::sync::OnceLock::new());
    let forwarder = events.and_then(
        |path| match Forwarder::start(path, tap_rx, sandbox.clone()) {
            Ok(f) => Some(f),
            Err(e) => {
                output::warn(&format!(
                    "mcp server {name}: cannot reach envgit mcp at {} ({e}): its requests are not \
                 recorded on the steps",
                    path.display()
                ));
                None
            }
        },
    );
    let extras = supervisor::RunExtras {
        tap: forwarder.is_some().then_some(tap_tx),
        facts: Some(supervisor::Facts::Known(crate::project_facts::from_cache(
            project, &store,
        )?)),
        git: git.clone(),
        sandbox: Some(sandbox),
        ..Default::default()
    };
    let ran = supervisor::run_sandboxed(
        project,
        store.dir(),
        &project.root,
        &argv,
        &protected,
        &upstreams,
        extras,
    );
    crate::git_layer::finish(git);
    // Whatever happened, what the gate recorded goes to envgit mcp first.
    let (code, rest) = match ran {
        Ok((code, rest)) => (Ok(code), rest.events()),
        Err(f) => (Err(f), Vec::new()),
    };
    let events = match forwarder {
        Some(f) => f.finish(rest),
        None => rest,
    };
    let code = code?;
    let refused = events
        .iter()
        .filter(|e| e.decision != envgit_gate::Decision::Allowed)
        .count();
    if !events.is_empty() {
        output::note(&format!(
            "mcp server {name}: {} request(s) through the gate not recorded on a step, \
             {refused} of them refused",
            events.len()
        ));
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
