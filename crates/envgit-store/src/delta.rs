//! Trees stored as a delta against the same directory's previous version.
//!
//! A step that edits one file of a directory of 200 entries would otherwise store that
//! directory's whole tree again (~13 KiB, a third of it incompressible ids), and so would every
//! ancestor. Instead the new tree is compressed by zstd with the previous version as its
//! dictionary: what the two share costs a few bytes of match, so a one-entry edit stores about
//! the size of that entry.
//!
//! Stored bytes of a delta record (pack codec [`crate::pack::CODEC_DELTA`]):
//! `base id [32] | depth u8 | zstd frame`, where `depth` is 1 + the base's depth (a whole
//! object has depth 0). Chains are at most [`MAX_CHAIN`] long: a reader resolves at most that
//! many deltas, and a writer stores the tree whole instead of going deeper. The id is always
//! BLAKE3 of the resolved bytes, so a delta is checked like any object once resolved.

use crate::id::ObjectId;

/// The longest chain of deltas a tree may sit on. Every `MAX_CHAIN + 1`-th version of a
/// directory is stored whole, so reading the tree of a directory edited at every step costs at
/// most this many small decompressions.
pub const MAX_CHAIN: u8 = 48;

/// Bytes before the zstd frame: the base id and the depth.
pub const HEADER: usize = 33;

/// Level of delta compression: trees are small, so a higher level costs microseconds.
const LEVEL: i32 = 3;

/// A delta record's stored bytes, parsed.
pub struct Delta<'a> {
    pub base: ObjectId,
    pub depth: u8,
    pub frame: &'a [u8],
}

impl<'a> Delta<'a> {
    pub fn parse(stored: &'a [u8]) -> Option<Self> {
        let base = ObjectId(stored.get(..32)?.try_into().ok()?);
        let depth = *stored.get(32)?;
        let frame = stored.get(HEADER..)?;
        (1..=MAX_CHAIN)
            .contains(&depth)
            .then_some(Self { base, depth, frame })
    }
}

/// Bases larger than this are matched with zstd's long-distance matcher.
const LONG_BASE: usize = 256 << 10;

/// zstd's default decoder accepts windows up to 2^27 bytes; a delta must see its whole base.
const MAX_WINDOW_LOG: u32 = 27;

/// The window a delta of `raw` against `base_raw` needs (the base and the new bytes), if a
/// default decoder accepts it.
fn window_log(base_raw: &[u8], raw: &[u8]) -> Option<u32> {
    let span = (base_raw.len() + raw.len()).max(1 << 10);
    let log = usize::BITS - (span - 1).leading_zeros();
    (log <= MAX_WINDOW_LOG).then_some(log)
}

/// The stored bytes of `raw` as a delta against `base_raw` (whose id is `base`, at `depth - 1`);
/// `None` when the two are too large for one zstd window.
pub fn encode(
    base: &ObjectId,
    depth: u8,
    base_raw: &[u8],
    raw: &[u8],
) -> std::io::Result<Option<Vec<u8>>> {
    let Some(window) = window_log(base_raw, raw) else {
        return Ok(None);
    };
    let frame = if base_raw.len() > LONG_BASE {
        compress_against_large(base_raw, window, raw)?
    } else {
        with_dictionary_compressor(base_raw, |c| c.compress(raw))?
    };
    let mut out = Vec::with_capacity(HEADER + frame.len());
    out.extend_from_slice(&base.0);
    out.push(depth);
    out.extend_from_slice(&frame);
    Ok(Some(out))
}

/// The bytes a delta's frame encodes, given its base's bytes; `raw_len` bounds the output.
pub fn decode(frame: &[u8], base_raw: &[u8], raw_len: usize) -> std::io::Result<Vec<u8>> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new()?);
        }
        let Some(d) = d.as_mut() else {
            return Err(std::io::Error::other("no zstd decompressor"));
        };
        d.set_dictionary(base_raw)?;
        let out = d.decompress(frame, raw_len);
        // Dictionaries are sticky: drop this one so nothing else is read against it.
        d.set_dictionary(&[])?;
        out
    })
}

/// zstd reads a dictionary that begins with its dictionary magic as a trained dictionary,
/// not as raw content. A tree begins with an entry kind byte (1, 2, 3 or 0x81..), never with
/// the magic's first byte, so every tree is raw content; anything else is refused.
const ZSTD_DICT_MAGIC: [u8; 4] = [0x37, 0xa4, 0x30, 0xec];

pub fn usable_as_base(base_raw: &[u8]) -> bool {
    !base_raw.starts_with(&ZSTD_DICT_MAGIC)
}

thread_local! {
    // One context per thread, as for whole objects (pack.rs): creating one costs more than a
    // delta of a small tree.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

fn with_dictionary_compressor<T>(
    dictionary: &[u8],
    f: impl FnOnce(&mut zstd::bulk::Compressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(zstd::bulk::Compressor::new(LEVEL)?);
        }
        let Some(c) = c.as_mut() else {
            return Err(std::io::Error::other("no zstd compressor"));
        };
        c.set_dictionary(LEVEL, dictionary)?;
        let out = f(c);
        c.set_dictionary(LEVEL, &[])?;
        out
    })
}

/// A large base the way zstd's own `--patch-from` does it: the base as a referenced prefix
/// (loaded with this context's parameters), a window over all of it, and long-distance
/// matching, which finds the long runs a large directory shares with its next version where
/// the regular match finder's tables are too small to remember them. A context of its own,
/// since a referenced prefix must outlive it: large directories are rare.
fn compress_against_large(
    base_raw: &[u8],
    window_log: u32,
    raw: &[u8],
) -> std::io::Result<Vec<u8>> {
    use zstd::zstd_safe::{CCtx, CParameter};
    let err = |code: usize| std::io::Error::other(zstd::zstd_safe::get_error_name(code));
    let mut c = CCtx::try_create().ok_or_else(|| std::io::Error::other("no zstd context"))?;
    c.set_parameter(CParameter::CompressionLevel(LEVEL))
        .map_err(err)?;
    c.set_parameter(CParameter::WindowLog(window_log))
        .map_err(err)?;
    c.set_parameter(CParameter::EnableLongDistanceMatching(true))
        .map_err(err)?;
    c.ref_prefix(base_raw).map_err(err)?;
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(raw.len()));
    c.compress2(&mut out, raw).map_err(err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ObjectKind;

    #[test]
    fn a_small_edit_is_a_small_delta_and_round_trips() {
        let base_raw: Vec<u8> = (0..4000u32)
            .flat_map(|i| (i * 7919).to_le_bytes())
            .collect();
        let mut raw = base_raw.clone();
        raw[8000..8040].copy_from_slice(&[0xab; 40]);
        let base = ObjectId::of(ObjectKind::Tree, &base_raw);
        let stored = encode(&base, 1, &base_raw, &raw).unwrap().unwrap();
        assert!(stored.len() < 200, "{} bytes", stored.len());
        let d = Delta::parse(&stored).unwrap();
        assert_eq!((d.base, d.depth), (base, 1));
        assert_eq!(decode(d.frame, &base_raw, raw.len()).unwrap(), raw);
        // Against another base it does not decode to the same bytes.
        let other = vec![0u8; base_raw.len()];
        assert_ne!(decode(d.frame, &other, raw.len()).ok(), Some(raw));
    }

    #[test]
    fn depth_out_of_range_does_not_parse() {
        let mut stored = vec![0u8; 40];
        stored[32] = 0;
        assert!(Delta::parse(&stored).is_none());
        stored[32] = MAX_CHAIN + 1;
        assert!(Delta::parse(&stored).is_none());
        stored[32] = MAX_CHAIN;
        assert!(Delta::parse(&stored).is_some());
        assert!(Delta::parse(&stored[..20]).is_none());
    }
}
