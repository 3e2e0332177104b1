//! The in-memory actor table: DID interning and per-actor state, loaded at open.
//!
//! Every DID Starling sees (as an author or as a subject) gets a dense [`ActorId`] in order of
//! first sight; ids are never reused. The table is the source of ids for the graph.

use std::hash::{BuildHasher, Hasher};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use starling_core::ActorId;
use starling_core::jetstream::AccountStatus;

use crate::StoreError;

/// Per-actor state kept in memory and in the `actors` keyspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActorState {
    /// Hosting status from the newest account event.
    pub status: u8,
    /// Whether the actor authored an applied event (counted in `actors`).
    pub counted: bool,
    /// The relay sequence of the newest identity event applied.
    pub identity_seq: u64,
    /// The relay sequence of the newest account event applied.
    pub account_seq: u64,
    /// The handle from the newest identity event.
    pub handle: Option<Box<str>>,
}

impl ActorState {
    /// The hosting status.
    pub fn status(&self) -> AccountStatus {
        AccountStatus::from_code(self.status)
    }

    /// Encodes the row: `[status][counted][identity_seq][account_seq][handle]`.
    pub fn encode(&self) -> Vec<u8> {
        let handle = self.handle.as_deref().unwrap_or("");
        let mut out = Vec::with_capacity(18 + handle.len());
        out.push(self.status);
        out.push(u8::from(self.counted));
        out.extend_from_slice(&self.identity_seq.to_be_bytes());
        out.extend_from_slice(&self.account_seq.to_be_bytes());
        out.extend_from_slice(handle.as_bytes());
        out
    }

    /// Decodes a row written by [`ActorState::encode`].
    pub fn decode(bytes: &[u8]) -> Result<ActorState, StoreError> {
        let corrupt = || StoreError::corrupt("actor row", &[]);
        let (&status, rest) = bytes.split_first().ok_or_else(corrupt)?;
        let (&counted, rest) = rest.split_first().ok_or_else(corrupt)?;
        let (identity, rest) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
        let (account, handle) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
        let handle = std::str::from_utf8(handle).map_err(|_| corrupt())?;
        Ok(ActorState {
            status,
            counted: counted != 0,
            identity_seq: u64::from_be_bytes(*identity),
            account_seq: u64::from_be_bytes(*account),
            handle: (!handle.is_empty()).then(|| handle.into()),
        })
    }
}

/// DIDs and their state, indexed by dense id.
///
/// Each DID is stored once, in `dids`; the hash table holds only ids and finds a DID by
/// comparing against `dids`. At 5.5M actors that saves a second copy of every DID (~350 MB).
#[derive(Default)]
pub struct ActorTable {
    by_did: HashTable<ActorId>,
    /// Actors with a handle, found by comparing against their state's handle.
    by_handle: HashTable<ActorId>,
    dids: Vec<Box<str>>,
    states: Vec<ActorState>,
}

fn handle_of(states: &[ActorState], id: ActorId) -> Option<&str> {
    states
        .get(id.0 as usize)
        .and_then(|state| state.handle.as_deref())
}

/// The hash each table holds `id` under, for the tables' regrowth.
fn rehash_did(dids: &[Box<str>], id: ActorId) -> u64 {
    dids.get(id.0 as usize).map_or(0, |did| did_hash(did))
}

fn rehash_handle(states: &[ActorState], id: ActorId) -> u64 {
    handle_of(states, id).map_or(0, handle_hash)
}

/// Checks that `id`, read from disk, is the next of `n_read` dense ids.
fn next_in_order(id: ActorId, n_read: usize) -> Result<(), StoreError> {
    if id.0 as usize == n_read {
        return Ok(());
    }
    Err(StoreError::corrupt(
        format!("actor ids not dense: found {id} after {n_read} actors"),
        &[],
    ))
}

fn did_hash(did: &str) -> u64 {
    FxBuildHasher.hash_one(did)
}

/// The hash of `handle` lowercased, which is how handles compare. Eight bytes at a time, each
/// word lowercased in place: lowercasing into a new string first (an allocation per hash) was
/// most of loading millions of actors.
fn handle_hash(handle: &str) -> u64 {
    let mut hasher = FxBuildHasher.build_hasher();
    let mut words = handle.as_bytes().chunks_exact(8);
    for word in &mut words {
        let word = word.try_into().map_or(0, u64::from_le_bytes);
        hasher.write_u64(ascii_lowercase_word(word));
    }
    let mut last = [0u8; 8];
    let rest = words.remainder();
    if let Some(head) = last.get_mut(..rest.len()) {
        head.copy_from_slice(rest);
    }
    hasher.write_u64(ascii_lowercase_word(u64::from_le_bytes(last)));
    hasher.write_usize(handle.len());
    hasher.finish()
}

/// `word`'s eight bytes with `A`-`Z` made `a`-`z` and every other byte as it was.
fn ascii_lowercase_word(word: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low7 = word & LOW7;
    // The high bit of each byte: set for 'A' and above, and for above 'Z' (bytes of 0x80 and
    // above are not letters, and are left out by `!word`).
    let from_a = low7 + 0x3f3f_3f3f_3f3f_3f3f;
    let past_z = low7 + 0x2525_2525_2525_2525;
    let upper = from_a & !past_z & !word & HIGH;
    word | (upper >> 2)
}

impl ActorTable {
    /// The id of `did`, if interned.
    pub fn get(&self, did: &str) -> Option<ActorId> {
        let dids = &self.dids;
        let same = |id: &ActorId| dids.get(id.0 as usize).is_some_and(|known| **known == *did);
        self.by_did.find(did_hash(did), same).copied()
    }

    /// The actor whose newest identity event gave it `handle` (compared case-insensitively,
    /// as handles are), if any.
    pub fn by_handle(&self, handle: &str) -> Option<ActorId> {
        let states = &self.states;
        let same = |id: &ActorId| {
            states
                .get(id.0 as usize)
                .and_then(|state| state.handle.as_deref())
                .is_some_and(|known| known.eq_ignore_ascii_case(handle))
        };
        self.by_handle.find(handle_hash(handle), same).copied()
    }

    /// Sets the handle of `id`, keeping the handle index in step.
    pub fn set_handle(&mut self, id: ActorId, handle: Option<&str>) {
        let Some(state) = self.states.get_mut(id.0 as usize) else {
            return;
        };
        let old = std::mem::replace(&mut state.handle, handle.map(Into::into));
        if let Some(old) = old
            && let Ok(entry) = self
                .by_handle
                .find_entry(handle_hash(&old), |&found| found == id)
        {
            entry.remove();
        }
        self.index_handle(id);
    }

    /// Adds `id` to the handle index under the handle its state holds, if any.
    fn index_handle(&mut self, id: ActorId) {
        let states = &self.states;
        let Some(hash) = handle_of(states, id).map(handle_hash) else {
            return;
        };
        self.by_handle
            .insert_unique(hash, id, |id| rehash_handle(states, *id));
    }

    /// How many actors are interned.
    pub fn len(&self) -> usize {
        self.dids.len()
    }

    /// The DID of `id`.
    pub fn did(&self, id: ActorId) -> Option<&str> {
        self.dids.get(id.0 as usize).map(|did| &**did)
    }

    /// The state of `id`.
    pub fn state(&self, id: ActorId) -> Option<&ActorState> {
        self.states.get(id.0 as usize)
    }

    /// The mutable state of `id`.
    pub fn state_mut(&mut self, id: ActorId) -> Option<&mut ActorState> {
        self.states.get_mut(id.0 as usize)
    }

    /// Interns `did`, returning its id and whether it is new.
    pub fn intern(&mut self, did: &str) -> (ActorId, bool) {
        if let Some(id) = self.get(did) {
            return (id, false);
        }
        let id = ActorId(u32::try_from(self.dids.len()).expect("fewer than 2^32 actors"));
        self.push(id, did, ActorState::default());
        (id, true)
    }

    fn push(&mut self, id: ActorId, did: &str, state: ActorState) {
        let dids = &self.dids;
        self.by_did
            .insert_unique(did_hash(did), id, |id| rehash_did(dids, *id));
        self.dids.push(did.into());
        self.states.push(state);
        self.index_handle(id);
    }

    /// Restores an actor read from disk. Ids must arrive in order, with no gaps.
    pub fn restore(&mut self, id: ActorId, did: &str, state: ActorState) -> Result<(), StoreError> {
        next_in_order(id, self.dids.len())?;
        self.push(id, did, state);
        Ok(())
    }
}

/// Actors read from disk in id order, made into a table once all are read: the indexes are then
/// built in one pass each rather than an insert at a time.
#[derive(Default)]
pub struct ActorRows {
    dids: Vec<Box<str>>,
    states: Vec<ActorState>,
    /// Each actor's DID hash, and the handle hash of each with a handle: taken while the
    /// strings are in the cache, not in a second pass after millions of others.
    did_hashes: Vec<(u64, ActorId)>,
    handle_hashes: Vec<(u64, ActorId)>,
}

impl ActorRows {
    /// Room for `n_actors`, so that reading them does not regrow the rows.
    pub fn with_capacity(n_actors: usize) -> ActorRows {
        ActorRows {
            dids: Vec::with_capacity(n_actors),
            states: Vec::with_capacity(n_actors),
            did_hashes: Vec::with_capacity(n_actors),
            handle_hashes: Vec::with_capacity(n_actors),
        }
    }

    /// Adds the actor read next. Ids must arrive in order, with no gaps.
    pub fn push(&mut self, id: ActorId, did: &str, state: ActorState) -> Result<(), StoreError> {
        next_in_order(id, self.dids.len())?;
        self.did_hashes.push((did_hash(did), id));
        if let Some(handle) = state.handle.as_deref() {
            self.handle_hashes.push((handle_hash(handle), id));
        }
        self.dids.push(did.into());
        self.states.push(state);
        Ok(())
    }

    /// The table of the actors read, indexed by DID and handle.
    pub fn into_table(self) -> ActorTable {
        let ActorRows {
            dids,
            states,
            did_hashes,
            handle_hashes,
        } = self;
        let by_did = bulk_index(did_hashes, |id| rehash_did(&dids, *id));
        let by_handle = bulk_index(handle_hashes, |id| rehash_handle(&states, *id));
        ActorTable {
            by_did,
            by_handle,
            dids,
            states,
        }
    }
}

/// An index of the ids in `entries` by their hashes, inserted in the order of the buckets their
/// hashes start probing at. Inserted in id order, each insert lands at random in a table of
/// tens of megabytes, a cache and TLB miss apiece: most of loading millions of actors. In
/// bucket order the inserts walk the table once.
fn bulk_index(
    entries: Vec<(u64, ActorId)>,
    rehash: impl Fn(&ActorId) -> u64,
) -> HashTable<ActorId> {
    let mut table = HashTable::with_capacity(entries.len());
    // The table probes from bucket `hash & (buckets - 1)`, with 7 in 8 of a power of two of
    // buckets usable. Were that to change, only the speed of this would.
    let buckets = (table.capacity() / 7 * 8).next_power_of_two().max(1);
    let bins = buckets.min(1 << 16);
    let shift = (buckets / bins).trailing_zeros();
    let bin_of = |hash: u64| (hash as usize & (buckets - 1)) >> shift;
    // A counting sort by bin: where each bin's entries start, then each entry put in its place.
    let mut starts = vec![0usize; bins];
    for &(hash, _) in &entries {
        if let Some(count) = starts.get_mut(bin_of(hash)) {
            *count += 1;
        }
    }
    let mut next = 0;
    for start in &mut starts {
        (*start, next) = (next, next + *start);
    }
    let mut sorted = vec![(0u64, ActorId(0)); entries.len()];
    for (hash, id) in entries {
        if let Some(start) = starts.get_mut(bin_of(hash)) {
            if let Some(slot) = sorted.get_mut(*start) {
                *slot = (hash, id);
            }
            *start += 1;
        }
    }
    for (hash, id) in sorted {
        table.insert_unique(hash, id, &rehash);
    }
    table
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    /// A seeded xorshift: the tests' draws, the same on every run.
    struct Draws(u64);

    impl Draws {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn a_word_is_lowercased_as_its_bytes_are() {
        let mut draws = Draws(3);
        let every_byte = (0..=255u8).map(|byte| [byte; 8]);
        let random = (0..100_000).map(|_| draws.next().to_le_bytes());
        for bytes in every_byte.chain(random) {
            assert_eq!(
                ascii_lowercase_word(u64::from_le_bytes(bytes))
                    .to_le_bytes()
                    .to_vec(),
                bytes.to_ascii_lowercase(),
                "{bytes:?}"
            );
        }
    }

    /// A handle of `len` characters drawn from letters of both cases, digits, dots and a
    /// character outside ASCII.
    fn handle(draws: &mut Draws, len: usize) -> String {
        const CHARS: &[char] = &['a', 'Z', 'q', 'M', '7', '.', '-', 'é'];
        (0..len).map(|_| CHARS[draws.below(CHARS.len())]).collect()
    }

    /// The table built by loading rows and the one built an actor at a time both find every
    /// DID, and every handle in any case, as the rows hold them.
    #[test]
    fn a_loaded_table_finds_what_its_rows_hold() {
        let mut draws = Draws(7);
        let mut rows = ActorRows::default();
        let mut one_at_a_time = ActorTable::default();
        let mut handles = Vec::new();
        for n in 0..5_000u32 {
            let did = format!("did:plc:{n:024}");
            let handle = (draws.below(5) > 0).then(|| {
                let len = 1 + draws.below(40);
                handle(&mut draws, len)
            });
            let state = ActorState {
                handle: handle.as_deref().map(Into::into),
                ..ActorState::default()
            };
            rows.push(ActorId(n), &did, state).unwrap();
            let (id, _) = one_at_a_time.intern(&did);
            one_at_a_time.set_handle(id, handle.as_deref());
            handles.push(handle);
        }
        let loaded = rows.into_table();
        for table in [&loaded, &one_at_a_time] {
            for (n, handle) in handles.iter().enumerate() {
                assert_eq!(
                    table.get(&format!("did:plc:{n:024}")),
                    Some(ActorId(n as u32))
                );
                let Some(handle) = handle else { continue };
                // Short handles repeat: any actor holding the handle answers.
                for asked in [handle.clone(), handle.to_ascii_uppercase()] {
                    let found = table.by_handle(&asked).unwrap();
                    let holds = handles[found.0 as usize].as_deref().unwrap();
                    assert!(holds.eq_ignore_ascii_case(handle), "{asked} found {holds}");
                }
            }
            assert_eq!(table.get("did:plc:unknown"), None);
            assert_eq!(table.by_handle("unknown.example.com"), None);
        }
    }

    #[test]
    fn rows_out_of_order_are_corrupt() {
        let mut rows = ActorRows::default();
        rows.push(ActorId(0), "did:plc:a", ActorState::default())
            .unwrap();
        let err = rows.push(ActorId(2), "did:plc:b", ActorState::default());
        assert!(format!("{err:?}").contains("not dense"), "{err:?}");
    }
}
