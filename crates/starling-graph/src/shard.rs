//! One shard of the graph: the slots of the actors dealt to it, their block slots, and the
//! arena their sets live in; and where an actor's id puts it (see `graph.rs` for why ids are
//! dealt in blocks).

use rustc_hash::FxHashMap;
use starling_core::ActorId;

use crate::arena::{SetArena, SetHandle};
use crate::graph::N_SHARDS;
use crate::set::SetRef;

/// An actor's follow sets, as handles into its shard's [`SetArena`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Slot {
    pub(crate) following: SetHandle,
    pub(crate) followers: SetHandle,
}

/// An actor's block sets, for the few actors that have any, as handles into its shard's
/// [`SetArena`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BlockSlot {
    pub(crate) blocking: SetHandle,
    pub(crate) blocked_by: SetHandle,
}

impl BlockSlot {
    pub(crate) fn is_empty(self) -> bool {
        self.blocking.is_empty() && self.blocked_by.is_empty()
    }
}

/// One of an actor's four sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Following,
    Followers,
    Blocking,
    BlockedBy,
}

/// The two kinds of edge, each stored in two directions.
#[derive(Clone, Copy, Debug)]
pub(crate) enum EdgeKind {
    Follow,
    Block,
}

impl EdgeKind {
    /// The set of the edge's actor that holds the subject, and the subject's that holds the
    /// actor.
    pub(crate) fn directions(self) -> (Direction, Direction) {
        match self {
            EdgeKind::Follow => (Direction::Following, Direction::Followers),
            EdgeKind::Block => (Direction::Blocking, Direction::BlockedBy),
        }
    }
}

/// The actors of the id blocks dealt to this shard (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Shard {
    /// Indexed by slot number (see [`locate`]); may end before the id space does.
    pub(crate) slots: Vec<Slot>,
    /// The sets the slots and block slots point into.
    pub(crate) sets: SetArena,
    /// Keyed by slot number; only actors with at least one block in either direction.
    pub(crate) blocks: FxHashMap<u32, BlockSlot>,
    /// Follow edges whose follower lives in this shard, so that summing shards counts each edge
    /// once.
    pub(crate) n_follows: u64,
    /// Block edges whose blocker lives in this shard.
    pub(crate) n_blocks: u64,
}

/// The handle of one set of slot `slot_idx`: `None` for a follow set of a slot past the end,
/// while a block set's slot is created.
fn handle_mut<'s>(
    slots: &'s mut [Slot],
    blocks: &'s mut FxHashMap<u32, BlockSlot>,
    slot_idx: usize,
    direction: Direction,
) -> Option<&'s mut SetHandle> {
    match direction {
        Direction::Following => slots.get_mut(slot_idx).map(|slot| &mut slot.following),
        Direction::Followers => slots.get_mut(slot_idx).map(|slot| &mut slot.followers),
        Direction::Blocking => Some(&mut blocks.entry(block_key(slot_idx)?).or_default().blocking),
        Direction::BlockedBy => {
            Some(&mut blocks.entry(block_key(slot_idx)?).or_default().blocked_by)
        }
    }
}

impl Shard {
    pub(crate) fn following(&self, slot_idx: usize) -> SetRef<'_> {
        self.slots
            .get(slot_idx)
            .map_or(SetRef::EMPTY, |slot| self.sets.get(slot.following))
    }

    pub(crate) fn followers(&self, slot_idx: usize) -> SetRef<'_> {
        self.slots
            .get(slot_idx)
            .map_or(SetRef::EMPTY, |slot| self.sets.get(slot.followers))
    }

    pub(crate) fn blocking(&self, slot_idx: usize) -> SetRef<'_> {
        block_key(slot_idx)
            .and_then(|key| self.blocks.get(&key))
            .map_or(SetRef::EMPTY, |blocks| self.sets.get(blocks.blocking))
    }

    pub(crate) fn blocked_by(&self, slot_idx: usize) -> SetRef<'_> {
        block_key(slot_idx)
            .and_then(|key| self.blocks.get(&key))
            .map_or(SetRef::EMPTY, |blocks| self.sets.get(blocks.blocked_by))
    }

    /// Adds `id` to one set of slot `slot_idx`, creating the slot; returns whether it was
    /// absent.
    pub(crate) fn insert(
        &mut self,
        slot_idx: usize,
        direction: Direction,
        id: u32,
        array_members_max: usize,
    ) -> bool {
        if matches!(direction, Direction::Following | Direction::Followers) {
            self.ensure_slot(slot_idx);
        }
        let Some(handle) = handle_mut(&mut self.slots, &mut self.blocks, slot_idx, direction)
        else {
            return false;
        };
        let inserted = self.sets.insert(handle, id, array_members_max);
        self.compact_if_wanted();
        inserted
    }

    /// Removes `id` from one set of slot `slot_idx`; returns whether it was present.
    pub(crate) fn remove(
        &mut self,
        slot_idx: usize,
        direction: Direction,
        id: u32,
        array_members_max: usize,
    ) -> bool {
        let removed = match handle_mut(&mut self.slots, &mut self.blocks, slot_idx, direction) {
            Some(handle) => self.sets.remove(handle, id, array_members_max),
            None => false,
        };
        // The block map holds only actors with blocks.
        if matches!(direction, Direction::Blocking | Direction::BlockedBy)
            && let Some(key) = block_key(slot_idx)
            && self
                .blocks
                .get(&key)
                .is_some_and(|blocks| blocks.is_empty())
        {
            self.blocks.remove(&key);
        }
        self.compact_if_wanted();
        removed
    }

    /// The count of edges of `kind` whose actor lives in this shard.
    pub(crate) fn n_edges_mut(&mut self, kind: EdgeKind) -> &mut u64 {
        match kind {
            EdgeKind::Follow => &mut self.n_follows,
            EdgeKind::Block => &mut self.n_blocks,
        }
    }

    /// Compacts the arena once its garbage has passed its share.
    fn compact_if_wanted(&mut self) {
        if self.sets.wants_compaction() {
            let follow_sets = self
                .slots
                .iter_mut()
                .flat_map(|slot| [&mut slot.following, &mut slot.followers]);
            let block_sets = self
                .blocks
                .values_mut()
                .flat_map(|blocks| [&mut blocks.blocking, &mut blocks.blocked_by]);
            self.sets.compact(follow_sets.chain(block_sets));
        }
    }

    /// Makes sure slot `slot_idx` exists, growing by a quarter at a time so that a shard grown
    /// by live ingest wastes at most ~25% of its slot memory.
    fn ensure_slot(&mut self, slot_idx: usize) {
        if self.slots.len() <= slot_idx {
            let additional = (slot_idx + 1 - self.slots.len()).max(self.slots.len() / 4 + 16);
            self.slots.reserve_exact(additional);
            self.slots.resize_with(slot_idx + 1, Slot::default);
        }
    }
}

/// The key of a slot in `Shard::blocks`; slot numbers are below the `u32` id they come from,
/// so they always fit.
fn block_key(slot_idx: usize) -> Option<u32> {
    u32::try_from(slot_idx).ok()
}

/// How many consecutive ids go to one shard before the next shard's turn.
pub(crate) const BLOCK_IDS: usize = 1024;

/// Where an actor lives: its shard and its slot number in that shard.
#[inline]
pub(crate) fn locate(actor: ActorId) -> (usize, usize) {
    locate_index(actor.0 as usize)
}

/// [`locate`] for an id held as an index.
#[inline]
pub(crate) fn locate_index(id: usize) -> (usize, usize) {
    let block = id / BLOCK_IDS;
    (
        block % N_SHARDS,
        (block / N_SHARDS) * BLOCK_IDS + id % BLOCK_IDS,
    )
}

/// The id of the actor at `slot_idx` of shard `shard_idx`; the inverse of [`locate`].
#[inline]
pub(crate) fn actor_at(shard_idx: usize, slot_idx: usize) -> Option<u32> {
    let block = (slot_idx / BLOCK_IDS) * N_SHARDS + shard_idx;
    u32::try_from(block * BLOCK_IDS + slot_idx % BLOCK_IDS).ok()
}

/// How many of the ids `0..n_actors` live in shard `shard_idx`.
pub(crate) fn n_slots(shard_idx: usize, n_actors: usize) -> usize {
    let round_ids = BLOCK_IDS * N_SHARDS;
    let in_last_round = (n_actors % round_ids).saturating_sub(shard_idx * BLOCK_IDS);
    n_actors / round_ids * BLOCK_IDS + in_last_round.min(BLOCK_IDS)
}
