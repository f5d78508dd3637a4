//! The sandbox process: a zygote forked at envgit's start (`zygote`), or the hidden subcommand
//! the host side re-executes. Single-threaded until its last fork. Any failure before the
//! command starts is written to the error pipe and ends the process with 125, so envgit can
//! tell its own failure from the command's exit code.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use rustix::fs::Mode;
use rustix::thread::UnshareFlags;

use crate::console::{CONSOLE_FD_ENV, Console};
use crate::setup_error::{SetupError, call};
use crate::spec::{RootBase, Spec};
use crate::sys::{self, Forked};
use crate::timing::mark;
use crate::zygote::EarlyStart;
use crate::{console, init, landlock_rules, mounts, seccomp, timing, userns};

pub const SPEC_FD_ENV: &str = "ENVGIT_SANDBOX_SPEC_FD";
pub const ERR_FD_ENV: &str = "ENVGIT_SANDBOX_ERR_FD";

fn fd_from_env(name: &str) -> Option<OwnedFd> {
    let n: i32 = std::env::var(name).ok()?.parse().ok()?;
    // SAFETY: the host side passed this fd number for us alone; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(n) })
}

/// The sandbox process's channels to envgit: the spec to read, the pipe for envgit's own
/// set-up errors, and the console socket when the command gets a terminal.
pub(crate) struct Channels {
    pub spec: OwnedFd,
    pub err: Option<OwnedFd>,
    /// The command's exit code goes here just before this process exits (a zygote's;
    /// `launch::SandboxChild::wait`).
    pub done: Option<OwnedFd>,
    pub console: Option<OwnedFd>,
    /// What a zygote did before its channels came ([`enter_early`]).
    pub early: Option<Entered>,
}

/// A zygote's first namespaces, entered before the spec existed, with what it was told
/// and the relay when it was forked too ([`EarlyStart::relay`]); or why they could not be
/// (said once the error pipe has come).
pub(crate) struct Entered(Result<(EarlyStart, Option<WaitingRelay>), SetupError>);

/// The zygote's early start ([`crate::zygote::enter_namespaces_early`]): the run's cgroup v1
/// directories, the user and network namespaces, loopback up, and when allowed the relay and
/// the other namespaces. The rest waits for the spec.
pub(crate) fn enter_early(message: &[u8]) -> Entered {
    timing::start();
    Entered(
        serde_json::from_slice::<EarlyStart>(message)
            .map_err(SetupError::BadSpec)
            .and_then(|start| {
                enter_user_and_net(&start.cgroups, start.uid, start.gid)?;
                if !start.relay {
                    return Ok((start, None));
                }
                let relay = enter_the_rest()?;
                crate::seccomp::compile_early();
                mark("seccomp compiled");
                Ok((start, Some(relay)))
            }),
    )
}

impl Entered {
    /// The second early message ([`crate::zygote::build_base_early`]): the new root's base,
    /// built in the mount namespace the start made. Nothing without one (no relay forked
    /// early: the mount namespace waits for the spec, and PID 1 builds the base); a failure
    /// is the early start's, which the spec then meets.
    pub(crate) fn build_base(&mut self, message: &[u8]) {
        let Ok((start, Some(_))) = &mut self.0 else {
            return;
        };
        if start.root.is_some() {
            return;
        }
        let built = serde_json::from_slice::<crate::zygote::EarlyBase>(message)
            .map_err(SetupError::BadSpec)
            .and_then(|base| {
                with_view_umask(|| mounts::build_base(&base.root, &base.etc_masks))?;
                Ok(base)
            });
        match built {
            Ok(base) => {
                start.root = Some(base.root);
                start.etc_masks = base.etc_masks;
            }
            Err(e) => self.0 = Err(e),
        }
    }
}

/// Into the run's cgroups first, so every process the sandbox ever makes is counted; then the
/// user and network namespaces, with loopback up.
fn enter_user_and_net(cgroups: &[PathBuf], uid: u32, gid: u32) -> Result<(), SetupError> {
    crate::limits::join(cgroups)?;
    mark("join cgroups");
    userns::enter(uid, gid)?;
    mark("user, net namespaces");
    sys::loopback_up().map_err(call("bringing up loopback"))?;
    mark("loopback up");
    Ok(())
}

/// The relay, forked into the network namespace while this process is still in the host's
/// mount and pid namespaces, then those (and ipc, uts) made new for PID 1 to come.
fn enter_the_rest() -> Result<WaitingRelay, SetupError> {
    let relay = fork_relay()?;
    mark("relay forked");
    // SAFETY: single-threaded here, so no other thread shares the fs state unshare changes.
    unsafe {
        rustix::thread::unshare_unsafe(
            UnshareFlags::NEWNS
                | UnshareFlags::NEWPID
                | UnshareFlags::NEWIPC
                | UnshareFlags::NEWUTS,
        )
    }
    .map_err(call("creating mount/pid namespaces"))?;
    mark("mount, pid namespaces");
    Ok(relay)
}

/// Mount points and files made for the view are readable and searchable by the command,
/// which may not be the user that makes them (a project owner, when envgit runs as root);
/// envgit's own umask is back once `build` returns.
fn with_view_umask<T>(build: impl FnOnce() -> T) -> T {
    let umask = rustix::process::umask(Mode::from_raw_mode(0o022));
    let built = build();
    rustix::process::umask(umask);
    built
}

/// Every namespace for `spec` with the relay waiting: made now, or checked against what the
/// zygote made early (the same ids and the same root's base, else nothing runs; the cgroups
/// it did not join yet are joined now). Says whether the root's base is built.
fn namespaces(
    spec: &Spec,
    early: Option<Entered>,
) -> Result<(WaitingRelay, mounts::Base), SetupError> {
    let Some(entered) = early else {
        enter_user_and_net(&spec.cgroups, spec.uid, spec.gid)?;
        return Ok((enter_the_rest()?, mounts::Base::NotBuilt));
    };
    let (start, relay) = entered.0?;
    if (start.uid, start.gid) != (spec.uid, spec.gid) {
        return Err(SetupError::EarlyIds {
            early: (start.uid, start.gid),
            spec: (spec.uid, spec.gid),
        });
    }
    let base = match (&relay, start.root) {
        (Some(_), Some(early)) => {
            let spec_base = RootBase::of(spec);
            if early != spec_base {
                return Err(SetupError::EarlyBase {
                    early: Box::new(early),
                    spec: Box::new(spec_base),
                });
            }
            mounts::Base::Built {
                masked: start.etc_masks,
            }
        }
        _ => mounts::Base::NotBuilt,
    };
    let rest: Vec<PathBuf> = spec
        .cgroups
        .iter()
        .filter(|dir| !start.cgroups.contains(dir))
        .cloned()
        .collect();
    crate::limits::join(&rest)?;
    mark("join cgroups");
    match relay {
        Some(relay) => Ok((relay, base)),
        None => Ok((enter_the_rest()?, base)),
    }
}

/// Entry point of the hidden subcommand (a re-executed envgit). Never returns.
pub fn sandbox_main() -> ! {
    let err = fd_from_env(ERR_FD_ENV);
    let Some(spec) = fd_from_env(SPEC_FD_ENV) else {
        eprintln!("envgit: sandbox: no sandbox spec (this subcommand is internal to envgit)");
        std::process::exit(125);
    };
    sandbox_main_with(Channels {
        spec,
        err,
        done: None,
        console: fd_from_env(CONSOLE_FD_ENV),
        early: None,
    })
}

/// The sandbox process, from a re-execution or a zygote (`crate::zygote`). Never returns.
pub(crate) fn sandbox_main_with(channels: Channels) -> ! {
    timing::start();
    let mut err = channels.err.map(std::fs::File::from);
    for fd in err
        .iter()
        .map(AsFd::as_fd)
        .chain(channels.console.iter().map(AsFd::as_fd))
    {
        // The command must never inherit (and write into) envgit's channels.
        let _ = rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC);
    }
    let code = match run(channels.spec, channels.console, channels.early, &mut err) {
        Ok(code) => code,
        Err(failure) => {
            if let Some(e) = err.as_mut() {
                let _ = e.write_all(failure.to_string().as_bytes());
            } else {
                eprintln!("envgit: sandbox: {failure}");
            }
            125
        }
    };
    // envgit has the code (and the end of the error pipe) before this process's exit, which
    // unmaps a fork of envgit (~0.3 ms) beside the step's end instead of before it.
    drop(err);
    if let Some(done) = channels.done {
        let _ = rustix::io::write(&done, &code.to_le_bytes());
    }
    std::process::exit(code)
}

fn read_spec(fd: OwnedFd) -> Result<Spec, SetupError> {
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .read_to_end(&mut bytes)
        .map_err(SetupError::ReadSpec)?;
    serde_json::from_slice(&bytes).map_err(SetupError::BadSpec)
}

/// `console`: present when envgit wants the command on a terminal; PID 1 makes one inside.
fn run(
    spec: OwnedFd,
    console: Option<OwnedFd>,
    early: Option<Entered>,
    err: &mut Option<std::fs::File>,
) -> Result<i32, SetupError> {
    let spec = read_spec(spec)?;
    mark("read spec");
    let die_with_parent = || {
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    };
    die_with_parent();
    // The terminal's Ctrl-C reaches PID 1 (same process group), which forwards it.
    let _ = sys::set_ignored(libc::SIGINT, true);
    let _ = sys::set_ignored(libc::SIGQUIT, true);
    let (waiting, base) = namespaces(&spec, early)?;
    // The relay binds its listeners while PID 1 builds the root; PID 1 waits for it only
    // before it starts the command.
    let (relay, relay_ready) = waiting.configure(spec.relay.as_ref())?;
    mark("relay configured");
    // PID 1 tells the command's exit code on `verdict` once nothing else runs in the sandbox,
    // and stays until this process has exited (`release` ends): see `init::report_and_linger`.
    let (verdict_r, verdict_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(call("pipe"))?;
    let (release_r, release_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(call("pipe"))?;
    let code = match sys::fork().map_err(call("fork"))? {
        Forked::Child => {
            drop((verdict_r, release_w));
            die_with_parent();
            let code = match pid1(&spec, base, err, console, relay_ready) {
                Ok(code) => code,
                Err(failure) => {
                    if let Some(e) = err.as_mut() {
                        let _ = e.write_all(failure.to_string().as_bytes());
                    }
                    125
                }
            };
            init::report_and_linger(code, verdict_w, release_r);
        }
        Forked::Parent(pid1) => {
            // Only PID 1 talks on the console socket: when it ends, envgit must see the end.
            drop(console);
            drop(relay_ready);
            drop((verdict_w, release_r));
            // Closed by the kernel as this process exits, which is what lets PID 1 go: the
            // namespaces are then torn down in PID 1's exit, after envgit has the code.
            std::mem::forget(release_w);
            match init::read_verdict(verdict_r) {
                Some(code) => code,
                // PID 1 died without a word (killed from outside): its own status says it.
                None => wait_exit(pid1),
            }
        }
    };
    if let Some(r) = relay {
        let _ = rustix::process::kill_process(r, rustix::process::Signal::KILL);
    }
    Ok(code)
}

fn wait_exit(pid: i32) -> i32 {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return 125;
    };
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => {
                return status
                    .exit_status()
                    .or_else(|| status.terminating_signal().map(|s| 128 + s))
                    .unwrap_or(125);
            }
            Ok(None) | Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return 125,
        }
    }
}

/// The relay, forked and waiting for its configuration on a pipe ([`WaitingRelay::configure`]).
/// It lives in the sandbox's network namespace but the host's mount and pid namespaces: the
/// command can neither see nor signal it.
pub(crate) struct WaitingRelay {
    pid: rustix::process::Pid,
    config: OwnedFd,
    /// One byte comes once its listeners are bound ([`wait_for_relay`]).
    ready: OwnedFd,
}

fn fork_relay() -> Result<WaitingRelay, SetupError> {
    let (ready_r, ready_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(call("pipe"))?;
    let (config_r, config_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(call("pipe"))?;
    let parent = rustix::process::getpid();
    match sys::fork().map_err(call("fork"))? {
        Forked::Child => {
            drop((ready_r, config_w));
            let _ = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ));
            if rustix::process::getppid() != Some(parent) {
                // The sandbox process died before the signal was armed.
                // SAFETY: _exit ends this forked child without the parent's destructors.
                unsafe { libc::_exit(0) }
            }
            // The relay holds nothing of the sandbox process's but its own pipes: a console
            // socket or error pipe kept open here would hide the sandbox's end from envgit.
            sys::close_fds_except(&[ready_w.as_raw_fd(), config_r.as_raw_fd()]);
            let mut bytes = Vec::new();
            let config = std::fs::File::from(config_r).read_to_end(&mut bytes);
            if config.is_err() || bytes.is_empty() {
                // No relay for this run (or the sandbox process is gone).
                // SAFETY: _exit ends this forked child without the parent's destructors.
                unsafe { libc::_exit(0) }
            }
            let e = match serde_json::from_slice(&bytes) {
                Ok(config) => match crate::relay::serve(config, ready_w) {
                    Ok(never) => match never {},
                    Err(e) => format!("{e:?}"),
                },
                Err(e) => format!("bad configuration: {e}"),
            };
            eprintln!("envgit: relay: {e}");
            std::process::exit(1);
        }
        Forked::Parent(pid) => {
            drop((ready_w, config_r));
            let pid = rustix::process::Pid::from_raw(pid).ok_or(SetupError::RelayPid)?;
            Ok(WaitingRelay {
                pid,
                config: config_w,
                ready: ready_r,
            })
        }
    }
}

impl WaitingRelay {
    /// Sends the relay its configuration; with none (a run with loopback only) it ends.
    /// Returns its pid and the pipe its ready byte comes on, when it runs.
    fn configure(
        self,
        config: Option<&crate::spec::RelaySpec>,
    ) -> Result<(Option<rustix::process::Pid>, Option<OwnedFd>), SetupError> {
        let Some(config) = config else {
            drop(self.config);
            let _ = rustix::process::kill_process(self.pid, rustix::process::Signal::KILL);
            return Ok((None, None));
        };
        let bytes = serde_json::to_vec(config).map_err(SetupError::BadSpec)?;
        std::fs::File::from(self.config)
            .write_all(&bytes)
            .map_err(call("configuring the relay"))?;
        Ok((Some(self.pid), Some(self.ready)))
    }
}

/// Wait until the relay's listeners are bound: its byte, or the end of the pipe if it died
/// first (then nothing inside could reach the network, so the step fails).
fn wait_for_relay(ready: OwnedFd) -> Result<(), SetupError> {
    let mut b = [0u8; 1];
    match std::fs::File::from(ready).read(&mut b) {
        Ok(1) => Ok(()),
        _ => Err(SetupError::RelayNotStarted),
    }
}

/// PID 1: build the root, start the command, supervise it.
fn pid1(
    spec: &Spec,
    base: mounts::Base,
    err: &mut Option<std::fs::File>,
    console: Option<OwnedFd>,
    relay_ready: Option<OwnedFd>,
) -> Result<i32, SetupError> {
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    with_view_umask(|| mounts::build_root(spec, base))?;
    mark("pid 1: root built");
    // The command's terminal, on the view's own devpts (see `console`).
    let terminal = match console {
        Some(socket) => Some(Console::open(spec.uid, spec.gid)?.hand_over(socket)?),
        None => None,
    };
    mark("pid 1: console");
    if let Some(ready) = relay_ready {
        wait_for_relay(ready)?;
        mark("pid 1: relay ready");
    }
    // The UTS namespace keeps the host's name: tools that write it into their lock files
    // (git's `gc.pid`) and compare it later must see the same host inside and out.
    match sys::fork().map_err(call("fork"))? {
        Forked::Child => {
            let keep = err.as_ref().map(|e| e.as_raw_fd());
            let failure = match exec_command(spec, keep, terminal) {
                Ok(never) => match never {},
                Err(Failed::Setup(e)) => e,
                Err(Failed::Exec(m, code)) => {
                    // The command's own failure (like a shell's 127), not envgit's.
                    eprintln!("envgit: {m}");
                    std::process::exit(code);
                }
            };
            if let Some(e) = err.as_mut() {
                let _ = e.write_all(failure.to_string().as_bytes());
            }
            std::process::exit(125);
        }
        Forked::Parent(worker) => {
            // The worker's copy is the terminal's last: the pty ends when the command does.
            drop(terminal);
            // Only the worker reports setup errors from here on; PID 1 keeps the pipe closed
            // so envgit sees EOF as soon as the command has started.
            *err = None;
            Ok(init::supervise(worker))
        }
    }
}

/// The worker's failure: envgit's own before the exec, or the command's (its exit code).
enum Failed {
    Setup(SetupError),
    Exec(String, i32),
}

impl<E: Into<SetupError>> From<E> for Failed {
    fn from(e: E) -> Self {
        Failed::Setup(e.into())
    }
}

/// The worker: new session, no capabilities, Landlock, seccomp, exec.
fn exec_command(
    spec: &Spec,
    keep_fd: Option<i32>,
    terminal: Option<OwnedFd>,
) -> Result<std::convert::Infallible, Failed> {
    let _ = sys::set_ignored(libc::SIGINT, false);
    let _ = sys::set_ignored(libc::SIGQUIT, false);
    rustix::process::setsid().map_err(call("setsid"))?;
    if let Some(slave) = terminal {
        console::take_as_controlling(slave, spec.terminal_stdio)?;
    }
    drop_capabilities(spec)?;
    rustix::thread::set_no_new_privs(true).map_err(call("no_new_privs"))?;
    let mut writable = vec![
        spec.project.clone(),
        "/tmp".into(),
        "/var/tmp".into(),
        "/dev".into(),
    ];
    writable.extend(spec.writable.iter().cloned());
    if let Some(h) = &spec.home {
        writable.push(h.path.clone());
    }
    writable.retain(|p| p.exists());
    mark("worker: session, caps");
    sys::close_fds_except(&keep_fd.into_iter().collect::<Vec<_>>());
    landlock_rules::restrict(&writable)?;
    mark("worker: landlock");
    crate::limits::set_nproc(if spec.nproc == 0 {
        crate::limits::DEFAULT_PIDS_MAX
    } else {
        spec.nproc
    })?;
    seccomp::apply()?;
    mark("worker: seccomp");
    let (prog, args) = spec.argv.split_first().ok_or(SetupError::EmptyCommand)?;
    std::env::set_current_dir(&spec.cwd).map_err(|source| SetupError::Cwd {
        dir: spec.cwd.clone(),
        source,
    })?;
    let e = std::process::Command::new(prog)
        .args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .exec();
    let (what, code) = if e.kind() == std::io::ErrorKind::NotFound {
        ("command not found", 127)
    } else {
        ("cannot run it", 126)
    };
    Err(Failed::Exec(format!("{prog}: {what} ({e})"), code))
}

/// Empty the bounding set (while the process may still do so), become the command's user
/// ([`userns::become_user`]), then empty every other set and check that none is left.
fn drop_capabilities(spec: &Spec) -> Result<(), SetupError> {
    for cap in 0..64u32 {
        // Stop at the first capability this kernel does not know.
        // SAFETY: prctl(PR_CAPBSET_DROP) takes a capability number and touches no memory.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r == -1 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(SetupError::DropCapability {
                cap,
                source: std::io::Error::last_os_error(),
            });
        }
    }
    userns::become_user(spec.uid, spec.gid)?;
    rustix::thread::clear_ambient_capability_set().map_err(call("ambient capabilities"))?;
    rustix::thread::set_capabilities(
        None,
        rustix::thread::CapabilitySets {
            effective: rustix::thread::CapabilitySet::empty(),
            permitted: rustix::thread::CapabilitySet::empty(),
            inheritable: rustix::thread::CapabilitySet::empty(),
        },
    )
    .map_err(call("dropping capabilities"))?;
    let left = rustix::thread::capabilities(None).map_err(call("capabilities"))?;
    if !left.permitted.is_empty() || !left.effective.is_empty() {
        return Err(SetupError::CapabilitiesLeft);
    }
    Ok(())
}
