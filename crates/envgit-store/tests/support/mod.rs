#[macro_use]
pub mod backends;
pub mod bytes;
