//! The seccomp filter: io_uring, ptrace, process_vm_*, bpf, keys, the mount
//! family, setns, nested user namespaces, TIOCSTI/TIOCLINUX, socket families other than unix,
//! inet, inet6 and netlink, setuid and setgid modes, and x32 (whose syscall numbers would slip
//! past the per-number rules).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// Why the filters could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp: unsupported architecture {0}")]
    UnsupportedArch(&'static str),
    /// A condition, rule or filter seccompiler refused to compile.
    #[error("seccomp: {0}")]
    Build(#[from] seccompiler::BackendError),
    /// The kernel refused the compiled filter.
    #[error("seccomp: {0}")]
    Install(#[source] seccompiler::Error),
}

type R<T> = Result<T, SeccompError>;

fn cond(arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, v: u64) -> R<SeccompCondition> {
    Ok(SeccompCondition::new(arg, len, op, v)?)
}

fn rule(conds: Vec<SeccompCondition>) -> R<SeccompRule> {
    Ok(SeccompRule::new(conds)?)
}

fn arch() -> R<TargetArch> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|_| SeccompError::UnsupportedArch(std::env::consts::ARCH))
}

/// Syscalls refused outright with EPERM.
const DENIED: &[i64] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_setns,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_userfaultfd,
];

fn eperm_filter() -> R<BpfProgram> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, vec![])).collect();
    use SeccompCmpArgLen::{Dword, Qword};
    // New user namespaces, by unshare or clone.
    let newuser = libc::CLONE_NEWUSER as u64;
    rules.insert(
        libc::SYS_unshare,
        vec![rule(vec![cond(
            0,
            Qword,
            SeccompCmpOp::MaskedEq(newuser),
            newuser,
        )?])?],
    );
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![cond(
            0,
            Qword,
            SeccompCmpOp::MaskedEq(newuser),
            newuser,
        )?])?],
    );
    // Pushing keystrokes into a terminal.
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, Dword, SeccompCmpOp::Eq, libc::TIOCSTI)?])?,
            rule(vec![cond(1, Dword, SeccompCmpOp::Eq, libc::TIOCLINUX)?])?,
        ],
    );
    // Socket families beyond unix, inet, inet6 and netlink (packet, vsock, bluetooth, …).
    let mut other_family = Vec::new();
    for af in [
        libc::AF_UNIX,
        libc::AF_INET,
        libc::AF_INET6,
        libc::AF_NETLINK,
    ] {
        other_family.push(cond(0, Dword, SeccompCmpOp::Ne, af as u64)?);
    }
    rules.insert(libc::SYS_socket, vec![rule(other_family)?]);
    setid_rules(&mut rules)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )?;
    let mut prog: BpfProgram = filter.try_into()?;
    // Before anything else: any syscall number with the x32 bit set kills the process.
    let prefix = vec![
        sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: 0x4000_0000,
        },
        sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_KILL_PROCESS,
        },
    ];
    prog.splice(0..0, prefix);
    Ok(prog)
}

/// A setuid or setgid mode, given by `chmod` or at a file's creation: a file the step leaves so
/// is its owner's program (or group's) for whoever runs it on the host, a setuid-root one in
/// root's own project, wherever it lies (in `node_modules/` or an `allow_write` directory,
/// which no snapshot checks) and whenever the step ends (a killed envgit clears nothing).
/// `openat2` takes its mode in memory: answered as `clone3` is ([`enosys_filter`]).
fn setid_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> R<()> {
    use SeccompCmpArgLen::Dword;
    const SETID: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];
    let has = |arg: u8, bits: u64| cond(arg, Dword, SeccompCmpOp::MaskedEq(bits), bits);
    // The mode in argument `mode` has either bit.
    let setid_mode = |mode: u8| -> R<Vec<SeccompRule>> {
        SETID
            .iter()
            .map(|&bit| rule(vec![has(mode, bit)?]))
            .collect()
    };
    // The same, where the flags in argument `flags` create a file (the mode is read only then).
    let creating_setid = |flags: u8, mode: u8| -> R<Vec<SeccompRule>> {
        let creating = [libc::O_CREAT as u64, libc::O_TMPFILE as u64];
        let mut out = Vec::new();
        for f in creating {
            for bit in SETID {
                out.push(rule(vec![has(flags, f)?, has(mode, bit)?])?);
            }
        }
        Ok(out)
    };
    rules.insert(libc::SYS_fchmod, setid_mode(1)?);
    rules.insert(libc::SYS_fchmodat, setid_mode(2)?);
    rules.insert(libc::SYS_fchmodat2, setid_mode(2)?);
    rules.insert(libc::SYS_mknodat, setid_mode(2)?);
    rules.insert(libc::SYS_openat, creating_setid(2, 3)?);
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_chmod, setid_mode(1)?);
        rules.insert(libc::SYS_creat, setid_mode(1)?);
        rules.insert(libc::SYS_mknod, setid_mode(1)?);
        rules.insert(libc::SYS_open, creating_setid(1, 2)?);
    }
    Ok(())
}

/// What takes its arguments in memory seccomp cannot read, answered ENOSYS so that libc and
/// the runtimes fall back to the call whose arguments the first filter checks: `clone3`'s
/// flags (to `clone`), `openat2`'s mode (to `openat`; a setuid one: [`setid_rules`]).
fn enosys_filter() -> R<BpfProgram> {
    let rules: BTreeMap<i64, Vec<SeccompRule>> =
        [(libc::SYS_clone3, vec![]), (libc::SYS_openat2, vec![])]
            .into_iter()
            .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )?;
    Ok(filter.try_into()?)
}

/// The filters, compiled by a zygote while it waits for the spec (they depend on nothing in
/// it): compiling them in the worker cost each step ~0.2 ms. `None`: they did not compile
/// then, and `apply` compiles them again to say why.
static COMPILED: std::sync::OnceLock<Option<[BpfProgram; 2]>> = std::sync::OnceLock::new();

fn compile() -> R<[BpfProgram; 2]> {
    Ok([eperm_filter()?, enosys_filter()?])
}

/// Compiles the filters now, for a later [`apply`] in this process or a child forked from it.
pub fn compile_early() {
    COMPILED.get_or_init(|| compile().ok());
}

pub fn apply() -> R<()> {
    let compiled = match COMPILED.get().and_then(Option::as_ref) {
        Some(progs) => progs,
        None => &compile()?,
    };
    for prog in compiled {
        seccompiler::apply_filter(prog).map_err(SeccompError::Install)?;
    }
    Ok(())
}
