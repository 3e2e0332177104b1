//! The Cassandra backend: the store in an Apache Cassandra 5 (or ScyllaDB) keyspace, over CQL
//! with the `scylla` driver.
//!
//! # Layout
//! The embedded store's byte keys are kept (`crate::keys`); [`layout`] says how each is split
//! into a partition key, a time bucket and a clustering key so that partitions stay bounded.
//! Tables (created by [`CassandraStore::open`], `IF NOT EXISTS`, with a schema version row):
//!
//! | table | primary key | holds |
//! |---|---|---|
//! | `records` | `(p = actor ‖ shard), k = collection ‖ rkey` | live records and tombstones |
//! | `index_entries` | `((p, b), k)` | index entries (feeds, likes, follows, edges, ...) |
//! | `buckets` | `(p), b DESC` | the non-empty time buckets of each bucketed list |
//! | `counts` | `(k)` | record and actor counts, latest revisions |
//! | `pairs` | `(k)` | live records per follow / block pair, imported follows |
//! | `actors` | `(block = id / 4096), id` | DID and state per actor id |
//! | `actor_ids`, `handles` | `(did)`, `(handle)` | DID and handle to actor id |
//! | `meta` | `(part), name` | cursor, file progress, counters, collections, markers |
//! | `graph_log` | `(bucket = seq / 4096), seq` | each batch's graph and feed changes and cursor |
//! | `batch_chunks` | `(writer, seq), chunk` | a batch's writes, logged before it commits |
//! | `writer` | `(name)` | the writer lease, the fencing epoch and the newest committed batch (LWT only; see [`lease`]) |
//! | `log_readers` | `(part = 0), reader` | each live replica's position in the change log (TTL; see [`readers`]) |
//!
//! Schema version 1 had no `writer`, `batch_chunks` or `log_readers` (a `lease` table and a
//! `batch_log` keyed by sequence alone): [`CassandraStore::open`] upgrades such a keyspace in
//! place when no replica of the older version holds its lease and its last batch is applied,
//! and refuses otherwise, saying which. Version 2 may lack the list indexes (an actor's likes,
//! lists, starter packs...; list items by time; starter pack joins): the first store that may
//! write builds them from the stored records and marks the current version (see `upgrade.rs`).
//! Version 4 keeps the reason subject in notification keys; version 3's keys stay readable,
//! so a version 3 keyspace is marked 4 at open, and a version 3 replica refuses it.
//!
//! # Writes: one writer, absolute values, a batch log
//! Ingest runs in one process at a time: the holder of the writer lease (see [`lease`]). The
//! writer works out a batch's writes from what it reads (records, pair counts, counts) exactly
//! as the embedded store does, and every write is an absolute value (a count of 7, not "+1"),
//! so applying a write twice changes nothing: there are no counter tables and no
//! read-modify-write in Cassandra itself. Counts move only when a record's index entries are
//! written or removed, which happens once per change of the record (idempotent by record URI
//! and revision), so replays and duplicates never count twice.
//!
//! A batch is made atomic by a log: its writes are first stored in `batch_chunks` (under the
//! id of the store that logs them, so no other writer can overwrite them), then committed by
//! one lightweight transaction on the `writer` row that names it the newest batch, conditioned
//! on this store's fencing epoch ([`lease`]), then applied concurrently, then marked applied
//! (`meta` `batch/applied`). All writes of a batch carry one write timestamp, greater than
//! every earlier batch's, so applying an old batch again (after a crash, by the next writer)
//! can never overwrite a newer value: Cassandra resolves by timestamp. A store that opens, or
//! takes over the lease, first re-applies the newest committed batch if it is not marked
//! applied, then reloads its in-memory tables.
//!
//! # Fencing
//! The lease alone cannot stop a writer that stalled past its TTL (a paused process) from
//! landing a batch after another replica took over. The commit transaction can: a take bumps
//! the epoch in the same Paxos row, so a stale writer's commit is refused
//! ([`StoreError::Fenced`]) before any of its data writes is sent; the process then exits.
//! What a stale writer may still send are the data writes of a batch it committed before the
//! take; they are harmless, see `write_batch`. Cost: one LWT per batch in place of the plain
//! write that marked a batch logged before, ~0.5 to 2 ms more per batch on one local node
//! (see `write_batch`).
//!
//! Consistency is QUORUM for reads and writes by default: with one writer, every read sees
//! every acknowledged write, and a node can be lost without losing either.
//!
//! # Sync API over an async driver
//! The store owns a small tokio runtime (2 worker threads) on which the driver's connections
//! live; every [`Store`] call blocks on it. Calls come from blocking threads (as with the
//! embedded store); called from an async worker thread of a multi-thread runtime, the call
//! moves off it with `block_in_place` first, so it never stalls other tasks' progress or
//! panics.

mod batch;
pub mod layout;
pub mod lease;
mod private;
pub mod readers;
mod replica;
mod scan;
mod schema;
mod upgrade;
mod usage;

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::speculative_execution::SimpleSpeculativeExecutionPolicy;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use starling_core::feed::{FeedItem, FeedKey};
use starling_core::jetstream::{DropReason, nsid};
use starling_core::syntax::RecordUri;
use starling_core::{ActorId, Cursor};

use crate::actors::{ActorRows, ActorState, ActorTable};
use crate::catalog::{Collections, Counters};
use crate::codec::{
    decode_actor_row, decode_file_progress, decode_graph_changes, edge_prefix, key_text,
    pair_count, parse_feed_key, stored_record, u64_value,
};
use crate::keys::{self, CollectionId, count, tag};
use crate::locks::{lock, read, write};
use crate::queries;
use crate::{
    ActorCounts, ActorInfo, Batch, Committed, EdgeKind, GraphChange, InteractionKind, ListOf,
    ListPage, Progress, RecordCounts, Stats, Store, StoreError, StoredRecord,
};
pub use batch::CassandraBatch;
use layout::{Table, Write};
use schema::{LogVisit, Statements, connect};

/// The schema this code writes and reads (1: before fencing; 2: maybe without the list
/// indexes; see the module documentation).
const SCHEMA_VERSION: u64 = 4;
/// Actors per `actors` partition.
const ACTOR_BLOCK: u32 = 4096;
/// Graph log entries per `graph_log` partition.
const GRAPH_LOG_BUCKET: u64 = 4096;
/// Writes in flight at once while a batch is applied or prefetched.
const CONCURRENCY_MAX: usize = 256;
/// Bytes of one `batch_chunks` row.
const BATCH_LOG_CHUNK_BYTES: usize = 256 * 1024;
/// Rows per page of a scan.
const PAGE_ROWS: i32 = 1000;
/// How long one request may take before it fails (the driver retries idempotent ones).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(12);
/// An idempotent request that has no answer after this long is also sent to another node
/// (at most [`SPECULATIVE_MAX`] more times), first answer wins: a coordinator that waits on a
/// replica that just died (the cluster notices after ~20 s) must not hold a request that long.
const SPECULATIVE_AFTER: Duration = Duration::from_millis(250);
const SPECULATIVE_MAX: usize = 2;

/// A CQL consistency level, as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqlConsistency {
    /// `ONE`.
    One,
    /// `TWO`.
    Two,
    /// `THREE`.
    Three,
    /// `QUORUM` (the default).
    Quorum,
    /// `ALL`.
    All,
    /// `LOCAL_QUORUM`.
    LocalQuorum,
    /// `EACH_QUORUM`.
    EachQuorum,
    /// `LOCAL_ONE`.
    LocalOne,
}

impl std::str::FromStr for CqlConsistency {
    type Err = String;

    fn from_str(text: &str) -> Result<CqlConsistency, String> {
        Ok(match text.to_ascii_lowercase().replace('-', "_").as_str() {
            "one" => CqlConsistency::One,
            "two" => CqlConsistency::Two,
            "three" => CqlConsistency::Three,
            "quorum" => CqlConsistency::Quorum,
            "all" => CqlConsistency::All,
            "local_quorum" => CqlConsistency::LocalQuorum,
            "each_quorum" => CqlConsistency::EachQuorum,
            "local_one" => CqlConsistency::LocalOne,
            _ => {
                return Err(format!(
                    "consistency `{text}` is not one of one, two, three, quorum, all, local_quorum, each_quorum, local_one"
                ));
            }
        })
    }
}

impl CqlConsistency {
    fn driver(self) -> Consistency {
        match self {
            CqlConsistency::One => Consistency::One,
            CqlConsistency::Two => Consistency::Two,
            CqlConsistency::Three => Consistency::Three,
            CqlConsistency::Quorum => Consistency::Quorum,
            CqlConsistency::All => Consistency::All,
            CqlConsistency::LocalQuorum => Consistency::LocalQuorum,
            CqlConsistency::EachQuorum => Consistency::EachQuorum,
            CqlConsistency::LocalOne => Consistency::LocalOne,
        }
    }
}

/// How to reach the cluster and what to create there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CassandraOptions {
    /// Contact points, `host:port`.
    pub nodes: Vec<String>,
    /// The keyspace (created if missing).
    pub keyspace: String,
    /// Replication factor of a keyspace this store creates (`SimpleStrategy`).
    pub replication_factor: u32,
    /// Consistency of reads and writes.
    pub consistency: CqlConsistency,
}

impl CassandraOptions {
    /// Options for `nodes` with the defaults: keyspace `starling`, RF 1, QUORUM.
    pub fn new(nodes: Vec<String>) -> CassandraOptions {
        CassandraOptions {
            nodes,
            keyspace: "starling".to_owned(),
            replication_factor: 1,
            consistency: CqlConsistency::Quorum,
        }
    }
}

/// Whether `name` is a keyspace name Cassandra accepts unquoted (and we never quote).
pub fn valid_keyspace(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 48
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn cql_err(what: &'static str) -> impl Fn(&dyn std::fmt::Display) -> StoreError {
    move |err| StoreError::Unavailable {
        what: format!("{what}: {err}"),
    }
}

/// `Result` helpers turning driver errors into [`StoreError::Unavailable`] naming the request.
trait Ctx<T> {
    fn ctx(self, what: &'static str) -> Result<T, StoreError>;
}

impl<T, E: std::fmt::Display> Ctx<T> for Result<T, E> {
    fn ctx(self, what: &'static str) -> Result<T, StoreError> {
        self.map_err(|err| cql_err(what)(&err))
    }
}

/// The Cassandra-backed store; see the module documentation.
pub struct CassandraStore {
    rt: Option<tokio::runtime::Runtime>,
    session: Arc<Session>,
    st: Box<Statements>,
    /// A random id, unique per opened store: names this store's batch log rows and its
    /// change log reader row.
    store_id: i64,
    /// What this store may write under ([`lease`]).
    fence: Mutex<lease::Fence>,
    /// This store's position in the change log ([`readers`]).
    reader: Arc<readers::ReaderState>,
    actors: RwLock<ActorTable>,
    collections: RwLock<Collections>,
    counters: Mutex<Counters>,
    writer: Mutex<()>,
    /// The newest graph log sequence this process wrote or saw.
    graph_seq: AtomicU64,
    /// The write timestamp of the newest batch written, in microseconds.
    last_ts: AtomicI64,
    /// Graph log sequences up to this one are pruned.
    pruned_upto: AtomicU64,
    /// Tests: fail the next batches after committing them, as a crash there would.
    #[cfg(test)]
    crash_after_log: std::sync::atomic::AtomicBool,
    /// Tests: the next batch, once committed, says so on the sender and waits for the
    /// receiver before it sends its data writes, as a writer paused there would.
    #[cfg(test)]
    stall_after_commit: Mutex<
        Option<(
            std::sync::mpsc::Sender<()>,
            tokio::sync::oneshot::Receiver<()>,
        )>,
    >,
}

impl CassandraStore {
    /// Connects, creates the keyspace and tables if missing, checks the schema version,
    /// finishes a logged batch a crashed writer left, and loads the in-memory tables.
    pub fn open(options: &CassandraOptions) -> Result<CassandraStore, StoreError> {
        CassandraStore::open_with(options, readers::ReaderTiming::DEFAULT)
    }

    /// [`CassandraStore::open`] with the change log reader row's timing (tests shorten it).
    fn open_with(
        options: &CassandraOptions,
        timing: readers::ReaderTiming,
    ) -> Result<CassandraStore, StoreError> {
        if !valid_keyspace(&options.keyspace) {
            return Err(StoreError::Cluster {
                what: format!(
                    "keyspace `{}` is not a lowercase CQL name (a-z, 0-9, _; at most 48)",
                    options.keyspace
                ),
            });
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cassandra")
            .enable_all()
            .build()
            .map_err(|err| StoreError::Cluster {
                what: format!("starting the driver runtime: {err}"),
            })?;
        let (session, st) = rt.block_on(connect(options))?;
        let session = Arc::new(session);
        let store_id = random_id();
        let reader = Arc::new(readers::ReaderState::new(timing));
        rt.spawn(readers::refresh(
            session.clone(),
            st.writer.put_reader.clone(),
            reader.clone(),
            store_id,
        ));
        let store = CassandraStore {
            rt: Some(rt),
            session,
            st,
            store_id,
            fence: Mutex::new(lease::Fence::Reader {
                epoch: 0,
                head_seq: 0,
            }),
            reader,
            actors: RwLock::new(ActorTable::default()),
            collections: RwLock::new(Collections::default()),
            counters: Mutex::new(Counters::default()),
            writer: Mutex::new(()),
            graph_seq: AtomicU64::new(0),
            last_ts: AtomicI64::new(0),
            pruned_upto: AtomicU64::new(0),
            #[cfg(test)]
            crash_after_log: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            stall_after_commit: Mutex::new(None),
        };
        store.recover()?;
        Ok(store)
    }

    /// Runs `fut` on the store's runtime and waits for it; see the module documentation.
    fn block<F: Future>(&self, fut: F) -> F::Output {
        let Some(rt) = self.rt.as_ref() else {
            unreachable!("the runtime lives until the store is dropped");
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| rt.block_on(fut))
            }
            _ => rt.block_on(fut),
        }
    }

    /// Re-applies the newest committed batch if it is not marked applied, then reloads every
    /// in-memory table from the cluster. Run at open, and by a replica that took the writer
    /// lease before it writes (its commits are refused until then): the `writer` row is read
    /// after the take, so every batch an older epoch committed is seen here.
    pub fn recover(&self) -> Result<(), StoreError> {
        let row = {
            let _writer = lock(&self.writer);
            let row = self.block(lease::read_row(self))?;
            self.block(self.finish_logged_batch(row.head))?;
            self.block(self.load())?;
            lease::recovered(self, &row);
            row
        };
        self.finish_schema_upgrade(&row)
    }

    /// Applies the committed batch `head` unless it is marked applied. Its writes keep the
    /// batch's own timestamp: identical to what its writer sent or may still send, and above
    /// every earlier batch's.
    async fn finish_logged_batch(&self, head: lease::BatchHead) -> Result<(), StoreError> {
        self.last_ts.fetch_max(head.ts, Ordering::AcqRel);
        let seq = head.seq as u64;
        if seq <= self.applied_seq().await? {
            return Ok(());
        }
        let mut rows = self
            .session
            .execute_iter(self.st.get_batch_chunks.clone(), (head.writer, head.seq))
            .await
            .ctx("reading the batch log")?
            .rows_stream::<(i32, Vec<u8>)>()
            .ctx("reading the batch log")?;
        let mut bytes = Vec::new();
        let mut seen = 0;
        while let Some((_, data)) = rows.try_next().await.ctx("reading the batch log")? {
            bytes.extend_from_slice(&data);
            seen += 1;
        }
        if seen != head.chunks {
            // Its writer (or another store recovering) may have applied it and removed the
            // log while this read ran.
            if seq <= self.applied_seq().await? {
                return Ok(());
            }
            return Err(StoreError::corrupt(
                format!("batch log {seq}: {seen} of {} chunks", head.chunks),
                &[],
            ));
        }
        let writes = layout::decode_writes(&bytes)
            .ok_or_else(|| StoreError::corrupt(format!("batch log {seq}"), &[]))?;
        tracing::info!(
            seq,
            writes = writes.len(),
            "re-applying the committed batch a previous writer left"
        );
        self.apply_writes(&writes, head.ts).await?;
        self.mark_applied(head).await
    }

    /// The newest batch marked applied (0 for none).
    async fn applied_seq(&self) -> Result<u64, StoreError> {
        Ok(self
            .meta_value("batch", "applied")
            .await?
            .map(|bytes| u64_value(&bytes))
            .transpose()?
            .unwrap_or(0))
    }

    /// Reads the actor table, collections, counters and sequences.
    async fn load(&self) -> Result<(), StoreError> {
        let mut actors = ActorRows::default();
        let mut block = 0u32;
        loop {
            let mut rows = self
                .session
                .execute_iter(self.st.scan_actors.clone(), (block as i32, 0i32))
                .await
                .ctx("reading actors")?
                .rows_stream::<(i32, String, Vec<u8>)>()
                .ctx("reading actors")?;
            let mut any = false;
            while let Some((id, did, state)) = rows.try_next().await.ctx("reading actors")? {
                any = true;
                actors.push(ActorId(id as u32), &did, ActorState::decode(&state)?)?;
            }
            if !any {
                break;
            }
            block += 1;
        }
        *write(&self.actors) = actors.into_table();
        let mut collections = Collections::default();
        for (name, value) in self.meta_part("collection").await? {
            let id = name
                .parse::<u32>()
                .map_err(|_| StoreError::corrupt(format!("collection id `{name}`"), &[]))?;
            let text = String::from_utf8(value)
                .map_err(|_| StoreError::corrupt("collection name", name.as_bytes()))?;
            if !collections.restore(id, &text) {
                return Err(StoreError::corrupt(
                    "collection ids not dense",
                    name.as_bytes(),
                ));
            }
        }
        *write(&self.collections) = collections;
        *lock(&self.counters) = self.read_counters().await?;
        if let Some(bytes) = self.meta_value("graph", "seq").await? {
            self.graph_seq
                .fetch_max(u64_value(&bytes)?, Ordering::AcqRel);
        }
        if let Some(bytes) = self.meta_value("graph", "pruned_upto").await? {
            self.pruned_upto
                .fetch_max(u64_value(&bytes)?, Ordering::AcqRel);
        }
        if let Some(bytes) = self.meta_value("batch", "ts").await? {
            self.last_ts
                .fetch_max(u64_value(&bytes)? as i64, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Appends to the in-memory table the actors interned (by another replica's writer)
    /// since it was loaded, up to the first id not visible yet (a batch being applied writes
    /// its actors in any order): ids stay dense.
    async fn load_new_actors(&self) -> Result<(), StoreError> {
        loop {
            let next = read(&self.actors).len() as u32;
            let mut rows = self
                .session
                .execute_iter(
                    self.st.scan_actors.clone(),
                    ((next / ACTOR_BLOCK) as i32, next as i32),
                )
                .await
                .ctx("reading actors")?
                .rows_stream::<(i32, String, Vec<u8>)>()
                .ctx("reading actors")?;
            let mut found = Vec::new();
            while let Some(row) = rows.try_next().await.ctx("reading actors")? {
                found.push(row);
            }
            let mut table = write(&self.actors);
            let before = table.len();
            for (id, did, state) in found {
                if id as usize != table.len() {
                    break;
                }
                table.restore(ActorId(id as u32), &did, ActorState::decode(&state)?)?;
            }
            // A full block continues in the next one.
            if table.len() == before || !table.len().is_multiple_of(ACTOR_BLOCK as usize) {
                return Ok(());
            }
        }
    }

    async fn read_counters(&self) -> Result<Counters, StoreError> {
        let mut counters = Counters::default();
        for (name, value) in self.meta_part("count").await? {
            let n = u64_value(&value)?;
            if name == "actors" {
                counters.actors = n;
            } else if let Some(id) = name.strip_prefix("records/") {
                let id = id
                    .parse::<u32>()
                    .map_err(|_| StoreError::corrupt(format!("counter `{name}`"), &[]))?;
                counters.records.insert(CollectionId(id), n);
            } else if let Some(reason) = name.strip_prefix("dropped/")
                && let Some(reason) = DropReason::ALL.into_iter().find(|r| r.as_str() == reason)
            {
                counters.dropped.insert(reason, n);
            }
        }
        Ok(counters)
    }

    async fn meta_value(&self, part: &str, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let res = self
            .session
            .execute_unpaged(&self.st.get_meta, (part, name))
            .await
            .ctx("reading meta")?;
        let rows = res.into_rows_result().ctx("reading meta")?;
        Ok(rows
            .maybe_first_row::<(Option<Vec<u8>>,)>()
            .ctx("reading meta")?
            .and_then(|(v,)| v))
    }

    async fn meta_part(&self, part: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let mut rows = self
            .session
            .execute_iter(self.st.scan_meta.clone(), (part,))
            .await
            .ctx("reading meta")?
            .rows_stream::<(String, Option<Vec<u8>>)>()
            .ctx("reading meta")?;
        let mut res = Vec::new();
        while let Some((name, value)) = rows.try_next().await.ctx("reading meta")? {
            if let Some(value) = value {
                res.push((name, value));
            }
        }
        Ok(res)
    }

    async fn record_value(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let Some((p, k)) = layout::record_location(key) else {
            return Err(StoreError::corrupt("record key", &[]));
        };
        let res = self
            .session
            .execute_unpaged(&self.st.get_record, (p, k))
            .await
            .ctx("reading a record")?;
        Ok(res
            .into_rows_result()
            .ctx("reading a record")?
            .maybe_first_row::<(Option<Vec<u8>>,)>()
            .ctx("reading a record")?
            .and_then(|(v,)| v))
    }

    async fn count_value(&self, key: &[u8]) -> Result<u64, StoreError> {
        let res = self
            .session
            .execute_unpaged(&self.st.get_count, (key,))
            .await
            .ctx("reading a count")?;
        Ok(res
            .into_rows_result()
            .ctx("reading a count")?
            .maybe_first_row::<(Option<i64>,)>()
            .ctx("reading a count")?
            .and_then(|(n,)| n)
            .map_or(0, |n| n as u64))
    }

    async fn pair_value(&self, key: &[u8]) -> Result<Option<u32>, StoreError> {
        let res = self
            .session
            .execute_unpaged(&self.st.get_pair, (key,))
            .await
            .ctx("reading a pair")?;
        Ok(res
            .into_rows_result()
            .ctx("reading a pair")?
            .maybe_first_row::<(Option<i32>,)>()
            .ctx("reading a pair")?
            .and_then(|(n,)| n)
            .map(|n| n as u32))
    }

    /// The clustering key of the first entry under an unbucketed index prefix, if any.
    async fn first_entry(&self, prefix: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let res = self
            .session
            .execute_unpaged(&self.st.first_entry, (prefix, 0i64))
            .await
            .ctx("reading an index entry")?;
        Ok(res
            .into_rows_result()
            .ctx("reading an index entry")?
            .maybe_first_row::<(Vec<u8>,)>()
            .ctx("reading an index entry")?
            .map(|(k,)| k))
    }

    /// Applies writes with timestamp `ts`, many at once; any failure fails the batch.
    async fn apply_writes(&self, writes: &[Write], ts: i64) -> Result<(), StoreError> {
        let mut buckets = rustc_hash::FxHashSet::default();
        for write in writes {
            if write.table == Table::Entry
                && write.value.is_some()
                && let Some(location) = layout::entry_location(&write.key)
                && location.bucketed
            {
                buckets.insert((location.p, location.b));
            }
        }
        let bucket_writes = futures_util::stream::iter(buckets)
            .map(|(p, b)| async move {
                self.session
                    .execute_unpaged(&self.st.put_bucket, (p, b, ts))
                    .await
                    .map(|_| ())
                    .ctx("writing a bucket directory")
            })
            .buffer_unordered(CONCURRENCY_MAX);
        bucket_writes.try_collect::<Vec<()>>().await?;
        futures_util::stream::iter(writes)
            .map(|write| self.apply_write(write, ts))
            .buffer_unordered(CONCURRENCY_MAX)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    async fn apply_write(&self, write: &Write, ts: i64) -> Result<(), StoreError> {
        let st = &self.st;
        let s = &self.session;
        let corrupt = |what: &str| StoreError::corrupt(format!("batch write: {what}"), &[]);
        let u32_of = |bytes: &[u8]| -> Result<u32, StoreError> {
            pair_count(bytes).map_err(|_| corrupt("u32"))
        };
        match (write.table, &write.value) {
            (Table::Record, Some(v)) => {
                let (p, k) =
                    layout::record_location(&write.key).ok_or_else(|| corrupt("record"))?;
                s.execute_unpaged(&st.put_record, (p, k, v, ts))
                    .await
                    .ctx("writing a record")?;
            }
            (Table::Record, None) => return Err(corrupt("record delete")),
            (Table::Entry, value) => {
                let loc = layout::entry_location(&write.key).ok_or_else(|| corrupt("entry"))?;
                if value.is_some() {
                    s.execute_unpaged(&st.put_entry, (loc.p, loc.b, loc.k, ts))
                        .await
                        .ctx("writing an index entry")?;
                } else {
                    s.execute_unpaged(&st.del_entry, (ts, loc.p, loc.b, loc.k))
                        .await
                        .ctx("removing an index entry")?;
                }
            }
            (Table::Count, Some(v)) => {
                s.execute_unpaged(&st.put_count, (&write.key, u64_value(v)? as i64, ts))
                    .await
                    .ctx("writing a count")?;
            }
            (Table::Count, None) => {
                s.execute_unpaged(&st.del_count, (ts, &write.key))
                    .await
                    .ctx("removing a count")?;
            }
            (Table::Pair, Some(v)) => {
                s.execute_unpaged(&st.put_pair, (&write.key, u32_of(v)? as i32, ts))
                    .await
                    .ctx("writing a pair")?;
            }
            (Table::Pair, None) => {
                s.execute_unpaged(&st.del_pair, (ts, &write.key))
                    .await
                    .ctx("removing a pair")?;
            }
            (Table::Actor, Some(v)) => {
                let id = u32_of(&write.key)?;
                let (did, state) = decode_actor_row(v)?;
                let block = (id / ACTOR_BLOCK) as i32;
                s.execute_unpaged(&st.put_actor, (block, id as i32, did, state.encode(), ts))
                    .await
                    .ctx("writing an actor")?;
            }
            (Table::ActorId, Some(v)) => {
                let did = std::str::from_utf8(&write.key).map_err(|_| corrupt("did"))?;
                s.execute_unpaged(&st.put_actor_id, (did, u32_of(v)? as i32, ts))
                    .await
                    .ctx("writing an actor id")?;
            }
            (Table::Handle, value) => {
                let handle = std::str::from_utf8(&write.key).map_err(|_| corrupt("handle"))?;
                match value {
                    Some(v) => s
                        .execute_unpaged(&st.put_handle, (handle, u32_of(v)? as i32, ts))
                        .await
                        .ctx("writing a handle")?,
                    None => s
                        .execute_unpaged(&st.del_handle, (ts, handle))
                        .await
                        .ctx("removing a handle")?,
                };
            }
            (Table::Meta, Some(v)) => {
                let (part, name) =
                    layout::split_meta_key(&write.key).ok_or_else(|| corrupt("meta key"))?;
                s.execute_unpaged(&st.put_meta, (part, name, v, ts))
                    .await
                    .ctx("writing meta")?;
            }
            (Table::GraphLog, Some(v)) => {
                let seq = u64_value(&write.key)?;
                s.execute_unpaged(
                    &st.put_graph_log,
                    ((seq / GRAPH_LOG_BUCKET) as i64, seq as i64, v, ts),
                )
                .await
                .ctx("writing the graph log")?;
            }
            (Table::Actor | Table::ActorId | Table::Meta | Table::GraphLog, None) => {
                return Err(corrupt("delete of a row that is never deleted"));
            }
        }
        Ok(())
    }

    /// Logs a batch's writes, commits it, applies its writes and marks it applied; the writes
    /// are durable (at the configured consistency) when this returns.
    ///
    /// The commit ([`lease::commit`]) is the point after which the batch has happened: a store
    /// that recovers later applies it from its log; one that recovered earlier never sees it.
    /// A store whose epoch is stale is refused there, before any data write is sent; all it
    /// leaves are log rows under its own id, which nothing reads (and which it removes).
    ///
    /// Why the window between the commit and the data writes is safe. A writer that stalls
    /// there past its lease has committed its batch, so the replica that takes over finds it
    /// in the `writer` row (read at SERIAL, after its take bumped the epoch) and applies it
    /// from the log with the batch's own timestamp `ts`, which is above every earlier batch's;
    /// its own batches then take timestamps above `ts` (its `last_ts` starts from the row).
    /// When the stalled writer resumes, its data writes carry `ts` and exactly the values the
    /// log holds: where the new writer has written nothing since, they equal what recovery
    /// wrote; where it has, its higher timestamps win. Its `applied` marker and log removal
    /// carry `ts` too and lose to newer ones the same way, and its next commit is refused. A
    /// commit whose answer is lost (a timeout) may or may not have happened: the store writes
    /// no more, and the next recovery finds out.
    ///
    /// Cost: the commit is one LWT where a plain write marked the batch logged before, and
    /// the only LWT of a batch. Measured on one local Cassandra 5.0.9 node sharing 2 cores
    /// (load average ~9), 500 sequential requests a round, debug build: the LWT took 1.1 to
    /// 3.4 ms on average, the plain write 0.5 to 1.5 ms, so a batch pays ~0.5 to 2 ms more,
    /// against ~14 ms for a whole batch of a post and a follow on the same node.
    async fn write_batch(&self, writes: &[Write]) -> Result<(), StoreError> {
        // Refused at once if this store may not write: then nothing is logged.
        let claim = lease::claim(self)?;
        // One timestamp for the whole batch, above every earlier batch's even if the clock
        // stepped back.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let ts = now.max(self.last_ts.load(Ordering::Acquire) + 1);
        let mut bytes = Vec::new();
        layout::encode_writes(writes, &mut bytes);
        let chunks: Vec<&[u8]> = bytes.chunks(BATCH_LOG_CHUNK_BYTES).collect();
        let head = lease::BatchHead {
            seq: claim.head_seq + 1,
            ts,
            chunks: chunks.len() as i32,
            writer: self.store_id,
        };
        futures_util::stream::iter(chunks.iter().enumerate())
            .map(|(at, chunk)| async move {
                self.session
                    .execute_unpaged(
                        &self.st.put_batch_chunk,
                        (self.store_id, head.seq, at as i32, *chunk, ts),
                    )
                    .await
                    .map(|_| ())
                    .ctx("writing the batch log")
            })
            .buffer_unordered(8)
            .try_collect::<Vec<()>>()
            .await?;
        let commit_started = std::time::Instant::now();
        if let Err(err) = lease::commit(self, &claim, head).await {
            if matches!(err, StoreError::Fenced { .. }) {
                // Refused, so no head can ever name these rows.
                let _ = self
                    .session
                    .execute_unpaged(&self.st.del_batch, (ts, self.store_id, head.seq))
                    .await;
            }
            return Err(err);
        }
        let commit_us = commit_started.elapsed().as_micros() as u64;
        #[cfg(test)]
        if self.crash_after_log.load(Ordering::Acquire) {
            return Err(StoreError::Writer(
                "simulated crash after the commit".into(),
            ));
        }
        #[cfg(test)]
        let stall = lock(&self.stall_after_commit).take();
        #[cfg(test)]
        if let Some((reached, resume)) = stall {
            let _ = reached.send(());
            let _ = resume.await;
        }
        self.apply_writes(writes, ts).await?;
        self.mark_applied(head).await?;
        self.last_ts.store(ts, Ordering::Release);
        tracing::debug!(
            seq = head.seq,
            writes = writes.len(),
            log_bytes = bytes.len(),
            commit_us,
            "batch written"
        );
        Ok(())
    }

    async fn mark_applied(&self, head: lease::BatchHead) -> Result<(), StoreError> {
        for (name, value) in [("applied", head.seq), ("ts", head.ts)] {
            self.session
                .execute_unpaged(
                    &self.st.put_meta_now,
                    (
                        "batch",
                        name,
                        (value as u64).to_be_bytes().to_vec(),
                        head.ts,
                    ),
                )
                .await
                .ctx("writing the batch log marker")?;
        }
        self.session
            .execute_unpaged(&self.st.del_batch, (head.ts, head.writer, head.seq))
            .await
            .ctx("removing an applied batch log")?;
        Ok(())
    }

    /// The actor id of a DID: from memory, else from the cluster (another replica's writer may
    /// have interned it since this process loaded its table).
    fn lookup_actor_id(&self, did: &str) -> Result<Option<ActorId>, StoreError> {
        if let Some(id) = read(&self.actors).get(did) {
            return Ok(Some(id));
        }
        self.block(async {
            let res = self
                .session
                .execute_unpaged(&self.st.get_actor_id, (did,))
                .await
                .ctx("reading an actor id")?;
            Ok(res
                .into_rows_result()
                .ctx("reading an actor id")?
                .maybe_first_row::<(Option<i32>,)>()
                .ctx("reading an actor id")?
                .and_then(|(id,)| id)
                .map(|id| ActorId(id as u32)))
        })
    }

    /// An actor's DID and encoded state ([`ActorState::encode`]), read from the cluster.
    fn actor_row(&self, id: ActorId) -> Result<Option<(String, Vec<u8>)>, StoreError> {
        self.block(async {
            let res = self
                .session
                .execute_unpaged(
                    &self.st.get_actor,
                    ((id.0 / ACTOR_BLOCK) as i32, id.0 as i32),
                )
                .await
                .ctx("reading an actor")?;
            let row = res
                .into_rows_result()
                .ctx("reading an actor")?
                .maybe_first_row::<(String, Vec<u8>)>()
                .ctx("reading an actor")?;
            Ok(row)
        })
    }

    /// The collection id of a name, if interned (here or, since, by the writer).
    fn collection_id(&self, name: &str) -> Result<Option<CollectionId>, StoreError> {
        if let Some(&id) = read(&self.collections).by_name.get(name) {
            return Ok(Some(id));
        }
        // Collections are few: reload them all when one is missing.
        let rows = self.block(self.meta_part("collection"))?;
        let mut collections = write(&self.collections);
        for (id, value) in rows {
            let (Ok(id), Ok(text)) = (id.parse::<u32>(), String::from_utf8(value)) else {
                continue;
            };
            if id as usize == collections.names.len() {
                collections
                    .by_name
                    .insert(text.clone().into(), CollectionId(id));
                collections.names.push(text.into());
            }
        }
        Ok(collections.by_name.get(name).copied())
    }

    /// `0 ++ record ref` of the record `uri` names, if its actor and collection are known.
    fn ref_of(&self, uri: &RecordUri<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(actor) = self.lookup_actor_id(uri.did)? else {
            return Ok(None);
        };
        let Some(collection) = self.collection_id(uri.collection)? else {
            return Ok(None);
        };
        let mut key = vec![0];
        keys::push_record_ref(&mut key, actor, collection, uri.rkey);
        Ok(Some(key))
    }

    fn first_record_under(
        &self,
        prefix: &[u8],
        actor: ActorId,
        nsid: &str,
    ) -> Result<Option<String>, StoreError> {
        let Some(k) = self.block(self.first_entry(prefix))? else {
            return Ok(None);
        };
        let rkey = key_text(Some(&k))?;
        Ok(self
            .did(actor)
            .map(|did| format!("at://{did}/{nsid}/{rkey}")))
    }

    /// Visits the change log after `after`, oldest first: per logged batch its sequence and
    /// what it changed (graph, feed, cursor), as a replica that does not write needs it to
    /// keep its graph and timelines current. Returns the last sequence visited. Records `after`
    /// as this store's position first, so that pruning keeps what it has not read
    /// ([`readers`]); fails with [`StoreError::Pruned`] if entries after `after` are gone.
    pub fn changes_since(
        &self,
        after: u64,
        visit: &mut dyn FnMut(u64, &Committed),
    ) -> Result<u64, StoreError> {
        self.scan_log(after, &mut |seq, bytes| {
            let corrupt = || StoreError::corrupt(format!("change log entry {seq}"), &[]);
            let (graph, cursor, feed) = layout::decode_log_entry(bytes).ok_or_else(corrupt)?;
            let mut committed = Committed {
                cursor: (cursor != 0).then_some(Cursor(cursor)),
                ..Committed::default()
            };
            decode_graph_changes(graph, &mut |change| committed.graph.push(change))?;
            for (added, key) in feed {
                let item = parse_feed_key(key)?;
                committed.feed.push(if added {
                    starling_core::feed::FeedChange::Add(item)
                } else {
                    starling_core::feed::FeedChange::Remove(item)
                });
            }
            visit(seq, &committed);
            Ok(())
        })
    }

    /// Visits the change log entries after `after` up to the newest logged sequence, oldest
    /// first, as raw bytes; returns the last sequence visited. See [`Self::changes_since`].
    ///
    /// The log is dense, one entry per sequence number, and pruning removes a prefix of it
    /// after raising the watermark. So an entry missing where the next one is expected was
    /// pruned if the watermark reaches it (an error: the caller missed changes), and is
    /// otherwise the newest batch's, still being written (the scan stops before it).
    fn scan_log(&self, after: u64, visit: &mut LogVisit<'_>) -> Result<u64, StoreError> {
        self.block(readers::record(self, after))?;
        let newest = self.graph_log_seq();
        // Actors the writer interned since, so the ids of the log resolve from memory.
        self.block(self.load_new_actors())?;
        let mut last = after;
        let mut bucket = (after + 1) / GRAPH_LOG_BUCKET;
        while bucket <= newest / GRAPH_LOG_BUCKET {
            let entries = self.block(async {
                let mut rows = self
                    .session
                    .execute_iter(self.st.scan_graph_log.clone(), (bucket as i64, last as i64))
                    .await
                    .ctx("reading the change log")?
                    .rows_stream::<(i64, Vec<u8>)>()
                    .ctx("reading the change log")?;
                let mut entries = Vec::new();
                while let Some(row) = rows.try_next().await.ctx("reading the change log")? {
                    entries.push(row);
                }
                Ok::<_, StoreError>(entries)
            })?;
            for (seq, bytes) in entries {
                let seq = seq as u64;
                if seq > newest {
                    // Written after `newest` was read: the next call gets it, in order.
                    return Ok(last);
                }
                if seq != last + 1 {
                    self.check_not_pruned(after, last)?;
                    return Err(StoreError::corrupt(
                        format!("change log entries {} to {} are missing", last + 1, seq - 1),
                        &[],
                    ));
                }
                visit(seq, &bytes)?;
                last = seq;
            }
            bucket += 1;
        }
        if last < newest {
            self.check_not_pruned(after, last)?;
        }
        Ok(last)
    }

    /// [`StoreError::Pruned`] if the entry after `last` was pruned.
    fn check_not_pruned(&self, after: u64, last: u64) -> Result<(), StoreError> {
        let pruned_upto = match self.block(self.meta_value("graph", "pruned_upto"))? {
            Some(bytes) => u64_value(&bytes)?,
            None => 0,
        };
        self.pruned_upto.fetch_max(pruned_upto, Ordering::AcqRel);
        if pruned_upto > last {
            return Err(StoreError::Pruned { after, pruned_upto });
        }
        Ok(())
    }

    /// Drops every table this store created in its keyspace's data (for tests: a fresh
    /// keyspace per run is cheaper to get by dropping it).
    pub fn drop_keyspace(self, keyspace: &str) -> Result<(), StoreError> {
        if !valid_keyspace(keyspace) {
            return Err(StoreError::Cluster {
                what: format!("keyspace `{keyspace}` is not a lowercase CQL name"),
            });
        }
        self.block(async {
            self.session
                .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
                .await
                .ctx("dropping the keyspace")
        })?;
        Ok(())
    }
}

impl Drop for CassandraStore {
    fn drop(&mut self) {
        /// How long dropping the store waits to remove its change log reader row.
        const FORGET_WAIT_MAX: Duration = Duration::from_secs(2);
        // Dropping a runtime blocks; `shutdown_background` does not, so the store may be
        // dropped anywhere, an async context included.
        if let Some(rt) = self.rt.take() {
            if self.reader.is_registered() {
                // Best effort, so that pruning need not wait for the row's TTL. On a thread of
                // its own: this may run inside an async context, where `block_on` panics.
                let forget = readers::forget(
                    &self.session,
                    &self.st.writer.del_reader,
                    &self.reader,
                    self.store_id,
                );
                std::thread::scope(|scope| {
                    let waited = scope.spawn(|| {
                        // The timer is made inside the runtime, which drives it.
                        rt.block_on(async { tokio::time::timeout(FORGET_WAIT_MAX, forget).await })
                    });
                    if let Ok(Ok(Err(err))) = waited.join() {
                        tracing::warn!(error = %err, "removing the change log reader row");
                    }
                });
            }
            rt.shutdown_background();
        }
    }
}

/// A random id, positive and nonzero, for an opened store: unique in practice (64 random
/// bits from the standard library's hasher keys, the process id, the time and a counter).
fn random_id() -> i64 {
    use std::hash::{BuildHasher, Hasher};
    static OPENED: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(OPENED.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.write_u128(std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_nanos()));
    (hasher.finish() >> 1).max(1) as i64
}

impl Store for CassandraStore {
    type Batch<'s> = CassandraBatch<'s>;

    fn batch(&self) -> CassandraBatch<'_> {
        CassandraBatch::new(self)
    }

    fn usage(&self) -> Result<crate::Usage, StoreError> {
        self.scan_usage()
    }

    fn stats(&self) -> Result<Stats, StoreError> {
        let counters = self.block(self.read_counters())?;
        // Make sure every collection a counter names is known.
        let _ = self.collection_id("")?;
        let collections = read(&self.collections);
        let mut res = Stats {
            actors: counters.actors,
            ..Stats::default()
        };
        for (id, count) in counters.records {
            if let Some(name) = collections.name(id)
                && count > 0
            {
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
        res.cursor = match self.block(self.meta_value("cursor", ""))? {
            Some(bytes) => Some(u64_value(&bytes)?),
            None => None,
        };
        Ok(res)
    }

    fn progress(&self, file_source: Option<&str>) -> Result<Option<Progress>, StoreError> {
        let Some(source) = file_source else {
            return Ok(match self.block(self.meta_value("cursor", ""))? {
                Some(bytes) => Some(Progress::Live(Cursor(u64_value(&bytes)?))),
                None => None,
            });
        };
        let Some(bytes) = self.block(self.meta_value("progress", source))? else {
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
        let Some(actor) = self.lookup_actor_id(did)? else {
            return Ok(None);
        };
        let Some(collection_id) = self.collection_id(collection)? else {
            return Ok(None);
        };
        let key = keys::record_key(actor, collection_id, rkey);
        let Some(bytes) = self.block(self.record_value(&key))? else {
            return Ok(None);
        };
        stored_record(did, collection, rkey, &bytes)
    }

    fn actor(&self, did: &str) -> Result<Option<ActorInfo>, StoreError> {
        let Some(id) = self.lookup_actor_id(did)? else {
            return Ok(None);
        };
        let Some((_, state)) = self.actor_row(id)? else {
            return Ok(None);
        };
        Ok(Some(ActorState::decode(&state)?.info(id, did)))
    }

    fn did(&self, id: ActorId) -> Option<String> {
        if let Some(did) = read(&self.actors).did(id) {
            return Some(did.to_owned());
        }
        match self.actor_row(id) {
            Ok(row) => row.map(|(did, _)| did),
            Err(err) => {
                tracing::warn!(actor = id.0, error = %err, "reading an actor's DID");
                None
            }
        }
    }

    fn actor_id(&self, did: &str) -> Option<ActorId> {
        match self.lookup_actor_id(did) {
            Ok(id) => id,
            Err(err) => {
                tracing::warn!(did, error = %err, "reading an actor id");
                None
            }
        }
    }

    fn sync(&self) -> Result<(), StoreError> {
        // Commits return once their writes are acknowledged at the configured consistency.
        Ok(())
    }

    fn graph_log_seq(&self) -> u64 {
        // Fresh from the cluster: another replica's writer may have logged since.
        match self.block(self.meta_value("graph", "seq")) {
            Ok(Some(bytes)) => {
                if let Ok(seq) = u64_value(&bytes) {
                    self.graph_seq.fetch_max(seq, Ordering::AcqRel);
                }
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(error = %err, "reading the graph log sequence"),
        }
        self.graph_seq.load(Ordering::Acquire)
    }

    fn graph_log_since(
        &self,
        after: u64,
        visit: &mut dyn FnMut(GraphChange),
    ) -> Result<u64, StoreError> {
        self.scan_log(after, &mut |seq, bytes| {
            let (graph, ..) = layout::decode_log_entry(bytes)
                .ok_or_else(|| StoreError::corrupt(format!("change log entry {seq}"), &[]))?;
            decode_graph_changes(graph, visit)
        })
    }

    /// Deletes the change log up to `upto`, or up to the lowest position of another live
    /// reader if that is lower ([`readers`]); this store's own position moves up to `upto`.
    fn prune_graph_log(&self, upto: u64) -> Result<(), StoreError> {
        let bound = self.block(async {
            readers::advance(self, upto).await?;
            let lowest = readers::lowest_other(self).await?;
            Ok::<_, StoreError>(lowest.map_or(upto, |lowest| lowest.min(upto)))
        })?;
        let from = self.pruned_upto.load(Ordering::Acquire);
        if bound <= from {
            return Ok(());
        }
        self.block(async {
            // The watermark first: a reader that finds an entry missing then knows it was
            // pruned. Its value is its timestamp, so the highest of concurrent prunes stays.
            self.session
                .execute_unpaged(
                    &self.st.put_meta,
                    (
                        "graph",
                        "pruned_upto",
                        bound.to_be_bytes().to_vec(),
                        bound as i64,
                    ),
                )
                .await
                .ctx("writing the change log watermark")?;
            for bucket in from / GRAPH_LOG_BUCKET..=bound / GRAPH_LOG_BUCKET {
                self.session
                    .execute_unpaged(&self.st.prune_graph_log, (bucket as i64, bound as i64))
                    .await
                    .ctx("pruning the change log")?;
            }
            Ok::<_, StoreError>(())
        })?;
        self.pruned_upto.fetch_max(bound, Ordering::AcqRel);
        tracing::debug!(upto, bound, "change log pruned");
        Ok(())
    }

    fn intern_actors(&self, dids: &[&str]) -> Result<Vec<ActorId>, StoreError> {
        let mut batch = self.batch();
        let ids = batch.intern_actors(dids);
        batch.commit()?;
        Ok(ids)
    }

    fn import_follows(&self, pairs: &[(ActorId, ActorId)]) -> Result<(), StoreError> {
        let _writer = lock(&self.writer);
        let writes: Vec<Write> = pairs
            .iter()
            .map(|&(actor, subject)| Write {
                table: Table::Pair,
                key: edge_prefix(tag::IMPORTED_FOLLOW, actor, subject).to_vec(),
                value: Some(1u32.to_be_bytes().to_vec()),
            })
            .collect();
        self.block(self.write_batch(&writes))
    }

    fn starter_pack_joins(&self, uri: &RecordUri<'_>) -> Result<u64, StoreError> {
        let Some(mut key) = self.ref_of(uri)? else {
            return Ok(0);
        };
        if let Some(first) = key.first_mut() {
            *first = tag::RECORD_COUNT;
        }
        key.push(count::JOINS);
        self.block(self.count_value(&key))
    }

    fn record_counts(&self, uri: &RecordUri<'_>) -> Result<RecordCounts, StoreError> {
        let Some(mut ref_key) = self.ref_of(uri)? else {
            return Ok(RecordCounts::default());
        };
        if let Some(first) = ref_key.first_mut() {
            *first = tag::RECORD_COUNT;
        }
        let kinds = [
            count::LIKES,
            count::REPOSTS,
            count::REPLIES,
            count::QUOTES,
            count::LIST_ITEMS,
        ];
        let values = self.block(async {
            futures_util::future::try_join_all(kinds.map(|kind| {
                let key = [&ref_key[..], &[kind]].concat();
                async move { self.count_value(&key).await }
            }))
            .await
        })?;
        let get = |at: usize| values.get(at).copied().unwrap_or(0);
        Ok(RecordCounts {
            likes: get(0),
            reposts: get(1),
            replies: get(2),
            quotes: get(3),
            list_items: get(4),
        })
    }

    fn actor_counts(&self, actor: ActorId) -> Result<ActorCounts, StoreError> {
        let kinds = [
            count::POSTS,
            count::LISTS,
            count::FEEDS,
            count::STARTER_PACKS,
        ];
        let values = self.block(async {
            futures_util::future::try_join_all(kinds.map(|kind| async move {
                self.count_value(&keys::actor_count_key(actor, kind)).await
            }))
            .await
        })?;
        let get = |at: usize| values.get(at).copied().unwrap_or(0);
        Ok(ActorCounts {
            posts: get(0),
            lists: get(1),
            feeds: get(2),
            starter_packs: get(3),
        })
    }

    fn latest_rev(&self, actor: ActorId) -> Result<Option<u64>, StoreError> {
        let rev = self.block(self.count_value(&keys::latest_rev_key(actor)))?;
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
        let prefix = keys::author_feed_bound(author, None);
        let upper = below.map(|below| keys::author_feed_bound(author, Some(&below)));
        let upper_k = upper.as_ref().and_then(|upper| upper.get(prefix.len()..));
        // The scan runs on the runtime; items are handed to `visit` (which may not be `Send`)
        // here, a page at a time.
        let mut items = Vec::new();
        let mut next_upper: Option<Vec<u8>> = upper_k.map(<[u8]>::to_vec);
        loop {
            items.clear();
            let mut last_k = None;
            self.block(self.scan_list(
                &prefix,
                layout::bucket_bits(tag::AUTHOR_FEED),
                next_upper.as_deref(),
                &mut |k: &[u8]| {
                    let full = [&prefix[..], k].concat();
                    items.push(parse_feed_key(&full)?);
                    last_k = Some(k.to_vec());
                    Ok(items.len() < PAGE_ROWS as usize)
                },
            ))?;
            let full_page = items.len() == PAGE_ROWS as usize;
            for item in items.drain(..) {
                if !visit(item) {
                    return Ok(());
                }
            }
            match (full_page, last_k) {
                (true, Some(k)) => next_upper = Some(k),
                _ => return Ok(()),
            }
        }
    }

    fn actor_by_handle(&self, handle: &str) -> Option<ActorId> {
        let res = self.block(async {
            let res = self
                .session
                .execute_unpaged(&self.st.get_handle, (handle.to_ascii_lowercase(),))
                .await
                .ctx("reading a handle")?;
            Ok::<_, StoreError>(
                res.into_rows_result()
                    .ctx("reading a handle")?
                    .maybe_first_row::<(Option<i32>,)>()
                    .ctx("reading a handle")?
                    .and_then(|(id,)| id)
                    .map(|id| ActorId(id as u32)),
            )
        });
        match res {
            Ok(id) => id,
            Err(err) => {
                tracing::warn!(handle, error = %err, "reading a handle");
                None
            }
        }
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
        match queries::interaction(collection, actor, subject, &mut |uri| self.ref_of(uri))? {
            Some((prefix, nsid)) => self.first_record_under(&prefix, actor, nsid),
            None => Ok(None),
        }
    }

    fn list_item_uri(
        &self,
        list: &RecordUri<'_>,
        subject: ActorId,
    ) -> Result<Option<String>, StoreError> {
        let Some(owner) = self.lookup_actor_id(list.did)? else {
            return Ok(None);
        };
        match queries::list_item(list, subject, &mut |uri| self.ref_of(uri))? {
            Some(prefix) => self.first_record_under(&prefix, owner, nsid::LISTITEM),
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

    fn notification_entries(
        &self,
        recipient: ActorId,
        below: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.scan_notifications(recipient, below, visit)
    }

    fn for_each_searchable(
        &self,
        visit: &mut dyn FnMut(ActorId, &'static str, StoredRecord),
    ) -> Result<(), StoreError> {
        let wanted: Vec<(CollectionId, &'static str)> = {
            let collections = read(&self.collections);
            crate::SEARCHABLE_COLLECTIONS
                .iter()
                .filter_map(|&name| Some((*collections.by_name.get(name)?, name)))
                .collect()
        };
        // One pass over the whole table; only the searchable rows are decoded, with DIDs from
        // the actor table loaded at open.
        for scanned in self.scan_records() {
            let (key, bytes) = scanned?;
            let Some((actor, collection, rkey)) = keys::parse_record_key(&key) else {
                return Err(StoreError::corrupt("record key", &key));
            };
            let Some(&(_, name)) = wanted.iter().find(|(id, _)| *id == collection) else {
                continue;
            };
            let Some(did) = read(&self.actors).did(actor).map(String::from) else {
                continue;
            };
            if let Some(record) = stored_record(&did, name, rkey, &bytes)? {
                visit(actor, name, record);
            }
        }
        Ok(())
    }

    fn for_each_edge(&self, visit: &mut dyn FnMut(GraphChange)) -> Result<(), StoreError> {
        let pairs = self.block(async {
            let mut rows = self
                .session
                .execute_iter(self.st.scan_pairs.clone(), ())
                .await
                .ctx("reading pairs")?
                .rows_stream::<(Vec<u8>, Option<i32>)>()
                .ctx("reading pairs")?;
            let mut pairs = Vec::new();
            while let Some(row) = rows.try_next().await.ctx("reading pairs")? {
                pairs.push(row);
            }
            Ok::<_, StoreError>(pairs)
        })?;
        for (key, n) in pairs {
            if n.unwrap_or(0) <= 0 {
                continue;
            }
            let corrupt = || StoreError::corrupt("pair key", &[]);
            let actor = ActorId(u32::from_be_bytes(
                key.get(1..5)
                    .ok_or_else(corrupt)?
                    .try_into()
                    .map_err(|_| corrupt())?,
            ));
            let subject = ActorId(u32::from_be_bytes(
                key.get(5..9)
                    .ok_or_else(corrupt)?
                    .try_into()
                    .map_err(|_| corrupt())?,
            ));
            match key.first() {
                Some(&tag::IMPORTED_FOLLOW | &tag::FOLLOW_PAIR) => {
                    visit(GraphChange::Follow(actor, subject));
                }
                Some(&tag::BLOCK_PAIR) => visit(GraphChange::Block(actor, subject)),
                _ => return Err(corrupt()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
