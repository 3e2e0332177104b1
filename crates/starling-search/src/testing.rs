//! Seeded random draws for the unit tests' indexes and queries.

/// Draws below `n` from a xorshift generator seeded with `seed` (odd, or the draws are all 0).
pub(crate) fn draws(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}
