//! `--resolve HOST:PORT=ADDR:PORT` (a TLS upstream at another address, e.g. a private
//! registry or a test server on loopback) and `HOST:PORT=http://ADDR:PORT` (a plain-HTTP
//! upstream behind the terminated TLS: the original `Host` kept, `X-Forwarded-Proto: https`
//! added). The person running envgit configures these, so their addresses are not vetted
//! against `network.private`; the policy still decides whether HOST:PORT may be reached.

use std::net::SocketAddr;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolve {
    pub host: String,
    pub port: u16,
    pub to: SocketAddr,
    /// The upstream speaks plain HTTP (`http://`), not TLS.
    pub plain: bool,
}

/// What every refusal of an entry ends with.
const SHAPE: &str = "expected HOST:PORT=ADDR:PORT or HOST:PORT=http://ADDR:PORT \
                     (for example registry.example:443=127.0.0.1:8443)";

/// A `--resolve` entry that is not `HOST:PORT=ADDR:PORT` or `HOST:PORT=http://ADDR:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("--resolve {entry:?}: no '='; {SHAPE}")]
    NoEquals { entry: String },
    #[error("--resolve {entry:?}: {from:?} is not HOST:PORT; {SHAPE}")]
    NotHostPort { entry: String, from: String },
    #[error("--resolve {entry:?}: {addr:?} is not ADDR:PORT; {SHAPE}")]
    NotAddress { entry: String, addr: String },
}

impl FromStr for Resolve {
    type Err = ResolveError;

    fn from_str(s: &str) -> Result<Resolve, ResolveError> {
        let (from, to) = s.split_once('=').ok_or_else(|| ResolveError::NoEquals {
            entry: s.to_owned(),
        })?;
        let (host, port) = from
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .filter(|(h, p)| !h.is_empty() && *p != 0)
            .ok_or_else(|| ResolveError::NotHostPort {
                entry: s.to_owned(),
                from: from.to_owned(),
            })?;
        let (plain, addr) = match to.strip_prefix("http://") {
            Some(rest) => (true, rest.trim_end_matches('/')),
            None => (false, to),
        };
        let to = addr
            .parse::<SocketAddr>()
            .map_err(|_| ResolveError::NotAddress {
                entry: s.to_owned(),
                addr: addr.to_owned(),
            })?;
        Ok(Resolve {
            host: host.trim_end_matches('.').to_ascii_lowercase(),
            port,
            to,
            plain,
        })
    }
}

/// A list as `ENVGIT_RESOLVE` holds it: entries separated by commas or whitespace.
pub fn parse_list(s: &str) -> Result<Vec<Resolve>, ResolveError> {
    s.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|e| !e.is_empty())
        .map(str::parse)
        .collect()
}

/// The entry for `host:port`, if one was given.
pub(crate) fn find<'a>(list: &'a [Resolve], host: &str, port: u16) -> Option<&'a Resolve> {
    list.iter()
        .find(|r| r.port == port && r.host.eq_ignore_ascii_case(host.trim_end_matches('.')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries() {
        let r: Resolve = "Git.Example.com:443=127.0.0.1:8443".parse().unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.to.to_string(), r.plain),
            ("git.example.com", 443, "127.0.0.1:8443".to_string(), false)
        );
        let r: Resolve = "a.test:443=http://127.0.0.1:9000/".parse().unwrap();
        assert!(r.plain);
        assert_eq!(r.to.port(), 9000);
        let list = parse_list("a.test:443=127.0.0.1:1, b.test:80=[::1]:2").unwrap();
        assert_eq!(list.len(), 2);
        assert!(find(&list, "A.TEST.", 443).is_some());
        assert!(find(&list, "a.test", 80).is_none());
    }

    #[test]
    fn malformed_entries_say_what_shape_is_expected() {
        for bad in [
            "a.test",
            "a.test=1.2.3.4:5",
            ":443=1.2.3.4:5",
            "a:0=1.2.3.4:5",
            "a:1=x",
        ] {
            let e = bad.parse::<Resolve>().unwrap_err().to_string();
            assert!(e.contains("expected HOST:PORT=ADDR:PORT"), "{e}");
        }
    }
}
