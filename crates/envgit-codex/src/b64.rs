//! Base64 as the exec-server protocol carries bytes (standard alphabet, padded).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

pub fn encode(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// `None` when `text` is not base64.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_garbage() {
        assert_eq!(encode(b"hi!"), "aGkh");
        assert_eq!(decode("aGkh").as_deref(), Some(&b"hi!"[..]));
        assert_eq!(decode("not base64!"), None);
    }
}
