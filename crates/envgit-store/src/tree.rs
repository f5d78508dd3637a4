//! Trees: one object per directory, entries sorted by name bytes.
//!
//! mtimes are deliberately not part of a tree: they would defeat deduplication, and a restore
//! writes fresh mtimes so build tools see the change.

use crate::error::{Result, StoreError};
use crate::id::ObjectId;

/// Why a path was deliberately not captured. Rewind and fork never touch such paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum MarkerReason {
    /// Matched `snapshot.exclude` in `envgit.yaml`.
    Excluded = 1,
    /// Larger than `snapshot.max_file_size`.
    TooLarge = 2,
    /// A socket, fifo or device node.
    Special = 3,
    /// Could not be read (permissions).
    Unreadable = 4,
    /// Removed from history by `envgit gc --purge`.
    Purged = 5,
    /// A directory deeper than [`crate::MAX_TREE_DEPTH`] levels, or whose path is longer than
    /// [`crate::MAX_TREE_PATH`] bytes: it and everything below it are not captured.
    TooDeep = 6,
    /// A file whose new content would have taken the store past `snapshot.budget`, or its
    /// filesystem below the free-space reserve, when the step was snapshotted.
    OverBudget = 7,
}

impl MarkerReason {
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Excluded,
            2 => Self::TooLarge,
            3 => Self::Special,
            4 => Self::Unreadable,
            5 => Self::Purged,
            6 => Self::TooDeep,
            7 => Self::OverBudget,
            _ => return None,
        })
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Excluded => "excluded by snapshot.exclude",
            Self::TooLarge => "over snapshot.max_file_size",
            Self::Special => "special file",
            Self::Unreadable => "unreadable",
            Self::Purged => "purged",
            // MAX_TREE_DEPTH and MAX_TREE_PATH (a unit test keeps the two in step).
            Self::TooDeep => "deeper than 1024 directories or a path over 16 KiB",
            Self::OverBudget => "not stored: over snapshot.budget or the disk's free space",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file; `mode` holds its permission bits.
    File,
    /// A symbolic link; the blob holds its target, which is never followed.
    Symlink,
    Dir,
    Marker(MarkerReason),
}

impl EntryKind {
    fn to_byte(self) -> u8 {
        match self {
            Self::File => 1,
            Self::Symlink => 2,
            Self::Dir => 3,
            Self::Marker(r) => 0x80 | r as u8,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::File,
            2 => Self::Symlink,
            3 => Self::Dir,
            b if b & 0x80 != 0 => Self::Marker(MarkerReason::from_byte(b & 0x7f)?),
            _ => return None,
        })
    }

    pub fn is_marker(self) -> bool {
        matches!(self, Self::Marker(_))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TreeEntry {
    pub name: Vec<u8>,
    pub kind: EntryKind,
    /// Permission bits (0o7777) for files and directories; 0 for links and markers.
    pub mode: u32,
    /// Bytes of content (files, link targets, too-large markers); 0 for directories.
    pub size: u64,
    /// Content id; the zero id for markers.
    pub id: ObjectId,
}

impl TreeEntry {
    pub fn is_executable(&self) -> bool {
        self.kind == EntryKind::File && self.mode & 0o111 != 0
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    /// Sorted by `name`, names unique.
    pub entries: Vec<TreeEntry>,
}

pub const ZERO_ID: ObjectId = ObjectId([0; 32]);

impl Tree {
    pub fn get(&self, name: &[u8]) -> Option<&TreeEntry> {
        self.entries
            .binary_search_by(|e| e.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Canonical bytes: per entry `kind u8 | mode u32 | size u64 | id [32] | len u16 | name`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * 64);
        for e in &self.entries {
            out.push(e.kind.to_byte());
            out.extend_from_slice(&e.mode.to_le_bytes());
            out.extend_from_slice(&e.size.to_le_bytes());
            out.extend_from_slice(&e.id.0);
            let len = u16::try_from(e.name.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&e.name[..usize::from(len)]);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = || StoreError::corrupt("tree object does not decode");
        let mut entries = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            if rest.len() < 47 {
                return Err(bad());
            }
            let kind = EntryKind::from_byte(rest[0]).ok_or_else(bad)?;
            let mode = u32::from_le_bytes(rest[1..5].try_into().map_err(|_| bad())?);
            let size = u64::from_le_bytes(rest[5..13].try_into().map_err(|_| bad())?);
            let id = ObjectId(rest[13..45].try_into().map_err(|_| bad())?);
            let len = usize::from(u16::from_le_bytes([rest[45], rest[46]]));
            let name = rest.get(47..47 + len).ok_or_else(bad)?.to_vec();
            if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
                return Err(bad());
            }
            rest = &rest[47 + len..];
            entries.push(TreeEntry {
                name,
                kind,
                mode,
                size,
                id,
            });
        }
        if entries.windows(2).any(|w| w[0].name >= w[1].name) {
            return Err(bad());
        }
        Ok(Self { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ObjectKind;

    #[test]
    fn encode_decode_round_trip() {
        let t = Tree {
            entries: vec![
                TreeEntry {
                    name: b"a".to_vec(),
                    kind: EntryKind::File,
                    mode: 0o755,
                    size: 3,
                    id: ObjectId::of(ObjectKind::Blob, b"abc"),
                },
                TreeEntry {
                    name: b"big".to_vec(),
                    kind: EntryKind::Marker(MarkerReason::TooLarge),
                    mode: 0,
                    size: 1 << 40,
                    id: ZERO_ID,
                },
            ],
        };
        assert_eq!(Tree::decode(&t.encode()).unwrap(), t);
        assert!(Tree::decode(&[1, 2, 3]).is_err());
    }

    #[test]
    fn too_deep_names_the_limits() {
        let d = MarkerReason::TooDeep.describe();
        assert!(d.contains(&crate::MAX_TREE_DEPTH.to_string()), "{d}");
        assert!(
            d.contains(&format!("{} KiB", crate::MAX_TREE_PATH >> 10)),
            "{d}"
        );
        let t = Tree {
            entries: vec![TreeEntry {
                name: b"d".to_vec(),
                kind: EntryKind::Marker(MarkerReason::TooDeep),
                mode: 0,
                size: 0,
                id: ZERO_ID,
            }],
        };
        assert_eq!(Tree::decode(&t.encode()).unwrap(), t);
    }
}
