#[macro_use]
pub mod backends;
