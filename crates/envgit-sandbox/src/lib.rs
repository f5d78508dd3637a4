//! Runs one command in a masked view of the host whose only way out is envgit's gate.
//! Knows nothing of steps.

pub mod relay;
