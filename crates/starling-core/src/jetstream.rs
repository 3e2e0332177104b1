//! Decoding of Jetstream v1 JSON events, borrowing from the input buffer.
//!
//! One call to [`decode`] turns one event (one line of a `.jsonl` file, one websocket text
//! message) into an [`Event`] whose strings point into the input. Everything an index needs is
//! checked here, so that a decoded event is always safe to apply: the DID, the collection, the
//! record key, the revision, the CID, `createdAt`, and the references a record makes (subjects,
//! reply parents, quotes). A bad event becomes a [`DecodeError`] with a bounded [`DropReason`].

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use sonic_rs::LazyValue;

use crate::syntax::{self, RecordUri};

/// The largest event accepted, in bytes; larger ones are dropped as [`DropReason::TooLarge`].
///
/// A record may be at most 1 MiB; the envelope adds a few hundred bytes.
pub const EVENT_BYTES_MAX: usize = 1024 * 1024 + 4 * 1024;

/// The deepest nesting of JSON arrays and objects accepted in an event, envelope included;
/// deeper ones are dropped as [`DropReason::TooDeep`].
///
/// The JSON parser recurses once per level, so without a bound one small event nested some
/// thousands deep overflows the stack of the thread decoding it. Real events nest at most 8
/// levels (a reply quoting a record with media, facets included), and the parser's skip of an
/// unknown value takes ~32 KiB of stack a level in a debug build: 32 levels stay within half of
/// a 2 MiB thread stack in any build.
pub const NESTING_DEPTH_MAX: usize = 32;

/// The most distinct mentioned DIDs read from one post; each is a notification, so this bounds
/// a post's fan-out. A post's text is at most 3,000 bytes, and a mention takes at least five of
/// them (`@a.bc`), so a client-made post never comes near it.
pub const MENTIONS_MAX: usize = 100;

/// Collection NSIDs that Starling indexes.
pub mod nsid;

/// Why an event was dropped. The set is closed so that metrics labels stay bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// The bytes are not UTF-8.
    NotUtf8,
    /// A compressed message does not decompress with the Jetstream dictionary.
    BadCompression,
    /// The event is over [`EVENT_BYTES_MAX`].
    TooLarge,
    /// The bytes are not JSON, or a field has the wrong JSON type.
    BadJson,
    /// A required field is absent.
    MissingField,
    /// `kind` is not `commit`, `identity` or `account`.
    UnknownKind,
    /// `commit.operation` is not `create`, `update` or `delete`.
    UnknownOperation,
    /// A DID is malformed.
    BadDid,
    /// A collection NSID is malformed.
    BadNsid,
    /// A record key is malformed.
    BadRkey,
    /// The commit revision is not a TID.
    BadRev,
    /// The CID is malformed.
    BadCid,
    /// An AT-URI inside a record is malformed or names no record.
    BadUri,
    /// `createdAt` is not an atproto datetime.
    BadDatetime,
    /// A handle in an identity event is malformed.
    BadHandle,
    /// JSON arrays and objects nest deeper than [`NESTING_DEPTH_MAX`].
    TooDeep,
    /// `time_us` is further in the future than ingest allows (decided by ingest against its
    /// clock, never by [`decode`]): applying it would move the stored cursor past now.
    FutureTime,
    /// A relay commit or a repository whose signature does not verify against its DID's key.
    BadSignature,
    /// A relay frame or repository that fails a check other than the signature (CAR, MST, ...).
    BadRepo,
}

impl DropReason {
    /// Every reason, in a fixed order.
    pub const ALL: [DropReason; 19] = [
        DropReason::NotUtf8,
        DropReason::BadCompression,
        DropReason::TooLarge,
        DropReason::BadJson,
        DropReason::MissingField,
        DropReason::UnknownKind,
        DropReason::UnknownOperation,
        DropReason::BadDid,
        DropReason::BadNsid,
        DropReason::BadRkey,
        DropReason::BadRev,
        DropReason::BadCid,
        DropReason::BadUri,
        DropReason::BadDatetime,
        DropReason::BadHandle,
        DropReason::TooDeep,
        DropReason::FutureTime,
        DropReason::BadSignature,
        DropReason::BadRepo,
    ];

    /// The label used in `stats` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::NotUtf8 => "not_utf8",
            DropReason::BadCompression => "bad_compression",
            DropReason::TooLarge => "too_large",
            DropReason::BadJson => "bad_json",
            DropReason::MissingField => "missing_field",
            DropReason::UnknownKind => "unknown_kind",
            DropReason::UnknownOperation => "unknown_operation",
            DropReason::BadDid => "bad_did",
            DropReason::BadNsid => "bad_nsid",
            DropReason::BadRkey => "bad_rkey",
            DropReason::BadRev => "bad_rev",
            DropReason::BadCid => "bad_cid",
            DropReason::BadUri => "bad_uri",
            DropReason::BadDatetime => "bad_datetime",
            DropReason::BadHandle => "bad_handle",
            DropReason::TooDeep => "too_deep",
            DropReason::FutureTime => "future_time",
            DropReason::BadSignature => "bad_signature",
            DropReason::BadRepo => "bad_repo",
        }
    }

    /// The reason with this label, if any.
    pub fn from_label(label: &str) -> Option<DropReason> {
        DropReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == label)
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A dropped event: the reason, and what was wrong, for the rate-limited log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct DecodeError {
    /// The bounded reason, for counting.
    pub reason: DropReason,
    /// What was wrong, naming the bad value (truncated).
    pub detail: String,
}

impl DecodeError {
    fn new(reason: DropReason, detail: impl fmt::Display) -> DecodeError {
        let mut detail = detail.to_string();
        if detail.len() > 160 {
            let mut end = 160;
            while !detail.is_char_boundary(end) {
                end -= 1;
            }
            detail.truncate(end);
            detail.push('…');
        }
        DecodeError { reason, detail }
    }

    fn missing(field: &str) -> DecodeError {
        DecodeError::new(
            DropReason::MissingField,
            format_args!("missing field `{field}`"),
        )
    }
}

/// One decoded Jetstream event.
#[derive(Debug)]
pub struct Event<'a> {
    /// The repository or account DID the event is about.
    pub did: Cow<'a, str>,
    /// The instance's cursor for this event.
    pub time_us: u64,
    /// What happened.
    pub body: Body<'a>,
}

/// The kind-specific part of an event.
// Commits are nearly every event; boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Body<'a> {
    /// One record operation.
    Commit(Commit<'a>),
    /// The DID document or handle may have changed.
    Identity {
        /// The relay's sequence number, used to ignore replays.
        seq: u64,
        /// The handle, if the event carries one.
        handle: Option<Cow<'a, str>>,
    },
    /// The account's hosting status changed.
    Account {
        /// The relay's sequence number, used to ignore replays.
        seq: u64,
        /// Whether the account is active.
        active: bool,
        /// The status when not active.
        status: AccountStatus,
    },
}

/// An account's hosting status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccountStatus {
    /// Active, records served.
    Active,
    /// Taken down by a moderator: records kept but flagged.
    Takendown,
    /// Suspended: records kept but flagged.
    Suspended,
    /// Deleted: records removed.
    Deleted,
    /// Deactivated by its owner: records kept but flagged.
    Deactivated,
    /// Any other inactive status (`desynchronized`, `throttled`, unknown values).
    OtherInactive,
}

impl AccountStatus {
    /// The stored code of this status.
    pub fn code(self) -> u8 {
        match self {
            AccountStatus::Active => 0,
            AccountStatus::Takendown => 1,
            AccountStatus::Suspended => 2,
            AccountStatus::Deleted => 3,
            AccountStatus::Deactivated => 4,
            AccountStatus::OtherInactive => 5,
        }
    }

    /// The status for a stored code; unknown codes read as [`AccountStatus::OtherInactive`].
    pub fn from_code(code: u8) -> AccountStatus {
        match code {
            0 => AccountStatus::Active,
            1 => AccountStatus::Takendown,
            2 => AccountStatus::Suspended,
            3 => AccountStatus::Deleted,
            4 => AccountStatus::Deactivated,
            _ => AccountStatus::OtherInactive,
        }
    }
}

/// A commit operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A new record.
    Create,
    /// A replaced record.
    Update,
    /// A removed record.
    Delete,
}

/// One record operation in a repository.
#[derive(Debug)]
pub struct Commit<'a> {
    /// The repository revision, a TID decoded to its integer value: orders operations per repo.
    pub rev: u64,
    /// What was done.
    pub operation: Operation,
    /// The collection NSID.
    pub collection: Cow<'a, str>,
    /// The record key.
    pub rkey: Cow<'a, str>,
    /// The record, for creates and updates.
    pub record: Option<Record<'a>>,
}

/// A record written by a create or update.
#[derive(Debug)]
pub struct Record<'a> {
    /// The record's CID.
    pub cid: Cow<'a, str>,
    /// The record's JSON text, exactly as received.
    pub json: &'a str,
    /// `createdAt` in microseconds since the epoch, if the record has one.
    pub created_at_us: Option<i64>,
    /// The references an index needs, by collection.
    pub refs: Refs<'a>,
}

/// What a post embeds, for author-feed filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Media {
    /// No media.
    #[default]
    None,
    /// Images.
    Images,
    /// A video.
    Video,
    /// An external link card.
    External,
}

/// The references a record makes that Starling indexes.
#[derive(Debug)]
pub enum Refs<'a> {
    /// A collection with nothing to index beyond the record itself.
    None,
    /// A post: its reply parent and root, what it quotes, and its media.
    Post {
        /// The reply's parent and root, when the post is a reply.
        reply: Option<Reply<'a>>,
        /// The quoted record, when the post quotes one.
        quote: Option<RecordUri<'a>>,
        /// The embedded media, when any.
        media: Media,
        /// The distinct DIDs its mention facets name, in order, at most [`MENTIONS_MAX`].
        mentions: Vec<Cow<'a, str>>,
    },
    /// A like or repost of a record.
    Subject {
        /// The liked or reposted record.
        subject: RecordUri<'a>,
        /// The repost through which the record was seen, when the client says so.
        via: Option<RecordUri<'a>>,
    },
    /// A follow, block or verification of an actor.
    Actor {
        /// The followed, blocked or verified DID.
        subject: Cow<'a, str>,
    },
    /// A list item: an actor in a list.
    ListItem {
        /// The DID in the list.
        subject: Cow<'a, str>,
        /// The list.
        list: RecordUri<'a>,
    },
    /// A profile naming the starter pack its account joined through.
    Profile {
        /// The starter pack (`joinedViaStarterPack.uri`).
        joined_via: RecordUri<'a>,
    },
    /// A list block, a starter pack, a threadgate or a postgate: a reference to one record.
    Target {
        /// The blocked list, the starter pack's list, or the gated post.
        target: RecordUri<'a>,
    },
}

/// The two references of a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply<'a> {
    /// The thread's root post.
    pub root: RecordUri<'a>,
    /// The post replied to.
    pub parent: RecordUri<'a>,
}

// The wire shapes. Every field is optional so that absence is reported as `MissingField` with
// the field's name rather than as a generic JSON error.

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    did: Option<Cow<'a, str>>,
    time_us: Option<u64>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    commit: Option<RawCommit<'a>>,
    #[serde(borrow)]
    identity: Option<RawIdentity<'a>>,
    account: Option<RawAccount<'a>>,
}

#[derive(Deserialize)]
struct RawCommit<'a> {
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    rev: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    operation: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    collection: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    rkey: Option<Cow<'a, str>>,
    #[serde(borrow)]
    record: Option<LazyValue<'a>>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    cid: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawIdentity<'a> {
    seq: Option<u64>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    handle: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawAccount<'a> {
    seq: Option<u64>,
    active: Option<bool>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    status: Option<Cow<'a, str>>,
}

/// The fields of a record that any indexed collection may carry.
#[derive(Deserialize, Default)]
struct RawRecord<'a> {
    #[serde(
        rename = "createdAt",
        borrow,
        default,
        deserialize_with = "borrowed_str"
    )]
    created_at: Option<Cow<'a, str>>,
    #[serde(borrow)]
    subject: Option<Subject<'a>>,
    #[serde(borrow)]
    reply: Option<RawReply<'a>>,
    #[serde(borrow)]
    embed: Option<RawEmbed<'a>>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    list: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    post: Option<Cow<'a, str>>,
    #[serde(borrow)]
    facets: Option<Vec<RawFacet<'a>>>,
    #[serde(borrow)]
    via: Option<StrongRef<'a>>,
    #[serde(rename = "joinedViaStarterPack", borrow)]
    joined_via_starter_pack: Option<StrongRef<'a>>,
}

/// A rich-text facet of a post; only its features matter here.
#[derive(Deserialize)]
struct RawFacet<'a> {
    #[serde(borrow, default)]
    features: Vec<RawFeature<'a>>,
}

/// A facet feature: a mention names a DID.
#[derive(Deserialize)]
struct RawFeature<'a> {
    #[serde(rename = "$type", borrow, default, deserialize_with = "borrowed_str")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    did: Option<Cow<'a, str>>,
}

/// A string that borrows from the input unless it holds escapes.
///
/// serde's own `Cow<str>` always allocates, and `#[serde(borrow)]` reaches only a field whose
/// type is `Cow<str>` itself, not an `Option<Cow<str>>` or a value read by hand in a visitor.
/// A URI must borrow to become a [`RecordUri`], so URIs are read through this wrapper.
#[derive(Deserialize)]
#[serde(transparent)]
struct BorrowedStr<'a>(#[serde(borrow)] Cow<'a, str>);

/// Reads an optional string, borrowing it from the input when it has no escapes.
fn borrowed_str<'de: 'a, 'a, D: de::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    Ok(Option::<BorrowedStr<'a>>::deserialize(deserializer)?.map(|text| text.0))
}

#[derive(Deserialize)]
struct StrongRef<'a> {
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    uri: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawReply<'a> {
    #[serde(borrow)]
    root: Option<StrongRef<'a>>,
    #[serde(borrow)]
    parent: Option<StrongRef<'a>>,
}

#[derive(Deserialize)]
struct RawEmbed<'a> {
    #[serde(rename = "$type", borrow, default, deserialize_with = "borrowed_str")]
    kind: Option<Cow<'a, str>>,
    /// `embed.record` (a strong ref) or, for record-with-media, `{record: strong ref}`.
    #[serde(borrow)]
    record: Option<EmbedRecord<'a>>,
    #[serde(borrow)]
    media: Option<RawMedia<'a>>,
}

#[derive(Deserialize)]
struct EmbedRecord<'a> {
    #[serde(borrow, default, deserialize_with = "borrowed_str")]
    uri: Option<Cow<'a, str>>,
    #[serde(borrow)]
    record: Option<StrongRef<'a>>,
}

#[derive(Deserialize)]
struct RawMedia<'a> {
    #[serde(rename = "$type", borrow, default, deserialize_with = "borrowed_str")]
    kind: Option<Cow<'a, str>>,
}

/// A `subject` field: a DID string (follow, block, list item) or a strong ref (like, repost).
enum Subject<'a> {
    Did(Cow<'a, str>),
    Ref(Option<Cow<'a, str>>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Subject<'a> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SubjectVisitor;
        impl<'de> Visitor<'de> for SubjectVisitor {
            type Value = Subject<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a DID string or a strong reference")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Subject::Did(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Subject::Did(Cow::Owned(v.to_owned())))
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut uri = None;
                while let Some(key) = map.next_key::<BorrowedStr<'de>>()?.map(|key| key.0) {
                    if key == "uri" {
                        uri = Some(map.next_value::<BorrowedStr<'de>>()?.0);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Subject::Ref(uri))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Subject::Other)
            }
        }
        deserializer.deserialize_any(SubjectVisitor)
    }
}

/// Decodes one Jetstream event from raw bytes (a line without its newline, or a message).
pub fn decode(bytes: &[u8]) -> Result<Event<'_>, DecodeError> {
    if bytes.len() > EVENT_BYTES_MAX {
        return Err(DecodeError::new(
            DropReason::TooLarge,
            format_args!(
                "event is {} bytes, over the {EVENT_BYTES_MAX}-byte limit",
                bytes.len()
            ),
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|err| {
        DecodeError::new(
            DropReason::NotUtf8,
            format_args!("event is not UTF-8: {err}"),
        )
    })?;
    decode_str(text)
}

/// The same text as `inner`, borrowed from `outer` instead, when `inner` lies inside `outer`.
///
/// The lazy record value borrows from the input but only hands out its text tied to itself; this
/// recovers the input's lifetime without copying.
fn reborrow<'a>(outer: &'a str, inner: &str) -> Option<&'a str> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    outer.get(start..start.checked_add(inner.len())?)
}

/// Fails with [`DropReason::TooDeep`] when arrays and objects in `json` nest deeper than
/// [`NESTING_DEPTH_MAX`], brackets inside strings aside. Runs before any parsing, so no parser
/// ever recurses deeper than the bound.
pub fn check_nesting(json: &[u8]) -> Result<(), DecodeError> {
    // Nearly every event has fewer opening brackets in all than the bound allows in depth: one
    // vectorisable count settles those, and only the rest are scanned with string state.
    let n_opening = json.iter().filter(|&&b| b == b'{' || b == b'[').count();
    if n_opening <= NESTING_DEPTH_MAX {
        return Ok(());
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in json {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > NESTING_DEPTH_MAX {
                    return Err(DecodeError::new(
                        DropReason::TooDeep,
                        format_args!("JSON nests deeper than {NESTING_DEPTH_MAX} levels"),
                    ));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Decodes one Jetstream event from text.
pub fn decode_str(text: &str) -> Result<Event<'_>, DecodeError> {
    check_nesting(text.as_bytes())?;
    let raw: RawEvent<'_> = sonic_rs::from_str(text)
        .map_err(|err| DecodeError::new(DropReason::BadJson, format_args!("bad JSON: {err}")))?;
    let did = raw.did.ok_or_else(|| DecodeError::missing("did"))?;
    if !syntax::is_valid_did(&did) {
        return Err(DecodeError::new(
            DropReason::BadDid,
            format_args!("`{did}` is not a DID"),
        ));
    }
    let time_us = raw.time_us.ok_or_else(|| DecodeError::missing("time_us"))?;
    let kind = raw.kind.ok_or_else(|| DecodeError::missing("kind"))?;
    let body = match &*kind {
        "commit" => {
            let raw_commit = raw.commit.ok_or_else(|| DecodeError::missing("commit"))?;
            Body::Commit(commit(text, raw_commit)?)
        }
        "identity" => identity(
            raw.identity
                .ok_or_else(|| DecodeError::missing("identity"))?,
        )?,
        "account" => account(raw.account.ok_or_else(|| DecodeError::missing("account"))?)?,
        other => {
            return Err(DecodeError::new(
                DropReason::UnknownKind,
                format_args!("unknown event kind `{other}`"),
            ));
        }
    };
    Ok(Event { did, time_us, body })
}

fn identity(raw: RawIdentity<'_>) -> Result<Body<'_>, DecodeError> {
    let seq = raw
        .seq
        .ok_or_else(|| DecodeError::missing("identity.seq"))?;
    if let Some(handle) = raw
        .handle
        .as_deref()
        .filter(|h| !syntax::is_valid_handle(h))
    {
        return Err(DecodeError::new(
            DropReason::BadHandle,
            format_args!("`{handle}` is not a handle"),
        ));
    }
    Ok(Body::Identity {
        seq,
        handle: raw.handle,
    })
}

fn account(raw: RawAccount<'_>) -> Result<Body<'_>, DecodeError> {
    let seq = raw.seq.ok_or_else(|| DecodeError::missing("account.seq"))?;
    let active = raw
        .active
        .ok_or_else(|| DecodeError::missing("account.active"))?;
    let status = match (active, raw.status.as_deref()) {
        (true, _) => AccountStatus::Active,
        (false, Some("takendown")) => AccountStatus::Takendown,
        (false, Some("suspended")) => AccountStatus::Suspended,
        (false, Some("deleted")) => AccountStatus::Deleted,
        (false, Some("deactivated")) => AccountStatus::Deactivated,
        (false, _) => AccountStatus::OtherInactive,
    };
    Ok(Body::Account {
        seq,
        active,
        status,
    })
}

fn commit<'a>(text: &'a str, raw: RawCommit<'a>) -> Result<Commit<'a>, DecodeError> {
    let rev_text = raw.rev.ok_or_else(|| DecodeError::missing("commit.rev"))?;
    let rev = syntax::parse_tid(&rev_text).ok_or_else(|| {
        DecodeError::new(
            DropReason::BadRev,
            format_args!("revision `{rev_text}` is not a TID"),
        )
    })?;
    let operation = match raw.operation.as_deref() {
        Some("create") => Operation::Create,
        Some("update") => Operation::Update,
        Some("delete") => Operation::Delete,
        Some(other) => {
            return Err(DecodeError::new(
                DropReason::UnknownOperation,
                format_args!("unknown commit operation `{other}`"),
            ));
        }
        None => return Err(DecodeError::missing("commit.operation")),
    };
    let collection = raw
        .collection
        .ok_or_else(|| DecodeError::missing("commit.collection"))?;
    if !syntax::is_valid_nsid(&collection) {
        return Err(DecodeError::new(
            DropReason::BadNsid,
            format_args!("collection `{collection}` is not an NSID"),
        ));
    }
    let rkey = raw
        .rkey
        .ok_or_else(|| DecodeError::missing("commit.rkey"))?;
    if !syntax::is_valid_record_key(&rkey) {
        return Err(DecodeError::new(
            DropReason::BadRkey,
            format_args!("`{rkey}` is not a record key"),
        ));
    }
    let record = match operation {
        Operation::Delete => None,
        Operation::Create | Operation::Update => {
            let lazy = raw
                .record
                .ok_or_else(|| DecodeError::missing("commit.record"))?;
            let json = reborrow(text, lazy.as_raw_str())
                .ok_or_else(|| DecodeError::new(DropReason::BadJson, "record is not borrowable"))?;
            let cid = raw.cid.ok_or_else(|| DecodeError::missing("commit.cid"))?;
            if !syntax::is_valid_cid(&cid) {
                return Err(DecodeError::new(
                    DropReason::BadCid,
                    format_args!("`{cid}` is not a CID"),
                ));
            }
            Some(record(&collection, cid, json)?)
        }
    };
    Ok(Commit {
        rev,
        operation,
        collection,
        rkey,
        record,
    })
}

fn record<'a>(
    collection: &str,
    cid: Cow<'a, str>,
    json: &'a str,
) -> Result<Record<'a>, DecodeError> {
    // The whole event passed `check_nesting`, so its record did too.
    let (created_at_us, refs) = record_fields_unchecked(collection, json)?;
    Ok(Record {
        cid,
        json,
        created_at_us,
        refs,
    })
}

/// Reads `createdAt` and the indexed references of a record of `collection` from its JSON text.
///
/// Ingest calls it through [`decode`]; the store calls it again on a stored record to find the
/// index entries a delete must remove.
pub fn record_fields<'a>(
    collection: &str,
    json: &'a str,
) -> Result<(Option<i64>, Refs<'a>), DecodeError> {
    check_nesting(json.as_bytes())?;
    record_fields_unchecked(collection, json)
}

/// [`record_fields`] of a record whose nesting was checked already.
fn record_fields_unchecked<'a>(
    collection: &str,
    json: &'a str,
) -> Result<(Option<i64>, Refs<'a>), DecodeError> {
    if !json.starts_with('{') {
        return Err(DecodeError::new(
            DropReason::BadJson,
            "record is not a JSON object",
        ));
    }
    if !is_indexed(collection) {
        return Ok((None, Refs::None));
    }
    // Parsing the record a second time, into only the fields an index needs, is cheaper than
    // building a generic tree of every field on the first pass.
    let fields: RawRecord<'a> = sonic_rs::from_str(json)
        .map_err(|err| DecodeError::new(DropReason::BadJson, format_args!("bad record: {err}")))?;
    let created_at_us = match &fields.created_at {
        Some(text) => Some(syntax::parse_datetime_micros(text).ok_or_else(|| {
            DecodeError::new(
                DropReason::BadDatetime,
                format_args!("`{text}` is not a datetime"),
            )
        })?),
        // Profiles are the one indexed collection whose `createdAt` is optional.
        None if collection == nsid::PROFILE => None,
        None => return Err(DecodeError::missing("record.createdAt")),
    };
    Ok((created_at_us, refs(collection, fields)?))
}

/// Whether Starling indexes records of `collection` beyond storing them.
pub fn is_indexed(collection: &str) -> bool {
    use nsid::*;
    matches!(
        collection,
        POST | REPOST
            | LIKE
            | THREADGATE
            | POSTGATE
            | GENERATOR
            | FOLLOW
            | BLOCK
            | LIST
            | LISTITEM
            | LISTBLOCK
            | STARTERPACK
            | PROFILE
            | VERIFICATION
    )
}

fn refs<'a>(collection: &str, fields: RawRecord<'a>) -> Result<Refs<'a>, DecodeError> {
    use nsid::*;
    Ok(match collection {
        POST => post_refs(fields)?,
        LIKE | REPOST => Refs::Subject {
            subject: subject_uri(fields.subject)?,
            // A `via` that names no record is ignored, as the reference ignores it: the like
            // itself is sound.
            via: fields
                .via
                .and_then(|via| via.uri)
                .and_then(|uri| uri_ref(uri).ok()),
        },
        FOLLOW | BLOCK | VERIFICATION => Refs::Actor {
            subject: subject_did(fields.subject)?,
        },
        LISTITEM => Refs::ListItem {
            subject: subject_did(fields.subject)?,
            list: required_uri("record.list", fields.list)?,
        },
        LISTBLOCK => match fields.subject {
            Some(Subject::Did(uri)) => Refs::Target {
                target: uri_ref(uri)?,
            },
            _ => return Err(DecodeError::missing("record.subject")),
        },
        STARTERPACK => Refs::Target {
            target: required_uri("record.list", fields.list)?,
        },
        THREADGATE | POSTGATE => Refs::Target {
            target: required_uri("record.post", fields.post)?,
        },
        // A starter pack reference that names no record is ignored: the profile is sound.
        PROFILE => match fields
            .joined_via_starter_pack
            .and_then(|j| j.uri)
            .map(uri_ref)
        {
            Some(Ok(joined_via)) => Refs::Profile { joined_via },
            _ => Refs::None,
        },
        _ => Refs::None,
    })
}

fn post_refs(fields: RawRecord<'_>) -> Result<Refs<'_>, DecodeError> {
    let reply = match fields.reply {
        None => None,
        Some(reply) => {
            let root = reply.root.and_then(|r| r.uri);
            let parent = reply.parent.and_then(|r| r.uri);
            Some(Reply {
                root: required_uri("record.reply.root.uri", root)?,
                parent: required_uri("record.reply.parent.uri", parent)?,
            })
        }
    };
    let (quote, media) = match fields.embed {
        None => (None, Media::None),
        Some(embed) => embed_refs(embed)?,
    };
    Ok(Refs::Post {
        reply,
        quote,
        media,
        mentions: mentions(fields.facets.unwrap_or_default()),
    })
}

/// The distinct valid DIDs of a post's mention facets, in order, at most [`MENTIONS_MAX`]; a
/// mention of something that is not a DID names nobody and is skipped.
fn mentions(facets: Vec<RawFacet<'_>>) -> Vec<Cow<'_, str>> {
    let mut res: Vec<Cow<'_, str>> = Vec::new();
    for feature in facets.into_iter().flat_map(|facet| facet.features) {
        if feature.kind.as_deref() != Some("app.bsky.richtext.facet#mention") {
            continue;
        }
        let Some(did) = feature.did else { continue };
        if res.len() < MENTIONS_MAX && syntax::is_valid_did(&did) && !res.contains(&did) {
            res.push(did);
        }
    }
    res
}

fn embed_refs(embed: RawEmbed<'_>) -> Result<(Option<RecordUri<'_>>, Media), DecodeError> {
    let quote_uri = embed.record.and_then(|record| match record.record {
        Some(inner) => inner.uri,
        None => record.uri,
    });
    let quote = match quote_uri {
        Some(uri) => Some(uri_ref(uri)?),
        None => None,
    };
    let media_kind = embed.media.and_then(|media| media.kind).or(embed.kind);
    let media = match media_kind.as_deref() {
        Some("app.bsky.embed.images") => Media::Images,
        Some("app.bsky.embed.video") => Media::Video,
        Some("app.bsky.embed.external") => Media::External,
        _ => Media::None,
    };
    Ok((quote, media))
}

fn subject_uri(subject: Option<Subject<'_>>) -> Result<RecordUri<'_>, DecodeError> {
    match subject {
        Some(Subject::Ref(uri)) => required_uri("record.subject.uri", uri),
        Some(Subject::Did(_) | Subject::Other) => Err(DecodeError::new(
            DropReason::BadJson,
            "record.subject is not a strong reference",
        )),
        None => Err(DecodeError::missing("record.subject")),
    }
}

fn subject_did(subject: Option<Subject<'_>>) -> Result<Cow<'_, str>, DecodeError> {
    match subject {
        Some(Subject::Did(did)) if syntax::is_valid_did(&did) => Ok(did),
        Some(Subject::Did(did)) => Err(DecodeError::new(
            DropReason::BadDid,
            format_args!("subject `{did}` is not a DID"),
        )),
        Some(Subject::Ref(_) | Subject::Other) => Err(DecodeError::new(
            DropReason::BadJson,
            "record.subject is not a DID string",
        )),
        None => Err(DecodeError::missing("record.subject")),
    }
}

fn required_uri<'a>(field: &str, uri: Option<Cow<'a, str>>) -> Result<RecordUri<'a>, DecodeError> {
    uri_ref(uri.ok_or_else(|| DecodeError::missing(field))?)
}

fn uri_ref(uri: Cow<'_, str>) -> Result<RecordUri<'_>, DecodeError> {
    match uri {
        Cow::Borrowed(text) => RecordUri::parse(text).ok_or_else(|| {
            DecodeError::new(DropReason::BadUri, format_args!("`{text}` names no record"))
        }),
        // An escaped URI cannot be borrowed; such URIs are vanishingly rare and always suspect.
        Cow::Owned(text) => Err(DecodeError::new(
            DropReason::BadUri,
            format_args!("`{text}` is escaped"),
        )),
    }
}
