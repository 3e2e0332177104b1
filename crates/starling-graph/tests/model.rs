//! The graph against a naive model: random sequences of updates applied to both, every query
//! compared after every step.
//!
//! The model is a `BTreeMap<u32, BTreeSet<u32>>` per direction that is stored (following,
//! blocking); every reverse set, intersection and count is recomputed from it by brute force,
//! so it shares no code or representation with the graph.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use starling_core::ActorId;
use starling_graph::{BlockRelation, EdgeChange, Graph, GraphBuilder};

/// The id space of the random operations: small, so that edges collide and sets fill up.
const N_ACTORS: u32 = 50;

#[derive(Default, Debug)]
struct Model {
    following: BTreeMap<u32, BTreeSet<u32>>,
    blocking: BTreeMap<u32, BTreeSet<u32>>,
}

impl Model {
    fn following(&self, a: u32) -> Vec<u32> {
        self.following
            .get(&a)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    fn followers(&self, a: u32) -> Vec<u32> {
        self.following
            .iter()
            .filter(|(_, s)| s.contains(&a))
            .map(|(&f, _)| f)
            .collect()
    }

    fn blocking(&self, a: u32) -> Vec<u32> {
        self.blocking
            .get(&a)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    fn blocked_by(&self, a: u32) -> Vec<u32> {
        self.blocking
            .iter()
            .filter(|(_, s)| s.contains(&a))
            .map(|(&b, _)| b)
            .collect()
    }

    fn does_follow(&self, a: u32, b: u32) -> bool {
        self.following.get(&a).is_some_and(|s| s.contains(&b))
    }

    fn blocks(&self, a: u32, b: u32) -> bool {
        self.blocking.get(&a).is_some_and(|s| s.contains(&b))
    }

    fn known_followers(&self, viewer: u32, target: u32) -> Vec<u32> {
        let followers: BTreeSet<u32> = self.followers(target).into_iter().collect();
        self.following(viewer)
            .into_iter()
            .filter(|x| followers.contains(x))
            .collect()
    }

    fn mutuals(&self, a: u32) -> Vec<u32> {
        let followers: BTreeSet<u32> = self.followers(a).into_iter().collect();
        self.following(a)
            .into_iter()
            .filter(|x| followers.contains(x))
            .collect()
    }

    fn n_follows(&self) -> u64 {
        self.following.values().map(|s| s.len() as u64).sum()
    }

    fn n_blocks(&self) -> u64 {
        self.blocking.values().map(|s| s.len() as u64).sum()
    }

    /// Applies one change; returns whether it changed anything and, for a removal, how many
    /// edges it removed.
    fn apply(&mut self, change: &EdgeChange) -> (bool, usize) {
        match *change {
            EdgeChange::Follow { actor, subject } => {
                let changed = actor != subject
                    && self.following.entry(actor.0).or_default().insert(subject.0);
                (changed, 0)
            }
            EdgeChange::Unfollow { actor, subject } => {
                let changed = self
                    .following
                    .get_mut(&actor.0)
                    .is_some_and(|s| s.remove(&subject.0));
                (changed, 0)
            }
            EdgeChange::Block { actor, subject } => {
                let changed =
                    actor != subject && self.blocking.entry(actor.0).or_default().insert(subject.0);
                (changed, 0)
            }
            EdgeChange::Unblock { actor, subject } => {
                let changed = self
                    .blocking
                    .get_mut(&actor.0)
                    .is_some_and(|s| s.remove(&subject.0));
                (changed, 0)
            }
            EdgeChange::RemoveActor(actor) => {
                let a = actor.0;
                let mut n_removed = 0;
                for map in [&mut self.following, &mut self.blocking] {
                    n_removed += map.remove(&a).map_or(0, |s| s.len());
                    for set in map.values_mut() {
                        n_removed += usize::from(set.remove(&a));
                    }
                }
                (n_removed > 0, n_removed)
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    One(EdgeChange),
    Batch(Vec<EdgeChange>),
}

fn actor() -> impl Strategy<Value = ActorId> {
    (0..N_ACTORS).prop_map(ActorId)
}

fn change() -> impl Strategy<Value = EdgeChange> {
    prop_oneof![
        8 => (actor(), actor()).prop_map(|(actor, subject)| EdgeChange::Follow { actor, subject }),
        4 => (actor(), actor())
            .prop_map(|(actor, subject)| EdgeChange::Unfollow { actor, subject }),
        2 => (actor(), actor()).prop_map(|(actor, subject)| EdgeChange::Block { actor, subject }),
        1 => (actor(), actor()).prop_map(|(actor, subject)| EdgeChange::Unblock { actor, subject }),
        // Rare, so that the graph has time to fill up between removals.
        1 => actor().prop_map(EdgeChange::RemoveActor),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => change().prop_map(Op::One),
        1 => proptest::collection::vec(change(), 0..90).prop_map(Op::Batch),
    ]
}

fn ids(ids: &[ActorId]) -> Vec<u32> {
    ids.iter().map(|id| id.0).collect()
}

/// Compares every single-actor query and the totals.
fn check_actors(graph: &Graph, model: &Model, step: usize) {
    assert_eq!(graph.n_follows(), model.n_follows(), "step {step}");
    assert_eq!(graph.n_blocks(), model.n_blocks(), "step {step}");
    let everyone: Vec<ActorId> = (0..N_ACTORS + 2).map(ActorId).collect();
    // Two ids past the model's range: actors the graph never saw answer with empty sets.
    for a in 0..N_ACTORS + 2 {
        let actor = ActorId(a);
        let following = model.following(a);
        let followers = model.followers(a);
        assert_eq!(
            ids(&graph.following(actor)),
            following,
            "following({a}) at step {step}"
        );
        assert_eq!(
            ids(&graph.followers(actor)),
            followers,
            "followers({a}) at step {step}"
        );
        assert_eq!(graph.n_following(actor), following.len());
        assert_eq!(graph.n_followers(actor), followers.len());
        assert_eq!(
            ids(&graph.mutuals(actor)),
            model.mutuals(a),
            "mutuals({a}) at step {step}"
        );
        assert_eq!(
            ids(&graph.blocking(actor)),
            model.blocking(a),
            "blocking({a}) at step {step}"
        );
        assert_eq!(
            ids(&graph.blocked_by(actor)),
            model.blocked_by(a),
            "blocked_by({a}) at step {step}"
        );
        // Paging: pages of 3 after each position must stitch back into the whole set.
        let after = followers.get(step % (followers.len() + 1)).copied();
        let expected_page: Vec<u32> = followers
            .iter()
            .copied()
            .filter(|&x| after.is_none_or(|after| x > after))
            .take(3)
            .collect();
        assert_eq!(
            ids(&graph.followers_page(actor, after.map(ActorId), 3)),
            expected_page
        );
        let after = following.get(step % (following.len() + 1)).copied();
        let expected_page: Vec<u32> = following
            .iter()
            .copied()
            .filter(|&x| after.is_none_or(|after| x > after))
            .take(3)
            .collect();
        assert_eq!(
            ids(&graph.following_page(actor, after.map(ActorId), 3)),
            expected_page
        );

        let relations = graph.block_relationships(actor, &everyone);
        for (other, relation) in everyone.iter().zip(relations) {
            let expected = BlockRelation {
                blocking: model.blocks(a, other.0),
                blocked_by: model.blocks(other.0, a),
            };
            assert_eq!(
                relation, expected,
                "block_relationships({a}, {}) at step {step}",
                other.0
            );
        }
    }
}

/// Compares every two-actor query for the pairs with `a` as either end.
fn check_pairs_of(graph: &Graph, model: &Model, a: u32, step: usize) {
    let others: Vec<u32> = (0..N_ACTORS + 1).collect();
    let pairs: Vec<(ActorId, ActorId)> = others
        .iter()
        .flat_map(|&b| [(ActorId(a), ActorId(b)), (ActorId(b), ActorId(a))])
        .collect();
    let block_pairs = graph.block_pairs(&pairs);
    for (&(x, y), blocked) in pairs.iter().zip(block_pairs) {
        let (x, y) = (x.0, y.0);
        assert_eq!(
            blocked,
            model.blocks(x, y) || model.blocks(y, x),
            "block_pairs({x}, {y}) at step {step}"
        );
        assert_eq!(
            graph.does_follow(ActorId(x), ActorId(y)),
            model.does_follow(x, y)
        );
        assert_eq!(graph.blocks(ActorId(x), ActorId(y)), model.blocks(x, y));
        let expected = model.known_followers(x, y);
        let all = graph.known_followers(ActorId(x), ActorId(y), None);
        assert_eq!(
            all.count,
            expected.len(),
            "known_followers({x}, {y}) at step {step}"
        );
        assert_eq!(
            ids(&all.ids),
            expected,
            "known_followers({x}, {y}) at step {step}"
        );
        let limit = step % 4;
        let first = graph.known_followers(ActorId(x), ActorId(y), Some(limit));
        assert_eq!(first.count, expected.len());
        assert_eq!(ids(&first.ids), expected[..expected.len().min(limit)]);
    }
    let targets: Vec<ActorId> = others.iter().map(|&b| ActorId(b)).collect();
    let batch = graph.known_followers_batch(ActorId(a), &targets, Some(2));
    for (target, answer) in targets.iter().zip(batch) {
        let expected = model.known_followers(a, target.0);
        assert_eq!(answer.count, expected.len());
        assert_eq!(ids(&answer.ids), expected[..expected.len().min(2)]);
    }
}

/// Runs `ops` on a graph with the given array limit and on the model, comparing after each.
fn run(ops: &[Op], array_members_max: usize) {
    let graph = Graph::with_array_members_max(0, array_members_max);
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let mut touched = BTreeSet::new();
        let mut everything = false;
        let changes: Vec<EdgeChange> = match op {
            Op::One(change) => vec![*change],
            Op::Batch(changes) => changes.clone(),
        };
        for change in &changes {
            match *change {
                EdgeChange::RemoveActor(_) => everything = true,
                EdgeChange::Follow { actor, subject }
                | EdgeChange::Unfollow { actor, subject }
                | EdgeChange::Block { actor, subject }
                | EdgeChange::Unblock { actor, subject } => {
                    touched.insert(actor.0);
                    touched.insert(subject.0);
                }
            }
        }
        match op {
            Op::One(change) => {
                let (changed, n_removed) = model.apply(change);
                let got = match *change {
                    EdgeChange::Follow { actor, subject } => graph.follow(actor, subject),
                    EdgeChange::Unfollow { actor, subject } => graph.unfollow(actor, subject),
                    EdgeChange::Block { actor, subject } => graph.block(actor, subject),
                    EdgeChange::Unblock { actor, subject } => graph.unblock(actor, subject),
                    EdgeChange::RemoveActor(actor) => {
                        let got = graph.remove_actor(actor);
                        assert_eq!(got, n_removed, "remove_actor({}) at step {step}", actor.0);
                        got > 0
                    }
                };
                assert_eq!(got, changed, "{change:?} at step {step}");
            }
            Op::Batch(changes) => {
                let expected: usize = changes.iter().map(|c| usize::from(model.apply(c).0)).sum();
                assert_eq!(graph.apply(changes), expected, "batch at step {step}");
            }
        }
        check_actors(&graph, &model, step);
        // Pairs can only change through an endpoint of a change; a removal may touch anyone.
        let pair_actors: Vec<u32> = if everything {
            (0..N_ACTORS).collect()
        } else {
            touched.into_iter().collect()
        };
        for a in pair_actors {
            check_pairs_of(&graph, &model, a, step);
        }
    }
    for a in 0..N_ACTORS {
        check_pairs_of(&graph, &model, a, ops.len());
    }
    // The same edges loaded in bulk give the same graph as the live updates did.
    let mut builder = GraphBuilder::new().array_members_max(array_members_max);
    for (&a, set) in &model.following {
        for &b in set {
            builder.follow(ActorId(a), ActorId(b));
        }
    }
    for (&a, set) in &model.blocking {
        for &b in set {
            builder.block(ActorId(a), ActorId(b));
        }
    }
    assert!(builder.build() == graph);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    // Checks the graph with the default array limit (every set stays an array here) against
    // the model: random follow/unfollow/block/unblock/remove sequences and batches, all
    // queries compared after every step, and a bulk build of the final edges compared with the
    // live graph.
    #[test]
    fn graph_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops, starling_graph::ARRAY_MEMBERS_MAX);
    }

    // The same with sets above 3 members stored as roaring bitmaps, so sets cross between
    // the two representations (and back, below 1) throughout the sequence.
    #[test]
    fn graph_matches_model_with_bitmaps(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops, 3);
    }
}

#[test]
fn graph_is_shareable_between_threads() {
    // Checks at compile time that one `Arc<Graph>` can serve reader threads and the ingest
    // thread, which the crate's design promises.
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Graph>();
}

#[test]
fn self_edges_are_ignored() {
    // Checks the documented choice that following or blocking yourself is not a relation:
    // the update reports no change and no query sees it, live or bulk-loaded.
    let graph = Graph::new();
    assert!(!graph.follow(ActorId(1), ActorId(1)));
    assert!(!graph.block(ActorId(1), ActorId(1)));
    assert_eq!(graph.n_follows(), 0);
    assert!(graph.following(ActorId(1)).is_empty());
    let built = Graph::from_follows([(ActorId(1), ActorId(1)), (ActorId(1), ActorId(2))]);
    assert_eq!(ids(&built.following(ActorId(1))), vec![2]);
    assert_eq!(built.n_follows(), 1);
}

#[test]
fn readers_never_see_half_a_chunk() {
    // Checks that a chunk applied by `apply` is atomic to readers. Setup: x and y both follow
    // t; v follows x. The writer swaps v's follow between x and y in one two-change chunk,
    // unfollow first, so a reader that saw the chunk half-applied would count 0 known
    // followers of t for v. Readers on two threads assert the count is always exactly 1.
    let (v, x, y, t) = (ActorId(1), ActorId(2), ActorId(3), ActorId(4));
    let graph = Arc::new(Graph::new());
    graph.follow(x, t);
    graph.follow(y, t);
    graph.follow(v, x);
    let n_swaps = 20_000;
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let graph = Arc::clone(&graph);
            std::thread::spawn(move || {
                let mut n_reads = 0u64;
                // Read until the writer's final state is visible, then a bit more.
                while !(graph.does_follow(v, y) && graph.n_following(x) == 2) || n_reads < 1000 {
                    let known = graph.known_followers(v, t, None);
                    assert_eq!(known.count, 1, "saw a half-applied chunk: {known:?}");
                    n_reads += 1;
                }
                n_reads
            })
        })
        .collect();
    for swap_idx in 0..n_swaps {
        let (from, to) = if swap_idx % 2 == 0 { (x, y) } else { (y, x) };
        let changes = [
            EdgeChange::Unfollow {
                actor: v,
                subject: from,
            },
            EdgeChange::Follow {
                actor: v,
                subject: to,
            },
        ];
        assert_eq!(graph.apply(&changes), 2);
    }
    // The loop ends with v following x; a last swap to y plus x following v and y signals
    // the readers to stop.
    graph.apply(&[
        EdgeChange::Unfollow {
            actor: v,
            subject: x,
        },
        EdgeChange::Follow {
            actor: v,
            subject: y,
        },
    ]);
    graph.follow(x, v);
    for reader in readers {
        assert!(reader.join().unwrap() >= 1000);
    }
}

#[test]
fn churn_compacts_the_sets_and_keeps_every_one() {
    // Checks that a shard's buffer of packed sets, rewritten by a long run of follows and
    // unfollows from actors of one shard (ids below 1,024 share one) to accounts all over the
    // id space, is compacted as it goes (its garbage stays far below the ~34 MB of old
    // copies the growing sets leave) and that every set still holds what a model of the same
    // edges holds.
    let graph = Graph::new();
    let mut model = Model::default();
    let mut subjects = BTreeSet::new();
    let mut state = 7u64;
    for step in 0..250_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let actor = ActorId((state % 1000) as u32);
        let subject = ActorId((state >> 16) as u32 % 5_000_000);
        let change = if state >> 40 & 3 == 0 {
            // An unfollow of one of the actor's follows, so that sets shrink too.
            let followed = model.following(actor.0);
            let subject = followed.get((state >> 48) as usize % followed.len().max(1));
            EdgeChange::Unfollow {
                actor,
                subject: ActorId(subject.copied().unwrap_or(subject_fallback(actor))),
            }
        } else {
            subjects.insert(subject.0);
            EdgeChange::Follow { actor, subject }
        };
        let (changed, _) = model.apply(&change);
        assert_eq!(
            graph.apply(&[change]) == 1,
            changed,
            "{change:?} at step {step}"
        );
    }
    for a in 0..1000 {
        assert_eq!(ids(&graph.following(ActorId(a))), model.following(a));
    }
    for &s in subjects.iter().step_by(500) {
        assert_eq!(ids(&graph.followers(ActorId(s))), model.followers(s));
    }
    assert_eq!(graph.n_follows(), model.n_follows());
    let garbage = graph.stats().garbage_bytes;
    assert!(garbage < 4 << 20, "{garbage} bytes of garbage");
}

/// Any id for an unfollow of an actor that follows no one: a no-op on both sides.
fn subject_fallback(actor: ActorId) -> u32 {
    actor.0 + 1
}
