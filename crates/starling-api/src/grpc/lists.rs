//! Lists around an actor, a record or a list, and blocks through lists: an actor's likes,
//! reposts, feed generators, lists, starter packs, blocks and block-list subscriptions; a
//! record's reposts and quotes; a list's members and feed; starter pack join counts; and the
//! list blocks that GetRelationships, GetBlockExistence and GetBidirectionalBlockViaList
//! report.
//!
//! Every page is newest first by the record's `sort_at` (`min(createdAt, indexedAt)`), with
//! hex cursors (`rpc::list_cursor`), as the reference orders them by `sortAt` (feed generators
//! and block-list subscriptions by `createdAt`, the same for records whose clock is sane).

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey, flag};
use starling_core::jetstream::{self, Refs, nsid};
use starling_core::syntax::RecordUri;
use starling_store::{DidMemo, EdgeKind, ListEntry, ListOf, ListPage, Store};
use tonic::Status;

use super::proto::*;
use super::rpc::{
    blocking, check_did, check_feed_cursor, check_limit, check_list_cursor, check_uri, has,
    inline_or_blocking, internal, list_cursor, page_cursor, saturate,
};
use crate::AppState;
use crate::feed_api::item_uris;

/// The list blocks of one actor that block checks read, at most: a block through a list
/// beyond them is not seen (an account subscribes to a handful of block lists).
pub const LIST_BLOCKS_CHECKED_MAX: usize = 1_000;

/// The members of a list whose posts a list feed merges, at most.
pub const LIST_FEED_MEMBERS_MAX: usize = 1_000;

/// Join entries read to count a starter pack's joins of the last week, at most.
pub const WEEK_JOINS_SCAN_MAX: usize = 10_000;

/// A week, in microseconds.
const WEEK_US: i64 = 7 * 24 * 3_600 * 1_000_000;

/// A page of `did`'s records of `collection`, newest first; empty for an unknown actor.
pub(crate) async fn actor_records<S: Store + 'static>(
    state: &AppState<S>,
    did: String,
    collection: &'static str,
    limit: i32,
    cursor: String,
) -> Result<ListPage, Status> {
    check_did("actor_did", &did)?;
    let limit = check_limit(limit)?;
    let after = check_list_cursor(&cursor)?;
    let store = state.store.clone();
    inline_or_blocking(store.reads_inline(), move || {
        let list = ListOf::ActorRecords {
            did: &did,
            collection,
        };
        store
            .list_page(&list, after.as_deref(), limit)
            .map_err(internal)
    })
    .await
}

/// The URIs of a page and its cursor, as most list RPCs answer.
pub(crate) fn uris(page: ListPage) -> (Vec<String>, String) {
    let uris = page.entries.into_iter().map(|entry| entry.uri).collect();
    (uris, list_cursor(page.cursor))
}

/// Which list around a record a subject page reads.
#[derive(Clone, Copy)]
pub(crate) enum SubjectList {
    /// Likes of the record.
    Likes,
    /// Reposts of the record.
    Reposts,
    /// Posts quoting the record.
    Quotes,
}

/// A page of the likes, reposts or quotes of `subject`, newest first.
pub(crate) async fn subject_page<S: Store + 'static>(
    state: &AppState<S>,
    subject: Option<RecordRef>,
    which: SubjectList,
    limit: i32,
    cursor: String,
) -> Result<(Vec<String>, String), Status> {
    let subject = subject.unwrap_or_default().uri;
    check_uri("subject", 0, &subject)?;
    let limit = check_limit(limit)?;
    let after = check_list_cursor(&cursor)?;
    let store = state.store.clone();
    inline_or_blocking(store.reads_inline(), move || {
        let uri = RecordUri::parse(&subject).ok_or_else(|| internal("checked URI"))?;
        let list = match which {
            SubjectList::Likes => ListOf::Likes(uri),
            SubjectList::Reposts => ListOf::Reposts(uri),
            SubjectList::Quotes => ListOf::Quotes(uri),
        };
        let page = store
            .list_page(&list, after.as_deref(), limit)
            .map_err(internal)?;
        Ok(uris(page))
    })
    .await
}

/// The record an actor's record entry points at (the liked post, the blocked list): the one
/// its entry keeps (taken from it), or else the one its record names, if it is stored and
/// names one.
fn target_of<S: Store>(store: &S, entry: &mut ListEntry) -> Result<Option<String>, Status> {
    if let Some(target) = entry.target.take() {
        return Ok(Some(target));
    }
    let Some(parsed) = RecordUri::parse(&entry.uri) else {
        return Ok(None);
    };
    let Some(record) = store
        .record(parsed.did, parsed.collection, parsed.rkey)
        .map_err(internal)?
    else {
        return Ok(None);
    };
    Ok(
        match jetstream::record_fields(parsed.collection, &record.json) {
            Ok((_, Refs::Subject { subject, .. })) | Ok((_, Refs::Target { target: subject })) => {
                Some(format!(
                    "at://{}/{}/{}",
                    subject.did, subject.collection, subject.rkey
                ))
            }
            _ => None,
        },
    )
}

pub(crate) async fn get_actor_likes<S: Store + 'static>(
    state: &AppState<S>,
    req: GetActorLikesRequest,
) -> Result<GetActorLikesResponse, Status> {
    let page = actor_records(state, req.actor_did, nsid::LIKE, req.limit, req.cursor).await?;
    let store = state.store.clone();
    inline_or_blocking(store.reads_inline(), move || {
        let mut likes = Vec::with_capacity(page.entries.len());
        for mut entry in page.entries {
            let subject = target_of(&*store, &mut entry)?.unwrap_or_default();
            likes.push(LikeInfo {
                uri: entry.uri,
                subject,
            });
        }
        Ok(GetActorLikesResponse {
            likes,
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

pub(crate) async fn get_blocklist_subscriptions<S: Store + 'static>(
    state: &AppState<S>,
    req: GetBlocklistSubscriptionsRequest,
) -> Result<GetBlocklistSubscriptionsResponse, Status> {
    let page = actor_records(state, req.actor_did, nsid::LISTBLOCK, req.limit, req.cursor).await?;
    let store = state.store.clone();
    inline_or_blocking(store.reads_inline(), move || {
        // Like the reference, only lists that are stored (it joins on its list table).
        let mut list_uris = Vec::with_capacity(page.entries.len());
        for mut entry in page.entries {
            if let Some(list) = target_of(&*store, &mut entry)?
                && stored(&*store, &list)?
            {
                list_uris.push(list);
            }
        }
        Ok(GetBlocklistSubscriptionsResponse {
            list_uris,
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

/// Whether the record `uri` names is stored.
fn stored<S: Store>(store: &S, uri: &str) -> Result<bool, Status> {
    let Some(parsed) = RecordUri::parse(uri) else {
        return Ok(false);
    };
    store
        .record_is_live(parsed.did, parsed.collection, parsed.rkey)
        .map_err(internal)
}

pub(crate) async fn get_list_members<S: Store + 'static>(
    state: &AppState<S>,
    req: GetListMembersRequest,
) -> Result<GetListMembersResponse, Status> {
    check_uri("list_uri", 0, &req.list_uri)?;
    if !req.viewer_did.is_empty() {
        check_did("viewer_did", &req.viewer_did)?;
    }
    let limit = check_limit(req.limit)?;
    let after = check_list_cursor(&req.cursor)?;
    let store = state.store.clone();
    inline_or_blocking(store.reads_inline(), move || {
        let list = RecordUri::parse(&req.list_uri).ok_or_else(|| internal("checked URI"))?;
        let Some(owner) = store.actor_id(list.did) else {
            return Ok(GetListMembersResponse::default());
        };
        let page = store
            .list_page(&ListOf::ListItems { list, owner }, after.as_deref(), limit)
            .map_err(internal)?;
        let listitems = page
            .entries
            .into_iter()
            .map(|entry| ListItemInfo {
                uri: entry.uri,
                did: entry
                    .subject
                    .and_then(|subject| store.did(subject))
                    .unwrap_or_default(),
                subject_opted_out: false,
            })
            .collect();
        Ok(GetListMembersResponse {
            listitems,
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

pub(crate) async fn get_list_count<S: Store + 'static>(
    state: &AppState<S>,
    req: GetListCountRequest,
) -> Result<GetListCountResponse, Status> {
    check_uri("list_uri", 0, &req.list_uri)?;
    let store = state.store.clone();
    inline_or_blocking(store.reads_inline(), move || {
        let list = RecordUri::parse(&req.list_uri).ok_or_else(|| internal("checked URI"))?;
        let counts = store.record_counts(&list).map_err(internal)?;
        Ok(GetListCountResponse {
            count: saturate(counts.list_items),
        })
    })
    .await
}

/// Every member of the list `list` (owned by `owner`), at most [`LIST_FEED_MEMBERS_MAX`].
fn list_members<S: Store>(
    store: &S,
    list: RecordUri<'_>,
    owner: ActorId,
) -> Result<Vec<ActorId>, Status> {
    let mut members = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    while members.len() < LIST_FEED_MEMBERS_MAX {
        let page = store
            .list_page(&ListOf::ListItems { list, owner }, after.as_deref(), 100)
            .map_err(internal)?;
        members.extend(page.entries.iter().filter_map(|entry| entry.subject));
        match page.cursor {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    members.sort_unstable();
    members.dedup();
    members.truncate(LIST_FEED_MEMBERS_MAX);
    Ok(members)
}

/// Up to `limit` of `author`'s own posts below `below`, newest first.
fn member_posts<S: Store>(
    store: &S,
    author: ActorId,
    below: Option<FeedKey>,
    limit: usize,
) -> Result<Vec<FeedItem>, Status> {
    let mut posts = Vec::new();
    store
        .author_feed(author, below, &mut |item| {
            if !item.is_repost() {
                posts.push(item);
            }
            posts.len() < limit
        })
        .map_err(internal)?;
    Ok(posts)
}

pub(crate) async fn get_list_feed<S: Store + 'static>(
    state: &AppState<S>,
    req: GetListFeedRequest,
) -> Result<GetListFeedResponse, Status> {
    check_uri("list_uri", 0, &req.list_uri)?;
    let limit = check_limit(req.limit)?;
    let below = check_feed_cursor(&req.cursor)?;
    let store = state.store.clone();
    blocking(move || {
        let list = RecordUri::parse(&req.list_uri).ok_or_else(|| internal("checked URI"))?;
        let Some(owner) = store.actor_id(list.did) else {
            return Ok(GetListFeedResponse::default());
        };
        // The posts (never reposts, as the reference) of every member, merged newest first.
        let mut items = Vec::new();
        for member in list_members(&*store, list, owner)? {
            items.extend(member_posts(&*store, member, below, limit + 1)?);
        }
        items.sort_unstable_by_key(|item| std::cmp::Reverse(item.key));
        let more = items.len() > limit;
        items.truncate(limit);
        let cursor = if more {
            items.last().map(|item| item.key)
        } else {
            None
        };
        let mut dids = DidMemo::default();
        let items = items
            .iter()
            .filter_map(|item| {
                let (uri, _) = item_uris(&*store, &mut dids, item)?;
                Some(TimelineFeedItem {
                    uri,
                    is_reply: has(item, flag::REPLY),
                    is_quote_post: has(item, flag::QUOTE),
                    ..TimelineFeedItem::default()
                })
            })
            .collect();
        Ok(GetListFeedResponse {
            items,
            cursor: page_cursor(cursor),
        })
    })
    .await
}

pub(crate) async fn get_starter_pack_counts<S: Store + 'static>(
    state: &AppState<S>,
    req: GetStarterPackCountsRequest,
) -> Result<GetStarterPackCountsResponse, Status> {
    super::rpc::check_batch("refs", req.refs.len())?;
    for (idx, r) in req.refs.iter().enumerate() {
        check_uri("refs", idx, &r.uri)?;
    }
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
        });
    let store = state.store.clone();
    blocking(move || {
        let mut res = GetStarterPackCountsResponse::default();
        for r in &req.refs {
            let uri = RecordUri::parse(&r.uri).ok_or_else(|| internal("checked URI"))?;
            let all_time = store.starter_pack_joins(&uri).map_err(internal)?;
            res.joined_all_time.push(saturate(all_time));
            let week = if all_time == 0 {
                0
            } else {
                joins_since(&*store, uri, now_us - WEEK_US)?
            };
            res.joined_week.push(saturate(week));
        }
        Ok(res)
    })
    .await
}

/// The joins through the starter pack `uri` newer than `since_us`, counting at most
/// [`WEEK_JOINS_SCAN_MAX`].
fn joins_since<S: Store>(store: &S, uri: RecordUri<'_>, since_us: i64) -> Result<u64, Status> {
    let mut n_joins = 0;
    let mut after: Option<Vec<u8>> = None;
    while n_joins < WEEK_JOINS_SCAN_MAX as u64 {
        let page = store
            .list_page(&ListOf::Joins(uri), after.as_deref(), 100)
            .map_err(internal)?;
        for entry in &page.entries {
            if entry.sort_at_us <= since_us {
                return Ok(n_joins);
            }
            n_joins += 1;
        }
        match page.cursor {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    Ok(n_joins)
}

/// The lists `actor` blocks through its list blocks (the lists' URIs, as the list blocks name
/// them), at most [`LIST_BLOCKS_CHECKED_MAX`].
pub(crate) fn blocked_lists<S: Store>(store: &S, actor: &str) -> Result<Vec<String>, Status> {
    let mut lists = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    let list = ListOf::ActorRecords {
        did: actor,
        collection: nsid::LISTBLOCK,
    };
    let mut n_read = 0;
    while n_read < LIST_BLOCKS_CHECKED_MAX {
        let page = store
            .list_page(&list, after.as_deref(), 100)
            .map_err(internal)?;
        n_read += page.entries.len();
        for mut entry in page.entries {
            if let Some(list) = target_of(store, &mut entry)? {
                lists.push(list);
            }
        }
        match page.cursor {
            Some(cursor) => after = Some(cursor),
            None => break,
        }
    }
    Ok(lists)
}

/// The first of `lists` that has `subject` as a member, or empty.
pub(crate) fn list_with_member<S: Store>(
    store: &S,
    lists: &[String],
    subject: Option<ActorId>,
) -> Result<String, Status> {
    let Some(subject) = subject else {
        return Ok(String::new());
    };
    for list in lists {
        let Some(parsed) = RecordUri::parse(list) else {
            continue;
        };
        if store
            .list_item_uri(&parsed, subject)
            .map_err(internal)?
            .is_some()
        {
            return Ok(list.clone());
        }
    }
    Ok(String::new())
}

/// The list through which `actor` blocks `target`, or empty.
pub(crate) fn block_via_list<S: Store>(
    store: &S,
    actor: &str,
    target: &str,
) -> Result<String, Status> {
    let lists = blocked_lists(store, actor)?;
    list_with_member(store, &lists, store.actor_id(target))
}

pub(crate) async fn get_bidirectional_block_via_list<S: Store + 'static>(
    state: &AppState<S>,
    req: GetBidirectionalBlockViaListRequest,
) -> Result<GetBidirectionalBlockViaListResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_did("target_did", &req.target_did)?;
    let store = state.store.clone();
    blocking(move || {
        let mut list_uri = block_via_list(&*store, &req.actor_did, &req.target_did)?;
        if list_uri.is_empty() {
            list_uri = block_via_list(&*store, &req.target_did, &req.actor_did)?;
        }
        Ok(GetBidirectionalBlockViaListResponse { list_uri })
    })
    .await
}

pub(crate) async fn get_bidirectional_block<S: Store + 'static>(
    state: &AppState<S>,
    req: GetBidirectionalBlockRequest,
) -> Result<GetBidirectionalBlockResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_did("target_did", &req.target_did)?;
    let state = state.clone();
    blocking(move || {
        let actor = state.store.actor_id(&req.actor_did);
        let target = state.store.actor_id(&req.target_did);
        let mut block_uri = String::new();
        for (from, to) in [(actor, target), (target, actor)] {
            if let (Some(from), Some(to)) = (from, to)
                && block_uri.is_empty()
                && state.graph.blocks(from, to)
            {
                block_uri = state
                    .store
                    .edge_uri(EdgeKind::Block, from, to)
                    .map_err(internal)?
                    .unwrap_or_default();
            }
        }
        Ok(GetBidirectionalBlockResponse { block_uri })
    })
    .await
}
