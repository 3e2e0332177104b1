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
//! and refuses otherwise, saying which.
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
pub mod readers;
mod replica;

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

use crate::actors::{ActorState, ActorTable};
use crate::catalog::{Collections, Counters};
use crate::codec::{
    decode_actor_row, decode_file_progress, decode_graph_changes, edge_prefix, key_text,
    list_entry, pair_count, parse_feed_key, stored_record, u64_value,
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

/// The schema this code writes and reads (1: before fencing; see the module documentation).
const SCHEMA_VERSION: u64 = 2;
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

/// Prepared statements, one per request the store makes.
struct Statements {
    get_record: PreparedStatement,
    put_record: PreparedStatement,
    scan_records: PreparedStatement,
    put_entry: PreparedStatement,
    del_entry: PreparedStatement,
    put_bucket: PreparedStatement,
    first_entry: PreparedStatement,
    entries_desc: PreparedStatement,
    entries_below: PreparedStatement,
    buckets_desc: PreparedStatement,
    get_count: PreparedStatement,
    put_count: PreparedStatement,
    del_count: PreparedStatement,
    get_pair: PreparedStatement,
    put_pair: PreparedStatement,
    del_pair: PreparedStatement,
    scan_pairs: PreparedStatement,
    get_actor: PreparedStatement,
    put_actor: PreparedStatement,
    scan_actors: PreparedStatement,
    get_actor_id: PreparedStatement,
    put_actor_id: PreparedStatement,
    get_handle: PreparedStatement,
    put_handle: PreparedStatement,
    del_handle: PreparedStatement,
    get_meta: PreparedStatement,
    scan_meta: PreparedStatement,
    put_meta: PreparedStatement,
    put_graph_log: PreparedStatement,
    scan_graph_log: PreparedStatement,
    prune_graph_log: PreparedStatement,
    put_batch_chunk: PreparedStatement,
    get_batch_chunks: PreparedStatement,
    del_batch: PreparedStatement,
    put_meta_now: PreparedStatement,
    writer_init: PreparedStatement,
    writer_get: PreparedStatement,
    writer_commit: PreparedStatement,
    lease_take: PreparedStatement,
    lease_renew: PreparedStatement,
    lease_release: PreparedStatement,
    put_reader: PreparedStatement,
    scan_readers: PreparedStatement,
    del_reader: PreparedStatement,
}

const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS records (p blob, k blob, v blob, PRIMARY KEY (p, k))",
    "CREATE TABLE IF NOT EXISTS index_entries (p blob, b bigint, k blob, PRIMARY KEY ((p, b), k))",
    "CREATE TABLE IF NOT EXISTS buckets (p blob, b bigint, PRIMARY KEY (p, b)) WITH CLUSTERING ORDER BY (b DESC)",
    "CREATE TABLE IF NOT EXISTS counts (k blob PRIMARY KEY, n bigint)",
    "CREATE TABLE IF NOT EXISTS pairs (k blob PRIMARY KEY, n int)",
    "CREATE TABLE IF NOT EXISTS actors (block int, id int, did text, state blob, PRIMARY KEY (block, id))",
    "CREATE TABLE IF NOT EXISTS actor_ids (did text PRIMARY KEY, id int)",
    "CREATE TABLE IF NOT EXISTS handles (handle text PRIMARY KEY, id int)",
    "CREATE TABLE IF NOT EXISTS meta (part text, name text, v blob, PRIMARY KEY (part, name))",
    "CREATE TABLE IF NOT EXISTS graph_log (bucket bigint, seq bigint, changes blob, PRIMARY KEY (bucket, seq))",
    "CREATE TABLE IF NOT EXISTS batch_chunks (writer bigint, seq bigint, chunk int, data blob, PRIMARY KEY ((writer, seq), chunk))",
    "CREATE TABLE IF NOT EXISTS writer (name text PRIMARY KEY, owner text, epoch bigint, batch_seq bigint, batch_ts bigint, batch_chunks int, batch_writer bigint)",
    "CREATE TABLE IF NOT EXISTS log_readers (part int, reader bigint, seq bigint, PRIMARY KEY (part, reader))",
];

/// What [`CassandraStore::scan_log`] hands each change log entry to: its sequence and bytes.
type LogVisit<'a> = dyn FnMut(u64, &[u8]) -> Result<(), StoreError> + 'a;

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
            st.put_reader.clone(),
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
        let _writer = lock(&self.writer);
        let row = self.block(lease::read_row(self))?;
        self.block(self.finish_logged_batch(row.head))?;
        self.block(self.load())?;
        lease::recovered(self, &row);
        Ok(())
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
        let mut table = ActorTable::default();
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
                table.restore(ActorId(id as u32), &did, ActorState::decode(&state)?)?;
            }
            if !any {
                break;
            }
            block += 1;
        }
        *write(&self.actors) = table;
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

    /// Visits the entries of the list `p` newest first (clustering keys, descending), below
    /// `upper` (a clustering key) if given, until `visit` says stop.
    async fn scan_list(
        &self,
        p: &[u8],
        bits: Option<u32>,
        upper: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let upper_bucket = match (bits, upper) {
            (Some(bits), Some(upper)) => {
                let time: [u8; 8] = upper
                    .get(..8)
                    .and_then(|bytes| bytes.try_into().ok())
                    .ok_or_else(|| StoreError::corrupt("list cursor", &[]))?;
                Some(layout::bucket(keys::time_from_bytes(time), bits))
            }
            _ => None,
        };
        let buckets: Vec<i64> = match bits {
            None => vec![0],
            Some(_) => {
                // The directory is read whole: one row per non-empty bucket of this list.
                let mut rows = self
                    .session
                    .execute_iter(
                        self.st.buckets_desc.clone(),
                        (p, upper_bucket.unwrap_or(i64::MAX)),
                    )
                    .await
                    .ctx("reading a bucket directory")?
                    .rows_stream::<(i64,)>()
                    .ctx("reading a bucket directory")?;
                let mut buckets = Vec::new();
                while let Some((b,)) = rows.try_next().await.ctx("reading a bucket directory")? {
                    buckets.push(b);
                }
                buckets
            }
        };
        for b in buckets {
            let bound = match (upper, upper_bucket) {
                (Some(upper), Some(ub)) if ub == b => Some(upper),
                (Some(upper), None) => Some(upper),
                _ => None,
            };
            let pager = match bound {
                Some(upper) => {
                    self.session
                        .execute_iter(self.st.entries_below.clone(), (p, b, upper))
                        .await
                }
                None => {
                    self.session
                        .execute_iter(self.st.entries_desc.clone(), (p, b))
                        .await
                }
            }
            .ctx("reading a list")?;
            let mut rows = pager.rows_stream::<(Vec<u8>,)>().ctx("reading a list")?;
            while let Some((k,)) = rows.try_next().await.ctx("reading a list")? {
                if !visit(&k)? {
                    return Ok(());
                }
            }
        }
        Ok(())
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

    /// An actor's DID and state, read from the cluster.
    fn actor_row(&self, id: ActorId) -> Result<Option<(String, ActorState)>, StoreError> {
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
            row.map(|(did, state)| Ok((did, ActorState::decode(&state)?)))
                .transpose()
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

    /// Takes the writer lease or renews it; see [`lease`].
    pub fn try_lease(&self, owner: &str, ttl: Duration) -> Result<bool, StoreError> {
        self.block(lease::try_acquire(self, owner, ttl))
    }

    /// Gives the writer lease up, if `owner` holds it.
    pub fn release_lease(&self, owner: &str) -> Result<(), StoreError> {
        self.block(lease::release(self, owner))
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
                    &self.st.del_reader,
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
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (hasher.finish() >> 1).max(1) as i64
}

async fn connect(options: &CassandraOptions) -> Result<(Session, Box<Statements>), StoreError> {
    let profile = ExecutionProfile::builder()
        .consistency(options.consistency.driver())
        .serial_consistency(Some(SerialConsistency::Serial))
        .request_timeout(Some(REQUEST_TIMEOUT))
        .speculative_execution_policy(Some(Arc::new(SimpleSpeculativeExecutionPolicy {
            max_retry_count: SPECULATIVE_MAX,
            retry_interval: SPECULATIVE_AFTER,
        })))
        .build();
    let session = SessionBuilder::new()
        .known_nodes(&options.nodes)
        .connection_timeout(Duration::from_secs(5))
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await
        .map_err(|err| StoreError::Unavailable {
            what: format!(
                "cannot connect to cassandra at {}: {err}",
                options.nodes.join(", ")
            ),
        })?;
    let ks = &options.keyspace;
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = \
                 {{'class': 'SimpleStrategy', 'replication_factor': {}}}",
                options.replication_factor
            ),
            (),
        )
        .await
        .ctx("creating the keyspace")?;
    for table in TABLES {
        let ddl = table.replacen("EXISTS ", &format!("EXISTS {ks}."), 1);
        session
            .query_unpaged(ddl, ())
            .await
            .ctx("creating a table")?;
    }
    session
        .await_schema_agreement()
        .await
        .ctx("waiting for schema agreement")?;
    let st = prepare(&session, ks).await?;
    // The schema version: written by the first Starling, checked by every later one. Its
    // write timestamp is the version, so an upgrade's write wins.
    let version = match meta_row(&session, &st, "schema", "version").await? {
        Some(bytes) => Some(u64_value(&bytes)?),
        None => None,
    };
    match version {
        None | Some(SCHEMA_VERSION) => {}
        Some(1) => check_upgrade_from_v1(&session, &st, ks).await?,
        Some(found) => {
            return Err(StoreError::Cluster {
                what: format!(
                    "keyspace `{ks}` has schema version {found}, this Starling reads version {SCHEMA_VERSION}"
                ),
            });
        }
    }
    // The writer row starts at the newest applied batch (none in a new keyspace).
    let applied = match meta_row(&session, &st, "batch", "applied").await? {
        Some(bytes) => u64_value(&bytes)?,
        None => 0,
    };
    let applied_ts = match meta_row(&session, &st, "batch", "ts").await? {
        Some(bytes) => u64_value(&bytes)?,
        None => 0,
    };
    session
        .execute_unpaged(&st.writer_init, (applied as i64, applied_ts as i64))
        .await
        .ctx("creating the writer row")?;
    if version != Some(SCHEMA_VERSION) {
        session
            .execute_unpaged(
                &st.put_meta_now,
                (
                    "schema",
                    "version",
                    SCHEMA_VERSION.to_be_bytes().to_vec(),
                    SCHEMA_VERSION as i64,
                ),
            )
            .await
            .ctx("writing the schema version")?;
    }
    Ok((session, Box::new(st)))
}

async fn meta_row(
    session: &Session,
    st: &Statements,
    part: &str,
    name: &str,
) -> Result<Option<Vec<u8>>, StoreError> {
    let res = session
        .execute_unpaged(&st.get_meta, (part, name))
        .await
        .ctx("reading meta")?;
    Ok(res
        .into_rows_result()
        .ctx("reading meta")?
        .maybe_first_row::<(Option<Vec<u8>>,)>()
        .ctx("reading meta")?
        .and_then(|(v,)| v))
}

/// Checks that a keyspace of schema version 1 can be upgraded in place: no replica of the
/// older version may hold its lease (it would go on writing, unfenced), and its last logged
/// batch must be applied (version 2 does not read the old batch log). Carries the change log
/// watermark over to its new name.
async fn check_upgrade_from_v1(
    session: &Session,
    st: &Statements,
    ks: &str,
) -> Result<(), StoreError> {
    let mut lease = scylla::statement::unprepared::Statement::new(qualify(
        "SELECT owner FROM lease WHERE name = 'writer'",
        ks,
    ));
    lease.set_consistency(Consistency::Serial);
    let owner = session
        .query_unpaged(lease, ())
        .await
        .ctx("reading the version 1 writer lease")?
        .into_rows_result()
        .ctx("reading the version 1 writer lease")?
        .maybe_first_row::<(Option<String>,)>()
        .ctx("reading the version 1 writer lease")?
        .and_then(|(owner,)| owner);
    if let Some(owner) = owner {
        return Err(StoreError::Cluster {
            what: format!(
                "keyspace `{ks}` is at schema version 1 and `{owner}`, a replica of an older \
                 Starling, holds its writer lease: stop every older replica, then start this one \
                 again (it upgrades the keyspace to version {SCHEMA_VERSION})"
            ),
        });
    }
    let pending = match meta_row(session, st, "batch", "pending").await? {
        Some(marker) => u64_value(
            marker
                .get(..8)
                .ok_or_else(|| StoreError::corrupt("batch log marker", &[]))?,
        )?,
        None => 0,
    };
    let applied = match meta_row(session, st, "batch", "applied").await? {
        Some(bytes) => u64_value(&bytes)?,
        None => 0,
    };
    if pending > applied {
        return Err(StoreError::Cluster {
            what: format!(
                "keyspace `{ks}` holds batch {pending}, logged by an older Starling and not \
                 applied: open it once with that version (`starling stats` does), then start \
                 this one again"
            ),
        });
    }
    if let Some(bytes) = meta_row(session, st, "graph", "pruned").await? {
        let pruned = u64_value(&bytes)?;
        session
            .execute_unpaged(&st.put_meta, ("graph", "pruned_upto", bytes, pruned as i64))
            .await
            .ctx("writing the change log watermark")?;
    }
    tracing::info!(
        keyspace = ks,
        from = 1,
        to = SCHEMA_VERSION,
        "upgrading the keyspace schema"
    );
    Ok(())
}

/// The tables the statements name, qualified with the keyspace when prepared.
const TABLE_NAMES: &[&str] = &[
    "records",
    "index_entries",
    "buckets",
    "counts",
    "pairs",
    "actors",
    "actor_ids",
    "handles",
    "meta",
    "graph_log",
    "batch_chunks",
    "writer",
    "log_readers",
    "lease",
];

/// `cql` with its table name qualified by `keyspace`: the session never `USE`s a keyspace, so
/// a statement names exactly one table whatever else shares the session.
fn qualify(cql: &str, keyspace: &str) -> String {
    let mut out = format!("{cql} ");
    for table in TABLE_NAMES {
        for keyword in ["FROM ", "INTO ", "UPDATE "] {
            out = out.replace(
                &format!("{keyword}{table} "),
                &format!("{keyword}{keyspace}.{table} "),
            );
        }
    }
    out.trim_end().to_owned()
}

async fn prepare(session: &Session, keyspace: &str) -> Result<Statements, StoreError> {
    let p = |cql: &'static str| async move {
        let cql = qualify(cql, keyspace);
        let mut st = session
            .prepare(cql.as_str())
            .await
            .map_err(|err| StoreError::Cluster {
                what: format!("preparing `{cql}`: {err}"),
            })?;
        st.set_page_size(PAGE_ROWS);
        // Every write carries an explicit timestamp and every value is absolute, so a retry
        // of any statement (lease statements aside) is harmless.
        st.set_is_idempotent(!cql.contains(" IF "));
        Ok::<_, StoreError>(st)
    };
    Ok(Statements {
        get_record: p("SELECT v FROM records WHERE p = ? AND k = ?").await?,
        put_record: p("INSERT INTO records (p, k, v) VALUES (?, ?, ?) USING TIMESTAMP ?").await?,
        scan_records: p("SELECT k, v FROM records WHERE p = ?").await?,
        put_entry: p("INSERT INTO index_entries (p, b, k) VALUES (?, ?, ?) USING TIMESTAMP ?")
            .await?,
        del_entry: p("DELETE FROM index_entries USING TIMESTAMP ? WHERE p = ? AND b = ? AND k = ?")
            .await?,
        put_bucket: p("INSERT INTO buckets (p, b) VALUES (?, ?) USING TIMESTAMP ?").await?,
        first_entry: p("SELECT k FROM index_entries WHERE p = ? AND b = ? LIMIT 1").await?,
        entries_desc: p("SELECT k FROM index_entries WHERE p = ? AND b = ? ORDER BY k DESC")
            .await?,
        entries_below: p(
            "SELECT k FROM index_entries WHERE p = ? AND b = ? AND k < ? ORDER BY k DESC",
        )
        .await?,
        buckets_desc: p("SELECT b FROM buckets WHERE p = ? AND b <= ?").await?,
        get_count: p("SELECT n FROM counts WHERE k = ?").await?,
        put_count: p("INSERT INTO counts (k, n) VALUES (?, ?) USING TIMESTAMP ?").await?,
        del_count: p("DELETE FROM counts USING TIMESTAMP ? WHERE k = ?").await?,
        get_pair: p("SELECT n FROM pairs WHERE k = ?").await?,
        put_pair: p("INSERT INTO pairs (k, n) VALUES (?, ?) USING TIMESTAMP ?").await?,
        del_pair: p("DELETE FROM pairs USING TIMESTAMP ? WHERE k = ?").await?,
        scan_pairs: p("SELECT k, n FROM pairs").await?,
        get_actor: p("SELECT did, state FROM actors WHERE block = ? AND id = ?").await?,
        put_actor: p(
            "INSERT INTO actors (block, id, did, state) VALUES (?, ?, ?, ?) USING TIMESTAMP ?",
        )
        .await?,
        scan_actors: p("SELECT id, did, state FROM actors WHERE block = ? AND id >= ?").await?,
        get_actor_id: p("SELECT id FROM actor_ids WHERE did = ?").await?,
        put_actor_id: p("INSERT INTO actor_ids (did, id) VALUES (?, ?) USING TIMESTAMP ?").await?,
        get_handle: p("SELECT id FROM handles WHERE handle = ?").await?,
        put_handle: p("INSERT INTO handles (handle, id) VALUES (?, ?) USING TIMESTAMP ?").await?,
        del_handle: p("DELETE FROM handles USING TIMESTAMP ? WHERE handle = ?").await?,
        get_meta: p("SELECT v FROM meta WHERE part = ? AND name = ?").await?,
        scan_meta: p("SELECT name, v FROM meta WHERE part = ?").await?,
        put_meta: p("INSERT INTO meta (part, name, v) VALUES (?, ?, ?) USING TIMESTAMP ?").await?,
        put_meta_now: p("INSERT INTO meta (part, name, v) VALUES (?, ?, ?) USING TIMESTAMP ?")
            .await?,
        put_graph_log: p(
            "INSERT INTO graph_log (bucket, seq, changes) VALUES (?, ?, ?) USING TIMESTAMP ?",
        )
        .await?,
        scan_graph_log: p("SELECT seq, changes FROM graph_log WHERE bucket = ? AND seq > ?")
            .await?,
        prune_graph_log: p("DELETE FROM graph_log WHERE bucket = ? AND seq <= ?").await?,
        put_batch_chunk: p(
            "INSERT INTO batch_chunks (writer, seq, chunk, data) VALUES (?, ?, ?, ?) USING TIMESTAMP ?",
        )
        .await?,
        get_batch_chunks: p("SELECT chunk, data FROM batch_chunks WHERE writer = ? AND seq = ?")
            .await?,
        del_batch: p("DELETE FROM batch_chunks USING TIMESTAMP ? WHERE writer = ? AND seq = ?")
            .await?,
        writer_init: p(
            "INSERT INTO writer (name, epoch, batch_seq, batch_ts, batch_chunks, batch_writer) \
             VALUES ('writer', 0, ?, ?, 0, 0) IF NOT EXISTS",
        )
        .await?,
        writer_get: {
            let mut st = p("SELECT owner, epoch, batch_seq, batch_ts, batch_chunks, batch_writer \
                            FROM writer WHERE name = 'writer'")
            .await?;
            // Every transaction accepted before the read is in its answer.
            st.set_consistency(Consistency::Serial);
            st
        },
        writer_commit: p(
            "UPDATE writer SET epoch = ?, batch_seq = ?, batch_ts = ?, batch_chunks = ?, \
             batch_writer = ? WHERE name = 'writer' IF epoch = ? AND owner = ? AND batch_seq = ?",
        )
        .await?,
        // The owner cell expires with the lease; the epoch never does, so the two are set by
        // two statements of one conditional batch (one Paxos round on one row).
        lease_take: p(
            "BEGIN BATCH \
             UPDATE writer USING TTL ? SET owner = ? WHERE name = 'writer' IF owner = null AND epoch = ?; \
             UPDATE writer SET epoch = ? WHERE name = 'writer'; \
             APPLY BATCH",
        )
        .await?,
        lease_renew: p(
            "UPDATE writer USING TTL ? SET owner = ? WHERE name = 'writer' IF owner = ? AND epoch = ?",
        )
        .await?,
        lease_release: p("DELETE owner FROM writer WHERE name = 'writer' IF owner = ?").await?,
        put_reader: p(
            "INSERT INTO log_readers (part, reader, seq) VALUES (0, ?, ?) USING TTL ? AND TIMESTAMP ?",
        )
        .await?,
        scan_readers: p("SELECT reader, seq FROM log_readers WHERE part = 0").await?,
        del_reader: p("DELETE FROM log_readers USING TIMESTAMP ? WHERE part = 0 AND reader = ?")
            .await?,
    })
}

impl Store for CassandraStore {
    type Batch<'s> = CassandraBatch<'s>;

    fn batch(&self) -> CassandraBatch<'_> {
        CassandraBatch::new(self)
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
        Ok(Some(ActorInfo {
            id,
            did: did.to_owned(),
            handle: state.handle.as_deref().map(str::to_owned),
            status: state.status(),
        }))
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
        if limit == 0 {
            return Ok(ListPage::default());
        }
        let Some(prefix) = queries::list(list, &mut |uri| self.ref_of(uri))? else {
            return Ok(ListPage::default());
        };
        let bits = prefix.first().and_then(|&t| layout::bucket_bits(t));
        // One more than asked: its presence says whether there is a next page.
        let mut tails: Vec<Vec<u8>> = Vec::new();
        self.block(self.scan_list(&prefix, bits, after, &mut |k: &[u8]| {
            tails.push(k.to_vec());
            Ok(tails.len() <= limit)
        }))?;
        let mut page = ListPage::default();
        let more = tails.len() > limit;
        tails.truncate(limit);
        for tail in &tails {
            page.entries
                .push(list_entry(list, tail, |id| self.did(id))?);
        }
        if more {
            page.cursor = tails.last().cloned();
        }
        Ok(page)
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
mod tests {
    use super::*;
    use crate::Batch;
    use starling_core::jetstream;
    use std::collections::BTreeSet;

    fn apply(store: &CassandraStore, lines: &[String]) -> Result<Committed, StoreError> {
        let mut batch = store.batch();
        for line in lines {
            batch.apply(&jetstream::decode(line.as_bytes()).unwrap())?;
        }
        batch.commit()
    }

    fn commit(
        did: &str,
        time_us: u64,
        rev: &str,
        op: &str,
        collection: &str,
        rkey: &str,
        record: &str,
    ) -> String {
        let record = if op == "delete" {
            String::new()
        } else {
            format!(r#","record":{record},"cid":"bafyreiaaaaaaaa{time_us}""#)
        };
        format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rev}","operation":"{op}","collection":"{collection}","rkey":"{rkey}"{record}}}}}"#
        )
    }

    /// Options for a keyspace of its own for test `name` on the node `STARLING_TEST_CASSANDRA`
    /// names; `None` (and a line saying it is skipped) when that is unset, which fails under
    /// `CI=true`.
    fn test_keyspace(name: &str) -> Option<CassandraOptions> {
        let Ok(nodes) = std::env::var("STARLING_TEST_CASSANDRA") else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but STARLING_TEST_CASSANDRA is unset"
            );
            eprintln!(
                "skipping {name} on cassandra: STARLING_TEST_CASSANDRA is unset \
                 (scripts/test.sh starts a node and sets it)"
            );
            return None;
        };
        let mut options = CassandraOptions::new(
            nodes
                .split(',')
                .map(|node| node.trim().to_owned())
                .collect(),
        );
        options.keyspace = format!("starling_test_{name}_{}", std::process::id());
        Some(options)
    }

    const POST_RKEY: &str = "3l3qo2vutsw2b";
    const REV1: &str = "3l3qo2vuaaa2b";
    const REV2: &str = "3l3qo2vubbb2b";
    const CREATED: &str = "2024-09-01T00:00:00.000Z";

    fn post_event(did: &str, time_us: u64, rkey: &str) -> String {
        let record = format!(r#"{{"text":"hi","createdAt":"{CREATED}"}}"#);
        commit(
            did,
            time_us,
            REV1,
            "create",
            "app.bsky.feed.post",
            rkey,
            &record,
        )
    }

    fn like_event(did: &str, time_us: u64, rev: &str, op: &str, subject: &str) -> String {
        let record = format!(
            r#"{{"subject":{{"uri":"{subject}","cid":"bafyreiaaaaaaaa"}},"createdAt":"{CREATED}"}}"#
        );
        commit(
            did,
            time_us,
            rev,
            op,
            "app.bsky.feed.like",
            "3l3qo2vuowo2b",
            &record,
        )
    }

    fn follow_event(did: &str, time_us: u64, rev: &str, op: &str, subject: &str) -> String {
        let record = format!(r#"{{"subject":"{subject}","createdAt":"{CREATED}"}}"#);
        commit(
            did,
            time_us,
            rev,
            op,
            "app.bsky.graph.follow",
            "3l3qo2vuppp2b",
            &record,
        )
    }

    /// A DID for actor number `n`.
    fn did(n: u32) -> String {
        let letters: String = n
            .to_string()
            .bytes()
            .map(|d| (d - b'0' + b'a') as char)
            .collect();
        format!("did:plc:{letters:a>24}")
    }

    /// Applies `batches` in order to an embedded store: the expected state, worked out by the
    /// other backend.
    fn model(batches: &[&[String]]) -> (tempfile::TempDir, crate::EmbeddedStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::EmbeddedStore::open(dir.path()).unwrap();
        for lines in batches {
            let mut batch = store.batch();
            for line in *lines {
                batch
                    .apply(&jetstream::decode(line.as_bytes()).unwrap())
                    .unwrap();
            }
            batch.commit().unwrap();
        }
        store.sync().unwrap();
        (dir, store)
    }

    /// Asserts that `store` holds what `expected` does: counts, the post's counts, the graph.
    fn assert_same(store: &CassandraStore, expected: &crate::EmbeddedStore, post: &str) {
        assert_eq!(store.stats().unwrap(), expected.stats().unwrap(), "stats");
        let uri = RecordUri::parse(post).unwrap();
        assert_eq!(
            store.record_counts(&uri).unwrap(),
            expected.record_counts(&uri).unwrap(),
            "counts of {post}"
        );
        // Ids differ between the stores: compare DIDs.
        assert_eq!(edge_dids(store), edge_dids(expected), "edges");
    }

    /// Every follow and block edge of `store`, by DID.
    fn edge_dids<S: Store>(store: &S) -> BTreeSet<(&'static str, Option<String>, Option<String>)> {
        let mut edges = BTreeSet::new();
        store
            .for_each_edge(&mut |change| {
                edges.insert(match change {
                    GraphChange::Follow(a, b) => ("follow", store.did(a), store.did(b)),
                    GraphChange::Block(a, b) => ("block", store.did(a), store.did(b)),
                    other => panic!("not an edge: {other:?}"),
                });
            })
            .unwrap();
        assert!(edges.iter().all(|(_, a, b)| a.is_some() && b.is_some()));
        edges
    }

    /// The lease of a writer that is to stall: long enough for its first batch on a loaded
    /// machine, short enough to wait out.
    const STALLING_LEASE: Duration = Duration::from_secs(3);
    /// The lease of the writer that takes over: nobody takes it from it.
    const TAKEOVER_LEASE: Duration = Duration::from_secs(60);

    /// Takes the writer lease for `owner`, polling until the previous holder's has expired,
    /// and recovers.
    fn take_lease_when_free(store: &CassandraStore, owner: &str, ttl: Duration) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !store.try_lease(owner, ttl).unwrap() {
            assert!(
                std::time::Instant::now() < deadline,
                "{owner} never got the lease"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        store.recover().unwrap();
    }

    // Checks fencing against a writer that stalls with a batch ready: A holds the lease and
    // commits a batch, builds a second one (a like, a post, a follow by an actor nobody else
    // names), and stops renewing; its lease runs out, B polls until it takes the lease,
    // recovers and commits its own batch; A then commits. A's commit must be refused as
    // `Fenced` and nothing of its batch may show: the store must equal an embedded store that
    // applied A's first batch and B's batch only. A is refused from then on.
    #[test]
    fn a_stalled_writer_is_fenced_after_a_takeover() {
        let Some(options) = test_keyspace("fenced") else {
            return;
        };
        let (a_did, b_did, c_did, d_did) = (did(1), did(2), did(3), did(4));
        let post = format!("at://{a_did}/app.bsky.feed.post/{POST_RKEY}");
        let first = [
            post_event(&a_did, 1_000, POST_RKEY),
            like_event(&b_did, 1_001, REV1, "create", &post),
        ];
        let stalled_lines = [
            like_event(&c_did, 1_002, REV1, "create", &post),
            post_event(&c_did, 1_003, "3l3qo2vuqqq2b"),
            follow_event(&c_did, 1_004, REV1, "create", &a_did),
        ];
        let takeover = [
            like_event(&d_did, 1_005, REV1, "create", &post),
            follow_event(&b_did, 1_006, REV1, "create", &a_did),
        ];
        let a = CassandraStore::open(&options).unwrap();
        take_lease_when_free(&a, "a", STALLING_LEASE);
        apply(&a, &first).unwrap();
        let mut stalled = a.batch();
        for line in &stalled_lines {
            stalled
                .apply(&jetstream::decode(line.as_bytes()).unwrap())
                .unwrap();
        }
        let b = CassandraStore::open(&options).unwrap();
        take_lease_when_free(&b, "b", TAKEOVER_LEASE);
        apply(&b, &takeover).unwrap();
        let refused = stalled.commit();
        assert!(
            matches!(refused, Err(StoreError::Fenced { .. })),
            "the stalled writer's commit: {refused:?}"
        );
        let reader = CassandraStore::open(&options).unwrap();
        let (_dir, expected) = model(&[&first, &takeover]);
        assert_same(&reader, &expected, &post);
        assert!(
            reader.actor(&c_did).unwrap().is_none(),
            "{c_did} never stored"
        );
        assert!(
            reader
                .record(&c_did, "app.bsky.feed.post", "3l3qo2vuqqq2b")
                .unwrap()
                .is_none()
        );
        let mut logged = Vec::new();
        reader
            .changes_since(0, &mut |seq, committed| {
                logged.push((seq, committed.clone()))
            })
            .unwrap();
        assert_eq!(logged.len(), 2, "A's first batch and B's: {logged:?}");
        // A lost the lease for good, and every later batch of its is refused.
        assert!(!a.try_lease("a", STALLING_LEASE).unwrap());
        assert!(matches!(
            apply(&a, &stalled_lines),
            Err(StoreError::Fenced { .. })
        ));
        drop((a, b));
        reader.drop_keyspace(&options.keyspace).unwrap();
    }

    // Checks the window between a commit and its data writes: A commits a batch (a like and
    // a follow by C) and stalls before sending its data writes; its lease runs out, B takes
    // over, recovers (so applies A's batch from the log), then deletes that like and follow
    // and adds two likes. A's data writes then land, late. B's newer writes must win, whatever
    // order the writes arrived in: the store equals an embedded store that applied the three
    // batches in order. A's next commit is refused.
    #[test]
    fn late_writes_of_a_committed_batch_lose_to_the_next_writer() {
        let Some(options) = test_keyspace("late") else {
            return;
        };
        let (a_did, b_did, c_did, d_did, e_did) = (did(1), did(2), did(3), did(4), did(5));
        let post = format!("at://{a_did}/app.bsky.feed.post/{POST_RKEY}");
        let first = [
            post_event(&a_did, 1_000, POST_RKEY),
            like_event(&b_did, 1_001, REV1, "create", &post),
        ];
        let second = [
            like_event(&c_did, 1_002, REV1, "create", &post),
            follow_event(&c_did, 1_003, REV1, "create", &a_did),
        ];
        let third = [
            like_event(&c_did, 1_004, REV2, "delete", &post),
            follow_event(&c_did, 1_005, REV2, "delete", &a_did),
            like_event(&d_did, 1_006, REV1, "create", &post),
            like_event(&e_did, 1_007, REV1, "create", &post),
        ];
        let a = CassandraStore::open(&options).unwrap();
        take_lease_when_free(&a, "a", STALLING_LEASE);
        apply(&a, &first).unwrap();
        let (reached_tx, reached) = std::sync::mpsc::channel();
        let (resume, resume_rx) = tokio::sync::oneshot::channel();
        *lock(&a.stall_after_commit) = Some((reached_tx, resume_rx));
        std::thread::scope(|scope| {
            let stalled = scope.spawn(|| apply(&a, &second));
            reached.recv().unwrap();
            let b = CassandraStore::open(&options).unwrap();
            take_lease_when_free(&b, "b", TAKEOVER_LEASE);
            let uri = RecordUri::parse(&post).unwrap();
            assert_eq!(
                b.record_counts(&uri).unwrap().likes,
                2,
                "B applied A's committed batch"
            );
            apply(&b, &third).unwrap();
            resume.send(()).unwrap();
            stalled.join().unwrap().unwrap();
        });
        let reader = CassandraStore::open(&options).unwrap();
        let (_dir, expected) = model(&[&first, &second, &third]);
        assert_same(&reader, &expected, &post);
        assert_eq!(reader.stats().unwrap().likes, 3);
        assert!(
            reader
                .record(&c_did, "app.bsky.feed.like", "3l3qo2vuowo2b")
                .unwrap()
                .is_none(),
            "B's delete stands"
        );
        assert!(matches!(apply(&a, &first), Err(StoreError::Fenced { .. })));
        drop(a);
        reader.drop_keyspace(&options.keyspace).unwrap();
    }

    // Checks that pruning keeps what a live but slow reader has not read. F reads the change
    // log up to N and then stops reading, alive, for over twice its row's TTL, while the
    // writer W commits batches (a post and a follow each) and prunes after each as far as it
    // may. F then reads from N and must get every entry W committed after N, exactly as W's
    // commits returned them; pruning still worked (a reader from 0 is told entries are gone),
    // and once F is closed W prunes to its newest entry, as it does once a dead reader's row
    // expires.
    #[test]
    fn a_slow_reader_keeps_its_change_log_entries() {
        let Some(options) = test_keyspace("readers") else {
            return;
        };
        let short = readers::ReaderTiming {
            ttl: Duration::from_secs(2),
            refresh: Duration::from_millis(500),
        };
        let writer = CassandraStore::open(&options).unwrap();
        let subject = did(1);
        let mut n_batches = 0u32;
        let mut commit_next = |writer: &CassandraStore| {
            n_batches += 1;
            let author = did(100 + n_batches);
            let time_us = 10_000 + u64::from(n_batches) * 10;
            let committed = apply(
                writer,
                &[
                    post_event(&author, time_us, POST_RKEY),
                    follow_event(&author, time_us + 1, REV1, "create", &subject),
                ],
            )
            .unwrap();
            assert_eq!(committed.graph.len(), 1);
            assert_eq!(committed.feed.len(), 1);
            (writer.graph_log_seq(), committed)
        };
        for _ in 0..3 {
            commit_next(&writer);
        }
        let follower = CassandraStore::open_with(&options, short).unwrap();
        let read_upto = follower.changes_since(0, &mut |_, _| {}).unwrap();
        assert_eq!(read_upto, 3);
        assert_eq!(
            follower.changes_since(read_upto, &mut |_, _| {}).unwrap(),
            3
        );
        let mut expected = Vec::new();
        let quiet_until = std::time::Instant::now() + short.ttl * 2 + short.refresh;
        while std::time::Instant::now() < quiet_until || expected.len() < 5 {
            expected.push(commit_next(&writer));
            writer.prune_graph_log(writer.graph_log_seq()).unwrap();
        }
        let mut read = Vec::new();
        let last = follower
            .changes_since(read_upto, &mut |seq, committed| {
                read.push((seq, committed.clone()));
            })
            .unwrap();
        // What the log keeps of a commit: its graph and feed changes and its cursor.
        let expected: Vec<(u64, Committed)> = expected
            .into_iter()
            .map(|(seq, committed)| {
                (
                    seq,
                    Committed {
                        identities: Vec::new(),
                        ..committed
                    },
                )
            })
            .collect();
        assert_eq!(read, expected);
        assert_eq!(last, writer.graph_log_seq());
        let pruned = |after: u64| {
            let probe = CassandraStore::open(&options).unwrap();
            probe.changes_since(after, &mut |_, _| {})
        };
        assert!(
            matches!(
                pruned(0),
                Err(StoreError::Pruned {
                    after: 0,
                    pruned_upto: 3
                })
            ),
            "pruned up to the slow reader's position, and no further"
        );
        drop(follower);
        let newest = writer.graph_log_seq();
        writer.prune_graph_log(newest).unwrap();
        assert!(matches!(
            pruned(read_upto),
            Err(StoreError::Pruned { pruned_upto, .. }) if pruned_upto == newest
        ));
        writer.drop_keyspace(&options.keyspace).unwrap();
    }

    // Checks the upgrade of a keyspace at schema version 1 (before fencing), built here as
    // that version left it (its markers in `meta`, a `lease` table, no `writer` row): opening
    // it is refused while an older replica holds the old lease, and while the old batch log
    // has a batch not applied, each with a message naming it; then it is upgraded in place,
    // and the next batch follows the old sequence.
    #[test]
    fn a_version_1_keyspace_is_upgraded_in_place() {
        let Some(options) = test_keyspace("upgrade") else {
            return;
        };
        let ks = &options.keyspace;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let session = rt
            .block_on(SessionBuilder::new().known_nodes(&options.nodes).build())
            .unwrap();
        let run = |cql: String| {
            rt.block_on(session.query_unpaged(cql, ())).unwrap();
        };
        let ts = 1_700_000_000_000_000u64;
        let meta = |name: &str, value: &[u8], write_ts: u64| {
            let hex: String = value.iter().map(|byte| format!("{byte:02x}")).collect();
            run(format!(
                "INSERT INTO {ks}.meta (part, name, v) VALUES ('{}', '{}', 0x{hex}) \
                 USING TIMESTAMP {write_ts}",
                name.split('/').next().unwrap(),
                name.split('/').nth(1).unwrap(),
            ));
        };
        let marker = |seq: u64| {
            [
                &seq.to_be_bytes()[..],
                &ts.to_be_bytes(),
                &1u32.to_be_bytes(),
            ]
            .concat()
        };
        run(format!(
            "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        ));
        run(format!(
            "CREATE TABLE {ks}.meta (part text, name text, v blob, PRIMARY KEY (part, name))"
        ));
        run(format!(
            "CREATE TABLE {ks}.lease (name text PRIMARY KEY, owner text)"
        ));
        meta("schema/version", &1u64.to_be_bytes(), 1);
        meta("batch/applied", &5u64.to_be_bytes(), ts);
        meta("batch/ts", &ts.to_be_bytes(), ts);
        meta("batch/pending", &marker(6), ts);
        meta("graph/pruned", &2u64.to_be_bytes(), ts);
        run(format!(
            "INSERT INTO {ks}.lease (name, owner) VALUES ('writer', 'old') USING TTL 600"
        ));
        let refused = |needle: &str| match CassandraStore::open(&options) {
            Err(StoreError::Cluster { what }) => assert!(what.contains(needle), "{what}"),
            Err(err) => panic!("opening version 1: {err}"),
            Ok(_) => panic!("opening version 1 should be refused ({needle})"),
        };
        refused("`old`, a replica of an older Starling, holds its writer lease");
        run(format!("DELETE FROM {ks}.lease WHERE name = 'writer'"));
        refused("holds batch 6, logged by an older Starling and not applied");
        meta("batch/pending", &marker(5), ts + 1);
        let store = CassandraStore::open(&options).unwrap();
        let row = store.block(lease::read_row(&store)).unwrap();
        assert_eq!((row.epoch, row.head.seq, row.head.ts), (0, 5, ts as i64));
        assert_eq!(store.pruned_upto.load(Ordering::Acquire), 2);
        apply(&store, &[post_event(&did(1), 1_000, POST_RKEY)]).unwrap();
        let row = store.block(lease::read_row(&store)).unwrap();
        assert_eq!((row.epoch, row.head.seq), (1, 6));
        assert!(row.head.ts > ts as i64);
        drop(store);
        let store = CassandraStore::open(&options).unwrap();
        assert_eq!(store.stats().unwrap().posts, 1);
        store.drop_keyspace(ks).unwrap();
    }

    // Checks the batch log: a batch that crashed after it was logged and before it was
    // applied is applied by the next open, so its deletes, counts and graph changes are not
    // lost, and nothing of it showed before. How: a post, two likes and a follow, committed;
    // then a batch deleting one like and the follow and adding a third like "crashes" after
    // logging; the counts still show the first batch; a reopen shows the second.
    // Checks that every statement's table gets the keyspace, and nothing else changes.
    #[test]
    fn statements_name_qualified_tables() {
        assert_eq!(
            qualify("SELECT k, n FROM pairs", "ks"),
            "SELECT k, n FROM ks.pairs"
        );
        assert_eq!(
            qualify("INSERT INTO actor_ids (did, id) VALUES (?, ?)", "ks"),
            "INSERT INTO ks.actor_ids (did, id) VALUES (?, ?)"
        );
        assert_eq!(
            qualify("UPDATE lease USING TTL ? SET owner = ?", "ks"),
            "UPDATE ks.lease USING TTL ? SET owner = ?"
        );
    }

    #[test]
    fn a_logged_batch_is_applied_by_the_next_open() {
        let Ok(nodes) = std::env::var("STARLING_TEST_CASSANDRA") else {
            eprintln!("skipping the batch log test on cassandra: STARLING_TEST_CASSANDRA is unset");
            return;
        };
        let mut options = CassandraOptions::new(nodes.split(',').map(str::to_owned).collect());
        options.keyspace = format!("starling_test_log_{}", std::process::id());
        let (a, b, c) = (
            "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
            "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb",
            "did:plc:cccccccccccccccccccccccc",
        );
        let post = format!("at://{a}/app.bsky.feed.post/3l3qo2vutsw2b");
        let like = format!(
            r#"{{"subject":{{"uri":"{post}","cid":"bafyreiaaaaaaaa"}},"createdAt":"2024-09-01T00:00:00.000Z"}}"#
        );
        let follow = format!(r#"{{"subject":"{a}","createdAt":"2024-09-01T00:00:00.000Z"}}"#);
        let rev1 = "3l3qo2vuaaa2b";
        let rev2 = "3l3qo2vubbb2b";
        let store = CassandraStore::open(&options).unwrap();
        let first = apply(
            &store,
            &[
                commit(
                    a,
                    1_000,
                    rev1,
                    "create",
                    "app.bsky.feed.post",
                    "3l3qo2vutsw2b",
                    r#"{"text":"hi","createdAt":"2024-09-01T00:00:00.000Z"}"#,
                ),
                commit(
                    b,
                    1_001,
                    rev1,
                    "create",
                    "app.bsky.feed.like",
                    "3l3qo2vuowo2b",
                    &like,
                ),
                commit(
                    c,
                    1_002,
                    rev1,
                    "create",
                    "app.bsky.feed.like",
                    "3l3qo2vuowo2b",
                    &like,
                ),
                commit(
                    b,
                    1_003,
                    rev1,
                    "create",
                    "app.bsky.graph.follow",
                    "3l3qo2vuppp2b",
                    &follow,
                ),
            ],
        )
        .unwrap();
        assert_eq!(first.graph.len(), 1);
        let uri = RecordUri::parse(&post).unwrap();
        assert_eq!(store.record_counts(&uri).unwrap().likes, 2);
        store.crash_after_log.store(true, Ordering::Release);
        let crashed = apply(
            &store,
            &[
                commit(
                    b,
                    1_004,
                    rev2,
                    "delete",
                    "app.bsky.feed.like",
                    "3l3qo2vuowo2b",
                    "",
                ),
                commit(
                    c,
                    1_005,
                    rev2,
                    "delete",
                    "app.bsky.feed.like",
                    "3l3qo2vuowo2b",
                    "",
                ),
                commit(
                    a,
                    1_006,
                    rev2,
                    "create",
                    "app.bsky.feed.like",
                    "3l3qo2vuqqq2b",
                    &like,
                ),
                commit(
                    b,
                    1_007,
                    rev2,
                    "delete",
                    "app.bsky.graph.follow",
                    "3l3qo2vuppp2b",
                    "",
                ),
            ],
        );
        assert!(crashed.is_err(), "the batch should have crashed");
        assert_eq!(
            store.record_counts(&uri).unwrap().likes,
            2,
            "applied before the crash"
        );
        drop(store);
        let store = CassandraStore::open(&options).unwrap();
        assert_eq!(
            store.record_counts(&uri).unwrap().likes,
            1,
            "after recovery"
        );
        assert!(
            store
                .record(b, "app.bsky.feed.like", "3l3qo2vuowo2b")
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .record(a, "app.bsky.feed.like", "3l3qo2vuqqq2b")
                .unwrap()
                .is_some()
        );
        let stats = store.stats().unwrap();
        assert_eq!((stats.likes, stats.follows, stats.posts), (1, 0, 1));
        let mut edges = Vec::new();
        store
            .for_each_edge(&mut |change| edges.push(change))
            .unwrap();
        assert!(edges.is_empty(), "the follow is gone: {edges:?}");
        let mut logged = Vec::new();
        store
            .graph_log_since(0, &mut |change| logged.push(change))
            .unwrap();
        assert_eq!(logged.len(), 2, "follow then unfollow: {logged:?}");
        // Applying the recovered batch again changes nothing.
        store.recover().unwrap();
        assert_eq!(store.stats().unwrap(), stats);
        store.drop_keyspace(&options.keyspace).unwrap();
    }
}
