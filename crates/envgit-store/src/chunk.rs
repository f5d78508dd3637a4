//! Large files are split by content-defined chunking (FastCDC 2020), so a small edit to a big
//! file stores only the chunks around the edit. The file's id is that of its chunk list.

use std::io::Read;

use crate::error::{Result, StoreError};
use crate::id::{ObjectId, ObjectKind};

/// Files above this size are chunked; smaller ones are one blob.
pub const CHUNK_THRESHOLD: u64 = 1 << 20;
pub(crate) const MIN_CHUNK: usize = 256 << 10;
const AVG_CHUNK: usize = 1 << 20;
const MAX_CHUNK: usize = 4 << 20;
/// Bytes per chunk in a chunk list: its id and its length.
pub(crate) const LIST_ENTRY: u64 = 40;

/// Store a large file's chunks and its chunk list through `put` (which stores an object and
/// returns its id, or `None` when it does not fit); returns the list's id, or `None` at the
/// first chunk that does not fit.
pub(crate) fn store_chunked(
    reader: impl Read,
    put: impl Fn(ObjectKind, &[u8]) -> Result<Option<ObjectId>>,
) -> Result<Option<ObjectId>> {
    let mut list = Vec::new();
    for chunk in fastcdc::v2020::StreamCDC::new(reader, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK) {
        let chunk = chunk.map_err(|e| StoreError::Io {
            path: "<chunking>".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let Some(id) = put(ObjectKind::Blob, &chunk.data)? else {
            return Ok(None);
        };
        list.extend_from_slice(&id.0);
        list.extend_from_slice(&(chunk.length as u64).to_le_bytes());
    }
    put(ObjectKind::ChunkList, &list)
}

pub fn decode_list(bytes: &[u8]) -> Result<Vec<ObjectId>> {
    if !bytes.len().is_multiple_of(40) {
        return Err(StoreError::corrupt("chunk list has a bad length"));
    }
    Ok(bytes
        .chunks_exact(40)
        .map(|c| {
            let mut id = [0u8; 32];
            id.copy_from_slice(&c[..32]);
            ObjectId(id)
        })
        .collect())
}
