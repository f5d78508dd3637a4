//! git's racy-timestamp rule: a recorded `lstat` vouches for a file's content only if the file
//! last changed clearly before the scan that read it began. A file changed in the same clock
//! tick as that scan (after its `lstat`, or between the `lstat` and the read) can keep an
//! identical `lstat`, so it is read again until a later scan starts after it.
//!
//! "Clearly before" is a margin under the scan's start. It must cover the filesystem's
//! timestamp granularity and the lag of the clock the kernel stamps files with (the coarse
//! clock, up to one tick behind the scan's `CLOCK_REALTIME`: 10 ms at HZ=100). On a local
//! filesystem that keeps nanoseconds that is a few milliseconds; anywhere else (FAT's 2 s,
//! ext4 with small inodes' whole seconds, a network filesystem stamped by another machine's
//! clock) the margin stays at 2 s. A 2 s margin everywhere made every file written in the last
//! 2 s cost a read at each step: a fresh checkout, an extracted archive, the agent's own edits.
//!
//! The newer of mtime and ctime is compared: mtime can be set back (`touch -d`, `rsync -t`,
//! `tar -x`) in the same tick as a write, ctime cannot.

use std::os::fd::BorrowedFd;

use super::entry::StatKey;

/// Anywhere the filesystem's clock or granularity is not known.
pub(crate) const COARSE_MARGIN_NS: i64 = 2_000_000_000;
/// A local filesystem with nanosecond timestamps from this kernel's clock: five ticks at HZ=100.
pub(super) const FINE_MARGIN_NS: i64 = 50_000_000;

/// Local filesystems whose inodes keep nanoseconds (`s_time_gran` 1) stamped by this
/// kernel's clock. ext2/3 share ext4's magic and keep whole seconds in small inodes: a file
/// whose mtime and ctime both have no nanoseconds gets the coarse margin.
const FINE_FILESYSTEMS: [libc::c_long; 5] = [
    libc::EXT4_SUPER_MAGIC,
    libc::XFS_SUPER_MAGIC,
    libc::BTRFS_SUPER_MAGIC,
    libc::TMPFS_MAGIC,
    libc::F2FS_SUPER_MAGIC,
];

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RacyRule {
    /// The device of the project's root, when its filesystem is one of `FINE_FILESYSTEMS`.
    /// Entries on another device (a mount inside the project) get the coarse margin.
    fine_dev: Option<u64>,
}

impl RacyRule {
    /// The rule for a tree rooted at `root`.
    pub(crate) fn for_root(root: BorrowedFd<'_>) -> Self {
        let fine = rustix::fs::fstatfs(root).is_ok_and(|fs| FINE_FILESYSTEMS.contains(&fs.f_type));
        let dev = rustix::fs::fstat(root).ok().map(|st| st.st_dev);
        Self {
            fine_dev: dev.filter(|_| fine),
        }
    }

    /// The device of `root` when its filesystem keeps nanosecond timestamps from this kernel's
    /// clock (and so a ctime no process can set): what the protected copy's stamps need.
    pub(crate) fn fine_device(root: BorrowedFd<'_>) -> Option<u64> {
        Self::for_root(root).fine_dev
    }

    /// The rule of an unknown filesystem (the coarse margin everywhere).
    #[cfg(test)]
    pub(crate) fn coarse() -> Self {
        Self::default()
    }

    fn margin(&self, stat: &StatKey) -> i64 {
        const NS: i64 = 1_000_000_000;
        let keeps_ns = stat.mtime_ns.rem_euclid(NS) != 0 || stat.ctime_ns.rem_euclid(NS) != 0;
        if keeps_ns && self.fine_dev == Some(stat.dev) {
            FINE_MARGIN_NS
        } else {
            COARSE_MARGIN_NS
        }
    }

    /// A file with this `lstat`, recorded by a scan that started at `stamp_ns`, may have
    /// changed since without its `lstat` showing it: read it again.
    pub(super) fn is_racy(&self, stat: &StatKey, stamp_ns: i64) -> bool {
        stat.mtime_ns.max(stat.ctime_ns) >= stamp_ns.saturating_sub(self.margin(stat))
    }
}

/// How long after its last change a file on `root`'s filesystem is trusted by a scan that
/// starts then (what a test waits before it expects a file to be trusted).
#[cfg(test)]
pub(crate) fn settle_time(root: &std::path::Path) -> std::time::Duration {
    let dir = std::fs::File::open(root).expect("open the root");
    use std::os::fd::AsFd;
    let margin = if RacyRule::for_root(dir.as_fd()).fine_dev.is_some() {
        FINE_MARGIN_NS
    } else {
        COARSE_MARGIN_NS
    };
    std::time::Duration::from_nanos(margin as u64 + 10_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_123_456_789;

    fn stat(mtime_ns: i64, ctime_ns: i64, dev: u64) -> StatKey {
        StatKey {
            mtime_ns,
            ctime_ns,
            dev,
            ..StatKey::default()
        }
    }

    fn fine(dev: u64) -> RacyRule {
        RacyRule {
            fine_dev: Some(dev),
        }
    }

    #[test]
    fn a_fine_filesystem_trusts_what_changed_more_than_the_fine_margin_before() {
        let old = NOW - FINE_MARGIN_NS - 1;
        assert!(!fine(7).is_racy(&stat(old, old, 7), NOW));
        let recent = NOW - FINE_MARGIN_NS + 1;
        assert!(fine(7).is_racy(&stat(recent, recent, 7), NOW));
        // The same stat elsewhere, or under the coarse rule, is still racy.
        assert!(fine(8).is_racy(&stat(old, old, 7), NOW));
        assert!(RacyRule::coarse().is_racy(&stat(old, old, 7), NOW));
        assert!(!RacyRule::coarse().is_racy(
            &stat(NOW - COARSE_MARGIN_NS - 1, NOW - COARSE_MARGIN_NS - 1, 7),
            NOW
        ));
    }

    /// Whole-second timestamps (ext2/3, ext4 with small inodes share ext4's magic) may lag a
    /// write by up to a second: the coarse margin applies.
    #[test]
    fn whole_second_timestamps_get_the_coarse_margin() {
        let second = (NOW / 1_000_000_000 - 1) * 1_000_000_000;
        assert!(fine(7).is_racy(&stat(second, second, 7), NOW));
    }

    /// An mtime set back in the same tick as a write (`rsync -t`, `tar -x`) leaves ctime
    /// recent: the entry is racy.
    #[test]
    fn a_recent_ctime_makes_an_old_mtime_racy() {
        let year_2000 = 946_684_800_000_000_000;
        assert!(fine(7).is_racy(&stat(year_2000, NOW - 1_000, 7), NOW));
        assert!(RacyRule::coarse().is_racy(&stat(year_2000, NOW - 1_000, 7), NOW));
    }

    fn rule_of(path: &str) -> Option<RacyRule> {
        let dir = std::fs::File::open(path).ok()?;
        use std::os::fd::AsFd;
        Some(RacyRule::for_root(dir.as_fd()))
    }

    /// procfs is not among the fine filesystems: everything there gets the coarse margin.
    /// tmpfs is: `/dev/shm`, where it is a tmpfs, gets the fine margin on its own device.
    #[test]
    fn roots_are_classified_by_their_filesystem() {
        let proc_rule = rule_of("/proc").expect("/proc");
        assert_eq!(proc_rule.fine_dev, None);
        let shm_is_tmpfs = std::fs::File::open("/dev/shm")
            .ok()
            .and_then(|f| rustix::fs::fstatfs(&f).ok())
            .is_some_and(|fs| fs.f_type == libc::TMPFS_MAGIC);
        if !shm_is_tmpfs {
            eprintln!("SKIPPED: /dev/shm is not a tmpfs here");
            return;
        }
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata("/dev/shm").expect("/dev/shm").dev();
        assert_eq!(rule_of("/dev/shm").expect("/dev/shm").fine_dev, Some(dev));
    }
}
