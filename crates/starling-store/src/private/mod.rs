//! Each user's private state, as the bsync service streams it: mutes, list mutes, thread mutes,
//! notification seen time, priority and preferences, bookmarks, activity subscriptions and
//! drafts. Written once for both backends, like `apply.rs`: [`PrivateRules`] turns operations
//! plus what [`PrivateReads`] reads into a [`PrivateWrites`] that a backend makes durable in
//! one atomic step, together with the bsync cursor the operations reach.
//!
//! Private rows live apart from records and indexes (the embedded `private` keyspace, the
//! Cassandra `private_state` table). A row's key is a partition (a tag, then the owner's DID,
//! length-prefixed, or the subject URI for a bookmark count) and a clustering key within it;
//! every list query reads one partition, newest first, so a page is one range read on both
//! backends. The rules, as the reference dataplane's bsync subscription applies them:
//! - A mute of an actor is upserted (its flags change, its time stays); a list or thread mute
//!   added twice is one mute; a clear removes the actor's actor and list mutes (not thread
//!   mutes).
//! - The notification seen time only moves forward; a priority operation for an actor with no
//!   state sets the seen time to the operation's processing time, as the reference does.
//! - A bookmark, activity subscription or draft is keyed by its bsync key (a TID); a create
//!   over an existing key replaces it; bookmarks keep a count per subject URI, moved only when
//!   a bookmark appears or goes, so replays never count twice.
//! - Operations are idempotent given the stored state: a replay after a crash (the cursor and
//!   the rows are written together, so it only happens for the batch that was not written)
//!   ends in the same rows.

use crate::StoreError;

mod moderation;
mod queries;
mod rules;

pub use moderation::{
    DEFAULT_TAKEDOWN_REF, LABELS_PER_SUBJECT_MAX, Label, StoredLabel, TakedownSubject,
    UpstreamStatus,
};

pub(crate) use queries::PrivateQueries;
pub(crate) use rules::{PrivateReads, PrivateRules, PrivateWrites};

/// Tags: the first byte of a private row's partition.
mod tag {
    /// Actor mutes by subject: owner, subject DID -> time (8), flags (1).
    pub(super) const MUTE: u8 = b'm';
    /// Actor mutes by time: owner, time (8) ‖ subject DID -> flags (1).
    pub(super) const MUTE_BY_TIME: u8 = b'o';
    /// List mutes by list: owner, list URI -> time (8).
    pub(super) const LIST_MUTE: u8 = b'L';
    /// List mutes by time: owner, time (8) ‖ list URI -> empty.
    pub(super) const LIST_MUTE_BY_TIME: u8 = b'l';
    /// Thread mutes: owner, root URI -> empty.
    pub(super) const THREAD_MUTE: u8 = b't';
    /// Notification state: owner -> flags (1), seen time (8).
    pub(super) const NOTIFICATION_STATE: u8 = b's';
    /// Notification preferences: owner -> the JSON bsync stored.
    pub(super) const PREFERENCES: u8 = b'p';
    /// Bookmarks by key: owner, key -> time (8), CID length (2), CID, subject URI.
    pub(super) const BOOKMARK: u8 = b'b';
    /// Bookmarks by subject: owner, subject URI -> key.
    pub(super) const BOOKMARK_BY_SUBJECT: u8 = b'B';
    /// Bookmark counts: subject URI -> u64.
    pub(super) const BOOKMARK_COUNT: u8 = b'c';
    /// Activity subscriptions by key: owner, key -> flags (1), subject DID.
    pub(super) const ACTIVITY: u8 = b'a';
    /// Activity subscriptions by subject: owner, subject DID -> flags (1), key.
    pub(super) const ACTIVITY_BY_SUBJECT: u8 = b'A';
    /// Activity subscribers: subject DID, owner DID -> flags (1); who a new post notifies.
    pub(super) const SUBSCRIBER: u8 = b'S';
    /// Drafts by key: owner, key -> created (8), updated (8), payload.
    pub(super) const DRAFT: u8 = b'd';
    /// Drafts by update time: owner, updated (8) ‖ key -> empty.
    pub(super) const DRAFT_BY_TIME: u8 = b'D';
    /// Draft counts: owner -> u64.
    pub(super) const DRAFT_COUNT: u8 = b'e';
    /// bsync cursors: stream name -> the cursor bsync gave.
    pub(super) const CURSOR: u8 = b'Y';
}

/// Bytes of a private row's DID, URI or key at most (longer ones are refused by the decoder
/// before they get here; DIDs are at most 2 KiB by the AT Protocol's syntax).
pub const PRIVATE_TEXT_BYTES_MAX: usize = 8 * 1024;
/// Bytes of a draft or preferences payload at most.
pub const PRIVATE_PAYLOAD_BYTES_MAX: usize = 256 * 1024;
/// Mutes of one actor a clear removes in one operation; the rest stay (counted as dropped by
/// the caller). bsync itself lists every mute of an actor to clear them.
const CLEAR_ROWS_MAX: usize = 100_000;

/// Rows of one partition: clustering key and value.
pub type PrivateRows = Vec<(Vec<u8>, Vec<u8>)>;

/// The key of a private row: a partition and a clustering key within it. Built only by this
/// crate; other crates name rows through the [`crate::Store`] methods.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrivateKey {
    pub(crate) partition: Vec<u8>,
    pub(crate) clustering: Vec<u8>,
}

impl PrivateKey {
    /// The whole key, for a key-value engine: the partition is self-delimiting (a length-prefixed
    /// DID or a whole-key URI partition that is never scanned), so partitions never interleave.
    pub(crate) fn flat(&self) -> Vec<u8> {
        [&self.partition[..], &self.clustering[..]].concat()
    }
}

/// A partition: `tag`, then the DID length (2 bytes) and the DID.
fn partition(row_tag: u8, did: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + did.len());
    out.push(row_tag);
    out.extend_from_slice(&(did.len() as u16).to_be_bytes());
    out.extend_from_slice(did.as_bytes());
    out
}

fn key(row_tag: u8, did: &str, clustering: Vec<u8>) -> PrivateKey {
    PrivateKey {
        partition: partition(row_tag, did),
        clustering,
    }
}

fn timed(time_us: i64, rest: &[u8]) -> Vec<u8> {
    // Sign bit flipped so byte order is numeric order for negative times too.
    [&((time_us as u64) ^ (1 << 63)).to_be_bytes()[..], rest].concat()
}

fn time_of<'b>(bytes: &'b [u8], key: &PrivateKey) -> Result<(i64, &'b [u8]), StoreError> {
    let (time, rest) = bytes
        .split_first_chunk::<8>()
        .ok_or_else(|| corrupt("a time", key))?;
    Ok(((u64::from_be_bytes(*time) ^ (1 << 63)) as i64, rest))
}

fn corrupt(what: &str, key: &PrivateKey) -> StoreError {
    StoreError::corrupt(format!("private row: {what}"), &key.flat())
}

fn text(bytes: &[u8], key: &PrivateKey) -> Result<String, StoreError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| corrupt("text is not UTF-8", key))
}

/// The three bsync streams, each with its own cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BsyncStream {
    /// `ScanMuteOperations`.
    Mutes,
    /// `ScanNotifOperations`.
    Notifications,
    /// `ScanOperations` (bookmarks, drafts, activity subscriptions, preferences).
    Operations,
}

impl BsyncStream {
    /// Every stream.
    pub const ALL: [BsyncStream; 3] = [
        BsyncStream::Mutes,
        BsyncStream::Notifications,
        BsyncStream::Operations,
    ];

    /// The stream's name in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            BsyncStream::Mutes => "mutes",
            BsyncStream::Notifications => "notifications",
            BsyncStream::Operations => "operations",
        }
    }

    fn cursor_key(self) -> PrivateKey {
        PrivateKey {
            partition: vec![tag::CURSOR],
            clustering: self.as_str().as_bytes().to_vec(),
        }
    }
}

/// One operation on private state, decoded and validated (DIDs, URIs, keys, sizes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrivateOp {
    /// `actor` mutes the account `subject` (entirely, or only its reposts or quote posts).
    MuteActor {
        /// Who mutes.
        actor: String,
        /// The muted DID.
        subject: String,
        /// Only reposts are muted.
        only_reposts: bool,
        /// Only quote posts are muted.
        only_quoteposts: bool,
    },
    /// `actor` no longer mutes `subject`.
    UnmuteActor {
        /// Who mutes.
        actor: String,
        /// The muted DID.
        subject: String,
    },
    /// `actor` mutes the accounts of a list.
    MuteList {
        /// Who mutes.
        actor: String,
        /// The list's AT-URI.
        list: String,
    },
    /// `actor` no longer mutes a list.
    UnmuteList {
        /// Who mutes.
        actor: String,
        /// The list's AT-URI.
        list: String,
    },
    /// `actor` mutes the thread under `root`.
    MuteThread {
        /// Who mutes.
        actor: String,
        /// The thread root's AT-URI.
        root: String,
    },
    /// `actor` no longer mutes the thread under `root`.
    UnmuteThread {
        /// Who mutes.
        actor: String,
        /// The thread root's AT-URI.
        root: String,
    },
    /// `actor`'s actor and list mutes are all removed.
    ClearMutes {
        /// Whose.
        actor: String,
    },
    /// `actor` saw notifications up to `seen_us`.
    NotificationSeen {
        /// Whose.
        actor: String,
        /// Microseconds since the Unix epoch.
        seen_us: i64,
    },
    /// `actor` asks for priority notifications only, or not.
    NotificationPriority {
        /// Whose.
        actor: String,
        /// On or off.
        priority: bool,
    },
    /// `actor`'s notification preferences, as JSON (`app.bsky.notification.defs#preferences`).
    PutPreferences {
        /// Whose.
        actor: String,
        /// The JSON.
        json: String,
    },
    /// `actor`'s notification preferences are removed.
    DeletePreferences {
        /// Whose.
        actor: String,
    },
    /// `actor` bookmarks a post.
    PutBookmark {
        /// Whose.
        actor: String,
        /// The bsync key.
        key: String,
        /// The post's AT-URI.
        subject_uri: String,
        /// The post's CID.
        subject_cid: String,
    },
    /// A bookmark is removed.
    DeleteBookmark {
        /// Whose.
        actor: String,
        /// The bsync key.
        key: String,
    },
    /// `actor` subscribes to `subject`'s posts or replies (a create, or an update of `key`).
    PutActivitySubscription {
        /// Whose.
        actor: String,
        /// The bsync key.
        key: String,
        /// The account subscribed to.
        subject: String,
        /// Posts.
        post: bool,
        /// Replies.
        reply: bool,
        /// An update keeps the subject of the stored subscription.
        update: bool,
    },
    /// An activity subscription is removed.
    DeleteActivitySubscription {
        /// Whose.
        actor: String,
        /// The bsync key.
        key: String,
    },
    /// A draft is created or updated.
    PutDraft {
        /// Whose.
        actor: String,
        /// The bsync key.
        key: String,
        /// The JSON payload.
        json: String,
        /// An update keeps the creation time.
        update: bool,
    },
    /// A draft is removed.
    DeleteDraft {
        /// Whose.
        actor: String,
        /// The bsync key.
        key: String,
    },
    /// The operator takes `subject` down (`reference` empty: [`DEFAULT_TAKEDOWN_REF`]).
    Takedown {
        /// What is taken down.
        subject: TakedownSubject,
        /// The moderation reference kept with it.
        reference: String,
    },
    /// The operator lifts the takedown of `subject`.
    Untakedown {
        /// What was taken down.
        subject: TakedownSubject,
    },
    /// The operator sets `actor`'s upstream status, until its next `#account` event.
    SetUpstreamStatus {
        /// The DID.
        actor: String,
        /// The status (empty: active).
        status: String,
        /// The actor's account sequence now.
        account_seq: u64,
    },
    /// A label from a labeler: stored, or removed by a negation.
    Label(Label),
    /// The sequence a labeler's stream reached.
    LabelerCursor {
        /// The labeler's DID.
        labeler: String,
        /// The `seq` of its newest frame applied.
        seq: i64,
    },
}

fn u64_of(bytes: &[u8], key: &PrivateKey) -> Result<u64, StoreError> {
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| corrupt("a count", key))?;
    Ok(u64::from_be_bytes(bytes))
}

fn bookmark_count_key(subject_uri: &str) -> PrivateKey {
    PrivateKey {
        partition: [&[tag::BOOKMARK_COUNT][..], subject_uri.as_bytes()].concat(),
        clustering: Vec::new(),
    }
}

/// An actor's notification state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotificationState {
    /// When the actor last saw notifications, in microseconds since the Unix epoch.
    pub seen_us: Option<i64>,
    /// Whether the actor asked for priority notifications only.
    pub priority: bool,
}

fn encode_notification_state(state: &NotificationState) -> Vec<u8> {
    let flags = u8::from(state.seen_us.is_some()) | u8::from(state.priority) << 1;
    timed(state.seen_us.unwrap_or(0), &[flags])
}

fn decode_notification_state(
    bytes: &[u8],
    key: &PrivateKey,
) -> Result<NotificationState, StoreError> {
    let (seen_us, rest) = time_of(bytes, key)?;
    let &[flags] = rest else {
        return Err(corrupt("notification state flags", key));
    };
    Ok(NotificationState {
        seen_us: (flags & 1 != 0).then_some(seen_us),
        priority: flags & 2 != 0,
    })
}

/// How an actor mutes another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mute {
    /// The muted DID.
    pub subject: String,
    /// When the mute was first applied, in microseconds.
    pub created_us: i64,
    /// Only reposts are muted.
    pub only_reposts: bool,
    /// Only quote posts are muted.
    pub only_quoteposts: bool,
}

/// A bookmark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bookmark {
    /// The bsync key.
    pub key: String,
    /// The post's AT-URI.
    pub subject_uri: String,
    /// The post's CID.
    pub subject_cid: String,
    /// When it was indexed, in microseconds.
    pub indexed_us: i64,
}

fn decode_bookmark(
    bookmark_key: &str,
    bytes: &[u8],
    key: &PrivateKey,
) -> Result<Bookmark, StoreError> {
    let (indexed_us, rest) = time_of(bytes, key)?;
    let (len, rest) = rest
        .split_first_chunk::<2>()
        .ok_or_else(|| corrupt("a bookmark CID length", key))?;
    let len = usize::from(u16::from_be_bytes(*len));
    let (cid, uri) = rest
        .split_at_checked(len)
        .ok_or_else(|| corrupt("a bookmark CID", key))?;
    Ok(Bookmark {
        key: bookmark_key.to_owned(),
        subject_uri: text(uri, key)?,
        subject_cid: text(cid, key)?,
        indexed_us,
    })
}

/// An activity subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivitySubscription {
    /// The bsync key.
    pub key: String,
    /// The account subscribed to.
    pub subject: String,
    /// Posts.
    pub post: bool,
    /// Replies.
    pub reply: bool,
}

fn decode_activity(
    activity_key: &str,
    bytes: &[u8],
    key: &PrivateKey,
) -> Result<ActivitySubscription, StoreError> {
    let (&flags, subject) = bytes
        .split_first()
        .ok_or_else(|| corrupt("activity subscription flags", key))?;
    Ok(ActivitySubscription {
        key: activity_key.to_owned(),
        subject: text(subject, key)?,
        post: flags & 1 != 0,
        reply: flags & 2 != 0,
    })
}

/// An account subscribed to another's activity, as a new post of that account reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Subscriber {
    /// The subscriber's DID.
    pub(crate) did: String,
    /// Posts.
    pub(crate) post: bool,
    /// Replies.
    pub(crate) reply: bool,
}

/// A draft.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draft {
    /// The bsync key.
    pub key: String,
    /// The JSON payload.
    pub json: String,
    /// When it was created, in microseconds.
    pub created_us: i64,
    /// When it was last updated, in microseconds.
    pub updated_us: i64,
}

fn decode_draft(draft_key: &str, bytes: &[u8], key: &PrivateKey) -> Result<Draft, StoreError> {
    let (created_us, rest) = time_of(bytes, key)?;
    let (updated_us, json) = time_of(rest, key)?;
    Ok(Draft {
        key: draft_key.to_owned(),
        json: text(json, key)?,
        created_us,
        updated_us,
    })
}

/// A page of a private list, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrivatePage<T> {
    /// The items.
    pub items: Vec<T>,
    /// Where the next page starts (opaque bytes), if there may be one.
    pub cursor: Option<Vec<u8>>,
}

/// [`PrivateReads`] over a backend's row reads.
pub(crate) struct StoreReads<'s, B: crate::PrivateBackend + ?Sized>(pub(crate) &'s B);

impl<B: crate::PrivateBackend + ?Sized> PrivateReads for StoreReads<'_, B> {
    fn get(&mut self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.value(key)
    }

    fn scan(
        &mut self,
        partition: &[u8],
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivateRows, StoreError> {
        let partition = PrivateKey {
            partition: partition.to_vec(),
            clustering: Vec::new(),
        };
        self.0.rows(&partition, below, limit)
    }
}

/// Works out `ops` over `backend`'s stored rows: the rows to write, with `cursor`'s.
pub(crate) fn decide(
    backend: &(impl crate::PrivateBackend + ?Sized),
    ops: &[crate::PrivateOp],
    now_us: i64,
    cursor: Option<(BsyncStream, &str)>,
) -> Result<PrivateWrites, StoreError> {
    let mut reads = StoreReads(backend);
    let mut rules = PrivateRules::new(&mut reads, now_us);
    for op in ops {
        rules.apply(op)?;
    }
    Ok(rules.finish(cursor))
}
