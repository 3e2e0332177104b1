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

use rustc_hash::FxHashMap;

use crate::StoreError;

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
    /// Drafts by key: owner, key -> created (8), updated (8), payload.
    pub(super) const DRAFT: u8 = b'd';
    /// Drafts by update time: owner, updated (8) ‖ key -> empty.
    pub(super) const DRAFT_BY_TIME: u8 = b'D';
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
}

/// What the rules read of stored private state.
pub(crate) trait PrivateReads {
    /// A row's value, if stored.
    fn get(&mut self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError>;

    /// Up to `limit` rows of a partition, clustering keys descending, below `below` if given.
    fn scan(
        &mut self,
        partition: &[u8],
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError>;
}

/// Rows to write (`Some`) or remove (`None`), in one atomic step.
pub(crate) type PrivateWrites = Vec<(PrivateKey, Option<Vec<u8>>)>;

/// A batch of private operations' decisions: rows written so far, over the stored state.
pub(crate) struct PrivateRules<'r, R: PrivateReads> {
    reads: &'r mut R,
    now_us: i64,
    rows: FxHashMap<PrivateKey, Option<Vec<u8>>>,
    order: Vec<PrivateKey>,
}

impl<'r, R: PrivateReads> PrivateRules<'r, R> {
    /// Starts a batch: `now_us` is the processing time the rules record as creation times.
    pub(crate) fn new(reads: &'r mut R, now_us: i64) -> PrivateRules<'r, R> {
        PrivateRules {
            reads,
            now_us,
            rows: FxHashMap::default(),
            order: Vec::new(),
        }
    }

    /// The rows decided, and the cursor `cursor` reached by `stream`, if given.
    pub(crate) fn finish(mut self, cursor: Option<(BsyncStream, &str)>) -> PrivateWrites {
        if let Some((stream, cursor)) = cursor {
            self.put(stream.cursor_key(), cursor.as_bytes().to_vec());
        }
        let mut rows = self.rows;
        self.order
            .into_iter()
            .filter_map(|key| rows.remove_entry(&key))
            .collect()
    }

    fn get(&mut self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError> {
        match self.rows.get(key) {
            Some(value) => Ok(value.clone()),
            None => self.reads.get(key),
        }
    }

    fn set(&mut self, key: PrivateKey, value: Option<Vec<u8>>) {
        if self.rows.insert(key.clone(), value).is_none() {
            self.order.push(key);
        }
    }

    fn put(&mut self, key: PrivateKey, value: Vec<u8>) {
        self.set(key, Some(value));
    }

    fn remove(&mut self, key: PrivateKey) {
        self.set(key, None);
    }

    /// Applies one operation.
    pub(crate) fn apply(&mut self, op: &PrivateOp) -> Result<(), StoreError> {
        match op {
            PrivateOp::MuteActor {
                actor,
                subject,
                only_reposts,
                only_quoteposts,
            } => {
                let flags = u8::from(*only_reposts) | u8::from(*only_quoteposts) << 1;
                self.mute_actor(actor, subject, Some(flags))
            }
            PrivateOp::UnmuteActor { actor, subject } => self.mute_actor(actor, subject, None),
            PrivateOp::MuteList { actor, list } => self.mute_list(actor, list, true),
            PrivateOp::UnmuteList { actor, list } => self.mute_list(actor, list, false),
            PrivateOp::MuteThread { actor, root } => {
                self.put(
                    key(tag::THREAD_MUTE, actor, root.as_bytes().to_vec()),
                    Vec::new(),
                );
                Ok(())
            }
            PrivateOp::UnmuteThread { actor, root } => {
                self.remove(key(tag::THREAD_MUTE, actor, root.as_bytes().to_vec()));
                Ok(())
            }
            PrivateOp::ClearMutes { actor } => self.clear_mutes(actor),
            PrivateOp::NotificationSeen { actor, seen_us } => {
                self.notification_state(actor, Some(*seen_us), None)
            }
            PrivateOp::NotificationPriority { actor, priority } => {
                self.notification_state(actor, None, Some(*priority))
            }
            PrivateOp::PutPreferences { actor, json } => {
                self.put(
                    key(tag::PREFERENCES, actor, Vec::new()),
                    json.as_bytes().to_vec(),
                );
                Ok(())
            }
            PrivateOp::DeletePreferences { actor } => {
                self.remove(key(tag::PREFERENCES, actor, Vec::new()));
                Ok(())
            }
            PrivateOp::PutBookmark {
                actor,
                key: bookmark_key,
                subject_uri,
                subject_cid,
            } => self.put_bookmark(actor, bookmark_key, subject_uri, subject_cid),
            PrivateOp::DeleteBookmark { actor, key } => self.delete_bookmark(actor, key),
            PrivateOp::PutActivitySubscription {
                actor,
                key,
                subject,
                post,
                reply,
                update,
            } => self.put_activity(actor, key, subject, *post, *reply, *update),
            PrivateOp::DeleteActivitySubscription { actor, key } => {
                self.delete_activity(actor, key)
            }
            PrivateOp::PutDraft {
                actor,
                key,
                json,
                update,
            } => self.put_draft(actor, key, json, *update),
            PrivateOp::DeleteDraft { actor, key } => self.delete_draft(actor, key),
        }
    }

    /// Upserts (`Some(flags)`) or removes a mute of `subject` by `actor`.
    fn mute_actor(
        &mut self,
        actor: &str,
        subject: &str,
        flags: Option<u8>,
    ) -> Result<(), StoreError> {
        let point = key(tag::MUTE, actor, subject.as_bytes().to_vec());
        let stored = match self.get(&point)? {
            Some(value) => Some(time_of(&value, &point)?.0),
            None => None,
        };
        if let Some(time_us) = stored {
            self.remove(key(
                tag::MUTE_BY_TIME,
                actor,
                timed(time_us, subject.as_bytes()),
            ));
        }
        match flags {
            Some(flags) => {
                let time_us = stored.unwrap_or(self.now_us);
                self.put(point, timed(time_us, &[flags]));
                let by_time = key(tag::MUTE_BY_TIME, actor, timed(time_us, subject.as_bytes()));
                self.put(by_time, vec![flags]);
            }
            None => self.remove(point),
        }
        Ok(())
    }

    fn mute_list(&mut self, actor: &str, list: &str, mute: bool) -> Result<(), StoreError> {
        let point = key(tag::LIST_MUTE, actor, list.as_bytes().to_vec());
        let stored = match self.get(&point)? {
            Some(value) => Some(time_of(&value, &point)?.0),
            None => None,
        };
        match (stored, mute) {
            (Some(_), true) | (None, false) => {}
            (None, true) => {
                self.put(point, timed(self.now_us, &[]));
                let by_time = key(
                    tag::LIST_MUTE_BY_TIME,
                    actor,
                    timed(self.now_us, list.as_bytes()),
                );
                self.put(by_time, Vec::new());
            }
            (Some(time_us), false) => {
                self.remove(point);
                self.remove(key(
                    tag::LIST_MUTE_BY_TIME,
                    actor,
                    timed(time_us, list.as_bytes()),
                ));
            }
        }
        Ok(())
    }

    /// The clustering keys of a partition, stored and written by this batch, minus removals.
    fn partition_keys(&mut self, partition: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut keys: Vec<Vec<u8>> = self
            .reads
            .scan(partition, None, CLEAR_ROWS_MAX)?
            .into_iter()
            .map(|(clustering, _)| clustering)
            .collect();
        for (row, value) in &self.rows {
            if row.partition == partition && value.is_some() {
                keys.push(row.clustering.clone());
            }
        }
        keys.sort_unstable();
        keys.dedup();
        keys.retain(|clustering| {
            let row = PrivateKey {
                partition: partition.to_vec(),
                clustering: clustering.clone(),
            };
            !matches!(self.rows.get(&row), Some(None))
        });
        Ok(keys)
    }

    fn clear_mutes(&mut self, actor: &str) -> Result<(), StoreError> {
        for subject in self.partition_keys(&partition(tag::MUTE, actor))? {
            let subject = text(&subject, &key(tag::MUTE, actor, subject.clone()))?;
            self.mute_actor(actor, &subject, None)?;
        }
        for list in self.partition_keys(&partition(tag::LIST_MUTE, actor))? {
            let list = text(&list, &key(tag::LIST_MUTE, actor, list.clone()))?;
            self.mute_list(actor, &list, false)?;
        }
        Ok(())
    }

    fn notification_state(
        &mut self,
        actor: &str,
        seen_us: Option<i64>,
        priority: Option<bool>,
    ) -> Result<(), StoreError> {
        let row = key(tag::NOTIFICATION_STATE, actor, Vec::new());
        let stored = match self.get(&row)? {
            Some(value) => Some(decode_notification_state(&value, &row)?),
            None => None,
        };
        let state = match stored {
            Some(mut state) => {
                if let Some(seen_us) = seen_us {
                    state.seen_us = Some(state.seen_us.map_or(seen_us, |old| old.max(seen_us)));
                }
                if let Some(priority) = priority {
                    state.priority = priority;
                }
                state
            }
            None => NotificationState {
                seen_us: Some(seen_us.unwrap_or(self.now_us)),
                priority: priority.unwrap_or(false),
            },
        };
        self.put(row, encode_notification_state(&state));
        Ok(())
    }

    fn put_bookmark(
        &mut self,
        actor: &str,
        bookmark_key: &str,
        subject_uri: &str,
        subject_cid: &str,
    ) -> Result<(), StoreError> {
        self.delete_bookmark(actor, bookmark_key)?;
        // One bookmark per subject: a second key for the same post replaces the first.
        let by_subject = key(
            tag::BOOKMARK_BY_SUBJECT,
            actor,
            subject_uri.as_bytes().to_vec(),
        );
        if let Some(old_key) = self.get(&by_subject)? {
            let old_key = text(&old_key, &by_subject)?;
            self.delete_bookmark(actor, &old_key)?;
        }
        let mut value = timed(self.now_us, &(subject_cid.len() as u16).to_be_bytes());
        value.extend_from_slice(subject_cid.as_bytes());
        value.extend_from_slice(subject_uri.as_bytes());
        self.put(
            key(tag::BOOKMARK, actor, bookmark_key.as_bytes().to_vec()),
            value,
        );
        self.put(by_subject, bookmark_key.as_bytes().to_vec());
        self.move_bookmark_count(subject_uri, 1)
    }

    fn delete_bookmark(&mut self, actor: &str, bookmark_key: &str) -> Result<(), StoreError> {
        let row = key(tag::BOOKMARK, actor, bookmark_key.as_bytes().to_vec());
        let Some(value) = self.get(&row)? else {
            return Ok(());
        };
        let bookmark = decode_bookmark(bookmark_key, &value, &row)?;
        self.remove(row);
        self.remove(key(
            tag::BOOKMARK_BY_SUBJECT,
            actor,
            bookmark.subject_uri.as_bytes().to_vec(),
        ));
        self.move_bookmark_count(&bookmark.subject_uri, -1)
    }

    fn move_bookmark_count(&mut self, subject_uri: &str, delta: i64) -> Result<(), StoreError> {
        let row = bookmark_count_key(subject_uri);
        let stored = match self.get(&row)? {
            Some(value) => u64_of(&value, &row)?,
            None => 0,
        };
        let count = stored
            .checked_add_signed(delta)
            .ok_or_else(|| corrupt("a bookmark count would go below zero", &row))?;
        if count == 0 {
            self.remove(row);
        } else {
            self.put(row, count.to_be_bytes().to_vec());
        }
        Ok(())
    }

    fn put_activity(
        &mut self,
        actor: &str,
        activity_key: &str,
        subject: &str,
        post: bool,
        reply: bool,
        update: bool,
    ) -> Result<(), StoreError> {
        let row = key(tag::ACTIVITY, actor, activity_key.as_bytes().to_vec());
        let stored = match self.get(&row)? {
            Some(value) => Some(decode_activity(activity_key, &value, &row)?),
            None => None,
        };
        // An update keeps the stored subject; one of an unknown key changes nothing, as in the
        // reference's UPDATE statement.
        let subject = match (&stored, update) {
            (Some(stored), true) => stored.subject.clone(),
            (None, true) => return Ok(()),
            (_, false) => subject.to_owned(),
        };
        if let Some(stored) = &stored {
            self.remove(key(
                tag::ACTIVITY_BY_SUBJECT,
                actor,
                stored.subject.as_bytes().to_vec(),
            ));
        }
        let flags = u8::from(post) | u8::from(reply) << 1;
        self.put(row, [&[flags][..], subject.as_bytes()].concat());
        let by_subject = key(tag::ACTIVITY_BY_SUBJECT, actor, subject.as_bytes().to_vec());
        self.put(by_subject, [&[flags][..], activity_key.as_bytes()].concat());
        Ok(())
    }

    fn delete_activity(&mut self, actor: &str, activity_key: &str) -> Result<(), StoreError> {
        let row = key(tag::ACTIVITY, actor, activity_key.as_bytes().to_vec());
        let Some(value) = self.get(&row)? else {
            return Ok(());
        };
        let stored = decode_activity(activity_key, &value, &row)?;
        self.remove(row);
        let by_subject = key(
            tag::ACTIVITY_BY_SUBJECT,
            actor,
            stored.subject.as_bytes().to_vec(),
        );
        // Only if it still points at this key (a later subscription may have replaced it).
        if let Some(value) = self.get(&by_subject)?
            && value.get(1..) == Some(activity_key.as_bytes())
        {
            self.remove(by_subject);
        }
        Ok(())
    }

    fn put_draft(
        &mut self,
        actor: &str,
        draft_key: &str,
        json: &str,
        update: bool,
    ) -> Result<(), StoreError> {
        let row = key(tag::DRAFT, actor, draft_key.as_bytes().to_vec());
        let stored = match self.get(&row)? {
            Some(value) => Some(decode_draft(draft_key, &value, &row)?),
            None => None,
        };
        if update && stored.is_none() {
            return Ok(());
        }
        let created_us = stored
            .as_ref()
            .map_or(self.now_us, |draft| draft.created_us);
        if let Some(stored) = &stored {
            let by_time = timed(stored.updated_us, draft_key.as_bytes());
            self.remove(key(tag::DRAFT_BY_TIME, actor, by_time));
        }
        let mut value = timed(created_us, &[]);
        value.extend_from_slice(&timed(self.now_us, json.as_bytes()));
        self.put(row, value);
        let by_time = timed(self.now_us, draft_key.as_bytes());
        self.put(key(tag::DRAFT_BY_TIME, actor, by_time), Vec::new());
        Ok(())
    }

    fn delete_draft(&mut self, actor: &str, draft_key: &str) -> Result<(), StoreError> {
        let row = key(tag::DRAFT, actor, draft_key.as_bytes().to_vec());
        let Some(value) = self.get(&row)? else {
            return Ok(());
        };
        let stored = decode_draft(draft_key, &value, &row)?;
        self.remove(row);
        let by_time = timed(stored.updated_us, draft_key.as_bytes());
        self.remove(key(tag::DRAFT_BY_TIME, actor, by_time));
        Ok(())
    }
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

/// The private-state reads, for [`crate::Store`]: answered from two backend calls.
pub(crate) struct PrivateQueries<'r, R: PrivateReads>(pub(crate) &'r mut R);

impl<R: PrivateReads> PrivateQueries<'_, R> {
    fn page<T>(
        &mut self,
        partition: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        mut item: impl FnMut(&[u8], &[u8]) -> Result<T, StoreError>,
    ) -> Result<PrivatePage<T>, StoreError> {
        let rows = self.0.scan(partition, after, limit)?;
        let cursor = match rows.last() {
            Some((clustering, _)) if rows.len() == limit => Some(clustering.clone()),
            _ => None,
        };
        let items = rows
            .iter()
            .map(|(clustering, value)| item(clustering, value))
            .collect::<Result<_, _>>()?;
        Ok(PrivatePage { items, cursor })
    }

    /// The bsync cursor of `stream`.
    pub(crate) fn bsync_cursor(
        &mut self,
        stream: BsyncStream,
    ) -> Result<Option<String>, StoreError> {
        let row = stream.cursor_key();
        self.0
            .get(&row)?
            .map(|bytes| text(&bytes, &row))
            .transpose()
    }

    /// `actor`'s notification state (default: never seen, no priority).
    pub(crate) fn notification_state(
        &mut self,
        actor: &str,
    ) -> Result<NotificationState, StoreError> {
        let row = key(tag::NOTIFICATION_STATE, actor, Vec::new());
        match self.0.get(&row)? {
            Some(bytes) => decode_notification_state(&bytes, &row),
            None => Ok(NotificationState::default()),
        }
    }

    /// `actor`'s notification preferences JSON.
    pub(crate) fn preferences(&mut self, actor: &str) -> Result<Option<String>, StoreError> {
        let row = key(tag::PREFERENCES, actor, Vec::new());
        self.0
            .get(&row)?
            .map(|bytes| text(&bytes, &row))
            .transpose()
    }

    /// How `actor` mutes `subject`, if at all.
    pub(crate) fn mute(&mut self, actor: &str, subject: &str) -> Result<Option<Mute>, StoreError> {
        let row = key(tag::MUTE, actor, subject.as_bytes().to_vec());
        let Some(bytes) = self.0.get(&row)? else {
            return Ok(None);
        };
        let (created_us, rest) = time_of(&bytes, &row)?;
        let &[flags] = rest else {
            return Err(corrupt("mute flags", &row));
        };
        Ok(Some(Mute {
            subject: subject.to_owned(),
            created_us,
            only_reposts: flags & 1 != 0,
            only_quoteposts: flags & 2 != 0,
        }))
    }

    /// `actor`'s mutes, newest first.
    pub(crate) fn mutes(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Mute>, StoreError> {
        let part = partition(tag::MUTE_BY_TIME, actor);
        self.page(&part, after, limit, |clustering, value| {
            let row = key(tag::MUTE_BY_TIME, actor, clustering.to_vec());
            let (created_us, subject) = time_of(clustering, &row)?;
            let &[flags] = value else {
                return Err(corrupt("mute flags", &row));
            };
            Ok(Mute {
                subject: text(subject, &row)?,
                created_us,
                only_reposts: flags & 1 != 0,
                only_quoteposts: flags & 2 != 0,
            })
        })
    }

    /// Whether `actor` mutes the list `list`.
    pub(crate) fn list_muted(&mut self, actor: &str, list: &str) -> Result<bool, StoreError> {
        Ok(self
            .0
            .get(&key(tag::LIST_MUTE, actor, list.as_bytes().to_vec()))?
            .is_some())
    }

    /// The lists `actor` mutes, newest mute first.
    pub(crate) fn list_mutes(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<String>, StoreError> {
        let part = partition(tag::LIST_MUTE_BY_TIME, actor);
        self.page(&part, after, limit, |clustering, _| {
            let row = key(tag::LIST_MUTE_BY_TIME, actor, clustering.to_vec());
            let (_, list) = time_of(clustering, &row)?;
            text(list, &row)
        })
    }

    /// Whether `actor` mutes the thread under `root`.
    pub(crate) fn thread_muted(&mut self, actor: &str, root: &str) -> Result<bool, StoreError> {
        Ok(self
            .0
            .get(&key(tag::THREAD_MUTE, actor, root.as_bytes().to_vec()))?
            .is_some())
    }

    /// `actor`'s bookmarks, newest key first.
    pub(crate) fn bookmarks(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Bookmark>, StoreError> {
        let part = partition(tag::BOOKMARK, actor);
        self.page(&part, after, limit, |clustering, value| {
            let row = key(tag::BOOKMARK, actor, clustering.to_vec());
            decode_bookmark(&text(clustering, &row)?, value, &row)
        })
    }

    /// `actor`'s bookmark of the post `subject_uri`, if any.
    pub(crate) fn bookmark(
        &mut self,
        actor: &str,
        subject_uri: &str,
    ) -> Result<Option<Bookmark>, StoreError> {
        let by_subject = key(
            tag::BOOKMARK_BY_SUBJECT,
            actor,
            subject_uri.as_bytes().to_vec(),
        );
        let Some(bookmark_key) = self.0.get(&by_subject)? else {
            return Ok(None);
        };
        let row = key(tag::BOOKMARK, actor, bookmark_key.clone());
        let Some(value) = self.0.get(&row)? else {
            return Err(corrupt(
                "a bookmark by subject names no bookmark",
                &by_subject,
            ));
        };
        decode_bookmark(&text(&bookmark_key, &row)?, &value, &row).map(Some)
    }

    /// Bookmarks of the post `subject_uri`.
    pub(crate) fn bookmark_count(&mut self, subject_uri: &str) -> Result<u64, StoreError> {
        let row = bookmark_count_key(subject_uri);
        match self.0.get(&row)? {
            Some(bytes) => u64_of(&bytes, &row),
            None => Ok(0),
        }
    }

    /// `actor`'s activity subscriptions, newest key first.
    pub(crate) fn activity_subscriptions(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<ActivitySubscription>, StoreError> {
        let part = partition(tag::ACTIVITY, actor);
        self.page(&part, after, limit, |clustering, value| {
            let row = key(tag::ACTIVITY, actor, clustering.to_vec());
            decode_activity(&text(clustering, &row)?, value, &row)
        })
    }

    /// `actor`'s activity subscription to `subject`, if any.
    pub(crate) fn activity_subscription(
        &mut self,
        actor: &str,
        subject: &str,
    ) -> Result<Option<ActivitySubscription>, StoreError> {
        let row = key(tag::ACTIVITY_BY_SUBJECT, actor, subject.as_bytes().to_vec());
        let Some(value) = self.0.get(&row)? else {
            return Ok(None);
        };
        let (&flags, activity_key) = value
            .split_first()
            .ok_or_else(|| corrupt("activity subscription flags", &row))?;
        Ok(Some(ActivitySubscription {
            key: text(activity_key, &row)?,
            subject: subject.to_owned(),
            post: flags & 1 != 0,
            reply: flags & 2 != 0,
        }))
    }

    /// `actor`'s drafts, most recently updated first.
    pub(crate) fn drafts(
        &mut self,
        actor: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivatePage<Draft>, StoreError> {
        let part = partition(tag::DRAFT_BY_TIME, actor);
        let page = self.page(&part, after, limit, |clustering, _| {
            let row = key(tag::DRAFT_BY_TIME, actor, clustering.to_vec());
            let (_, draft_key) = time_of(clustering, &row)?;
            text(draft_key, &row)
        })?;
        let mut items = Vec::with_capacity(page.items.len());
        for draft_key in page.items {
            let row = key(tag::DRAFT, actor, draft_key.as_bytes().to_vec());
            let value = self
                .0
                .get(&row)?
                .ok_or_else(|| corrupt("a draft by time names no draft", &row))?;
            items.push(decode_draft(&draft_key, &value, &row)?);
        }
        Ok(PrivatePage {
            items,
            cursor: page.cursor,
        })
    }
}

/// [`PrivateReads`] over any store's two private-row reads.
pub(crate) struct StoreReads<'s, S: crate::Store + ?Sized>(pub(crate) &'s S);

impl<S: crate::Store + ?Sized> PrivateReads for StoreReads<'_, S> {
    fn get(&mut self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.private_value(key)
    }

    fn scan(
        &mut self,
        partition: &[u8],
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        let partition = PrivateKey {
            partition: partition.to_vec(),
            clustering: Vec::new(),
        };
        self.0.private_rows(&partition, below, limit)
    }
}
