//! The command list at the head of a git receive-pack request (`gitprotocol-pack(5)`):
//! pkt-lines `old-oid new-oid refname[\0capabilities]`, optionally after `shallow` lines or
//! inside a `push-cert` block, ended by a flush packet `0000`; the packfile follows.

/// One ref update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    pub old: String,
    pub new: String,
    pub refname: String,
}

/// What the head of the body says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    /// The commands read (a signed push may carry them only inside its certificate).
    pub commands: Vec<Command>,
    /// A `push-cert` block was seen: the request updates refs even if none was parsed.
    pub signed: bool,
    /// The flush packet ending the command list was read.
    pub ended: bool,
    /// Bytes after that flush packet, within the prefix.
    pub trailing: usize,
}

impl Head {
    pub fn has_commands(&self) -> bool {
        !self.commands.is_empty() || self.signed
    }
}

const MAX_PKT: usize = 65520;

/// Why a body is not read as a `git push`'s command list; a matcher on it cannot decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PktLineError {
    #[error("not a pkt-line (bad length)")]
    BadLength,
    #[error("not a receive-pack command list (special or oversized packet)")]
    SpecialOrOversized,
    #[error("a pkt-line that is not a receive-pack command")]
    NotACommand,
}

/// Reads pkt-lines from the start of `body` until the first flush or the end of the prefix.
/// `Err` for anything that is not a receive-pack command list (gzip, garbage, a v2 delimiter,
/// a line that is neither `shallow`, `push-cert…` nor `old new ref`).
pub(crate) fn read_head(body: &[u8]) -> Result<Head, PktLineError> {
    let mut head = Head {
        commands: Vec::new(),
        signed: false,
        ended: false,
        trailing: 0,
    };
    let mut in_cert = false;
    let mut pos = 0;
    while let Some(len_hex) = body.get(pos..pos + 4) {
        let len = std::str::from_utf8(len_hex)
            .ok()
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or(PktLineError::BadLength)?;
        if len == 0 {
            head.ended = true;
            head.trailing = body.len() - (pos + 4);
            return Ok(head);
        }
        if !(4..=MAX_PKT).contains(&len) {
            return Err(PktLineError::SpecialOrOversized);
        }
        let Some(payload) = body.get(pos + 4..pos + len) else {
            // Cut short inside a packet: the command is whole if its capabilities have begun.
            let partial = body.get(pos + 4..).unwrap_or_default();
            if !in_cert && let Some(nul) = partial.iter().position(|&b| b == 0) {
                head.commands
                    .push(command(&partial[..nul]).ok_or(PktLineError::NotACommand)?);
            }
            break;
        };
        pos += len;
        let line = payload.strip_suffix(b"\n").unwrap_or(payload);
        let line = line.split(|&b| b == 0).next().unwrap_or_default();
        if in_cert {
            if line == b"push-cert-end" {
                in_cert = false;
            } else if let Some(cmd) = command(line) {
                head.commands.push(cmd);
            }
            continue;
        }
        if line.starts_with(b"shallow ") {
            continue;
        }
        if line == b"push-cert" {
            head.signed = true;
            in_cert = true;
            continue;
        }
        head.commands
            .push(command(line).ok_or(PktLineError::NotACommand)?);
    }
    Ok(head)
}

fn command(line: &[u8]) -> Option<Command> {
    let text = std::str::from_utf8(line).ok()?;
    let mut parts = text.splitn(3, ' ');
    let (old, new, refname) = (parts.next()?, parts.next()?, parts.next()?);
    let oid = |s: &str| matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !oid(old) || !oid(new) || old.len() != new.len() || refname.is_empty() {
        return None;
    }
    Some(Command {
        old: old.to_ascii_lowercase(),
        new: new.to_ascii_lowercase(),
        refname: refname.to_owned(),
    })
}

/// `refs/heads/main 1a2b3c4..5d6e7f8; delete refs/tags/v1; create refs/heads/x at 9a8b7c6`,
/// at most four updates then `(+N more)`.
pub(crate) fn describe(commands: &[Command]) -> String {
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    let short = |s: &str| s.get(..7).unwrap_or(s).to_owned();
    let mut parts: Vec<String> = commands
        .iter()
        .take(4)
        .map(|c| {
            if zero(&c.new) {
                format!("delete {}", c.refname)
            } else if zero(&c.old) {
                format!("create {} at {}", c.refname, short(&c.new))
            } else {
                format!("{} {}..{}", c.refname, short(&c.old), short(&c.new))
            }
        })
        .collect();
    if commands.len() > 4 {
        parts.push(format!("(+{} more)", commands.len() - 4));
    }
    parts.join("; ")
}
