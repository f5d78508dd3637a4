//! The sandbox's view of the filesystem, built on a private tmpfs and entered with pivot_root:
//! only the system directories and toolchain homes of `spec.system` read-only (never the
//! host's whole `/`), the project (and `allow_write` paths) read-write, the home through a
//! per-project overlay, a private `/tmp`, `/var/tmp` and `/run`, a minimal `/dev`, a fresh
//! `/proc`, and masks over what must not be read. A mask target is opened beneath the new root without
//! following symlinks, so a link the agent planted can never redirect a mount.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::mount::{MountFlags, MountPropagationFlags};

use crate::spec::{RootBase, Spec};
use crate::sys;

/// Why the sandbox's view could not be built; the command does not start.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// A call on the way failed; `what` names the step and the path it was for.
    #[error("{what}: {source}")]
    Step {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not UTF-8, cannot name it to overlayfs", .0.display())]
    NotUtf8(PathBuf),
    #[error("bad /run/envgit file name {0:?}")]
    BadRunFileName(String),
}

type R<T = ()> = Result<T, MountError>;

fn ctx<T, E: Into<std::io::Error>>(r: Result<T, E>, what: impl FnOnce() -> String) -> R<T> {
    r.map_err(|e| MountError::Step {
        what: what(),
        source: e.into(),
    })
}

/// `root` + absolute `p`.
fn inside(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}

/// Open `p` (absolute) below `root` as an O_PATH fd without following any symlink.
pub(crate) fn open_beneath(root_fd: &OwnedFd, p: &Path) -> rustix::io::Result<OwnedFd> {
    let rel = p.strip_prefix("/").unwrap_or(p);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    rustix::fs::openat2(
        root_fd,
        rel,
        OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// The new root's part no step's command shapes ([`RootBase`]), built before the spec exists
/// (by the zygote, while envgit opens the store) or by PID 1: the host's mounts made private,
/// the new root's tmpfs with its skeleton, the system directories read-only, the file denied
/// paths are masked with, `etc_masks` (what only root may read in `/etc`), `/dev`, private
/// `/tmp`, `/var/tmp` and `/run`, and the home.
pub(crate) fn build_base(base: &RootBase, etc_masks: &[PathBuf]) -> R {
    ctx(
        rustix::mount::mount_change(
            "/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        ),
        || "making mounts private".into(),
    )?;
    crate::timing::mark("root: / private");
    let staging = &base.staging;
    ctx(
        rustix::mount::mount(
            "tmpfs",
            staging,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            c"mode=0700",
        ),
        || format!("tmpfs on {}", staging.display()),
    )?;
    let root = staging.join("root");
    ctx(std::fs::create_dir(&root), || {
        format!("mkdir {}", root.display())
    })?;
    // The new root is a tmpfs of its own: only what is mounted on it below is there.
    ctx(
        rustix::mount::mount(
            "tmpfs",
            &root,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            c"mode=0755",
        ),
        || "tmpfs for the new root".into(),
    )?;
    for d in ["tmp", "run", "dev", "proc", "var", "var/tmp"] {
        ctx(std::fs::create_dir_all(root.join(d)), || {
            format!("mkdir /{d}")
        })?;
    }
    for (link, target) in [("var/run", "../run"), ("var/lock", "../run/lock")] {
        ctx(std::os::unix::fs::symlink(target, root.join(link)), || {
            format!("/{link}")
        })?;
    }
    for p in &base.system {
        system_dir(&root, p)?;
    }
    crate::timing::mark("root: system dirs");
    // An unreadable empty file to mount over denied files.
    let masked_file = staging.join("masked");
    ctx(std::fs::write(&masked_file, b""), || "mask file".into())?;
    ctx(rustix::fs::chmod(&masked_file, Mode::empty()), || {
        "chmod mask file".into()
    })?;
    let root_fd = open_root(&root)?;
    dev(&root, &root_fd)?;
    // Private /tmp, /var/tmp and /run before the home: a home under /tmp is bound on top.
    private_tmpfs(&root_fd, Path::new("/tmp"), "mode=1777")?;
    private_tmpfs(&root_fd, Path::new("/var/tmp"), "mode=1777")?;
    private_tmpfs(&root_fd, Path::new("/run"), "mode=0755")?;
    run_files(&root, &base.run_files)?;
    crate::timing::mark("root: dev, tmpfs, /run/envgit");
    if let Some(home) = &base.home {
        mount_home(&root, &root_fd, home)?;
    }
    crate::timing::mark("root: home");
    // Last, so that nothing mounted in the base covers them.
    for p in etc_masks {
        mask(&root_fd, p, &masked_file)?;
    }
    crate::timing::mark("root: /etc masks");
    Ok(())
}

fn open_root(root: &Path) -> R<OwnedFd> {
    ctx(
        rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ),
        || "open root".into(),
    )
}

/// Whether [`build_base`] ran before the spec came.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum Base {
    /// Built early for what the spec says (the caller checked: [`RootBase::of`]), with these
    /// paths masked.
    Built {
        masked: Vec<PathBuf>,
    },
    NotBuilt,
}

/// Build the new root under `spec.staging` (its base first, unless built early) and pivot
/// into it.
pub(crate) fn build_root(spec: &Spec, base: Base) -> R {
    let masked_early = match base {
        Base::Built { masked } => masked,
        Base::NotBuilt => {
            build_base(&RootBase::of(spec), &[])?;
            Vec::new()
        }
    };
    let root = spec.staging.join("root");
    let masked_file = spec.staging.join("masked");
    let root_fd = open_root(&root)?;
    run_files(&root, &spec.run_files)?;
    // A project under /tmp is bound on top of the base's private /tmp.
    for w in std::iter::once(&spec.project).chain(spec.writable.iter()) {
        bind_rw(&root, &root_fd, w)?;
    }
    // Over the project's bind, before the read-only binds that may lie inside it.
    if let Some(git) = &spec.git {
        overlay(&root, &root_fd, git)?;
    }
    crate::timing::mark("root: home, project");
    proc_(&root_fd)?;
    for p in &spec.read_only {
        read_only(&root_fd, p)?;
    }
    // A path the base masked stays masked, unless a read-write bind made since covers it.
    let covered = |p: &Path| {
        std::iter::once(&spec.project)
            .chain(spec.writable.iter())
            .any(|w| p.starts_with(w))
    };
    for p in spec.masks.iter().chain(spec.hidden.iter()) {
        if !masked_early.contains(p) || covered(p) {
            mask(&root_fd, p, &masked_file)?;
        }
    }
    crate::timing::mark("root: masks");
    resolv_conf(&root, &root_fd, &spec.resolv_conf)?;
    for (src, dst) in &spec.file_overrides {
        if let Ok(fd) = open_beneath(&root_fd, dst) {
            ctx(
                rustix::mount::mount_bind(src, fd_path(&fd).as_str()),
                || format!("bind {}", dst.display()),
            )?;
            let fd = ctx(open_beneath(&root_fd, dst), || dst.display().to_string())?;
            let _ = sys::mount_setattr(fd.as_fd(), false, sys::MOUNT_ATTR_RDONLY);
        }
    }
    // Nothing can be created at the top of the new root itself.
    ctx(
        sys::mount_setattr(root_fd.as_fd(), false, sys::MOUNT_ATTR_RDONLY),
        || "making the new root read-only".into(),
    )?;
    drop(root_fd);
    pivot(&root)?;
    Ok(())
}

/// Show the host's `p` read-only at the same place (a symlink is recreated as the same
/// symlink, so merged-/usr links keep working). Absent: skipped. The mount point is made in
/// the new root's tmpfs, or in a system directory already bound when `p` lies below one.
fn system_dir(root: &Path, p: &Path) -> R {
    let Ok(meta) = p.symlink_metadata() else {
        return Ok(());
    };
    let dst = inside(root, p);
    if meta.file_type().is_symlink() {
        let target = ctx(std::fs::read_link(p), || {
            format!("readlink {}", p.display())
        })?;
        if dst.symlink_metadata().is_ok() {
            return Ok(());
        }
        if let Some(parent) = dst.parent() {
            ctx(std::fs::create_dir_all(parent), || {
                format!("mount point for {}", p.display())
            })?;
        }
        return ctx(std::os::unix::fs::symlink(&target, &dst), || {
            format!("symlink {}", p.display())
        });
    }
    if !meta.is_dir() {
        return Ok(());
    }
    let root_fd = open_root(root)?;
    let target = target_dir(root, &root_fd, p)?;
    ctx(
        rustix::mount::mount_bind_recursive(p, fd_path(&target).as_str()),
        || format!("binding {} read-only", p.display()),
    )?;
    let fd = ctx(open_beneath(&root_fd, p), || p.display().to_string())?;
    ctx(
        sys::mount_setattr(
            fd.as_fd(),
            true,
            sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID,
        ),
        || format!("making {} read-only", p.display()),
    )
}

/// The mount point for `p` in the new root, created if it lies in one of our fresh tmpfs
/// mounts (a project under /tmp); never through a symlink.
fn target_dir(root: &Path, root_fd: &OwnedFd, p: &Path) -> R<OwnedFd> {
    match open_beneath(root_fd, p) {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::NOENT) => {
            ctx(std::fs::create_dir_all(inside(root, p)), || {
                format!("mount point for {}", p.display())
            })?;
            ctx(open_beneath(root_fd, p), || {
                format!("{} in the sandbox", p.display())
            })
        }
        Err(e) => ctx(Err(e), || format!("{} in the sandbox", p.display())),
    }
}

/// The home: through its overlay, or, when no host directory lies under it, its per-project
/// directory bound at its path.
fn mount_home(root: &Path, root_fd: &OwnedFd, home: &crate::spec::Overlay) -> R {
    if home.fresh {
        return fresh_home(root, root_fd, home);
    }
    overlay(root, root_fd, home)
}

/// `o.path` seen through an overlay whose writes land in `o.upper`. The lower layer is named
/// by the host path, resolved here before `pivot_root`; a path that resolves elsewhere than
/// the directory the host side checked fails the mount (`lowerdir` must be a directory).
fn overlay(root: &Path, root_fd: &OwnedFd, o: &crate::spec::Overlay) -> R {
    if !o.path.is_dir() {
        return Ok(());
    }
    let target = target_dir(root, root_fd, &o.path)?;
    let mount = |shared: Option<&PathBuf>| -> R<Result<(), rustix::io::Errno>> {
        // The first lower layer is the uppermost.
        let lower = match shared {
            Some(shared) => format!(
                "{}:{}",
                escape_overlay_path(shared)?,
                escape_overlay_path(&o.path)?
            ),
            None => escape_overlay_path(&o.path)?,
        };
        let opts = format!(
            "lowerdir={lower},upperdir={},workdir={},userxattr",
            escape_overlay_path(&o.upper)?,
            escape_overlay_path(&o.work)?,
        );
        let opts = ctx(CString::new(opts), || "overlay options".into())?;
        Ok(rustix::mount::mount(
            "overlay",
            fd_path(&target).as_str(),
            "overlay",
            MountFlags::NOSUID | MountFlags::NODEV,
            opts.as_c_str(),
        ))
    };
    let mounted = match mount(o.shared.as_ref())? {
        // The shared layer lies inside `path` by a way the host side did not see (a bind
        // mount): overlayfs refuses nested lower layers. Without it the view is only older.
        Err(rustix::io::Errno::LOOP) if o.shared.is_some() => mount(None)?,
        other => other,
    };
    ctx(mounted, || format!("overlay on {}", o.path.display()))
}

/// A path as overlayfs's option string needs it: `,` separates options and `:` lower
/// layers, so both (and the backslash itself) are escaped with a backslash.
fn escape_overlay_path(p: &Path) -> R<String> {
    let s = p
        .to_str()
        .ok_or_else(|| MountError::NotUtf8(p.to_owned()))?;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, ',' | ':' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    Ok(out)
}

/// A home with no host directory under it: its per-project directory bound at its path.
fn fresh_home(root: &Path, root_fd: &OwnedFd, home: &crate::spec::Overlay) -> R {
    let target = target_dir(root, root_fd, &home.path)?;
    ctx(
        rustix::mount::mount_bind(&home.upper, fd_path(&target).as_str()),
        || format!("binding the home at {}", home.path.display()),
    )?;
    let fd = ctx(open_beneath(root_fd, &home.path), || {
        home.path.display().to_string()
    })?;
    ctx(
        sys::mount_setattr(fd.as_fd(), false, sys::MOUNT_ATTR_NOSUID),
        || format!("nosuid on {}", home.path.display()),
    )
}

fn bind_rw(root: &Path, root_fd: &OwnedFd, p: &Path) -> R {
    // The source is the host's own path, canonical (the plan resolved it); the target is
    // opened beneath the new root without following links.
    if !p.is_dir() {
        return Ok(());
    }
    let target = target_dir(root, root_fd, p)?;
    ctx(
        rustix::mount::mount_bind_recursive(p, fd_path(&target).as_str()),
        || format!("binding {} read-write", p.display()),
    )?;
    nosuid(root_fd, p)
}

/// A setuid or setgid file the command writes is not one inside (`no_new_privs` already
/// stops it; this also covers anything started by other means).
fn nosuid(root_fd: &OwnedFd, p: &Path) -> R {
    let fd = ctx(open_beneath(root_fd, p), || p.display().to_string())?;
    ctx(
        sys::mount_setattr(fd.as_fd(), true, sys::MOUNT_ATTR_NOSUID),
        || format!("nosuid on {}", p.display()),
    )
}

fn private_tmpfs(root_fd: &OwnedFd, p: &Path, opts: &str) -> R {
    let Ok(target) = open_beneath(root_fd, p) else {
        return Ok(()); // absent or a symlink (e.g. /var/run -> /run): nothing to mount over
    };
    let opts = ctx(CString::new(opts), || "tmpfs options".into())?;
    ctx(
        rustix::mount::mount(
            "tmpfs",
            fd_path(&target).as_str(),
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            opts.as_c_str(),
        ),
        || format!("tmpfs on {}", p.display()),
    )
}

/// A minimal /dev: a tmpfs with the harmless device nodes bound from the host, a private
/// devpts, and /dev/shm.
fn dev(root: &Path, root_fd: &OwnedFd) -> R {
    private_tmpfs(root_fd, Path::new("/dev"), "mode=0755")?;
    let dev = inside(root, Path::new("/dev"));
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = Path::new("/dev").join(name);
        if !host.exists() {
            continue;
        }
        let node = dev.join(name);
        ctx(std::fs::write(&node, b""), || {
            format!("create {}", node.display())
        })?;
        ctx(rustix::mount::mount_bind(&host, &node), || {
            format!("bind {}", host.display())
        })?;
    }
    let pts = dev.join("pts");
    ctx(std::fs::create_dir(&pts), || "mkdir /dev/pts".into())?;
    ctx(
        rustix::mount::mount(
            "devpts",
            &pts,
            "devpts",
            MountFlags::NOSUID | MountFlags::NOEXEC,
            c"newinstance,ptmxmode=0666,mode=0620",
        ),
        || "devpts".into(),
    )?;
    ctx(
        std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx")),
        || "ptmx".into(),
    )?;
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        ctx(std::os::unix::fs::symlink(target, dev.join(link)), || {
            format!("/dev/{link}")
        })?;
    }
    let shm = dev.join("shm");
    ctx(std::fs::create_dir(&shm), || "mkdir /dev/shm".into())?;
    ctx(
        rustix::mount::mount(
            "tmpfs",
            &shm,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            c"mode=1777",
        ),
        || "tmpfs on /dev/shm".into(),
    )
}

fn proc_(root_fd: &OwnedFd) -> R {
    let target = ctx(open_beneath(root_fd, Path::new("/proc")), || "/proc".into())?;
    ctx(
        rustix::mount::mount(
            "proc",
            fd_path(&target).as_str(),
            "proc",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"",
        ),
        || "mounting a fresh /proc".into(),
    )
}

fn read_only(root_fd: &OwnedFd, p: &Path) -> R {
    let Ok(target) = open_beneath(root_fd, p) else {
        return Ok(()); // gone, or a symlink: the post-step check puts it back
    };
    let path = fd_path(&target);
    ctx(
        rustix::mount::mount_bind_recursive(path.as_str(), path.as_str()),
        || format!("protecting {}", p.display()),
    )?;
    let fd = ctx(open_beneath(root_fd, p), || p.display().to_string())?;
    ctx(
        sys::mount_setattr(fd.as_fd(), true, sys::MOUNT_ATTR_RDONLY),
        || format!("protecting {}", p.display()),
    )
}

fn mask(root_fd: &OwnedFd, p: &Path, masked_file: &Path) -> R {
    let target = match open_beneath(root_fd, p) {
        Ok(t) => t,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        // A symlink on the way: the plan also masks the link's resolved target.
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::XDEV) => return Ok(()),
        Err(e) => return ctx(Err(e), || format!("masking {}", p.display())),
    };
    let st = ctx(rustix::fs::fstat(&target), || p.display().to_string())?;
    let path = fd_path(&target);
    if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
        ctx(
            rustix::mount::mount(
                "tmpfs",
                path.as_str(),
                "tmpfs",
                MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                c"mode=000,size=0",
            ),
            || format!("masking {}", p.display()),
        )
    } else {
        ctx(
            rustix::mount::mount_bind(masked_file, path.as_str()),
            || format!("masking {}", p.display()),
        )?;
        let fd = ctx(open_beneath(root_fd, p), || p.display().to_string())?;
        ctx(
            sys::mount_setattr(fd.as_fd(), false, sys::MOUNT_ATTR_RDONLY),
            || format!("masking {}", p.display()),
        )
    }
}

/// Files under `/run/envgit` inside, bound read-only from the host. `/run` is the fresh tmpfs
/// just mounted, so nothing there can be a planted symlink; names are single components.
fn run_files(root: &Path, files: &[(String, PathBuf)]) -> R {
    if files.is_empty() {
        return Ok(());
    }
    let dir = root.join("run").join("envgit");
    ctx(std::fs::create_dir_all(&dir), || "mkdir /run/envgit".into())?;
    for (name, src) in files {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(MountError::BadRunFileName(name.clone()));
        }
        let dst = dir.join(name);
        ctx(std::fs::write(&dst, b""), || format!("/run/envgit/{name}"))?;
        ctx(rustix::mount::mount_bind(src, &dst), || {
            format!("bind {} to /run/envgit/{name}", src.display())
        })?;
        let fd = ctx(
            rustix::fs::open(&dst, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()),
            || format!("/run/envgit/{name}"),
        )?;
        ctx(
            sys::mount_setattr(fd.as_fd(), false, sys::MOUNT_ATTR_RDONLY),
            || format!("making /run/envgit/{name} read-only"),
        )?;
    }
    Ok(())
}

/// `/etc/resolv.conf` names the relay's DNS stub. If it is a symlink into /run (systemd), the
/// file is created at its target in the sandbox's private /run.
fn resolv_conf(root: &Path, root_fd: &OwnedFd, content: &str) -> R {
    let etc = Path::new("/etc/resolv.conf");
    let file = root.join("..").join("resolv.conf");
    ctx(std::fs::write(&file, content), || "resolv.conf".into())?;
    match open_beneath(root_fd, etc) {
        Ok(fd) => {
            ctx(
                rustix::mount::mount_bind(&file, fd_path(&fd).as_str()),
                || "resolv.conf".into(),
            )?;
        }
        Err(_) => {
            if let Ok(target) = std::fs::read_link(etc) {
                let abs = if target.is_absolute() {
                    target
                } else {
                    Path::new("/etc").join(target)
                };
                let norm: PathBuf = abs.components().fold(PathBuf::new(), |mut acc, c| {
                    match c {
                        std::path::Component::ParentDir => {
                            acc.pop();
                        }
                        c => acc.push(c),
                    }
                    acc
                });
                if norm.starts_with("/run") {
                    let dst = inside(root, &norm);
                    if let Some(parent) = dst.parent() {
                        let _ = std::fs::create_dir_all(parent);
                    }
                    let _ = std::fs::write(dst, content);
                }
            }
        }
    }
    Ok(())
}

fn pivot(root: &Path) -> R {
    ctx(std::env::set_current_dir(root), || {
        "chdir to the new root".into()
    })?;
    ctx(rustix::process::pivot_root(".", "."), || {
        "pivot_root".into()
    })?;
    ctx(
        rustix::mount::unmount(".", rustix::mount::UnmountFlags::DETACH),
        || "detaching the old root".into(),
    )?;
    ctx(std::env::set_current_dir("/"), || "chdir /".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn an_overlay_path_is_escaped_and_one_not_utf8_is_refused_by_name() {
        assert_eq!(
            escape_overlay_path(Path::new("/h/a,b:c\\d")).unwrap(),
            "/h/a\\,b\\:c\\\\d"
        );
        let bad = Path::new(std::ffi::OsStr::from_bytes(b"/home/\xff"));
        let e = escape_overlay_path(bad).unwrap_err();
        assert!(matches!(&e, MountError::NotUtf8(p) if p == bad), "{e:?}");
        assert!(
            e.to_string()
                .contains("not UTF-8, cannot name it to overlayfs"),
            "{e}"
        );
    }
}
