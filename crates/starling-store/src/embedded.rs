//! The embedded backend: one fjall database in the data directory.
//!
//! Keyspaces:
//! - `records`: `(actor, collection, rkey)` -> live record or tombstone (see [`crate::value`]).
//! - `index`: secondary indexes, each under a one-byte tag (see [`crate::keys::tag`]); values
//!   are empty.
//! - `actors`: `'i' ++ id` -> DID and [`ActorState`].
//! - `meta`: the cursor, file progress, counters and interned collection names.
//!
//! All keyspaces share fjall's journal, so one write batch is atomic across them: a batch's
//! records, indexes, counters and progress become durable together or not at all. That is what
//! makes `kill -9` safe: the stored progress never runs ahead of the data.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use rustc_hash::{FxHashMap, FxHashSet};
use starling_core::feed::{FeedChange, FeedItem, FeedKey, PostRef, flag, rkey_code};
use starling_core::jetstream::Media;
use starling_core::jetstream::{
    self, AccountStatus, Body, Commit, DropReason, Event, Operation, Refs, nsid,
};
use starling_core::syntax::RecordUri;
use starling_core::{ActorId, Cursor};

use crate::actors::{ActorState, ActorTable};
use crate::keys::{self, CollectionId, count, tag};
use crate::value::{self, LiveRecord, StoredValue};
use crate::{
    ActorCounts, ActorInfo, Batch, Committed, EdgeKind, GraphChange, InteractionKind, ListEntry,
    ListOf, ListPage, Outcome, Progress, RecordCounts, Stats, Store, StoreError, StoredRecord,
};

const META_CURSOR: &[u8] = b"cursor";
/// The newest graph log sequence, kept apart from the log because pruning may empty the log.
const META_GRAPH_SEQ: &[u8] = b"graph_seq";
const META_PROGRESS: &str = "progress/";
const META_COUNT_ACTORS: &[u8] = b"count/actors";
const META_COUNT_RECORDS: &[u8] = b"count/records/";
const META_COUNT_DROPPED: &str = "count/dropped/";
const META_COLLECTION: &[u8] = b"collection/";
const ACTOR_ROW: u8 = b'i';

/// Bytes of memtable per keyspace before it is flushed to a table on disk.
const MEMTABLE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Bytes of block cache shared by all keyspaces.
const CACHE_BYTES: u64 = 256 * 1024 * 1024;

/// Counters mirrored in memory and written with each batch.
#[derive(Default, Clone)]
struct Counters {
    actors: u64,
    records: FxHashMap<CollectionId, u64>,
    dropped: BTreeMap<DropReason, u64>,
}

/// Interned collection NSIDs.
#[derive(Default)]
struct Collections {
    by_name: FxHashMap<Box<str>, CollectionId>,
    names: Vec<Box<str>>,
}

impl Collections {
    fn name(&self, id: CollectionId) -> Option<&str> {
        self.names.get(id.0 as usize).map(|name| &**name)
    }
}

/// The embedded, durable store.
pub struct EmbeddedStore {
    db: Database,
    records: Keyspace,
    index: Keyspace,
    actor_rows: Keyspace,
    meta: Keyspace,
    graph_log: Keyspace,
    /// The sequence number of the newest graph log entry.
    graph_seq: AtomicU64,
    actors: RwLock<ActorTable>,
    collections: RwLock<Collections>,
    counters: Mutex<Counters>,
    writer: Mutex<()>,
    /// The batch being written by a background thread, if any; see [`InFlight`].
    in_flight: Mutex<Option<InFlight>>,
}

/// A batch whose engine write runs on its own thread while the next batch is being applied.
///
/// Writing a batch into the engine (journal, fsync, memtable inserts) costs about as much as
/// working out what to write, so the two overlap: batch N+1 is applied while batch N is
/// written. Batch N+1 reads what batch N wrote from `data` until the write is done, and its own
/// flush waits for batch N first, so batches still reach the disk one after the other, in order.
///
/// Only the thread applying batches joins the writer ([`EmbeddedStore::wait_in_flight`]);
/// any other thread that needs the batch durable waits on `done` without taking the handle
/// ([`EmbeddedStore::wait_durable`]), so that a reader can never let the next batch's write
/// start before this one's has finished.
struct InFlight {
    data: Arc<InFlightData>,
    writer: std::thread::JoinHandle<Result<(), fjall::Error>>,
    done: Arc<Done>,
}

/// Set when a batch's write has finished: `Ok`, or the engine's error as text.
#[derive(Default)]
struct Done {
    finished: Mutex<Option<Result<(), String>>>,
    signal: Condvar,
}

impl Done {
    fn set(&self, res: &Result<(), fjall::Error>) {
        *lock(&self.finished) = Some(res.as_ref().map(|_| ()).map_err(ToString::to_string));
        self.signal.notify_all();
    }

    fn wait(&self) -> Result<(), StoreError> {
        let mut finished = lock(&self.finished);
        loop {
            match &*finished {
                Some(res) => return res.clone().map_err(StoreError::Writer),
                None => {
                    finished = self
                        .signal
                        .wait(finished)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}

/// What an in-flight batch wrote, for the reads of the next batch.
#[derive(Default)]
struct InFlightData {
    records: FxHashMap<fjall::UserKey, fjall::UserValue>,
    pair_counts: FxHashMap<(u8, ActorId, ActorId), u32>,
    /// Author feed entries written (`true`) or removed, sorted by key, one per key.
    feed: Vec<(Vec<u8>, bool)>,
    /// Counts and latest revisions written, by key.
    counts: FxHashMap<Vec<u8>, u64>,
}

/// Engine background threads: one per core beyond the first.
fn engine_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
}

pub(crate) fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn u64_value(bytes: &[u8]) -> Result<u64, StoreError> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| StoreError::corrupt(format!("{}-byte counter", bytes.len()), &[]))?;
    Ok(u64::from_be_bytes(array))
}

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir`, recovering from the journal after a crash.
    pub fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|err| StoreError::DataDir {
            path: dir.display().to_string(),
            reason: err.to_string(),
        })?;
        // The options that matter are spelled out rather than left to defaults: the journal is
        // synced by each batch commit (`PersistMode::SyncData`), never by a background timer.
        let db = Database::builder(dir.join("fjall"))
            .cache_size(CACHE_BYTES)
            .manual_journal_persist(true)
            // Flushes and compactions get all cores but one: ingest keeps one to itself. On two
            // cores a second engine worker measured slower (it spins re-queueing compactions).
            .worker_threads(engine_workers())
            .open()?;
        let options = || KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES_MAX);
        let records = db.keyspace("records", options)?;
        let index = db.keyspace("index", options)?;
        let actor_rows = db.keyspace("actors", options)?;
        let meta = db.keyspace("meta", options)?;
        let graph_log = db.keyspace("graph_log", options)?;
        let meta_seq = match meta.get(META_GRAPH_SEQ)? {
            Some(bytes) => u64_value(&bytes)?,
            None => 0,
        };
        let log_seq = match graph_log.last_key_value() {
            Some(guard) => graph_seq_of(&guard.key()?)?,
            None => 0,
        };
        let graph_seq = meta_seq.max(log_seq);
        let store = EmbeddedStore {
            db,
            records,
            index,
            actor_rows,
            meta,
            graph_log,
            graph_seq: AtomicU64::new(graph_seq),
            actors: RwLock::new(ActorTable::default()),
            collections: RwLock::new(Collections::default()),
            counters: Mutex::new(Counters::default()),
            writer: Mutex::new(()),
            in_flight: Mutex::new(None),
        };
        store.load()?;
        Ok(store)
    }

    /// Reads the in-memory tables back from disk.
    fn load(&self) -> Result<(), StoreError> {
        let mut actors = write(&self.actors);
        // Ids are dense, so the last row's id sizes the table: no regrowth while loading.
        if let Some(guard) = self.actor_rows.last_key_value() {
            let key = guard.key()?;
            let last = key
                .get(1..5)
                .and_then(|bytes| bytes.try_into().ok())
                .map(u32::from_be_bytes);
            actors.reserve(last.map_or(0, |id| id as usize + 1));
        }
        for guard in self.actor_rows.prefix([ACTOR_ROW]) {
            let (key, row) = guard.into_inner()?;
            let id = key
                .get(1..5)
                .and_then(|bytes| bytes.try_into().ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| StoreError::corrupt("actor key", &[]))?;
            let (did, state) = decode_actor_row(&row)?;
            actors.restore(ActorId(id), did, state)?;
        }
        drop(actors);
        let mut collections = write(&self.collections);
        for guard in self.meta.prefix(META_COLLECTION) {
            let (key, name) = guard.into_inner()?;
            let name = std::str::from_utf8(&name)
                .map_err(|_| StoreError::corrupt("collection name", &[]))?;
            let id = collections.names.len() as u32;
            if key.get(META_COLLECTION.len()..) != Some(&id.to_be_bytes()[..]) {
                return Err(StoreError::corrupt("collection ids not dense", &[]));
            }
            collections.by_name.insert(name.into(), CollectionId(id));
            collections.names.push(name.into());
        }
        drop(collections);
        let mut counters = lock(&self.counters);
        if let Some(bytes) = self.meta.get(META_COUNT_ACTORS)? {
            counters.actors = u64_value(&bytes)?;
        }
        for guard in self.meta.prefix(META_COUNT_RECORDS) {
            let (key, count) = guard.into_inner()?;
            let id = key
                .get(META_COUNT_RECORDS.len()..)
                .and_then(|bytes| bytes.try_into().ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| StoreError::corrupt("record counter key", &[]))?;
            counters
                .records
                .insert(CollectionId(id), u64_value(&count)?);
        }
        for reason in DropReason::ALL {
            let key = format!("{META_COUNT_DROPPED}{reason}");
            if let Some(count) = self.meta.get(key.as_bytes())? {
                counters.dropped.insert(reason, u64_value(&count)?);
            }
        }
        Ok(())
    }

    fn record_value(&self, key: &[u8]) -> Result<Option<fjall::UserValue>, StoreError> {
        Ok(self.records.get(key)?)
    }

    /// Flushes every in-memory table to disk, so that the next open has no journal to replay.
    ///
    /// Opening a store replays the journal into memtables: after a large replay or import that
    /// is seconds of work and hundreds of megabytes, on every start until a flush happens. A
    /// clean shutdown calls this; after a crash the journal does its job instead.
    pub fn flush_to_tables(&self) -> Result<(), StoreError> {
        self.wait_in_flight()?;
        for keyspace in [
            &self.records,
            &self.index,
            &self.actor_rows,
            &self.meta,
            &self.graph_log,
        ] {
            keyspace.rotate_memtable_and_wait()?;
        }
        Ok(())
    }

    /// Waits until the batch being written in the background, if any, has finished, without
    /// taking it from the batch thread; a failed write is reported there.
    fn wait_durable(&self) -> Result<(), StoreError> {
        let done = lock(&self.in_flight)
            .as_ref()
            .map(|in_flight| in_flight.done.clone());
        done.map_or(Ok(()), |done| done.wait())
    }

    /// Waits until the batch being written in the background, if any, is durable, and reports
    /// its error. Only for the thread that applies batches, and for shutdown.
    fn wait_in_flight(&self) -> Result<(), StoreError> {
        let Some(in_flight) = lock(&self.in_flight).take() else {
            return Ok(());
        };
        match in_flight.writer.join() {
            Ok(res) => Ok(res?),
            Err(_) => Err(StoreError::corrupt("the batch writer thread panicked", &[])),
        }
    }

    /// The URI of `actor`'s record in `nsid` whose key ends the first index key under
    /// `prefix`, if any.
    fn first_record_under(
        &self,
        prefix: &[u8],
        actor: ActorId,
        nsid: &str,
    ) -> Result<Option<String>, StoreError> {
        let Some(guard) = self.index.prefix(prefix).next() else {
            return Ok(None);
        };
        let key = guard.key()?;
        let rkey = key_text(key.get(prefix.len()..))?;
        Ok(self
            .did(actor)
            .map(|did| format!("at://{did}/{nsid}/{rkey}")))
    }

    /// `0 ++ record ref` of the record `uri` names, if its actor and collection are known; the
    /// caller puts an index tag in the first byte.
    fn ref_of(&self, uri: &RecordUri<'_>) -> Option<Vec<u8>> {
        let actor = read(&self.actors).get(uri.did)?;
        let collection = *read(&self.collections).by_name.get(uri.collection)?;
        let mut key = vec![0];
        keys::push_record_ref(&mut key, actor, collection, uri.rkey);
        Some(key)
    }

    /// A count, from the batch being written if it changed it, else from the engine.
    fn count_value(&self, in_flight: Option<&InFlightData>, key: &[u8]) -> Result<u64, StoreError> {
        if let Some(&count) = in_flight.and_then(|data| data.counts.get(key)) {
            return Ok(count);
        }
        match self.index.get(key)? {
            Some(bytes) => u64_value(&bytes),
            None => Ok(0),
        }
    }

    /// The data of the batch being written in the background, if any.
    fn in_flight_data(&self) -> Option<Arc<InFlightData>> {
        lock(&self.in_flight)
            .as_ref()
            .map(|in_flight| in_flight.data.clone())
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        if let Err(err) = self.wait_in_flight() {
            tracing::error!(error = %err, "the last batch failed to write");
        }
    }
}

/// `tag ++ actor ++ subject ref ++ rkey` from a subject index key (`tag ++ subject ref`).
pub(crate) fn by_actor_key(index_tag: u8, actor: ActorId, ref_key: &[u8], rkey: &str) -> Vec<u8> {
    let subject = ref_key.get(1..).unwrap_or_default();
    let mut key = Vec::with_capacity(5 + subject.len() + rkey.len());
    key.push(index_tag);
    key.extend_from_slice(&actor.0.to_be_bytes());
    key.extend_from_slice(subject);
    key.extend_from_slice(rkey.as_bytes());
    key
}

pub(crate) fn feed_change(item: FeedItem, insert: bool) -> FeedChange {
    if insert {
        FeedChange::Add(item)
    } else {
        FeedChange::Remove(item)
    }
}

pub(crate) fn parse_feed_key(key: &[u8]) -> Result<FeedItem, StoreError> {
    keys::parse_author_feed_key(key).ok_or_else(|| StoreError::corrupt("author feed key", &[]))
}

/// `tag ++ actor ++ subject`: the prefix of the edge entries of one pair.
pub(crate) fn edge_prefix(edge_tag: u8, actor: ActorId, subject: ActorId) -> [u8; 9] {
    let mut prefix = [edge_tag; 9];
    if let Some(tail) = prefix.get_mut(1..) {
        tail.copy_from_slice(&[actor.0.to_be_bytes(), subject.0.to_be_bytes()].concat());
    }
    prefix
}

/// Decodes the tail of a key of `list`'s index (sort_at (8), the other actor (4), rkey) into
/// its entry; `did` names actors. Both backends keep list keys this way.
pub(crate) fn list_entry(
    list: &ListOf<'_>,
    tail: &[u8],
    did: impl FnOnce(ActorId) -> Option<String>,
) -> Result<ListEntry, StoreError> {
    let corrupt = || StoreError::corrupt("list index key", &[]);
    let sort_at_us = keys::time_from_bytes(
        tail.get(..8)
            .ok_or_else(corrupt)?
            .try_into()
            .map_err(|_| corrupt())?,
    );
    let other = ActorId(u32::from_be_bytes(
        tail.get(8..12)
            .ok_or_else(corrupt)?
            .try_into()
            .map_err(|_| corrupt())?,
    ));
    let rkey = key_text(tail.get(12..))?;
    let (author, subject, entry_nsid) = match list {
        ListOf::Follows(actor) => (*actor, Some(other), nsid::FOLLOW),
        ListOf::Followers(actor) => (other, Some(*actor), nsid::FOLLOW),
        ListOf::Likes(_) => (other, None, nsid::LIKE),
        ListOf::Replies(_) => (other, None, nsid::POST),
    };
    let did = did(author).ok_or_else(corrupt)?;
    Ok(ListEntry {
        uri: format!("at://{did}/{entry_nsid}/{rkey}"),
        author,
        subject,
        sort_at_us,
    })
}

/// The record key at the end of an index key.
pub(crate) fn key_text(bytes: Option<&[u8]>) -> Result<&str, StoreError> {
    bytes
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .ok_or_else(|| StoreError::corrupt("record key in an index key", &[]))
}

fn graph_seq_of(key: &[u8]) -> Result<u64, StoreError> {
    u64_value(key)
}

/// Encodes graph changes for the log: per change a kind byte, the actor and the subject.
pub(crate) fn encode_graph_changes(changes: &[GraphChange]) -> Vec<u8> {
    let mut out = Vec::with_capacity(changes.len() * 9);
    for change in changes {
        let (kind, actor, subject) = match *change {
            GraphChange::Follow(a, b) => (b'F', a, b),
            GraphChange::Unfollow(a, b) => (b'f', a, b),
            GraphChange::Block(a, b) => (b'B', a, b),
            GraphChange::Unblock(a, b) => (b'b', a, b),
        };
        out.push(kind);
        out.extend_from_slice(&actor.0.to_be_bytes());
        out.extend_from_slice(&subject.0.to_be_bytes());
    }
    out
}

pub(crate) fn decode_graph_changes(
    bytes: &[u8],
    visit: &mut dyn FnMut(GraphChange),
) -> Result<(), StoreError> {
    let corrupt = || StoreError::corrupt("graph log entry", &[]);
    for entry in bytes.chunks(9) {
        let (&kind, ids) = entry.split_first().ok_or_else(corrupt)?;
        let (actor, subject) = ids.split_first_chunk::<4>().ok_or_else(corrupt)?;
        let subject: [u8; 4] = subject.try_into().map_err(|_| corrupt())?;
        let (actor, subject) = (
            ActorId(u32::from_be_bytes(*actor)),
            ActorId(u32::from_be_bytes(subject)),
        );
        visit(match kind {
            b'F' => GraphChange::Follow(actor, subject),
            b'f' => GraphChange::Unfollow(actor, subject),
            b'B' => GraphChange::Block(actor, subject),
            b'b' => GraphChange::Unblock(actor, subject),
            _ => return Err(corrupt()),
        });
    }
    Ok(())
}

pub(crate) fn pair_count(bytes: &[u8]) -> Result<u32, StoreError> {
    let array: [u8; 4] = bytes
        .try_into()
        .map_err(|_| StoreError::corrupt(format!("{}-byte pair count", bytes.len()), &[]))?;
    Ok(u32::from_be_bytes(array))
}

pub(crate) fn encode_actor_row(did: &str, state: &ActorState) -> Vec<u8> {
    let did_len = u16::try_from(did.len()).expect("DIDs are at most 2048 bytes");
    let mut row = did_len.to_be_bytes().to_vec();
    row.extend_from_slice(did.as_bytes());
    row.extend_from_slice(&state.encode());
    row
}

pub(crate) fn decode_actor_row(row: &[u8]) -> Result<(&str, ActorState), StoreError> {
    let corrupt = || StoreError::corrupt("actor row", &[]);
    let (len, rest) = row.split_first_chunk::<2>().ok_or_else(corrupt)?;
    let (did, state) = rest
        .split_at_checked(usize::from(u16::from_be_bytes(*len)))
        .ok_or_else(corrupt)?;
    let did = std::str::from_utf8(did).map_err(|_| corrupt())?;
    Ok((did, ActorState::decode(state)?))
}

impl Store for EmbeddedStore {
    type Batch<'s> = EmbeddedBatch<'s>;

    fn batch(&self) -> EmbeddedBatch<'_> {
        EmbeddedBatch::new(self)
    }

    fn stats(&self) -> Result<Stats, StoreError> {
        self.wait_durable()?;
        let counters = lock(&self.counters).clone();
        let collections = read(&self.collections);
        let mut res = Stats {
            actors: counters.actors,
            ..Stats::default()
        };
        for (id, count) in counters.records {
            let Some(name) = collections.name(id) else {
                continue;
            };
            if count > 0 {
                res.records.insert(name.to_owned(), count);
            }
        }
        let live = |name: &str| res.records.get(name).copied().unwrap_or(0);
        res.follows = live(nsid::FOLLOW);
        res.blocks = live(nsid::BLOCK);
        res.posts = live(nsid::POST);
        res.likes = live(nsid::LIKE);
        res.reposts = live(nsid::REPOST);
        for (reason, count) in counters.dropped {
            res.dropped.insert(reason.as_str().to_owned(), count);
        }
        res.cursor = match self.meta.get(META_CURSOR)? {
            Some(bytes) => Some(u64_value(&bytes)?),
            None => None,
        };
        Ok(res)
    }

    fn progress(&self, file_source: Option<&str>) -> Result<Option<Progress>, StoreError> {
        self.wait_durable()?;
        let Some(source) = file_source else {
            return Ok(match self.meta.get(META_CURSOR)? {
                Some(bytes) => Some(Progress::Live(Cursor(u64_value(&bytes)?))),
                None => None,
            });
        };
        let key = format!("{META_PROGRESS}{source}");
        let Some(bytes) = self.meta.get(key.as_bytes())? else {
            return Ok(None);
        };
        let (offset, cursor) = bytes
            .split_at_checked(8)
            .ok_or_else(|| StoreError::corrupt(format!("progress of {source}"), &[]))?;
        let cursor = u64_value(cursor)?;
        Ok(Some(Progress::File {
            source: source.to_owned(),
            offset: u64_value(offset)?,
            cursor: (cursor != 0).then_some(Cursor(cursor)),
        }))
    }

    fn record(
        &self,
        did: &str,
        collection: &str,
        rkey: &str,
    ) -> Result<Option<StoredRecord>, StoreError> {
        let Some(actor) = read(&self.actors).get(did) else {
            return Ok(None);
        };
        let Some(&collection_id) = read(&self.collections).by_name.get(collection) else {
            return Ok(None);
        };
        let key = keys::record_key(actor, collection_id, rkey);
        let in_flight = self
            .in_flight_data()
            .and_then(|data| data.records.get(&key[..]).cloned());
        let Some(bytes) =
            in_flight.map_or_else(|| self.record_value(&key), |bytes| Ok(Some(bytes)))?
        else {
            return Ok(None);
        };
        Ok(match value::decode(&bytes)? {
            StoredValue::Tombstone { .. } => None,
            StoredValue::Live(record) => Some(StoredRecord {
                uri: format!("at://{did}/{collection}/{rkey}"),
                cid: record.cid.to_owned(),
                json: record.json.to_owned(),
                created_at_us: record.created_at_us,
                indexed_at_us: record.indexed_at_us,
                sort_at_us: record.sort_at_us,
            }),
        })
    }

    fn actor(&self, did: &str) -> Result<Option<ActorInfo>, StoreError> {
        let actors = read(&self.actors);
        let Some(id) = actors.get(did) else {
            return Ok(None);
        };
        let Some(state) = actors.state(id) else {
            return Ok(None);
        };
        Ok(Some(ActorInfo {
            id,
            did: did.to_owned(),
            handle: state.handle.as_deref().map(str::to_owned),
            status: state.status(),
        }))
    }

    fn did(&self, id: ActorId) -> Option<String> {
        read(&self.actors).did(id).map(str::to_owned)
    }

    fn push_did(&self, id: ActorId, out: &mut String) -> bool {
        match read(&self.actors).did(id) {
            Some(did) => {
                out.push_str(did);
                true
            }
            None => false,
        }
    }

    fn actor_id(&self, did: &str) -> Option<ActorId> {
        read(&self.actors).get(did)
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.wait_durable()
    }

    fn graph_log_seq(&self) -> u64 {
        self.graph_seq.load(Ordering::Acquire)
    }

    fn graph_log_since(
        &self,
        after: u64,
        visit: &mut dyn FnMut(GraphChange),
    ) -> Result<u64, StoreError> {
        self.wait_durable()?;
        let mut last = after;
        for guard in self.graph_log.range((after + 1).to_be_bytes()..) {
            let (key, value) = guard.into_inner()?;
            last = graph_seq_of(&key)?;
            decode_graph_changes(&value, visit)?;
        }
        Ok(last)
    }

    fn prune_graph_log(&self, upto: u64) -> Result<(), StoreError> {
        let _writer = lock(&self.writer);
        let mut writes = self.db.batch().durability(Some(PersistMode::SyncData));
        for guard in self.graph_log.range(..=upto.to_be_bytes()) {
            writes.remove(&self.graph_log, guard.key()?);
        }
        writes.commit()?;
        Ok(())
    }

    fn intern_actors(&self, dids: &[&str]) -> Result<Vec<ActorId>, StoreError> {
        let _writer = lock(&self.writer);
        let mut writes = self.db.batch().durability(Some(PersistMode::SyncData));
        let mut actors = write(&self.actors);
        let mut res = Vec::with_capacity(dids.len());
        for did in dids {
            let (id, is_new) = actors.intern(did);
            if is_new {
                let Some(state) = actors.state(id) else {
                    continue;
                };
                let mut key = vec![ACTOR_ROW];
                key.extend_from_slice(&id.0.to_be_bytes());
                writes.insert(&self.actor_rows, key, encode_actor_row(did, state));
            }
            res.push(id);
        }
        drop(actors);
        writes.commit()?;
        Ok(res)
    }

    fn import_follows(&self, pairs: &[(ActorId, ActorId)]) -> Result<(), StoreError> {
        let _writer = lock(&self.writer);
        let mut writes = self.db.batch().durability(Some(PersistMode::SyncData));
        for &(actor, subject) in pairs {
            writes.insert(
                &self.index,
                edge_prefix(tag::IMPORTED_FOLLOW, actor, subject),
                [],
            );
        }
        writes.commit()?;
        Ok(())
    }

    fn actor_by_handle(&self, handle: &str) -> Option<ActorId> {
        read(&self.actors).by_handle(handle)
    }

    fn edge_uri(
        &self,
        collection: EdgeKind,
        actor: ActorId,
        subject: ActorId,
    ) -> Result<Option<String>, StoreError> {
        let (edge_tag, nsid) = match collection {
            EdgeKind::Follow => (tag::FOLLOW_EDGE, nsid::FOLLOW),
            EdgeKind::Block => (tag::BLOCK_BY_ACTOR, nsid::BLOCK),
        };
        self.first_record_under(&edge_prefix(edge_tag, actor, subject), actor, nsid)
    }

    fn interaction_uri(
        &self,
        collection: InteractionKind,
        actor: ActorId,
        subject: &RecordUri<'_>,
    ) -> Result<Option<String>, StoreError> {
        let (index_tag, nsid) = match collection {
            InteractionKind::Like => (tag::LIKE_BY_ACTOR, nsid::LIKE),
            InteractionKind::Repost => (tag::REPOST_BY_ACTOR, nsid::REPOST),
            InteractionKind::ListBlock => (tag::LISTBLOCK_BY_ACTOR, nsid::LISTBLOCK),
        };
        let Some(subject_ref) = self.ref_of(subject) else {
            return Ok(None);
        };
        let prefix = by_actor_key(index_tag, actor, &subject_ref, "");
        self.first_record_under(&prefix, actor, nsid)
    }

    fn list_page(
        &self,
        list: &ListOf<'_>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        if limit == 0 {
            return Ok(ListPage::default());
        }
        let prefix = match list {
            ListOf::Follows(actor) => {
                [&[tag::FOLLOW_BY_ACTOR][..], &actor.0.to_be_bytes()].concat()
            }
            ListOf::Followers(actor) => {
                [&[tag::FOLLOW_BY_SUBJECT][..], &actor.0.to_be_bytes()].concat()
            }
            ListOf::Likes(uri) | ListOf::Replies(uri) => {
                let Some(mut key) = self.ref_of(uri) else {
                    return Ok(ListPage::default());
                };
                if let Some(first) = key.first_mut() {
                    *first = if matches!(list, ListOf::Likes(_)) {
                        tag::LIKE_BY_SUBJECT
                    } else {
                        tag::REPLY_BY_PARENT
                    };
                }
                key
            }
        };
        let range = match after {
            Some(after) => self
                .index
                .range(prefix.clone()..[&prefix[..], after].concat()),
            None => self.index.prefix(prefix.clone()),
        };
        let mut page = ListPage::default();
        // Every list's keys end in: sort_at (8), the other actor (4), rkey. The cursor is the
        // tail of the last key returned: the next page is everything below it.
        let mut last_tail = Vec::new();
        for guard in range.rev() {
            let key = guard.key()?;
            let tail = key.get(prefix.len()..).unwrap_or_default();
            if page.entries.len() == limit {
                page.cursor = Some(last_tail);
                break;
            }
            page.entries
                .push(list_entry(list, tail, |id| self.did(id))?);
            last_tail = tail.to_vec();
        }
        Ok(page)
    }

    fn list_item_uri(
        &self,
        list: &RecordUri<'_>,
        subject: ActorId,
    ) -> Result<Option<String>, StoreError> {
        let Some(mut prefix) = self.ref_of(list) else {
            return Ok(None);
        };
        let Some(owner) = self.actor_id(list.did) else {
            return Ok(None);
        };
        if let Some(first) = prefix.first_mut() {
            *first = tag::LISTITEM_BY_LIST;
        }
        prefix.extend_from_slice(&subject.0.to_be_bytes());
        self.first_record_under(&prefix, owner, nsid::LISTITEM)
    }

    fn record_counts(&self, uri: &RecordUri<'_>) -> Result<RecordCounts, StoreError> {
        let Some(actor) = read(&self.actors).get(uri.did) else {
            return Ok(RecordCounts::default());
        };
        let Some(&collection) = read(&self.collections).by_name.get(uri.collection) else {
            return Ok(RecordCounts::default());
        };
        let mut key = vec![tag::RECORD_COUNT];
        keys::push_record_ref(&mut key, actor, collection, uri.rkey);
        let in_flight = self.in_flight_data();
        let mut get = |kind: u8| {
            key.push(kind);
            let res = self.count_value(in_flight.as_deref(), &key);
            key.pop();
            res
        };
        Ok(RecordCounts {
            likes: get(count::LIKES)?,
            reposts: get(count::REPOSTS)?,
            replies: get(count::REPLIES)?,
            quotes: get(count::QUOTES)?,
            list_items: get(count::LIST_ITEMS)?,
        })
    }

    fn actor_counts(&self, actor: ActorId) -> Result<ActorCounts, StoreError> {
        let in_flight = self.in_flight_data();
        let get =
            |kind: u8| self.count_value(in_flight.as_deref(), &keys::actor_count_key(actor, kind));
        Ok(ActorCounts {
            posts: get(count::POSTS)?,
            lists: get(count::LISTS)?,
            feeds: get(count::FEEDS)?,
            starter_packs: get(count::STARTER_PACKS)?,
        })
    }

    fn latest_rev(&self, actor: ActorId) -> Result<Option<u64>, StoreError> {
        let in_flight = self.in_flight_data();
        let rev = self.count_value(in_flight.as_deref(), &keys::latest_rev_key(actor))?;
        Ok((rev != 0).then_some(rev))
    }

    fn author_feed(
        &self,
        author: ActorId,
        below: Option<FeedKey>,
        visit: &mut dyn FnMut(FeedItem) -> bool,
    ) -> Result<(), StoreError> {
        // Taken before the engine is read: whatever the in-flight batch wrote is then either in
        // `pending` or already in the engine, and both say the same.
        let in_flight = self.in_flight_data();
        let lower = keys::author_feed_bound(author, None);
        let upper = keys::author_feed_bound(author, below.as_ref());
        let pending: &[(Vec<u8>, bool)] = match &in_flight {
            Some(data) => {
                let start = data.feed.partition_point(|(key, _)| key[..] < lower[..]);
                let tail = data.feed.get(start..).unwrap_or_default();
                let len = match below {
                    Some(_) => tail.partition_point(|(key, _)| key[..] < upper[..]),
                    None => tail.partition_point(|(key, _)| key.starts_with(&lower)),
                };
                tail.get(..len).unwrap_or_default()
            }
            None => &[],
        };
        let mut stored = match below {
            Some(_) => self.index.range(lower..upper),
            None => self.index.prefix(lower),
        }
        .rev();
        let mut next_stored = || -> Result<Option<fjall::UserKey>, StoreError> {
            stored
                .next()
                .map(|guard| guard.key())
                .transpose()
                .map_err(Into::into)
        };
        let mut pending = pending.iter().rev();
        let (mut stored_head, mut pending_head) = (next_stored()?, pending.next());
        // Merge the two newest-first streams; on equal keys the in-flight entry wins.
        loop {
            let (key, live): (&[u8], bool) = match (&stored_head, pending_head) {
                (None, None) => break,
                (Some(s), Some((p, live))) if p[..] >= s[..] => (p, *live),
                (Some(s), _) => (s, true),
                (None, Some((p, live))) => (p, *live),
            };
            let item = live.then(|| parse_feed_key(key)).transpose()?;
            let from_pending = pending_head.is_some_and(|(p, _)| p[..] == *key);
            if from_pending {
                if stored_head.as_deref() == pending_head.map(|(p, _)| &p[..]) {
                    stored_head = next_stored()?;
                }
                pending_head = pending.next();
            } else {
                stored_head = next_stored()?;
            }
            if let Some(item) = item
                && !visit(item)
            {
                break;
            }
        }
        Ok(())
    }

    fn for_each_edge(&self, visit: &mut dyn FnMut(GraphChange)) -> Result<(), StoreError> {
        self.wait_durable()?;
        for (edge_tag, make) in [
            (
                tag::IMPORTED_FOLLOW,
                GraphChange::Follow as fn(ActorId, ActorId) -> GraphChange,
            ),
            (
                tag::FOLLOW_PAIR,
                GraphChange::Follow as fn(ActorId, ActorId) -> GraphChange,
            ),
            (tag::BLOCK_PAIR, GraphChange::Block),
        ] {
            let mut last = None;
            for guard in self.index.prefix([edge_tag]) {
                let key = guard.key()?;
                let pair = key.get(1..9).and_then(|bytes| {
                    let actor = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?);
                    let subject = u32::from_be_bytes(bytes.get(4..)?.try_into().ok()?);
                    Some((ActorId(actor), ActorId(subject)))
                });
                let pair = pair.ok_or_else(|| StoreError::corrupt("edge key", &[]))?;
                // Duplicate records of one pair sit next to each other: visit the pair once.
                if last != Some(pair) {
                    visit(make(pair.0, pair.1));
                    last = Some(pair);
                }
            }
        }
        Ok(())
    }
}

/// What the index entries of one record are derived from.
struct IndexedRecord<'a> {
    actor: ActorId,
    collection: &'a str,
    rkey: &'a str,
    sort_at_us: i64,
    refs: &'a Refs<'a>,
}

/// A batch of events being applied; see [`Batch`].
pub struct EmbeddedBatch<'s> {
    store: &'s EmbeddedStore,
    _writer: MutexGuard<'s, ()>,
    writes: fjall::OwnedWriteBatch,
    /// Record writes of this batch, in arrival order until the flush sorts them.
    record_writes: Vec<(fjall::UserKey, fjall::UserValue)>,
    /// Index inserts (`true`) and removals, in arrival order until the flush sorts them.
    index_writes: Vec<(Vec<u8>, bool)>,
    /// Records written by this batch, newest value per key, so that later events of the same
    /// batch read what earlier ones wrote.
    overlay: FxHashMap<fjall::UserKey, fjall::UserValue>,
    counters: Counters,
    dirty_actors: FxHashSet<ActorId>,
    dirty_collections: Vec<CollectionId>,
    /// Live-record counts of the follow and block pairs touched: (at batch start, now).
    pair_counts: FxHashMap<(u8, ActorId, ActorId), (u32, u32)>,
    /// Feed items added and removed, in the order it happened.
    feed_changes: Vec<FeedChange>,
    /// Changes to counts (keys under `C` and `c`) since the last flush.
    count_deltas: FxHashMap<Vec<u8>, i64>,
    /// Actors with an applied identity event.
    identities: Vec<ActorId>,
    /// The newest revision of each actor's applied commits in this batch.
    latest_revs: FxHashMap<ActorId, u64>,
    /// The previous batch, while its write is still running.
    previous: Option<Arc<InFlightData>>,
    progress: Option<Progress>,
    n_events: usize,
}

impl<'s> EmbeddedBatch<'s> {
    fn new(store: &'s EmbeddedStore) -> EmbeddedBatch<'s> {
        let writer = lock(&store.writer);
        let counters = lock(&store.counters).clone();
        EmbeddedBatch {
            store,
            _writer: writer,
            writes: store.db.batch().durability(Some(PersistMode::SyncData)),
            record_writes: Vec::new(),
            index_writes: Vec::new(),
            overlay: FxHashMap::default(),
            counters,
            dirty_actors: FxHashSet::default(),
            dirty_collections: Vec::new(),
            pair_counts: FxHashMap::default(),
            feed_changes: Vec::new(),
            count_deltas: FxHashMap::default(),
            identities: Vec::new(),
            latest_revs: FxHashMap::default(),
            previous: store.in_flight_data(),
            progress: None,
            n_events: 0,
        }
    }

    fn intern_actor(&mut self, did: &str) -> ActorId {
        let (id, is_new) = write(&self.store.actors).intern(did);
        if is_new {
            self.dirty_actors.insert(id);
        }
        id
    }

    fn intern_collection(&mut self, name: &str) -> CollectionId {
        if let Some(&id) = read(&self.store.collections).by_name.get(name) {
            return id;
        }
        let mut collections = write(&self.store.collections);
        let id = CollectionId(collections.names.len() as u32);
        collections.by_name.insert(name.into(), id);
        collections.names.push(name.into());
        self.dirty_collections.push(id);
        id
    }

    /// Marks the event's author as an actor that counts, unless its account is deleted.
    fn count_author(&mut self, actor: ActorId) {
        let mut actors = write(&self.store.actors);
        if let Some(state) = actors.state_mut(actor)
            && !state.counted
            && state.status() != AccountStatus::Deleted
        {
            state.counted = true;
            self.counters.actors += 1;
            self.dirty_actors.insert(actor);
        }
    }

    fn read_record(&self, key: &[u8]) -> Result<Option<fjall::UserValue>, StoreError> {
        if let Some(bytes) = self.overlay.get(key) {
            return Ok(Some(bytes.clone()));
        }
        if let Some(bytes) = self.previous.as_ref().and_then(|p| p.records.get(key)) {
            return Ok(Some(bytes.clone()));
        }
        self.store.record_value(key)
    }

    fn write_record(&mut self, key: Vec<u8>, bytes: Vec<u8>) {
        // Engine byte views are reference counted: the batch and the overlay share one copy.
        let key = fjall::UserKey::from(key);
        let bytes = fjall::UserValue::from(bytes);
        self.record_writes.push((key.clone(), bytes.clone()));
        self.overlay.insert(key, bytes);
    }

    fn apply_commit(
        &mut self,
        did: &str,
        time_us: u64,
        commit: &Commit<'_>,
    ) -> Result<Outcome, StoreError> {
        let actor = self.intern_actor(did);
        let status = read(&self.store.actors)
            .state(actor)
            .map(ActorState::status);
        if status == Some(AccountStatus::Deleted) {
            return Ok(Outcome::ActorDeleted);
        }
        self.count_author(actor);
        let collection = self.intern_collection(&commit.collection);
        let key = keys::record_key(actor, collection, &commit.rkey);
        let current = self.read_record(&key)?;
        if let Some(bytes) = &current {
            let stored = value::decode(bytes)?;
            if stored.rev() >= commit.rev {
                return Ok(Outcome::Stale);
            }
            if let StoredValue::Live(old) = stored {
                self.unindex(actor, &commit.collection, collection, &commit.rkey, &old)?;
            }
        }
        let bytes = match (&commit.record, commit.operation) {
            (Some(record), Operation::Create | Operation::Update) => {
                let indexed_at_us = i64::try_from(time_us).unwrap_or(i64::MAX);
                let sort_at_us = record
                    .created_at_us
                    .map_or(indexed_at_us, |c| c.min(indexed_at_us));
                let indexed = IndexedRecord {
                    actor,
                    collection: &commit.collection,
                    rkey: &commit.rkey,
                    sort_at_us,
                    refs: &record.refs,
                };
                self.index_record(&indexed, true)?;
                *self.counters.records.entry(collection).or_default() += 1;
                value::encode_live(&LiveRecord {
                    rev: commit.rev,
                    created_at_us: record.created_at_us,
                    indexed_at_us,
                    sort_at_us,
                    cid: &record.cid,
                    json: record.json,
                })
            }
            _ => value::encode_tombstone(commit.rev),
        };
        self.write_record(key, bytes);
        let latest = self.latest_revs.entry(actor).or_default();
        *latest = (*latest).max(commit.rev);
        Ok(Outcome::Applied)
    }

    /// Removes the index entries and the count of a live record that is being replaced.
    fn unindex(
        &mut self,
        actor: ActorId,
        collection_name: &str,
        collection: CollectionId,
        rkey: &str,
        old: &LiveRecord<'_>,
    ) -> Result<(), StoreError> {
        let (_, refs) = jetstream::record_fields(collection_name, old.json).map_err(|err| {
            StoreError::corrupt(format!("stored record no longer decodes: {err}"), &[])
        })?;
        let indexed = IndexedRecord {
            actor,
            collection: collection_name,
            rkey,
            sort_at_us: old.sort_at_us,
            refs: &refs,
        };
        self.index_record(&indexed, false)?;
        let count = self.counters.records.entry(collection).or_default();
        *count = count.saturating_sub(1);
        Ok(())
    }

    /// Adds (`insert`) or removes the index entries of one record.
    fn index_record(&mut self, record: &IndexedRecord<'_>, insert: bool) -> Result<(), StoreError> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let time = keys::time_bytes(record.sort_at_us);
        let author_tail = |key: &mut Vec<u8>| {
            key.extend_from_slice(&time);
            key.extend_from_slice(&record.actor.0.to_be_bytes());
            key.extend_from_slice(record.rkey.as_bytes());
        };
        match (record.collection, record.refs) {
            (nsid::LIKE, Refs::Subject { subject }) => {
                let mut key = self.ref_key(tag::LIKE_BY_SUBJECT, subject);
                self.count(&key, count::LIKES, insert);
                keys.push(by_actor_key(
                    tag::LIKE_BY_ACTOR,
                    record.actor,
                    &key,
                    record.rkey,
                ));
                author_tail(&mut key);
                keys.push(key);
            }
            (nsid::REPOST, Refs::Subject { subject }) => {
                let mut key = self.ref_key(tag::REPOST_BY_SUBJECT, subject);
                self.count(&key, count::REPOSTS, insert);
                keys.push(by_actor_key(
                    tag::REPOST_BY_ACTOR,
                    record.actor,
                    &key,
                    record.rkey,
                ));
                author_tail(&mut key);
                keys.push(key);
                // A repost shows in feeds when it reposts a post, the only thing clients repost.
                if subject.collection == nsid::POST {
                    let (code, text) = rkey_code(record.rkey);
                    let (post_code, post_text) = rkey_code(subject.rkey);
                    let item = FeedItem {
                        key: FeedKey {
                            sort_at_us: record.sort_at_us,
                            code,
                            author: record.actor,
                            repost: true,
                        },
                        flags: flag::REPOST
                            | if text { flag::RKEY_TEXT } else { 0 }
                            | if post_text {
                                flag::SUBJECT_RKEY_TEXT
                            } else {
                                0
                            },
                        post: PostRef {
                            actor: self.intern_actor(subject.did),
                            code: post_code,
                        },
                    };
                    keys.push(keys::author_feed_key(&item, record.rkey, subject.rkey));
                    self.feed_changes.push(feed_change(item, insert));
                }
            }
            (
                nsid::POST,
                Refs::Post {
                    reply,
                    quote,
                    media,
                },
            ) => {
                let (code, text) = rkey_code(record.rkey);
                let mut flags = if text { flag::RKEY_TEXT } else { 0 };
                if quote.is_some() {
                    flags |= flag::QUOTE;
                }
                flags |= match media {
                    Media::Images => flag::IMAGES,
                    Media::Video => flag::VIDEO,
                    Media::None | Media::External => 0,
                };
                if let Some(reply) = reply {
                    flags |= flag::REPLY;
                    if self.intern_actor(reply.root.did) == record.actor {
                        flags |= flag::SELF_THREAD;
                    }
                }
                let item = FeedItem {
                    key: FeedKey {
                        sort_at_us: record.sort_at_us,
                        code,
                        author: record.actor,
                        repost: false,
                    },
                    flags,
                    post: PostRef {
                        actor: record.actor,
                        code,
                    },
                };
                keys.push(keys::author_feed_key(&item, record.rkey, record.rkey));
                self.feed_changes.push(feed_change(item, insert));
                self.count_actor(record.actor, count::POSTS, insert);
                if let Some(reply) = reply {
                    for (index_tag, target) in [
                        (tag::REPLY_BY_PARENT, &reply.parent),
                        (tag::REPLY_BY_ROOT, &reply.root),
                    ] {
                        let mut key = self.ref_key(index_tag, target);
                        if index_tag == tag::REPLY_BY_PARENT {
                            self.count(&key, count::REPLIES, insert);
                        }
                        author_tail(&mut key);
                        keys.push(key);
                    }
                }
                if let Some(quote) = quote {
                    let mut key = self.ref_key(tag::QUOTE_BY_SUBJECT, quote);
                    self.count(&key, count::QUOTES, insert);
                    author_tail(&mut key);
                    keys.push(key);
                }
            }
            (nsid::FOLLOW, Refs::Actor { subject }) => {
                let subject = self.intern_actor(subject);
                let pair = [record.actor.0.to_be_bytes(), subject.0.to_be_bytes()];
                let mut by_actor = vec![tag::FOLLOW_BY_ACTOR];
                by_actor.extend_from_slice(&pair[0]);
                by_actor.extend_from_slice(&time);
                by_actor.extend_from_slice(&pair[1]);
                by_actor.extend_from_slice(record.rkey.as_bytes());
                let mut by_subject = vec![tag::FOLLOW_BY_SUBJECT];
                by_subject.extend_from_slice(&pair[1]);
                by_subject.extend_from_slice(&time);
                by_subject.extend_from_slice(&pair[0]);
                by_subject.extend_from_slice(record.rkey.as_bytes());
                let mut edge = edge_prefix(tag::FOLLOW_EDGE, record.actor, subject).to_vec();
                edge.extend_from_slice(record.rkey.as_bytes());
                keys.extend([by_actor, by_subject, edge]);
                self.count_pair(tag::FOLLOW_PAIR, record.actor, subject, insert)?;
            }
            (nsid::BLOCK, Refs::Actor { subject }) => {
                let subject = self.intern_actor(subject);
                let mut by_actor = edge_prefix(tag::BLOCK_BY_ACTOR, record.actor, subject).to_vec();
                by_actor.extend_from_slice(record.rkey.as_bytes());
                let mut by_subject =
                    edge_prefix(tag::BLOCK_BY_SUBJECT, subject, record.actor).to_vec();
                by_subject.extend_from_slice(record.rkey.as_bytes());
                keys.extend([by_actor, by_subject]);
                self.count_pair(tag::BLOCK_PAIR, record.actor, subject, insert)?;
            }
            (nsid::LIST, _) => self.count_actor(record.actor, count::LISTS, insert),
            (nsid::GENERATOR, _) => self.count_actor(record.actor, count::FEEDS, insert),
            (nsid::STARTERPACK, _) => self.count_actor(record.actor, count::STARTER_PACKS, insert),
            // A list's items are the ones its owner wrote; anyone else's point at it in vain.
            (nsid::LISTITEM, Refs::ListItem { subject, list })
                if self.intern_actor(list.did) == record.actor =>
            {
                let subject = self.intern_actor(subject);
                let mut key = self.ref_key(tag::LISTITEM_BY_LIST, list);
                self.count(&key, count::LIST_ITEMS, insert);
                key.extend_from_slice(&subject.0.to_be_bytes());
                key.extend_from_slice(record.rkey.as_bytes());
                keys.push(key);
            }
            (nsid::LISTBLOCK, Refs::Target { target }) => {
                let key = self.ref_key(tag::LISTBLOCK_BY_ACTOR, target);
                keys.push(by_actor_key(
                    tag::LISTBLOCK_BY_ACTOR,
                    record.actor,
                    &key,
                    record.rkey,
                ));
            }
            _ => {}
        }
        self.index_writes
            .extend(keys.into_iter().map(|key| (key, insert)));
        Ok(())
    }

    /// Counts a record in or out of the count `kind` of the record whose reference `ref_key`
    /// holds (after its one-byte index tag).
    fn count(&mut self, ref_key: &[u8], kind: u8, insert: bool) {
        let mut key = Vec::with_capacity(ref_key.len() + 1);
        key.push(tag::RECORD_COUNT);
        key.extend_from_slice(ref_key.get(1..).unwrap_or_default());
        key.push(kind);
        *self.count_deltas.entry(key).or_default() += if insert { 1 } else { -1 };
    }

    /// Counts a record of `actor` in or out of the actor count `kind`.
    fn count_actor(&mut self, actor: ActorId, kind: u8, insert: bool) {
        let key = keys::actor_count_key(actor, kind).to_vec();
        *self.count_deltas.entry(key).or_default() += if insert { 1 } else { -1 };
    }

    /// Counts a follow or block record of a pair in (`insert`) or out.
    fn count_pair(
        &mut self,
        pair_tag: u8,
        actor: ActorId,
        subject: ActorId,
        insert: bool,
    ) -> Result<(), StoreError> {
        let key = (pair_tag, actor, subject);
        let counts = match self.pair_counts.get_mut(&key) {
            Some(counts) => counts,
            None => {
                let previous = self.previous.as_ref().and_then(|p| p.pair_counts.get(&key));
                let stored = match previous {
                    Some(&count) => count,
                    None => match self
                        .store
                        .index
                        .get(edge_prefix(pair_tag, actor, subject))?
                    {
                        Some(bytes) => pair_count(&bytes)?,
                        None => 0,
                    },
                };
                self.pair_counts.entry(key).or_insert((stored, stored))
            }
        };
        counts.1 = if insert {
            counts.1.saturating_add(1)
        } else {
            counts.1.saturating_sub(1)
        };
        Ok(())
    }

    /// `tag ++ record ref` of the record an AT-URI names, interning its DID and collection.
    fn ref_key(&mut self, index_tag: u8, uri: &RecordUri<'_>) -> Vec<u8> {
        let actor = self.intern_actor(uri.did);
        let collection = self.intern_collection(uri.collection);
        let mut key = Vec::with_capacity(48);
        key.push(index_tag);
        keys::push_record_ref(&mut key, actor, collection, uri.rkey);
        key
    }

    fn apply_identity(&mut self, did: &str, seq: u64, handle: Option<&str>) -> Outcome {
        let actor = self.intern_actor(did);
        self.count_author(actor);
        let mut actors = write(&self.store.actors);
        let Some(state) = actors.state_mut(actor) else {
            return Outcome::Stale;
        };
        if seq <= state.identity_seq {
            return Outcome::Stale;
        }
        state.identity_seq = seq;
        // `handle.invalid` is how the relay says the handle failed verification.
        actors.set_handle(actor, handle.filter(|h| *h != "handle.invalid"));
        self.dirty_actors.insert(actor);
        self.identities.push(actor);
        Outcome::Applied
    }

    fn apply_account(
        &mut self,
        did: &str,
        seq: u64,
        status: AccountStatus,
    ) -> Result<Outcome, StoreError> {
        let actor = self.intern_actor(did);
        self.count_author(actor);
        let previous = {
            let actors = read(&self.store.actors);
            let Some(state) = actors.state(actor) else {
                return Ok(Outcome::Stale);
            };
            if seq <= state.account_seq {
                return Ok(Outcome::Stale);
            }
            state.status()
        };
        if status == AccountStatus::Deleted && previous != AccountStatus::Deleted {
            self.delete_actor_records(actor)?;
        }
        let mut actors = write(&self.store.actors);
        if let Some(state) = actors.state_mut(actor) {
            state.account_seq = seq;
            state.status = status.code();
            let counts = status != AccountStatus::Deleted;
            if state.counted != counts {
                state.counted = counts;
                if counts {
                    self.counters.actors += 1;
                } else {
                    self.counters.actors = self.counters.actors.saturating_sub(1);
                }
            }
        }
        self.dirty_actors.insert(actor);
        Ok(Outcome::Applied)
    }

    /// Removes every live record of a deleted account, leaving tombstones at their revisions.
    fn delete_actor_records(&mut self, actor: ActorId) -> Result<(), StoreError> {
        // The scan reads durable data only, so write what this batch holds so far first.
        self.flush()?;
        self.store.wait_in_flight()?;
        let prefix = keys::actor_records_prefix(actor);
        let mut live = Vec::new();
        for guard in self.store.records.prefix(prefix) {
            let (key, bytes) = guard.into_inner()?;
            if let StoredValue::Live(_) = value::decode(&bytes)? {
                live.push((key.to_vec(), bytes.to_vec()));
            }
        }
        for (key, bytes) in live {
            let Some((_, collection, rkey)) = keys::parse_record_key(&key) else {
                return Err(StoreError::corrupt("record key", &[]));
            };
            let StoredValue::Live(old) = value::decode(&bytes)? else {
                continue;
            };
            let name = read(&self.store.collections)
                .name(collection)
                .map(str::to_owned)
                .ok_or_else(|| StoreError::corrupt(format!("collection {collection:?}"), &[]))?;
            self.unindex(actor, &name, collection, rkey, &old)?;
            self.write_record(key.clone(), value::encode_tombstone(old.rev));
        }
        Ok(())
    }

    /// Commits what the batch holds so far, durably, keeping the batch open.
    fn flush(&mut self) -> Result<(), StoreError> {
        let store = self.store;
        {
            let actors = read(&store.actors);
            for &id in &self.dirty_actors {
                let (Some(did), Some(state)) = (actors.did(id), actors.state(id)) else {
                    continue;
                };
                let mut key = vec![ACTOR_ROW];
                key.extend_from_slice(&id.0.to_be_bytes());
                self.writes
                    .insert(&store.actor_rows, key, encode_actor_row(did, state));
            }
        }
        {
            let collections = read(&store.collections);
            for &id in &self.dirty_collections {
                let Some(name) = collections.name(id) else {
                    continue;
                };
                let key = [META_COLLECTION, &id.0.to_be_bytes()].concat();
                self.writes.insert(&store.meta, key, name.as_bytes());
            }
        }
        self.writes.insert(
            &store.meta,
            META_COUNT_ACTORS,
            self.counters.actors.to_be_bytes(),
        );
        for (id, count) in &self.counters.records {
            let key = [META_COUNT_RECORDS, &id.0.to_be_bytes()].concat();
            self.writes.insert(&store.meta, key, count.to_be_bytes());
        }
        for (reason, count) in &self.counters.dropped {
            let key = format!("{META_COUNT_DROPPED}{reason}");
            self.writes
                .insert(&store.meta, key.into_bytes(), count.to_be_bytes());
        }
        for (&(pair_tag, actor, subject), &(_, count)) in &self.pair_counts {
            let key = edge_prefix(pair_tag, actor, subject);
            if count == 0 {
                self.writes.remove(&store.index, key);
            } else {
                self.writes.insert(&store.index, key, count.to_be_bytes());
            }
        }
        if let Some(progress) = self.progress.take() {
            write_progress(&mut self.writes, &store.meta, &progress);
        }
        // Counts: the stored value (or the previous batch's, still being written) plus this
        // batch's changes. A record is counted when its index entries are written or removed,
        // which happens once per change of its state, so replays never count twice.
        let mut counts = FxHashMap::default();
        for (key, delta) in self.count_deltas.drain() {
            let base = match self.previous.as_ref().and_then(|p| p.counts.get(&key)) {
                Some(&count) => count,
                None => match store.index.get(&key)? {
                    Some(bytes) => u64_value(&bytes)?,
                    None => 0,
                },
            };
            let count = base.saturating_add_signed(delta);
            if count == 0 {
                self.writes.remove(&store.index, key.clone());
            } else {
                self.writes
                    .insert(&store.index, key.clone(), count.to_be_bytes());
            }
            counts.insert(key, count);
        }
        // Latest revisions only move forward: an older commit of another record may still
        // apply after a newer one.
        for (actor, rev) in self.latest_revs.drain() {
            let key = keys::latest_rev_key(actor);
            if rev > store.count_value(self.previous.as_deref(), &key)? {
                self.writes.insert(&store.index, key, rev.to_be_bytes());
                counts.insert(key.to_vec(), rev);
            }
        }
        // The memtable is a skip list: inserting keys in order keeps each search path in cache,
        // which measured much cheaper than inserting them as events come. The sorts are stable,
        // so of two writes to one key the later still lands last and wins.
        self.record_writes.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, value) in self.record_writes.drain(..) {
            self.writes.insert(&store.records, key, value);
        }
        self.index_writes.sort_by(|a, b| a.0.cmp(&b.0));
        // Feed readers see this batch's feed entries before the engine write is done.
        let mut feed: Vec<(Vec<u8>, bool)> = Vec::new();
        for (key, insert) in &self.index_writes {
            if key.first() == Some(&tag::AUTHOR_FEED) {
                match feed.last_mut() {
                    Some(last) if last.0 == *key => last.1 = *insert,
                    _ => feed.push((key.clone(), *insert)),
                }
            }
        }
        for (key, insert) in self.index_writes.drain(..) {
            if insert {
                self.writes.insert(&store.index, key, []);
            } else {
                self.writes.remove(&store.index, key);
            }
        }
        let writes = std::mem::replace(
            &mut self.writes,
            store.db.batch().durability(Some(PersistMode::SyncData)),
        );
        // Batches reach the disk in order: the previous write must be durable before this one.
        store.wait_in_flight()?;
        let data = Arc::new(InFlightData {
            feed,
            counts,
            records: std::mem::take(&mut self.overlay),
            pair_counts: self
                .pair_counts
                .iter()
                .map(|(&key, &(_, now))| (key, now))
                .collect(),
        });
        let done = Arc::new(Done::default());
        let writer = std::thread::Builder::new()
            .name("batch-writer".to_owned())
            .spawn({
                let done = done.clone();
                move || {
                    let res = writes.commit();
                    done.set(&res);
                    res
                }
            })
            .map_err(|err| StoreError::Writer(err.to_string()))?;
        *lock(&store.in_flight) = Some(InFlight {
            data: data.clone(),
            writer,
            done,
        });
        self.previous = Some(data);
        *lock(&store.counters) = self.counters.clone();
        self.dirty_actors.clear();
        self.dirty_collections.clear();
        Ok(())
    }
}

fn write_progress(writes: &mut fjall::OwnedWriteBatch, meta: &Keyspace, progress: &Progress) {
    let cursor = match progress {
        Progress::Live(cursor) => Some(*cursor),
        Progress::File {
            source,
            offset,
            cursor,
        } => {
            let key = format!("{META_PROGRESS}{source}");
            let value = [
                offset.to_be_bytes(),
                cursor.unwrap_or_default().0.to_be_bytes(),
            ]
            .concat();
            writes.insert(meta, key.into_bytes(), value);
            *cursor
        }
    };
    if let Some(cursor) = cursor {
        writes.insert(meta, META_CURSOR, cursor.0.to_be_bytes());
    }
}

impl Batch for EmbeddedBatch<'_> {
    fn apply(&mut self, event: &Event<'_>) -> Result<Outcome, StoreError> {
        self.n_events += 1;
        match &event.body {
            Body::Commit(commit) => self.apply_commit(&event.did, event.time_us, commit),
            Body::Identity { seq, handle } => {
                Ok(self.apply_identity(&event.did, *seq, handle.as_deref()))
            }
            Body::Account { seq, status, .. } => self.apply_account(&event.did, *seq, *status),
        }
    }

    fn drop_event(&mut self, reason: DropReason) {
        self.n_events += 1;
        *self.counters.dropped.entry(reason).or_default() += 1;
    }

    fn set_progress(&mut self, progress: Progress) {
        self.progress = Some(progress);
    }

    fn len(&self) -> usize {
        self.n_events
    }

    fn commit(mut self) -> Result<Committed, StoreError> {
        let mut res = Vec::new();
        for (&(pair_tag, actor, subject), &(before, after)) in &self.pair_counts {
            if (before > 0) == (after > 0) {
                continue;
            }
            // An imported follow keeps the edge when its last record goes.
            let imported = edge_prefix(tag::IMPORTED_FOLLOW, actor, subject);
            if pair_tag == tag::FOLLOW_PAIR && self.store.index.contains_key(imported)? {
                continue;
            }
            res.push(match (pair_tag == tag::FOLLOW_PAIR, after > 0) {
                (true, true) => GraphChange::Follow(actor, subject),
                (true, false) => GraphChange::Unfollow(actor, subject),
                (false, true) => GraphChange::Block(actor, subject),
                (false, false) => GraphChange::Unblock(actor, subject),
            });
        }
        res.sort_unstable();
        // The changes go into the graph log in the same atomic write as the records, so that a
        // graph snapshot plus the log after it always equals the stored edges.
        let cursor = match &self.progress {
            Some(Progress::Live(cursor)) => Some(*cursor),
            Some(Progress::File { cursor, .. }) => *cursor,
            None => None,
        };
        let seq = self.store.graph_seq.load(Ordering::Acquire) + 1;
        if !res.is_empty() {
            let value = encode_graph_changes(&res);
            self.writes
                .insert(&self.store.graph_log, seq.to_be_bytes(), value);
            self.writes
                .insert(&self.store.meta, META_GRAPH_SEQ, seq.to_be_bytes());
        }
        self.flush()?;
        if !res.is_empty() {
            self.store.graph_seq.store(seq, Ordering::Release);
        }
        Ok(Committed {
            graph: res,
            feed: self.feed_changes,
            cursor,
            identities: self.identities,
        })
    }
}
