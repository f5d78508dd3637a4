//! Table-driven tests of parsing, errors, hashing and robustness.

mod design_example;
mod errors;
mod hash;
mod robustness;
