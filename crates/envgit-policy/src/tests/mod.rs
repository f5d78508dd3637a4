//! Table-driven tests of parsing, errors, hashing and robustness.

mod allow_options;
mod design_example;
mod errors;
mod globs;
mod hash;
mod robustness;
