//! Bulk loading: building a whole graph from a list of edges, and rebuilding the reverse
//! direction (followers, blocked-by) from the forward one.
//!
//! Inserting 160M edges one by one would copy each growing array on every insert; instead the
//! builder groups edges by source with a counting sort, sorts each source's targets once, and
//! derives every reverse set in one transposition pass. (Snapshots store both directions
//! instead: see `snapshot.rs` for why.)

use starling_core::ActorId;

use crate::graph::{Graph, N_SHARDS};
use crate::set::{ARRAY_MEMBERS_MAX, SetRef};
use crate::shard::{BlockSlot, Shard, Slot, actor_at, locate_index, n_slots};

/// Collects follow and block edges in any order, with duplicates and self-edges allowed, and
/// builds a [`Graph`] from them in one pass.
///
/// Memory while building, on top of the graph being built: 8 bytes per edge collected, 4 per
/// edge for the targets grouped by source, then 8 per edge for the transposition.
#[derive(Debug, Default)]
pub struct GraphBuilder {
    follows: Vec<(u32, u32)>,
    blocks: Vec<(u32, u32)>,
    array_members_max: Option<usize>,
}

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// An empty builder with room for `n_follows` follow edges.
    pub fn with_capacity(n_follows: usize) -> GraphBuilder {
        GraphBuilder {
            follows: Vec::with_capacity(n_follows),
            ..GraphBuilder::default()
        }
    }

    /// Builds sets above `array_members_max` members as roaring bitmaps instead of above
    /// [`ARRAY_MEMBERS_MAX`]; see [`Graph::with_array_members_max`].
    pub fn array_members_max(mut self, array_members_max: usize) -> GraphBuilder {
        self.array_members_max = Some(array_members_max);
        self
    }

    /// Adds `actor` follows `subject`. Duplicates collapse and self-follows are dropped.
    pub fn follow(&mut self, actor: ActorId, subject: ActorId) {
        self.follows.push((actor.0, subject.0));
    }

    /// Adds `actor` blocks `subject`. Duplicates collapse and self-blocks are dropped.
    pub fn block(&mut self, actor: ActorId, subject: ActorId) {
        self.blocks.push((actor.0, subject.0));
    }

    /// Builds the graph. Its id space covers the largest id of any edge added.
    pub fn build(self) -> Graph {
        let array_members_max = self.array_members_max.unwrap_or(ARRAY_MEMBERS_MAX);
        let id_max = self
            .follows
            .iter()
            .chain(&self.blocks)
            .map(|&(a, b)| a.max(b))
            .max();
        let n_actors = id_max.map_or(0, |id| id as usize + 1);

        let mut following = group_by_source(self.follows, n_actors);
        let mut shards = empty_shards(n_actors);
        let mut scratch = Vec::new();
        for (shard_idx, slot_idx, targets) in following.iter_actors() {
            let ids = sorted_ids(targets, actor_at(shard_idx, slot_idx), &mut scratch);
            push_following(&mut shards, shard_idx, ids, array_members_max);
        }
        drop(following);
        fill_followers(&mut shards, n_actors, array_members_max);

        let mut blocking = group_by_source(self.blocks, n_actors);
        for (shard_idx, slot_idx, targets) in blocking.iter_actors() {
            let ids = sorted_ids(targets, actor_at(shard_idx, slot_idx), &mut scratch);
            set_blocking(&mut shards, shard_idx, slot_idx, ids, array_members_max);
        }
        drop(blocking);
        fill_blocked_by(&mut shards, n_actors, array_members_max);

        Graph::from_shards(shards, n_actors as u64, array_members_max)
    }
}

impl Graph {
    /// Builds a graph from follow edges in any order; see [`GraphBuilder`].
    pub fn from_follows(follows: impl IntoIterator<Item = (ActorId, ActorId)>) -> Graph {
        let follows = follows.into_iter();
        let mut builder = GraphBuilder::with_capacity(follows.size_hint().0);
        for (actor, subject) in follows {
            builder.follow(actor, subject);
        }
        builder.build()
    }
}

/// [`N_SHARDS`] empty shards with room for `n_actors` slots between them.
pub(crate) fn empty_shards(n_actors: usize) -> Vec<Shard> {
    (0..N_SHARDS)
        .map(|shard_idx| Shard {
            slots: Vec::with_capacity(n_slots(shard_idx, n_actors)),
            ..Shard::default()
        })
        .collect()
}

/// Appends the next actor's slot, with its following set, to its shard. Actors must come in
/// ascending id order, which fills every shard's slots in order.
fn push_following(shards: &mut [Shard], shard_idx: usize, ids: &[u32], array_members_max: usize) {
    if let Some(shard) = shards.get_mut(shard_idx) {
        shard.n_follows += ids.len() as u64;
        let following = shard.sets.store(ids, array_members_max);
        shard.slots.push(Slot {
            following,
            ..Slot::default()
        });
    }
}

/// Sets an actor's blocking set, if it has any blocks.
fn set_blocking(
    shards: &mut [Shard],
    shard_idx: usize,
    slot_idx: usize,
    ids: &[u32],
    array_members_max: usize,
) {
    let (Some(shard), Ok(key)) = (shards.get_mut(shard_idx), u32::try_from(slot_idx)) else {
        return;
    };
    if ids.is_empty() {
        return;
    }
    shard.n_blocks += ids.len() as u64;
    let blocking = shard.sets.store(ids, array_members_max);
    shard.blocks.insert(
        key,
        BlockSlot {
            blocking,
            ..BlockSlot::default()
        },
    );
}

/// Sorts and deduplicates `targets` into `scratch` and drops `actor` itself.
fn sorted_ids<'s>(targets: &mut [u32], actor: Option<u32>, scratch: &'s mut Vec<u32>) -> &'s [u32] {
    targets.sort_unstable();
    scratch.clear();
    scratch.extend_from_slice(targets);
    scratch.dedup();
    if let Some(actor) = actor {
        scratch.retain(|&target| target != actor);
    }
    scratch
}

/// Edges grouped by source: compressed sparse rows, `targets[ends[id - 1]..ends[id]]`.
struct Csr {
    /// `ends[id]` is one past the last target of `id`.
    ends: Vec<usize>,
    targets: Vec<u32>,
}

impl Csr {
    /// Every actor in ascending id order with its shard, slot number and mutable targets.
    fn iter_actors(&mut self) -> impl Iterator<Item = (usize, usize, &mut [u32])> {
        let mut rest: &mut [u32] = &mut self.targets;
        let mut start = 0;
        self.ends.iter().enumerate().map(move |(id, &end)| {
            let (segment, tail) = std::mem::take(&mut rest).split_at_mut(end - start);
            rest = tail;
            start = end;
            let (shard_idx, slot_idx) = locate_index(id);
            (shard_idx, slot_idx, segment)
        })
    }
}

/// Groups edges by source with a counting sort: two passes, no comparison sort of all edges.
fn group_by_source(edges: Vec<(u32, u32)>, n_actors: usize) -> Csr {
    let mut ends = vec![0usize; n_actors];
    for &(source, _) in &edges {
        if let Some(count) = ends.get_mut(source as usize) {
            *count += 1;
        }
    }
    // Turn counts into start offsets; placing each edge then advances its source's offset to
    // the end of its segment.
    let mut total = 0;
    for count_or_start in &mut ends {
        let count = *count_or_start;
        *count_or_start = total;
        total += count;
    }
    let mut targets = vec![0u32; total];
    for (source, target) in edges {
        if let Some(next) = ends.get_mut(source as usize) {
            if let Some(slot) = targets.get_mut(*next) {
                *slot = target;
            }
            *next += 1;
        }
    }
    Csr { ends, targets }
}

/// Reverse edges grouped by the shard of their target: each `u64` is the target's slot number
/// in the high half and the source id in the low half; within a group, sources ascend.
///
/// Why group by shard first: placing 160M edges straight into their final position is one
/// random write each into ~640 MB, a cache miss per edge. Appending to one of [`N_SHARDS`]
/// groups writes [`N_SHARDS`] sequential streams instead, and each group, a few MB, is then
/// sorted into place in cache.
struct ByTargetShard {
    /// `ends[shard]` is one past the last edge of that shard's group.
    ends: Vec<usize>,
    edges: Vec<u64>,
}

impl ByTargetShard {
    /// Groups the edges `source -> target` for every `target` in `out_set(source)`. Visiting
    /// sources in ascending order keeps each group's sources ascending.
    fn new<'s>(n_actors: usize, out_set: impl Fn(usize) -> SetRef<'s>) -> ByTargetShard {
        let mut ends = vec![0usize; N_SHARDS];
        for source in 0..n_actors {
            for target in out_set(source).iter() {
                if let Some(count) = ends.get_mut(locate_index(target as usize).0) {
                    *count += 1;
                }
            }
        }
        let mut total = 0;
        for count_or_start in &mut ends {
            let count = *count_or_start;
            *count_or_start = total;
            total += count;
        }
        let mut edges = vec![0u64; total];
        for source in 0..n_actors {
            let Ok(source_id) = u32::try_from(source) else {
                break;
            };
            for target in out_set(source).iter() {
                let (shard_idx, slot_idx) = locate_index(target as usize);
                if let Some(next) = ends.get_mut(shard_idx) {
                    if let Some(edge) = edges.get_mut(*next) {
                        *edge = (slot_idx as u64) << 32 | u64::from(source_id);
                    }
                    *next += 1;
                }
            }
        }
        ByTargetShard { ends, edges }
    }

    /// The group of shard `shard_idx`.
    fn group(&self, shard_idx: usize) -> &[u64] {
        let start = match shard_idx.checked_sub(1) {
            Some(previous) => self.ends.get(previous).copied().unwrap_or(0),
            None => 0,
        };
        let end = self.ends.get(shard_idx).copied().unwrap_or(start);
        self.edges.get(start..end).unwrap_or_default()
    }
}

/// Buffers reused from one shard's group to the next, so that regrouping does not free and
/// reallocate megabytes per shard.
#[derive(Default)]
struct RegroupScratch {
    starts: Vec<usize>,
    next: Vec<usize>,
    sources: Vec<u32>,
}

/// Sorts one shard's group by target slot (stable, so sources stay ascending) and hands each
/// slot's sources to `store`, for slots `0..n_slots`.
fn for_each_reverse_set(
    group: &[u64],
    n_slots: usize,
    scratch: &mut RegroupScratch,
    mut store: impl FnMut(usize, &[u32]),
) {
    let RegroupScratch {
        starts,
        next,
        sources,
    } = scratch;
    starts.clear();
    starts.resize(n_slots + 1, 0);
    for &edge in group {
        if let Some(count) = starts.get_mut((edge >> 32) as usize + 1) {
            *count += 1;
        }
    }
    let mut total = 0;
    for start in starts.iter_mut() {
        total += *start;
        *start = total;
    }
    next.clear();
    next.extend_from_slice(starts);
    sources.clear();
    sources.resize(group.len(), 0);
    for &edge in group {
        if let Some(position) = next.get_mut((edge >> 32) as usize) {
            if let Some(source) = sources.get_mut(*position) {
                *source = edge as u32;
            }
            *position += 1;
        }
    }
    for (slot_idx, bounds) in starts.windows(2).enumerate() {
        if let [start, end] = *bounds {
            store(slot_idx, sources.get(start..end).unwrap_or_default());
        }
    }
}

/// Fills every actor's followers set from all following sets. Every id below `n_actors` must
/// have a slot.
fn fill_followers(shards: &mut [Shard], n_actors: usize, array_members_max: usize) {
    let grouped = {
        let shards: &[Shard] = shards;
        ByTargetShard::new(n_actors, |id| {
            let (shard_idx, slot_idx) = locate_index(id);
            match shards.get(shard_idx) {
                Some(shard) => shard.following(slot_idx),
                None => SetRef::EMPTY,
            }
        })
    };
    let mut scratch = RegroupScratch::default();
    for (shard_idx, shard) in shards.iter_mut().enumerate() {
        let n_slots = shard.slots.len();
        for_each_reverse_set(
            grouped.group(shard_idx),
            n_slots,
            &mut scratch,
            |slot_idx, sources| {
                let followers = shard.sets.store(sources, array_members_max);
                if let Some(slot) = shard.slots.get_mut(slot_idx) {
                    slot.followers = followers;
                }
            },
        );
    }
}

/// Fills every actor's blocked-by set from all blocking sets.
fn fill_blocked_by(shards: &mut [Shard], n_actors: usize, array_members_max: usize) {
    if shards.iter().all(|shard| shard.blocks.is_empty()) {
        return;
    }
    let grouped = {
        let shards: &[Shard] = shards;
        ByTargetShard::new(n_actors, |id| {
            let (shard_idx, slot_idx) = locate_index(id);
            match shards.get(shard_idx) {
                Some(shard) => shard.blocking(slot_idx),
                None => SetRef::EMPTY,
            }
        })
    };
    let mut scratch = RegroupScratch::default();
    for (shard_idx, shard) in shards.iter_mut().enumerate() {
        let n_slots = n_slots(shard_idx, n_actors);
        for_each_reverse_set(
            grouped.group(shard_idx),
            n_slots,
            &mut scratch,
            |slot_idx, sources| {
                if let (false, Ok(key)) = (sources.is_empty(), u32::try_from(slot_idx)) {
                    let blocked_by = shard.sets.store(sources, array_members_max);
                    shard.blocks.entry(key).or_default().blocked_by = blocked_by;
                }
            },
        );
    }
}
