//! The index from a DID's hash to its actor id, one cache line per lookup.
//!
//! Why not a general hash table: a lookup there reads a control byte, then the bucket holding
//! the id, then the DID to compare, each in its own cache line; at millions of actors each is a
//! miss, and they were most of the DID lookups that the counts RPCs make per URI. Here an entry
//! holds 31 bits of the hash beside the id, eight entries to a cache line, so a lookup reads one
//! line and then the one DID whose hash bits match. Actors are never removed, which keeps the
//! probing simple: a group with an empty entry ends every probe that reaches it.

use starling_core::ActorId;

/// Entries per group: eight `u64`s, one cache line.
const GROUP_LEN: usize = 8;

/// One cache line of entries. An entry is `tag << 32 | id`, where the tag is the hash's high
/// 32 bits with the lowest set, so no entry is 0, which marks an empty one. Entries fill a group
/// from its start.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Group([u64; GROUP_LEN]);

/// The most entries an index of `groups` groups holds before it grows: seven in eight.
fn capacity_of(groups: usize) -> usize {
    groups * GROUP_LEN / 8 * 7
}

/// The groups that hold `n` entries with room for a quarter more: seven in ten entries used,
/// so that a probe for a DID never interned soon meets an empty entry.
fn groups_for(n: usize) -> usize {
    (n + n / 4).div_ceil(GROUP_LEN * 7 / 8).max(1)
}

/// The group of `groups` where a probe for `hash` starts: its low 32 bits scaled to the number
/// of groups, which need not be a power of two.
fn home_of(hash: u64, groups: usize) -> usize {
    (((hash & 0xffff_ffff) * groups as u64) >> 32) as usize
}

fn tag_of(hash: u64) -> u64 {
    (hash >> 32) | 1
}

/// Actor ids found by their DID's hash. The caller says which candidate is the DID asked for.
#[derive(Default)]
pub(crate) struct DidIndex {
    groups: Vec<Group>,
    len: usize,
}

impl DidIndex {
    /// An index with room for `n` entries.
    pub(crate) fn with_capacity(n: usize) -> DidIndex {
        DidIndex {
            groups: vec![Group::default(); groups_for(n)],
            len: 0,
        }
    }

    /// The groups a probe for `hash` visits: its home group, then each next one, wrapping
    /// past the last (without a division per step).
    fn probe(&self, hash: u64) -> impl Iterator<Item = usize> + use<> {
        let n = self.groups.len();
        let home = home_of(hash, n);
        (home..n).chain(0..home)
    }

    /// The id under `hash` that `is_it` accepts, if any.
    pub(crate) fn find(
        &self,
        hash: u64,
        mut is_it: impl FnMut(ActorId) -> bool,
    ) -> Option<ActorId> {
        let tag = tag_of(hash);
        for at in self.probe(hash) {
            let group = self.groups.get(at)?;
            for &entry in &group.0 {
                if entry == 0 {
                    return None;
                }
                let id = ActorId(entry as u32);
                if entry >> 32 == tag && is_it(id) {
                    return Some(id);
                }
            }
        }
        None
    }

    /// Adds `id` under `hash`; the caller knows it is not there yet. `rehash` gives the hash of
    /// an id already held, for when the index grows.
    pub(crate) fn insert_unique(
        &mut self,
        hash: u64,
        id: ActorId,
        rehash: impl Fn(ActorId) -> u64,
    ) {
        if self.len >= capacity_of(self.groups.len()) {
            self.grow(rehash);
        }
        self.place(hash, id);
    }

    fn place(&mut self, hash: u64, id: ActorId) {
        let entry = tag_of(hash) << 32 | u64::from(id.0);
        for at in self.probe(hash) {
            let Some(group) = self.groups.get_mut(at) else {
                break;
            };
            if let Some(free) = group.0.iter_mut().find(|entry| **entry == 0) {
                *free = entry;
                self.len += 1;
                return;
            }
        }
        unreachable!("an index below seven in eight full has a free entry");
    }

    /// Half as many groups again (at least one more), every entry placed anew.
    fn grow(&mut self, rehash: impl Fn(ActorId) -> u64) {
        let old = std::mem::take(&mut self.groups);
        self.groups = vec![Group::default(); old.len() + (old.len() / 2).max(1)];
        self.len = 0;
        let ids = old
            .iter()
            .flat_map(|group| group.0)
            .filter(|&entry| entry != 0);
        for entry in ids {
            let id = ActorId(entry as u32);
            self.place(rehash(id), id);
        }
    }

    /// An index of `entries`, placed in the order of the groups their probes start at, so that
    /// building it walks the groups once instead of landing in a random one for each entry.
    pub(crate) fn build(mut entries: Vec<(u64, ActorId)>) -> DidIndex {
        let mut index = DidIndex::with_capacity(entries.len());
        let n = index.groups.len();
        entries.sort_unstable_by_key(|&(hash, _)| home_of(hash, n));
        for (hash, id) in entries {
            index.place(hash, id);
        }
        index
    }

    /// Bytes the index holds.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.groups.len() * size_of::<Group>()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::HashMap;

    use super::*;

    /// A hash for `key` whose tag has `tag_bits` bits that vary and whose home group is one of
    /// `homes`, so that tags and homes collide as often as asked.
    fn hash_of(key: u64, tag_bits: u32, homes: u64) -> u64 {
        let mixed = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let tag = mixed.rotate_left(17) & (u64::MAX >> (64 - tag_bits));
        // The last of the homes is the last group, so that probes from it wrap to the first.
        let home = ((mixed >> 7) % homes + 1) * ((1 << 32) / homes) - 1;
        tag << 32 | home
    }

    /// Keys inserted one at a time, and the same keys built at once, are found as a map finds
    /// them, and keys never inserted are not: with tags that collide, homes that crowd a few
    /// groups (probes running on and wrapping past the last group), and neither.
    #[test]
    fn an_index_finds_what_a_map_holds() {
        for (n_keys, tag_bits, homes) in
            [(20_000, 2, 1 << 32), (3_000, 32, 5), (20_000, 32, 1 << 32)]
        {
            let hash = |key: u64| hash_of(key, tag_bits, homes);
            let keys: Vec<u64> = (0..n_keys).map(|n| n * 7 + 1).collect();
            let mut model = HashMap::new();
            let mut index = DidIndex::default();
            for (n, &key) in keys.iter().enumerate() {
                let id = ActorId(n as u32);
                model.insert(key, id);
                index.insert_unique(hash(key), id, |id| hash(keys[id.0 as usize]));
            }
            let built = DidIndex::build(model.iter().map(|(&key, &id)| (hash(key), id)).collect());
            for index in [&index, &built] {
                for probe in 0..n_keys * 8 {
                    let found = index.find(hash(probe), |id| keys[id.0 as usize] == probe);
                    assert_eq!(
                        found,
                        model.get(&probe).copied(),
                        "key {probe}, {tag_bits} bits"
                    );
                }
            }
        }
    }

    /// Built at once, the index costs twelve bytes an entry or less.
    #[test]
    fn a_built_index_is_small() {
        let n = 1_000_000;
        let index = DidIndex::build(
            (0..n)
                .map(|k| (hash_of(k, 32, 1 << 32), ActorId(k as u32)))
                .collect(),
        );
        assert!(index.bytes() <= 12 * n as usize, "{} bytes", index.bytes());
    }
}
