//! `envgit status`, `envgit approve [ID]`, `envgit deny [ID]`: the requests running steps are
//! holding for a person, answered from any terminal of the same user. Each running gate has a
//! control socket and a control token (0600) in a private directory under envgit's state
//! (which the sandbox cannot see); the gate records who answered from the connection itself.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use envgit_gate::{ControlOp, PendingAsk, control_request};
use serde::Serialize;

use crate::cli::{AnswerArgs, JsonArg};
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::Project;
use crate::runtime::{CONTROL_SOCKET, step_dir_bases};

/// A request held by a running step, and where to answer it.
#[derive(Serialize)]
pub(crate) struct Waiting {
    /// The run's private directory name: which gate holds it.
    pub(crate) run: String,
    pub(crate) project: String,
    #[serde(flatten)]
    pub(crate) ask: PendingAsk,
    #[serde(skip)]
    pub(crate) socket: PathBuf,
}

/// Every request waiting in a running step of this user, in this project when there is one.
fn waiting(dir: Option<&Path>) -> CmdResult<Vec<Waiting>> {
    let project = Project::find(dir)
        .ok()
        .map(|p| p.root.display().to_string());
    waiting_in(project.as_deref())
}

/// Every request waiting in a running step of this user, of `project` (its root as the gate
/// labels it) when given; oldest first. `envgit status` and the web page both list these.
pub(crate) fn waiting_in(project: Option<&str>) -> CmdResult<Vec<Waiting>> {
    let uid = rustix::process::getuid().as_raw();
    let mut out = Vec::new();
    let entries = step_dir_bases(uid)?
        .into_iter()
        .filter_map(|base| std::fs::read_dir(base).ok())
        .flatten();
    for entry in entries.flatten() {
        let socket = entry.path().join(CONTROL_SOCKET);
        // A socket left by a run that died refuses the connection: nothing waits there.
        let Ok(answer) = control_request(&socket, ControlOp::List) else {
            continue;
        };
        let run_project = answer.project.unwrap_or_default();
        if project.is_some_and(|p| p != run_project) {
            continue;
        }
        for ask in answer.pending.unwrap_or_default() {
            out.push(Waiting {
                run: entry.file_name().to_string_lossy().into_owned(),
                project: run_project.clone(),
                ask,
                socket: socket.clone(),
            });
        }
    }
    out.sort_by_key(|w| (w.ask.asked_at_ms, w.ask.id));
    Ok(out)
}

pub fn status(dir: Option<&Path>, args: &JsonArg) -> CmdResult<ExitCode> {
    let list = waiting(dir)?;
    if args.json {
        output::json(&list)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        println!("No request is waiting for an answer.");
        return Ok(ExitCode::SUCCESS);
    }
    let now = envgit_store::now_ms();
    for w in &list {
        let left = w.ask.expires_at_ms.saturating_sub(now) / 1000;
        println!(
            "#{}  {} {}{}  rule={}  ({left} s left)\n    {}\n    in {}",
            w.ask.id, w.ask.method, w.ask.host, w.ask.path, w.ask.rule, w.ask.summary, w.project
        );
    }
    println!("Answer with `envgit approve ID` or `envgit deny ID`.");
    Ok(ExitCode::SUCCESS)
}

/// On a terminal, the request is shown as envgit holds it and the person says `y`: the
/// number they were told may have come from a message the command forged on the same stream
/// (the command writes where envgit's "answer with `envgit approve 3`" goes). Not on a
/// terminal (a script), `true`.
fn confirmed_on_terminal(target: &Waiting) -> CmdResult<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Ok(true);
    }
    let a = &target.ask;
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "#{}  {} {}{}  rule={}\n    {}\n    in {}\napprove? [y/N] ",
        a.id,
        a.method,
        a.host,
        a.path,
        a.rule,
        output::escape_controls(&a.summary),
        output::escape_controls(&target.project)
    );
    let _ = err.flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure::failed(format!("reading the answer: {e}")))?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

pub fn answer(dir: Option<&Path>, args: &AnswerArgs, approve: bool) -> CmdResult<ExitCode> {
    let list = waiting(dir)?;
    let candidates: Vec<&Waiting> = list
        .iter()
        .filter(|w| args.id.is_none_or(|id| w.ask.id == id))
        .collect();
    let verb = if approve { "approve" } else { "deny" };
    let target = match candidates.as_slice() {
        [one] => *one,
        [] => {
            return Err(Failure::usage(match args.id {
                Some(id) => format!("no request #{id} is waiting; `envgit status` lists them"),
                None => "no request is waiting for an answer".to_owned(),
            }));
        }
        many => {
            return Err(Failure::usage(format!(
                "{} requests are waiting; name one: {}",
                many.len(),
                many.iter()
                    .map(|w| format!("envgit {verb} {}", w.ask.id))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    if approve && !args.yes && !confirmed_on_terminal(target)? {
        eprintln!("not approved: #{} still waits", target.ask.id);
        return Ok(ExitCode::FAILURE);
    }
    // Who answered is the gate's to say (from this connection), not ours.
    let id = Some(target.ask.id);
    let op = if approve {
        ControlOp::Approve { id }
    } else {
        ControlOp::Deny { id }
    };
    let answer = control_request(&target.socket, op)
        .map_err(|e| Failure::failed(format!("cannot reach the running step: {e}")))?;
    if let Some(e) = answer.error {
        return Err(Failure::usage(e));
    }
    let done = answer.answered.unwrap_or_else(|| target.ask.clone());
    if args.json {
        output::json(&done)?;
    } else {
        let past = if approve { "approved" } else { "denied" };
        println!("{past} #{}: {}", done.id, done.summary);
    }
    Ok(ExitCode::SUCCESS)
}
