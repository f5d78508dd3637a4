//! Credentials the sandbox never holds: it is given a placeholder, and the gate
//! puts the real secret in its place on requests to the one host it belongs to, in the
//! headers that carry credentials ([`CARRIERS`]) and nowhere else: a placeholder in any other
//! header (`X-Debug`, `Cookie`) goes out as it is, so a host that echoes request headers
//! cannot hand the secret back. Where the host echoes a credential header in its answer's
//! headers, the gate puts the placeholder back ([`conceal`]); TRACE and TRACK, which echo the
//! whole request, are refused to a credential's host ([`echoes_the_request`]). A request to
//! that host carrying a credential of its own (not the placeholder) is refused, so a key
//! brought from inside cannot leave through the host the agent is trusted to reach.

use std::fmt;

use crate::canonical::names_field;

/// Requests to `host:port` get `secret` in place of `placeholder` in the values of their
/// credential headers ([`CARRIERS`]).
#[derive(Clone)]
pub struct Credential {
    /// Compared case-insensitively.
    pub host: String,
    pub port: u16,
    /// What the sandbox holds instead of the secret.
    pub placeholder: String,
    /// Never printed, and sent to `host:port` only.
    pub secret: String,
    /// A header of its own it travels in besides [`CARRIERS`] (an `http.extraheader` of
    /// GitLab's `PRIVATE-TOKEN`): the secret goes there too, and nowhere else.
    pub header: Option<String>,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("placeholder", &self.placeholder)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// Headers that carry a credential: the only ones the secret is put in, and present without
/// the placeholder, they are refused. The kinds of credential the gate is given travel in
/// these: git's (`Authorization: Basic`, an `extraheader` of `Authorization`), API keys
/// (`x-api-key`, `api-key`), OAuth and bearer tokens (`Authorization`).
const CARRIERS: &[&str] = &[
    "authorization",
    "x-api-key",
    "proxy-authorization",
    "api-key",
];

/// Why a request was refused: a credential header without the placeholder.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) header: String,
}

impl Refused {
    pub(crate) fn reason(&self, host: &str) -> String {
        format!(
            "{} without the placeholder: the sandbox's requests to {host} must use the \
             placeholder envgit gave it; a credential brought from inside is not let out",
            self.header
        )
    }
}

/// A header value that can be replaced: HTTP/1's raw bytes or hyper's `HeaderValue`.
pub(crate) trait Value {
    fn bytes(&self) -> &[u8];
    /// `false` when `new` cannot be a header value.
    fn set(&mut self, new: Vec<u8>) -> bool;
}

impl Value for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }

    fn set(&mut self, new: Vec<u8>) -> bool {
        *self = new;
        true
    }
}

impl Value for hyper::header::HeaderValue {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }

    fn set(&mut self, new: Vec<u8>) -> bool {
        let Ok(mut value) = hyper::header::HeaderValue::from_bytes(&new) else {
            return false;
        };
        // Kept out of HPACK's tables when the upstream speaks HTTP/2.
        value.set_sensitive(true);
        *self = value;
        true
    }
}

/// The credentials whose secret goes to `host:port`.
fn for_target<'c>(
    credentials: &'c [Credential],
    host: &'c str,
    port: u16,
) -> impl Iterator<Item = &'c Credential> + Clone {
    credentials
        .iter()
        .filter(move |c| c.port == port && same_host(&c.host, host))
}

/// Does `host:port` get a credential's secret?
pub(crate) fn held_for(credentials: &[Credential], host: &str, port: u16) -> bool {
    for_target(credentials, host, port).next().is_some()
}

/// Methods whose answer is the request itself (TRACE, and IIS's TRACK): refused to a
/// credential's host, whose request carries the secret. `methods` are the request's own and
/// every one an override header names.
pub(crate) fn echoes_the_request<'m>(
    methods: impl IntoIterator<Item = &'m str>,
) -> Option<&'m str> {
    methods.into_iter().find(|m| {
        let m = m.trim();
        m.eq_ignore_ascii_case("TRACE") || m.eq_ignore_ascii_case("TRACK")
    })
}

/// Why a TRACE (or TRACK) to a credential's host is refused.
pub(crate) fn echo_reason(method: &str, host: &str) -> String {
    format!(
        "{} to {host} is refused: the server answers with the request itself, and requests to \
         {host} carry a credential envgit keeps outside the sandbox",
        method.trim().to_ascii_uppercase()
    )
}

/// Puts the secrets of the credentials for `host:port` in place of their placeholders in
/// the request's credential headers ([`CARRIERS`]), or refuses a request there whose
/// credential header lacks the placeholder. Any other header keeps what it holds, the
/// placeholder included. Requests to other hosts, and requests without a credential header,
/// pass unchanged. The path, query and body are never touched.
pub(crate) fn apply<'h, V: Value + 'h>(
    credentials: &[Credential],
    host: &str,
    port: u16,
    headers: impl IntoIterator<Item = (&'h str, &'h mut V)>,
) -> Result<(), Refused> {
    let mine = for_target(credentials, host, port);
    if mine.clone().next().is_none() {
        return Ok(());
    }
    for (name, value) in headers {
        // A name spelled with underscores is the same header to some servers.
        let own = |c: &Credential| c.header.as_deref().is_some_and(|h| names_field(name, h));
        if !CARRIERS.iter().any(|c| names_field(name, c)) && !mine.clone().any(own) {
            continue;
        }
        let mut carried = false;
        for c in mine.clone() {
            if let Some(new) =
                replace_all(value.bytes(), c.placeholder.as_bytes(), c.secret.as_bytes())
            {
                // A value that cannot be sent is refused rather than sent with the placeholder.
                if !value.set(new) {
                    return Err(Refused {
                        header: name.to_ascii_lowercase(),
                    });
                }
                carried = true;
            }
        }
        if !carried {
            return Err(Refused {
                header: name.to_ascii_lowercase(),
            });
        }
    }
    Ok(())
}

/// Puts the placeholders back in place of the secrets in the header values of an answer from
/// `host:port`: a host that echoes the request's credential header in its answer's headers
/// does not hand the secret to the sandbox. (A body that quotes it is beyond any proxy.)
pub(crate) fn conceal<'h, V: Value + 'h>(
    credentials: &[Credential],
    host: &str,
    port: u16,
    headers: impl IntoIterator<Item = &'h mut V>,
) {
    let mine = for_target(credentials, host, port);
    if mine.clone().next().is_none() {
        return;
    }
    for value in headers {
        for c in mine.clone() {
            if let Some(new) =
                replace_all(value.bytes(), c.secret.as_bytes(), c.placeholder.as_bytes())
                && !value.set(new)
            {
                // Cannot happen (the placeholder is printable), but never let the secret by.
                value.set(Vec::new());
            }
        }
    }
}

/// Case-insensitive, and blind to a trailing dot: `api.example.com.` is the same server, and
/// must not be a way round the refusal.
fn same_host(a: &str, b: &str) -> bool {
    a.trim_end_matches('.')
        .eq_ignore_ascii_case(b.trim_end_matches('.'))
}

/// `haystack` with every `from` replaced by `to`; `None` when `from` does not occur.
fn replace_all(haystack: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    if from.is_empty() || haystack.len() < from.len() {
        return None;
    }
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    let mut copied = 0;
    while i + from.len() <= haystack.len() {
        if &haystack[i..i + from.len()] == from {
            let buf = out.get_or_insert_with(|| Vec::with_capacity(haystack.len() + to.len()));
            buf.extend_from_slice(&haystack[copied..i]);
            buf.extend_from_slice(to);
            i += from.len();
            copied = i;
        } else {
            i += 1;
        }
    }
    let mut out = out?;
    out.extend_from_slice(&haystack[copied..]);
    Some(out)
}

/// Refuses credentials the gate could not use safely: an empty field would match everything
/// or nothing, and a control character in a secret could end a header line upstream.
pub(crate) fn validate(credentials: &[Credential]) -> Result<(), CredentialError> {
    let printable = |s: &str| s.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b));
    for c in credentials {
        if c.host.is_empty() || c.port == 0 {
            return Err(CredentialError::NoHostOrPort(c.clone()));
        }
        if c.placeholder.is_empty() || c.secret.is_empty() {
            return Err(CredentialError::Empty(c.clone()));
        }
        if !printable(&c.placeholder) || !printable(&c.secret) {
            return Err(CredentialError::NotPrintable(c.clone()));
        }
    }
    Ok(())
}

/// A credential [`validate`] refuses; shown with the secret hidden (its `Debug`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CredentialError {
    #[error("a credential needs a host and a port: {0:?}")]
    NoHostOrPort(Credential),
    #[error("a credential needs a placeholder and a secret: {0:?}")]
    Empty(Credential),
    #[error("a credential's placeholder and secret must be printable ASCII: {0:?}")]
    NotPrintable(Credential),
}

#[cfg(test)]
mod tests {
    use super::*;

    const PH: &str = "envgit-placeholder-1";
    const SECRET: &str = "sk-real-secret";

    fn creds() -> Vec<Credential> {
        vec![Credential {
            host: "API.Example.com".into(),
            port: 443,
            placeholder: PH.into(),
            secret: SECRET.into(),
            header: None,
        }]
    }

    fn headers(list: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        list.iter()
            .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    fn run(host: &str, port: u16, h: &mut [(String, Vec<u8>)]) -> Result<(), Refused> {
        apply_to(&creds(), host, port, h)
    }

    fn apply_to(
        list: &[Credential],
        host: &str,
        port: u16,
        h: &mut [(String, Vec<u8>)],
    ) -> Result<(), Refused> {
        apply(list, host, port, h.iter_mut().map(|(n, v)| (n.as_str(), v)))
    }

    fn text(h: &[(String, Vec<u8>)]) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.clone(), String::from_utf8(v.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn the_secret_goes_only_into_the_headers_that_carry_credentials() {
        let mut h = headers(&[
            ("Host", "api.example.com"),
            ("Authorization", &format!("Bearer {PH}")),
            ("X-Other", &format!("{PH},{PH}")),
            ("Cookie", &format!("s={PH}")),
            ("Authorization-Debug", PH),
            ("Accept", "*/*"),
        ]);
        run("api.example.com", 443, &mut h).unwrap();
        assert_eq!(
            text(&h),
            [
                ("Host".into(), "api.example.com".into()),
                ("Authorization".into(), format!("Bearer {SECRET}")),
                // A header a host may echo back keeps the placeholder.
                ("X-Other".into(), format!("{PH},{PH}")),
                ("Cookie".into(), format!("s={PH}")),
                ("Authorization-Debug".into(), PH.into()),
                ("Accept".into(), "*/*".into()),
            ]
        );
        // Every carrier, however it is spelled.
        for name in [
            "authorization",
            "PROXY-AUTHORIZATION",
            "X-Api-Key",
            "api-key",
        ] {
            let mut h = headers(&[(name, &format!("Basic {PH}"))]);
            run("api.example.com", 443, &mut h).unwrap();
            assert_eq!(h[0].1, format!("Basic {SECRET}").as_bytes(), "{name}");
        }
    }

    /// A credential sent in a header of its own (git's `http.extraheader` of GitLab's
    /// `PRIVATE-TOKEN`) gets the secret there, and only there.
    #[test]
    fn a_credential_of_its_own_header_gets_the_secret_there() {
        let own = vec![Credential {
            header: Some("private-token".into()),
            ..creds().remove(0)
        }];
        let mut h = headers(&[
            ("Private-Token", PH),
            ("X-Echo", PH),
            ("Authorization", &format!("Bearer {PH}")),
        ]);
        apply_to(&own, "api.example.com", 443, &mut h).unwrap();
        assert_eq!(
            text(&h),
            [
                ("Private-Token".into(), SECRET.into()),
                ("X-Echo".into(), PH.into()),
                ("Authorization".into(), format!("Bearer {SECRET}")),
            ]
        );
        // Without the placeholder there, a key brought from inside: refused.
        let mut h = headers(&[("PRIVATE-TOKEN", "glpat-brought-in")]);
        assert!(apply_to(&own, "api.example.com", 443, &mut h).is_err());
    }

    #[test]
    fn an_answer_echoing_the_secret_gets_the_placeholder_back() {
        let mut h = headers(&[
            ("X-Echo-Authorization", &format!("Basic {SECRET}")),
            ("X-Twice", &format!("{SECRET}{SECRET}")),
            ("Content-Type", "text/plain"),
        ]);
        conceal(
            &creds(),
            "api.example.com",
            443,
            h.iter_mut().map(|(_, v)| v),
        );
        assert_eq!(
            text(&h),
            [
                ("X-Echo-Authorization".into(), format!("Basic {PH}")),
                ("X-Twice".into(), format!("{PH}{PH}")),
                ("Content-Type".into(), "text/plain".into()),
            ]
        );
        // Answers from other hosts are not touched (the secret never went there).
        let mut h = headers(&[("X-Echo", SECRET)]);
        conceal(
            &creds(),
            "elsewhere.example",
            443,
            h.iter_mut().map(|(_, v)| v),
        );
        assert_eq!(h[0].1, SECRET.as_bytes());
    }

    #[test]
    fn methods_that_echo_the_request_are_named() {
        assert_eq!(echoes_the_request(["TRACE"]), Some("TRACE"));
        assert_eq!(echoes_the_request(["POST", " track"]), Some(" track"));
        assert_eq!(echoes_the_request(["GET", "POST"]), None);
        assert!(echo_reason(" track", "h").starts_with("TRACK to h is refused"));
        assert!(held_for(&creds(), "api.example.com.", 443));
        assert!(!held_for(&creds(), "api.example.com", 80));
    }

    #[test]
    fn every_credential_header_without_the_placeholder_is_refused() {
        for name in [
            "Authorization",
            "x-api-key",
            "Proxy-Authorization",
            "API-KEY",
        ] {
            let mut h = headers(&[(name, "sk-brought-from-inside")]);
            let err = run("api.example.com", 443, &mut h).unwrap_err();
            assert_eq!(err.header, name.to_ascii_lowercase());
            assert!(err.reason("api.example.com").contains("placeholder"));
        }
        // One good header does not cover another that lacks it.
        let mut h = headers(&[("X-Api-Key", PH), ("Authorization", "Bearer sk-own")]);
        assert!(run("api.example.com", 443, &mut h).is_err());
    }

    #[test]
    fn a_request_without_credential_headers_passes_unchanged() {
        let mut h = headers(&[("Host", "api.example.com"), ("User-Agent", "probe")]);
        let before = h.clone();
        run("api.example.com", 443, &mut h).unwrap();
        assert_eq!(h, before);
    }

    #[test]
    fn host_is_case_insensitive_and_port_exact() {
        let mut h = headers(&[("x-api-key", PH)]);
        run("API.EXAMPLE.COM", 443, &mut h).unwrap();
        assert_eq!(h[0].1, SECRET.as_bytes());
        // The fully qualified name is the same host, refused the same way.
        let mut h = headers(&[("x-api-key", "own")]);
        assert!(run("api.example.com.", 443, &mut h).is_err());

        // Another port of the same host is another destination: nothing added, nothing refused.
        let mut h = headers(&[("x-api-key", PH), ("Authorization", "Bearer own")]);
        let before = h.clone();
        run("api.example.com", 8443, &mut h).unwrap();
        assert_eq!(h, before);
    }

    #[test]
    fn other_hosts_keep_the_placeholder_and_never_get_the_secret() {
        let mut h = headers(&[("Authorization", &format!("Bearer {PH}"))]);
        let before = h.clone();
        run("elsewhere.example", 443, &mut h).unwrap();
        assert_eq!(h, before);
        assert!(apply::<Vec<u8>>(&[], "api.example.com", 443, []).is_ok());
    }

    #[test]
    fn several_credentials_for_one_host() {
        let mut list = creds();
        list.push(Credential {
            host: "api.example.com".into(),
            port: 443,
            placeholder: "envgit-placeholder-2".into(),
            secret: "oauth-token".into(),
            header: None,
        });
        let mut h = headers(&[
            ("x-api-key", PH),
            ("Authorization", "Bearer envgit-placeholder-2"),
        ]);
        apply_to(&list, "api.example.com", 443, &mut h).unwrap();
        assert_eq!(
            text(&h),
            [
                ("x-api-key".into(), SECRET.into()),
                ("Authorization".into(), "Bearer oauth-token".into()),
            ]
        );
    }

    #[test]
    fn hyper_header_maps_are_rewritten_and_marked_sensitive() {
        let mut map = hyper::HeaderMap::new();
        map.insert("authorization", format!("Bearer {PH}").parse().unwrap());
        map.insert("accept", "*/*".parse().unwrap());
        apply(
            &creds(),
            "api.example.com",
            443,
            map.iter_mut().map(|(n, v)| (n.as_str(), v)),
        )
        .unwrap();
        let auth = &map["authorization"];
        assert_eq!(auth.as_bytes(), format!("Bearer {SECRET}").as_bytes());
        assert!(auth.is_sensitive());

        let mut map = hyper::HeaderMap::new();
        map.insert("x-api-key", "own".parse().unwrap());
        assert!(
            apply(
                &creds(),
                "api.example.com",
                443,
                map.iter_mut().map(|(n, v)| (n.as_str(), v)),
            )
            .is_err()
        );
    }

    #[test]
    fn replacing() {
        assert_eq!(
            replace_all(b"aXbXc", b"X", b"yy"),
            Some(b"ayybyyc".to_vec())
        );
        assert_eq!(replace_all(b"XX", b"XX", b"z"), Some(b"z".to_vec()));
        assert_eq!(replace_all(b"abc", b"X", b"y"), None);
        assert_eq!(replace_all(b"a", b"abc", b"y"), None);
        assert_eq!(replace_all(b"a", b"", b"y"), None);
    }

    #[test]
    fn debug_hides_the_secret_and_bad_credentials_are_refused() {
        let shown = format!("{:?}", creds());
        assert!(shown.contains(PH) && !shown.contains(SECRET), "{shown}");
        assert!(validate(&creds()).is_ok());
        let mut bad = creds();
        bad[0].secret = "a\r\nX-Injected: 1".into();
        let err = validate(&bad).unwrap_err().to_string();
        assert!(!err.contains("Injected"), "{err}");
        let mut bad = creds();
        bad[0].placeholder.clear();
        assert!(validate(&bad).is_err());
    }
}
