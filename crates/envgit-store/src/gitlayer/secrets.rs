//! Credentials in git configuration never enter the sandbox. A token in a remote's URL
//! (`https://user:TOKEN@host/…`) and an `http.<url>.extraheader` (as actions/checkout writes
//! `AUTHORIZATION: basic …`) are replaced by placeholders in the configuration the sandbox
//! sees; the gate puts the real value back on requests to that host only, in the header git
//! sends (`Authorization: Basic base64(user:TOKEN)`, or the extra header itself).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::config::{self, Entries};

/// One hidden credential, as the gate swaps it: in a request's header values to `host:port`,
/// `placeholder` becomes `secret`.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigSecret {
    pub host: String,
    pub port: u16,
    pub placeholder: String,
    pub secret: String,
    /// The header an `http.extraheader` sends it in (lowercase), when that is not one the gate
    /// knows carries credentials (`PRIVATE-TOKEN`): the gate puts the secret there too.
    pub header: Option<String>,
}

impl std::fmt::Debug for ConfigSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSecret")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("placeholder", &self.placeholder)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// A configuration with its credentials replaced.
#[derive(Debug, Default)]
pub struct HiddenConfig {
    /// The file as the sandbox sees it.
    pub text: Vec<u8>,
    pub secrets: Vec<ConfigSecret>,
    /// The placeholders as they stand in `text`: a key the step sets to a value holding one
    /// is never imported into the host's configuration.
    pub placeholders: Vec<String>,
    /// The keys whose values were hidden, for the step's notes.
    pub keys: Vec<String>,
}

/// Why a configuration's credentials cannot be hidden: then the file must not be shown at all.
#[derive(Debug, thiserror::Error)]
pub enum HideSecretsError {
    /// git could not read the file.
    #[error(transparent)]
    Config(#[from] config::GitConfigError),
    #[error(
        "the value of {key} holds a credential envgit cannot find as written in the file, so it cannot hide it"
    )]
    NotVerbatim { key: String },
}

/// `text` (a git config file) with every credential replaced by a placeholder from `token`;
/// `Err` when a credential cannot be found verbatim in the text (then the file must not be
/// shown at all) or git cannot read the file.
pub fn hide_secrets(
    text: &[u8],
    mut token: impl FnMut() -> String,
) -> Result<HiddenConfig, HideSecretsError> {
    if !may_hold_secret(text) {
        // The common case, and every step pays it: no git process to spawn.
        return Ok(HiddenConfig {
            text: text.to_vec(),
            ..HiddenConfig::default()
        });
    }
    let entries = config::read(text)?;
    let mut out = HiddenConfig {
        text: text.to_vec(),
        ..HiddenConfig::default()
    };
    let remote_hosts = remote_hosts(&entries);
    for (key, values) in &entries {
        for value in values.iter().flatten() {
            let found = if is_url_key(key) {
                url_secret(value, &mut token)
            } else if let Some(base) = insteadof_base(key) {
                url_secret(base, &mut token)
            } else if is_extraheader_key(key) {
                extraheader_secret(key, value, &remote_hosts, &mut token)
            } else {
                None
            };
            let Some((verbatim, shown, secrets)) = found else {
                continue;
            };
            let Some(replaced) = replace_all(&out.text, verbatim.as_bytes(), shown.as_bytes())
            else {
                return Err(HideSecretsError::NotVerbatim { key: key.clone() });
            };
            out.text = replaced;
            out.placeholders
                .extend(secrets.iter().map(|_| shown.clone()));
            out.secrets.extend(secrets);
            if !out.keys.contains(key) {
                out.keys.push(key.clone());
            }
        }
    }
    out.placeholders.sort();
    out.placeholders.dedup();
    Ok(out)
}

/// Whether `text` could hold a credential this module hides: userinfo in a URL (`@` after
/// `://`) or an extra header. A superset, checked on the raw bytes (case-insensitively).
fn may_hold_secret(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    let has = |needle: &[u8]| lower.windows(needle.len()).any(|w| w == needle);
    has(b"extraheader") || (has(b"://") && has(b"@"))
}

fn is_url_key(key: &str) -> bool {
    key.starts_with("remote.") && (key.ends_with(".url") || key.ends_with(".pushurl"))
}

/// `url.<base>.insteadOf`: the base URL (which may carry a token) is in the key itself.
fn insteadof_base(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("url.")?;
    rest.strip_suffix(".insteadof")
        .or_else(|| rest.strip_suffix(".pushinsteadof"))
}

fn is_extraheader_key(key: &str) -> bool {
    key.starts_with("http.") && key.ends_with(".extraheader")
}

/// The hosts (and ports) the remotes name: an unscoped `http.extraheader` goes to all of them.
fn remote_hosts(entries: &Entries) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for (key, values) in entries {
        if !is_url_key(key) {
            continue;
        }
        for v in values.iter().flatten() {
            if let Some(hp) = url::Url::parse(v).ok().and_then(|u| host_port(&u))
                && !out.contains(&hp)
            {
                out.push(hp);
            }
        }
    }
    out
}

fn host_port(u: &url::Url) -> Option<(String, u16)> {
    Some((
        u.host_str()?.to_ascii_lowercase(),
        u.port_or_known_default()?,
    ))
}

type Found = (String, String, Vec<ConfigSecret>);

/// `https://user:TOKEN@host/…`: the password as written is replaced; git sends
/// `Basic base64(user:password)` (both percent-decoded), so that is what the gate swaps.
fn url_secret(value: &str, token: &mut impl FnMut() -> String) -> Option<Found> {
    let u = url::Url::parse(value).ok()?;
    let password = u.password()?;
    if password.is_empty() || !matches!(u.scheme(), "http" | "https") {
        return None;
    }
    let (host, port) = host_port(&u)?;
    let user = decode(u.username());
    let placeholder = token();
    let basic = |pass: &str| STANDARD.encode(format!("{user}:{pass}"));
    Some((
        format!(":{password}@"),
        format!(":{placeholder}@"),
        vec![ConfigSecret {
            host,
            port,
            placeholder: basic(&placeholder),
            secret: basic(&decode(password)),
            header: None,
        }],
    ))
}

/// `AUTHORIZATION: basic dXNlcjp0b2tlbg==`: the credential is the header value's last word.
fn extraheader_secret(
    key: &str,
    value: &str,
    remote_hosts: &[(String, u16)],
    token: &mut impl FnMut() -> String,
) -> Option<Found> {
    let (header, header_value) = value.split_once(':')?;
    let header = header.trim().to_ascii_lowercase();
    let secret = header_value.split_whitespace().last()?;
    let scope = key
        .strip_prefix("http.")
        .and_then(|k| k.strip_suffix(".extraheader"))
        .filter(|s| !s.is_empty());
    let hosts = match scope {
        Some(url) => vec![host_port(&url::Url::parse(url).ok()?)?],
        None => remote_hosts.to_vec(),
    };
    let placeholder = token();
    let secrets = hosts
        .into_iter()
        .map(|(host, port)| ConfigSecret {
            host,
            port,
            placeholder: placeholder.clone(),
            secret: secret.to_string(),
            header: Some(header.clone()),
        })
        .collect();
    Some((secret.to_string(), placeholder, secrets))
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// `haystack` with every `from` replaced by `to`; `None` when `from` does not occur.
fn replace_all(haystack: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    if from.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    let mut found = false;
    while let Some(i) = rest.windows(from.len()).position(|w| w == from) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(to);
        rest = &rest[i + from.len()..];
        found = true;
    }
    out.extend_from_slice(rest);
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("PLACEHOLDER{n}")
        }
    }

    #[test]
    fn tokens_in_urls_and_extra_headers_are_replaced() {
        let text = b"[remote \"origin\"]\n\turl = https://bot:s3cr%40t@git.example.com/o/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[http \"https://git.example.com/\"]\n\textraheader = AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hz\n";
        let h = hide_secrets(text, tokens()).unwrap();
        let shown = String::from_utf8(h.text.clone()).unwrap();
        assert!(!shown.contains("s3cr"), "{shown}");
        assert!(!shown.contains("eC1hY2Nlc3MtdG9rZW46Z2hz"), "{shown}");
        assert!(shown.contains("https://bot:PLACEHOLDER"), "{shown}");
        assert_eq!(h.secrets.len(), 2);
        let basic = h
            .secrets
            .iter()
            .find(|s| s.secret != "eC1hY2Nlc3MtdG9rZW46Z2hz");
        let basic = basic.unwrap();
        assert_eq!(basic.host, "git.example.com");
        assert_eq!(basic.port, 443);
        // Percent-decoded, as git sends it.
        assert_eq!(basic.secret, STANDARD.encode("bot:s3cr@t"));
        assert!(!format!("{h:?}").contains("s3cr"));
    }

    #[test]
    fn an_unscoped_extraheader_goes_to_every_remote_host_and_plain_configs_pass() {
        let text = b"[remote \"a\"]\n\turl = https://one.example/x\n[remote \"b\"]\n\turl = http://two.example:8080/y\n[http]\n\textraheader = Authorization: Bearer tok123\n";
        let h = hide_secrets(text, tokens()).unwrap();
        let hosts: Vec<_> = h
            .secrets
            .iter()
            .map(|s| (s.host.as_str(), s.port))
            .collect();
        assert_eq!(hosts, [("one.example", 443), ("two.example", 8080)]);
        assert!(!String::from_utf8_lossy(&h.text).contains("tok123"));
        // The header it is sent in, for the gate (one of its own, GitLab's, as much).
        assert_eq!(h.secrets[0].header.as_deref(), Some("authorization"));
        let gitlab = b"[http \"https://gl.example/\"]\n\textraheader = PRIVATE-TOKEN: glpat-1\n";
        let h = hide_secrets(gitlab, tokens()).unwrap();
        assert_eq!(h.secrets[0].header.as_deref(), Some("private-token"));
        let rewrite =
            b"[url \"https://me:tok456@forge.example/\"]\n\tinsteadOf = https://forge.example/\n";
        let h = hide_secrets(rewrite, tokens()).unwrap();
        assert!(!String::from_utf8_lossy(&h.text).contains("tok456"));
        assert_eq!(h.secrets[0].host, "forge.example");
        let plain = b"[user]\n\tname = x\n[remote \"o\"]\n\turl = https://host.example/r.git\n";
        let h = hide_secrets(plain, tokens()).unwrap();
        assert_eq!(h.text, plain);
        assert!(h.secrets.is_empty());
    }

    #[test]
    fn a_credential_split_across_a_continued_line_is_refused_naming_its_key() {
        // git joins the two lines, so the password it reads is nowhere in the file as written.
        let text = b"[remote \"origin\"]\n\turl = https://bot:tok\\\nen@git.example.com/r.git\n";
        let e = hide_secrets(text, tokens()).unwrap_err();
        assert!(
            matches!(&e, HideSecretsError::NotVerbatim { key } if key == "remote.origin.url"),
            "{e:?}"
        );
        assert!(e.to_string().contains("remote.origin.url"), "{e}");
    }
}
