//! Opening an upstream connection again when the upstream closed the last one: decided and
//! dialled exactly as the first (reserved ports, `network.allow`, every address vetted), then
//! TLS unless the upstream is plain HTTP.

use std::sync::Arc;

use crate::pool::{self as h2, UpstreamError};
use crate::shared::Shared;
use crate::upstream::{self, DialError};
use crate::upstream_tls::{connect_upstream, upstream_h2};
use crate::verdict;

/// A new upstream connection when the upstream closed the last one (HTTP/1.1 servers may
/// close after any response): decided and dialled exactly as the first.
pub(crate) fn redialer(shared: &Arc<Shared>, host: &str, port: u16, plain: bool) -> h2::Redial {
    let shared = Arc::clone(shared);
    let host = host.to_owned();
    Arc::new(move || {
        let shared = Arc::clone(&shared);
        let host = host.clone();
        Box::pin(async move {
            let rule = match verdict::connect(
                &shared.policy,
                shared.reserved_ports.as_deref(),
                &host,
                port,
            ) {
                envgit_policy::ConnectDecision::Allowed { rule } => rule,
                envgit_policy::ConnectDecision::Denied { reason, .. } => {
                    return Err(UpstreamError::Refused(reason));
                }
            };
            let tcp = upstream::dial(&host, port, &rule, &shared.resolve)
                .await
                .map_err(|e| match e {
                    DialError::Denied { reason, .. } => UpstreamError::Refused(reason),
                    DialError::Failed(msg) => UpstreamError::Unreachable(msg),
                })?;
            if plain {
                return Ok((Box::new(tcp) as Box<dyn h2::Io>, false));
            }
            connect_upstream(tcp, &host, &shared.upstream_trust, true)
                .await
                .map(|s| {
                    let h2 = upstream_h2(&s);
                    (Box::new(s) as Box<dyn h2::Io>, h2)
                })
                .map_err(|error| UpstreamError::Tls { host, port, error })
        })
    })
}
