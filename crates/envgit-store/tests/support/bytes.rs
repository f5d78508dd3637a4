//! Test content. Not every test crate that includes `support` uses all of it.
#![allow(dead_code)]

/// `len` bytes that do not compress (an xorshift stream, a different one for each `seed`), so
/// sizes on disk follow the sizes written.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
