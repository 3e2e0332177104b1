//! SplitMix64's output function, shared by the seeded generator of test data
//! ([`crate::sample::SplitMix64`]), the timelines' lossy draw and the store's key filter.

/// The increment of SplitMix64's state per output: 2^64 over the golden ratio.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finalizer: a cheap bijection of 64-bit words in which every input bit moves
/// every output bit.
pub fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
