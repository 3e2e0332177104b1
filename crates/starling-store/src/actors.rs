//! The in-memory actor table: DID interning and per-actor state, loaded at open.
//!
//! Every DID Starling sees (as an author or as a subject) gets a dense [`ActorId`] in order of
//! first sight; ids are never reused. The table is the source of ids for the graph.

use std::hash::BuildHasher;

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

fn did_hash(did: &str) -> u64 {
    FxBuildHasher.hash_one(did)
}

fn handle_hash(handle: &str) -> u64 {
    FxBuildHasher.hash_one(handle.to_ascii_lowercase())
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
        let Some(old) = self
            .states
            .get(id.0 as usize)
            .map(|state| state.handle.clone())
        else {
            return;
        };
        if let Some(old) = old
            && let Ok(entry) = self
                .by_handle
                .find_entry(handle_hash(&old), |&found| found == id)
        {
            entry.remove();
        }
        if let Some(state) = self.states.get_mut(id.0 as usize) {
            state.handle = handle.map(Into::into);
        }
        if let Some(handle) = handle {
            self.index_handle(id, handle);
        }
    }

    fn index_handle(&mut self, id: ActorId, handle: &str) {
        let states = &self.states;
        let rehash = |id: &ActorId| {
            states
                .get(id.0 as usize)
                .and_then(|state| state.handle.as_deref())
                .map_or(0, handle_hash)
        };
        self.by_handle
            .insert_unique(handle_hash(handle), id, rehash);
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

    /// Makes room for `n_actors` in all, so that loading them does not regrow the tables.
    pub fn reserve(&mut self, n_actors: usize) {
        let more = n_actors.saturating_sub(self.dids.len());
        let dids = &self.dids;
        let rehash = |id: &ActorId| dids.get(id.0 as usize).map_or(0, |did| did_hash(did));
        self.by_did.reserve(more, rehash);
        self.dids.reserve_exact(more);
        self.states.reserve_exact(more);
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
        let rehash = |id: &ActorId| dids.get(id.0 as usize).map_or(0, |did| did_hash(did));
        self.by_did.insert_unique(did_hash(did), id, rehash);
        self.dids.push(did.into());
        let handle = state.handle.clone();
        self.states.push(state);
        if let Some(handle) = handle {
            self.index_handle(id, &handle);
        }
    }

    /// Restores an actor read from disk. Ids must arrive in order, with no gaps.
    pub fn restore(&mut self, id: ActorId, did: &str, state: ActorState) -> Result<(), StoreError> {
        if id.0 as usize != self.dids.len() {
            return Err(StoreError::corrupt(
                format!(
                    "actor ids not dense: found {id} after {} actors",
                    self.dids.len()
                ),
                &[],
            ));
        }
        self.push(id, did, state);
        Ok(())
    }
}
