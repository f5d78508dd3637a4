//! The policy hash recorded on every step: BLAKE3 over a canonical JSON form of the parsed
//! policy, so comments, layout, key order and defaults written out or left implicit do not
//! change it, and any change in meaning does.

use crate::Policy;

/// Bumped if the canonical form ever changes, so old and new hashes never collide by accident.
const DOMAIN: &[u8] = b"envgit-policy-hash-v1\n";

impl Policy {
    /// Hex BLAKE3 of the canonical serialization of the parsed policy.
    pub fn hash(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        hasher.update(DOMAIN);
        // Serializing plain structs, strings and BTreeMaps to JSON cannot fail; on the
        // impossible error the hash still covers the Debug form, which is also canonical.
        match serde_json::to_vec(self) {
            Ok(json) => hasher.update(&json),
            Err(_) => hasher.update(format!("{self:?}").as_bytes()),
        };
        hasher.finalize().to_hex().to_string()
    }
}
