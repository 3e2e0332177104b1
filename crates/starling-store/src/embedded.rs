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

use std::path::Path;

mod actor_snapshot;
mod backup;
mod done;

use done::Done;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use fjall::config::PartitioningPolicy;
use fjall::{AbstractTree, Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use rustc_hash::FxHashMap;
use starling_core::feed::{FeedItem, FeedKey};
use starling_core::jetstream::{DropReason, Event, nsid};
use starling_core::syntax::RecordUri;
use starling_core::{ActorId, Cursor};

use crate::actors::{ActorRows, ActorTable};
use crate::apply::{Pair, Rules, WriteSet};
use crate::catalog::{Catalog, Collections, Counters};
use crate::codec::{
    decode_actor_row, decode_file_progress, decode_graph_changes, edge_prefix, encode_actor_row,
    encode_file_progress, encode_graph_changes, key_text, parse_feed_key, stored_record, u64_value,
};
use crate::format;
use crate::fresh_keys::FreshKeys;
use crate::keys::{self, count, tag};
use crate::locks::{lock, read, write};
use crate::queries;
use crate::value_cache::ValueCache;
use crate::{
    ActorCounts, ActorInfo, Batch, CacheStats, Committed, EdgeKind, GraphChange, InteractionKind,
    ListOf, ListPage, Outcome, Progress, RecordCounts, Stats, Store, StoreError, StoredRecord,
};
use cached::{ACTOR_COUNT_KINDS, CountRow, RECORD_COUNT_KINDS, records_liveness, rows_moved};

mod cached;
mod heads;
mod in_flight;
mod private_rows;
mod reads;
mod scan;

use reads::Reads;

const META_CURSOR: &[u8] = b"cursor";
/// The newest graph log sequence, kept apart from the log because pruning may empty the log.
const META_GRAPH_SEQ: &[u8] = b"graph_seq";
const META_PROGRESS: &str = "progress/";
const META_COUNT_ACTORS: &[u8] = b"count/actors";
const META_COUNT_RECORDS: &[u8] = b"count/records/";
const META_COUNT_DROPPED: &str = "count/dropped/";
const META_COLLECTION: &[u8] = b"collection/";
const ACTOR_ROW: u8 = b'i';

mod open;
mod unstall;
mod upgrade;

/// Bytes of memtable per keyspace before it is flushed to a table on disk.
const MEMTABLE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Bytes of block cache shared by all keyspaces.
const CACHE_BYTES: u64 = 256 * 1024 * 1024;
/// Count keys kept in memory: the counts of 200,000 posts (five keys each) or 250,000 actors
/// (four), about 250 MB when full (ARCHITECTURE.md's resource model).
const COUNT_CACHE_ENTRIES: usize = 1_000_000;
/// Record keys whose liveness is kept in memory: the posts that reposts and notifications name
/// most; half the count cache's bytes when full (ARCHITECTURE.md's resource model).
const LIVE_CACHE_ENTRIES: usize = 500_000;

/// The embedded, durable store.
pub struct EmbeddedStore {
    /// The data directory.
    dir: std::path::PathBuf,
    db: Database,
    records: Keyspace,
    index: Keyspace,
    actor_rows: Keyspace,
    meta: Keyspace,
    graph_log: Keyspace,
    /// Each user's private state (format 2; `embedded/private_rows.rs`).
    private: Keyspace,
    /// The sequence number of the newest graph log entry.
    graph_seq: AtomicU64,
    actors: RwLock<ActorTable>,
    collections: RwLock<Collections>,
    counters: Mutex<Counters>,
    /// Counts read or written lately; see [`ValueCache`].
    count_cache: Arc<ValueCache>,
    /// Every count of a record or actor read lately, by the count key without its kind; see
    /// `cached.rs`.
    row_cache: Arc<ValueCache<CountRow>>,
    /// Whether a record is live (1) or not (0), for record keys read or written lately.
    live_cache: Arc<ValueCache>,
    /// The newest entries of lists read lately; see `heads.rs`.
    heads: Arc<heads::Heads>,
    /// Entries a head keeps; see [`EmbeddedStore::set_head_entries`].
    head_entries: AtomicUsize,
    writer: Mutex<()>,
    /// The batch being written by a background thread, if any; see [`InFlight`].
    in_flight: Mutex<Option<InFlight>>,
    /// Whether batches make notifications; see [`EmbeddedStore::set_notifications`].
    notifications: AtomicBool,
    /// Every record, pair-count and count key written, when the store was empty at open; see
    /// [`FreshKeys`].
    fresh_keys: Option<FreshKeys>,
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

/// What an in-flight batch wrote, for the reads of the next batch.
#[derive(Default)]
struct InFlightData {
    records: FxHashMap<Vec<u8>, Vec<u8>>,
    pair_counts: FxHashMap<Pair, u32>,
    /// The entries written (`true`) or removed under the tags of [`PENDING_TAGS`], sorted by
    /// key, one per key.
    entries: Vec<(Vec<u8>, bool)>,
    /// Counts and latest revisions written, by key.
    counts: FxHashMap<Vec<u8>, u64>,
    /// The prefixes of the lists kept in heads whose entries the batch changed.
    touched: Vec<Vec<u8>>,
}

/// The index entries an in-flight batch keeps for the reads that follow it: author feeds
/// (feed readers), reposts by subject (a post's deletion unfeeds them) and list items (a
/// thread gate's list rule).
const PENDING_TAGS: [u8; 3] = [
    tag::AUTHOR_FEED,
    tag::REPOST_BY_SUBJECT,
    tag::LISTITEM_BY_LIST,
];

/// How often `flush_to_tables` looks whether the engine's flushes are done.
const FLUSH_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

/// The newest sequence number written to any of `keyspaces` (0 for none); a reopen keeps it.
fn highest_seqno(keyspaces: &[&Keyspace]) -> u64 {
    keyspaces
        .iter()
        .filter_map(|keyspace| keyspace.tree.get_highest_seqno())
        .max()
        .unwrap_or(0)
}

impl EmbeddedStore {
    fn record_value(&self, key: &[u8]) -> Result<Option<fjall::UserValue>, StoreError> {
        Ok(self.records.get(key)?)
    }

    /// Turns notifications off (or on again) for the batches that start after it, to measure
    /// what they cost at ingest. A store written with them off lacks the notifications of
    /// those records for good: for benchmarks only.
    pub fn set_notifications(&self, on: bool) {
        self.notifications.store(on, Ordering::Relaxed);
    }

    /// Sets how many of a list's newest entries (notifications, follows, followers, an actor's
    /// likes...) are kept in memory when a first page or unread count reads them (200 by
    /// default; 0 keeps none), for the heads filled after it. Tests make heads short so that
    /// reads go past them.
    pub fn set_head_entries(&self, entries: usize) {
        self.head_entries.store(entries, Ordering::Relaxed);
    }

    /// Flushes every in-memory table to disk, so that the next open has no journal to replay.
    ///
    /// Opening a store replays the journal into memtables: after a large replay or import that
    /// is seconds of work and hundreds of megabytes, on every start until a flush happens. A
    /// clean shutdown calls this; after a crash the journal does its job instead.
    ///
    /// Fails, instead of waiting forever, when the engine's background work failed (a full
    /// disk, an I/O error): its flush never ends, and the engine is poisoned.
    pub fn flush_to_tables(&self) -> Result<(), StoreError> {
        self.wait_in_flight()?;
        let keyspaces = self.keyspaces();
        for keyspace in keyspaces {
            // `rotate_memtable_and_wait` would poll for the flush without end once the flush
            // worker died: rotate here, and poll with a check of the poison flag below.
            keyspace.rotate_memtable()?;
        }
        while keyspaces
            .iter()
            .any(|keyspace| keyspace.sealed_memtable_count() > 0)
        {
            self.check_engine()?;
            std::thread::sleep(FLUSH_POLL_INTERVAL);
        }
        // The next open reads the actor table from one file rather than row by row; a failed
        // write only leaves that open the slower way.
        if let Err(err) =
            actor_snapshot::write(&self.dir, self.actor_rows_seqno(), &read(&self.actors))
        {
            tracing::warn!(error = %err, "the actor snapshot was not written");
        }
        Ok(())
    }

    /// The newest sequence number of the `actors` keyspace: any write of an actor row moves
    /// it, and it survives a restart (the actor snapshot is valid while it stays the same).
    fn actor_rows_seqno(&self) -> u64 {
        highest_seqno(&[&self.actor_rows])
    }

    /// Fails with the engine's `Poisoned` error once a write or a background flush or
    /// compaction of the engine has failed; nothing may be written after that.
    fn check_engine(&self) -> Result<(), StoreError> {
        // A buffered persist only checks the flag; the journal is synced by each batch.
        match self.db.persist(PersistMode::Buffer) {
            Err(fjall::Error::Poisoned) => Err(StoreError::Writer(
                "the storage engine failed a write or a background flush (its error is in the \
                 log); nothing more is written, and the next start recovers from the journal"
                    .to_owned(),
            )),
            res => Ok(res?),
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
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        if let Err(err) = self.wait_in_flight() {
            tracing::error!(error = %err, "the last batch failed to write");
        }
    }
}

fn graph_seq_of(key: &[u8]) -> Result<u64, StoreError> {
    u64_value(key)
}

impl Store for EmbeddedStore {
    type Batch<'s> = EmbeddedBatch<'s>;

    fn backup(&self, name: &str) -> Result<crate::BackupReport, StoreError> {
        backup::write_copy(self, name)
    }

    fn reads_inline(&self) -> bool {
        true
    }

    fn caches(&self) -> Vec<CacheStats> {
        vec![
            self.count_cache.stats("counts"),
            self.row_cache.stats("count_rows"),
            self.live_cache.stats("liveness"),
            self.heads.stats("list_heads"),
        ]
    }

    fn batch(&self) -> EmbeddedBatch<'_> {
        EmbeddedBatch::new(self)
    }

    fn usage(&self) -> Result<crate::Usage, StoreError> {
        self.scan_usage()
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
        decode_file_progress(source, &bytes).map(Some)
    }

    fn record(
        &self,
        did: &str,
        collection: &str,
        rkey: &str,
    ) -> Result<Option<StoredRecord>, StoreError> {
        let Some(key) = self.record_key_of(did, collection, rkey) else {
            return Ok(None);
        };
        let in_flight = self
            .in_flight_data()
            .and_then(|data| data.records.get(&key[..]).cloned());
        let Some(bytes) = in_flight.map_or_else(
            || Ok::<_, StoreError>(self.record_value(&key)?.map(|bytes| bytes.to_vec())),
            |bytes| Ok(Some(bytes)),
        )?
        else {
            return Ok(None);
        };
        stored_record(did, collection, rkey, &bytes)
    }

    fn record_is_live(&self, did: &str, collection: &str, rkey: &str) -> Result<bool, StoreError> {
        self.record_key_of(did, collection, rkey)
            .map_or(Ok(false), |key| self.record_key_is_live(&key))
    }

    fn actor_record_is_live(
        &self,
        actor: ActorId,
        collection: &str,
        rkey: &str,
    ) -> Result<bool, StoreError> {
        self.actor_record_key(actor, collection, rkey)
            .map_or(Ok(false), |key| self.record_key_is_live(&key))
    }

    fn actor(&self, did: &str) -> Result<Option<ActorInfo>, StoreError> {
        let actors = read(&self.actors);
        let Some(id) = actors.get(did) else {
            return Ok(None);
        };
        let Some(state) = actors.state(id) else {
            return Ok(None);
        };
        Ok(Some(state.info(id, did)))
    }

    fn did(&self, id: ActorId) -> Option<String> {
        read(&self.actors).did(id).map(String::from)
    }

    fn push_did(&self, id: ActorId, out: &mut String) -> bool {
        match read(&self.actors).did(id) {
            Some(did) => {
                out.push_str(&did);
                true
            }
            None => false,
        }
    }

    fn actor_id(&self, did: &str) -> Option<ActorId> {
        read(&self.actors).get(did)
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.wait_durable()?;
        // A failed background flush surfaces here, not only at the next batch's commit.
        self.check_engine()
    }

    fn graph_log_seq(&self) -> u64 {
        self.graph_seq.load(Ordering::Acquire)
    }

    fn write_seq(&self) -> Option<u64> {
        // fjall's sequence numbers are shared by its keyspaces: the newest of these three is
        // the last write to any of them.
        Some(highest_seqno(&[
            &self.records,
            &self.index,
            &self.actor_rows,
        ]))
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
                writes.insert(&self.actor_rows, key, encode_actor_row(did, &state));
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
        let (prefix, nsid) = queries::edge(collection, actor, subject);
        self.first_record_under(&prefix, actor, nsid)
    }

    fn interaction_uri(
        &self,
        collection: InteractionKind,
        actor: ActorId,
        subject: &RecordUri<'_>,
    ) -> Result<Option<String>, StoreError> {
        match queries::interaction(collection, actor, subject, &mut |uri| Ok(self.ref_of(uri)))? {
            Some((prefix, nsid)) => self.first_record_under(&prefix, actor, nsid),
            None => Ok(None),
        }
    }

    fn list_page(
        &self,
        list: &ListOf<'_>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.scan_list_page(list, after, limit)
    }

    fn list_item_uri(
        &self,
        list: &RecordUri<'_>,
        subject: ActorId,
    ) -> Result<Option<String>, StoreError> {
        let Some(owner) = self.actor_id(list.did) else {
            return Ok(None);
        };
        match queries::list_item(list, subject, &mut |uri| Ok(self.ref_of(uri)))? {
            Some(prefix) => self.first_record_under(&prefix, owner, nsid::LISTITEM),
            None => Ok(None),
        }
    }

    fn starter_pack_joins(&self, uri: &RecordUri<'_>) -> Result<u64, StoreError> {
        let Some(mut key) = self.ref_of(uri) else {
            return Ok(0);
        };
        if let Some(first) = key.first_mut() {
            *first = tag::RECORD_COUNT;
        }
        key.push(count::JOINS);
        self.count_value(self.in_flight_data().as_deref(), &key)
    }

    fn record_counts(&self, uri: &RecordUri<'_>) -> Result<RecordCounts, StoreError> {
        let Some(actor) = read(&self.actors).get(uri.did) else {
            return Ok(RecordCounts::default());
        };
        let Some(&collection) = read(&self.collections).by_name.get(uri.collection) else {
            return Ok(RecordCounts::default());
        };
        let mut row = vec![tag::RECORD_COUNT];
        keys::push_record_ref(&mut row, actor, collection, uri.rkey);
        let [likes, reposts, replies, quotes, list_items] =
            self.count_row(&mut row, &RECORD_COUNT_KINDS)?;
        Ok(RecordCounts {
            likes,
            reposts,
            replies,
            quotes,
            list_items,
        })
    }

    fn actor_counts(&self, actor: ActorId) -> Result<ActorCounts, StoreError> {
        let mut row = keys::actor_count_key(actor, 0).to_vec();
        row.pop();
        let [posts, lists, feeds, starter_packs, _] =
            self.count_row(&mut row, &ACTOR_COUNT_KINDS)?;
        Ok(ActorCounts {
            posts,
            lists,
            feeds,
            starter_packs,
        })
    }

    fn latest_rev(&self, actor: ActorId) -> Result<Option<u64>, StoreError> {
        let in_flight = self.in_flight_data();
        let rev = self.count_value(in_flight.as_deref(), &keys::latest_rev_key(actor))?;
        Ok((rev != 0).then_some(rev))
    }

    fn live_record_keys(&self, did: &str) -> Result<Vec<(String, String)>, StoreError> {
        let Some(actor) = self.actor_id(did) else {
            return Ok(Vec::new());
        };
        read(&self.collections).live_keys(&self.records_of(actor)?)
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
                let start = data.entries.partition_point(|(key, _)| key[..] < lower[..]);
                let tail = data.entries.get(start..).unwrap_or_default();
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

    fn notification_entries(
        &self,
        recipient: ActorId,
        below: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.newest_first(&crate::notify::prefix(recipient), below, visit)
    }

    fn for_each_searchable(
        &self,
        visit: &mut dyn FnMut(ActorId, &'static str, StoredRecord),
    ) -> Result<(), StoreError> {
        self.wait_durable()?;
        let wanted: Vec<(keys::CollectionId, &'static str)> = {
            let collections = read(&self.collections);
            crate::SEARCHABLE_COLLECTIONS
                .iter()
                .filter_map(|&name| Some((*collections.by_name.get(name)?, name)))
                .collect()
        };
        let n_actors = read(&self.actors).len();
        for actor_idx in 0..n_actors {
            let actor = ActorId(u32::try_from(actor_idx).unwrap_or(u32::MAX));
            let Some(did) = self.did(actor) else {
                continue;
            };
            for &(collection, name) in &wanted {
                for guard in self
                    .records
                    .prefix(keys::actor_collection_prefix(actor, collection))
                {
                    let (key, bytes) = guard.into_inner()?;
                    let Some((_, _, rkey)) = keys::parse_record_key(&key) else {
                        return Err(StoreError::corrupt("record key", &key));
                    };
                    if let Some(record) = stored_record(&did, name, rkey, &bytes)? {
                        visit(actor, name, record);
                    }
                }
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

/// A batch of events being applied; see [`Batch`]. The apply rules decide its writes
/// ([`Rules`]); this backend reads stored state for them ([`Reads`]) and writes the result
/// as one fjall write batch ([`EmbeddedStore::persist`]).
pub struct EmbeddedBatch<'s> {
    store: &'s EmbeddedStore,
    _writer: MutexGuard<'s, ()>,
    rules: Rules<'s>,
    reads: Reads<'s>,
}

impl<'s> EmbeddedBatch<'s> {
    fn new(store: &'s EmbeddedStore) -> EmbeddedBatch<'s> {
        let writer = lock(&store.writer);
        let counters = lock(&store.counters).clone();
        let mut rules = Rules::new(store.catalog(), counters);
        rules.set_notifications(store.notifications.load(Ordering::Relaxed));
        EmbeddedBatch {
            store,
            _writer: writer,
            rules,
            reads: Reads {
                store,
                previous: store.in_flight_data(),
            },
        }
    }
}

impl EmbeddedStore {
    fn catalog(&self) -> Catalog<'_> {
        Catalog {
            actors: &self.actors,
            collections: &self.collections,
        }
    }

    /// Makes a batch's writes durable, atomically: one fjall write batch across the keyspaces,
    /// written on a thread of its own while the next batch is applied (see [`InFlight`]).
    fn persist(&self, set: WriteSet) -> Result<Committed, StoreError> {
        let mut writes = self.db.batch().durability(Some(PersistMode::SyncData));
        for row in &set.actors {
            writes.insert(&self.actor_rows, actor_row_key(row.id), row.row.as_slice());
        }
        for (id, name) in &set.collections {
            let key = [META_COLLECTION, &id.0.to_be_bytes()].concat();
            writes.insert(&self.meta, key, name.as_bytes());
        }
        write_counters(&mut writes, &self.meta, &set.counters);
        for &((pair_tag, actor, subject), count) in &set.pairs {
            let key = edge_prefix(pair_tag, actor, subject);
            if count == 0 {
                writes.remove(&self.index, key);
            } else {
                writes.insert(&self.index, key, count.to_be_bytes());
            }
        }
        for progress in set.progress.iter().chain(&set.sources) {
            write_progress(&mut writes, &self.meta, progress);
        }
        for (key, count) in &set.counts {
            if *count == 0 {
                writes.remove(&self.index, key.as_slice());
            } else {
                writes.insert(&self.index, key.as_slice(), count.to_be_bytes());
            }
        }
        // The memtable is a skip list: inserting keys in order keeps each search path in cache,
        // which measured much cheaper than inserting them as events come. The sort of entries
        // is stable, so of two writes to one key the later still lands last and wins.
        let mut records: Vec<(&Vec<u8>, &Vec<u8>)> = set.records.iter().collect();
        records.sort_unstable_by_key(|(key, _)| *key);
        // Before the next batch can read them: it runs after this function returns.
        if let Some(fresh) = &self.fresh_keys {
            for (key, _) in &records {
                fresh.add(key);
            }
            for &((pair_tag, actor, subject), _) in &set.pairs {
                fresh.add(&edge_prefix(pair_tag, actor, subject));
            }
            for (key, _) in &set.counts {
                fresh.add(key);
            }
        }
        for (key, value) in records {
            writes.insert(&self.records, key.as_slice(), value.as_slice());
        }
        let mut entries: Vec<&(Vec<u8>, bool)> = set.entries.iter().collect();
        entries.sort_by_key(|(key, _)| key);
        // Feed readers and the next batch see these entries before the engine write is done.
        let mut pending: Vec<(Vec<u8>, bool)> = Vec::new();
        for (key, insert) in entries {
            if key.first().is_some_and(|t| PENDING_TAGS.contains(t)) {
                match pending.last_mut() {
                    Some(last) if last.0 == *key => last.1 = *insert,
                    _ => pending.push((key.clone(), *insert)),
                }
            }
            if *insert {
                writes.insert(&self.index, key.as_slice(), []);
            } else {
                writes.remove(&self.index, key.as_slice());
            }
        }
        // The graph changes go into the graph log in the same atomic write as the records, so
        // that a graph snapshot plus the log after it always equals the stored edges.
        let graph = &set.committed.graph;
        let seq = self.graph_seq.load(Ordering::Acquire) + 1;
        if !graph.is_empty() {
            writes.insert(
                &self.graph_log,
                seq.to_be_bytes(),
                encode_graph_changes(graph),
            );
            writes.insert(&self.meta, META_GRAPH_SEQ, seq.to_be_bytes());
        }
        let data = InFlightData {
            touched: heads::touched(set.entries.iter().map(|(key, _)| key.as_slice())),
            entries: pending,
            counts: set.counts.into_iter().collect(),
            records: set.records,
            pair_counts: set.pairs.into_iter().collect(),
        };
        self.write_in_background(writes, data)?;
        *lock(&self.counters) = set.counters;
        if !graph.is_empty() {
            self.graph_seq.store(seq, Ordering::Release);
        }
        Ok(set.committed)
    }
}

fn actor_row_key(id: ActorId) -> [u8; 5] {
    let [a, b, c, d] = id.0.to_be_bytes();
    [ACTOR_ROW, a, b, c, d]
}

fn write_counters(writes: &mut fjall::OwnedWriteBatch, meta: &Keyspace, counters: &Counters) {
    writes.insert(meta, META_COUNT_ACTORS, counters.actors.to_be_bytes());
    for (id, count) in &counters.records {
        let key = [META_COUNT_RECORDS, &id.0.to_be_bytes()].concat();
        writes.insert(meta, key, count.to_be_bytes());
    }
    for (reason, count) in &counters.dropped {
        let key = format!("{META_COUNT_DROPPED}{reason}");
        writes.insert(meta, key.into_bytes(), count.to_be_bytes());
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
            writes.insert(
                meta,
                key.into_bytes(),
                encode_file_progress(*offset, *cursor),
            );
            *cursor
        }
    };
    if let Some(cursor) = cursor {
        writes.insert(meta, META_CURSOR, cursor.0.to_be_bytes());
    }
}

impl Batch for EmbeddedBatch<'_> {
    fn apply(&mut self, event: &Event<'_>) -> Result<Outcome, StoreError> {
        self.rules.apply(&mut self.reads, event)
    }

    fn drop_event(&mut self, reason: DropReason) {
        self.rules.drop_event(reason);
    }

    fn set_progress(&mut self, progress: Progress) {
        self.rules.set_progress(progress);
    }

    fn add_source_progress(&mut self, source: String, offset: u64) {
        self.rules.add_source_progress(source, offset);
    }

    fn len(&self) -> usize {
        self.rules.len()
    }

    fn commit(self) -> Result<Committed, StoreError> {
        let EmbeddedBatch {
            store,
            _writer,
            rules,
            mut reads,
        } = self;
        let set = rules.finish(&mut reads)?;
        store.persist(set)
    }
}
