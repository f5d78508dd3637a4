//! The kernel and what it lets the sandbox use: the version, user namespaces,
//! Landlock, seccomp; and git.

use std::process::Command;
use std::time::Duration;

use super::Check;
use super::proc::{run_bounded, which};

/// Landlock ABI versions, the kernel that brought each, and what envgit gets from it.
const LANDLOCK_ABIS: [(i32, &str, &str); 7] = [
    (1, "5.13", "filesystem access rules"),
    (2, "5.19", "rename/link across directories"),
    (3, "6.2", "truncate"),
    (4, "6.7", "TCP bind/connect rules (unused)"),
    (5, "6.10", "ioctl on devices"),
    (6, "6.12", "abstract-socket and signal scoping"),
    (7, "6.15", "audit logging"),
];
/// The ABI whose features envgit asks for (`landlock_rules.rs`); older ones are used best-effort.
const LANDLOCK_WANTED: i32 = 6;

fn sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

pub fn kernel() -> Check {
    const NAME: &str = "kernel";
    let uname = rustix::system::uname();
    let sysname = uname.sysname().to_string_lossy().into_owned();
    let release = uname.release().to_string_lossy().into_owned();
    let needs = "Landlock needs Linux 5.13, its abstract-socket and signal scoping 6.12; \
                 user namespaces and seccomp filters are older";
    if sysname != "Linux" {
        return Check::fail(
            NAME,
            format!("{sysname} {release}: envgit's sandbox needs Linux"),
            "run envgit on Linux 5.13 or later (a Linux VM or WSL 2 on other systems)",
        );
    }
    match kernel_version(&release) {
        Some(v) if v >= (5, 13) => {
            let extra = if v >= (6, 12) {
                "every sandbox feature envgit uses is in this kernel".to_string()
            } else {
                format!("{needs}; this kernel lacks the newer Landlock features")
            };
            Check::pass(NAME, format!("Linux {release} (≥ 5.13): {extra}"))
        }
        Some(_) => Check::fail(
            NAME,
            format!("Linux {release} is older than 5.13: {needs}"),
            "upgrade to Linux 5.13 or later (6.12 or later for every feature)",
        ),
        None => Check::fail(
            NAME,
            format!("cannot read the kernel version from `{release}`"),
            "run envgit on Linux 5.13 or later",
        ),
    }
}

pub fn user_namespaces() -> Check {
    const NAME: &str = "user namespaces";
    let root = rustix::process::geteuid().is_root();
    let mut facts: Vec<String> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut fixes: Vec<String> = Vec::new();

    match sysctl("/proc/sys/user/max_user_namespaces") {
        Some(v) if v.parse::<u64>().is_ok_and(|n| n > 0) => {
            facts.push(format!("user.max_user_namespaces={v}"));
        }
        Some(v) => {
            problems.push(format!(
                "user.max_user_namespaces={v}: user namespaces are disabled"
            ));
            fixes.push("sudo sysctl -w user.max_user_namespaces=15000 (and put `user.max_user_namespaces=15000` in /etc/sysctl.d/99-envgit.conf to keep it)".into());
        }
        None => facts.push("user.max_user_namespaces not readable".into()),
    }
    if let Some(v) = sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        if v == "1" && !root {
            problems.push(
                "kernel.apparmor_restrict_unprivileged_userns=1: AppArmor restricts unprivileged user namespaces".into(),
            );
            fixes.push(
                "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or add an AppArmor profile granting `userns,` to the envgit binary)".into(),
            );
        } else if v == "1" {
            facts.push(
                "kernel.apparmor_restrict_unprivileged_userns=1 (does not apply to root)".into(),
            );
        } else {
            facts.push(format!("kernel.apparmor_restrict_unprivileged_userns={v}"));
        }
    }
    if let Some(v) = sysctl("/proc/sys/kernel/unprivileged_userns_clone") {
        if v == "0" && !root {
            problems.push(
                "kernel.unprivileged_userns_clone=0: unprivileged user namespaces are disabled"
                    .into(),
            );
            fixes.push("sudo sysctl -w kernel.unprivileged_userns_clone=1".into());
        } else {
            facts.push(format!("kernel.unprivileged_userns_clone={v}"));
        }
    }

    // The live probe: a process that really creates a user and a network namespace, as the
    // sandbox does. (The sandboxed `true` below is the full probe.)
    match which("unshare") {
        Some(unshare) => {
            let ran = run_bounded(
                Command::new(&unshare).args(["--user", "--net", "true"]),
                Duration::from_secs(5),
            );
            match ran {
                Ok(r) if r.success() => facts.push("`unshare --user --net true` works".into()),
                Ok(r) => {
                    let why = r.stderr_tail();
                    problems.push(format!(
                        "`unshare --user --net true` failed ({}): {why}",
                        r.status()
                    ));
                    if fixes.is_empty() {
                        let errno = if why.contains("No space left") {
                            rustix::io::Errno::NOSPC.raw_os_error()
                        } else {
                            rustix::io::Errno::PERM.raw_os_error()
                        };
                        let explained = envgit_sandbox::probe::explain_userns_failure(
                            std::io::Error::from_raw_os_error(errno),
                        );
                        fixes.push(match explained.split_once("fix: ") {
                            Some((_, fix)) => fix.trim_matches('`').to_string(),
                            None => "allow unprivileged user namespaces in this host or container (for Docker: `--security-opt seccomp=unconfined --security-opt apparmor=unconfined`, or run envgit outside the container)".into(),
                        });
                    }
                }
                Err(e) => facts.push(format!("could not run {}: {e}", unshare.display())),
            }
        }
        None => facts.push("no `unshare` on PATH: the sandboxed `true` below is the probe".into()),
    }

    if problems.is_empty() {
        Check::pass(NAME, facts.join("; "))
    } else {
        Check::fail(NAME, problems.join("; "), fixes.join("\n"))
    }
}

fn landlock_features(abi: i32) -> String {
    let have: Vec<&str> = LANDLOCK_ABIS
        .iter()
        .filter(|(v, _, _)| *v <= abi)
        .map(|(_, _, what)| *what)
        .collect();
    let mut s = format!("ABI {abi}: {}", have.join(", "));
    let missing: Vec<String> = LANDLOCK_ABIS
        .iter()
        .filter(|(v, _, _)| *v > abi && *v <= LANDLOCK_WANTED)
        .map(|(v, k, what)| format!("{what} (ABI {v}, Linux {k})"))
        .collect();
    if !missing.is_empty() {
        s.push_str(&format!(
            "; not enforced on this kernel: {}",
            missing.join(", ")
        ));
    }
    s
}

pub fn landlock() -> Check {
    const NAME: &str = "Landlock";
    match envgit_sandbox::probe::landlock_abi_or_error() {
        Ok(abi) => Check::pass(NAME, landlock_features(abi)),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error()) => {
            Check::fail(
                NAME,
                format!("built into the kernel but not enabled at boot ({e})"),
                "add `landlock` to the kernel's `lsm=` boot parameter (keep the others that \
             /sys/kernel/security/lsm lists, e.g. lsm=landlock,lockdown,yama,integrity,apparmor,bpf), \
             then reboot",
            )
        }
        Err(e) => Check::fail(
            NAME,
            format!(
                "landlock_create_ruleset failed ({e}): the kernel has no Landlock, or a container's \
                 seccomp profile blocks the call"
            ),
            "use Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK=y; in a container, allow \
             the landlock_* system calls (Docker 20.10.10+ does by default)",
        ),
    }
}

pub fn seccomp() -> Check {
    const NAME: &str = "seccomp";
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mode = status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .map(str::trim)
        .unwrap_or("?")
        .to_string();
    if envgit_sandbox::probe::seccomp_available() {
        let note = if mode == "2" {
            "; this process already runs under a filter (a container's): envgit's stacks on it"
        } else {
            ""
        };
        Check::pass(
            NAME,
            format!("filters available with the kill_process and errno actions{note}"),
        )
    } else {
        let actions = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "none".into());
        Check::fail(
            NAME,
            format!(
                "seccomp filters unavailable (Seccomp mode {mode}, actions available: {actions})"
            ),
            "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y (Linux 4.14 or \
             later for the kill_process action)",
        )
    }
}

pub fn git() -> Check {
    const NAME: &str = "git";
    let fix = "install git: `sudo apt-get install git` (Debian/Ubuntu), `sudo dnf install git` \
               (Fedora), or see https://git-scm.com/downloads";
    let Some(path) = which("git") else {
        return Check::fail(NAME, "no `git` on PATH", fix);
    };
    match run_bounded(Command::new(&path).arg("--version"), Duration::from_secs(5)) {
        Ok(r) if r.success() => {
            Check::pass(NAME, format!("{} ({})", r.stdout.trim(), path.display()))
        }
        Ok(r) => Check::fail(
            NAME,
            format!(
                "`{} --version` failed ({}): {}",
                path.display(),
                r.status(),
                r.stderr_tail()
            ),
            fix,
        ),
        Err(e) => Check::fail(NAME, format!("cannot run {}: {e}", path.display()), fix),
    }
}

#[cfg(test)]
mod tests {
    use super::{kernel_version, landlock_features};

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.18.44-fc-v595"), Some((6, 18)));
        assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(kernel_version("junk"), None);
    }

    #[test]
    fn older_landlock_abis_name_what_is_missing() {
        let s = landlock_features(3);
        assert!(s.contains("truncate"), "{s}");
        assert!(
            s.contains("abstract-socket and signal scoping (ABI 6, Linux 6.12)"),
            "{s}"
        );
        assert!(!landlock_features(7).contains("not enforced"));
    }
}
