//! Random numbers for salts, seeds and nonces: from the operating system
//! (`getrandom`), so that ids and nonces differ between runs and processes
//! and cannot be predicted from outside.

/// A random `u64` from the operating system. If the system's source
/// fails (it does not on Linux once booted), the standard library's
/// per-process hasher keys stand in: still different between processes,
/// but not a secret.
pub(crate) fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_differ() {
        let draws: std::collections::HashSet<u64> = (0..64).map(|_| super::random_u64()).collect();
        assert_eq!(
            draws.len(),
            64,
            "64 draws of a 64-bit random number collided"
        );
    }
}
