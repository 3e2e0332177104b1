//! A batch on the Cassandra backend: the shared apply rules ([`Rules`]) with reads from the
//! cluster (prefetched concurrently where possible), and their write set turned into one
//! logged write of absolute values.

use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use futures_util::{StreamExt, TryStreamExt};
use rustc_hash::{FxHashMap, FxHashSet};
use starling_core::ActorId;
use starling_core::jetstream::{self, Body, DropReason, Event, Refs, nsid};

use super::layout::{self, Table, Write, meta_key};
use super::{CONCURRENCY_MAX, CassandraStore, GRAPH_LOG_BUCKET};
use crate::apply::{Pair, Records, Rules, StoredState, WriteSet};
use crate::catalog::Catalog;
use crate::codec::{edge_prefix, encode_file_progress, encode_graph_changes};
use crate::keys::{self, tag};
use crate::locks::{lock, read};
use crate::value::{self, StoredValue};
use crate::{Batch, Committed, Outcome, PrivateBackend, Progress, StoreError};

/// A batch of events being applied to the Cassandra store; see [`Batch`].
pub struct CassandraBatch<'s> {
    store: &'s CassandraStore,
    _writer: MutexGuard<'s, ()>,
    rules: Rules<'s>,
    reads: Reads<'s>,
}

/// The stored state the apply rules read: what [`CassandraBatch::prefetch`] read ahead, else
/// one request to the cluster.
struct Reads<'s> {
    store: &'s CassandraStore,
    /// Records read ahead of their events; `None` = absent.
    records: FxHashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Pair counts read ahead.
    pairs: FxHashMap<Pair, u32>,
}

impl StoredState for Reads<'_> {
    fn record(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.records.get(key) {
            Some(found) => Ok(found.clone()),
            None => self.store.block(self.store.record_value(key)),
        }
    }

    fn has_entry(&mut self, prefix: &[u8]) -> Result<bool, StoreError> {
        Ok(self.store.block(self.store.first_entry(prefix))?.is_some())
    }

    fn list_tails(&mut self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
        let bits = prefix.first().and_then(|&t| layout::bucket_bits(t));
        let mut tails = Vec::new();
        self.store.block(
            self.store
                .scan_list(prefix, bits, None, &mut |tail: &[u8]| {
                    tails.push(tail.to_vec());
                    Ok(true)
                }),
        )?;
        Ok(tails)
    }

    fn pair_count(&mut self, pair: Pair) -> Result<u32, StoreError> {
        if let Some(&count) = self.pairs.get(&pair) {
            return Ok(count);
        }
        let (pair_tag, actor, subject) = pair;
        let key = edge_prefix(pair_tag, actor, subject);
        Ok(self.store.block(self.store.pair_value(&key))?.unwrap_or(0))
    }

    fn actor_records(&mut self, actor: ActorId) -> Result<Records, StoreError> {
        self.store.records_of(actor)
    }

    fn counts(&mut self, keys: &[Vec<u8>]) -> Result<Vec<u64>, StoreError> {
        let store = self.store;
        store.block(
            futures_util::stream::iter(keys)
                .map(|key| store.count_value(key))
                .buffered(CONCURRENCY_MAX)
                .try_collect(),
        )
    }

    fn imported(&mut self, pairs: &[(ActorId, ActorId)]) -> Result<Vec<bool>, StoreError> {
        let store = self.store;
        store.block(
            futures_util::stream::iter(pairs)
                .map(|&(actor, subject)| async move {
                    let key = edge_prefix(tag::IMPORTED_FOLLOW, actor, subject);
                    Ok::<_, StoreError>(store.pair_value(&key).await?.is_some())
                })
                .buffered(CONCURRENCY_MAX)
                .try_collect(),
        )
    }

    fn private(&self) -> &dyn PrivateBackend {
        self.store
    }
}

impl<'s> CassandraBatch<'s> {
    pub(super) fn new(store: &'s CassandraStore) -> CassandraBatch<'s> {
        let writer = lock(&store.writer);
        let counters = lock(&store.counters).clone();
        let catalog = Catalog {
            actors: &store.actors,
            collections: &store.collections,
        };
        CassandraBatch {
            store,
            _writer: writer,
            rules: Rules::new(catalog, counters),
            reads: Reads {
                store,
                records: FxHashMap::default(),
                pairs: FxHashMap::default(),
            },
        }
    }

    /// Interns DIDs, writing their actor rows with the batch.
    pub(super) fn intern_actors(&mut self, dids: &[&str]) -> Vec<ActorId> {
        self.rules.intern_actors(dids)
    }

    /// Reads ahead, concurrently, what applying `events` will read: the stored records they
    /// replace, then the live-record counts of the follow and block pairs they touch (whose
    /// subjects come from the event or, for a delete, from the stored record). Applying them
    /// then costs no round trip each. Actors or collections not interned yet name nothing
    /// stored.
    pub fn prefetch(&mut self, events: &[Event<'_>]) -> Result<(), StoreError> {
        let (wanted, edges) = self.records_wanted(events);
        let store = self.store;
        let found = store.block(
            futures_util::stream::iter(wanted)
                .map(|key| async move {
                    let value = store.record_value(&key).await?;
                    Ok::<_, StoreError>((key, value))
                })
                .buffer_unordered(CONCURRENCY_MAX)
                .try_collect::<Vec<_>>(),
        )?;
        self.reads.records.extend(found);
        let pairs = self.pairs_wanted(&edges)?;
        let found = store.block(
            futures_util::stream::iter(pairs)
                .map(|(pair_tag, actor, subject)| async move {
                    let n = store
                        .pair_value(&edge_prefix(pair_tag, actor, subject))
                        .await?
                        .unwrap_or(0);
                    Ok::<_, StoreError>(((pair_tag, actor, subject), n))
                })
                .buffer_unordered(CONCURRENCY_MAX)
                .try_collect::<Vec<_>>(),
        )?;
        self.reads.pairs.extend(found);
        Ok(())
    }

    /// The record keys `events` read that neither this batch nor an earlier prefetch holds,
    /// and per follow or block event its pair tag, actor, record key and named subject.
    fn records_wanted(&self, events: &[Event<'_>]) -> (Vec<Vec<u8>>, Vec<Edge>) {
        let mut wanted = Vec::new();
        let mut edges = Vec::new();
        let catalog = self.rules.catalog();
        let actors = read(catalog.actors);
        let collections = read(catalog.collections);
        for event in events {
            let Body::Commit(commit) = &event.body else {
                continue;
            };
            let (Some(actor), Some(&collection)) = (
                actors.get(&event.did),
                collections.by_name.get(&*commit.collection),
            ) else {
                continue;
            };
            let key = keys::record_key(actor, collection, &commit.rkey);
            if let Some(pair_tag) = pair_tag(&commit.collection) {
                let subject = match commit.record.as_ref().map(|record| &record.refs) {
                    Some(Refs::Actor { subject }) => Some(subject.to_string()),
                    _ => None,
                };
                edges.push((pair_tag, actor, key.clone(), subject));
            }
            if self.rules.written(&key).is_none() && !self.reads.records.contains_key(&key) {
                wanted.push(key);
            }
            // A reply reads its parent to find the ancestors it notifies.
            if let Some(Refs::Post {
                reply: Some(reply), ..
            }) = commit.record.as_ref().map(|record| &record.refs)
                && let (Some(parent_actor), Some(&parent_collection)) = (
                    actors.get(reply.parent.did),
                    collections.by_name.get(reply.parent.collection),
                )
            {
                let parent = keys::record_key(parent_actor, parent_collection, reply.parent.rkey);
                if self.rules.written(&parent).is_none()
                    && !self.reads.records.contains_key(&parent)
                {
                    wanted.push(parent);
                }
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        wanted.dedup();
        (wanted, edges)
    }

    /// The pairs `edges` touch whose counts are not held yet.
    fn pairs_wanted(&self, edges: &[Edge]) -> Result<Vec<Pair>, StoreError> {
        let mut pairs = Vec::new();
        let actors = read(self.rules.catalog().actors);
        for (pair_tag, actor, key, subject) in edges {
            let mut subjects: Vec<String> = subject.iter().cloned().collect();
            let stored = self.rules.written(key).or_else(|| {
                self.reads
                    .records
                    .get(key)
                    .and_then(Option::as_ref)
                    .map(Vec::as_slice)
            });
            if let Some(bytes) = stored
                && let StoredValue::Live(old) = value::decode(bytes)?
            {
                let collection = if *pair_tag == tag::FOLLOW_PAIR {
                    nsid::FOLLOW
                } else {
                    nsid::BLOCK
                };
                if let Ok((_, Refs::Actor { subject })) =
                    jetstream::record_fields(collection, old.json)
                {
                    subjects.push(subject.to_string());
                }
            }
            for subject in subjects {
                if let Some(subject) = actors.get(&subject) {
                    let pair = (*pair_tag, *actor, subject);
                    if !self.rules.has_pair(&pair) && !self.reads.pairs.contains_key(&pair) {
                        pairs.push(pair);
                    }
                }
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
        Ok(pairs)
    }

    /// Works out the batch's writes and writes them; returns what it changed.
    fn commit_writes(self) -> Result<Committed, StoreError> {
        let CassandraBatch {
            store,
            _writer,
            rules,
            mut reads,
        } = self;
        let set = rules.finish(&mut reads)?;
        store.persist(set)
    }
}

/// A follow or block event: its pair tag, actor, record key and the subject it names, if any.
type Edge = (u8, ActorId, Vec<u8>, Option<String>);

fn pair_tag(collection: &str) -> Option<u8> {
    match collection {
        nsid::FOLLOW => Some(tag::FOLLOW_PAIR),
        nsid::BLOCK => Some(tag::BLOCK_PAIR),
        _ => None,
    }
}

impl CassandraStore {
    /// Writes a batch's write set as one logged batch of absolute values.
    fn persist(&self, set: WriteSet) -> Result<Committed, StoreError> {
        let graph_seq = self.graph_seq.load(Ordering::Acquire) + 1;
        let mut writes = Vec::new();
        // The change log: graph and feed changes and the cursor of each batch that has any,
        // for the replicas that do not write to keep their graph and timelines current.
        let feed_keys: Vec<(bool, Vec<u8>)> = set
            .feed_keys()
            .map(|(insert, key)| (insert, key.to_vec()))
            .collect();
        let logged = !set.committed.graph.is_empty() || !feed_keys.is_empty();
        if logged {
            let cursor = set.committed.cursor.map_or(0, |cursor| cursor.0);
            let entry = layout::encode_log_entry(
                &encode_graph_changes(&set.committed.graph),
                cursor,
                &feed_keys,
            );
            writes.push(write(Table::GraphLog, graph_seq.to_be_bytes(), Some(entry)));
            let seq = graph_seq.to_be_bytes().to_vec();
            writes.push(write(Table::Meta, meta_key("graph", "seq"), Some(seq)));
        }
        push_catalog_writes(&mut writes, &set);
        push_data_writes(&mut writes, &set);
        let writes = last_write_per_key(writes);
        self.block(self.write_batch(&writes))?;
        *lock(&self.counters) = set.counters;
        if logged {
            self.graph_seq.fetch_max(graph_seq, Ordering::AcqRel);
        }
        debug_assert!(graph_seq / GRAPH_LOG_BUCKET < i64::MAX as u64);
        Ok(set.committed)
    }
}

fn write(table: Table, key: impl Into<Vec<u8>>, value: Option<Vec<u8>>) -> Write {
    Write {
        table,
        key: key.into(),
        value,
    }
}

/// Actor rows (and the DID-to-id and handle tables), collections, counters and progress.
fn push_catalog_writes(writes: &mut Vec<Write>, set: &WriteSet) {
    for row in &set.actors {
        let id = row.id.0.to_be_bytes().to_vec();
        writes.push(write(Table::Actor, id.clone(), Some(row.row.clone())));
        writes.push(write(Table::ActorId, row.did.as_bytes(), Some(id)));
    }
    for (handle, owner) in &set.handles {
        let owner = owner.map(|id| id.0.to_be_bytes().to_vec());
        writes.push(write(Table::Handle, handle.as_bytes(), owner));
    }
    for (id, name) in &set.collections {
        let key = meta_key("collection", &format!("{:010}", id.0));
        writes.push(write(Table::Meta, key, Some(name.as_bytes().to_vec())));
    }
    let counters = &set.counters;
    let mut named = vec![("actors".to_owned(), counters.actors)];
    for (id, n) in &counters.records {
        named.push((format!("records/{}", id.0), *n));
    }
    for (reason, n) in &counters.dropped {
        named.push((format!("dropped/{reason}"), *n));
    }
    for (name, n) in named {
        let value = Some(n.to_be_bytes().to_vec());
        writes.push(write(Table::Meta, meta_key("count", &name), value));
    }
    for progress in &set.sources {
        if let Progress::File {
            source,
            offset,
            cursor,
        } = progress
        {
            let value = encode_file_progress(*offset, *cursor);
            writes.push(write(
                Table::Meta,
                meta_key("progress", source),
                Some(value),
            ));
        }
    }
    let cursor = match &set.progress {
        Some(Progress::Live(cursor)) => Some(*cursor),
        Some(Progress::File {
            source,
            offset,
            cursor,
        }) => {
            let value = encode_file_progress(*offset, *cursor);
            writes.push(write(
                Table::Meta,
                meta_key("progress", source),
                Some(value),
            ));
            *cursor
        }
        None => None,
    };
    if let Some(cursor) = cursor {
        let value = Some(cursor.0.to_be_bytes().to_vec());
        writes.push(write(Table::Meta, meta_key("cursor", ""), value));
    }
}

/// Records, index entries, pair counts and counts.
fn push_data_writes(writes: &mut Vec<Write>, set: &WriteSet) {
    for (key, value) in &set.records {
        writes.push(write(Table::Record, key.as_slice(), Some(value.clone())));
    }
    for (key, insert) in &set.entries {
        writes.push(write(Table::Entry, key.as_slice(), insert.then(Vec::new)));
    }
    for &((pair_tag, actor, subject), n) in &set.pairs {
        let value = (n > 0).then(|| n.to_be_bytes().to_vec());
        writes.push(write(
            Table::Pair,
            edge_prefix(pair_tag, actor, subject),
            value,
        ));
    }
    for (key, n) in &set.counts {
        let value = (*n > 0).then(|| n.to_be_bytes().to_vec());
        writes.push(write(Table::Count, key.as_slice(), value));
    }
}

/// The last write of each key wins, as it would in order: keep only it, so that the
/// concurrent, unordered application of the batch's writes is deterministic.
fn last_write_per_key(mut writes: Vec<Write>) -> Vec<Write> {
    let mut last: FxHashMap<(Table, &[u8]), usize> = FxHashMap::default();
    for (at, write) in writes.iter().enumerate() {
        last.insert((write.table, &write.key), at);
    }
    let keep: FxHashSet<usize> = last.into_values().collect();
    let mut at = 0;
    writes.retain(|_| {
        let kept = keep.contains(&at);
        at += 1;
        kept
    });
    writes
}

/// The steps of the list-index build (`upgrade.rs`).
impl CassandraBatch<'_> {
    /// Adds the list entries of one stored record; returns the join counts it moves, which
    /// the build keeps out of the batch.
    pub(super) fn index_stored_lists(
        &mut self,
        key: &[u8],
        bytes: &[u8],
    ) -> Result<Vec<(Vec<u8>, i64)>, StoreError> {
        self.rules.index_stored_lists(key, bytes)?;
        Ok(self.rules.take_join_deltas())
    }

    /// Index entries decided so far.
    pub(super) fn n_entries(&self) -> usize {
        self.rules.n_entries()
    }

    /// Stores `counts` as they are.
    pub(super) fn set_recounted(&mut self, counts: Vec<(Vec<u8>, u64)>) {
        self.rules.set_recounted(counts);
    }
}

impl Batch for CassandraBatch<'_> {
    const PREFETCH: bool = true;

    fn apply(&mut self, event: &Event<'_>) -> Result<Outcome, StoreError> {
        self.rules.apply(&mut self.reads, event)
    }

    fn prefetch(&mut self, events: &[Event<'_>]) -> Result<(), StoreError> {
        CassandraBatch::prefetch(self, events)
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
        self.commit_writes()
    }
}
