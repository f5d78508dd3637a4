//! What every connection of one running gate reads: the token, the policy, the event log, the
//! run CA, the upstream trust, the approvals and the credentials. Built once by
//! [`crate::Gate::start`]; the modules that serve a connection receive it and never reach
//! back to the one that called them for it.

use std::path::PathBuf;
use std::sync::Arc;

use envgit_policy::Policy;
use tokio::sync::Semaphore;

use crate::approvals::Approvals;
use crate::ca::RunCa;
use crate::credentials::Credential;
use crate::events::Events;
use crate::resolve::Resolve;
use crate::upstream_tls::UpstreamTrust;

pub(crate) struct Shared {
    pub(crate) token: String,
    pub(crate) policy: Arc<Policy>,
    pub(crate) events: Arc<Events>,
    pub(crate) ca: Arc<RunCa>,
    pub(crate) resolve: Vec<Resolve>,
    pub(crate) upstream_trust: UpstreamTrust,
    /// `None`: nobody can answer an `ask`, which then fails closed at once.
    pub(crate) approvals: Option<Arc<Approvals>>,
    /// Secrets put on requests to their hosts in place of the sandbox's placeholders.
    pub(crate) credentials: Vec<Credential>,
    /// See [`crate::GateConfig::reserved_ports`].
    pub(crate) reserved_ports: Option<PathBuf>,
    /// The requests being served ([`crate::forward::REQUESTS_AT_ONCE`] permits).
    pub(crate) requests: Arc<Semaphore>,
}

#[cfg(test)]
impl Shared {
    /// What the unit tests judge with: `allow` under `network.allow`, nothing else set.
    pub(crate) fn for_tests(allow: &[&str]) -> Shared {
        let mut policy = Policy::default();
        policy.network.allow = allow.iter().map(|s| (*s).to_owned()).collect();
        Shared {
            token: "t".into(),
            policy: Arc::new(policy),
            events: Arc::new(Events::default()),
            ca: Arc::new(RunCa::generate("test").unwrap()),
            resolve: Vec::new(),
            upstream_trust: UpstreamTrust::new(Vec::new()),
            approvals: None,
            credentials: Vec::new(),
            reserved_ports: None,
            requests: Arc::new(Semaphore::new(crate::forward::REQUESTS_AT_ONCE)),
        }
    }
}
