//! `envgit ui`: the project's history as a local web page — a timeline of steps, each step's
//! diff and requests, requests held by `ask` rules with Approve / Deny buttons, live while a
//! run goes on — served on 127.0.0.1 to the browser that opened the printed link
//! (`auth.rs`), or written as static files that open from disk with `--export` (`export.rs`).

mod assets;
mod auth;
mod body;
mod csp;
mod export;
mod held;
mod masked;
pub(crate) mod port_registry;
mod query;
mod routes;
mod sse;
mod step_page;
mod timeline;

use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};

use envgit_store::Store;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::cli::UiArgs;
use crate::failure::{CmdResult, Failure};
use crate::project::ProjectDirs;
use crate::runtime::random_token;

/// What every request handler shares.
pub(crate) struct Ui {
    auth: auth::Auth,
    store: Mutex<Store>,
    masks: masked::Masks,
    /// The project's root as the gate labels its runs (to find this project's held requests).
    project_label: String,
}

#[derive(Serialize)]
struct ProjectInfo {
    root: String,
}

impl Ui {
    /// The store, caught up with what other processes committed since the last look.
    fn store(&self) -> CmdResult<MutexGuard<'_, Store>> {
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        store.catch_up()?;
        Ok(store)
    }

    fn project_info(&self) -> ProjectInfo {
        ProjectInfo {
            root: self.project_label.clone(),
        }
    }
}

#[derive(Serialize)]
struct Started<'a> {
    url: &'a str,
    port: u16,
}

pub fn run(dir: Option<&Path>, args: &UiArgs) -> CmdResult<ExitCode> {
    let project = ProjectDirs::find_for_reading(dir)?;
    let store = project.open_store()?;
    let policy = project.load().ok().map(|p| p.policy);
    let masks = masked::Masks::new(policy.as_ref(), &project.root);
    if let Some(out) = &args.export {
        export::write(&store, &masks, &project.root, out)?;
        if !args.json {
            println!(
                "wrote the history of {} to {}",
                project.root.display(),
                out.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let listener = std::net::TcpListener::bind(("127.0.0.1", args.port.unwrap_or(0)))
        .map_err(|e| Failure::failed(format!("cannot listen on 127.0.0.1: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| Failure::failed(format!("cannot read the UI's port: {e}")))?
        .port();
    // Registered before anyone can learn the port: no sandbox ever reaches it.
    let _registration = port_registry::Registration::new(port)?;
    let code = random_token()?;
    let ui = Arc::new(Ui {
        auth: auth::Auth::new(port, code.clone(), random_token()?),
        store: Mutex::new(store),
        masks,
        project_label: project.root.display().to_string(),
    });
    // Watched before the link is printed: a Ctrl-C as soon as it shows still unregisters.
    let signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| Failure::failed(format!("cannot watch for Ctrl-C: {e}")))?;
    let url = format!("http://127.0.0.1:{port}/?code={code}");
    if args.json {
        crate::output::json(&Started { url: &url, port })?;
    } else {
        println!("envgit ui for {}: {url}", project.root.display());
        println!("(the code works once; Ctrl-C stops the server)");
    }
    if args.open {
        open_browser(&url);
    }
    serve(listener, ui, signals)?;
    Ok(ExitCode::SUCCESS)
}

/// Starts `$BROWSER`, else `xdg-open`, with the link; a failure is said, not fatal.
fn open_browser(url: &str) {
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "xdg-open".to_owned());
    if let Err(e) = std::process::Command::new(&browser)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
    {
        crate::output::warn(&format!(
            "cannot start {browser} ({e}); open the link above yourself"
        ));
    }
}

/// How long a connection may take to send a request's head, or sit idle between requests: one
/// that sends half a head and then nothing is closed then, not held (with its descriptor) for
/// ever. A browser opens a new connection for its next request.
const HEADER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Connections served at once: half the descriptors this process may open (the store's reads
/// need the rest), at most 512. Past it a connection waits in the listen queue until one ends.
fn max_connections() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1024);
    usize::try_from(soft / 2).unwrap_or(512).clamp(8, 512)
}

/// Serves until SIGINT or SIGTERM (then returns, so the port's registration is removed).
fn serve(
    listener: std::net::TcpListener,
    ui: Arc<Ui>,
    mut signals: signal_hook::iterator::Signals,
) -> CmdResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("envgit-ui")
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the UI's runtime: {e}")))?;
    let stop = Arc::new(tokio::sync::Notify::new());
    {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            if signals.forever().next().is_some() {
                stop.notify_one();
            }
        });
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| Failure::failed(format!("cannot serve: {e}")))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Failure::failed(format!("cannot serve: {e}")))?;
        let slots = Arc::new(tokio::sync::Semaphore::new(max_connections()));
        loop {
            let slot = tokio::select! {
                () = stop.notified() => return Ok(()),
                slot = Arc::clone(&slots).acquire_owned() => slot
                    .map_err(|e| Failure::failed(format!("cannot serve: {e}")))?,
            };
            tokio::select! {
                () = stop.notified() => return Ok(()),
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else {
                        // Out of descriptors (the connection stays queued): wait for one to
                        // be closed rather than spin on the same error.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    };
                    let ui = Arc::clone(&ui);
                    tokio::spawn(async move {
                        let _slot = slot;
                        let service = service_fn(move |req| routes::handle(Arc::clone(&ui), req));
                        let _ = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(HEADER_DEADLINE)
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        }
    })
}
