//! Which registry hosts a project needs for reads, worked out from file contents (pure: the
//! caller reads the files). `envgit init` writes the result into `network.allow`.
//!
//! Only host names ever leave this module, never URLs, so userinfo, tokens and passwords in
//! the files read are never copied into the policy.

mod host;
mod project;
mod url;

pub use host::{HostFile, REGISTRY_VARS, client_vars, from_host};
pub use project::from_project;

/// One host the policy should name, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// `host` or `host:port`, as `network.allow` takes it.
    pub host: String,
    /// The file (or variable) that asked for it.
    pub why: String,
    /// False for a host named only by a file in the project: written commented out.
    pub active: bool,
}

impl Wanted {
    pub(crate) fn new(host: &str, why: &str, active: bool) -> Self {
        Wanted {
            host: host.to_owned(),
            why: why.to_owned(),
            active,
        }
    }
}

/// Merge duplicates, keeping first-seen order: a host is active if any source made it so, and
/// its comment names every file that asked for it.
pub fn merge(all: Vec<Wanted>) -> Vec<Wanted> {
    let mut out: Vec<Wanted> = Vec::new();
    for w in all {
        match out.iter_mut().find(|o| o.host == w.host) {
            Some(o) => {
                if w.active && !o.active {
                    o.active = true;
                    o.why = w.why;
                } else if w.active == o.active && !o.why.split(", ").any(|s| s == w.why) {
                    o.why = format!("{}, {}", o.why, w.why);
                }
            }
            None => out.push(w),
        }
    }
    out
}

/// The `network:` block: active hosts live, project-named ones commented with the reason.
/// `extra` are `--allow` entries, written live.
pub fn render(wanted: &[Wanted], extra: &[String]) -> String {
    let mut s = String::from("network:\n  allow:\n");
    for a in extra {
        s.push_str(&format!("    - {a:?}   # --allow\n"));
    }
    for w in wanted.iter().filter(|w| w.active) {
        s.push_str(&format!("    - {:?}   # {}\n", w.host, w.why));
    }
    let named: Vec<&Wanted> = wanted.iter().filter(|w| !w.active).collect();
    if !named.is_empty() {
        s.push_str(
            "    # Named only by files in this project (a repository can name its own egress);\n    \
             # uncomment a line if you trust that host.\n",
        );
        for w in named {
            s.push_str(&format!("    # - {:?}   # {}\n", w.host, w.why));
        }
    }
    s
}

#[cfg(test)]
mod tests;
