//! `Content-Encoding` undone for the matcher: a rule reads the body a server would read, not
//! its compressed bytes (git sends gzip; `npm audit` sends gzip JSON). The bytes forwarded stay
//! exactly as the client encoded them; only the judgement sees the decoded form, bounded.

use std::io::Read;

/// Why a body could not be read as the server would read it (the text is what the client is
/// shown in the `400`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("the Content-Encoding {0:?} is not one envgit decodes")]
    UnknownCoding(String),
    #[error("the {coding} body does not decode: {error}")]
    Broken {
        coding: String,
        error: std::io::Error,
    },
}

/// The decoded prefix, and whether it is all of the body.
pub(crate) struct Decoded {
    pub(crate) bytes: Vec<u8>,
    pub(crate) complete: bool,
}

/// Undoes `encoding` (a `Content-Encoding` value: codings applied in order, so undone in
/// reverse) on `raw`, the body or its first bytes (`raw_complete` says which), producing at
/// most `max` bytes. An unknown coding, or a whole body that does not decode, is an error.
pub(crate) fn decode(
    encoding: &str,
    raw: &[u8],
    raw_complete: bool,
    max: usize,
) -> Result<Decoded, DecodeError> {
    let codings: Vec<String> = encoding
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
    let mut bytes = raw.to_vec();
    let mut complete = raw_complete;
    for coding in codings.iter().rev() {
        let decoded = undo(coding, &bytes, complete, max)?;
        bytes = decoded.bytes;
        complete = decoded.complete;
    }
    Ok(Decoded { bytes, complete })
}

fn undo(coding: &str, input: &[u8], complete: bool, max: usize) -> Result<Decoded, DecodeError> {
    let reader: Box<dyn Read + '_> = match coding {
        "gzip" | "x-gzip" => Box::new(flate2::read::MultiGzDecoder::new(input)),
        // RFC 9110 says zlib; some clients send raw deflate: the zlib header tells them apart.
        "deflate" if input.first().is_some_and(|b| b & 0x0f == 8) => {
            Box::new(flate2::read::ZlibDecoder::new(input))
        }
        "deflate" => Box::new(flate2::read::DeflateDecoder::new(input)),
        "br" => Box::new(brotli_decompressor::Decompressor::new(input, 4096)),
        other => return Err(DecodeError::UnknownCoding(other.to_owned())),
    };
    let mut out = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX) + 1;
    match reader.take(limit).read_to_end(&mut out) {
        Ok(_) => {}
        // A prefix ends in the middle of the stream: what came out so far is what is known.
        Err(_) if !complete && !out.is_empty() => {}
        Err(e) if !complete && e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(error) => {
            return Err(DecodeError::Broken {
                coding: coding.to_owned(),
                error,
            });
        }
    }
    let over = out.len() > max;
    out.truncate(max);
    Ok(Decoded {
        bytes: out,
        complete: complete && !over,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn gzip_and_deflate_bodies_are_read_as_servers_read_them() {
        let body = b"{\"query\":\"mutation { deleteRepository }\"}";
        let d = decode("gzip", &gzip(body), true, 1 << 20).unwrap();
        assert_eq!((d.bytes.as_slice(), d.complete), (&body[..], true));
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(body).unwrap();
        let d = decode("deflate", &z.finish().unwrap(), true, 1 << 20).unwrap();
        assert_eq!(d.bytes, body);
        let d = decode("identity, gzip", &gzip(body), true, 10).unwrap();
        assert_eq!((d.bytes.len(), d.complete), (10, false));
    }

    #[test]
    fn a_prefix_decodes_as_far_as_it_goes_and_junk_is_refused() {
        let big: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let z = gzip(&big);
        let d = decode("gzip", &z[..z.len() / 2], false, 1 << 20).unwrap();
        assert!(!d.complete && !d.bytes.is_empty() && big.starts_with(&d.bytes));
        assert!(decode("gzip", b"not gzip at all", true, 100).is_err());
        assert!(decode("compress", b"x", true, 100).is_err());
    }
}
