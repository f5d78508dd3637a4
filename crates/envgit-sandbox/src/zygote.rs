//! The sandbox process, forked from envgit at its start while envgit is still single-threaded,
//! and waiting for its channels: starting a step's sandbox then costs a fork instead of a
//! re-execution of the whole envgit binary (mapping it and faulting its pages in,
//! libc's and Rust's start-up: about 2.4 ms of a step, measured). Used by one-shot commands
//! that run one sandbox (`envgit run`); anything else, or a zygote that is gone, falls back to
//! re-executing the binary ([`crate::launch`]).
//!
//! The zygote keeps nothing envgit opens after the fork, dies with envgit (`PDEATHSIG`), and
//! ends quietly when envgit closes its socket without using it.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::JoinHandle;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

use crate::child::Channels;
use crate::spec::RootBase;
use crate::sys::{self, Forked};

static PREFORKED: Mutex<Option<Zygote>> = Mutex::new(None);

/// A forked sandbox process waiting for its channels.
pub(crate) struct Zygote {
    pid: i32,
    socket: OwnedFd,
    /// The move into the run's cgroups, when envgit started it early ([`move_into_cgroups`]):
    /// it ends with the cgroups the zygote is in.
    moving: Option<JoinHandle<Vec<PathBuf>>>,
    /// Where its early start is ([`enter_namespaces_early`]): the ids the command runs as.
    early: Pending<(u32, u32)>,
    /// Where the early root's base is ([`build_base_early`]).
    base: Pending<RootBase>,
    /// The early walk of `/etc` runs ([`crate::etc_walk::start_early`]): the early start waits
    /// for its end ([`walk_finished`]).
    walk_running: bool,
    /// The run's cgroups are being made on a thread ([`crate::limits::prepare_early`]): the
    /// early start, which joins them first, waits for them ([`cgroups_made`]).
    cgroups_pending: bool,
    /// What that walk found only root may read: the early base masks it.
    etc_private: Vec<PathBuf>,
}

/// A message to the zygote: not asked for yet, asked for (and waiting to be sent: the walk of
/// `/etc` is not over, or the message before it is not sent), sent.
#[derive(PartialEq, Eq)]
enum Pending<T> {
    NotAsked,
    Asked(T),
    Sent,
}

/// What the zygote does before the step's spec exists ([`enter_namespaces_early`]).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct EarlyStart {
    /// The ids the command will run as (the spec's `uid`/`gid`; it must say the same).
    pub uid: u32,
    pub gid: u32,
    /// The run's cgroup v1 directories, joined first, as [`crate::limits::join`] does.
    pub cgroups: Vec<PathBuf>,
    /// Whether the relay may be forked now (and the mount and pid namespaces made after it):
    /// only when no move into a v2 cgroup is under way, so that nothing the sandbox forks is
    /// ever outside the run's cgroups.
    pub relay: bool,
    /// The new root's base, once built ([`build_base_early`], [`EarlyBase`]); the spec must
    /// say the same ([`RootBase::of`]). Never sent in this message.
    #[serde(default)]
    pub root: Option<RootBase>,
    /// Paths in `/etc` only root may read, masked in that base: PID 1 then masks only those of
    /// the spec's masks not among them.
    #[serde(default)]
    pub etc_masks: Vec<PathBuf>,
}

/// The second early message ([`build_base_early`]): the new root's base, built in the mount
/// namespace the first one made ([`crate::mounts::build_base`]), with the walk's private
/// files in `/etc` masked.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct EarlyBase {
    pub root: RootBase,
    #[serde(default)]
    pub etc_masks: Vec<PathBuf>,
}

/// Forks the zygote. Call it first thing in `main`, before any thread exists: a process
/// with threads is not forked (the fork would copy locks other threads hold), and the first
/// sandbox is then started by re-execution as before.
pub fn prefork() {
    if !single_threaded() {
        return;
    }
    let Ok((ours, theirs)) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    ) else {
        return;
    };
    let parent = rustix::process::getpid();
    match sys::fork() {
        Ok(Forked::Child) => {
            drop(ours);
            wait_for_channels(theirs, parent)
        }
        Ok(Forked::Parent(pid)) => {
            drop(theirs);
            *PREFORKED.lock().unwrap_or_else(|p| p.into_inner()) = Some(Zygote {
                pid,
                socket: ours,
                moving: None,
                early: Pending::NotAsked,
                base: Pending::NotAsked,
                walk_running: false,
                cgroups_pending: false,
                etc_private: Vec::new(),
            });
        }
        Err(_) => {}
    }
}

/// The zygote, once: the first sandbox of this process.
pub(crate) fn take() -> Option<Zygote> {
    PREFORKED.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Starts moving the zygote into the run's cgroup v2 directories on a thread, while envgit
/// sets up the rest of the step. Moving a whole process between cgroups waits for the
/// kernel's RCU grace period (`cgroup_threadgroup_rwsem`): 11 ms of a step when the sandbox
/// process did it itself, first thing after it was given its channels. A cgroup v1 directory
/// is left to the sandbox process, which joins it one thread at a time at no cost
/// ([`crate::limits::join`]). The sandbox process then joins only the cgroups this did not
/// move it into (starting the zygote waits for the move, so nothing the sandbox forks is ever
/// outside them). No zygote: nothing to do, the sandbox process joins them itself.
pub fn move_into_cgroups(cgroups: &[PathBuf]) {
    let mut preforked = PREFORKED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(zygote) = preforked.as_mut() else {
        return;
    };
    if zygote.moving.is_some() || cgroups.is_empty() {
        return;
    }
    // A cgroup v1 the sandbox process joins by itself when it starts, in no time
    // ([`crate::limits::join`]).
    let cgroups: Vec<PathBuf> = cgroups
        .iter()
        .filter(|dir| !crate::limits::joins_by_thread(dir))
        .cloned()
        .collect();
    if cgroups.is_empty() {
        return;
    }
    let pid = zygote.pid.to_string();
    zygote.moving = std::thread::Builder::new()
        .name("envgit-cgroup-move".into())
        .spawn(move || {
            cgroups
                .into_iter()
                .filter(|dir| std::fs::write(dir.join("cgroup.procs"), &pid).is_ok())
                .collect()
        })
        .ok();
}

/// Tells the zygote to join the run's cgroup v1 directories, enter its user and network
/// namespaces with loopback up, and (when no move into a v2 cgroup is under way) fork the relay,
/// which waits for its configuration, and make the mount, pid, ipc and uts namespaces: ~1.5–2 ms
/// of the sandbox's start, done while envgit opens the store and sets up the rest of the step.
/// Nothing the step decides later shapes them but the ids the command runs as, `uid`/`gid`,
/// which the spec must repeat (the sandbox fails if it does not). Asked for as soon as envgit
/// knows them: the zygote then works while envgit decides the root's base
/// ([`build_base_early`]) and opens the store. No zygote, or called twice: nothing.
///
/// While the early walk of `/etc` runs, the message waits for its end ([`walk_finished`]):
/// on two cores, the walk, the zygote and envgit's own thread at once slowed envgit's
/// thread by as much as the zygote's work (measured: 1.3 ms of a 15 ms step).
pub fn enter_namespaces_early(uid: u32, gid: u32) {
    let mut preforked = PREFORKED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(zygote) = preforked.as_mut() else {
        return;
    };
    if zygote.early != Pending::NotAsked {
        return;
    }
    zygote.early = Pending::Asked((uid, gid));
    zygote.send_pending();
}

/// Tells the zygote, after [`enter_namespaces_early`], to build the new root's base in its
/// mount namespace (`mounts::build_base`: the system directories, `/dev`, the private `/tmp`
/// and `/run` with `/run/envgit`'s files, the home, ~2 ms of PID 1's work), which the spec
/// must then repeat. Sent once the walk of `/etc` is over: the base masks what it found.
pub fn build_base_early(root: RootBase) {
    let mut preforked = PREFORKED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(zygote) = preforked.as_mut() else {
        return;
    };
    if zygote.base != Pending::NotAsked {
        return;
    }
    zygote.base = Pending::Asked(root);
    zygote.send_pending();
}

/// The run's cgroups are being made on a thread: [`enter_namespaces_early`] waits for
/// [`cgroups_made`].
pub(crate) fn cgroups_pending() {
    if let Some(zygote) = PREFORKED.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        zygote.cgroups_pending = true;
    }
}

/// The run's cgroups are made (called on their thread): an early start asked for meanwhile
/// is sent now.
pub(crate) fn cgroups_made() {
    if let Some(zygote) = PREFORKED.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        zygote.cgroups_pending = false;
        zygote.send_pending();
    }
}

/// The early walk of `/etc` starts: [`enter_namespaces_early`] waits for [`walk_finished`].
pub(crate) fn walk_started() {
    if let Some(zygote) = PREFORKED.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        zygote.walk_running = true;
    }
}

/// The early walk of `/etc` is over (called on its thread) and found `private`: an early start
/// asked for meanwhile is sent now.
pub(crate) fn walk_finished(private: &[PathBuf]) {
    if let Some(zygote) = PREFORKED.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        zygote.walk_running = false;
        zygote.etc_private = private.to_vec();
        zygote.send_pending();
    }
}

/// The first byte of the message that starts [`enter_namespaces_early`], and of the one that
/// [`build_base_early`] sends; the channels' message is one byte, `s`.
const EARLY_TAG: u8 = b'e';
const BASE_TAG: u8 = b'b';

/// The longest early message sent: the zygote reads it into a buffer of twice that.
const EARLY_MESSAGE_MAX: usize = 8 * 1024;

pub(crate) fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1)
}

/// Ends the zygote unused (the step failed before its sandbox started), waiting until it is
/// gone: the run's cgroups it was moved into can then be removed.
pub fn discard_zygote() {
    let Some(mut zygote) = take() else {
        return;
    };
    zygote.moved_into();
    if let Some(pid) = rustix::process::Pid::from_raw(zygote.pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
    }
}

impl Zygote {
    /// Sends what was asked for and not sent, in order, once the walk of `/etc` is over: the
    /// early start, then the base (which needs the start's mount namespace and the walk's
    /// finds).
    fn send_pending(&mut self) {
        if self.walk_running || self.cgroups_pending {
            return;
        }
        self.send_early();
        // Taken only when asked for: the replace must not run for a base not asked yet.
        if self.early == Pending::Sent
            && matches!(self.base, Pending::Asked(_))
            && let Pending::Asked(root) = std::mem::replace(&mut self.base, Pending::Sent)
        {
            self.send_base(root);
        }
    }

    fn send_base(&mut self, root: RootBase) {
        let mut base = EarlyBase {
            root,
            etc_masks: std::mem::take(&mut self.etc_private),
        };
        let mut encoded = serde_json::to_vec(&base);
        if encoded
            .as_ref()
            .is_ok_and(|m| m.len() > EARLY_MESSAGE_MAX && !base.etc_masks.is_empty())
        {
            // Too many to send: PID 1 masks them all, as without an early base.
            base.etc_masks.clear();
            encoded = serde_json::to_vec(&base);
        }
        if let Ok(mut message) = encoded {
            message.insert(0, BASE_TAG);
            // Not sent (the zygote is gone): the sandbox starts by re-execution.
            let _ = rustix::net::send(&self.socket, &message, SendFlags::empty());
        }
    }

    /// Sends the early start asked for, once; nothing before it is asked for (the walk of
    /// `/etc` may end first).
    fn send_early(&mut self) {
        let early = std::mem::replace(&mut self.early, Pending::Sent);
        let Pending::Asked((uid, gid)) = early else {
            self.early = early;
            return;
        };
        // No cgroups made early: the relay waits for the spec, after which the sandbox process
        // joins them all.
        let made = crate::limits::early_cgroups();
        let relay = made.is_some() && self.moving.as_ref().is_none_or(JoinHandle::is_finished);
        let cgroups = made
            .unwrap_or_default()
            .into_iter()
            .filter(|dir| crate::limits::joins_by_thread(dir))
            .collect();
        let start = EarlyStart {
            uid,
            gid,
            cgroups,
            relay,
            root: None,
            etc_masks: Vec::new(),
        };
        if let Ok(mut message) = serde_json::to_vec(&start) {
            message.insert(0, EARLY_TAG);
            // Not sent (the zygote is gone): the sandbox starts by re-execution.
            let _ = rustix::net::send(&self.socket, &message, SendFlags::empty());
        }
    }

    /// The cgroups the zygote was moved into early, once the move is over.
    pub(crate) fn moved_into(&mut self) -> Vec<PathBuf> {
        self.moving
            .take()
            .and_then(|m| m.join().ok())
            .unwrap_or_default()
    }

    /// Gives the zygote its channels; it is the sandbox process from here. Returns its pid.
    pub(crate) fn start(
        self,
        spec: BorrowedFd<'_>,
        err: BorrowedFd<'_>,
        done: BorrowedFd<'_>,
        console: Option<BorrowedFd<'_>>,
    ) -> std::io::Result<i32> {
        let mut fds = vec![spec, err, done];
        fds.extend(console);
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(std::io::Error::other("no room for the sandbox's channels"));
        }
        rustix::net::sendmsg(
            &self.socket,
            &[IoSlice::new(b"s")],
            &mut control,
            SendFlags::empty(),
        )?;
        Ok(self.pid)
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // Unused: closing the socket ends it; reap it if it is gone already.
        let _ = rustix::process::waitpid(
            rustix::process::Pid::from_raw(self.pid),
            rustix::process::WaitOptions::NOHANG,
        );
    }
}

/// The zygote's life: wait, then become the sandbox process (or end when envgit goes away).
fn wait_for_channels(socket: OwnedFd, parent: rustix::process::Pid) -> ! {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // Ctrl-C at the terminal before the step starts is envgit's to handle.
    let _ = sys::set_ignored(libc::SIGINT, true);
    let _ = sys::set_ignored(libc::SIGQUIT, true);
    if rustix::process::getppid() != Some(parent) {
        std::process::exit(0);
    }
    let mut early = None;
    // Room for the early message (at most EARLY_MESSAGE_MAX); the channels' message is one
    // byte.
    let mut message = vec![0u8; 2 * EARLY_MESSAGE_MAX];
    let mut fds: Vec<OwnedFd> = Vec::new();
    loop {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = loop {
            match rustix::net::recvmsg(
                &socket,
                &mut [IoSliceMut::new(&mut message)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other,
            }
        };
        match got {
            Ok(r) if r.bytes > 1 && message[0] == EARLY_TAG && early.is_none() => {
                early = Some(crate::child::enter_early(&message[1..r.bytes]));
            }
            Ok(r) if r.bytes > 1 && message[0] == BASE_TAG => {
                if let Some(entered) = early.as_mut() {
                    entered.build_base(&message[1..r.bytes]);
                }
            }
            Ok(r) if r.bytes == 1 => {
                for message in control.drain() {
                    if let RecvAncillaryMessage::ScmRights(rights) = message {
                        fds.extend(rights);
                    }
                }
                break;
            }
            // envgit closed the socket (or sent what no envgit sends): not needed after all.
            _ => break,
        }
    }
    drop(socket);
    let mut fds = fds.into_iter();
    let (Some(spec), Some(err), Some(done)) = (fds.next(), fds.next(), fds.next()) else {
        // Not needed after all.
        std::process::exit(0);
    };
    let console = fds.next();
    if console.is_some() && !detach_from_envgits_terminal() {
        std::process::exit(125);
    }
    crate::child::sandbox_main_with(Channels {
        spec,
        err: Some(err),
        done: Some(done),
        console,
        early,
    })
}

/// With a console, the sandbox holds nothing of envgit's terminal: each of its standard
/// streams that is a terminal becomes `/dev/null` (the command gets the console there), as in
/// a re-executed one; a pipe or a file stays, for the command.
fn detach_from_envgits_terminal() -> bool {
    let Ok(null) = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return false;
    };
    use rustix::termios::isatty as is_terminal;
    (!is_terminal(rustix::stdio::stdin()) || rustix::stdio::dup2_stdin(null.as_fd()).is_ok())
        && (!is_terminal(rustix::stdio::stdout())
            || rustix::stdio::dup2_stdout(null.as_fd()).is_ok())
        && (!is_terminal(rustix::stdio::stderr())
            || rustix::stdio::dup2_stderr(null.as_fd()).is_ok())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use rustix::net::{AddressFamily, RecvFlags, SocketFlags, SocketType};

    use super::{BASE_TAG, EARLY_TAG, EarlyBase, EarlyStart, PREFORKED, Pending, Zygote};
    use crate::spec::RootBase;

    /// The walk of `/etc` may end before the step asks for the early start (a fast walk, a
    /// slow project): the start must still be sent when asked, with the walk's finds to mask.
    /// It was lost (the zygote then did everything after the spec, ~2-3 ms of a step).
    #[test]
    fn an_early_start_asked_for_after_the_walk_ended_is_sent() {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        *PREFORKED.lock().unwrap() = Some(Zygote {
            // Not a child of this process: the drop's reap finds nothing.
            pid: i32::MAX,
            socket: ours,
            moving: None,
            early: Pending::NotAsked,
            base: Pending::NotAsked,
            walk_running: false,
            cgroups_pending: false,
            etc_private: Vec::new(),
        });
        let shadow = PathBuf::from("/etc/shadow");
        super::walk_started();
        super::walk_finished(std::slice::from_ref(&shadow));
        let base = RootBase {
            staging: PathBuf::from("/nonexistent/staging"),
            system: vec![PathBuf::from("/usr")],
            home: None,
            run_files: vec![("envgit".into(), PathBuf::from("/usr/bin/envgit"))],
        };
        super::enter_namespaces_early(1000, 1000);
        super::build_base_early(base.clone());
        let mut message = vec![0u8; 4096];
        let got = rustix::net::recv(&theirs, &mut message, RecvFlags::DONTWAIT);
        let (n, _) = got.expect("no early start was sent");
        assert_eq!(message[0], EARLY_TAG);
        let start: EarlyStart = serde_json::from_slice(&message[1..n]).unwrap();
        assert_eq!((start.uid, start.root), (1000, None));
        let got = rustix::net::recv(&theirs, &mut message, RecvFlags::DONTWAIT);
        PREFORKED.lock().unwrap().take();
        let (n, _) = got.expect("no base was sent");
        assert_eq!(message[0], BASE_TAG);
        let sent: EarlyBase = serde_json::from_slice(&message[1..n]).unwrap();
        assert_eq!(sent.root, base);
        assert_eq!(sent.etc_masks, vec![shadow]);
    }
}
