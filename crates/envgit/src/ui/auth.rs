//! Who may talk to `envgit ui`: a browser holding the session cookie it got by exchanging the
//! one-time code of the printed link, asking for this server by the name it was given
//! (`Host` is `127.0.0.1:PORT` or `localhost:PORT`, which stops DNS rebinding), and, for
//! anything that changes state, sending the CSRF header from a page of this very origin.

use std::sync::Mutex;

use hyper::header::{COOKIE, HOST, HeaderMap, ORIGIN};

/// The cookie holding the session secret.
pub(crate) const COOKIE_NAME: &str = "envgit_session";
/// Every POST must carry this header (a cross-site form cannot set it).
pub(crate) const CSRF_HEADER: &str = "x-envgit-csrf";

pub(crate) struct Auth {
    port: u16,
    /// The link's code until it is exchanged; `None` afterwards (a code works once).
    code: Mutex<Option<String>>,
    session: String,
}

/// Why a request is refused, as status and a line for the person.
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) why: &'static str,
}

impl Auth {
    pub(crate) fn new(port: u16, code: String, session: String) -> Auth {
        Auth {
            port,
            code: Mutex::new(Some(code)),
            session,
        }
    }

    /// The `Host` header names this server (127.0.0.1 or localhost, its port).
    pub(crate) fn check_host(&self, headers: &HeaderMap) -> Result<String, Refusal> {
        let host = headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let port = self.port;
        if host == format!("127.0.0.1:{port}") || host == format!("localhost:{port}") {
            Ok(host.to_owned())
        } else {
            Err(Refusal {
                status: 421,
                why: "this server answers only to 127.0.0.1:PORT or localhost:PORT",
            })
        }
    }

    /// Exchanges the link's code for the session secret, once.
    pub(crate) fn redeem(&self, code: &str) -> Option<&str> {
        let mut slot = self.code.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_deref() {
            Some(c) if same(c, code) => {
                *slot = None;
                Some(&self.session)
            }
            _ => None,
        }
    }

    /// The request carries the session cookie.
    pub(crate) fn check_session(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let has = headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .any(|(name, value)| name == COOKIE_NAME && same(value, &self.session));
        if has {
            Ok(())
        } else {
            Err(Refusal {
                status: 401,
                why: "no session: open the link `envgit ui` printed (its code works once)",
            })
        }
    }

    /// A state-changing request: the CSRF header, and an `Origin` that is this server as the
    /// browser addressed it (`host` is the checked `Host`).
    pub(crate) fn check_post(&self, headers: &HeaderMap, host: &str) -> Result<(), Refusal> {
        if headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()) != Some("1") {
            return Err(Refusal {
                status: 403,
                why: "a state-changing request needs the X-Envgit-CSRF: 1 header",
            });
        }
        let origin = headers.get(ORIGIN).and_then(|v| v.to_str().ok());
        if origin != Some(format!("http://{host}").as_str()) {
            return Err(Refusal {
                status: 403,
                why: "a state-changing request must come from this server's own page (Origin)",
            });
        }
        Ok(())
    }
}

/// Equal in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}
