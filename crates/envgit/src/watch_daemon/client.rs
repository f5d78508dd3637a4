//! Asking the daemon, from a one-shot command.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use envgit_sandbox::plan::ListingVouch;
use envgit_store::{ChangeToken, LiveTree, WorkTree};

use crate::failure::CmdResult;
use crate::project::WatchDaemon;

use super::wire::{self, Answer, Status};

/// How long a step waits for the daemon before it reads the project itself. Its answer is
/// normally well under a millisecond; after a queue overflow it first walks the directories
/// again (~0.3 s at 100,000 files).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to the project's daemon, if one listens.
pub(crate) fn connect(store_dir: &Path) -> Option<UnixStream> {
    let socket = super::socket_path(store_dir).ok()?;
    let stream = UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(ANSWER_TIMEOUT)).ok()?;
    Some(stream)
}

/// What changed since `token`; `None` when no daemon answers (then read everything).
pub(crate) fn since(store_dir: &Path, token: Option<ChangeToken>) -> Option<Answer> {
    ask_since(connect(store_dir)?, token)
}

/// [`since`] on a connection made already.
fn ask_since(mut stream: UnixStream, token: Option<ChangeToken>) -> Option<Answer> {
    let token = token.map_or_else(|| "none".to_owned(), |t| t.to_string());
    stream
        .write_all(format!("since {token}\n").as_bytes())
        .ok()?;
    match wire::read_answer(&mut BufReader::new(&stream)) {
        Ok(a) => Some(a),
        Err(e) => {
            crate::output::note(&format!(
                "envgit: the watching daemon did not answer ({e}); reading the whole project \
                 (`envgit watch stop && envgit watch start` restarts it)"
            ));
            None
        }
    }
}

pub(crate) fn status(store_dir: &Path) -> Option<Status> {
    let mut stream = connect(store_dir)?;
    stream.write_all(b"status\n").ok()?;
    let line = wire::read_line(&mut BufReader::new(&stream)).ok()?;
    serde_json::from_str(&line).ok()
}

/// What `envgit watch stop` found.
pub(crate) enum Stopped {
    /// A daemon answered and exits.
    Daemon,
    /// None listened, but a killed one (or a machine restarted under it) had left its socket,
    /// which is now removed.
    LeftSocket,
    Nothing,
}

/// Ask the daemon to exit. A socket nobody listens on is removed: commands already ignore it,
/// and it would otherwise stay until the next `watch start` replaced it. (A daemon starting
/// this very moment, between its `bind` and `listen`, may lose its socket that way; it then
/// exits at its next check, which is what `stop` asked for.)
pub(crate) fn stop(store_dir: &Path) -> CmdResult<Stopped> {
    let socket = super::socket_path(store_dir)?;
    let mut stream = match UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            // In this user's private runtime directory: only one of their own envgits made it.
            let is_socket = std::fs::symlink_metadata(&socket)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            if is_socket && std::fs::remove_file(&socket).is_ok() {
                return Ok(Stopped::LeftSocket);
            }
            return Ok(Stopped::Nothing);
        }
        Err(_) => return Ok(Stopped::Nothing),
    };
    let _ = stream.set_read_timeout(Some(ANSWER_TIMEOUT));
    let answered = stream.write_all(b"stop\n").is_ok()
        && wire::read_line(&mut BufReader::new(&stream)).is_ok_and(|l| l == "ok");
    Ok(if answered {
        Stopped::Daemon
    } else {
        Stopped::Nothing
    })
}

/// What changed since the stat index `tree` was loaded from was saved, by the word of the
/// daemon `daemon` is connected to, and the token that answer stands at. `changes` is `None`
/// when the daemon cannot vouch for that time (no token saved, another daemon's, an overflow
/// since): read everything. `None` when no daemon answered for this project, or it watches by
/// another scan configuration.
pub(crate) fn since_index(
    daemon: WatchDaemon,
    store_dir: &Path,
    tree: &WorkTree,
) -> Option<Answer> {
    // Connected first: without a daemon (the usual case) a step reads no token file.
    let stream = daemon.0?;
    let saved = tree.watch_token(store_dir);
    let mut answer = ask_since(stream, saved)?;
    if answer.fingerprint != tree.config().fingerprint {
        crate::output::note(
            "envgit: the watching daemon was started before `snapshot:` in envgit.yaml \
             changed, so this command reads the whole project; restart it: \
             `envgit watch stop && envgit watch start`",
        );
        return None;
    }
    // Without a saved token the tree is not the state the changes follow.
    if saved.is_none() {
        answer.changes = None;
    }
    Some(answer)
}

/// The daemon's count of events in the directories the scan does not enter, as `answer`
/// gave it.
fn vouch_of(answer: &Answer) -> Option<ListingVouch> {
    answer.unscanned.map(|count| ListingVouch {
        instance: answer.token.instance,
        count,
    })
}

/// A one-shot step's link to the daemon: it tells the step's live tree what changed, before
/// the command and after it, instead of the tree walking the project and watching it itself.
pub(crate) struct Feed {
    store_dir: std::path::PathBuf,
    token: Option<ChangeToken>,
    /// The daemon's count of events in the directories the scan does not enter, at the first
    /// answer (before anything of the step looked at them).
    unscanned: Option<ListingVouch>,
    /// The same count at the answer after the command ([`Feed::refresh`]).
    unscanned_after: Option<ListingVouch>,
}

impl Feed {
    /// Feeds `live` (just loaded from the stat index) what changed since the index was saved;
    /// `None` when no daemon answers for this project (then `live` is left to walk and watch
    /// as it would).
    pub(crate) fn start(
        daemon: WatchDaemon,
        store_dir: &Path,
        live: &mut LiveTree,
    ) -> Option<Self> {
        let answer = since_index(daemon, store_dir, live.tree())?;
        let unscanned = vouch_of(&answer);
        live.feed(answer.changes);
        Some(Self {
            store_dir: store_dir.to_path_buf(),
            token: Some(answer.token),
            unscanned,
            unscanned_after: None,
        })
    }

    /// Whether nothing happened in the directories the scan does not enter from the first
    /// answer to the one after the command, by the daemon's count: what the step's listing
    /// found there before the command still holds.
    pub(crate) fn unscanned_unchanged(&self) -> bool {
        self.unscanned.is_some() && self.unscanned_after == self.unscanned
    }

    /// What the step's listing of the directories the scan does not enter may be saved with,
    /// and taken again while it holds ([`crate::project_facts::of`]).
    pub(crate) fn listing_vouch(&self) -> Option<ListingVouch> {
        self.unscanned
    }

    /// Feeds `live` what changed since the last answer (what the command did, for the snapshot
    /// after it). A daemon that stopped answering makes that snapshot read everything.
    pub(crate) fn refresh(&mut self, live: &mut LiveTree) {
        let answer = since(&self.store_dir, self.token)
            .filter(|a| a.fingerprint == live.tree().config().fingerprint);
        self.token = answer.as_ref().map(|a| a.token);
        self.unscanned_after = answer.as_ref().and_then(vouch_of);
        live.feed(answer.and_then(|a| a.changes));
    }

    /// Saves the last answer's token beside the stat index just saved from `live`'s tree.
    pub(crate) fn save(&self, store: &envgit_store::Store, live: &LiveTree) -> CmdResult<()> {
        if let Some(token) = self.token {
            live.tree().save_watch_token(store, token)?;
        }
        Ok(())
    }
}
