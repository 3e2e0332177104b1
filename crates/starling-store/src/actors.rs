//! The in-memory actor table: DID interning and per-actor state, loaded at open.
//!
//! Every DID Starling sees (as an author or as a subject) gets a dense [`ActorId`] in order of
//! first sight; ids are never reused. The table is the source of ids for the graph.

mod did_index;
mod dids;

use std::hash::{BuildHasher, Hasher};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use starling_core::ActorId;
use starling_core::jetstream::AccountStatus;

use starling_core::syntax::HANDLE_BYTES_MAX;

use crate::{ActorInfo, StoreError};
use did_index::DidIndex;
use dids::{Dids, Stored};

pub use dids::Did;

/// An actor's state, as its row holds it and as the table gives it back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActorState<'a> {
    /// Hosting status from the newest account event.
    pub status: u8,
    /// Whether the actor authored an applied event (counted in `actors`).
    pub counted: bool,
    /// The relay sequence of the newest identity event applied.
    pub identity_seq: u64,
    /// The relay sequence of the newest account event applied.
    pub account_seq: u64,
    /// The handle from the newest identity event.
    pub handle: Option<&'a str>,
}

impl<'a> ActorState<'a> {
    /// The hosting status.
    pub fn status(&self) -> AccountStatus {
        AccountStatus::from_code(self.status)
    }

    /// What the store answers about the actor `id` of DID `did` in this state.
    pub fn info(&self, id: ActorId, did: &str) -> ActorInfo {
        ActorInfo {
            id,
            did: did.to_owned(),
            handle: self.handle.map(str::to_owned),
            status: self.status(),
            account_seq: self.account_seq,
        }
    }

    /// Encodes the row: `[status][counted][identity_seq][account_seq][handle]`.
    pub fn encode(&self) -> Vec<u8> {
        let handle = self.handle.unwrap_or("");
        let mut out = Vec::with_capacity(18 + handle.len());
        out.push(self.status);
        out.push(u8::from(self.counted));
        out.extend_from_slice(&self.identity_seq.to_be_bytes());
        out.extend_from_slice(&self.account_seq.to_be_bytes());
        out.extend_from_slice(handle.as_bytes());
        out
    }

    /// Decodes a row written by [`ActorState::encode`].
    pub fn decode(bytes: &'a [u8]) -> Result<ActorState<'a>, StoreError> {
        let corrupt = || StoreError::corrupt("actor row", &[]);
        let (&status, rest) = bytes.split_first().ok_or_else(corrupt)?;
        let (&counted, rest) = rest.split_first().ok_or_else(corrupt)?;
        let (identity, rest) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
        let (account, handle) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
        let handle = std::str::from_utf8(handle).map_err(|_| corrupt())?;
        if handle.len() > HANDLE_BYTES_MAX {
            return Err(StoreError::corrupt(
                format!("a {}-byte handle in an actor row", handle.len()),
                &[],
            ));
        }
        Ok(ActorState {
            status,
            counted: counted != 0,
            identity_seq: u64::from_be_bytes(*identity),
            account_seq: u64::from_be_bytes(*account),
            handle: (!handle.is_empty()).then_some(handle),
        })
    }
}

/// One actor's state in the table: its handle is a span of [`Strings`], so that an actor costs
/// no allocation of its own (24 bytes here against 40 and two allocations as an owned state).
#[derive(Clone, Copy, Default)]
struct Slot {
    identity_seq: u64,
    account_seq: u64,
    /// Where the handle starts in the table's handle bytes, and its length (0: none).
    handle_at: u32,
    handle_len: u8,
    status: u8,
    counted: bool,
}

/// Strings back to back in one buffer, each found by where it starts and its length.
#[derive(Default)]
struct Strings {
    bytes: String,
}

impl Strings {
    fn get(&self, at: u64, len: usize) -> Option<&str> {
        let at = usize::try_from(at).ok()?;
        self.bytes.get(at..at.checked_add(len)?)
    }

    /// Appends `s`, returning where it starts.
    fn push(&mut self, s: &str) -> u64 {
        let at = self.bytes.len() as u64;
        self.bytes.push_str(s);
        at
    }
}

/// DIDs and their state, indexed by dense id.
///
/// Each DID is stored once, in `dids`; the index by DID holds only ids (with bits of their
/// hash) and finds a DID by comparing against `dids`. At 5.5M actors that saves a second copy
/// of every DID (~350 MB). DIDs sit in a fixed slot per actor, `did:plc:` ones packed in 15
/// bytes of their 32 (see [`dids`]), and handles back to back in one buffer, rather than in an
/// allocation each: nothing for the allocator to do per actor at load.
#[derive(Default)]
pub struct ActorTable {
    by_did: DidIndex,
    /// Actors with a handle, found by comparing against their handle.
    by_handle: HashTable<ActorId>,
    dids: Dids,
    slots: Vec<Slot>,
    handles: Strings,
    /// Bytes of `handles` whose actor has since taken another handle.
    handle_garbage: u64,
}

fn handle_of<'t>(handles: &'t Strings, slots: &[Slot], id: ActorId) -> Option<&'t str> {
    handle_in(handles, slots.get(id.0 as usize)?)
}

/// The handle `slot` points at in `handles`, if it has one.
fn handle_in<'t>(handles: &'t Strings, slot: &Slot) -> Option<&'t str> {
    let len = usize::from(slot.handle_len);
    if len == 0 {
        return None;
    }
    handles.get(u64::from(slot.handle_at), len)
}

/// The hash each table holds `id` under, for the tables' regrowth.
fn rehash_did(dids: &Dids, id: ActorId) -> u64 {
    dids.stored(id.0 as usize)
        .map_or(0, |stored| stored.key_hash())
}

fn rehash_handle(handles: &Strings, slots: &[Slot], id: ActorId) -> u64 {
    handle_of(handles, slots, id).map_or(0, handle_hash)
}

/// The slot of an actor in `state`, its handle appended to `handles`.
fn slot_of(state: &ActorState<'_>, handles: &mut Strings) -> Slot {
    let (handle_at, handle_len) = state
        .handle
        .map_or((0, 0), |handle| push_handle(handles, handle));
    Slot {
        identity_seq: state.identity_seq,
        account_seq: state.account_seq,
        handle_at,
        handle_len,
        status: state.status,
        counted: state.counted,
    }
}

/// Appends `handle` to `handles`, returning where it starts and its length.
fn push_handle(handles: &mut Strings, handle: &str) -> (u32, u8) {
    let len = u8::try_from(handle.len()).expect("handles are checked to be at most 253 bytes");
    let at = u32::try_from(handles.push(handle))
        .expect("the handles of fewer than ~150M actors, which fit in 4 GiB");
    (at, len)
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
        let stored = Stored::of(did);
        let same = |id: ActorId| self.dids.stored(id.0 as usize) == Some(stored);
        self.by_did.find(stored.key_hash(), same)
    }

    /// The actor whose newest identity event gave it `handle` (compared case-insensitively,
    /// as handles are), if any.
    pub fn by_handle(&self, handle: &str) -> Option<ActorId> {
        let same = |id: &ActorId| {
            handle_of(&self.handles, &self.slots, *id)
                .is_some_and(|known| known.eq_ignore_ascii_case(handle))
        };
        self.by_handle.find(handle_hash(handle), same).copied()
    }

    /// Sets the handle of `id`, keeping the handle index in step.
    pub fn set_handle(&mut self, id: ActorId, handle: Option<&str>) {
        if id.0 as usize >= self.slots.len() {
            return;
        }
        if let Some(old) = handle_of(&self.handles, &self.slots, id) {
            let (hash, garbage) = (handle_hash(old), old.len() as u64);
            if let Ok(entry) = self.by_handle.find_entry(hash, |&found| found == id) {
                entry.remove();
            }
            self.handle_garbage += garbage;
        }
        // Detached first, so that a compaction below does not keep the replaced handle.
        self.set_handle_span(id, (0, 0));
        let Some(handle) = handle else {
            return;
        };
        if self.handles_want_compacting(handle.len()) {
            self.compact_handles();
        }
        let span = push_handle(&mut self.handles, handle);
        self.set_handle_span(id, span);
        self.index_handle(id);
    }

    /// Points the slot of `id` at the handle of `len` bytes at `at` (`len` 0: no handle).
    fn set_handle_span(&mut self, id: ActorId, (at, len): (u32, u8)) {
        if let Some(slot) = self.slots.get_mut(id.0 as usize) {
            (slot.handle_at, slot.handle_len) = (at, len);
        }
    }

    /// Whether to drop replaced handles before appending `more` bytes: when they are most of
    /// the buffer, or when the buffer would outgrow the 32-bit offsets of the slots.
    fn handles_want_compacting(&self, more: usize) -> bool {
        let len = self.handles.bytes.len() as u64;
        let past_offsets = len + more as u64 > u64::from(u32::MAX);
        past_offsets || (self.handle_garbage >= 1 << 20 && self.handle_garbage * 2 > len)
    }

    /// Copies the handles still held into a new buffer, in id order.
    fn compact_handles(&mut self) {
        let mut handles = Strings::default();
        for n in 0..self.slots.len() {
            let id = ActorId(n as u32);
            let Some(handle) = handle_of(&self.handles, &self.slots, id) else {
                continue;
            };
            let span = push_handle(&mut handles, handle);
            self.set_handle_span(id, span);
        }
        self.handles = handles;
        self.handle_garbage = 0;
    }

    /// Adds `id` to the handle index under the handle its slot holds, if any.
    fn index_handle(&mut self, id: ActorId) {
        let (handles, slots) = (&self.handles, &self.slots);
        let Some(hash) = handle_of(handles, slots, id).map(handle_hash) else {
            return;
        };
        self.by_handle
            .insert_unique(hash, id, |id| rehash_handle(handles, slots, *id));
    }

    /// How many actors are interned.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The DID of `id`.
    pub fn did(&self, id: ActorId) -> Option<Did<'_>> {
        self.dids.get(id.0 as usize)
    }

    /// The state of `id`.
    pub fn state(&self, id: ActorId) -> Option<ActorState<'_>> {
        let slot = self.slots.get(id.0 as usize)?;
        Some(ActorState {
            status: slot.status,
            counted: slot.counted,
            identity_seq: slot.identity_seq,
            account_seq: slot.account_seq,
            handle: handle_in(&self.handles, slot),
        })
    }

    /// Sets whether `id` counts as an actor.
    pub fn set_counted(&mut self, id: ActorId, counted: bool) {
        if let Some(slot) = self.slots.get_mut(id.0 as usize) {
            slot.counted = counted;
        }
    }

    /// Records the relay sequence of the newest identity event applied for `id`.
    pub fn set_identity_seq(&mut self, id: ActorId, seq: u64) {
        if let Some(slot) = self.slots.get_mut(id.0 as usize) {
            slot.identity_seq = seq;
        }
    }

    /// Records the newest account event applied for `id`: its sequence and the status it gave.
    pub fn set_account(&mut self, id: ActorId, seq: u64, status: AccountStatus) {
        if let Some(slot) = self.slots.get_mut(id.0 as usize) {
            slot.account_seq = seq;
            slot.status = status.code();
        }
    }

    /// Interns `did`, returning its id and whether it is new.
    pub fn intern(&mut self, did: &str) -> (ActorId, bool) {
        if let Some(id) = self.get(did) {
            return (id, false);
        }
        let id = ActorId(u32::try_from(self.slots.len()).expect("fewer than 2^32 actors"));
        self.push(id, did, ActorState::default());
        (id, true)
    }

    fn push(&mut self, id: ActorId, did: &str, state: ActorState<'_>) {
        let stored = Stored::of(did);
        self.append(&stored, &state);
        let dids = &self.dids;
        self.by_did
            .insert_unique(stored.key_hash(), id, |id| rehash_did(dids, id));
        self.index_handle(id);
    }

    /// Stores the next actor's DID and state, not yet in the indexes.
    fn append(&mut self, did: &Stored<'_>, state: &ActorState<'_>) {
        self.dids.push(did);
        let slot = slot_of(state, &mut self.handles);
        self.slots.push(slot);
    }

    /// Restores an actor read from disk. Ids must arrive in order, with no gaps.
    pub fn restore(
        &mut self,
        id: ActorId,
        did: &str,
        state: ActorState<'_>,
    ) -> Result<(), StoreError> {
        next_in_order(id, self.slots.len())?;
        self.push(id, did, state);
        Ok(())
    }
}

/// Actors read from disk in id order, made into a table once all are read: the indexes are then
/// built in one pass each rather than an insert at a time.
#[derive(Default)]
pub struct ActorRows {
    table: ActorTable,
    /// Each actor's DID hash, and the handle hash of each with a handle: taken while the
    /// strings are in the cache, not in a second pass after millions of others.
    did_hashes: Vec<(u64, ActorId)>,
    handle_hashes: Vec<(u64, ActorId)>,
}

impl ActorRows {
    /// Room for `n_actors`, so that reading them does not regrow the rows.
    pub fn with_capacity(n_actors: usize) -> ActorRows {
        let mut table = ActorTable::default();
        table.dids.reserve(n_actors);
        table.slots.reserve_exact(n_actors);
        ActorRows {
            table,
            did_hashes: Vec::with_capacity(n_actors),
            handle_hashes: Vec::with_capacity(n_actors),
        }
    }

    /// Adds the actor read next. Ids must arrive in order, with no gaps.
    pub fn push(
        &mut self,
        id: ActorId,
        did: &str,
        state: ActorState<'_>,
    ) -> Result<(), StoreError> {
        let table = &mut self.table;
        next_in_order(id, table.slots.len())?;
        let stored = Stored::of(did);
        self.did_hashes.push((stored.key_hash(), id));
        if let Some(handle) = state.handle {
            self.handle_hashes.push((handle_hash(handle), id));
        }
        table.append(&stored, &state);
        Ok(())
    }

    /// The table of the actors read, indexed by DID and handle.
    pub fn into_table(self) -> ActorTable {
        let ActorRows {
            mut table,
            did_hashes,
            handle_hashes,
        } = self;
        table.by_did = DidIndex::build(did_hashes);
        let (handles, slots) = (&table.handles, &table.slots);
        table.by_handle = bulk_index(handle_hashes, |id| rehash_handle(handles, slots, *id));
        table
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
    use crate::codec::{decode_actor_row, encode_actor_row};

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

    /// Actor `n`'s DID: a `did:plc:` one the table packs for even `n`, and for odd `n` one of
    /// decimal digits, which it keeps as text.
    fn did_of(n: u32) -> String {
        if n.is_multiple_of(2) {
            starling_core::sample::did(n)
        } else {
            format!("did:plc:{n:024}")
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
            let did = did_of(n);
            let handle = (draws.below(5) > 0).then(|| {
                let len = 1 + draws.below(40);
                handle(&mut draws, len)
            });
            let state = ActorState {
                handle: handle.as_deref(),
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
                assert_eq!(table.get(&did_of(n as u32)), Some(ActorId(n as u32)));
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

    /// An actor as a naive model holds it.
    #[derive(Clone, Debug, Default, PartialEq)]
    struct Modelled {
        did: String,
        handle: Option<String>,
        status: u8,
        counted: bool,
        identity_seq: u64,
        account_seq: u64,
    }

    fn modelled(table: &ActorTable, id: ActorId) -> Modelled {
        let state = table.state(id).unwrap();
        Modelled {
            did: table.did(id).unwrap().to_owned(),
            handle: state.handle.map(str::to_owned),
            status: state.status,
            counted: state.counted,
            identity_seq: state.identity_seq,
            account_seq: state.account_seq,
        }
    }

    /// Random interns, handle changes (enough to drop replaced handles several times) and state
    /// changes leave the table answering as a list of actors does, and a table reloaded from its
    /// rows answers the same.
    #[test]
    fn a_table_agrees_with_a_list_of_actors() {
        let mut draws = Draws(11);
        let mut table = ActorTable::default();
        let mut model: Vec<Modelled> = Vec::new();
        for step in 0..300_000u64 {
            let pick = |draws: &mut Draws, n: usize| ActorId(draws.below(n.max(1)) as u32);
            match draws.below(8) {
                0 | 1 => {
                    let did = did_of(draws.below(20_000) as u32);
                    let (id, new) = table.intern(&did);
                    let known = model.iter().position(|actor| actor.did == did);
                    assert_eq!(new, known.is_none(), "{did}");
                    if new {
                        model.push(Modelled {
                            did,
                            ..Modelled::default()
                        });
                    }
                    assert_eq!(id.0 as usize, known.unwrap_or(model.len() - 1));
                }
                _ if model.is_empty() => {}
                2..=5 => {
                    let id = pick(&mut draws, model.len());
                    let handle = (draws.below(6) > 0).then(|| {
                        let len = 1 + draws.below(60);
                        handle(&mut draws, len)
                    });
                    table.set_handle(id, handle.as_deref());
                    model[id.0 as usize].handle = handle;
                }
                6 => {
                    let id = pick(&mut draws, model.len());
                    let status = AccountStatus::from_code(draws.below(5) as u8);
                    table.set_account(id, step, status);
                    model[id.0 as usize].account_seq = step;
                    model[id.0 as usize].status = status.code();
                }
                _ => {
                    let id = pick(&mut draws, model.len());
                    let counted = draws.below(2) == 0;
                    table.set_counted(id, counted);
                    table.set_identity_seq(id, step);
                    model[id.0 as usize].counted = counted;
                    model[id.0 as usize].identity_seq = step;
                }
            }
        }
        let mut rows = ActorRows::default();
        for (n, actor) in model.iter().enumerate() {
            let id = ActorId(n as u32);
            let row = encode_actor_row(&table.did(id).unwrap(), &table.state(id).unwrap());
            let (did, state) = decode_actor_row(&row).unwrap();
            rows.push(id, did, state).unwrap();
            assert_eq!(&modelled(&table, id), actor);
        }
        let reloaded = rows.into_table();
        for (n, actor) in model.iter().enumerate() {
            let id = ActorId(n as u32);
            assert_eq!(&modelled(&reloaded, id), actor);
            for table in [&table, &reloaded] {
                assert_eq!(table.get(&actor.did), Some(id));
                let Some(handle) = &actor.handle else {
                    continue;
                };
                let found = table.by_handle(&handle.to_ascii_uppercase()).unwrap();
                let holds = model[found.0 as usize].handle.as_deref().unwrap();
                assert!(holds.eq_ignore_ascii_case(handle), "{handle} found {holds}");
            }
        }
        // A handle nobody holds any more is not found.
        let held = |h: &str| {
            model.iter().any(|a| {
                a.handle
                    .as_deref()
                    .is_some_and(|x| x.eq_ignore_ascii_case(h))
            })
        };
        for n in 0..2_000 {
            let probe = handle(&mut draws, 1 + n % 5);
            assert_eq!(table.by_handle(&probe).is_some(), held(&probe), "{probe}");
        }
        assert!(
            table.handles.bytes.len() < 2 << 20,
            "replaced handles were not dropped: {} bytes",
            table.handles.bytes.len()
        );
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
