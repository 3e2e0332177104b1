//! The lossy rule: `loss_factor = min(reasonable_limit / follows, 1)`; fan-out draws one number
//! in `[0, 1)` per page of followers and skips the followers whose loss factor is below it.
//!
//! The draw is a hash of the item and of the page, not a random number generator, so that
//! rebuilding a timeline from author feeds drops exactly what fan-out dropped. A page is a
//! block of [`PAGE_IDS`] consecutive actor ids: fan-out walks followers in id order, so each
//! page of followers shares one draw, as in Bluesky's fan-out.

use starling_core::ActorId;
use starling_core::feed::FeedKey;
use starling_core::hash::{GOLDEN_GAMMA, mix64};

/// Consecutive actor ids that share one draw.
pub const PAGE_IDS: u32 = 1024;

/// The loss factor of a reader following `follows` accounts.
pub fn loss_factor(reasonable_limit: u32, follows: usize) -> f32 {
    if follows <= reasonable_limit as usize {
        1.0
    } else {
        reasonable_limit as f32 / follows as f32
    }
}

/// The draw for `item` on the fan-out page holding `reader`, in `[0, 1)`.
pub fn draw(item: &FeedKey, reader: ActorId) -> f32 {
    let mut x = item.sort_at_us as u64;
    for word in [
        item.code,
        u64::from(item.author.0) << 1 | u64::from(item.repost),
        u64::from(reader.0 / PAGE_IDS),
    ] {
        x = mix(x ^ word);
    }
    // 24 bits: exactly representable in an f32.
    (x >> 40) as f32 / (1u64 << 24) as f32
}

/// Whether `reader`, with loss factor `factor`, keeps `item`.
pub fn keeps(item: &FeedKey, reader: ActorId, factor: f32) -> bool {
    factor >= 1.0 || draw(item, reader) < factor
}

/// One step of SplitMix64 from `x`: a cheap, well-mixed bijection of 64-bit words.
fn mix(x: u64) -> u64 {
    mix64(x.wrapping_add(GOLDEN_GAMMA))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that the share of items kept matches the loss factor, over many items and readers.
    #[test]
    fn kept_share_matches_the_loss_factor() {
        for factor in [0.5f32, 0.25, 0.1] {
            let mut kept = 0u32;
            let n = 200_000u32;
            for i in 0..n {
                let key = FeedKey {
                    sort_at_us: 1_700_000_000_000_000 + i64::from(i) * 997,
                    code: u64::from(i) * 7919,
                    author: ActorId(i % 101),
                    repost: false,
                };
                kept += u32::from(keeps(&key, ActorId(i % 5000), factor));
            }
            let share = kept as f32 / n as f32;
            assert!(
                (share - factor).abs() < 0.01,
                "factor {factor}: kept {share}"
            );
        }
    }

    // Checks the factor formula at the figures Bluesky published.
    #[test]
    fn loss_factor_halves_at_twice_the_limit() {
        assert_eq!(loss_factor(2000, 1000), 1.0);
        assert_eq!(loss_factor(2000, 4000), 0.5);
        assert_eq!(loss_factor(2000, 8000), 0.25);
    }
}
