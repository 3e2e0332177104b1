//! A batch on the Cassandra backend: the embedded store's apply rules, with reads from the
//! cluster (prefetched concurrently where possible) and writes collected for one logged write.

use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use futures_util::{StreamExt, TryStreamExt};
use rustc_hash::{FxHashMap, FxHashSet};
use starling_core::feed::{FeedChange, FeedItem, FeedKey, PostRef, flag, rkey_code};
use starling_core::jetstream::{
    self, AccountStatus, Body, Commit, DropReason, Event, Media, Operation, Refs, nsid,
};
use starling_core::syntax::RecordUri;
use starling_core::{ActorId, Cursor};

use super::layout::{self, Table, Write, meta_key};
use super::{CONCURRENCY_MAX, CassandraStore, Counters, Ctx, GRAPH_LOG_BUCKET};
use crate::actors::ActorState;
use crate::embedded::{
    by_actor_key, edge_prefix, encode_actor_row, encode_graph_changes, feed_change, lock, read,
    write,
};
use crate::keys::{self, CollectionId, count, tag};
use crate::value::{self, LiveRecord, StoredValue};
use crate::{Batch, Committed, GraphChange, Outcome, Progress, StoreError};

/// What the index entries of one record are derived from.
struct IndexedRecord<'a> {
    actor: ActorId,
    collection: &'a str,
    rkey: &'a str,
    sort_at_us: i64,
    refs: &'a Refs<'a>,
}

/// A batch of events being applied to the Cassandra store; see [`Batch`].
pub struct CassandraBatch<'s> {
    store: &'s CassandraStore,
    _writer: MutexGuard<'s, ()>,
    /// Writes in the order they were decided; the last write of a key wins.
    writes: Vec<Write>,
    /// Records written by this batch, so later events of the batch read them.
    overlay: FxHashMap<Vec<u8>, Vec<u8>>,
    /// Records read ahead of their events ([`CassandraBatch::prefetch`]); `None` = absent.
    prefetched: FxHashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Pair counts read ahead.
    prefetched_pairs: FxHashMap<(u8, ActorId, ActorId), u32>,
    counters: Counters,
    dirty_actors: FxHashSet<ActorId>,
    dirty_collections: Vec<CollectionId>,
    pair_counts: FxHashMap<(u8, ActorId, ActorId), (u32, u32)>,
    feed_changes: Vec<FeedChange>,
    /// The author feed keys of `feed_changes` (which hold the text of non-TID record keys),
    /// for the change log.
    feed_keys: Vec<(bool, Vec<u8>)>,
    count_deltas: FxHashMap<Vec<u8>, i64>,
    identities: Vec<ActorId>,
    latest_revs: FxHashMap<ActorId, u64>,
    /// Handles whose owner changed: handle -> new owner or none.
    handles: FxHashMap<String, Option<ActorId>>,
    progress: Option<Progress>,
    n_events: usize,
}

impl<'s> CassandraBatch<'s> {
    pub(super) fn new(store: &'s CassandraStore) -> CassandraBatch<'s> {
        let writer = lock(&store.writer);
        let counters = lock(&store.counters).clone();
        CassandraBatch {
            store,
            _writer: writer,
            writes: Vec::new(),
            overlay: FxHashMap::default(),
            prefetched: FxHashMap::default(),
            prefetched_pairs: FxHashMap::default(),
            counters,
            dirty_actors: FxHashSet::default(),
            dirty_collections: Vec::new(),
            pair_counts: FxHashMap::default(),
            feed_changes: Vec::new(),
            feed_keys: Vec::new(),
            count_deltas: FxHashMap::default(),
            identities: Vec::new(),
            latest_revs: FxHashMap::default(),
            handles: FxHashMap::default(),
            progress: None,
            n_events: 0,
        }
    }

    pub(super) fn push_write(&mut self, table: Table, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.writes.push(Write { table, key, value });
    }

    pub(super) fn intern_actor(&mut self, did: &str) -> ActorId {
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

    /// Reads ahead, concurrently, what applying `events` will read: the stored records they
    /// replace, then the live-record counts of the follow and block pairs they touch (whose
    /// subjects come from the event or, for a delete, from the stored record). Applying them
    /// then costs no round trip each. Actors or collections not interned yet name nothing
    /// stored.
    pub fn prefetch(&mut self, events: &[Event<'_>]) -> Result<(), StoreError> {
        let mut wanted = Vec::new();
        // Per follow or block event: its record key, and the subject when the event names it.
        let mut edges: Vec<(u8, ActorId, Vec<u8>, Option<String>)> = Vec::new();
        {
            let actors = read(&self.store.actors);
            let collections = read(&self.store.collections);
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
                let pair_tag = match &*commit.collection {
                    nsid::FOLLOW => Some(tag::FOLLOW_PAIR),
                    nsid::BLOCK => Some(tag::BLOCK_PAIR),
                    _ => None,
                };
                if let Some(pair_tag) = pair_tag {
                    let subject = match commit.record.as_ref().map(|record| &record.refs) {
                        Some(Refs::Actor { subject }) => Some(subject.to_string()),
                        _ => None,
                    };
                    edges.push((pair_tag, actor, key.clone(), subject));
                }
                if !self.overlay.contains_key(&key) && !self.prefetched.contains_key(&key) {
                    wanted.push(key);
                }
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
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
        self.prefetched.extend(found);
        let mut pairs = Vec::new();
        {
            let actors = read(&self.store.actors);
            for (pair_tag, actor, key, subject) in &edges {
                let mut subjects: Vec<String> = subject.iter().cloned().collect();
                let stored = self
                    .overlay
                    .get(key)
                    .or_else(|| self.prefetched.get(key).and_then(Option::as_ref));
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
                        if !self.pair_counts.contains_key(&pair)
                            && !self.prefetched_pairs.contains_key(&pair)
                        {
                            pairs.push(pair);
                        }
                    }
                }
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
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
        self.prefetched_pairs.extend(found);
        Ok(())
    }

    fn read_record(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(bytes) = self.overlay.get(key) {
            return Ok(Some(bytes.clone()));
        }
        if let Some(found) = self.prefetched.get(key) {
            return Ok(found.clone());
        }
        self.store.block(self.store.record_value(key))
    }

    fn write_record(&mut self, key: Vec<u8>, bytes: Vec<u8>) {
        self.writes.push(Write {
            table: Table::Record,
            key: key.clone(),
            value: Some(bytes.clone()),
        });
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

    /// Adds (`insert`) or removes the index entries of one record: the same entries as the
    /// embedded store's `index_record`.
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
                    let key = keys::author_feed_key(&item, record.rkey, subject.rkey);
                    self.feed_keys.push((insert, key.clone()));
                    keys.push(key);
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
                let key = keys::author_feed_key(&item, record.rkey, record.rkey);
                self.feed_keys.push((insert, key.clone()));
                keys.push(key);
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
        for key in keys {
            self.writes.push(Write {
                table: Table::Entry,
                key,
                value: insert.then(Vec::new),
            });
        }
        Ok(())
    }

    fn count(&mut self, ref_key: &[u8], kind: u8, insert: bool) {
        let mut key = Vec::with_capacity(ref_key.len() + 1);
        key.push(tag::RECORD_COUNT);
        key.extend_from_slice(ref_key.get(1..).unwrap_or_default());
        key.push(kind);
        *self.count_deltas.entry(key).or_default() += if insert { 1 } else { -1 };
    }

    fn count_actor(&mut self, actor: ActorId, kind: u8, insert: bool) {
        let key = keys::actor_count_key(actor, kind).to_vec();
        *self.count_deltas.entry(key).or_default() += if insert { 1 } else { -1 };
    }

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
                let stored = match self.prefetched_pairs.get(&key) {
                    Some(&n) => Some(n),
                    None => self.store.block(
                        self.store
                            .pair_value(&edge_prefix(pair_tag, actor, subject)),
                    )?,
                }
                .unwrap_or(0);
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
        let old = state.handle.as_deref().map(str::to_ascii_lowercase);
        let new = handle.filter(|h| *h != "handle.invalid");
        actors.set_handle(actor, new);
        // The handle table follows the in-memory one: an old handle another actor still claims
        // points at that actor, else it goes.
        if let Some(old) = old {
            let owner = actors.by_handle(&old);
            self.handles.insert(old, owner);
        }
        if let Some(new) = new {
            self.handles.insert(new.to_ascii_lowercase(), Some(actor));
        }
        drop(actors);
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
        let store = self.store;
        let shards: Vec<Vec<u8>> = (0..layout::RECORD_SHARDS)
            .map(|shard| [&actor.0.to_be_bytes()[..], &[shard]].concat())
            .collect();
        let stored = store.block(
            futures_util::stream::iter(shards)
                .map(|p| async move {
                    let mut rows = store
                        .session
                        .execute_iter(store.st.scan_records.clone(), (p,))
                        .await
                        .ctx("reading an account's records")?
                        .rows_stream::<(Vec<u8>, Vec<u8>)>()
                        .ctx("reading an account's records")?;
                    let mut found = Vec::new();
                    while let Some((k, v)) =
                        rows.try_next().await.ctx("reading an account's records")?
                    {
                        found.push(([&actor.0.to_be_bytes()[..], &k].concat(), v));
                    }
                    Ok::<_, StoreError>(found)
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>(),
        )?;
        // What this batch wrote is newer than what is stored.
        let prefix = keys::actor_records_prefix(actor);
        let mut records: FxHashMap<Vec<u8>, Vec<u8>> = stored.into_iter().flatten().collect();
        for (key, bytes) in &self.overlay {
            if key.starts_with(&prefix) {
                records.insert(key.clone(), bytes.clone());
            }
        }
        let mut records: Vec<_> = records.into_iter().collect();
        records.sort_unstable();
        for (key, bytes) in records {
            let StoredValue::Live(old) = value::decode(&bytes)? else {
                continue;
            };
            let Some((_, collection, rkey)) = keys::parse_record_key(&key) else {
                return Err(StoreError::corrupt("record key", &[]));
            };
            let name = read(&store.collections)
                .name(collection)
                .map(str::to_owned)
                .ok_or_else(|| StoreError::corrupt(format!("collection {collection:?}"), &[]))?;
            self.unindex(actor, &name, collection, rkey, &old)?;
            self.write_record(key.clone(), value::encode_tombstone(old.rev));
        }
        Ok(())
    }

    /// Turns the batch's state into writes and writes them; returns the graph changes.
    pub(super) fn commit_writes(&mut self) -> Result<Vec<GraphChange>, StoreError> {
        let store = self.store;
        // Pairs that crossed zero; an imported follow keeps its edge when its records go.
        let crossed: Vec<((u8, ActorId, ActorId), bool)> = self
            .pair_counts
            .iter()
            .filter(|(_, (before, after))| (*before > 0) != (*after > 0))
            .map(|(&key, &(_, after))| (key, after > 0))
            .collect();
        let imported: FxHashSet<(ActorId, ActorId)> = store
            .block(
                futures_util::stream::iter(
                    crossed
                        .iter()
                        .filter(|((pair_tag, ..), _)| *pair_tag == tag::FOLLOW_PAIR),
                )
                .map(|&((_, actor, subject), _)| async move {
                    let key = edge_prefix(tag::IMPORTED_FOLLOW, actor, subject);
                    Ok::<_, StoreError>(
                        store
                            .pair_value(&key)
                            .await?
                            .is_some()
                            .then_some((actor, subject)),
                    )
                })
                .buffer_unordered(CONCURRENCY_MAX)
                .try_collect::<Vec<_>>(),
            )?
            .into_iter()
            .flatten()
            .collect();
        let mut changes = Vec::new();
        for ((pair_tag, actor, subject), live) in crossed {
            let follow = pair_tag == tag::FOLLOW_PAIR;
            if follow && imported.contains(&(actor, subject)) {
                continue;
            }
            changes.push(match (follow, live) {
                (true, true) => GraphChange::Follow(actor, subject),
                (true, false) => GraphChange::Unfollow(actor, subject),
                (false, true) => GraphChange::Block(actor, subject),
                (false, false) => GraphChange::Unblock(actor, subject),
            });
        }
        changes.sort_unstable();
        let graph_seq = store.graph_seq.load(Ordering::Acquire) + 1;
        // The change log: graph and feed changes and the cursor of each batch that has any,
        // for the replicas that do not write to keep their graph and timelines current.
        let logged = !changes.is_empty() || !self.feed_keys.is_empty();
        if logged {
            let cursor = match &self.progress {
                Some(Progress::Live(cursor)) => Some(*cursor),
                Some(Progress::File { cursor, .. }) => *cursor,
                None => None,
            };
            self.push_write(
                Table::GraphLog,
                graph_seq.to_be_bytes().to_vec(),
                Some(layout::encode_log_entry(
                    &encode_graph_changes(&changes),
                    cursor.map_or(0, |c| c.0),
                    &self.feed_keys,
                )),
            );
            self.push_write(
                Table::Meta,
                meta_key("graph", "seq"),
                Some(graph_seq.to_be_bytes().to_vec()),
            );
        }
        {
            let actors = read(&store.actors);
            for &id in &self.dirty_actors {
                let (Some(did), Some(state)) = (actors.did(id), actors.state(id)) else {
                    continue;
                };
                self.writes.push(Write {
                    table: Table::Actor,
                    key: id.0.to_be_bytes().to_vec(),
                    value: Some(encode_actor_row(did, state)),
                });
                self.writes.push(Write {
                    table: Table::ActorId,
                    key: did.as_bytes().to_vec(),
                    value: Some(id.0.to_be_bytes().to_vec()),
                });
            }
        }
        for (handle, owner) in self.handles.drain() {
            self.writes.push(Write {
                table: Table::Handle,
                key: handle.into_bytes(),
                value: owner.map(|id| id.0.to_be_bytes().to_vec()),
            });
        }
        {
            let collections = read(&store.collections);
            for &id in &self.dirty_collections {
                let Some(name) = collections.name(id) else {
                    continue;
                };
                self.writes.push(Write {
                    table: Table::Meta,
                    key: meta_key("collection", &format!("{:010}", id.0)),
                    value: Some(name.as_bytes().to_vec()),
                });
            }
        }
        let mut counters = vec![(
            "actors".to_owned(),
            self.counters.actors.to_be_bytes().to_vec(),
        )];
        for (id, n) in &self.counters.records {
            counters.push((format!("records/{}", id.0), n.to_be_bytes().to_vec()));
        }
        for (reason, n) in &self.counters.dropped {
            counters.push((format!("dropped/{reason}"), n.to_be_bytes().to_vec()));
        }
        for (name, value) in counters {
            self.push_write(Table::Meta, meta_key("count", &name), Some(value));
        }
        for (&(pair_tag, actor, subject), &(_, n)) in &self.pair_counts {
            self.writes.push(Write {
                table: Table::Pair,
                key: edge_prefix(pair_tag, actor, subject).to_vec(),
                value: (n > 0).then(|| n.to_be_bytes().to_vec()),
            });
        }
        if let Some(progress) = self.progress.take() {
            let cursor = match &progress {
                Progress::Live(cursor) => Some(*cursor),
                Progress::File {
                    source,
                    offset,
                    cursor,
                } => {
                    let value = [
                        offset.to_be_bytes(),
                        cursor.unwrap_or_default().0.to_be_bytes(),
                    ]
                    .concat();
                    self.push_write(Table::Meta, meta_key("progress", source), Some(value));
                    *cursor
                }
            };
            if let Some(Cursor(cursor)) = cursor {
                self.push_write(
                    Table::Meta,
                    meta_key("cursor", ""),
                    Some(cursor.to_be_bytes().to_vec()),
                );
            }
        }
        // Counts and latest revisions: the stored values, read concurrently, plus this batch's
        // changes, written as absolute values.
        let deltas: Vec<(Vec<u8>, i64)> = self.count_deltas.drain().collect();
        let revs: Vec<(ActorId, u64)> = self.latest_revs.drain().collect();
        let (bases, rev_bases) = store.block(async {
            let bases = futures_util::stream::iter(&deltas)
                .map(|(key, _)| store.count_value(key))
                .buffered(CONCURRENCY_MAX)
                .try_collect::<Vec<u64>>()
                .await?;
            let rev_bases =
                futures_util::stream::iter(&revs)
                    .map(|(actor, _)| async move {
                        store.count_value(&keys::latest_rev_key(*actor)).await
                    })
                    .buffered(CONCURRENCY_MAX)
                    .try_collect::<Vec<u64>>()
                    .await?;
            Ok::<_, StoreError>((bases, rev_bases))
        })?;
        for ((key, delta), base) in deltas.into_iter().zip(bases) {
            let n = base.saturating_add_signed(delta);
            self.writes.push(Write {
                table: Table::Count,
                key,
                value: (n > 0).then(|| n.to_be_bytes().to_vec()),
            });
        }
        for ((actor, rev), base) in revs.into_iter().zip(rev_bases) {
            if rev > base {
                self.push_write(
                    Table::Count,
                    keys::latest_rev_key(actor).to_vec(),
                    Some(rev.to_be_bytes().to_vec()),
                );
            }
        }
        // The last write of each key wins, as it would in order: keep only it, so that the
        // concurrent, unordered application of the batch's writes is deterministic.
        let mut writes = std::mem::take(&mut self.writes);
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
        store.block(store.write_batch(&writes))?;
        *lock(&store.counters) = self.counters.clone();
        if logged {
            store.graph_seq.fetch_max(graph_seq, Ordering::AcqRel);
        }
        self.feed_keys.clear();
        debug_assert!(graph_seq / GRAPH_LOG_BUCKET < i64::MAX as u64);
        self.dirty_actors.clear();
        self.dirty_collections.clear();
        Ok(changes)
    }
}

impl Batch for CassandraBatch<'_> {
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

    const PREFETCH: bool = true;

    fn prefetch(&mut self, events: &[Event<'_>]) -> Result<(), StoreError> {
        CassandraBatch::prefetch(self, events)
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
        let cursor = match &self.progress {
            Some(Progress::Live(cursor)) => Some(*cursor),
            Some(Progress::File { cursor, .. }) => *cursor,
            None => None,
        };
        let graph = self.commit_writes()?;
        Ok(Committed {
            graph,
            feed: std::mem::take(&mut self.feed_changes),
            cursor,
            identities: std::mem::take(&mut self.identities),
        })
    }
}
