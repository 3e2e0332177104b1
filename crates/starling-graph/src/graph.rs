//! The graph itself: sharded slots of id sets, the update paths and the queries.
//!
//! # Layout
//!
//! Ids are dealt to shards (`shard.rs`) in blocks of 1,024 consecutive ids, round-robin over
//! [`N_SHARDS`] shards; within a shard, slots follow id order. Blocks rather than single ids,
//! so that a walk over all ids in order (the snapshot writer, the bulk loaders) reads each
//! shard's slots sequentially instead of hopping between 128 streams. A slot holds the handles
//! of the actor's following and followers sets (8 bytes); the sets themselves live in the
//! shard's arena (`arena.rs`). Blocks are rare, so their handles live in a per-shard map beside
//! the slots instead of costing every actor another 8 bytes.
//!
//! # Consistency: reads never see a half-applied update
//!
//! A follow touches two sets in (usually) two shards: `following(actor)` and
//! `followers(subject)`. Each shard is a `RwLock`. Writers apply changes in chunks of at most
//! [`APPLY_CHUNK_CHANGES_MAX`]: a chunk takes the write locks of every shard it touches, in
//! ascending shard order, applies all its changes, and releases them. A query that reads two
//! actors (known followers reads `following(viewer)` and `followers(target)`) holds both shards'
//! read locks at once, also taken in ascending order. So every query sees each chunk entirely or
//! not at all, and ascending order on both sides rules out deadlock.
//!
//! Why not a seqlock or an epoch per batch: those need either `unsafe` reads of data being
//! written or copying sets, and this crate forbids `unsafe` and promises never to copy a big
//! set on write. Why not one global lock: readers of unrelated actors would wait for every
//! write. With per-shard locks a writer stalls only the readers of the shards its chunk
//! touches, for the microseconds the chunk takes; the chunk limit bounds that stall.
//!
//! Updates also hold a graph-wide `update_gate` shared while they apply a chunk; the snapshot
//! writer holds it exclusively, so it reads one moment of the graph while queries go on.
//! Queries never touch the gate.
//!
//! Removing an actor (account deletion) is the one change applied edge chunk by edge chunk
//! rather than at once: a celebrity's deletion removes a million edges, and holding every shard
//! for that long would stall every reader. Each of its edges still disappears from both sides
//! atomically; a reader may see the actor with some edges gone and others not yet.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use starling_core::ActorId;

use crate::set::{ARRAY_MEMBERS_MAX, SetRef, SortedIds, intersect};
use crate::shard::{EdgeKind, Shard, Slot, actor_at, locate, n_slots};

/// How many shards the actors are spread over.
///
/// Enough that one ingest thread writing and many readers reading rarely meet on a lock, few
/// enough that a chunk's set of touched shards fits in a `u128` mask.
pub(crate) const N_SHARDS: usize = 128;

/// The most changes [`Graph::apply`] applies under one set of shard locks.
///
/// A chunk is atomic to readers, and it stalls the readers of the shards it touches while it
/// runs: 64 changes take ~10-20 µs, a small fraction of the 0.5 ms p99 budget of a query.
pub const APPLY_CHUNK_CHANGES_MAX: usize = 64;

/// In [`Graph::known_followers_batch`]'s cost estimate: what reading one followed account's
/// follows costs (a lock and a cold set), in cold bitmap probes.
const WALK_SET_COST: usize = 2;

/// In the same estimate: probes into a set already in cache that cost as much as a cold one.
const WALK_PROBES_PER_COST: usize = 8;

/// One change to the graph, as ingest derives it from a record create or delete.
///
/// The graph holds relations, not records: a repository may hold two follow records for the
/// same subject, and the caller decides when the relation starts and ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EdgeChange {
    /// `actor` starts following `subject`.
    Follow {
        /// The follower.
        actor: ActorId,
        /// The followed account.
        subject: ActorId,
    },
    /// `actor` stops following `subject`.
    Unfollow {
        /// The follower.
        actor: ActorId,
        /// The followed account.
        subject: ActorId,
    },
    /// `actor` starts blocking `subject`.
    Block {
        /// The blocker.
        actor: ActorId,
        /// The blocked account.
        subject: ActorId,
    },
    /// `actor` stops blocking `subject`.
    Unblock {
        /// The blocker.
        actor: ActorId,
        /// The blocked account.
        subject: ActorId,
    },
    /// The account is deleted: every follow and block from or to it goes.
    RemoveActor(ActorId),
}

/// The answer to "which accounts that `viewer` follows also follow `target`".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownFollowers {
    /// How many there are, always the full count whatever the limit.
    pub count: usize,
    /// The first of them by ascending id, as many as the limit asked for.
    pub ids: SortedIds,
}

/// Blocks between a viewer and one other account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BlockRelation {
    /// The viewer blocks the other account.
    pub blocking: bool,
    /// The other account blocks the viewer.
    pub blocked_by: bool,
}

/// Sizes of the graph and of its sets, for operators and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// One past the largest actor id seen: the size of the id space.
    pub n_actors: u64,
    /// Follow edges.
    pub n_follows: u64,
    /// Block edges.
    pub n_blocks: u64,
    /// Non-empty sets stored packed (following, followers, blocks).
    pub n_array_sets: u64,
    /// Sets stored as roaring bitmaps.
    pub n_bitmap_sets: u64,
    /// Bytes of the packed sets (header, chunk starts and gaps), without allocator overhead.
    pub array_bytes: u64,
    /// Bytes of roaring sets as their portable serialization counts them: 2 per member of an
    /// array container, 8 KiB per bitmap container, 8 per container header.
    pub bitmap_bytes: u64,
    /// Bytes of slots (two set handles per actor), including spare capacity.
    pub slot_bytes: u64,
    /// Bytes of old copies of changed sets in the shards' blocks, until the next compaction.
    pub garbage_bytes: u64,
    /// Bytes of room in the shards' blocks not used yet (at most one block per shard, 256 KiB,
    /// plus the ends of blocks that a set did not fit in).
    pub spare_bytes: u64,
}

/// The result of [`Graph::high_degree`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HighDegree {
    /// Accounts over the follower threshold, with their follower counts.
    pub followed: Vec<(ActorId, usize)>,
    /// Accounts over the following threshold, with how many they follow.
    pub following: Vec<(ActorId, usize)>,
}

/// A shard's lock, padded to its own cache lines so that readers of neighboring shards do not
/// bounce one line between cores.
#[repr(align(128))]
struct PaddedShard(RwLock<Shard>);

/// The follow and block graph over dense actor ids.
///
/// All methods take `&self`: share one `Arc<Graph>` between reader threads and the ingest
/// thread. See the module documentation for what a concurrent reader can observe.
///
/// Self-follows and self-blocks are not relations in Bluesky's sense; the graph ignores them
/// (the update returns `false`).
pub struct Graph {
    /// Exactly [`N_SHARDS`] shards.
    shards: Box<[PaddedShard]>,
    /// Sets above this many members are roaring bitmaps; see [`ARRAY_MEMBERS_MAX`].
    array_members_max: usize,
    /// One past the largest actor id ever given to an update.
    n_actors: AtomicU64,
    /// Updates hold it shared while they apply a chunk; a snapshot holds it exclusively, so
    /// that it sees one moment of the graph. Queries never touch it.
    update_gate: RwLock<()>,
}

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("n_actors", &self.n_actors())
            .field("n_follows", &self.n_follows())
            .field("n_blocks", &self.n_blocks())
            .field("array_members_max", &self.array_members_max)
            .finish()
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::with_array_members_max(0, ARRAY_MEMBERS_MAX)
    }

    /// An empty graph with room for `n_actors` actors' slots, so that loading them does not
    /// regrow the shards.
    pub fn with_capacity(n_actors: usize) -> Graph {
        Graph::with_array_members_max(n_actors, ARRAY_MEMBERS_MAX)
    }

    /// Like [`Graph::with_capacity`], with sets above `array_members_max` members stored as
    /// roaring bitmaps instead of [`ARRAY_MEMBERS_MAX`]. For tests that need big sets on small
    /// graphs, and for tuning.
    pub fn with_array_members_max(n_actors: usize, array_members_max: usize) -> Graph {
        let shards = (0..N_SHARDS)
            .map(|shard_idx| Shard {
                slots: Vec::with_capacity(n_slots(shard_idx, n_actors)),
                ..Shard::default()
            })
            .collect();
        Graph::from_shards(shards, 0, array_members_max)
    }

    /// Wraps shards built in bulk (by the builder or the snapshot reader).
    pub(crate) fn from_shards(
        shards: Vec<Shard>,
        n_actors: u64,
        array_members_max: usize,
    ) -> Graph {
        assert_eq!(shards.len(), N_SHARDS);
        Graph {
            shards: shards
                .into_iter()
                .map(|shard| PaddedShard(RwLock::new(shard)))
                .collect(),
            array_members_max,
            n_actors: AtomicU64::new(n_actors),
            update_gate: RwLock::new(()),
        }
    }

    /// The limit above which sets are roaring bitmaps.
    pub fn array_members_max(&self) -> usize {
        self.array_members_max
    }

    /// One past the largest actor id the graph has seen: ids below it may have edges, ids at
    /// or above it have none.
    pub fn n_actors(&self) -> u64 {
        self.n_actors.load(Ordering::Acquire)
    }

    /// The number of follow edges.
    pub fn n_follows(&self) -> u64 {
        (0..N_SHARDS)
            .map(|shard_idx| self.read(shard_idx).n_follows)
            .sum()
    }

    /// The number of block edges.
    pub fn n_blocks(&self) -> u64 {
        (0..N_SHARDS)
            .map(|shard_idx| self.read(shard_idx).n_blocks)
            .sum()
    }

    /// Counts sets and bytes by representation; walks every set, so it takes a while on a big
    /// graph (about a second at 5.5M actors).
    pub fn stats(&self) -> GraphStats {
        let mut res = GraphStats {
            n_actors: self.n_actors(),
            ..GraphStats::default()
        };
        for shard_idx in 0..N_SHARDS {
            let shard = self.read(shard_idx);
            res.n_follows += shard.n_follows;
            res.n_blocks += shard.n_blocks;
            res.slot_bytes += (shard.slots.capacity() * std::mem::size_of::<Slot>()) as u64;
            res.garbage_bytes += shard.sets.garbage_bytes();
            res.spare_bytes += shard.sets.spare_bytes();
            let follow_sets = shard
                .slots
                .iter()
                .flat_map(|slot| [slot.following, slot.followers]);
            let block_sets = shard
                .blocks
                .values()
                .flat_map(|blocks| [blocks.blocking, blocks.blocked_by]);
            let sets = follow_sets
                .chain(block_sets)
                .filter(|handle| !handle.is_empty());
            for handle in sets {
                let (is_bitmap, bytes) = (handle.is_bitmap(), shard.sets.heap_bytes(handle));
                if is_bitmap {
                    res.n_bitmap_sets += 1;
                    res.bitmap_bytes += bytes;
                } else {
                    res.n_array_sets += 1;
                    res.array_bytes += bytes;
                }
            }
        }
        res
    }

    // ----- Updates -----

    /// `actor` follows `subject`; returns whether the edge is new.
    pub fn follow(&self, actor: ActorId, subject: ActorId) -> bool {
        self.apply_chunk(&[EdgeChange::Follow { actor, subject }]) == 1
    }

    /// `actor` no longer follows `subject`; returns whether the edge existed.
    pub fn unfollow(&self, actor: ActorId, subject: ActorId) -> bool {
        self.apply_chunk(&[EdgeChange::Unfollow { actor, subject }]) == 1
    }

    /// `actor` blocks `subject`; returns whether the block is new.
    pub fn block(&self, actor: ActorId, subject: ActorId) -> bool {
        self.apply_chunk(&[EdgeChange::Block { actor, subject }]) == 1
    }

    /// `actor` no longer blocks `subject`; returns whether the block existed.
    pub fn unblock(&self, actor: ActorId, subject: ActorId) -> bool {
        self.apply_chunk(&[EdgeChange::Unblock { actor, subject }]) == 1
    }

    /// Deletes every follow and block from or to `actor` (account deletion); returns how many
    /// edges went.
    ///
    /// Applied in chunks (see the module documentation): each edge disappears from both of its
    /// sets at once, but a reader may see some of the actor's edges gone and others not yet.
    /// An edge that another thread adds while this runs may survive it.
    pub fn remove_actor(&self, actor: ActorId) -> usize {
        let changes = self.removal_changes(actor);
        changes
            .chunks(APPLY_CHUNK_CHANGES_MAX)
            .map(|chunk| self.apply_chunk(chunk))
            .sum()
    }

    /// Applies `changes` in order; returns how many of them changed the graph.
    ///
    /// Changes go in chunks of at most [`APPLY_CHUNK_CHANGES_MAX`], each atomic to readers.
    /// A `RemoveActor` ends a chunk and is applied as [`Graph::remove_actor`] does. Applying the
    /// same changes twice changes nothing the second time, so ingest can replay from a cursor.
    pub fn apply(&self, changes: &[EdgeChange]) -> usize {
        let mut n_changed = 0;
        let mut rest = changes;
        while let Some((first, tail)) = rest.split_first() {
            if let EdgeChange::RemoveActor(actor) = first {
                n_changed += usize::from(self.remove_actor(*actor) > 0);
                rest = tail;
                continue;
            }
            let chunk_len = rest
                .iter()
                .take(APPLY_CHUNK_CHANGES_MAX)
                .position(|change| matches!(change, EdgeChange::RemoveActor(_)))
                .unwrap_or(rest.len().min(APPLY_CHUNK_CHANGES_MAX));
            let (chunk, tail) = rest.split_at(chunk_len);
            n_changed += self.apply_chunk(chunk);
            rest = tail;
        }
        n_changed
    }

    /// The edge removals that delete `actor`, read under its shard's lock.
    fn removal_changes(&self, actor: ActorId) -> Vec<EdgeChange> {
        let (shard_idx, slot_idx) = locate(actor);
        let shard = self.read(shard_idx);
        let following = shard.following(slot_idx);
        let followers = shard.followers(slot_idx);
        let blocking = shard.blocking(slot_idx);
        let blocked_by = shard.blocked_by(slot_idx);
        let mut res = Vec::with_capacity(
            following.len() + followers.len() + blocking.len() + blocked_by.len(),
        );
        res.extend(following.iter().map(|subject| EdgeChange::Unfollow {
            actor,
            subject: ActorId(subject),
        }));
        res.extend(followers.iter().map(|follower| EdgeChange::Unfollow {
            actor: ActorId(follower),
            subject: actor,
        }));
        res.extend(blocking.iter().map(|subject| EdgeChange::Unblock {
            actor,
            subject: ActorId(subject),
        }));
        res.extend(blocked_by.iter().map(|blocker| EdgeChange::Unblock {
            actor: ActorId(blocker),
            subject: actor,
        }));
        res
    }

    /// Applies a chunk of edge changes (no `RemoveActor`) under the write locks of every shard
    /// it touches, taken in ascending order; returns how many changed the graph.
    fn apply_chunk(&self, chunk: &[EdgeChange]) -> usize {
        debug_assert!(chunk.len() <= APPLY_CHUNK_CHANGES_MAX);
        let mut touched: u128 = 0;
        for change in chunk {
            if let Some((actor, subject)) = edge_ends(change) {
                touched |= 1 << locate(actor).0;
                touched |= 1 << locate(subject).0;
            }
        }
        let _gate = self
            .update_gate
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let mut guards: Vec<RwLockWriteGuard<'_, Shard>> =
            Vec::with_capacity(touched.count_ones() as usize);
        let mut mask = touched;
        while mask != 0 {
            guards.push(self.write(mask.trailing_zeros() as usize));
            mask &= mask - 1;
        }
        let mut n_changed = 0;
        let mut id_max: Option<u32> = None;
        for change in chunk {
            let Some((actor, subject)) = edge_ends(change) else {
                continue;
            };
            if actor == subject {
                continue;
            }
            let Some(mut ends) = Ends::new(&mut guards, touched, actor, subject) else {
                continue;
            };
            let max = self.array_members_max;
            let changed = match change {
                EdgeChange::Follow { .. } => ends.add(EdgeKind::Follow, actor, subject, max),
                EdgeChange::Unfollow { .. } => ends.remove(EdgeKind::Follow, actor, subject, max),
                EdgeChange::Block { .. } => ends.add(EdgeKind::Block, actor, subject, max),
                EdgeChange::Unblock { .. } => ends.remove(EdgeKind::Block, actor, subject, max),
                EdgeChange::RemoveActor(_) => false,
            };
            if changed {
                n_changed += 1;
                id_max = id_max.max(Some(actor.0.max(subject.0)));
            }
        }
        if let Some(id_max) = id_max {
            // Published while the shard locks are still held, so a reader that sees an edge
            // also sees an id space that covers it.
            self.n_actors
                .fetch_max(u64::from(id_max) + 1, Ordering::AcqRel);
        }
        drop(guards);
        n_changed
    }

    // ----- Queries on one actor -----

    /// Whether `actor` follows `subject`.
    pub fn does_follow(&self, actor: ActorId, subject: ActorId) -> bool {
        let (shard_idx, slot_idx) = locate(actor);
        self.read(shard_idx).following(slot_idx).contains(subject.0)
    }

    /// Everyone `actor` follows, ascending. Copies the whole set: for big sets prefer
    /// [`Graph::following_page`].
    pub fn following(&self, actor: ActorId) -> SortedIds {
        self.following_page(actor, None, usize::MAX)
    }

    /// Everyone who follows `actor`, ascending. Copies the whole set: for big sets prefer
    /// [`Graph::followers_page`].
    pub fn followers(&self, actor: ActorId) -> SortedIds {
        self.followers_page(actor, None, usize::MAX)
    }

    /// Up to `limit` accounts `actor` follows with ids above `after` (from the start for
    /// `None`), ascending: pass the last id of a page to get the next.
    pub fn following_page(
        &self,
        actor: ActorId,
        after: Option<ActorId>,
        limit: usize,
    ) -> SortedIds {
        let (shard_idx, slot_idx) = locate(actor);
        let shard = self.read(shard_idx);
        page(shard.following(slot_idx), after, limit)
    }

    /// Up to `limit` followers of `actor` with ids above `after` (from the start for `None`),
    /// ascending: pass the last id of a page to get the next.
    pub fn followers_page(
        &self,
        actor: ActorId,
        after: Option<ActorId>,
        limit: usize,
    ) -> SortedIds {
        let (shard_idx, slot_idx) = locate(actor);
        let shard = self.read(shard_idx);
        page(shard.followers(slot_idx), after, limit)
    }

    /// How many accounts `actor` follows.
    pub fn n_following(&self, actor: ActorId) -> usize {
        let (shard_idx, slot_idx) = locate(actor);
        self.read(shard_idx).following(slot_idx).len()
    }

    /// How many accounts follow `actor`.
    pub fn n_followers(&self, actor: ActorId) -> usize {
        let (shard_idx, slot_idx) = locate(actor);
        self.read(shard_idx).followers(slot_idx).len()
    }

    /// The accounts with more than `followers_over` followers and those following more than
    /// `following_over` accounts, with those counts, ascending by id. One pass over the graph
    /// (about a quarter of a second at 5.5M actors), taking each shard's lock once.
    pub fn high_degree(&self, followers_over: usize, following_over: usize) -> HighDegree {
        let mut res = HighDegree::default();
        for shard_idx in 0..N_SHARDS {
            let shard = self.read(shard_idx);
            for (slot_idx, slot) in shard.slots.iter().enumerate() {
                let Some(id) = actor_at(shard_idx, slot_idx) else {
                    continue;
                };
                let n_followers = shard.sets.get(slot.followers).len();
                if n_followers > followers_over {
                    res.followed.push((ActorId(id), n_followers));
                }
                let n_following = shard.sets.get(slot.following).len();
                if n_following > following_over {
                    res.following.push((ActorId(id), n_following));
                }
            }
        }
        res.followed.sort_unstable();
        res.following.sort_unstable();
        res
    }

    /// The accounts that follow `actor` and that `actor` follows back, ascending.
    pub fn mutuals(&self, actor: ActorId) -> SortedIds {
        let (shard_idx, slot_idx) = locate(actor);
        let shard = self.read(shard_idx);
        let mut ids = Vec::new();
        intersect(
            shard.following(slot_idx),
            shard.followers(slot_idx),
            usize::MAX,
            &mut ids,
        );
        SortedIds::from_ascending(ids.into_iter().map(ActorId).collect())
    }

    /// Whether `actor` blocks `subject` (one direction only).
    pub fn blocks(&self, actor: ActorId, subject: ActorId) -> bool {
        let (shard_idx, slot_idx) = locate(actor);
        self.read(shard_idx).blocking(slot_idx).contains(subject.0)
    }

    /// Everyone `actor` blocks, ascending.
    pub fn blocking(&self, actor: ActorId) -> SortedIds {
        let (shard_idx, slot_idx) = locate(actor);
        self.read(shard_idx).blocking(slot_idx).to_sorted_ids()
    }

    /// Everyone who blocks `actor`, ascending.
    pub fn blocked_by(&self, actor: ActorId) -> SortedIds {
        let (shard_idx, slot_idx) = locate(actor);
        self.read(shard_idx).blocked_by(slot_idx).to_sorted_ids()
    }

    /// For each of `others`, whether `viewer` blocks it and whether it blocks `viewer`, in the
    /// order given. Reads only the viewer's shard, once, so the answers are mutually consistent.
    pub fn block_relationships(&self, viewer: ActorId, others: &[ActorId]) -> Vec<BlockRelation> {
        let (shard_idx, slot_idx) = locate(viewer);
        let shard = self.read(shard_idx);
        let blocking = shard.blocking(slot_idx);
        let blocked_by = shard.blocked_by(slot_idx);
        others
            .iter()
            .map(|other| BlockRelation {
                blocking: blocking.contains(other.0),
                blocked_by: blocked_by.contains(other.0),
            })
            .collect()
    }

    /// For each pair, whether either of the two blocks the other, in the order given.
    pub fn block_pairs(&self, pairs: &[(ActorId, ActorId)]) -> Vec<bool> {
        pairs
            .iter()
            .map(|&(a, b)| {
                let (shard_idx, slot_idx) = locate(a);
                let shard = self.read(shard_idx);
                shard.blocking(slot_idx).contains(b.0) || shard.blocked_by(slot_idx).contains(b.0)
            })
            .collect()
    }

    // ----- Queries on two actors -----

    /// Social proof: the accounts `viewer` follows that follow `target`
    /// (`following(viewer) ∩ followers(target)`), with the full count and the first `limit` ids
    /// (all of them for `None`).
    ///
    /// Iterates the smaller of the two sets and probes the larger; copies neither.
    pub fn known_followers(
        &self,
        viewer: ActorId,
        target: ActorId,
        limit: Option<usize>,
    ) -> KnownFollowers {
        let mut ids = Vec::new();
        let count = self.read_pair(
            viewer,
            target,
            |viewer_shard, viewer_slot, target_shard, target_slot| {
                intersect(
                    viewer_shard.following(viewer_slot),
                    target_shard.followers(target_slot),
                    limit.unwrap_or(usize::MAX),
                    &mut ids,
                )
            },
        );
        KnownFollowers {
            count,
            ids: SortedIds::from_ascending(ids.into_iter().map(ActorId).collect()),
        }
    }

    /// [`Graph::known_followers`] for each of `targets`, in the order given. Each target's answer
    /// is consistent on its own; different targets may see different moments of the graph.
    ///
    /// Two ways to the same answer, whichever touches less memory: probe each target's
    /// followers once per account the viewer follows (one cold bitmap probe per pair), or walk
    /// the viewer's follows once and look the targets up in each one's own follows (one cold
    /// set per followed account, then cheap probes into it).
    pub fn known_followers_batch(
        &self,
        viewer: ActorId,
        targets: &[ActorId],
        limit: Option<usize>,
    ) -> Vec<KnownFollowers> {
        let n_following = self.n_following(viewer);
        let probes: usize = targets
            .iter()
            .map(|&target| n_following.min(self.n_followers(target)))
            .sum();
        let walk = n_following.saturating_mul(WALK_SET_COST + targets.len() / WALK_PROBES_PER_COST);
        if probes <= walk {
            targets
                .iter()
                .map(|&target| self.known_followers(viewer, target, limit))
                .collect()
        } else {
            self.known_followers_by_walk(viewer, targets, limit)
        }
    }

    /// [`Graph::known_followers_batch`] by one walk over the viewer's follows.
    fn known_followers_by_walk(
        &self,
        viewer: ActorId,
        targets: &[ActorId],
        limit: Option<usize>,
    ) -> Vec<KnownFollowers> {
        let limit = limit.unwrap_or(usize::MAX);
        let mut answers: Vec<(usize, Vec<ActorId>)> = vec![(0, Vec::new()); targets.len()];
        // Copied out so that no two shard locks are held at once.
        for followed in self.following(viewer).into_vec() {
            let (shard_idx, slot_idx) = locate(followed);
            let shard = self.read(shard_idx);
            let their_follows = shard.following(slot_idx);
            for (target, (count, ids)) in targets.iter().zip(answers.iter_mut()) {
                if their_follows.contains(target.0) {
                    *count += 1;
                    // The viewer's follows come in ascending order, so the ids do too.
                    if ids.len() < limit {
                        ids.push(followed);
                    }
                }
            }
        }
        answers
            .into_iter()
            .map(|(count, ids)| KnownFollowers {
                count,
                ids: SortedIds::from_ascending(ids),
            })
            .collect()
    }

    // ----- Locks -----

    fn lock(&self, shard_idx: usize) -> &RwLock<Shard> {
        #[allow(clippy::indexing_slicing)] // Every caller reduces the index modulo N_SHARDS.
        &self.shards[shard_idx].0
    }

    /// A shard's read lock. A poisoned lock means a writer panicked on one of our own asserts;
    /// readers go on with the data rather than take the whole service down with it.
    pub(crate) fn read(&self, shard_idx: usize) -> RwLockReadGuard<'_, Shard> {
        self.lock(shard_idx)
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks updates (not queries) until the guard is dropped; taken by the snapshot writer.
    pub(crate) fn pause_updates(&self) -> RwLockWriteGuard<'_, ()> {
        self.update_gate
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, shard_idx: usize) -> RwLockWriteGuard<'_, Shard> {
        self.lock(shard_idx)
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` with the shards of `a` and `b` read-locked together (in ascending order), passing
    /// each actor's shard and slot number.
    fn read_pair<R>(
        &self,
        a: ActorId,
        b: ActorId,
        f: impl FnOnce(&Shard, usize, &Shard, usize) -> R,
    ) -> R {
        let (a_shard_idx, a_slot_idx) = locate(a);
        let (b_shard_idx, b_slot_idx) = locate(b);
        if a_shard_idx == b_shard_idx {
            let shard = self.read(a_shard_idx);
            f(&shard, a_slot_idx, &shard, b_slot_idx)
        } else if a_shard_idx < b_shard_idx {
            let a_shard = self.read(a_shard_idx);
            let b_shard = self.read(b_shard_idx);
            f(&a_shard, a_slot_idx, &b_shard, b_slot_idx)
        } else {
            let b_shard = self.read(b_shard_idx);
            let a_shard = self.read(a_shard_idx);
            f(&a_shard, a_slot_idx, &b_shard, b_slot_idx)
        }
    }
}

impl PartialEq for Graph {
    /// Two graphs are equal when every actor has the same edges; the id space's size, the
    /// representation of each set and the array limit do not matter.
    fn eq(&self, other: &Graph) -> bool {
        let n_actors = self.n_actors().max(other.n_actors());
        (0..n_actors).all(|id| {
            let Ok(id) = u32::try_from(id) else {
                return true;
            };
            let actor = ActorId(id);
            self.following(actor) == other.following(actor)
                && self.followers(actor) == other.followers(actor)
                && self.blocking(actor) == other.blocking(actor)
                && self.blocked_by(actor) == other.blocked_by(actor)
        })
    }
}

/// The two ends of an edge change, or `None` for a `RemoveActor`.
fn edge_ends(change: &EdgeChange) -> Option<(ActorId, ActorId)> {
    match *change {
        EdgeChange::Follow { actor, subject }
        | EdgeChange::Unfollow { actor, subject }
        | EdgeChange::Block { actor, subject }
        | EdgeChange::Unblock { actor, subject } => Some((actor, subject)),
        EdgeChange::RemoveActor(_) => None,
    }
}

/// Copies up to `limit` members above `after` into a `SortedIds`.
fn page(set: SetRef<'_>, after: Option<ActorId>, limit: usize) -> SortedIds {
    let ids = set
        .iter_after(after.map(|id| id.0))
        .take(limit)
        .map(ActorId)
        .collect();
    SortedIds::from_ascending(ids)
}

/// Write access to the shards of both ends of one edge, with each end's slot number.
struct Ends<'g> {
    shards: EndShards<'g>,
    actor_slot_idx: usize,
    subject_slot_idx: usize,
}

enum EndShards<'g> {
    Same(&'g mut Shard),
    Split {
        actor: &'g mut Shard,
        subject: &'g mut Shard,
    },
}

impl<'g> Ends<'g> {
    /// Picks the guards of `actor`'s and `subject`'s shards out of `guards`, which holds the
    /// shards whose bits are set in `touched`, in ascending order.
    fn new(
        guards: &'g mut [RwLockWriteGuard<'_, Shard>],
        touched: u128,
        actor: ActorId,
        subject: ActorId,
    ) -> Option<Ends<'g>> {
        let (actor_shard_idx, actor_slot_idx) = locate(actor);
        let (subject_shard_idx, subject_slot_idx) = locate(subject);
        // A shard's guard sits after the guards of the touched shards below it.
        let guard_idx =
            |shard_idx: usize| (touched & ((1u128 << shard_idx) - 1)).count_ones() as usize;
        let actor_guard_idx = guard_idx(actor_shard_idx);
        let subject_guard_idx = guard_idx(subject_shard_idx);
        let shards = if actor_guard_idx == subject_guard_idx {
            EndShards::Same(&mut **guards.get_mut(actor_guard_idx)?)
        } else {
            let [actor, subject] = guards
                .get_disjoint_mut([actor_guard_idx, subject_guard_idx])
                .ok()?;
            EndShards::Split { actor, subject }
        };
        Some(Ends {
            shards,
            actor_slot_idx,
            subject_slot_idx,
        })
    }

    /// The shard that counts the edge: the actor's.
    fn actor_shard(&mut self) -> &mut Shard {
        match &mut self.shards {
            EndShards::Same(shard) => shard,
            EndShards::Split { actor, .. } => actor,
        }
    }

    /// The shard of the edge's subject.
    fn subject_shard(&mut self) -> &mut Shard {
        match &mut self.shards {
            EndShards::Same(shard) => shard,
            EndShards::Split { subject, .. } => subject,
        }
    }

    /// Adds the edge to both of its sets; returns whether it is new.
    fn add(&mut self, kind: EdgeKind, actor: ActorId, subject: ActorId, max: usize) -> bool {
        let (forward, reverse) = kind.directions();
        let (a, b) = (self.actor_slot_idx, self.subject_slot_idx);
        if !self.actor_shard().insert(a, forward, subject.0, max) {
            return false;
        }
        let inserted = self.subject_shard().insert(b, reverse, actor.0, max);
        assert!(
            inserted,
            "{reverse:?} of {subject} already held {actor}, {forward:?} did not"
        );
        *self.actor_shard().n_edges_mut(kind) += 1;
        true
    }

    /// Removes the edge from both of its sets; returns whether it existed.
    fn remove(&mut self, kind: EdgeKind, actor: ActorId, subject: ActorId, max: usize) -> bool {
        let (forward, reverse) = kind.directions();
        let (a, b) = (self.actor_slot_idx, self.subject_slot_idx);
        if !self.actor_shard().remove(a, forward, subject.0, max) {
            return false;
        }
        let removed = self.subject_shard().remove(b, reverse, actor.0, max);
        assert!(
            removed,
            "{reverse:?} of {subject} lacked {actor}, {forward:?} held it"
        );
        *self.actor_shard().n_edges_mut(kind) -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use starling_core::sample::SplitMix64;

    // Checks both ways of answering a batch of known-follower questions against a naive
    // recount (follows of the viewer that follow the target, from the list of edges), on a
    // random graph with a few very popular accounts, for batches of 1 to 40 targets and
    // limits of 0, 3 and none.
    #[test]
    fn known_followers_by_walk_and_by_probe_agree_with_a_recount() {
        let n = 300u32;
        let mut rng = SplitMix64::new(5);
        let mut edges = std::collections::BTreeSet::new();
        for _ in 0..6_000 {
            let actor = rng.below(u64::from(n)) as u32;
            // A third of follows go to the first ten accounts.
            let subject = if rng.below(3) == 0 {
                rng.below(10) as u32
            } else {
                rng.below(u64::from(n)) as u32
            };
            if actor != subject {
                edges.insert((actor, subject));
            }
        }
        let graph = Graph::with_array_members_max(0, 16);
        for &(actor, subject) in &edges {
            graph.follow(ActorId(actor), ActorId(subject));
        }
        for round in 0..60u32 {
            let viewer = ActorId(rng.below(u64::from(n)) as u32);
            let targets: Vec<ActorId> = (0..=round % 40)
                .map(|_| ActorId(rng.below(u64::from(n)) as u32))
                .collect();
            for limit in [Some(0), Some(3), None] {
                let walked = graph.known_followers_by_walk(viewer, &targets, limit);
                let probed: Vec<KnownFollowers> = targets
                    .iter()
                    .map(|&target| graph.known_followers(viewer, target, limit))
                    .collect();
                let chosen = graph.known_followers_batch(viewer, &targets, limit);
                for (idx, target) in targets.iter().enumerate() {
                    let expected: Vec<ActorId> = edges
                        .iter()
                        .filter(|&&(actor, followed)| {
                            actor == viewer.0 && edges.contains(&(followed, target.0))
                        })
                        .map(|&(_, followed)| ActorId(followed))
                        .collect();
                    let shown = &expected[..expected.len().min(limit.unwrap_or(usize::MAX))];
                    for (way, answer) in [("walk", &walked), ("probe", &probed), ("batch", &chosen)]
                    {
                        assert_eq!(
                            answer[idx].count,
                            expected.len(),
                            "{way} {viewer:?} {target:?}"
                        );
                        assert_eq!(
                            answer[idx].ids.as_slice(),
                            shown,
                            "{way} {viewer:?} {target:?}"
                        );
                    }
                }
            }
        }
    }
}
