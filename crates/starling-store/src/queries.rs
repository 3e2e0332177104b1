//! The index prefixes that answer the store's point and list queries, the same for both
//! backends: which entries to read is decided here, how to read them in each backend.

use starling_core::ActorId;
use starling_core::jetstream::nsid;
use starling_core::syntax::RecordUri;

use crate::codec::{by_actor_key, edge_prefix};
use crate::keys::tag;
use crate::{EdgeKind, InteractionKind, ListOf, StoreError};

/// `0 ++ record ref` of a record, if its actor and collection are known; the queries put an
/// index tag in the first byte.
pub(crate) type RefOf<'a> = dyn FnMut(&RecordUri<'_>) -> Result<Option<Vec<u8>>, StoreError> + 'a;

/// The prefix whose first entry ends in the record key of `actor`'s follow or block of
/// `subject`, and that record's collection.
pub(crate) fn edge(kind: EdgeKind, actor: ActorId, subject: ActorId) -> ([u8; 9], &'static str) {
    let (edge_tag, nsid) = match kind {
        EdgeKind::Follow => (tag::FOLLOW_EDGE, nsid::FOLLOW),
        EdgeKind::Block => (tag::BLOCK_BY_ACTOR, nsid::BLOCK),
    };
    (edge_prefix(edge_tag, actor, subject), nsid)
}

/// The prefix whose first entry ends in the record key of `actor`'s like, repost or list block
/// of `subject`, and that record's collection; `None` when the subject names nothing stored.
pub(crate) fn interaction(
    kind: InteractionKind,
    actor: ActorId,
    subject: &RecordUri<'_>,
    ref_of: &mut RefOf<'_>,
) -> Result<Option<(Vec<u8>, &'static str)>, StoreError> {
    let (index_tag, nsid) = match kind {
        InteractionKind::Like => (tag::LIKE_BY_ACTOR, nsid::LIKE),
        InteractionKind::Repost => (tag::REPOST_BY_ACTOR, nsid::REPOST),
        InteractionKind::ListBlock => (tag::LISTBLOCK_BY_ACTOR, nsid::LISTBLOCK),
    };
    Ok(
        ref_of(subject)?
            .map(|subject_ref| (by_actor_key(index_tag, actor, &subject_ref, ""), nsid)),
    )
}

/// The prefix whose first entry ends in the record key of the list item putting `subject` in
/// `list`; `None` when the list names nothing stored.
pub(crate) fn list_item(
    list: &RecordUri<'_>,
    subject: ActorId,
    ref_of: &mut RefOf<'_>,
) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(ref_of(list)?.map(|mut prefix| {
        if let Some(first) = prefix.first_mut() {
            *first = tag::LISTITEM_BY_LIST;
        }
        prefix.extend_from_slice(&subject.0.to_be_bytes());
        prefix
    }))
}

/// The prefix of the entries of `list`, newest last; `None` when its subject names nothing
/// stored. Every list's keys end in: sort_at (8), the other actor (4), rkey
/// ([`crate::codec::list_entry`] decodes that tail).
pub(crate) fn list(
    list: &ListOf<'_>,
    ref_of: &mut RefOf<'_>,
) -> Result<Option<Vec<u8>>, StoreError> {
    let (list_tag, uri) = match list {
        ListOf::Follows(actor) => {
            return Ok(Some(
                [&[tag::FOLLOW_BY_ACTOR][..], &actor.0.to_be_bytes()].concat(),
            ));
        }
        ListOf::Verifications(actor) => {
            return Ok(Some(
                [&[tag::VERIFICATION_BY_SUBJECT][..], &actor.0.to_be_bytes()].concat(),
            ));
        }
        ListOf::Followers(actor) => {
            return Ok(Some(
                [&[tag::FOLLOW_BY_SUBJECT][..], &actor.0.to_be_bytes()].concat(),
            ));
        }
        ListOf::Likes(uri) => (tag::LIKE_BY_SUBJECT, uri),
        ListOf::Replies(uri) => (tag::REPLY_BY_PARENT, uri),
        ListOf::Reposts(uri) => (tag::REPOST_BY_SUBJECT, uri),
        ListOf::Quotes(uri) => (tag::QUOTE_BY_SUBJECT, uri),
        ListOf::ListItems { list, .. } => (tag::LISTITEM_BY_TIME, list),
        ListOf::Joins(uri) => (tag::JOIN_BY_STARTERPACK, uri),
        ListOf::ActorRecords { did, collection } => {
            // `0 ++ actor ++ collection ++ 0` of an empty record key: the prefix without its
            // last byte.
            let uri = RecordUri {
                did,
                collection,
                rkey: "",
            };
            return Ok(ref_of(&uri)?.map(|mut key| {
                key.pop();
                if let Some(first) = key.first_mut() {
                    *first = tag::ACTOR_RECORDS;
                }
                key
            }));
        }
    };
    Ok(ref_of(uri)?.map(|mut key| {
        if let Some(first) = key.first_mut() {
            *first = list_tag;
        }
        key
    }))
}
