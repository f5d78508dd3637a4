//! Claude Code's model credential, kept out of `envgit claude`'s sandbox. The
//! sandbox holds placeholders: `ANTHROPIC_API_KEY` / `ANTHROPIC_AUTH_TOKEN` /
//! `CLAUDE_CODE_OAUTH_TOKEN` set to one, or, for
//! a Claude.ai login, a copy of `.credentials.json` whose tokens are placeholders, bound
//! read-only over the real file (which the sandbox otherwise cannot read). The gate puts the
//! real value in place of the placeholder on requests to the model host only.
//!
//! A login whose access token has expired is refused before the run: refreshing it inside
//! would need the refresh token, which never enters; `claude` run once outside refreshes it.

use std::path::{Path, PathBuf};

use envgit_gate::Credential;
use envgit_store::now_ms;
use serde_json::Value;

use crate::failure::{CmdResult, Failure};
use crate::nofollow::read_nofollow;

/// Claude Code's credential variables: a placeholder inside, the real value put on by the gate.
/// (`CLAUDE_CODE_OAUTH_TOKEN` is the long-lived token of `claude setup-token`.)
pub(crate) const CREDENTIAL_VARS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
];
/// Secrets the model requests never carry, so nothing inside gets even a placeholder.
pub(crate) const WITHHELD_VARS: &[&str] = &["CLAUDE_CODE_OAUTH_REFRESH_TOKEN"];
/// The login file in Claude Code's configuration directory.
const LOGIN_FILE: &str = ".credentials.json";
/// A login this close to expiring is treated as expired: the session would outlive it.
const EXPIRY_MARGIN_MS: u64 = 5 * 60 * 1000;

/// What the run needs to keep the credential outside.
#[derive(Default)]
pub(crate) struct Login {
    /// Variables set inside (placeholders).
    pub env: Vec<(String, String)>,
    /// `(file with placeholders, path inside)`, bound read-only.
    pub files: Vec<(PathBuf, PathBuf)>,
    pub gate: Vec<Credential>,
    /// `host:port` the credential goes to, for the user.
    pub host: Option<String>,
}

fn placeholder() -> CmdResult<String> {
    Ok(format!(
        "envgit-placeholder-{}",
        crate::runtime::random_token()?
    ))
}

/// The credentials of this environment and of `config_dir` (Claude's configuration
/// directory); placeholder files are written in `scratch` (a private directory).
pub(crate) fn prepare(config_dir: Option<&Path>, scratch: &Path) -> CmdResult<Login> {
    let (host, port) = model_host(std::env::var("ANTHROPIC_BASE_URL").ok().as_deref())?;
    let mut login = Login::default();
    for var in CREDENTIAL_VARS {
        // A key read from a file often ends in a newline no header may carry.
        let Some(secret) = std::env::var(var)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
        else {
            continue;
        };
        let placeholder = placeholder()?;
        login.env.push((var.to_string(), placeholder.clone()));
        login.gate.push(Credential {
            host: host.clone(),
            port,
            placeholder,
            secret,
            header: None,
        });
    }
    // Claude prefers a key from the environment; only without one does the login matter.
    if login.gate.is_empty()
        && let Some(dir) = config_dir
    {
        let real = dir.join(LOGIN_FILE);
        if let Some((copy, credential)) = oauth_login(&real, &host, port)? {
            let file = scratch.join("claude-credentials.json");
            write_private(&file, &copy)?;
            login.files.push((file, real));
            login.gate.push(credential);
        }
    }
    if !login.gate.is_empty() {
        login.host = Some(format!("{host}:{port}"));
    }
    Ok(login)
}

/// The login in `path` (never through a symlink) as a copy with placeholder tokens and the
/// gate credential for its access token; `None` when there is no usable login there.
fn oauth_login(path: &Path, host: &str, port: u16) -> CmdResult<Option<(Vec<u8>, Credential)>> {
    let Ok(bytes) = read_nofollow(path) else {
        return Ok(None);
    };
    let Ok(mut doc) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(Failure::usage(format!(
            "{} is not JSON: log in again with `claude` outside envgit, or set ANTHROPIC_API_KEY",
            path.display()
        )));
    };
    let Some(oauth) = doc.get_mut("claudeAiOauth").and_then(Value::as_object_mut) else {
        return Ok(None);
    };
    let Some(secret) = oauth
        .get("accessToken")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return Ok(None);
    };
    if let Some(expires) = oauth.get("expiresAt").and_then(Value::as_u64)
        && expires < now_ms() + EXPIRY_MARGIN_MS
    {
        return Err(Failure::usage(format!(
            "the Claude login in {} has expired (or expires within 5 minutes): run `claude` \
             once outside envgit to refresh it, or set ANTHROPIC_API_KEY",
            path.display()
        )));
    }
    let access = placeholder()?;
    oauth.insert("accessToken".into(), Value::String(access.clone()));
    if oauth.contains_key("refreshToken") {
        oauth.insert("refreshToken".into(), Value::String(placeholder()?));
    }
    let copy = serde_json::to_vec(&doc).map_err(|e| Failure::failed(e.to_string()))?;
    Ok(Some((
        copy,
        Credential {
            host: host.to_owned(),
            port,
            placeholder: access,
            secret,
            header: None,
        },
    )))
}

fn write_private(path: &Path, bytes: &[u8]) -> CmdResult<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| Failure::failed(format!("{}: {e}", path.display())))
}

/// `(host, port)` the model requests go to: `ANTHROPIC_BASE_URL`'s, else Anthropic's API.
fn model_host(base: Option<&str>) -> CmdResult<(String, u16)> {
    let Some(base) = base.filter(|b| !b.is_empty()) else {
        return Ok(("api.anthropic.com".into(), 443));
    };
    let bad = || {
        Failure::usage(format!(
            "ANTHROPIC_BASE_URL={base:?} is not an http:// or https:// URL with a host"
        ))
    };
    let (rest, default_port) = match base.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (rest, 443),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (rest, 80),
        _ => return Err(bad()),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]` or `[::1]:8080`.
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or_else(bad)?;
            match after.strip_prefix(':') {
                Some(p) => (host, p.parse::<u16>().map_err(|_| bad())?),
                None if after.is_empty() => (host, default_port),
                None => return Err(bad()),
            }
        }
        None => match authority.split_once(':') {
            Some((host, p)) => (host, p.parse::<u16>().map_err(|_| bad())?),
            None => (authority, default_port),
        },
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    use super::model_host;

    #[test]
    fn the_model_host_comes_from_the_base_url() {
        let host = |b| model_host(b).map_err(|f| f.message);
        assert_eq!(host(None), Ok(("api.anthropic.com".into(), 443)));
        assert_eq!(host(Some("")), Ok(("api.anthropic.com".into(), 443)));
        assert_eq!(
            host(Some("http://127.0.0.1:8080/v1")),
            Ok(("127.0.0.1".into(), 8080))
        );
        assert_eq!(
            host(Some("https://Proxy.Example.com")),
            Ok(("proxy.example.com".into(), 443))
        );
        assert_eq!(host(Some("http://[::1]:9/x")), Ok(("::1".into(), 9)));
        assert_eq!(host(Some("http://u:p@h.test")), Ok(("h.test".into(), 80)));
        for bad in [
            "ftp://h",
            "h.test",
            "http://",
            "http://h:port",
            "http://[::1",
        ] {
            assert!(host(Some(bad)).is_err(), "{bad}");
        }
    }
}
