//! Pack files: append-only object records, so that 100,000 small files are not 100,000 files
//! in the store. Each writer appends to a pack it holds an exclusive flock on, so writers never
//! interleave and a crashed writer's lock is released by the kernel.
//!
//! Record: `magic u32 | kind u8 | codec u8 | 0u16 | stored_len u32 | raw_len u64 | id [32] |
//! stored bytes | crc32c u32` (the CRC covers header and bytes). Codecs: raw, zstd, and (trees
//! only, store format 2) a zstd delta against another tree ([`crate::delta`]).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::FlockOperation;

use crate::error::{IoContext, Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::lock::Flock;

const MAGIC: u32 = 0x4547_4f31; // "EGO1"
pub const HEADER_LEN: u64 = 52;
/// A writer starts a new pack once its current one is this big.
pub const PACK_TARGET_SIZE: u64 = 64 << 20;
/// Blobs are stored compressed only when that saves at least 1/10 of their size.
const ZSTD_LEVEL: i32 = 1;

const CODEC_RAW: u8 = 0;
const CODEC_ZSTD: u8 = 1;
/// A tree stored as a delta against another tree: the store resolves it ([`crate::delta`]).
pub const CODEC_DELTA: u8 = 2;

/// Where an object lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub pack: u64,
    pub offset: u64,
    pub stored_len: u32,
    pub raw_len: u64,
    pub kind: ObjectKind,
    /// Stored as a delta against another object ([`CODEC_DELTA`]); the journal says so, so
    /// finding the bases live deltas need reads only the deltas' records.
    pub delta: bool,
}

impl Location {
    pub fn record_len(&self) -> u64 {
        HEADER_LEN + u64::from(self.stored_len) + 4
    }
    pub fn end(&self) -> u64 {
        self.offset + self.record_len()
    }
}

pub fn pack_path(packs_dir: &Path, pack: u64) -> PathBuf {
    packs_dir.join(format!("{pack:016x}.pack"))
}

pub fn parse_pack_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".pack")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

thread_local! {
    // One zstd context per thread: creating one per object costs more than compressing a
    // small file (it probes the CPU, which traps to the hypervisor on a VM).
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

fn compress(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(zstd::bulk::Compressor::new(ZSTD_LEVEL)?);
        }
        match c.as_mut() {
            Some(c) => c.compress(raw),
            None => Err(std::io::Error::other("no zstd compressor")),
        }
    })
}

fn decompress(stored: &[u8], capacity: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new()?);
        }
        match d.as_mut() {
            Some(d) => d.decompress(stored, capacity),
            None => Err(std::io::Error::other("no zstd decompressor")),
        }
    })
}

/// An object ready to append: compression is done by the caller's thread, outside any lock.
pub struct EncodedObject {
    pub id: ObjectId,
    pub kind: ObjectKind,
    pub raw_len: u64,
    codec: u8,
    stored: Vec<u8>,
}

impl EncodedObject {
    /// Bytes its record takes in a pack.
    pub fn record_len(&self) -> u64 {
        HEADER_LEN + self.stored.len() as u64 + 4
    }

    /// Bytes its content takes in a pack (compressed, or the delta).
    pub fn stored_len(&self) -> usize {
        self.stored.len()
    }

    /// A tree stored as a delta: `stored` is what [`crate::delta::encode`] made.
    pub fn delta(id: ObjectId, raw_len: usize, stored: Vec<u8>) -> Self {
        Self {
            id,
            kind: ObjectKind::Tree,
            raw_len: raw_len as u64,
            codec: CODEC_DELTA,
            stored,
        }
    }

    pub fn encode(kind: ObjectKind, id: ObjectId, raw: &[u8]) -> Self {
        let compressed = if raw.len() >= 64 {
            compress(raw)
                .ok()
                .filter(|c| c.len() < raw.len() - raw.len() / 10)
        } else {
            None
        };
        let (codec, stored) = match compressed {
            Some(c) => (CODEC_ZSTD, c),
            None => (CODEC_RAW, raw.to_vec()),
        };
        Self {
            id,
            kind,
            raw_len: raw.len() as u64,
            codec,
            stored,
        }
    }
}

impl EncodedObject {
    /// Its content back, as a pack read gives it: a whole object decompressed and checked
    /// against its id, a delta as stored (for backends that keep objects encoded elsewhere).
    pub fn decode(&self) -> Result<Stored> {
        let bad = |why: &str| StoreError::corrupt(format!("object {}: {why}", self.id.hex()));
        let raw = match self.codec {
            CODEC_RAW => self.stored.clone(),
            CODEC_ZSTD => decompress(&self.stored, self.raw_len as usize)
                .map_err(|_| bad("does not decompress"))?,
            CODEC_DELTA if self.kind == ObjectKind::Tree => {
                return Ok(Stored::Delta(self.stored.clone()));
            }
            _ => return Err(bad("unknown codec")),
        };
        if raw.len() as u64 != self.raw_len || ObjectId::of(self.kind, &raw) != self.id {
            return Err(bad("content does not match its id"));
        }
        Ok(Stored::Whole(raw))
    }

    pub fn is_delta(&self) -> bool {
        self.codec == CODEC_DELTA
    }
}

fn record_bytes(obj: &EncodedObject) -> Result<Vec<u8>> {
    let stored_len = u32::try_from(obj.stored.len())
        .map_err(|_| StoreError::Refused("object too large for a pack record".into()))?;
    let mut rec = Vec::with_capacity(obj.stored.len() + HEADER_LEN as usize + 4);
    rec.extend_from_slice(&MAGIC.to_le_bytes());
    rec.push(obj.kind as u8);
    rec.push(obj.codec);
    rec.extend_from_slice(&[0, 0]);
    rec.extend_from_slice(&stored_len.to_le_bytes());
    rec.extend_from_slice(&obj.raw_len.to_le_bytes());
    rec.extend_from_slice(&obj.id.0);
    rec.extend_from_slice(&obj.stored);
    let crc = crc32c::crc32c(&rec);
    rec.extend_from_slice(&crc.to_le_bytes());
    Ok(rec)
}

/// Appends to one pack at a time; rotates at [`PACK_TARGET_SIZE`]. Packs it filled are synced
/// before it lets go of them, so `sync` only has to flush the current one.
pub struct PackWriter {
    dir: PathBuf,
    /// Flocked while this writer may append to it.
    file: Flock,
    path: PathBuf,
    pack: u64,
    end: u64,
    dirty: bool,
}

impl PackWriter {
    /// Take over an existing pack that no live writer holds (cutting off whatever a crashed
    /// writer appended after its last committed object), or start a new one.
    /// `committed_end(pack)` is the end of the last committed record in that pack.
    pub fn acquire(dir: &Path, committed_end: &dyn Fn(u64) -> u64) -> Result<Self> {
        let mut candidates = Vec::new();
        for entry in std::fs::read_dir(dir).at(dir)? {
            let entry = entry.at(dir)?;
            if let Some(pack) = entry.file_name().to_str().and_then(parse_pack_name) {
                candidates.push(pack);
            }
        }
        candidates.sort_unstable();
        for pack in candidates {
            let path = pack_path(dir, pack);
            let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
                continue;
            };
            let Ok(file) = Flock::on(file, FlockOperation::NonBlockingLockExclusive) else {
                continue; // another writer is appending to it
            };
            let end = committed_end(pack);
            if end >= PACK_TARGET_SIZE {
                continue;
            }
            let meta = file.metadata().at(&path)?;
            if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
                // Shared with a fork's store (or its origin's): past this store's committed
                // end are the other store's objects, which a take-over would cut off.
                continue;
            }
            let len = meta.len();
            if len > end {
                file.set_len(end).at(&path)?;
            }
            return Ok(Self {
                dir: dir.to_path_buf(),
                file,
                path,
                pack,
                end,
                dirty: len > end,
            });
        }
        Self::create(dir)
    }

    /// A brand-new pack (gc compacts into one no other writer has seen).
    pub fn acquire_new(dir: &Path) -> Result<Self> {
        Self::create(dir)
    }

    fn create(dir: &Path) -> Result<Self> {
        loop {
            let pack = random_u64();
            let path = pack_path(dir, pack);
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => {
                    let file = Flock::on(file, FlockOperation::LockExclusive).at(&path)?;
                    sync_dir(dir)?;
                    return Ok(Self {
                        dir: dir.to_path_buf(),
                        file,
                        path,
                        pack,
                        end: 0,
                        dirty: false,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).at(&path),
            }
        }
    }

    pub fn append(&mut self, obj: &EncodedObject) -> Result<Location> {
        if self.end >= PACK_TARGET_SIZE {
            self.sync()?;
            *self = Self::create(&self.dir)?;
        }
        let rec = record_bytes(obj)?;
        let offset = self.end;
        if let Err(e) = self.file.write_all_at(&rec, offset) {
            // Leave no partial record behind: the next writer would cut it anyway.
            let _ = self.file.set_len(offset);
            return Err(e).at(&self.path);
        }
        self.end += rec.len() as u64;
        self.dirty = true;
        Ok(Location {
            pack: self.pack,
            offset,
            stored_len: obj.stored.len() as u32,
            raw_len: obj.raw_len,
            kind: obj.kind,
            delta: obj.codec == CODEC_DELTA,
        })
    }

    /// Make every appended record durable (one fdatasync).
    pub fn sync(&mut self) -> Result<()> {
        if self.dirty {
            rustix::fs::fdatasync(&*self.file).at(&self.path)?;
            self.dirty = false;
        }
        Ok(())
    }

    pub fn pack(&self) -> u64 {
        self.pack
    }
}

/// What a record holds, once its checksum and header are checked.
pub enum Stored {
    /// The object's bytes, checked against its id.
    Whole(Vec<u8>),
    /// The stored bytes of a tree delta ([`crate::delta::Delta::parse`]), not yet resolved.
    Delta(Vec<u8>),
}

/// Reads records by location, keeping pack files open.
#[derive(Default)]
pub struct PackReader {
    dir: PathBuf,
    open: Mutex<HashMap<u64, Arc<File>>>,
}

impl PackReader {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            open: Mutex::default(),
        }
    }

    fn file(&self, pack: u64) -> Result<Arc<File>> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?;
        if let Some(f) = open.get(&pack) {
            return Ok(f.clone());
        }
        let path = pack_path(&self.dir, pack);
        let f = Arc::new(File::open(&path).at(&path)?);
        open.insert(pack, f.clone());
        Ok(f)
    }

    fn bad(&self, id: &ObjectId, loc: &Location, why: &str) -> StoreError {
        StoreError::corrupt(format!(
            "object {} in pack {:016x} at offset {}: {why}",
            id.hex(),
            loc.pack,
            loc.offset
        ))
    }

    /// Read and check a record (CRC, header against the index); a whole object is
    /// decompressed and checked against `id`, a delta is returned as stored.
    pub fn read_stored(&self, id: &ObjectId, loc: &Location) -> Result<Stored> {
        let file = self.file(loc.pack)?;
        let mut rec = vec![0u8; loc.record_len() as usize];
        file.read_exact_at(&mut rec, loc.offset)
            .at(&pack_path(&self.dir, loc.pack))?;
        let bad = |why: &str| self.bad(id, loc, why);
        let body_end = rec.len() - 4;
        let crc = u32::from_le_bytes(rec[body_end..].try_into().map_err(|_| bad("short"))?);
        if crc32c::crc32c(&rec[..body_end]) != crc {
            return Err(bad("checksum mismatch"));
        }
        if u32::from_le_bytes(rec[0..4].try_into().map_err(|_| bad("short"))?) != MAGIC
            || rec[4] != loc.kind as u8
            || rec[20..52] != id.0
        {
            return Err(bad("record header does not match the index"));
        }
        let codec = rec[5];
        // The stored bytes, moved to the front of the buffer they were read into.
        rec.copy_within(HEADER_LEN as usize..body_end, 0);
        rec.truncate(body_end - HEADER_LEN as usize);
        let stored = rec;
        let raw = match codec {
            CODEC_RAW => stored,
            CODEC_ZSTD => {
                decompress(&stored, loc.raw_len as usize).map_err(|_| bad("does not decompress"))?
            }
            CODEC_DELTA if loc.kind == ObjectKind::Tree => return Ok(Stored::Delta(stored)),
            _ => return Err(bad("unknown codec")),
        };
        if raw.len() as u64 != loc.raw_len || ObjectId::of(loc.kind, &raw) != *id {
            return Err(bad("content does not match its id"));
        }
        Ok(Stored::Whole(raw))
    }

    /// The raw record bytes, for copying an object into another store without recompressing.
    pub fn read_record(&self, loc: &Location) -> Result<Vec<u8>> {
        let file = self.file(loc.pack)?;
        let mut rec = vec![0u8; loc.record_len() as usize];
        file.read_exact_at(&mut rec, loc.offset)
            .at(&pack_path(&self.dir, loc.pack))?;
        Ok(rec)
    }

    /// `len` bytes of a pack from `offset`: a run of whole records (fork copies runs).
    pub fn read_range(&self, pack: u64, offset: u64, len: u64) -> Result<Vec<u8>> {
        let file = self.file(pack)?;
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, offset)
            .at(&pack_path(&self.dir, pack))?;
        Ok(buf)
    }

    pub fn forget(&self, pack: u64) {
        if let Ok(mut open) = self.open.lock() {
            open.remove(&pack);
        }
    }
}

/// Check a record copied verbatim: its checksum and that it is the object the index says.
pub fn check_record(rec: &[u8], id: &ObjectId) -> Result<()> {
    let bad = |why: &str| StoreError::corrupt(format!("object {}: {why}", id.hex()));
    let body_end = rec
        .len()
        .checked_sub(4)
        .ok_or_else(|| bad("short record"))?;
    if body_end < HEADER_LEN as usize {
        return Err(bad("short record"));
    }
    let crc = u32::from_le_bytes(rec[body_end..].try_into().map_err(|_| bad("short"))?);
    if crc32c::crc32c(&rec[..body_end]) != crc {
        return Err(bad("checksum mismatch in its pack record"));
    }
    if u32::from_le_bytes(rec[0..4].try_into().map_err(|_| bad("short"))?) != MAGIC
        || rec[20..52] != id.0
    {
        return Err(bad("pack record header does not match the index"));
    }
    Ok(())
}

impl PackWriter {
    /// Append a run of whole records read from another pack verbatim; returns where the run
    /// starts. A run is never split across packs.
    pub fn append_run(&mut self, run: &[u8]) -> Result<(u64, u64)> {
        if self.end >= PACK_TARGET_SIZE {
            self.sync()?;
            *self = Self::create(&self.dir)?;
        }
        let offset = self.end;
        if let Err(e) = self.file.write_all_at(run, offset) {
            let _ = self.file.set_len(offset);
            return Err(e).at(&self.path);
        }
        self.end += run.len() as u64;
        self.dirty = true;
        Ok((self.pack, offset))
    }

    /// Append a record read from another pack verbatim (fork, gc compaction).
    pub fn append_record(&mut self, rec: &[u8], template: &Location) -> Result<Location> {
        if self.end >= PACK_TARGET_SIZE {
            self.sync()?;
            *self = Self::create(&self.dir)?;
        }
        let offset = self.end;
        self.file.write_all_at(rec, offset).at(&self.path)?;
        self.end += rec.len() as u64;
        self.dirty = true;
        Ok(Location {
            pack: self.pack,
            offset,
            ..*template
        })
    }
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).at(dir)?;
    rustix::fs::fsync(&d).at(dir)
}

/// Unique enough for file names: BLAKE3 of pid, time and a counter.
pub fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut h = blake3::Hasher::new();
    h.update(&std::process::id().to_le_bytes());
    h.update(&now.to_le_bytes());
    h.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let b = h.finalize();
    u64::from_le_bytes(b.as_bytes()[..8].try_into().unwrap_or([0; 8]))
}

/// Write a whole file durably: a temporary name, fdatasync, rename, fsync of the directory.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| StoreError::Refused(format!("{} has no parent", path.display())))?;
    let tmp = dir.join(format!(".tmp-{:016x}", random_u64()));
    let result = (|| {
        let mut f = File::create(&tmp).at(&tmp)?;
        f.write_all(bytes).at(&tmp)?;
        rustix::fs::fdatasync(&f).at(&tmp)?;
        std::fs::rename(&tmp, path).at(path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    //! Records written and read back through real pack files, then damaged the way a crash, a
    //! bad sector or a wrong index entry would.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn packs() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn object(kind: ObjectKind, raw: &[u8]) -> EncodedObject {
        EncodedObject::encode(kind, ObjectId::of(kind, raw), raw)
    }

    fn whole(stored: Stored) -> Vec<u8> {
        match stored {
            Stored::Whole(raw) => raw,
            Stored::Delta(_) => panic!("a whole object read as a delta"),
        }
    }

    /// Bytes that do not compress.
    fn noise(len: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn every_kind_and_codec_reads_back_as_written() {
        let dir = packs();
        let mut w = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        let cases: Vec<(ObjectKind, Vec<u8>)> = vec![
            (ObjectKind::Blob, Vec::new()),
            (ObjectKind::Blob, b"short".to_vec()),
            (ObjectKind::Blob, vec![b'a'; 10_000]),
            (ObjectKind::Blob, noise(10_000)),
            (ObjectKind::ChunkList, noise(32 * 5)),
            (ObjectKind::Tree, b"tree bytes ".repeat(50)),
        ];
        let mut written = Vec::new();
        for (kind, raw) in &cases {
            let obj = object(*kind, raw);
            let loc = w.append(&obj).unwrap();
            assert_eq!(loc.record_len(), obj.record_len());
            written.push((obj.id, loc, raw.clone()));
        }
        // The compressible blob was compressed, the noise was not.
        assert!(written[2].1.stored_len < 1000);
        assert_eq!(written[3].1.stored_len, 10_000);
        let delta = EncodedObject::delta(
            ObjectId::of(ObjectKind::Tree, b"t2"),
            2,
            b"delta bytes".to_vec(),
        );
        let delta_loc = w.append(&delta).unwrap();
        assert!(delta_loc.delta);
        w.sync().unwrap();

        let r = PackReader::new(dir.path());
        for (id, loc, raw) in &written {
            assert_eq!(&whole(r.read_stored(id, loc).unwrap()), raw);
            check_record(&r.read_record(loc).unwrap(), id).unwrap();
        }
        match r.read_stored(&delta.id, &delta_loc).unwrap() {
            Stored::Delta(d) => assert_eq!(d, b"delta bytes"),
            Stored::Whole(_) => panic!("a delta read as a whole object"),
        }
        // Records are back to back: the pack ends where the last one does.
        let len = std::fs::metadata(pack_path(dir.path(), w.pack()))
            .unwrap()
            .len();
        assert_eq!(len, delta_loc.end());
    }

    #[test]
    fn a_location_past_the_end_or_in_a_truncated_pack_is_an_error() {
        let dir = packs();
        let mut w = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        let obj = object(ObjectKind::Blob, &noise(500));
        let loc = w.append(&obj).unwrap();
        w.sync().unwrap();
        let path = pack_path(dir.path(), loc.pack);

        let past_end = Location {
            offset: loc.end(),
            ..loc
        };
        let longer = Location {
            stored_len: loc.stored_len + 100,
            ..loc
        };
        let elsewhere = Location { pack: 7, ..loc };
        for bad in [past_end, longer, elsewhere] {
            let r = PackReader::new(dir.path());
            assert!(r.read_stored(&obj.id, &bad).is_err(), "{bad:?}");
            assert!(
                r.read_record(&bad)
                    .and_then(|rec| check_record(&rec, &obj.id))
                    .is_err(),
                "{bad:?}"
            );
        }

        // A pack cut short at every length inside the record.
        let full = std::fs::read(&path).unwrap();
        for cut in 0..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            let r = PackReader::new(dir.path());
            assert!(r.read_stored(&obj.id, &loc).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_in_a_record_is_never_returned_as_data() {
        let dir = packs();
        let mut w = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        let raw = noise(300);
        let obj = object(ObjectKind::Blob, &raw);
        let loc = w.append(&obj).unwrap();
        w.sync().unwrap();
        let path = pack_path(dir.path(), loc.pack);
        let good = std::fs::read(&path).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            let r = PackReader::new(dir.path());
            assert!(r.read_stored(&obj.id, &loc).is_err(), "flip at {at}");
            assert!(check_record(&bad, &obj.id).is_err(), "flip at {at}");
        }
    }

    #[test]
    fn a_flipped_content_byte_with_a_fixed_checksum_is_caught_by_the_id() {
        // A record rewritten with a matching CRC (a bug, or a deliberate edit): only the
        // BLAKE3 id can tell the content is not the object's.
        let dir = packs();
        let mut w = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        for raw in [noise(300), vec![b'z'; 4000]] {
            let obj = object(ObjectKind::Blob, &raw);
            let loc = w.append(&obj).unwrap();
            w.sync().unwrap();
            let path = pack_path(dir.path(), loc.pack);
            let good = std::fs::read(&path).unwrap();
            let start = loc.offset as usize;
            let body_end = (loc.end() - 4) as usize;
            let content = start + HEADER_LEN as usize;
            let mut bad = good.clone();
            bad[content + (body_end - content) / 2] ^= 0x20;
            let crc = crc32c::crc32c(&bad[start..body_end]);
            bad[body_end..body_end + 4].copy_from_slice(&crc.to_le_bytes());
            std::fs::write(&path, &bad).unwrap();
            let r = PackReader::new(dir.path());
            let e = r
                .read_stored(&obj.id, &loc)
                .err()
                .expect("caught")
                .to_string();
            assert!(
                e.contains("does not match its id") || e.contains("does not decompress"),
                "{e}"
            );
            assert!(e.contains(&obj.id.hex()), "{e}");
            std::fs::write(&path, &good).unwrap();
        }
    }

    #[test]
    fn a_record_read_for_another_id_or_kind_is_refused() {
        let dir = packs();
        let mut w = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        let a = object(ObjectKind::Blob, b"a");
        let loc = w.append(&a).unwrap();
        let b = ObjectId::of(ObjectKind::Blob, b"b");
        let r = PackReader::new(dir.path());
        assert!(r.read_stored(&b, &loc).is_err());
        assert!(check_record(&r.read_record(&loc).unwrap(), &b).is_err());
        let as_tree = Location {
            kind: ObjectKind::Tree,
            ..loc
        };
        assert!(r.read_stored(&a.id, &as_tree).is_err());
        assert!(check_record(&[0u8; 10], &a.id).is_err());
    }

    #[test]
    fn two_writers_never_share_a_pack_and_both_read_back() {
        let dir = packs();
        let mut one = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        // The first writer's pack is locked: the second starts its own.
        let mut two = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        assert_ne!(one.pack(), two.pack());
        let mut written = Vec::new();
        for i in 0..20u32 {
            let w = if i % 2 == 0 { &mut one } else { &mut two };
            let raw = format!("object {i}").into_bytes();
            let obj = object(ObjectKind::Blob, &raw);
            written.push((obj.id, w.append(&obj).unwrap(), raw));
        }
        one.sync().unwrap();
        two.sync().unwrap();
        let r = PackReader::new(dir.path());
        for (id, loc, raw) in &written {
            assert_eq!(&whole(r.read_stored(id, loc).unwrap()), raw);
        }

        // Once the first lets go, a new writer takes its pack over, cutting off what followed
        // the committed end (here: after the first record).
        let (first_pack, first_end) = (written[0].1.pack, written[0].1.end());
        drop(one);
        let three = PackWriter::acquire(dir.path(), &|p| {
            if p == first_pack { first_end } else { 0 }
        })
        .unwrap();
        // The second writer's pack is still held, so whatever order the packs sort in, the
        // free one is taken.
        assert_eq!(three.pack(), first_pack);
        let len = std::fs::metadata(pack_path(dir.path(), first_pack))
            .unwrap()
            .len();
        assert_eq!(len, first_end);
    }

    /// A pack hard-linked into another store (a fork shares its origin's packs) is never taken
    /// over: past this store's committed end are the other store's objects, which a take-over
    /// would cut off and then overwrite.
    #[test]
    fn a_pack_shared_with_another_store_is_never_taken_over() {
        let dir = packs();
        let other = packs();
        let mut w = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        let obj = object(ObjectKind::Blob, b"the other store's object");
        let loc = w.append(&obj).unwrap();
        w.sync().unwrap();
        drop(w);
        let path = pack_path(dir.path(), loc.pack);
        std::fs::hard_link(&path, pack_path(other.path(), loc.pack)).unwrap();
        // This store has committed nothing in that pack.
        let mut taker = PackWriter::acquire(dir.path(), &|_| 0).unwrap();
        assert_ne!(taker.pack(), loc.pack, "a shared pack was taken over");
        taker
            .append(&object(ObjectKind::Blob, b"this store's object"))
            .unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), loc.end());
        let r = PackReader::new(other.path());
        assert_eq!(
            whole(r.read_stored(&obj.id, &loc).unwrap()),
            b"the other store's object"
        );
    }
}
