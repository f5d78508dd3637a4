//! A deterministic generator of a tree shaped like the Linux kernel (snapshots.md §8: 100k
//! files in ~7k directories, median file ~4 KiB, ~830 MB), and the "10 changed files" edit
//! every step measurement applies.
//!
//! Same seed, same tree: every file's content comes from its own RNG, seeded from the run's
//! seed and the file's index, so files can be written in parallel.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rayon::prelude::*;

/// xorshift64*: small, fast, good enough to shape a tree (not for anything secret).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed, so nearby seeds give unrelated streams; never zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Self((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`); the modulo bias is irrelevant at these sizes.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `(0, 1)`.
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.below(words.len())]
    }
}

pub struct Spec {
    pub files: usize,
    /// Directories besides the root.
    pub dirs: usize,
    pub seed: u64,
    /// How unevenly files spread over directories: weights are `u^-skew` for uniform `u`.
    /// 0.9 gives a kernel-like heavy tail (median 7 entries, a few hundred in the largest);
    /// 0 spreads files evenly (~14 per directory at 100k / 7k).
    pub skew: f64,
}

pub struct GenFile {
    pub rel: PathBuf,
    /// Index of its directory (0 is the root).
    pub dir: usize,
    pub depth: usize,
    pub size: u64,
}

pub struct GenTree {
    pub root: PathBuf,
    pub files: Vec<GenFile>,
    pub dir_count: usize,
    /// Entries (files and subdirectories) of each directory, as generated.
    pub entries: Vec<usize>,
    pub bytes: u64,
}

#[rustfmt::skip]
const WORDS: &[&str] = &[
    "arch", "drivers", "net", "fs", "core", "usb", "pci", "gpu", "sound", "include", "mm", "kernel",
    "lib", "tools", "crypto", "block", "scripts", "security", "virt", "media", "input", "hid",
    "iio", "mtd", "scsi", "ata", "spi", "i2c", "power", "clk", "irq", "dma", "soc", "board", "boot",
    "mach", "platform", "common", "util", "firmware", "phy", "bus", "host", "gadget", "serial",
    "tty", "video", "misc", "staging", "bpf", "trace", "sched", "time", "locking", "rcu", "cgroup",
    "ipc", "audit", "keys", "debug", "dt", "ext4", "xfs", "btrfs", "nfs", "smb", "fuse", "proc",
    "sysfs", "ipv4", "ipv6", "netfilter", "bridge", "wireless", "bluetooth", "can", "ethernet",
    "intel", "amd", "arm", "arm64", "x86", "riscv", "mips", "powerpc", "s390", "qcom", "nvidia",
    "broadcom", "realtek", "mediatek", "samsung", "renesas", "rockchip", "regulator", "pinctrl",
    "gpio", "thermal", "watchdog", "rtc", "leds", "mfd", "nvme", "md", "dm", "vfio",
];

#[rustfmt::skip]
const IDENTS: &[&str] = &[
    "dev", "priv", "buf", "len", "ret", "err", "flags", "count", "offset", "page", "node", "list",
    "entry", "data", "ctx", "state", "reg", "val", "mask", "addr", "size", "lock", "irq", "queue",
    "req", "skb", "inode", "file", "sb", "cpu", "task", "work", "timer", "res", "info", "ops",
    "port", "chan", "desc", "ring", "head", "tail", "idx", "id", "mode", "type", "attr", "param",
];

#[rustfmt::skip]
const CALLS: &[&str] = &[
    "kmalloc", "kfree", "memcpy", "memset", "spin_lock", "spin_unlock", "mutex_lock",
    "mutex_unlock", "dev_err", "dev_info", "pr_debug", "readl", "writel", "list_add", "list_del",
    "atomic_inc", "atomic_dec", "get_device", "put_device", "copy_to_user", "copy_from_user",
    "wake_up", "schedule", "msleep", "udelay", "ioremap", "iounmap", "request_irq", "free_irq",
    "platform_get_resource", "of_property_read_u32",
];

#[rustfmt::skip]
const COMMENT: &[&str] = &[
    "the", "device", "must", "be", "locked", "before", "calling", "this", "function", "returns",
    "zero", "on", "success", "or", "a", "negative", "error", "code", "we", "need", "to", "flush",
    "pending", "work", "so", "that", "hardware", "state", "is", "consistent", "with", "driver",
];

/// A pool of C-ish lines: files are drawn from it line by line, with a file-unique line every
/// few lines, so content is text-like (zstd ~3×) and never identical between files.
fn line_pool(rng: &mut Rng) -> Vec<String> {
    let mut pool = Vec::with_capacity(8192);
    for _ in 0..8192 {
        let indent = "\t".repeat(rng.below(4));
        let a = rng.pick(IDENTS);
        let b = rng.pick(IDENTS);
        let c = rng.pick(IDENTS);
        let f = rng.pick(CALLS);
        let line = match rng.below(10) {
            0 => format!("{indent}if ({a}->{b} & {}_MASK) {{", c.to_uppercase()),
            1 => format!("{indent}}}"),
            2 => {
                let words: Vec<&str> = (0..4 + rng.below(8)).map(|_| rng.pick(COMMENT)).collect();
                format!("{indent} * {}", words.join(" "))
            }
            3 => format!(
                "#define {}_{}\t0x{:x}",
                a.to_uppercase(),
                b.to_uppercase(),
                rng.next_u64() & 0xffff
            ),
            4 => format!("static int {f}_{a}(struct {b}_{c} *{a}, unsigned long {b})"),
            5 => format!("{indent}return {f}({a}, {b});"),
            6 => String::new(),
            _ => format!("{indent}{a}->{b} = {f}({c}, {a}_{b});"),
        };
        pool.push(line);
    }
    pool
}

/// Median ~4 KiB, skewed: lognormal (σ 1.2) clamped to 64 B .. 200 KiB; mean ~8 KiB.
fn file_size(rng: &mut Rng) -> usize {
    let s = 4096.0 * (1.2 * rng.normal()).exp();
    s.clamp(64.0, 200.0 * 1024.0) as usize
}

fn file_content(rel: &str, index: usize, seed: u64, pool: &[String]) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let size = file_size(&mut rng);
    let mut out = Vec::with_capacity(size + 128);
    let _ = writeln!(
        out,
        "// SPDX-License-Identifier: GPL-2.0\n/* {rel}: file {index} */"
    );
    let mut n = 0u32;
    while out.len() < size {
        n += 1;
        if n.is_multiple_of(12) {
            let _ = writeln!(out, "\tval = 0x{:08x}; /* {n} */", rng.next_u64() as u32);
        } else {
            out.extend_from_slice(pool[rng.below(pool.len())].as_bytes());
            out.push(b'\n');
        }
    }
    out.truncate(size.max(1));
    out
}

const EXTS: &[(&str, u32)] = &[
    (".c", 45),
    (".h", 30),
    (".S", 3),
    (".rst", 7),
    (".yaml", 5),
    (".txt", 4),
    (".sh", 3),
    (".py", 3),
];

fn file_name(rng: &mut Rng) -> String {
    let total: u32 = EXTS.iter().map(|e| e.1).sum();
    let mut r = rng.below(total as usize) as u32;
    let mut ext = ".c";
    for (e, w) in EXTS {
        if r < *w {
            ext = e;
            break;
        }
        r -= w;
    }
    match rng.below(3) {
        0 => format!("{}{ext}", rng.pick(WORDS)),
        _ => format!("{}_{}{ext}", rng.pick(WORDS), rng.pick(IDENTS)),
    }
}

/// `name`, or `name-2`, `name-3`… if the directory already has it.
fn unique(taken: &mut HashSet<(usize, String)>, parent: usize, name: String) -> String {
    let mut candidate = name.clone();
    let mut n = 2;
    while !taken.insert((parent, candidate.clone())) {
        candidate = match name.split_once('.') {
            Some((stem, ext)) => format!("{stem}-{n}.{ext}"),
            None => format!("{name}-{n}"),
        };
        n += 1;
    }
    candidate
}

/// Create the tree under `root` (which must not exist yet).
pub fn generate(root: &Path, spec: &Spec) -> Result<GenTree> {
    if spec.dirs == 0 || spec.files <= spec.dirs {
        bail!("need at least one directory and more files than directories");
    }
    let mut rng = Rng::new(spec.seed);
    let mut taken = HashSet::new();

    // Directories: a few top-level ones, the rest at depths 2..7 (kernel-like: most files
    // sit 3–5 levels down), each under a random directory one level up.
    let mut rels: Vec<PathBuf> = vec![PathBuf::new()];
    let mut depths: Vec<usize> = vec![0];
    let mut entries: Vec<usize> = vec![0];
    let mut by_depth: Vec<Vec<usize>> = vec![vec![0]];
    let top = (spec.dirs / 350).clamp(1, 24);
    const DEPTH_WEIGHTS: &[(usize, usize)] = &[(2, 20), (3, 34), (4, 26), (5, 12), (6, 6), (7, 2)];
    for i in 0..spec.dirs {
        let mut depth = if i < top {
            1
        } else {
            let mut r = rng.below(100);
            let mut d = 2;
            for (depth, w) in DEPTH_WEIGHTS {
                if r < *w {
                    d = *depth;
                    break;
                }
                r -= w;
            }
            d
        };
        while by_depth.get(depth - 1).is_none_or(|v| v.is_empty()) {
            depth -= 1;
        }
        let parents = &by_depth[depth - 1];
        let parent = parents[rng.below(parents.len())];
        let name = unique(&mut taken, parent, rng.pick(WORDS).to_string());
        let rel = rels[parent].join(name);
        if by_depth.len() <= depth {
            by_depth.push(Vec::new());
        }
        by_depth[depth].push(rels.len());
        rels.push(rel);
        depths.push(depth);
        entries.push(0);
        entries[parent] += 1;
    }

    // Files: one per directory (git keeps no empty directories, envgit does: keep the two
    // comparable), the rest spread with a heavy tail (a few directories hold hundreds).
    let ndirs = rels.len();
    let mut weights = Vec::with_capacity(ndirs);
    let mut acc = 0.0;
    for _ in 0..ndirs {
        acc += rng.unit().powf(-spec.skew).min(300.0);
        weights.push(acc);
    }
    let mut files = Vec::with_capacity(spec.files);
    for i in 0..spec.files {
        let dir = if i < ndirs {
            i
        } else {
            let x = rng.unit() * acc;
            weights.partition_point(|w| *w < x).min(ndirs - 1)
        };
        let name = unique(&mut taken, dir, file_name(&mut rng));
        entries[dir] += 1;
        files.push(GenFile {
            rel: rels[dir].join(name),
            dir,
            depth: depths[dir] + 1,
            size: 0,
        });
    }

    std::fs::create_dir(root).with_context(|| format!("creating {}", root.display()))?;
    for rel in &rels[1..] {
        let p = root.join(rel);
        std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
    }
    let pool = line_pool(&mut rng);
    let sizes: Vec<u64> = files
        .par_iter()
        .enumerate()
        .map(|(i, f)| -> Result<u64> {
            let content = file_content(&f.rel.to_string_lossy(), i, spec.seed, &pool);
            let p = root.join(&f.rel);
            std::fs::write(&p, &content).with_context(|| format!("writing {}", p.display()))?;
            Ok(content.len() as u64)
        })
        .collect::<Result<_>>()?;
    for (f, size) in files.iter_mut().zip(&sizes) {
        f.size = *size;
    }
    Ok(GenTree {
        root: root.to_path_buf(),
        files,
        dir_count: ndirs,
        entries,
        bytes: sizes.iter().sum(),
    })
}

impl GenTree {
    /// The step edit of snapshots.md §8: append a line to `n` files in `n` different
    /// directories (fewer if the tree has fewer directories holding files).
    /// Returns the directories edited.
    pub fn touch(&self, rng: &mut Rng, n: usize, tag: &str) -> Result<Vec<usize>> {
        let n = n.min(self.dir_count);
        let mut dirs = HashSet::new();
        let mut done = 0;
        while done < n {
            let f = &self.files[rng.below(self.files.len())];
            if !dirs.insert(f.dir) {
                continue;
            }
            let p = self.root.join(&f.rel);
            let mut file = OpenOptions::new()
                .append(true)
                .open(&p)
                .with_context(|| format!("opening {}", p.display()))?;
            writeln!(file, "/* {tag}: edit {:016x} */", rng.next_u64())
                .with_context(|| format!("appending to {}", p.display()))?;
            done += 1;
        }
        Ok(dirs.into_iter().collect())
    }

    /// Entries in these directories: what rescanning them whole has to `lstat`.
    pub fn entries_in(&self, dirs: &[usize]) -> usize {
        dirs.iter().map(|d| self.entries[*d]).sum()
    }

    /// The tree's shape in one line, for the notes.
    pub fn shape(&self) -> String {
        let pct = |v: &mut Vec<u64>, q: f64| -> u64 {
            v.sort_unstable();
            let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
            v[i - 1]
        };
        let mut per_dir: Vec<u64> = self.entries.iter().map(|e| *e as u64).collect();
        let mut sizes: Vec<u64> = self.files.iter().map(|f| f.size).collect();
        let n = self.files.len().max(1) as f64;
        // The size of the directory a uniformly chosen file (an edit) lands in.
        let dir_of_file = self
            .files
            .iter()
            .map(|f| self.entries[f.dir] as f64)
            .sum::<f64>()
            / n;
        let depth = self.files.iter().map(|f| f.depth as f64).sum::<f64>() / n;
        format!(
            "entries per directory median {} / p90 {} / max {}; an edited file's directory has \
             {dir_of_file:.0} entries on average; mean file depth {depth:.1}; file size median \
             {} B / mean {:.0} B / max {} B",
            pct(&mut per_dir, 0.5),
            pct(&mut per_dir, 0.9),
            pct(&mut per_dir, 1.0),
            pct(&mut sizes, 0.5),
            self.bytes as f64 / n,
            pct(&mut sizes, 1.0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(dir: &Path, seed: u64) -> GenTree {
        let spec = Spec {
            files: 300,
            dirs: 20,
            seed,
            skew: 0.9,
        };
        generate(&dir.join("t"), &spec).unwrap()
    }

    #[test]
    fn same_seed_same_tree() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (ta, tb) = (small(a.path(), 7), small(b.path(), 7));
        assert_eq!(ta.bytes, tb.bytes);
        assert_eq!(ta.dir_count, 21);
        for (fa, fb) in ta.files.iter().zip(&tb.files) {
            assert_eq!(fa.rel, fb.rel);
            let ca = std::fs::read(a.path().join("t").join(&fa.rel)).unwrap();
            let cb = std::fs::read(b.path().join("t").join(&fb.rel)).unwrap();
            assert_eq!(ca, cb);
        }
        assert_eq!(ta.entries.iter().sum::<usize>(), 300 + 20);
    }

    #[test]
    fn touch_edits_distinct_directories() {
        let d = tempfile::tempdir().unwrap();
        let t = small(d.path(), 1);
        let dirs = t.touch(&mut Rng::new(3), 10, "test").unwrap();
        let unique: HashSet<usize> = dirs.iter().copied().collect();
        assert_eq!(unique.len(), 10);
        let bytes: u64 = t
            .files
            .iter()
            .map(|f| {
                std::fs::metadata(d.path().join("t").join(&f.rel))
                    .unwrap()
                    .len()
            })
            .sum();
        assert!(bytes > t.bytes);
    }
}
