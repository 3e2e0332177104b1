//! Follow suggestions: the accounts followed by the accounts a viewer follows.

use rustc_hash::FxHashMap;
use starling_core::ActorId;

use crate::Graph;

/// The most of the viewer's follows walked (the first ones by id).
pub const SUGGEST_FOLLOWS_MAX: usize = 1_000;
/// The most follows of each followed account counted (the first ones by id).
pub const SUGGEST_FOLLOWS_OF_FOLLOW_MAX: usize = 1_000;

/// One suggested account and its social proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Suggestion {
    /// The account.
    pub actor: ActorId,
    /// How many of the viewer's (walked) follows follow it.
    pub n_followed_by_follows: u32,
}

/// Every account followed by at least one account `viewer` follows, except `viewer`, the
/// accounts it already follows and the accounts that block it or that it blocks, with how many
/// of its follows follow each, most first, ties by actor id ascending. The walk is bounded:
/// [`SUGGEST_FOLLOWS_MAX`] follows of the viewer, [`SUGGEST_FOLLOWS_OF_FOLLOW_MAX`] of each.
pub fn follow_suggestions(graph: &Graph, viewer: ActorId) -> Vec<Suggestion> {
    let follows = graph.following_page(viewer, None, SUGGEST_FOLLOWS_MAX);
    let mut counts: FxHashMap<ActorId, u32> = FxHashMap::default();
    for &follow in follows.as_slice() {
        let next = graph.following_page(follow, None, SUGGEST_FOLLOWS_OF_FOLLOW_MAX);
        for &candidate in next.as_slice() {
            *counts.entry(candidate).or_default() += 1;
        }
    }
    let mut res: Vec<Suggestion> = counts
        .into_iter()
        .filter(|&(candidate, _)| {
            candidate != viewer
                && !graph.does_follow(viewer, candidate)
                && !graph.blocks(viewer, candidate)
                && !graph.blocks(candidate, viewer)
        })
        .map(|(actor, n)| Suggestion {
            actor,
            n_followed_by_follows: n,
        })
        .collect();
    res.sort_unstable_by(|a, b| {
        b.n_followed_by_follows
            .cmp(&a.n_followed_by_follows)
            .then(a.actor.cmp(&b.actor))
    });
    res
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;
    use crate::EdgeChange;

    // Checks suggestions against a naive walk of a BTreeMap graph: random follows and blocks
    // among a few actors, every actor as the viewer; the same accounts, counts and order.
    proptest! {
        #[test]
        fn suggestions_match_a_naive_walk(
            edges in proptest::collection::vec((0u32..12, 0u32..12, 0u8..8), 0..120),
        ) {
            let graph = Graph::new();
            let mut follows: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
            let mut blocks: BTreeSet<(u32, u32)> = BTreeSet::new();
            for &(a, b, kind) in &edges {
                let (actor, subject) = (ActorId(a), ActorId(b));
                let change = match kind {
                    0 => { blocks.insert((a, b)); EdgeChange::Block { actor, subject } }
                    1 => { follows.entry(a).or_default().remove(&b); EdgeChange::Unfollow { actor, subject } }
                    _ => { follows.entry(a).or_default().insert(b); EdgeChange::Follow { actor, subject } }
                };
                graph.apply(&[change]);
            }
            for viewer in 0u32..12 {
                let mine = follows.get(&viewer).cloned().unwrap_or_default();
                let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
                for f in &mine {
                    for g in follows.get(f).cloned().unwrap_or_default() {
                        *counts.entry(g).or_default() += 1;
                    }
                }
                let mut want: Vec<(u32, u32)> = counts
                    .into_iter()
                    .filter(|(g, _)| {
                        *g != viewer
                            && !mine.contains(g)
                            && !blocks.contains(&(viewer, *g))
                            && !blocks.contains(&(*g, viewer))
                    })
                    .collect();
                want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                let have: Vec<(u32, u32)> = follow_suggestions(&graph, ActorId(viewer))
                    .into_iter()
                    .map(|s| (s.actor.0, s.n_followed_by_follows))
                    .collect();
                prop_assert_eq!(have, want, "viewer {}", viewer);
            }
        }
    }
}
