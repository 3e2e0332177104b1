//! The apply rules, written once for both backends.
//!
//! A batch works out here what its events change: from each event, the state it reads through
//! [`StoredState`] (stored records, pair counts, and at the end counts and imported follows) and
//! the in-memory actor and collection tables, to a [`WriteSet`]: the newest value of every record
//! it touched, the index entries it adds and removes, counts and pair counts as absolute values,
//! actor rows, new collections, counters, progress, and the graph and feed changes. A backend
//! answers only how to read stored state and how to make a write set durable and atomic.
//!
//! The rules:
//! - A record changes only when a commit carries a higher repository revision than the stored
//!   one; a delete leaves a tombstone at its revision. Replays, duplicates and a create arriving
//!   after its delete change nothing.
//! - A record's index entries and counts move when its state changes, and only then, so a
//!   count is exact under replays without a per-increment key.
//! - A post that leaves the index (deleted, replaced, or gone with its account) takes its
//!   reposts out of the author feeds and timelines; the reposts stay counted.
//! - Follow and block pairs keep a count of their live records; a batch reports a pair's final
//!   state (a graph change) only when the count crosses zero, unless an imported follow keeps
//!   the edge.
//! - An `account` event with status `deleted` removes the actor's records (leaving tombstones)
//!   and makes later commits of that actor no-ops until an `active` account event; account and
//!   identity events are ordered by the relay's `seq`.
//! - Counts never go below zero: a removal that would take one there means the stored counts
//!   disagree with the stored records, and the batch fails with [`StoreError::Corrupt`] naming
//!   the key instead of clamping it away.

use rustc_hash::{FxHashMap, FxHashSet};
use starling_core::ActorId;
use starling_core::feed::{FeedChange, FeedItem, FeedKey, PostRef, flag, rkey_code};
use starling_core::jetstream::{
    self, AccountStatus, Body, Commit, DropReason, Event, Media, Operation, Refs, nsid,
};
use starling_core::syntax::RecordUri;

use crate::catalog::{Catalog, Counters};
use crate::codec::{by_actor_key, edge_prefix, encode_actor_row, feed_change};
use crate::keys::{self, CollectionId, count, tag};
use crate::locks::{read, write};

mod ancestors;
mod gates;
mod lists;
mod notifications;
mod reposts;
mod subscribers;
mod thread_mutes;
use crate::value::{self, LiveRecord, StoredValue};
use crate::{Committed, GraphChange, Outcome, PrivateBackend, Progress, StoreError};
pub(crate) use lists::ACTOR_LISTED;

/// A follow or block pair: the pair-count tag ([`tag::FOLLOW_PAIR`] or [`tag::BLOCK_PAIR`]),
/// the actor and the subject.
pub(crate) type Pair = (u8, ActorId, ActorId);

/// Record keys and their values.
pub(crate) type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// What the apply rules read of the stored state: everything committed by earlier batches
/// (including one whose write is still under way), never this batch's own writes.
pub(crate) trait StoredState {
    /// The stored value (live record or tombstone) of a record key.
    fn record(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// The stored live-record count of a follow or block pair (0 when absent).
    fn pair_count(&mut self, pair: Pair) -> Result<u32, StoreError>;

    /// Every stored record of `actor`: key and value.
    fn actor_records(&mut self, actor: ActorId) -> Result<Records, StoreError>;

    /// The stored values of counts (0 when absent), in the order of `keys`.
    fn counts(&mut self, keys: &[Vec<u8>]) -> Result<Vec<u64>, StoreError>;

    /// Whether each (actor, subject) pair of `pairs` is an imported follow, in order.
    fn imported(&mut self, pairs: &[(ActorId, ActorId)]) -> Result<Vec<bool>, StoreError>;

    /// The private state (bsync's), which decides some notifications: activity subscribers
    /// and thread mutes.
    fn private(&self) -> &dyn PrivateBackend;

    /// Whether an index entry starts with `prefix`, an entry's whole partition on the
    /// Cassandra backend (a list item of one list and subject).
    fn has_entry(&mut self, prefix: &[u8]) -> Result<bool, StoreError>;

    /// Every stored index entry under the list prefix `prefix` (a subject's entries, the
    /// partition on the Cassandra backend), each without the prefix, in any order.
    fn list_tails(&mut self, prefix: &[u8]) -> Result<Vec<Vec<u8>>, StoreError>;
}

/// An actor row to store: the id, its DID, and the encoded row.
pub(crate) struct ActorRow {
    pub(crate) id: ActorId,
    pub(crate) did: String,
    pub(crate) row: Vec<u8>,
}

/// Everything one batch writes, decided; the backend makes it durable in one atomic step.
pub(crate) struct WriteSet {
    /// The newest value of each record key the batch wrote.
    pub(crate) records: FxHashMap<Vec<u8>, Vec<u8>>,
    /// Index entries added (`true`) and removed, in the order decided: of two for one key, the
    /// later wins.
    pub(crate) entries: Vec<(Vec<u8>, bool)>,
    /// Counts and latest revisions, absolute; 0 removes the key.
    pub(crate) counts: Vec<(Vec<u8>, u64)>,
    /// Live-record counts of the pairs touched, absolute; 0 removes the pair.
    pub(crate) pairs: Vec<(Pair, u32)>,
    /// Actor rows that changed.
    pub(crate) actors: Vec<ActorRow>,
    /// Handles whose owner changed: the lowercased handle and its owner now, if any.
    pub(crate) handles: Vec<(String, Option<ActorId>)>,
    /// Collections interned by this batch.
    pub(crate) collections: Vec<(CollectionId, String)>,
    /// The store-wide counters after the batch.
    pub(crate) counters: Counters,
    /// Where the batch leaves its source.
    pub(crate) progress: Option<Progress>,
    /// The progress of more sources, each a `Progress::File` (the repositories a backfill
    /// batch completes).
    pub(crate) sources: Vec<Progress>,
    /// The graph and feed changes, the cursor and the identity changes, for derived state.
    pub(crate) committed: Committed,
}

impl WriteSet {
    /// The author feed entries the batch added (`true`) or removed, in order.
    pub(crate) fn feed_keys(&self) -> impl Iterator<Item = (bool, &[u8])> {
        self.entries
            .iter()
            .filter(|(key, _)| key.first() == Some(&tag::AUTHOR_FEED))
            .map(|(key, insert)| (*insert, &key[..]))
    }
}

/// What the index entries of one record are derived from.
struct IndexedRecord<'a> {
    actor: ActorId,
    collection: &'a str,
    rkey: &'a str,
    sort_at_us: i64,
    refs: &'a Refs<'a>,
    /// When it is being unindexed because a commit deletes or replaces it: that commit's time
    /// (`None` when it is indexed, or goes with its account).
    removed_at_us: Option<i64>,
}

/// A batch's decisions so far; see the module documentation.
pub(crate) struct Rules<'s> {
    catalog: Catalog<'s>,
    records: FxHashMap<Vec<u8>, Vec<u8>>,
    entries: Vec<(Vec<u8>, bool)>,
    /// This batch's repost entries by subject, by the subject's prefix: the tail of each entry
    /// added (`true`) or removed, in order (what [`Rules::unfeed_reposts`] looks up).
    batch_reposts: FxHashMap<Vec<u8>, Vec<(Vec<u8>, bool)>>,
    /// Live-record counts of the pairs touched: (at batch start, now).
    pair_counts: FxHashMap<Pair, (u32, u32)>,
    count_deltas: FxHashMap<Vec<u8>, i64>,
    /// The newest revision of each actor's applied commits in this batch.
    latest_revs: FxHashMap<ActorId, u64>,
    counters: Counters,
    dirty_actors: FxHashSet<ActorId>,
    new_collections: Vec<CollectionId>,
    handles: FxHashMap<String, Option<ActorId>>,
    feed: Vec<FeedChange>,
    identities: Vec<ActorId>,
    searchable: Vec<crate::TouchedRecord>,
    progress: Option<Progress>,
    sources: Vec<Progress>,
    n_events: usize,
    /// Whom records touched by the batch notified that their content alone cannot tell again,
    /// absolute: reply ancestors ([`crate::notify::ancestor_key`]) and subscribers
    /// ([`crate::notify::subscriber_key`]); 0 removes the key.
    kept_recipients: FxHashMap<Vec<u8>, u64>,
    /// Counts recounted from the stored records, stored as they are (the starter pack joins a
    /// Cassandra list-index build counts, `cql/upgrade.rs`).
    recounted: Vec<(Vec<u8>, u64)>,
    /// Whether records make notifications (always, but for measuring what they cost).
    notifications: bool,
}

impl<'s> Rules<'s> {
    /// Starts a batch over the store's tables, from its counters as they stand.
    pub(crate) fn new(catalog: Catalog<'s>, counters: Counters) -> Rules<'s> {
        Rules {
            catalog,
            records: FxHashMap::default(),
            entries: Vec::new(),
            batch_reposts: FxHashMap::default(),
            pair_counts: FxHashMap::default(),
            count_deltas: FxHashMap::default(),
            latest_revs: FxHashMap::default(),
            counters,
            dirty_actors: FxHashSet::default(),
            new_collections: Vec::new(),
            handles: FxHashMap::default(),
            feed: Vec::new(),
            identities: Vec::new(),
            searchable: Vec::new(),
            progress: None,
            sources: Vec::new(),
            n_events: 0,
            kept_recipients: FxHashMap::default(),
            recounted: Vec::new(),
            notifications: true,
        }
    }

    /// Turns notifications off for this batch: [`crate::EmbeddedStore::set_notifications`].
    pub(crate) fn set_notifications(&mut self, on: bool) {
        self.notifications = on;
    }

    /// Applies one event.
    pub(crate) fn apply(
        &mut self,
        state: &mut impl StoredState,
        event: &Event<'_>,
    ) -> Result<Outcome, StoreError> {
        self.n_events += 1;
        match &event.body {
            Body::Commit(commit) => self.apply_commit(state, &event.did, event.time_us, commit),
            Body::Identity { seq, handle } => {
                Ok(self.apply_identity(&event.did, *seq, handle.as_deref()))
            }
            Body::Account { seq, status, .. } => {
                self.apply_account(state, &event.did, *seq, *status)
            }
        }
    }

    /// Counts one dropped event.
    pub(crate) fn drop_event(&mut self, reason: DropReason) {
        self.n_events += 1;
        *self.counters.dropped.entry(reason).or_default() += 1;
    }

    /// Sets where the batch leaves its source.
    pub(crate) fn set_progress(&mut self, progress: Progress) {
        self.progress = Some(progress);
    }

    /// Adds the progress of one more source; only its own entry is written (a file progress
    /// here never moves the live cursor).
    pub(crate) fn add_source_progress(&mut self, source: String, offset: u64) {
        self.sources.push(Progress::File {
            source,
            offset,
            cursor: None,
        });
    }

    /// Events applied or dropped so far.
    pub(crate) fn len(&self) -> usize {
        self.n_events
    }

    /// The value this batch wrote for a record key, if it wrote one.
    pub(crate) fn written(&self, key: &[u8]) -> Option<&[u8]> {
        self.records.get(key).map(Vec::as_slice)
    }

    /// Whether the batch already holds the count of `pair`.
    pub(crate) fn has_pair(&self, pair: &Pair) -> bool {
        self.pair_counts.contains_key(pair)
    }

    /// Interns DIDs, writing the rows of new ones with the batch; their ids in order.
    pub(crate) fn intern_actors(&mut self, dids: &[&str]) -> Vec<ActorId> {
        dids.iter().map(|did| self.intern_actor(did)).collect()
    }

    /// The in-memory tables the batch interns into.
    pub(crate) fn catalog(&self) -> Catalog<'s> {
        self.catalog
    }

    /// Turns the decisions into the batch's writes, reading the stored counts they move.
    pub(crate) fn finish(mut self, state: &mut impl StoredState) -> Result<WriteSet, StoreError> {
        let graph = self.graph_changes(state)?;
        let mut counts = self.absolute_counts(state)?;
        counts.extend(self.kept_recipients.drain());
        counts.append(&mut self.recounted);
        let pairs = self
            .pair_counts
            .iter()
            .map(|(&pair, &(_, now))| (pair, now))
            .collect();
        let actors = {
            let actors = read(self.catalog.actors);
            self.dirty_actors
                .iter()
                .filter_map(|&id| {
                    let (did, state) = (actors.did(id)?, actors.state(id)?);
                    Some(ActorRow {
                        id,
                        did: did.to_owned(),
                        row: encode_actor_row(&did, &state),
                    })
                })
                .collect()
        };
        let collections = self
            .new_collections
            .iter()
            .filter_map(|&id| Some((id, self.catalog.collection_name(id)?)))
            .collect();
        let cursor = match &self.progress {
            Some(Progress::Live(cursor)) => Some(*cursor),
            Some(Progress::File { cursor, .. }) => *cursor,
            None => None,
        };
        Ok(WriteSet {
            records: self.records,
            entries: self.entries,
            counts,
            pairs,
            actors,
            handles: self.handles.into_iter().collect(),
            collections,
            counters: self.counters,
            progress: self.progress,
            sources: self.sources,
            committed: Committed {
                graph,
                feed: self.feed,
                cursor,
                identities: self.identities,
                searchable: self.searchable,
            },
        })
    }

    /// The final state of each pair whose live-record count crossed zero, sorted; an imported
    /// follow keeps its edge when its last record goes.
    fn graph_changes(&self, state: &mut impl StoredState) -> Result<Vec<GraphChange>, StoreError> {
        let crossed: Vec<(Pair, bool)> = self
            .pair_counts
            .iter()
            .filter(|(_, (before, after))| (*before > 0) != (*after > 0))
            .map(|(&pair, &(_, after))| (pair, after > 0))
            .collect();
        let follows: Vec<(ActorId, ActorId)> = crossed
            .iter()
            .filter(|((pair_tag, ..), _)| *pair_tag == tag::FOLLOW_PAIR)
            .map(|&((_, actor, subject), _)| (actor, subject))
            .collect();
        let imported: FxHashSet<(ActorId, ActorId)> = follows
            .iter()
            .zip(state.imported(&follows)?)
            .filter_map(|(&pair, imported)| imported.then_some(pair))
            .collect();
        let mut changes: Vec<GraphChange> = crossed
            .into_iter()
            .filter_map(|((pair_tag, actor, subject), live)| {
                let follow = pair_tag == tag::FOLLOW_PAIR;
                if follow && imported.contains(&(actor, subject)) {
                    return None;
                }
                Some(match (follow, live) {
                    (true, true) => GraphChange::Follow(actor, subject),
                    (true, false) => GraphChange::Unfollow(actor, subject),
                    (false, true) => GraphChange::Block(actor, subject),
                    (false, false) => GraphChange::Unblock(actor, subject),
                })
            })
            .collect();
        changes.sort_unstable();
        Ok(changes)
    }

    /// Counts as the stored value plus this batch's changes, and latest revisions where they
    /// move forward (an older commit of another record may apply after a newer one).
    fn absolute_counts(
        &mut self,
        state: &mut impl StoredState,
    ) -> Result<Vec<(Vec<u8>, u64)>, StoreError> {
        let deltas: Vec<(Vec<u8>, i64)> = self.count_deltas.drain().collect();
        let revs: Vec<(Vec<u8>, u64)> = self
            .latest_revs
            .drain()
            .map(|(actor, rev)| (keys::latest_rev_key(actor).to_vec(), rev))
            .collect();
        let mut wanted: Vec<Vec<u8>> = deltas.iter().map(|(key, _)| key.clone()).collect();
        wanted.extend(revs.iter().map(|(key, _)| key.clone()));
        let stored = state.counts(&wanted)?;
        let (count_bases, rev_bases) = stored.split_at(deltas.len());
        let mut res = Vec::with_capacity(wanted.len());
        for ((key, delta), &base) in deltas.into_iter().zip(count_bases) {
            let Some(count) = base.checked_add_signed(delta) else {
                return Err(StoreError::corrupt(
                    format!(
                        "count {base} moved by {delta} goes below zero: the stored count \
                         disagrees with the stored records"
                    ),
                    &key,
                ));
            };
            res.push((key, count));
        }
        for ((key, rev), &base) in revs.into_iter().zip(rev_bases) {
            if rev > base {
                res.push((key, rev));
            }
        }
        Ok(res)
    }

    fn intern_actor(&mut self, did: &str) -> ActorId {
        let (id, is_new) = write(self.catalog.actors).intern(did);
        if is_new {
            self.dirty_actors.insert(id);
        }
        id
    }

    fn intern_collection(&mut self, name: &str) -> CollectionId {
        let (id, is_new) = self.catalog.intern_collection(name);
        if is_new {
            self.new_collections.push(id);
        }
        id
    }

    /// Marks the event's author as an actor that counts, unless its account is deleted.
    fn count_author(&mut self, actor: ActorId) {
        let mut actors = write(self.catalog.actors);
        if let Some(state) = actors.state(actor)
            && !state.counted
            && state.status() != AccountStatus::Deleted
        {
            actors.set_counted(actor, true);
            self.counters.actors += 1;
            self.dirty_actors.insert(actor);
        }
    }

    /// The value of a record key: this batch's if it wrote one, else the stored one.
    fn read_record(
        &self,
        state: &mut impl StoredState,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        match self.records.get(key) {
            Some(bytes) => Ok(Some(bytes.clone())),
            None => state.record(key),
        }
    }

    fn apply_commit(
        &mut self,
        state: &mut impl StoredState,
        did: &str,
        time_us: u64,
        commit: &Commit<'_>,
    ) -> Result<Outcome, StoreError> {
        let actor = self.intern_actor(did);
        let status = read(self.catalog.actors)
            .state(actor)
            .map(|state| state.status());
        if status == Some(AccountStatus::Deleted) {
            return Ok(Outcome::ActorDeleted);
        }
        self.count_author(actor);
        let collection = self.intern_collection(&commit.collection);
        let key = keys::record_key(actor, collection, &commit.rkey);
        // The commit's time: when the record it writes is indexed, or the one it replaces goes.
        let at_us = i64::try_from(time_us).unwrap_or(i64::MAX);
        if let Some(bytes) = self.read_record(state, &key)? {
            let stored = value::decode(&bytes)?;
            if stored.rev() >= commit.rev {
                return Ok(Outcome::Stale);
            }
            if let StoredValue::Live(old) = stored {
                self.unindex(state, &key, &commit.collection, &old, Some(at_us))?;
            }
        }
        let bytes = match (&commit.record, commit.operation) {
            (Some(record), Operation::Create | Operation::Update) => {
                let sort_at_us = record.created_at_us.map_or(at_us, |c| c.min(at_us));
                let indexed = IndexedRecord {
                    actor,
                    collection: &commit.collection,
                    rkey: &commit.rkey,
                    sort_at_us,
                    refs: &record.refs,
                    removed_at_us: None,
                };
                self.index_record(state, &indexed, true)?;
                *self.counters.records.entry(collection).or_default() += 1;
                value::encode_live(&LiveRecord {
                    rev: commit.rev,
                    created_at_us: record.created_at_us,
                    indexed_at_us: at_us,
                    sort_at_us,
                    cid: &record.cid,
                    json: record.json,
                })
            }
            _ => value::encode_tombstone(commit.rev),
        };
        self.records.insert(key, bytes);
        let latest = self.latest_revs.entry(actor).or_default();
        *latest = (*latest).max(commit.rev);
        Ok(Outcome::Applied)
    }

    /// Removes the index entries and the count of the live record at `key`, which is being
    /// replaced or deleted by a commit at `removed_at_us`, or deleted with its account (`None`).
    fn unindex(
        &mut self,
        state: &mut impl StoredState,
        key: &[u8],
        collection_name: &str,
        old: &LiveRecord<'_>,
        removed_at_us: Option<i64>,
    ) -> Result<(), StoreError> {
        let Some((actor, collection, rkey)) = keys::parse_record_key(key) else {
            return Err(StoreError::corrupt("record key", key));
        };
        let refs = stored_refs(collection_name, old.json, key)?;
        let indexed = IndexedRecord {
            actor,
            collection: collection_name,
            rkey,
            sort_at_us: old.sort_at_us,
            refs: &refs,
            removed_at_us,
        };
        self.index_record(state, &indexed, false)?;
        let live = self.counters.records.entry(collection).or_default();
        *live = live.checked_sub(1).ok_or_else(|| {
            StoreError::corrupt(
                format!("the live-record counter of `{collection_name}` would go below zero"),
                key,
            )
        })?;
        Ok(())
    }

    /// Adds (`insert`) or removes the index entries and counts of one record.
    fn index_record(
        &mut self,
        state: &mut impl StoredState,
        record: &IndexedRecord<'_>,
        insert: bool,
    ) -> Result<(), StoreError> {
        if let Some(&collection) = crate::SEARCHABLE_COLLECTIONS
            .iter()
            .find(|&&name| name == record.collection)
        {
            self.searchable.push(crate::TouchedRecord {
                actor: record.actor,
                collection,
                rkey: record.rkey.to_owned(),
            });
        }
        let mut keys = match (record.collection, record.refs) {
            (nsid::LIKE, Refs::Subject { subject, .. }) => {
                self.interaction_keys(record, subject, insert, tag::LIKE_BY_SUBJECT)
            }
            (nsid::REPOST, Refs::Subject { subject, .. }) => {
                let mut keys =
                    self.interaction_keys(record, subject, insert, tag::REPOST_BY_SUBJECT);
                // A repost shows in feeds when it reposts a post, the only thing clients repost.
                if subject.collection == nsid::POST {
                    keys.push(self.repost_feed_key(record, subject, insert));
                }
                keys
            }
            (
                nsid::POST,
                Refs::Post {
                    reply,
                    quote,
                    media,
                    ..
                },
            ) => {
                let mut keys =
                    self.post_keys(record, reply.as_ref(), quote.as_ref(), *media, insert);
                if !insert {
                    keys.extend(self.unfeed_reposts(state, record)?);
                }
                keys
            }
            (nsid::FOLLOW, Refs::Actor { subject }) => {
                let subject = self.intern_actor(subject);
                self.count_pair(state, (tag::FOLLOW_PAIR, record.actor, subject), insert)?;
                follow_keys(record, subject)
            }
            (nsid::BLOCK, Refs::Actor { subject }) => {
                let subject = self.intern_actor(subject);
                self.count_pair(state, (tag::BLOCK_PAIR, record.actor, subject), insert)?;
                let mut by_actor = edge_prefix(tag::BLOCK_BY_ACTOR, record.actor, subject).to_vec();
                by_actor.extend_from_slice(record.rkey.as_bytes());
                let mut by_subject =
                    edge_prefix(tag::BLOCK_BY_SUBJECT, subject, record.actor).to_vec();
                by_subject.extend_from_slice(record.rkey.as_bytes());
                vec![by_actor, by_subject]
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
                vec![key]
            }
            (nsid::LISTBLOCK, Refs::Target { target }) => {
                let key = self.ref_key(tag::LISTBLOCK_BY_ACTOR, target);
                vec![by_actor_key(
                    tag::LISTBLOCK_BY_ACTOR,
                    record.actor,
                    &key,
                    record.rkey,
                )]
            }
            _ => Vec::new(),
        };
        keys.extend(self.list_keys(record, insert));
        keys.extend(self.notification_keys(state, record, insert)?);
        self.entries
            .extend(keys.into_iter().map(|key| (key, insert)));
        Ok(())
    }

    /// The entries of a like or repost: by subject (counted) and by actor.
    fn interaction_keys(
        &mut self,
        record: &IndexedRecord<'_>,
        subject: &RecordUri<'_>,
        insert: bool,
        by_subject_tag: u8,
    ) -> Vec<Vec<u8>> {
        let (by_actor_tag, kind) = if by_subject_tag == tag::LIKE_BY_SUBJECT {
            (tag::LIKE_BY_ACTOR, count::LIKES)
        } else {
            (tag::REPOST_BY_ACTOR, count::REPOSTS)
        };
        let mut key = self.ref_key(by_subject_tag, subject);
        self.count(&key, kind, insert);
        let by_actor = by_actor_key(by_actor_tag, record.actor, &key, record.rkey);
        let subject_len = key.len();
        push_author_tail(&mut key, record);
        if by_subject_tag == tag::REPOST_BY_SUBJECT {
            let (prefix, tail) = key.split_at(subject_len);
            self.batch_reposts
                .entry(prefix.to_vec())
                .or_default()
                .push((tail.to_vec(), insert));
        }
        vec![by_actor, key]
    }

    /// The author feed entry of a repost of a post.
    fn repost_feed_key(
        &mut self,
        record: &IndexedRecord<'_>,
        subject: &RecordUri<'_>,
        insert: bool,
    ) -> Vec<u8> {
        let post_actor = self.intern_actor(subject.did);
        let item = reposts::repost_item(
            record.actor,
            record.rkey,
            record.sort_at_us,
            post_actor,
            subject.rkey,
        );
        self.feed.push(feed_change(item, insert));
        keys::author_feed_key(&item, record.rkey, subject.rkey)
    }

    /// The entries of a post: its author feed entry, replies by parent (counted) and root,
    /// and the quote (counted); the author's post count.
    fn post_keys(
        &mut self,
        record: &IndexedRecord<'_>,
        reply: Option<&jetstream::Reply<'_>>,
        quote: Option<&RecordUri<'_>>,
        media: Media,
        insert: bool,
    ) -> Vec<Vec<u8>> {
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
        let mut keys = vec![keys::author_feed_key(&item, record.rkey, record.rkey)];
        self.feed.push(feed_change(item, insert));
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
                push_author_tail(&mut key, record);
                keys.push(key);
            }
        }
        if let Some(quote) = quote {
            let mut key = self.ref_key(tag::QUOTE_BY_SUBJECT, quote);
            self.count(&key, count::QUOTES, insert);
            push_author_tail(&mut key, record);
            keys.push(key);
        }
        keys
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

    /// Counts a record of `actor` in or out of the actor count `kind`; no index entries.
    fn count_actor(&mut self, actor: ActorId, kind: u8, insert: bool) -> Vec<Vec<u8>> {
        let key = keys::actor_count_key(actor, kind).to_vec();
        *self.count_deltas.entry(key).or_default() += if insert { 1 } else { -1 };
        Vec::new()
    }

    /// Counts a follow or block record of a pair in (`insert`) or out.
    fn count_pair(
        &mut self,
        state: &mut impl StoredState,
        pair: Pair,
        insert: bool,
    ) -> Result<(), StoreError> {
        let counts = match self.pair_counts.get_mut(&pair) {
            Some(counts) => counts,
            None => {
                let stored = state.pair_count(pair)?;
                self.pair_counts.entry(pair).or_insert((stored, stored))
            }
        };
        counts.1 = if insert {
            counts.1.checked_add(1)
        } else {
            counts.1.checked_sub(1)
        }
        .ok_or_else(|| {
            let (pair_tag, actor, subject) = pair;
            StoreError::corrupt(
                format!(
                    "the live-record count of a pair would leave 0..=u32::MAX from {}: the \
                     stored count disagrees with the stored records",
                    counts.1
                ),
                &edge_prefix(pair_tag, actor, subject),
            )
        })?;
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
        let mut actors = write(self.catalog.actors);
        let Some(state) = actors.state(actor) else {
            return Outcome::Stale;
        };
        if seq <= state.identity_seq {
            return Outcome::Stale;
        }
        let old = state.handle.map(str::to_ascii_lowercase);
        actors.set_identity_seq(actor, seq);
        // `handle.invalid` is how the relay says the handle failed verification.
        let new = handle.filter(|h| *h != "handle.invalid");
        actors.set_handle(actor, new);
        // The old handle keeps pointing at whichever actor still claims it, else it goes.
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
        state: &mut impl StoredState,
        did: &str,
        seq: u64,
        status: AccountStatus,
    ) -> Result<Outcome, StoreError> {
        let actor = self.intern_actor(did);
        self.count_author(actor);
        let previous = {
            let actors = read(self.catalog.actors);
            let Some(actor_state) = actors.state(actor) else {
                return Ok(Outcome::Stale);
            };
            if seq <= actor_state.account_seq {
                return Ok(Outcome::Stale);
            }
            actor_state.status()
        };
        if status == AccountStatus::Deleted && previous != AccountStatus::Deleted {
            self.delete_actor_records(state, actor)?;
        }
        let mut actors = write(self.catalog.actors);
        if let Some(counted) = actors.state(actor).map(|state| state.counted) {
            actors.set_account(actor, seq, status);
            let counts = status != AccountStatus::Deleted;
            if counted != counts {
                actors.set_counted(actor, counts);
                self.counters.actors = if counts {
                    self.counters.actors.checked_add(1)
                } else {
                    self.counters.actors.checked_sub(1)
                }
                .ok_or_else(|| {
                    StoreError::corrupt(
                        "the actor counter would go below zero",
                        &actor.0.to_be_bytes(),
                    )
                })?;
            }
        }
        drop(actors);
        self.dirty_actors.insert(actor);
        Ok(Outcome::Applied)
    }

    /// Removes every live record of a deleted account, leaving tombstones at their revisions.
    fn delete_actor_records(
        &mut self,
        state: &mut impl StoredState,
        actor: ActorId,
    ) -> Result<(), StoreError> {
        let mut records: FxHashMap<Vec<u8>, Vec<u8>> =
            state.actor_records(actor)?.into_iter().collect();
        // What this batch wrote is newer than what is stored.
        let prefix = keys::actor_records_prefix(actor);
        for (key, bytes) in &self.records {
            if key.starts_with(&prefix) {
                records.insert(key.clone(), bytes.clone());
            }
        }
        let mut records: Vec<(Vec<u8>, Vec<u8>)> = records.into_iter().collect();
        records.sort_unstable();
        for (key, bytes) in records {
            let StoredValue::Live(old) = value::decode(&bytes)? else {
                continue;
            };
            let collection = keys::parse_record_key(&key)
                .and_then(|(_, collection, _)| self.catalog.collection_name(collection))
                .ok_or_else(|| StoreError::corrupt("record key of an unknown collection", &key))?;
            self.unindex(state, &key, &collection, &old, None)?;
            self.records.insert(key, value::encode_tombstone(old.rev));
        }
        Ok(())
    }
}

/// The references of a stored live record. Records of a collection indexed only since format
/// 3 (verifications) were stored without being checked, and one that does not decode is
/// taken as naming nothing; any other that does not decode means corruption.
pub(crate) fn stored_refs<'a>(
    collection: &str,
    json: &'a str,
    key: &[u8],
) -> Result<Refs<'a>, StoreError> {
    match jetstream::record_fields(collection, json) {
        Ok((_, refs)) => Ok(refs),
        Err(_) if collection == nsid::VERIFICATION => Ok(Refs::None),
        Err(err) => Err(StoreError::corrupt(
            format!("stored record no longer decodes: {err}"),
            key,
        )),
    }
}

/// Appends what every list entry around a subject ends in: the record's `sort_at`, its author
/// and its record key.
fn push_author_tail(key: &mut Vec<u8>, record: &IndexedRecord<'_>) {
    key.extend_from_slice(&keys::time_bytes(record.sort_at_us));
    key.extend_from_slice(&record.actor.0.to_be_bytes());
    key.extend_from_slice(record.rkey.as_bytes());
}

/// The entries of a follow: by actor and by subject (ordered by `sort_at`), and the edge.
fn follow_keys(record: &IndexedRecord<'_>, subject: ActorId) -> Vec<Vec<u8>> {
    let time = keys::time_bytes(record.sort_at_us);
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
    vec![by_actor, by_subject, edge]
}
