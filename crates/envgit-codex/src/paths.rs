//! Paths as Codex sends them (`file://` URIs or plain absolute paths), normalized and confined
//! to the project.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::rpc::RpcError;

fn percent_decode(s: &str) -> Result<Vec<u8>, RpcError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| RpcError::params(format!("invalid URI: bad escape in {s}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// `file:///a/b`, `file://localhost/a/b` or `/a/b` → `/a/b`.
pub fn parse(text: &str) -> Result<PathBuf, RpcError> {
    let raw: Vec<u8> = if let Some(rest) = text.strip_prefix("file://") {
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        if !rest.starts_with('/') {
            return Err(RpcError::params(format!(
                "invalid URI: {text} names a host; only local file:// URIs are served"
            )));
        }
        let rest = rest.split(['?', '#']).next().unwrap_or(rest);
        percent_decode(rest)?
    } else if text.starts_with('/') {
        text.as_bytes().to_vec()
    } else {
        return Err(RpcError::params(format!(
            "invalid URI: {text:?} is neither a file:// URI nor an absolute path"
        )));
    };
    if raw.contains(&0) {
        return Err(RpcError::params("invalid path: NUL byte"));
    }
    Ok(normalize(Path::new(std::ffi::OsStr::from_bytes(&raw))))
}

/// Resolve `.` and `..` lexically (never through the filesystem).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

pub fn to_uri(p: &Path) -> String {
    let mut s = String::from("file://");
    for &b in p.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// The path relative to `root` ('/'-separated bytes, empty for the root), or `None` outside.
pub fn relative(root: &Path, p: &Path) -> Option<Vec<u8>> {
    let rel = p.strip_prefix(root).ok()?;
    Some(rel.as_os_str().as_bytes().to_vec())
}

/// A project-relative path for messages (`.` for the root).
pub fn display(rel: &[u8]) -> String {
    if rel.is_empty() {
        ".".into()
    } else {
        // The path is the agent's, and Codex shows the message it goes into to the person.
        envgit_policy::escape_controls(&String::from_utf8_lossy(rel), &[]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_and_plain_paths() {
        assert_eq!(parse("file:///w/x").unwrap(), PathBuf::from("/w/x"));
        assert_eq!(
            parse("file://localhost/w/x").unwrap(),
            PathBuf::from("/w/x")
        );
        assert_eq!(parse("/w/./y/../x").unwrap(), PathBuf::from("/w/x"));
        assert_eq!(parse("file:///w/a%20b").unwrap(), PathBuf::from("/w/a b"));
        assert_eq!(parse("file:///w/../../etc").unwrap(), PathBuf::from("/etc"));
        assert!(parse("relative/x").is_err());
        assert!(parse("file://host/x").is_err());
        assert!(parse("file:///w/%00").is_err());
        assert_eq!(to_uri(Path::new("/w/a b")), "file:///w/a%20b");
        assert_eq!(
            relative(Path::new("/w"), Path::new("/w/a/b")).unwrap(),
            b"a/b"
        );
        assert_eq!(relative(Path::new("/w"), Path::new("/w")).unwrap(), b"");
        assert!(relative(Path::new("/w"), Path::new("/wx")).is_none());
    }
}
