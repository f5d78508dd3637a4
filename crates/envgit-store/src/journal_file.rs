//! The journal file as one process sees it: how far it has read (the committed end), which
//! file that was (gc replaces it), appending a commit, replacing it whole. The frames and
//! their reading are [`crate::journal`]'s.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};
use crate::journal::{self, JournalRead};
use crate::pack;

/// How far a journal was read: which file (device, inode; zeros for none) and its committed
/// end. The local packs use it to know where each pack's committed records end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalMark {
    pub ident: (u64, u64),
    pub pos: u64,
}

impl JournalMark {
    /// The journal at `path` as it is now, read from the start.
    pub fn of_file(path: &Path) -> Result<(u64, u64)> {
        match std::fs::metadata(path) {
            Ok(m) => Ok((m.dev(), m.ino())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((0, 0)),
            Err(e) => Err(e).at(path),
        }
    }
}

pub(crate) struct JournalFile {
    dir: PathBuf,
    path: PathBuf,
    mark: JournalMark,
}

impl JournalFile {
    pub fn new(store_dir: &Path) -> Self {
        Self {
            dir: store_dir.to_path_buf(),
            path: store_dir.join("journal"),
            mark: JournalMark::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn mark(&self) -> JournalMark {
        self.mark
    }

    /// Committed frames since the last read; `true` with them if the journal was replaced
    /// (gc rewrites it) and was read again from the start.
    #[cfg(test)]
    pub fn read_new(&mut self, objects: bool) -> Result<(JournalRead, bool)> {
        self.read_new_with(|mark| (if objects { mark.pos } else { u64::MAX }, mark.pos))
    }

    /// [`JournalFile::read_new`], reading objects and step frames from the positions `from`
    /// gives (objects, steps) for where the read would start (`pos` 0: the whole journal, of
    /// which the tables hold a part). The read starts at the earlier of the two.
    pub fn read_new_with(
        &mut self,
        from: impl FnOnce(JournalMark) -> (u64, u64),
    ) -> Result<(JournalRead, bool)> {
        let ident = JournalMark::of_file(&self.path)?;
        let replaced = ident != self.mark.ident;
        if replaced {
            self.mark = JournalMark { ident, pos: 0 };
        }
        let (objects_from, steps_from) = from(self.mark);
        let start = self.mark.pos.max(objects_from.min(steps_from));
        let read = journal::read_frames(&self.path, start, objects_from, steps_from)?;
        self.mark.pos = read.committed_end;
        Ok((read, replaced))
    }

    /// Append committed bytes at the committed end (cutting off a crashed writer's tail first)
    /// and fdatasync. On failure the journal is cut back: no half-written step.
    pub fn append(&mut self, bytes: &[u8]) -> Result<()> {
        let path = &self.path;
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .at(path)?;
        let len = f.metadata().at(path)?.len();
        if len > self.mark.pos {
            f.set_len(self.mark.pos).at(path)?;
        }
        let m = f.metadata().at(path)?;
        let new_file = self.mark.ident == (0, 0);
        self.mark.ident = (m.dev(), m.ino());
        let result = (|| {
            f.seek(SeekFrom::Start(self.mark.pos)).at(path)?;
            f.write_all(bytes).at(path)?;
            rustix::fs::fdatasync(&f).at(path)
        })();
        if result.is_err() {
            let _ = f.set_len(self.mark.pos);
            return result;
        }
        if new_file {
            pack::sync_dir(&self.dir)?;
        }
        self.mark.pos += bytes.len() as u64;
        Ok(())
    }

    /// Replace the journal with `bytes` (gc): tmp file, fdatasync, rename. The next read
    /// starts from the beginning of the new file.
    pub fn replace(&mut self, bytes: &[u8]) -> Result<()> {
        pack::write_file_atomic(&self.path, bytes)?;
        self.mark = JournalMark::default();
        Ok(())
    }
}

/// The journal at `store_dir` is at least `covers` bytes long and its 4 bytes before `covers`
/// are `frame_end` (the checksum of the frame that ended there): how a table made beside it
/// (objects, steps) knows it still describes this journal.
pub(crate) fn journal_ends_with(store_dir: &Path, covers: u64, frame_end: [u8; 4]) -> bool {
    frame_end_at(store_dir, covers) == Some(frame_end)
}

/// The journal's 4 bytes before `pos`: the checksum of the frame that ends there.
pub(crate) fn frame_end_at(store_dir: &Path, pos: u64) -> Option<[u8; 4]> {
    let at = pos.checked_sub(4)?;
    let mut got = [0u8; 4];
    std::fs::File::open(store_dir.join("journal"))
        .and_then(|f| f.read_exact_at(&mut got, at))
        .ok()?;
    Some(got)
}
