//! Runs one command in a masked view of the host whose only way out is envgit's gate.
//! Knows nothing of steps.
//!
//! The host side ([`launch`]) starts the sandbox process: `envgit run` uses the zygote envgit
//! forked first thing, while it was still single-threaded ([`prefork`], `zygote.rs`); other
//! commands re-execute the current binary into a hidden subcommand that calls
//! [`child::sandbox_main`]. That single-threaded process builds the sandbox in this order
//! (user + network namespace → relay → mount, pid, ipc, uts namespaces → the root →
//! pivot_root → capabilities dropped → Landlock → seccomp) and execs the command.

// Namespaces, fork, mounts and seccomp need system calls no safe wrapper offers; each unsafe
// block says why it is sound.
#![allow(unsafe_code)]

mod child;
pub mod console;
pub mod cover;
mod detached_close;
mod etc_cache;
pub mod etc_walk;
mod etc_watch;
pub mod host_secrets;
mod init;
mod landlock_rules;
pub mod launch;
pub mod limits;
mod listing_cache;
mod mounts;
pub mod plan;
pub mod probe;
mod project_index;
pub mod registry_env;
pub mod relay;
mod seccomp;
mod setup_error;
pub mod spec;
mod sys;
mod timing;
pub mod trust;
mod userns;
mod zygote;

pub use child::sandbox_main;
pub use detached_close::close_detached;
pub use launch::{HIDDEN_SUBCOMMAND, Outcome, SandboxChild, SignalGuard, spawn, spawn_on};
pub use spec::Spec;
pub use zygote::{
    build_base_early, discard_zygote, enter_namespaces_early, move_into_cgroups, prefork,
};
