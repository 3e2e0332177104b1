//! Notifications: who a record notifies (part of the apply rules), their index keys, and how an
//! entry is read back, the same for both backends.
//!
//! The rules follow the reference dataplane's indexing plugins:
//! - a like or repost notifies the subject's author (`like`, `repost`) and, when it names the
//!   repost it came `via`, that repost's author (`like-via-repost`, `repost-via-repost`);
//!   nothing at all when the subject is the actor's own;
//! - a follow notifies its subject (`follow`), even when that is the follower: the reference's
//!   follow rule has no self check;
//! - a post notifies, in this order and each account at most once: the DIDs its mention facets
//!   name (`mention`), the author of the post it quotes (`quote`), and the authors of its stored
//!   ancestors up to [`REPLY_ANCESTORS_MAX`] levels up (`reply`, reason subject the ancestor);
//! - a profile that names the starter pack it joined through notifies the pack's author
//!   (`starterpack-joined`, reason subject the pack), and a verification its subject
//!   (`verified`);
//! - a post then notifies the accounts subscribed to its author's activity (`subscribed-post`;
//!   private state from bsync) for posts, or for replies when it is one, up to
//!   [`SUBSCRIBERS_MAX`] of them; Starling derives these itself, since the reference leaves them
//!   to a separate service;
//! - otherwise nobody is notified of their own record.
//!
//! - a verification that a commit deletes or replaces keeps its `verified` notification and
//!   adds an `unverified` one at the commit's time, as the reference's `notifsForDelete` does;
//!   both are served although the record is gone (they have no reason subject), unless the
//!   verifier's account is deleted, and neither counts as unread once the record is gone (the
//!   reference's unread count joins the record).
//!
//! Every other notification lives exactly as long as the record that made it: deleting the
//! record (or its account) removes it, and since records change only at a higher revision,
//! replays never add one twice.
//! Which ancestors a reply reached depends on what was stored when it arrived, so the rules
//! keep that list beside the reply (`tag::REPLY_ANCESTOR` values) and remove exactly those
//! notifications when the reply goes, whatever happened to the thread since. The subscribers a
//! post notified are kept beside it the same way (`tag::SUBSCRIBER_NOTIFIED` values), since
//! subscriptions change.

use starling_core::ActorId;
use starling_core::jetstream::{self, AccountStatus, Refs, nsid};
use starling_core::syntax::RecordUri;

use crate::keys::{self, tag};
use crate::{Notification, NotificationReason, OUTLIVING_SCAN_MAX, Store, StoreError};

/// How many ancestors of a reply are notified: the parent and three more. The reference walks
/// `REPLY_NOTIF_DEPTH = 5` levels counting the reply itself as level 0 and notifies levels
/// below 5.
pub const REPLY_ANCESTORS_MAX: u8 = 4;

/// How many subscribers one post notifies at most: the first by DID, descending. It bounds the
/// work and the entries one post makes; an account with more subscribers than this is a
/// broadcaster whose subscribers see its posts in their timelines anyway.
pub const SUBSCRIBERS_MAX: u16 = 10_000;

/// Bytes of a notification key before its record key: tag, recipient, sort_at, author,
/// reason, height.
const FIXED: usize = 1 + 4 + 8 + 4 + 1 + 1;

impl NotificationReason {
    /// The reason's name in the lexicon and the dataplane protocol.
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationReason::Like => "like",
            NotificationReason::Repost => "repost",
            NotificationReason::Follow => "follow",
            NotificationReason::Mention => "mention",
            NotificationReason::Reply => "reply",
            NotificationReason::Quote => "quote",
            NotificationReason::LikeViaRepost => "like-via-repost",
            NotificationReason::RepostViaRepost => "repost-via-repost",
            NotificationReason::SubscribedPost => "subscribed-post",
            NotificationReason::StarterpackJoined => "starterpack-joined",
            NotificationReason::Verified => "verified",
            NotificationReason::Unverified => "unverified",
        }
    }

    /// Every reason, for tests and filters.
    pub const ALL: [NotificationReason; 12] = [
        NotificationReason::Like,
        NotificationReason::Repost,
        NotificationReason::Follow,
        NotificationReason::Mention,
        NotificationReason::Reply,
        NotificationReason::Quote,
        NotificationReason::LikeViaRepost,
        NotificationReason::RepostViaRepost,
        NotificationReason::SubscribedPost,
        NotificationReason::StarterpackJoined,
        NotificationReason::Verified,
        NotificationReason::Unverified,
    ];

    fn code(self) -> u8 {
        match self {
            NotificationReason::Like => b'l',
            NotificationReason::Repost => b'r',
            NotificationReason::Follow => b'f',
            NotificationReason::Mention => b'm',
            NotificationReason::Reply => b'p',
            NotificationReason::Quote => b'q',
            NotificationReason::LikeViaRepost => b'L',
            NotificationReason::RepostViaRepost => b'R',
            NotificationReason::SubscribedPost => b'S',
            NotificationReason::StarterpackJoined => b'j',
            NotificationReason::Verified => b'v',
            NotificationReason::Unverified => b'V',
        }
    }

    /// Whether a notification of this reason stays when its record goes: a verification's,
    /// which the reference keeps (and lists, though not as unread).
    pub(crate) fn outlives_its_record(self) -> bool {
        matches!(
            self,
            NotificationReason::Verified | NotificationReason::Unverified
        )
    }

    fn from_code(code: u8) -> Option<NotificationReason> {
        NotificationReason::ALL
            .into_iter()
            .find(|reason| reason.code() == code)
    }

    /// The collection of the record that makes a notification of this reason.
    fn collection(self) -> &'static str {
        match self {
            NotificationReason::Like | NotificationReason::LikeViaRepost => nsid::LIKE,
            NotificationReason::Repost | NotificationReason::RepostViaRepost => nsid::REPOST,
            NotificationReason::Follow => nsid::FOLLOW,
            NotificationReason::Mention
            | NotificationReason::Reply
            | NotificationReason::Quote
            | NotificationReason::SubscribedPost => nsid::POST,
            NotificationReason::StarterpackJoined => nsid::PROFILE,
            NotificationReason::Verified | NotificationReason::Unverified => nsid::VERIFICATION,
        }
    }

    /// The collection a reason subject of this reason is usually in (`None`: it has none).
    /// A key names its subject's record key alone when the subject is there.
    fn subject_collection(self) -> Option<&'static str> {
        match self {
            NotificationReason::Like
            | NotificationReason::Repost
            | NotificationReason::Quote
            | NotificationReason::Reply => Some(nsid::POST),
            NotificationReason::LikeViaRepost | NotificationReason::RepostViaRepost => {
                Some(nsid::REPOST)
            }
            NotificationReason::StarterpackJoined => Some(nsid::STARTERPACK),
            NotificationReason::Follow
            | NotificationReason::Mention
            | NotificationReason::SubscribedPost
            | NotificationReason::Verified
            | NotificationReason::Unverified => None,
        }
    }
}

/// One notification a record makes: recipient, reason, and for a reply the ancestor's level
/// (1 = the parent; 0 for other reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) recipient: ActorId,
    pub(crate) reason: NotificationReason,
    pub(crate) height: u8,
}

/// The notifications of a like or repost by `actor` of a record of `subject_author`, seen via
/// a repost by `via_author`.
pub(crate) fn interaction_targets(
    actor: ActorId,
    subject_author: ActorId,
    via_author: Option<ActorId>,
    repost: bool,
) -> Vec<Target> {
    if subject_author == actor {
        return Vec::new();
    }
    let (reason, via_reason) = if repost {
        (
            NotificationReason::Repost,
            NotificationReason::RepostViaRepost,
        )
    } else {
        (NotificationReason::Like, NotificationReason::LikeViaRepost)
    };
    let mut res = vec![Target {
        recipient: subject_author,
        reason,
        height: 0,
    }];
    if let Some(via_author) = via_author.filter(|&via| via != actor) {
        res.push(Target {
            recipient: via_author,
            reason: via_reason,
            height: 0,
        });
    }
    res
}

/// The notification of a follow of `subject`.
pub(crate) fn follow_targets(subject: ActorId) -> Vec<Target> {
    vec![Target {
        recipient: subject,
        reason: NotificationReason::Follow,
        height: 0,
    }]
}

/// The notification of a record by `actor` that names `recipient` alone (a profile's starter
/// pack's author, a verification's subject), unless it is the actor.
pub(crate) fn single_target(
    actor: ActorId,
    recipient: ActorId,
    reason: NotificationReason,
) -> Vec<Target> {
    if recipient == actor {
        return Vec::new();
    }
    vec![Target {
        recipient,
        reason,
        height: 0,
    }]
}

/// Whom a post notifies besides its author.
pub(crate) struct PostAudience<'a> {
    pub(crate) mentions: &'a [ActorId],
    pub(crate) quoted_author: Option<ActorId>,
    /// The ancestors' authors, `ancestors[0]` the parent's.
    pub(crate) ancestors: &'a [ActorId],
    /// The author's subscribers who asked for this kind of post.
    pub(crate) subscribers: &'a [ActorId],
}

/// The notifications of a post by `author`: mentions, then the quoted post's author, then the
/// ancestors' authors, then subscribers; each account once, never the author.
pub(crate) fn post_targets(author: ActorId, audience: &PostAudience<'_>) -> Vec<Target> {
    let mut notified = vec![author];
    let mut res = Vec::new();
    let mut notify = |recipient: ActorId, reason, height| {
        if !notified.contains(&recipient) {
            notified.push(recipient);
            res.push(Target {
                recipient,
                reason,
                height,
            });
        }
    };
    for &mention in audience.mentions {
        notify(mention, NotificationReason::Mention, 0);
    }
    if let Some(quoted) = audience.quoted_author {
        notify(quoted, NotificationReason::Quote, 0);
    }
    for (height, &ancestor) in (1..=REPLY_ANCESTORS_MAX).zip(audience.ancestors) {
        notify(ancestor, NotificationReason::Reply, height);
    }
    for &subscriber in audience.subscribers {
        notify(subscriber, NotificationReason::SubscribedPost, 0);
    }
    res
}

/// The index key of a notification: `O`, recipient, sort_at, author, reason, height, rkey,
/// and the reason subject when [`kept_subject`] names one: [`SUBJECT_USUAL`] and its record
/// key, or [`SUBJECT_NAMED`], its collection, `/` and its record key.
///
/// Newest first per recipient is one reverse range scan, and the entry needs no value: the
/// record, the reason and its subject are in the key, so a page is served without reading
/// the records that made it. The subject's repository is always the recipient's: a record
/// notifies the author of the record it points at. A key without a subject part, of a reason
/// that has one, was written before subjects were kept, and reads the record to find it.
pub(crate) fn key(
    target: &Target,
    sort_at_us: i64,
    author: ActorId,
    rkey: &str,
    refs: &Refs<'_>,
) -> Vec<u8> {
    let subject = kept_subject(target, refs);
    let subject_len = subject.map_or(0, |s| 2 + s.collection.len() + s.rkey.len());
    let mut key = Vec::with_capacity(FIXED + rkey.len() + subject_len);
    key.push(tag::NOTIFICATION);
    key.extend_from_slice(&target.recipient.0.to_be_bytes());
    key.extend_from_slice(&keys::time_bytes(sort_at_us));
    key.extend_from_slice(&author.0.to_be_bytes());
    key.push(target.reason.code());
    key.push(target.height);
    key.extend_from_slice(rkey.as_bytes());
    if let Some(subject) = subject {
        if target.reason.subject_collection() == Some(subject.collection) {
            key.push(SUBJECT_USUAL);
        } else {
            key.push(SUBJECT_NAMED);
            key.extend_from_slice(subject.collection.as_bytes());
            key.push(b'/');
        }
        key.extend_from_slice(subject.rkey.as_bytes());
    }
    key
}

/// Ends a key's record key: the subject, in its reason's usual collection, follows. Record
/// keys and NSIDs are printable ASCII, so neither marker can occur in them.
const SUBJECT_USUAL: u8 = 0x00;
/// Ends a key's record key: the subject's collection, `/` and record key follow.
const SUBJECT_NAMED: u8 = keys::RKEY_END_MAX;

/// The reason subject a notification key keeps: the record its reason points at, except for
/// a reply's ancestor above the parent, which the record does not name (it is found by
/// walking up from the parent when read).
fn kept_subject<'r, 'a>(target: &Target, refs: &'r Refs<'a>) -> Option<&'r RecordUri<'a>> {
    if target.height > 1 {
        return None;
    }
    subject_ref(target.reason, refs)
}

/// The same notification's key as written before keys kept their subject: `key` up to its
/// subject part, if it is a notification key with one. Removing a record removes this form
/// too, since a store written by an older Starling holds it.
pub(crate) fn without_subject(key: &[u8]) -> Option<Vec<u8>> {
    if key.first() != Some(&tag::NOTIFICATION) {
        return None;
    }
    keys::without_tail_after_rkey(key, FIXED)
}

/// The prefix of `recipient`'s notification keys.
pub(crate) fn prefix(recipient: ActorId) -> [u8; 5] {
    let [a, b, c, d] = recipient.0.to_be_bytes();
    [tag::NOTIFICATION, a, b, c, d]
}

/// The key of the value recording a reply's ancestor at `height`: `D`, the reply's record
/// key, height. The value is the ancestor author's id plus one (0, an absent key, is none).
pub(crate) fn ancestor_key(reply_key: &[u8], height: u8) -> Vec<u8> {
    let mut key = Vec::with_capacity(reply_key.len() + 2);
    key.push(tag::REPLY_ANCESTOR);
    key.extend_from_slice(reply_key);
    key.push(height);
    key
}

/// The key of the value recording the subscriber a post notified at `index`: `U`, the post's
/// record key, the index. The value is the subscriber's id plus one; at [`u16::MAX`] it is how
/// many there are.
pub(crate) fn subscriber_key(post_key: &[u8], index: u16) -> Vec<u8> {
    let mut key = Vec::with_capacity(post_key.len() + 3);
    key.push(tag::SUBSCRIBER_NOTIFIED);
    key.extend_from_slice(post_key);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// A notification key's tail after [`prefix`], decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry<'a> {
    sort_at_us: i64,
    author: ActorId,
    reason: NotificationReason,
    height: u8,
    rkey: &'a str,
    /// The reason subject's collection and record key, when the key keeps them.
    subject: Option<(&'a str, &'a str)>,
}

/// Decodes a notification key's tail after [`prefix`].
fn parse_tail(tail: &[u8]) -> Result<Entry<'_>, StoreError> {
    let corrupt = || StoreError::corrupt("notification key", tail);
    fn text(bytes: &[u8]) -> Option<&str> {
        std::str::from_utf8(bytes).ok()
    }
    let time: [u8; 8] = tail
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(corrupt)?;
    let author: [u8; 4] = tail
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(corrupt)?;
    let reason = tail
        .get(12)
        .and_then(|&code| NotificationReason::from_code(code))
        .ok_or_else(corrupt)?;
    let height = *tail.get(13).ok_or_else(corrupt)?;
    let end = keys::rkey_end(tail, 14);
    let rkey = tail.get(14..end).and_then(text).ok_or_else(corrupt)?;
    let subject = match tail.get(end..).unwrap_or_default() {
        [] => None,
        [SUBJECT_USUAL, rkey @ ..] => {
            let collection = reason.subject_collection().ok_or_else(corrupt)?;
            Some((collection, text(rkey).ok_or_else(corrupt)?))
        }
        [_, named @ ..] => Some(
            text(named)
                .and_then(|named| named.split_once('/'))
                .ok_or_else(corrupt)?,
        ),
    };
    Ok(Entry {
        sort_at_us: keys::time_from_bytes(time),
        author: ActorId(u32::from_be_bytes(author)),
        reason,
        height,
        rkey,
        subject,
    })
}

/// Notification entries read per scan by [`Store::notifications`].
const NOTIFICATION_CHUNK: usize = 256;

/// [`Store::notifications_by`] on any store: entries a chunk at a time, each resolved unless
/// `shown` rejects its author.
pub(crate) fn scan<S: Store + ?Sized>(
    store: &S,
    recipient: ActorId,
    below: Option<&[u8]>,
    scan_max: usize,
    shown: &dyn Fn(ActorId) -> bool,
    visit: &mut dyn FnMut(Notification) -> bool,
) -> Result<Option<Vec<u8>>, StoreError> {
    let mut n_read = 0;
    let mut below = below.map(<[u8]>::to_vec);
    // The repository of every kept reason subject.
    let recipient_did = store.did(recipient);
    loop {
        let want = scan_max.saturating_sub(n_read).min(NOTIFICATION_CHUNK);
        if want == 0 {
            return Ok(below);
        }
        // Entries are read a chunk at a time and resolved after it: resolving reads
        // records, which a backend may not allow inside its own scan.
        let mut chunk = Vec::with_capacity(want);
        store.notification_entries(recipient, below.as_deref(), &mut |tail| {
            chunk.push(tail.to_vec());
            Ok(chunk.len() < want)
        })?;
        n_read += chunk.len();
        let full = chunk.len() == want;
        for tail in chunk {
            let entry = parse_tail(&tail)?;
            let resolved = if shown(entry.author) {
                resolve(
                    store,
                    recipient,
                    recipient_did.as_deref(),
                    &entry,
                    tail.clone(),
                )?
            } else {
                None
            };
            below = Some(tail);
            if let Some(notification) = resolved
                && !visit(notification)
            {
                return Ok(None);
            }
        }
        if !full {
            return Ok(None);
        }
    }
}

/// Reads an entry back as the dataplane serves it: the record's URI, and the reason subject
/// the key keeps or, in a key written before keys kept it, resolved from the record (and for
/// a reply above the parent, its ancestors). `None` when the reason subject is no longer
/// stored: the reference hides those. The record itself is read only when the key lacks the
/// subject or the entry outlives its record (a verification's): a delete removes any other
/// entry in the batch that removes the record, as the reference removes a record's
/// notifications with it, and the unread count trusts them the same way. `recipient_did` is
/// the recipient's DID, the repository of every kept subject (`None` if the recipient is
/// unknown, which a kept subject makes a corrupt entry).
fn resolve<S: Store + ?Sized>(
    store: &S,
    recipient: ActorId,
    recipient_did: Option<&str>,
    entry: &Entry<'_>,
    cursor: Vec<u8>,
) -> Result<Option<Notification>, StoreError> {
    let unknown = || StoreError::corrupt("notification of an unknown actor", &cursor);
    let author_did = store.did(entry.author).ok_or_else(unknown)?;
    let collection = entry.reason.collection();
    let uri = RecordUri {
        did: &author_did,
        collection,
        rkey: entry.rkey,
    }
    .to_uri();
    // Only a subject that is neither kept nor absent needs the record read.
    let first = if entry.subject.is_some() || entry.reason.subject_collection().is_none() {
        if entry.reason.outlives_its_record()
            && !store.actor_record_is_live(entry.author, collection, entry.rkey)?
        {
            return record_gone(store, entry, &author_did, uri, cursor);
        }
        match entry.subject {
            Some((subject_collection, subject_rkey)) => {
                let recipient_did = recipient_did.ok_or_else(unknown)?;
                Some(
                    RecordUri {
                        did: recipient_did,
                        collection: subject_collection,
                        rkey: subject_rkey,
                    }
                    .to_uri(),
                )
            }
            None => None,
        }
    } else {
        match store.record(&author_did, collection, entry.rkey)? {
            Some(record) => subject_of(collection, &record.json, entry.reason)?,
            None => return record_gone(store, entry, &author_did, uri, cursor),
        }
    };
    let subject = match (first, entry.subject) {
        (None, _) => None,
        // A kept subject is the recipient's record; at the first level it only has to be live.
        (Some(first), Some((collection, rkey))) if entry.height <= 1 => {
            if !store.actor_record_is_live(recipient, collection, rkey)? {
                return Ok(None);
            }
            Some(first)
        }
        (Some(first), _) => match ancestor(store, first, entry.height)? {
            Some(subject) => Some(subject),
            None => return Ok(None),
        },
    };
    Ok(Some(Notification {
        author: entry.author,
        uri,
        reason: entry.reason,
        reason_subject: subject,
        sort_at_us: entry.sort_at_us,
        cursor,
    }))
}

/// An entry whose record is no longer stored: a verification's notification, which outlives
/// it (without a subject) unless its author's account is deleted, or none.
fn record_gone<S: Store + ?Sized>(
    store: &S,
    entry: &Entry<'_>,
    author_did: &str,
    uri: String,
    cursor: Vec<u8>,
) -> Result<Option<Notification>, StoreError> {
    if !entry.reason.outlives_its_record() {
        // Deletes remove their notifications in the same batch; a missing record is a read
        // racing that batch, and the notification is as good as gone.
        return Ok(None);
    }
    // The reference removes a deleted account's notifications with it.
    let author_deleted = store
        .actor(author_did)?
        .is_none_or(|actor| actor.status == AccountStatus::Deleted);
    Ok((!author_deleted).then_some(Notification {
        author: entry.author,
        uri,
        reason: entry.reason,
        reason_subject: None,
        sort_at_us: entry.sort_at_us,
        cursor,
    }))
}

/// [`Store::unread_notifications`].
pub(crate) fn unread<S: Store + ?Sized>(
    store: &S,
    recipient: ActorId,
    seen_us: Option<i64>,
    max: u32,
) -> Result<u32, StoreError> {
    let read_max = (max as usize).saturating_add(OUTLIVING_SCAN_MAX);
    let (mut res, mut n_read) = (0u32, 0usize);
    let mut below: Option<Vec<u8>> = None;
    while res < max {
        let want = max - res;
        let (mut n_counted, mut full) = (0u32, false);
        let mut outliving = Vec::new();
        let mut last = None;
        store.notification_entries(recipient, below.as_deref(), &mut |tail| {
            let entry = parse_tail(tail)?;
            if seen_us.is_some_and(|seen| entry.sort_at_us <= seen) {
                return Ok(false);
            }
            if entry.reason.outlives_its_record() {
                outliving.push((entry.author, entry.rkey.to_owned()));
            }
            n_counted += 1;
            n_read += 1;
            full = n_counted == want || n_read == read_max;
            // Only a scan that stops early goes on from its last entry.
            if full {
                last = Some(tail.to_vec());
            }
            Ok(!full)
        })?;
        // Read after the scan: a backend may not allow reads inside its own scan.
        let n_gone = n_verifications_gone(store, &outliving)?;
        res += n_counted - n_gone;
        if !full || n_gone == 0 || n_read == read_max {
            break;
        }
        below = last;
    }
    Ok(res)
}

/// How many of these verifications (author, rkey) are no longer stored.
fn n_verifications_gone<S: Store + ?Sized>(
    store: &S,
    verifications: &[(ActorId, String)],
) -> Result<u32, StoreError> {
    let mut res = 0;
    for (author, rkey) in verifications {
        let did = store.did(*author).ok_or_else(|| {
            StoreError::corrupt("notification of an unknown actor", rkey.as_bytes())
        })?;
        if !store.record_is_live(&did, nsid::VERIFICATION, rkey)? {
            res += 1;
        }
    }
    Ok(res)
}

/// The record a notification's record points at for its reason (the parent for a reply).
fn subject_of(
    collection: &str,
    json: &str,
    reason: NotificationReason,
) -> Result<Option<String>, StoreError> {
    let (_, refs) = jetstream::record_fields(collection, json).map_err(|err| {
        StoreError::corrupt(format!("stored record no longer decodes: {err}"), &[])
    })?;
    Ok(subject_ref(reason, &refs).map(RecordUri::to_uri))
}

/// The reference in a record's `refs` that a notification of `reason` has as its subject.
fn subject_ref<'r, 'a>(
    reason: NotificationReason,
    refs: &'r Refs<'a>,
) -> Option<&'r RecordUri<'a>> {
    match (reason, refs) {
        (NotificationReason::Like | NotificationReason::Repost, Refs::Subject { subject, .. }) => {
            Some(subject)
        }
        (
            NotificationReason::LikeViaRepost | NotificationReason::RepostViaRepost,
            Refs::Subject { via, .. },
        ) => via.as_ref(),
        (NotificationReason::Quote, Refs::Post { quote, .. }) => quote.as_ref(),
        (NotificationReason::Reply, Refs::Post { reply, .. }) => {
            reply.as_ref().map(|reply| &reply.parent)
        }
        (NotificationReason::StarterpackJoined, Refs::Profile { joined_via }) => Some(joined_via),
        _ => None,
    }
}

/// Walks up from the post `uri` (the ancestor at level 1) to level `height`; `None` when a post
/// on the way, or the subject itself, is no longer stored.
fn ancestor<S: Store + ?Sized>(
    store: &S,
    mut uri: String,
    height: u8,
) -> Result<Option<String>, StoreError> {
    // The posts below the subject are read for their parent; the subject only has to be live.
    for _ in 1..height {
        let Some(parsed) = RecordUri::parse(&uri) else {
            return Ok(None);
        };
        let Some(record) = store.record(parsed.did, parsed.collection, parsed.rkey)? else {
            return Ok(None);
        };
        match subject_of(nsid::POST, &record.json, NotificationReason::Reply)? {
            Some(parent) => uri = parent,
            None => return Ok(None),
        }
    }
    let Some(parsed) = RecordUri::parse(&uri) else {
        return Ok(None);
    };
    let live = store.record_is_live(parsed.did, parsed.collection, parsed.rkey)?;
    Ok(live.then_some(uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that a notification key's tail decodes to what was encoded and that keys of one
    // recipient sort by time, by building keys of several times and sorting them.
    #[test]
    fn keys_round_trip_in_time_order() {
        let target = |reason, height| Target {
            recipient: ActorId(9),
            reason,
            height,
        };
        let mut keys = vec![
            key(
                &target(NotificationReason::Reply, 3),
                30,
                ActorId(2),
                "3l3qo2vuowo2b",
                &Refs::None,
            ),
            key(
                &target(NotificationReason::Like, 0),
                -4,
                ActorId(1),
                "self",
                &Refs::None,
            ),
            key(
                &target(NotificationReason::Follow, 0),
                10,
                ActorId(7),
                "a~b",
                &Refs::None,
            ),
        ];
        for key in &keys {
            assert!(key.starts_with(&prefix(ActorId(9))));
            assert_eq!(without_subject(key), None);
        }
        let entry = parse_tail(&keys[0][5..]).unwrap();
        assert_eq!(
            entry,
            Entry {
                sort_at_us: 30,
                author: ActorId(2),
                reason: NotificationReason::Reply,
                height: 3,
                rkey: "3l3qo2vuowo2b",
                subject: None,
            }
        );
        keys.sort();
        let times: Vec<i64> = keys
            .iter()
            .map(|k| parse_tail(&k[5..]).unwrap().sort_at_us)
            .collect();
        assert_eq!(times, vec![-4, 10, 30]);
    }

    // Checks that a key keeps the subject its record names (in the reason's usual collection
    // or another), that it reads back, that the key without it is the key written before
    // subjects were kept, and that the subject part does not change the order of record keys.
    #[test]
    fn keys_keep_the_reason_subject() {
        let like = |collection, rkey| Refs::Subject {
            subject: RecordUri {
                did: "did:plc:alice",
                collection,
                rkey,
            },
            via: None,
        };
        let target = Target {
            recipient: ActorId(9),
            reason: NotificationReason::Like,
            height: 0,
        };
        for (collection, subject_rkey) in [(nsid::POST, "3kpost"), (nsid::GENERATOR, "feed")] {
            let with = key(
                &target,
                5,
                ActorId(2),
                "3klike",
                &like(collection, subject_rkey),
            );
            let entry = parse_tail(&with[5..]).unwrap();
            assert_eq!(entry.rkey, "3klike");
            assert_eq!(entry.subject, Some((collection, subject_rkey)));
            let older = key(&target, 5, ActorId(2), "3klike", &Refs::None);
            assert_eq!(without_subject(&with), Some(older.clone()));
            assert_eq!(parse_tail(&older[5..]).unwrap().subject, None);
            let next = key(
                &target,
                5,
                ActorId(2),
                "3klike2",
                &like(collection, subject_rkey),
            );
            assert!(older < with && with < next);
        }
        // A reply keeps its parent for the parent's author, and none for an ancestor above:
        // the record names only its parent.
        let parent = RecordUri {
            did: "did:plc:alice",
            collection: nsid::POST,
            rkey: "3kparent",
        };
        let reply = Refs::Post {
            reply: Some(jetstream::Reply {
                root: parent,
                parent,
            }),
            quote: None,
            media: jetstream::Media::None,
            mentions: Vec::new(),
        };
        let at = |height| Target {
            height,
            reason: NotificationReason::Reply,
            ..target
        };
        assert_eq!(kept_subject(&at(1), &reply), Some(&parent));
        assert_eq!(kept_subject(&at(2), &reply), None);
    }

    // Checks the post rules' order and de-duplication against the reference's: a mention
    // first, a quote of a mentioned account adds nothing, the author is never notified.
    #[test]
    fn post_targets_notify_each_account_once() {
        let [author, a, b, c] = [ActorId(0), ActorId(1), ActorId(2), ActorId(3)];
        let audience = PostAudience {
            mentions: &[a, author],
            quoted_author: Some(a),
            ancestors: &[b, author, c],
            subscribers: &[c, a, author, ActorId(4)],
        };
        let targets = post_targets(author, &audience);
        let got: Vec<(ActorId, NotificationReason, u8)> = targets
            .iter()
            .map(|t| (t.recipient, t.reason, t.height))
            .collect();
        assert_eq!(
            got,
            vec![
                (a, NotificationReason::Mention, 0),
                (b, NotificationReason::Reply, 1),
                (c, NotificationReason::Reply, 3),
                (ActorId(4), NotificationReason::SubscribedPost, 0),
            ]
        );
        assert!(interaction_targets(a, a, Some(b), false).is_empty());
        assert_eq!(interaction_targets(a, b, Some(a), true).len(), 1);
    }
}
