//! The seeded draws the generator makes beyond `SplitMix64`'s own: a shuffle, a Zipf rank, a
//! permutation multiplier and a Pareto size. Written out here so the order of draws, and so the
//! bytes of a file, are part of this crate and not of a library's version.

use starling_core::sample::SplitMix64;

/// A uniform shuffle (Fisher-Yates), written out so the order of draws is part of this file.
pub(crate) fn shuffle<T>(items: &mut [T], rng: &mut SplitMix64) {
    for idx in (1..items.len()).rev() {
        let other = rng.below(idx as u64 + 1) as usize;
        items.swap(idx, other);
    }
}

/// A rank in `0..n` drawn with weight `1 / (rank + offset)`, by inverting the continuous CDF.
pub(crate) fn zipf(rng: &mut SplitMix64, n: u64, offset: f64) -> u64 {
    let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let low = offset.ln();
    let high = (n as f64 + offset).ln();
    let rank = (low + unit * (high - low)).exp() - offset;
    (rank.max(0.0) as u64).min(n - 1)
}

/// A multiplier coprime to `n`, so `rank * mult + add (mod n)` permutes `0..n`.
pub(crate) fn coprime_multiplier(n: u64, rng: &mut SplitMix64) -> u64 {
    loop {
        let mult = 1 + rng.below(n.max(2) - 1);
        if gcd(mult, n) == 1 {
            return mult;
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A size of at least 1 from a Pareto law with shape 1 and scale 1.5, at most `max`:
/// `P(size >= s) = 1.5 / s`, so half the sizes are 1 to 3 and one in a thousand is 1,500 or
/// more. In integers (`1.5 / u` for a uniform `u` in (0, 1], scaled by 2^32), so the draw is
/// the same on every platform.
pub(crate) fn pareto_size(rng: &mut SplitMix64, max: u64) -> u64 {
    let unit = 1 + rng.below(1 << 32);
    ((3 << 31) / unit).clamp(1, max.max(1))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    // Checks that the rank permutation visits every actor once, for network sizes with many
    // small factors and for a prime, by counting hits.
    #[test]
    fn rank_permutation_is_a_bijection() {
        for n in [2u64, 3, 12, 97, 360, 1024] {
            let mut rng = SplitMix64::new(n);
            let mult = coprime_multiplier(n, &mut rng);
            let add = rng.below(n);
            let mut hits = vec![0u32; n as usize];
            for rank in 0..n {
                hits[((rank * mult + add) % n) as usize] += 1;
            }
            assert!(hits.iter().all(|&hit| hit == 1), "n {n} mult {mult}");
        }
    }

    // Checks the Zipf draw's shape against its formula: rank 0 has weight 1/10 and rank 990
    // weight 1/1000, so rank 0 is drawn ~100 times as often; both stay in range.
    #[test]
    fn zipf_favours_low_ranks() {
        let mut rng = SplitMix64::new(1);
        let mut hits = vec![0u32; 1000];
        for _ in 0..200_000 {
            hits[zipf(&mut rng, 1000, 10.0) as usize] += 1;
        }
        let head = hits[0];
        let tail: u32 = hits[980..1000].iter().sum::<u32>() / 20;
        println!("rank 0: {head}, ranks 980..1000: {tail} each");
        assert!(head > 40 * tail.max(1), "head {head} tail {tail}");
        assert!(tail > 0);
    }

    // Checks the Pareto draw against its law: P(size >= s) = 1.5 / s, so of 100,000 draws
    // about 50,000 are 3 or more, 1,500 are 100 or more and 150 are 1,000 or more; none is
    // over the cap or below 1.
    #[test]
    fn pareto_sizes_follow_the_law() {
        let mut rng = SplitMix64::new(2);
        let sizes: Vec<u64> = (0..100_000).map(|_| pareto_size(&mut rng, 5_000)).collect();
        let at_least = |s: u64| sizes.iter().filter(|&&size| size >= s).count();
        println!(
            "≥3 {}, ≥100 {}, ≥1000 {}",
            at_least(3),
            at_least(100),
            at_least(1_000)
        );
        assert!((48_000..52_000).contains(&at_least(3)));
        assert!((1_300..1_700).contains(&at_least(100)));
        assert!((100..200).contains(&at_least(1_000)));
        assert!(sizes.iter().all(|&size| (1..=5_000).contains(&size)));
        assert!(sizes.contains(&5_000), "the cap is never reached");
    }
}
