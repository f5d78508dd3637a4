//! The daemon's protocol: one request line, one answer, then the connection closes.
//!
//! - `since TOKEN\n` (or `since none\n`): `ok TOKEN\n`, the scan fingerprint as a
//!   length-prefixed string, then `full\n` (read everything) or `changes N\n` and N notes,
//!   each a kind byte (`w` whole directory, `n` a name, `f` a fresh name) and two
//!   length-prefixed byte strings (directory, name; the name empty for `w`).
//! - `status\n`: one line of JSON ([`Status`]).
//! - `stop\n`: `ok\n`, and the daemon exits.

use std::io::{self, BufRead, Read, Write};

use envgit_store::{ChangeNote, ChangeToken};

/// What `since` answers.
pub(crate) struct Answer {
    pub token: ChangeToken,
    pub fingerprint: String,
    pub changes: Option<Vec<ChangeNote>>,
    /// [`envgit_store::Since::unscanned`]: a last line, `unscanned N` or `unscanned none`,
    /// which a daemon from before it does not send (read as `none`) and a client from before
    /// it never reads.
    pub unscanned: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub(crate) struct Status {
    pub pid: u32,
    pub project: String,
    pub watches: usize,
    pub changes_kept: usize,
    pub token: String,
    pub degraded: bool,
    /// The scan configuration it watches by (`snapshot.exclude` and the size limit).
    pub fingerprint: String,
    /// Directories the scan does not enter (`node_modules/`, …) watched to count their
    /// events, and whether that count covers them all (absent from a daemon before it).
    #[serde(default)]
    pub excluded_watches: usize,
    #[serde(default)]
    pub excluded_counted: bool,
}

/// Longest byte string a note may carry (a relative path is at most 16 KiB, `MAX_TREE_PATH`).
const MAX_FIELD: u32 = 1 << 20;

pub(crate) fn write_answer(w: &mut impl Write, a: &Answer) -> io::Result<()> {
    let mut out = Vec::new();
    out.extend_from_slice(format!("ok {}\n", a.token).as_bytes());
    put_bytes(&mut out, a.fingerprint.as_bytes());
    match &a.changes {
        None => out.extend_from_slice(b"full\n"),
        Some(changes) => {
            out.extend_from_slice(format!("changes {}\n", changes.len()).as_bytes());
            for c in changes {
                match c {
                    ChangeNote::Whole(dir) => {
                        out.push(b'w');
                        put_bytes(&mut out, dir);
                        put_bytes(&mut out, b"");
                    }
                    ChangeNote::Name { dir, name, fresh } => {
                        out.push(if *fresh { b'f' } else { b'n' });
                        put_bytes(&mut out, dir);
                        put_bytes(&mut out, name);
                    }
                }
            }
        }
    }
    match a.unscanned {
        Some(n) => out.extend_from_slice(format!("unscanned {n}\n").as_bytes()),
        None => out.extend_from_slice(b"unscanned none\n"),
    }
    w.write_all(&out)?;
    w.flush()
}

pub(crate) fn read_answer(r: &mut impl BufRead) -> io::Result<Answer> {
    let line = read_line(r)?;
    let token = line
        .strip_prefix("ok ")
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| bad(&format!("expected `ok TOKEN`, got {line:?}")))?;
    let fingerprint = String::from_utf8(get_bytes(r)?).map_err(|_| bad("fingerprint"))?;
    let line = read_line(r)?;
    let changes = if line == "full" {
        None
    } else {
        let n: usize = line
            .strip_prefix("changes ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| bad(&format!("expected `full` or `changes N`, got {line:?}")))?;
        let mut changes = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let mut kind = [0u8];
            r.read_exact(&mut kind)?;
            let dir = get_bytes(r)?;
            let name = get_bytes(r)?;
            changes.push(match kind[0] {
                b'w' => ChangeNote::Whole(dir),
                b'n' | b'f' => ChangeNote::Name {
                    dir,
                    name,
                    fresh: kind[0] == b'f',
                },
                k => return Err(bad(&format!("unknown note kind {k}"))),
            });
        }
        Some(changes)
    };
    // The connection ends after the answer: an older daemon's ends here (EOF).
    let unscanned = read_line(r)
        .ok()
        .and_then(|l| l.strip_prefix("unscanned ")?.parse().ok());
    Ok(Answer {
        token,
        fingerprint,
        changes,
        unscanned,
    })
}

/// One `\n`-terminated line of at most 4 KiB, without its newline.
pub(crate) fn read_line(r: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    r.take(4096).read_until(b'\n', &mut line)?;
    if line.pop() != Some(b'\n') {
        return Err(bad("a line cut short"));
    }
    String::from_utf8(line).map_err(|_| bad("a line that is not UTF-8"))
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&u32::try_from(b.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(b);
}

fn get_bytes(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FIELD {
        return Err(bad("a field longer than 1 MiB"));
    }
    let mut b = vec![0; len as usize];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("watch daemon protocol: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_reads_back_as_written() {
        let a = Answer {
            token: ChangeToken {
                instance: 0xdead_beef,
                seq: 42,
            },
            fingerprint: "[\"node_modules/\"]|104857600".into(),
            changes: Some(vec![
                ChangeNote::Whole(b"src".to_vec()),
                ChangeNote::Name {
                    dir: b"".to_vec(),
                    name: b"a\nb\xff".to_vec(),
                    fresh: true,
                },
            ]),
            unscanned: Some(7),
        };
        let mut buf = Vec::new();
        write_answer(&mut buf, &a).unwrap();
        let b = read_answer(&mut io::Cursor::new(&buf)).unwrap();
        assert_eq!((b.token, &b.fingerprint), (a.token, &a.fingerprint));
        assert_eq!((&b.changes, b.unscanned), (&a.changes, Some(7)));
        // Cut anywhere before the last line, it is an error, never a shorter list; cut in the
        // last line (or an older daemon's answer, which has none) vouches for nothing.
        let last = buf.len() - b"unscanned 7\n".len();
        for cut in 0..last {
            assert!(
                read_answer(&mut io::Cursor::new(&buf[..cut])).is_err(),
                "cut at {cut}"
            );
        }
        for cut in last..buf.len() {
            let b = read_answer(&mut io::Cursor::new(&buf[..cut])).unwrap();
            assert_eq!(b.unscanned, None, "cut at {cut}");
        }
        let none = Answer {
            unscanned: None,
            ..b
        };
        let mut buf = Vec::new();
        write_answer(&mut buf, &none).unwrap();
        assert_eq!(
            read_answer(&mut io::Cursor::new(&buf)).unwrap().unscanned,
            None
        );
    }
}
