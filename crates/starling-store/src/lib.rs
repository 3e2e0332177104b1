//! Starling's durable state: records, their indexes, actors, counters and the ingest cursor.
//!
//! Owns: the [`Store`] interface every other crate talks to, the apply semantics of Jetstream
//! events (idempotence, ordering by repository revision, tombstones, account deletion), and the
//! embedded backend on fjall ([`EmbeddedStore`]), and the Apache Cassandra backend over CQL
//! ([`CassandraStore`], `cql/`).
//! Does not: decode JSON events (that is `starling-core`), hold the follow graph in memory, or
//! expose async calls: every call blocks and belongs on a blocking thread (the Cassandra
//! backend runs its driver on a runtime of its own).
//! Must not depend on: `starling-graph`, `starling-ingest`, `starling-api`.
//!
//! Only this crate names a storage engine or writes CQL; no other crate makes a raw key-value
//! call or a CQL query.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod actors;
mod apply;
mod catalog;
mod codec;
pub mod cql;
mod did_memo;
mod embedded;
mod format;
mod fresh_keys;
pub mod keys;
mod locks;
pub mod notify;
mod private;
mod queries;
mod usage;
pub mod value;
mod value_cache;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use starling_core::feed::{FeedChange, FeedItem, FeedKey};
use starling_core::jetstream::{DropReason, Event};
use starling_core::syntax::RecordUri;
use starling_core::{ActorId, Cursor};

pub use cql::{CassandraBatch, CassandraOptions, CassandraStore, CqlConsistency};
pub use did_memo::DidMemo;
pub use embedded::{EmbeddedBatch, EmbeddedStore};
pub use format::STORE_FORMAT;
pub use private::{
    ActivitySubscription, Bookmark, BsyncStream, Draft, Mute, NotificationState,
    PRIVATE_PAYLOAD_BYTES_MAX, PRIVATE_TEXT_BYTES_MAX, PrivateKey, PrivateOp, PrivatePage,
    PrivateRows,
};
pub use private::{
    DEFAULT_TAKEDOWN_REF, LABELS_PER_SUBJECT_MAX, Label, StoredLabel, TakedownSubject,
    UpstreamStatus,
};
use private::{PrivateQueries, StoreReads};
pub use usage::{KindUsage, Usage};
pub use value::LiveRecord;

/// Errors of the store. Any error from a write means the store is poisoned: the process must
/// exit and recover from the journal (or the batch log), never retry the batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The storage engine failed.
    #[error("storage engine: {0}")]
    Engine(#[from] fjall::Error),
    /// The thread writing a batch could not run.
    #[error("batch writer: {0}")]
    Writer(String),
    /// Stored bytes do not decode, or break an invariant of the apply rules: a damaged disk or
    /// a bug. Never retried, never clamped away.
    #[error("corrupt store: {what} (key {})", codec::HexKey(key))]
    Corrupt {
        /// What did not decode, or which invariant broke.
        what: String,
        /// The key whose bytes are wrong (empty when the bytes have no key, as a file header).
        key: Vec<u8>,
    },
    /// The store cluster failed a request or cannot be reached: usually a passing state (a node
    /// down, a timeout), so a reader may retry, on another replica.
    #[error("store cluster unavailable: {what}")]
    Unavailable {
        /// The request and the driver's error.
        what: String,
    },
    /// The store cluster answered, but cannot be used as it is (schema, keyspace, options).
    #[error("store cluster: {what}")]
    Cluster {
        /// What is wrong.
        what: String,
    },
    /// This replica lost the writer lease: another replica took over, and this one's writes
    /// are refused.
    #[error("writer lease lost: {what}")]
    Fenced {
        /// What was refused.
        what: String,
    },
    /// Change log entries a reader asked for were pruned before it read them (its position
    /// had expired, or it registered while a prune ran): it missed changes, and must rebuild
    /// what it derives from the log (the graph, timelines) from the store.
    #[error(
        "change log entries after {after} were pruned (up to {pruned_upto}) before this replica read them; restart it to rebuild its graph from the store"
    )]
    Pruned {
        /// The position the read started after.
        after: u64,
        /// The change log is pruned up to this sequence.
        pruned_upto: u64,
    },
    /// The storage engine could not open or read its files: a lock held by another process,
    /// a damaged file, a failing disk.
    #[error("store files in `{path}`: {cause}")]
    Open {
        /// The engine's directory, or the keyspace directory being read.
        path: String,
        /// What failed.
        cause: String,
    },
    /// The data directory cannot be used.
    #[error("data directory `{path}`: {reason}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// The data directory was written in a layout this build does not read.
    #[error(
        "data directory `{path}` holds store format {found}; this build reads format {expected}"
    )]
    Format {
        /// The directory.
        path: String,
        /// The format version found in it.
        found: u32,
        /// The format version this build reads and writes.
        expected: u32,
    },
}

/// What a backup wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BackupReport {
    /// The new data directory.
    pub path: String,
    /// Keys copied, over every keyspace.
    pub n_keys: u64,
    /// Bytes of the keys and values copied.
    pub n_bytes: u64,
}

impl StoreError {
    /// A corruption of the value or key `key`.
    pub(crate) fn corrupt(what: impl Into<String>, key: &[u8]) -> StoreError {
        StoreError::Corrupt {
            what: what.into(),
            key: key.to_vec(),
        }
    }

    /// Whether the failure is a passing state of the store cluster, worth a retry elsewhere.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

/// What applying one event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The event changed the state.
    Applied,
    /// The event was already applied, or a later revision superseded it.
    Stale,
    /// The event's account is deleted; its commits are ignored until it is active again.
    ActorDeleted,
}

impl Outcome {
    /// The label used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Stale => "stale",
            Outcome::ActorDeleted => "actor_deleted",
        }
    }
}

/// A change to the follow or block graph, resolved after a batch commits: the final state of
/// one (actor, subject) pair, whatever records came and went inside the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GraphChange {
    /// `actor` follows `subject` (at least one live follow record).
    Follow(ActorId, ActorId),
    /// `actor` no longer follows `subject`.
    Unfollow(ActorId, ActorId),
    /// `actor` blocks `subject`.
    Block(ActorId, ActorId),
    /// `actor` no longer blocks `subject`.
    Unblock(ActorId, ActorId),
}

/// What a committed batch changed, for the in-memory structures derived from the store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Committed {
    /// The final state of each follow and block pair the batch touched, sorted.
    pub graph: Vec<GraphChange>,
    /// Feed items added and removed, in the order it happened.
    pub feed: Vec<FeedChange>,
    /// The Jetstream cursor the batch's progress reached, if it set one.
    pub cursor: Option<Cursor>,
    /// Actors whose identity (handle, DID document) changed, as identity events said.
    pub identities: Vec<ActorId>,
    /// Records of the searchable collections ([`SEARCHABLE_COLLECTIONS`]) the batch indexed or
    /// unindexed (created, replaced, deleted), in the order it happened, repeats included: the
    /// search index reads each one back from the store.
    pub searchable: Vec<TouchedRecord>,
}

/// The collections whose records the search index holds: posts, profiles, starter packs and
/// feed generators.
pub const SEARCHABLE_COLLECTIONS: [&str; 4] = [
    starling_core::jetstream::nsid::POST,
    starling_core::jetstream::nsid::PROFILE,
    starling_core::jetstream::nsid::STARTERPACK,
    starling_core::jetstream::nsid::GENERATOR,
];

/// A record a batch touched, by its parts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TouchedRecord {
    /// The author.
    pub actor: ActorId,
    /// One of [`SEARCHABLE_COLLECTIONS`].
    pub collection: &'static str,
    /// The record key.
    pub rkey: String,
}

/// Where a batch leaves the source it was read from, stored atomically with the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A Jetstream instance: the cursor of the newest event applied.
    Live(Cursor),
    /// A recorded file: the byte offset (in the decompressed stream) after the last applied
    /// event, and the newest cursor seen.
    File {
        /// Names the file: its path and size.
        source: String,
        /// Bytes of the decompressed stream fully applied.
        offset: u64,
        /// The newest `time_us` applied so far, if any.
        cursor: Option<Cursor>,
    },
}

/// Counts of the store's contents, as `starling stats --json` prints them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Accounts that authored at least one applied event and are not deleted.
    pub actors: u64,
    /// Live follow records.
    pub follows: u64,
    /// Live block records.
    pub blocks: u64,
    /// Live posts.
    pub posts: u64,
    /// Live likes.
    pub likes: u64,
    /// Live reposts.
    pub reposts: u64,
    /// Live records per collection NSID, every collection included.
    pub records: BTreeMap<String, u64>,
    /// Dropped events per reason.
    pub dropped: BTreeMap<String, u64>,
    /// The stored Jetstream cursor: the newest `time_us` applied.
    pub cursor: Option<u64>,
}

/// One of a store's caches in memory, as the operator's metrics show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheStats {
    /// The cache's name, the `cache` label of its metrics.
    pub name: &'static str,
    /// Entries it holds now.
    pub entries: u64,
    /// Entries it holds at most.
    pub capacity: u64,
    /// Reads that missed it and read the engine, since the store opened.
    pub engine_reads: u64,
}

/// An actor as the store knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActorInfo {
    /// The actor's id.
    pub id: ActorId,
    /// The DID.
    pub did: String,
    /// The handle from the newest identity event, if any.
    pub handle: Option<String>,
    /// The hosting status from the newest account event.
    pub status: starling_core::jetstream::AccountStatus,
    /// The relay sequence of the newest account event applied (0: none).
    pub account_seq: u64,
}

/// A record read back from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// `at://did/collection/rkey`.
    pub uri: String,
    /// The record's CID.
    pub cid: String,
    /// The JSON, as received.
    pub json: String,
    /// `createdAt`, if any, in microseconds.
    pub created_at_us: Option<i64>,
    /// When it was indexed, in microseconds (the event's `time_us`).
    pub indexed_at_us: i64,
    /// `min(created_at, indexed_at)`.
    pub sort_at_us: i64,
}

/// Counts of one record's interactions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecordCounts {
    /// Live likes of it.
    pub likes: u64,
    /// Live reposts of it.
    pub reposts: u64,
    /// Live replies whose parent it is.
    pub replies: u64,
    /// Live posts quoting it.
    pub quotes: u64,
    /// Live items of it, for a list (written by the list's owner).
    pub list_items: u64,
}

/// Counts of one actor's records. Follower and follow counts come from the graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ActorCounts {
    /// Live posts.
    pub posts: u64,
    /// Live lists.
    pub lists: u64,
    /// Live feed generators.
    pub feeds: u64,
    /// Live starter packs.
    pub starter_packs: u64,
}

/// A relation between two actors that has records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    /// `app.bsky.graph.follow`.
    Follow,
    /// `app.bsky.graph.block`.
    Block,
}

/// A record that points at another record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InteractionKind {
    /// `app.bsky.feed.like`.
    Like,
    /// `app.bsky.feed.repost`.
    Repost,
    /// `app.bsky.graph.listblock` (of a list).
    ListBlock,
}

/// A list the store keeps in newest-first order.
#[derive(Clone, Copy, Debug)]
pub enum ListOf<'a> {
    /// Follow records by an actor.
    Follows(ActorId),
    /// Follow records naming an actor.
    Followers(ActorId),
    /// Likes of a record.
    Likes(RecordUri<'a>),
    /// Replies whose parent is a post.
    Replies(RecordUri<'a>),
    /// Reposts of a record.
    Reposts(RecordUri<'a>),
    /// Posts quoting a record.
    Quotes(RecordUri<'a>),
    /// The items of a list, written by its owner (`owner`, the list's author); each entry's
    /// `subject` is the actor in the list.
    ListItems {
        /// The list.
        list: RecordUri<'a>,
        /// Its author.
        owner: ActorId,
    },
    /// Profiles that joined through a starter pack.
    Joins(RecordUri<'a>),
    /// Verifications of an actor; each entry's author is the verifier.
    Verifications(ActorId),
    /// An actor's (`did`'s) records of one collection: likes, reposts, feed generators,
    /// lists, starter packs, blocks or list blocks (`ACTOR_LISTED_COLLECTIONS`).
    ActorRecords {
        /// The actor.
        did: &'a str,
        /// The collection NSID.
        collection: &'static str,
    },
}

/// The collections [`ListOf::ActorRecords`] lists.
pub const ACTOR_LISTED_COLLECTIONS: [&str; 8] = apply::ACTOR_LISTED;

/// One entry of a [`ListPage`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    /// The URI of the record that is the entry (the follow, like or reply).
    pub uri: String,
    /// Its author.
    pub author: ActorId,
    /// The actor it names, for follows.
    pub subject: Option<ActorId>,
    /// `min(createdAt, indexedAt)` of the record.
    pub sort_at_us: i64,
    /// The record it points at, in an actor's records ([`ListOf::ActorRecords`]: a like's or
    /// repost's subject, a list block's list) when its entry keeps it; entries written
    /// before they kept it have `None`, and the record says.
    pub target: Option<String>,
}

/// A page of a list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Newest first.
    pub entries: Vec<ListEntry>,
    /// Where the next page starts, if there is one: opaque bytes.
    pub cursor: Option<Vec<u8>>,
}

/// The most entries of deleted verifications an unread count reads past its `max`: they do
/// not count, so without a bound a recipient verified and unverified a million times would
/// cost a million reads. Beyond it the count is short by what it did not read.
pub const OUTLIVING_SCAN_MAX: usize = 1_000;

/// Why an account was notified; see [`notify`] for the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum NotificationReason {
    /// A like of the recipient's record.
    Like,
    /// A repost of the recipient's post.
    Repost,
    /// A follow of the recipient.
    Follow,
    /// A post that mentions the recipient.
    Mention,
    /// A reply to the recipient's post or below it.
    Reply,
    /// A post quoting the recipient's post.
    Quote,
    /// A like made via the recipient's repost.
    LikeViaRepost,
    /// A repost made via the recipient's repost.
    RepostViaRepost,
    /// A post by an account whose activity the recipient subscribed to.
    SubscribedPost,
    /// A profile that joined through the recipient's starter pack.
    StarterpackJoined,
    /// A verification of the recipient.
    Verified,
    /// A verification of the recipient was deleted or replaced (the reference's
    /// `notifsForDelete` of verifications).
    Unverified,
}

/// A notification as the store serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// Who made the record.
    pub author: ActorId,
    /// The record that notified (a like, repost, follow or post).
    pub uri: String,
    /// Why.
    pub reason: NotificationReason,
    /// The record the reason is about (the liked post, the replied-to ancestor, ...), if any.
    pub reason_subject: Option<String>,
    /// `min(createdAt, indexedAt)` of the record.
    pub sort_at_us: i64,
    /// Where the next notifications start: pass it as `below` (opaque bytes).
    pub cursor: Vec<u8>,
}

/// The storage interface: the domain operations Starling needs, whatever the backend.
pub trait Store: Send + Sync + PrivateBackend {
    /// A batch of events applied atomically, with the progress it reaches.
    type Batch<'s>: Batch
    where
        Self: 's;

    /// Starts a batch. Batches are serialized: a second caller waits for the first to finish.
    fn batch(&self) -> Self::Batch<'_>;

    /// The counts of the store's contents.
    fn stats(&self) -> Result<Stats, StoreError>;

    /// What the store holds by kind, in bytes: one pass over all of it.
    fn usage(&self) -> Result<Usage, StoreError>;

    /// Writes a consistent copy of the store, as it is at one point between two batches, into
    /// a new data directory `backups/NAME` beside the store, while it keeps serving and
    /// ingesting: `serve` opens the copy as it is (its graph is rebuilt from it). Only a store
    /// kept in a data directory can; a store cluster has its own backups.
    fn backup(&self, name: &str) -> Result<BackupReport, StoreError> {
        Err(StoreError::DataDir {
            path: name.to_owned(),
            reason: "this store is not kept in a data directory: back up its cluster instead \
                     (for Cassandra, `nodetool snapshot`)"
                .to_owned(),
        })
    }

    /// Whether a read of a few keys may run on the async worker that received a request
    /// instead of a blocking thread: a lookup in memory, or in the local engine when memory
    /// misses (the embedded store). Not for a store whose client blocks on a runtime of its
    /// own (Cassandra), which an async worker must never do.
    fn reads_inline(&self) -> bool {
        false
    }

    /// The store's caches in memory, for the operator's metrics (none by default).
    fn caches(&self) -> Vec<CacheStats> {
        Vec::new()
    }

    /// The stored progress of a source (a file name, or `None` for the live cursor).
    fn progress(&self, file_source: Option<&str>) -> Result<Option<Progress>, StoreError>;

    /// A record by its parts, if live.
    fn record(
        &self,
        did: &str,
        collection: &str,
        rkey: &str,
    ) -> Result<Option<StoredRecord>, StoreError>;

    /// Whether a record is live: [`Store::record`] is `Some`, without reading or decoding the
    /// record where the backend keeps that answer in memory.
    fn record_is_live(&self, did: &str, collection: &str, rkey: &str) -> Result<bool, StoreError> {
        Ok(self.record(did, collection, rkey)?.is_some())
    }

    /// [`Store::record_is_live`] of a record of `actor`, known by id: where the backend keys
    /// records by id, no DID is spelled out to be looked up again.
    fn actor_record_is_live(
        &self,
        actor: ActorId,
        collection: &str,
        rkey: &str,
    ) -> Result<bool, StoreError> {
        let Some(did) = self.did(actor) else {
            return Ok(false);
        };
        self.record_is_live(&did, collection, rkey)
    }

    /// An actor by DID, if the store has seen it.
    fn actor(&self, did: &str) -> Result<Option<ActorInfo>, StoreError>;

    /// The DID of an interned actor id.
    fn did(&self, id: ActorId) -> Option<String>;

    /// Appends the DID of `id` to `out`; `false` (and nothing appended) for an unknown id.
    fn push_did(&self, id: ActorId, out: &mut String) -> bool {
        match self.did(id) {
            Some(did) => {
                out.push_str(&did);
                true
            }
            None => false,
        }
    }

    /// The interned id of a DID, if any.
    fn actor_id(&self, did: &str) -> Option<ActorId>;

    /// Waits until every committed batch is durable. [`Batch::commit`] hands the engine write to
    /// a background thread and returns; the next batch's commit, this call, and dropping the
    /// store wait for it.
    fn sync(&self) -> Result<(), StoreError>;

    /// The sequence number of the newest graph log entry (0 when there is none).
    ///
    /// Every committed batch that changed the graph appends its [`GraphChange`]s to the log
    /// atomically with its records. A graph snapshot taken when the log was at `seq`, plus the
    /// log entries after `seq`, equals the stored edges.
    fn graph_log_seq(&self) -> u64;

    /// A number that moves with every write of records, indexes or actors, and is the same
    /// after a restart when nothing was written since: what a file derived from the store
    /// (the search index of a store without a live cursor) names to be known current. `None`
    /// when the backend has no such number (a cluster that other processes write).
    fn write_seq(&self) -> Option<u64> {
        None
    }

    /// Visits the graph changes logged after `after`, oldest first; returns the last sequence.
    /// A backend whose log other processes prune fails with [`StoreError::Pruned`] when
    /// entries after `after` are gone, instead of skipping them.
    fn graph_log_since(
        &self,
        after: u64,
        visit: &mut dyn FnMut(GraphChange),
    ) -> Result<u64, StoreError>;

    /// Drops the graph log entries up to `upto`, once a snapshot covers them.
    fn prune_graph_log(&self, upto: u64) -> Result<(), StoreError>;

    /// Interns DIDs (durably), returning their ids in order. For bulk imports.
    fn intern_actors(&self, dids: &[&str]) -> Result<Vec<ActorId>, StoreError>;

    /// Stores follows imported from an adjacency list, which have no records behind them.
    /// An imported pair is an edge whatever happens to follow records of the same pair.
    fn import_follows(&self, pairs: &[(ActorId, ActorId)]) -> Result<(), StoreError>;

    /// The interaction counts of the record `uri` names (zeros for an unknown record).
    fn record_counts(&self, uri: &RecordUri<'_>) -> Result<RecordCounts, StoreError>;

    /// How many stored profiles name the starter pack `uri` as the one they joined through
    /// (0 for a record not stored).
    fn starter_pack_joins(&self, uri: &RecordUri<'_>) -> Result<u64, StoreError>;

    /// The record counts of an actor (zeros for an unknown actor).
    fn actor_counts(&self, actor: ActorId) -> Result<ActorCounts, StoreError>;

    /// The newest repository revision (a TID's value) of `actor`'s applied commits, if any.
    fn latest_rev(&self, actor: ActorId) -> Result<Option<u64>, StoreError>;

    /// The collection and record key of every live record of `did`, in no particular order
    /// (none for an unknown actor): what a repository's resync compares with the repository.
    fn live_record_keys(&self, did: &str) -> Result<Vec<(String, String)>, StoreError>;

    /// Visits `author`'s feed items (posts and reposts of posts) older than `below`, or all of
    /// them, newest first, until `visit` returns `false`.
    fn author_feed(
        &self,
        author: ActorId,
        below: Option<FeedKey>,
        visit: &mut dyn FnMut(FeedItem) -> bool,
    ) -> Result<(), StoreError>;

    /// The actor whose newest identity event named `handle`, if any.
    fn actor_by_handle(&self, handle: &str) -> Option<ActorId>;

    /// The URI of a live record of `collection` (follow or block) by `actor` naming `subject`.
    fn edge_uri(
        &self,
        collection: EdgeKind,
        actor: ActorId,
        subject: ActorId,
    ) -> Result<Option<String>, StoreError>;

    /// The URI of `actor`'s live like or repost (`collection`) of the record `subject` names.
    fn interaction_uri(
        &self,
        collection: InteractionKind,
        actor: ActorId,
        subject: &RecordUri<'_>,
    ) -> Result<Option<String>, StoreError>;

    /// The URI of the list item putting `subject` in the list `list` names, if any.
    fn list_item_uri(
        &self,
        list: &RecordUri<'_>,
        subject: ActorId,
    ) -> Result<Option<String>, StoreError>;

    /// A page of a list kept newest first: `list` names it, `after` is the cursor of the
    /// previous page (opaque bytes from [`Page::cursor`]).
    fn list_page(
        &self,
        list: &ListOf<'_>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<ListPage, StoreError>;

    /// Visits every live follow (`actor`, `subject`) and block pair, to rebuild the graph.
    fn for_each_edge(&self, visit: &mut dyn FnMut(GraphChange)) -> Result<(), StoreError>;

    /// Visits every live record of the searchable collections ([`SEARCHABLE_COLLECTIONS`]) with
    /// its author and collection, in no particular order, to rebuild the search index. Waits
    /// for the batches committed so far to be durable first.
    fn for_each_searchable(
        &self,
        visit: &mut dyn FnMut(ActorId, &'static str, StoredRecord),
    ) -> Result<(), StoreError>;

    /// Visits the raw entries of `recipient`'s notifications older than `below` (a
    /// [`Notification::cursor`]), or all of them, newest first, until `visit` returns `false`:
    /// each entry's key after the recipient's prefix. [`Store::notifications`] decodes them.
    fn notification_entries(
        &self,
        recipient: ActorId,
        below: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError>;

    /// Visits `recipient`'s notifications older than `below` (a [`Notification::cursor`]), or
    /// all of them, newest first, until `visit` returns `false`. Like the reference, it skips
    /// a notification whose reason subject is no longer stored. At most `scan_max` entries
    /// are read; the cursor of the last one read is returned when the scan stopped there.
    fn notifications(
        &self,
        recipient: ActorId,
        below: Option<&[u8]>,
        scan_max: usize,
        visit: &mut dyn FnMut(Notification) -> bool,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.notifications_by(recipient, below, scan_max, &|_| true, visit)
    }

    /// [`Store::notifications`] from the authors `shown` accepts only. The others are skipped
    /// before their records are read, so a filter such as "from accounts the recipient
    /// follows" costs an index entry per skipped notification, not a record read; they count
    /// towards `scan_max` as read.
    fn notifications_by(
        &self,
        recipient: ActorId,
        below: Option<&[u8]>,
        scan_max: usize,
        shown: &dyn Fn(ActorId) -> bool,
        visit: &mut dyn FnMut(Notification) -> bool,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        notify::scan(self, recipient, below, scan_max, shown, visit)
    }

    /// How many of `recipient`'s notifications are newer than `seen_us` (all of them when
    /// `None`), counting at most `max`: a scan of at most `max` index entries, whatever the
    /// recipient's total, plus the entries of deleted verifications met on the way (at most
    /// [`OUTLIVING_SCAN_MAX`] of them). Like the reference, those are not unread: a
    /// notification counts only while its record exists, and only they outlive theirs.
    fn unread_notifications(
        &self,
        recipient: ActorId,
        seen_us: Option<i64>,
        max: u32,
    ) -> Result<u32, StoreError> {
        notify::unread(self, recipient, seen_us, max)
    }

    /// Applies private-state operations (from bsync, or a notification seen time) and the
    /// cursor their stream reaches, atomically and durably. `now_us` is the processing time,
    /// recorded as creation times. Calls are serialized with each other and with event batches.
    fn apply_private(
        &self,
        ops: &[PrivateOp],
        now_us: i64,
        cursor: Option<(BsyncStream, &str)>,
    ) -> Result<(), StoreError> {
        PrivateBackend::apply(self, ops, now_us, cursor)
    }

    /// The cursor a bsync stream reached, as bsync gave it.
    fn bsync_cursor(&self, stream: BsyncStream) -> Result<Option<String>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).bsync_cursor(stream)
    }

    /// When `actor` last saw their notifications, in microseconds since the Unix epoch
    /// (`None`: never).
    fn notification_seen(&self, actor: ActorId) -> Result<Option<i64>, StoreError> {
        match self.did(actor) {
            Some(did) => Ok(self.notification_state(&did)?.seen_us),
            None => Ok(None),
        }
    }

    /// The notification seen time and priority setting of the DID `actor`.
    fn notification_state(&self, actor: &str) -> Result<NotificationState, StoreError> {
        PrivateQueries(&mut StoreReads(self)).notification_state(actor)
    }

    /// The notification preferences JSON of the DID `actor`, if set.
    fn notification_preferences(&self, actor: &str) -> Result<Option<String>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).preferences(actor)
    }

    /// How `actor` mutes `subject` (DIDs), if at all.
    fn mute(&self, actor: &str, subject: &str) -> Result<Option<Mute>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).mute(actor, subject)
    }

    /// A page of `actor`'s mutes, newest first; `after` is the previous page's cursor.
    fn mutes(
        &self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Mute>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).mutes(actor, after, limit)
    }

    /// Whether `actor` mutes the list `list` (an AT-URI).
    fn list_muted(&self, actor: &str, list: &str) -> Result<bool, StoreError> {
        PrivateQueries(&mut StoreReads(self)).list_muted(actor, list)
    }

    /// A page of the lists `actor` mutes, newest mute first.
    fn list_mutes(
        &self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<String>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).list_mutes(actor, after, limit)
    }

    /// Whether `actor` mutes the thread under `root` (an AT-URI).
    fn thread_muted(&self, actor: &str, root: &str) -> Result<bool, StoreError> {
        PrivateQueries(&mut StoreReads(self)).thread_muted(actor, root)
    }

    /// A page of `actor`'s bookmarks, newest key first.
    fn bookmarks(
        &self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Bookmark>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).bookmarks(actor, after, limit)
    }

    /// `actor`'s bookmark of the post `subject_uri`, if any.
    fn bookmark(&self, actor: &str, subject_uri: &str) -> Result<Option<Bookmark>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).bookmark(actor, subject_uri)
    }

    /// How many bookmarks the post `subject_uri` has.
    fn bookmark_count(&self, subject_uri: &str) -> Result<u64, StoreError> {
        PrivateQueries(&mut StoreReads(self)).bookmark_count(subject_uri)
    }

    /// A page of `actor`'s activity subscriptions, newest key first.
    fn activity_subscriptions(
        &self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<ActivitySubscription>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).activity_subscriptions(actor, after, limit)
    }

    /// `actor`'s activity subscription to the DID `subject`, if any.
    fn activity_subscription(
        &self,
        actor: &str,
        subject: &str,
    ) -> Result<Option<ActivitySubscription>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).activity_subscription(actor, subject)
    }

    /// How many drafts `actor` has.
    fn draft_count(&self, actor: &str) -> Result<u64, StoreError> {
        PrivateQueries(&mut StoreReads(self)).draft_count(actor)
    }

    /// A page of `actor`'s drafts, most recently updated first.
    fn drafts(
        &self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Draft>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).drafts(actor, after, limit)
    }

    /// The reference of `subject`'s takedown by the operator, if it is taken down.
    fn takedown(&self, subject: &TakedownSubject) -> Result<Option<String>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).takedown(subject)
    }

    /// The upstream status the operator set for the DID `actor`, if any (it holds while the
    /// actor's account sequence is still [`UpstreamStatus::account_seq`]).
    fn upstream_status(&self, actor: &str) -> Result<Option<UpstreamStatus>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).upstream_status(actor)
    }

    /// The labels stored on `subject` (an AT-URI or a DID), expired ones included.
    fn labels(&self, subject: &str) -> Result<Vec<StoredLabel>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).labels(subject)
    }

    /// The sequence the labeler `labeler`'s stream reached.
    fn labeler_cursor(&self, labeler: &str) -> Result<Option<i64>, StoreError> {
        PrivateQueries(&mut StoreReads(self)).labeler_cursor(labeler)
    }
}

/// How a backend keeps private-state rows (`private/`): the rules and every read are written
/// once over these three calls. Rows are named only by this crate ([`PrivateKey`] has no
/// public constructor).
#[doc(hidden)]
pub trait PrivateBackend: Send + Sync {
    /// Works out `ops` with the rules and writes the rows and `cursor` in one atomic step.
    fn apply(
        &self,
        ops: &[PrivateOp],
        now_us: i64,
        cursor: Option<(BsyncStream, &str)>,
    ) -> Result<(), StoreError>;

    /// One row's value.
    fn value(&self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError>;

    /// Up to `limit` rows of `partition`'s partition, clustering keys descending, below
    /// `below` if given.
    fn rows(
        &self,
        partition: &PrivateKey,
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivateRows, StoreError>;
}

/// A store that several `serve` processes (replicas) use at once, as the Cassandra backend is.
///
/// One replica at a time, the holder of the writer lease, writes; the others follow the change
/// log its batches leave, and the one that takes the lease over makes the store ready for its
/// writes first. The protocol itself is `starling_ingest::replica`. The embedded store is never
/// shared: its one process is always the writer.
///
/// Dyn-compatible, so that code generic over [`Store`] can hold the same store as
/// `Arc<dyn SharedStore>` when it is shared.
pub trait SharedStore: Send + Sync {
    /// Renews the writer lease for `ttl` if `owner` holds it, else takes it if nobody does;
    /// whether `owner` holds it now.
    fn try_lease(&self, owner: &str, ttl: Duration) -> Result<bool, StoreError>;

    /// Gives the writer lease up, if `owner` holds it, so the next writer need not wait for
    /// its TTL.
    fn release_lease(&self, owner: &str) -> Result<(), StoreError>;

    /// Makes the store ready for a new writer: finishes the batch the previous writer may have
    /// left half applied, and reloads what the store holds in memory.
    fn recover(&self) -> Result<(), StoreError>;

    /// Visits the change log after sequence `after`, oldest first: per logged batch its
    /// sequence and what it changed (graph, feed, cursor). Returns the last sequence visited
    /// (`after` when there is nothing new).
    fn changes_since(
        &self,
        after: u64,
        visit: &mut dyn FnMut(u64, &Committed),
    ) -> Result<u64, StoreError>;
}

/// A batch of events, applied atomically and durably by [`Batch::commit`].
pub trait Batch {
    /// Whether [`Batch::prefetch`] does anything, so callers can skip preparing for it.
    const PREFETCH: bool = false;

    /// Applies one decoded event.
    fn apply(&mut self, event: &Event<'_>) -> Result<Outcome, StoreError>;

    /// Reads ahead what applying `events` will need, so that [`Batch::apply`] then needs no
    /// round trip per event. A hint: backends that read locally do nothing.
    fn prefetch(&mut self, events: &[Event<'_>]) -> Result<(), StoreError> {
        let _ = events;
        Ok(())
    }

    /// Counts one dropped event.
    fn drop_event(&mut self, reason: DropReason);

    /// Sets where this batch leaves its source.
    fn set_progress(&mut self, progress: Progress);

    /// Records the progress of one more source in this batch, durable with it: `offset`
    /// under `source`, read back by [`Store::progress`] as a `Progress::File` with no cursor.
    /// A batch may carry many (a backfill marks each repository it completes).
    fn add_source_progress(&mut self, source: String, offset: u64);

    /// How many events this batch holds.
    fn len(&self) -> usize;

    /// Whether this batch holds no events.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the batch (durable once the next commit or [`Store::sync`] returns) and returns
    /// the graph and feed changes it made.
    fn commit(self) -> Result<Committed, StoreError>;
}
