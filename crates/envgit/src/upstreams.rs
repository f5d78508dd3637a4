//! Where the gate finds upstreams the usual way cannot: `--resolve HOST:PORT=ADDR:PORT` (or
//! `=http://ADDR:PORT`) and `--upstream-ca FILE`, also set through `ENVGIT_RESOLVE`
//! (comma- or space-separated entries) and `ENVGIT_UPSTREAM_CA`. For private registries and
//! for tests whose servers live on loopback under real-looking names.

use std::path::Path;

use envgit_gate::Resolve;

use crate::failure::{CmdResult, Failure};

#[derive(Debug, Default, Clone)]
pub struct Upstreams {
    pub resolve: Vec<Resolve>,
    /// PEM certificates trusted for upstreams besides the host's roots.
    pub extra_ca_pem: Vec<u8>,
}

impl Upstreams {
    /// The environment's settings, then the command line's (which win for the same HOST:PORT).
    pub fn new(resolve_args: &[String], ca_arg: Option<&Path>) -> CmdResult<Upstreams> {
        let mut out = Upstreams::default();
        if let Some(list) = std::env::var_os("ENVGIT_RESOLVE") {
            let list = list.to_string_lossy();
            out.resolve = envgit_gate::parse_resolve_list(&list)
                .map_err(|e| Failure::usage(format!("ENVGIT_RESOLVE: {e}")))?;
        }
        for arg in resolve_args {
            let r: Resolve = arg
                .parse()
                .map_err(|e: envgit_gate::ResolveError| Failure::usage(e.to_string()))?;
            out.resolve
                .retain(|e| (e.host.as_str(), e.port) != (r.host.as_str(), r.port));
            out.resolve.push(r);
        }
        let env_ca = std::env::var_os("ENVGIT_UPSTREAM_CA").filter(|v| !v.is_empty());
        if let Some(path) = ca_arg.map(Path::to_path_buf).or(env_ca.map(Into::into)) {
            let pem = std::fs::read(&path)
                .map_err(|e| Failure::usage(format!("--upstream-ca {}: {e}", path.display())))?;
            if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
                return Err(Failure::usage(format!(
                    "--upstream-ca {}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)",
                    path.display()
                )));
            }
            out.extra_ca_pem = pem;
        }
        Ok(out)
    }
}
