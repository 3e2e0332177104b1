//! The RPCs Starling answers: request validation, the store, graph and timeline calls, and the
//! mapping to `bsky` messages. Each function serves one RPC of `DataplaneService`.
//!
//! Rules the AppView relies on (see the contract): batch responses are aligned by index with
//! the request, missing things are empty values at their index, an empty string means absent,
//! cursors never contain `::`. Malformed input is `INVALID_ARGUMENT` naming the bad value.

use prost_types::Timestamp;
use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey, flag};
use starling_core::jetstream::{self, Media, Refs};
use starling_core::syntax::{RecordUri, is_valid_did};
use starling_store::{Store, StoredRecord};
use starling_timeline::AuthorFilter;
use tonic::Status;

use super::proto::*;
use crate::AppState;
use crate::feed_api::item_uris;

/// Items per page when a request's `limit` is 0.
pub const PAGE_ITEMS_DEFAULT: i32 = 50;
/// The largest `limit` a page request may ask for.
pub const PAGE_ITEMS_MAX: i32 = 100;
/// The most URIs, DIDs or refs one batch request may name.
pub const BATCH_ITEMS_MAX: usize = 10_000;

/// Runs blocking store work off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| Status::internal(format!("request task failed: {err}")))?
}

pub(crate) fn internal(err: impl std::fmt::Display) -> Status {
    tracing::error!(error = %err, "rpc failed");
    Status::internal("internal error")
}

fn check_did<'a>(field: &str, did: &'a str) -> Result<&'a str, Status> {
    if is_valid_did(did) {
        Ok(did)
    } else {
        Err(Status::invalid_argument(format!(
            "`{field}`: `{did}` is not a DID"
        )))
    }
}

fn check_batch(field: &str, len: usize) -> Result<(), Status> {
    if len > BATCH_ITEMS_MAX {
        return Err(Status::invalid_argument(format!(
            "`{field}` has {len} entries; at most {BATCH_ITEMS_MAX} are allowed"
        )));
    }
    Ok(())
}

fn check_limit(limit: i32) -> Result<usize, Status> {
    match limit {
        0 => Ok(PAGE_ITEMS_DEFAULT as usize),
        1..=PAGE_ITEMS_MAX => Ok(limit as usize),
        _ => Err(Status::invalid_argument(format!(
            "`limit` is {limit}; it must be between 1 and {PAGE_ITEMS_MAX} (0 for {PAGE_ITEMS_DEFAULT})"
        ))),
    }
}

fn check_feed_cursor(cursor: &str) -> Result<Option<FeedKey>, Status> {
    if cursor.is_empty() {
        return Ok(None);
    }
    FeedKey::from_cursor(cursor).map(Some).ok_or_else(|| {
        Status::invalid_argument(format!(
            "`cursor`: `{cursor}` is not a cursor Starling gave"
        ))
    })
}

fn check_uri<'a>(field: &str, idx: usize, uri: &'a str) -> Result<RecordUri<'a>, Status> {
    RecordUri::parse(uri).ok_or_else(|| {
        Status::invalid_argument(format!(
            "`{field}[{idx}]`: `{uri}` is not an AT-URI of a record"
        ))
    })
}

fn timestamp(micros: i64) -> Timestamp {
    Timestamp {
        seconds: micros.div_euclid(1_000_000),
        nanos: (micros.rem_euclid(1_000_000) * 1_000) as i32,
    }
}

/// The `Record` message of a stored record, or of a missing one (`null`, empty cid).
pub(crate) fn record_message(record: Option<&StoredRecord>) -> Record {
    match record {
        Some(record) => Record {
            record: record.json.clone().into_bytes(),
            cid: record.cid.clone(),
            indexed_at: Some(timestamp(record.indexed_at_us)),
            created_at: record.created_at_us.map(timestamp),
            sorted_at: Some(timestamp(record.sort_at_us)),
            ..Record::default()
        },
        None => Record {
            record: b"null".to_vec(),
            ..Record::default()
        },
    }
}

/// The page of a feed read, in the AppView's terms.
fn page_cursor(cursor: Option<FeedKey>) -> String {
    cursor.map(|key| key.to_cursor()).unwrap_or_default()
}

fn has(item: &FeedItem, bits: u8) -> bool {
    item.flags & bits != 0
}

pub(crate) async fn get_timeline<S: Store + 'static>(
    state: &AppState<S>,
    req: GetTimelineRequest,
) -> Result<GetTimelineResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let limit = check_limit(req.limit)?;
    let cursor = check_feed_cursor(&req.cursor)?;
    let Some(reader) = state.store.actor_id(&req.actor_did) else {
        return Ok(GetTimelineResponse::default());
    };
    let state = state.clone();
    blocking(move || {
        let page = state
            .timelines
            .read(reader, limit, cursor)
            .map_err(internal)?;
        let items = page
            .items
            .iter()
            .filter_map(|item| {
                let (uri, repost) = item_uris(&*state.store, item)?;
                Some(TimelineFeedItem {
                    uri,
                    repost: repost.unwrap_or_default(),
                    is_reply: has(item, flag::REPLY),
                    is_repost: item.is_repost(),
                    is_quote_post: has(item, flag::QUOTE),
                    ..TimelineFeedItem::default()
                })
            })
            .collect();
        Ok(GetTimelineResponse {
            items,
            cursor: page_cursor(page.cursor),
        })
    })
    .await
}

pub(crate) async fn get_author_feed<S: Store + 'static>(
    state: &AppState<S>,
    req: GetAuthorFeedRequest,
) -> Result<GetAuthorFeedResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let limit = check_limit(req.limit)?;
    let cursor = check_feed_cursor(&req.cursor)?;
    let filter = match FeedType::try_from(req.feed_type) {
        Ok(FeedType::Unspecified) => AuthorFilter::PostsWithReplies,
        Ok(FeedType::PostsAndAuthorThreads) => AuthorFilter::PostsAndAuthorThreads,
        Ok(FeedType::PostsNoReplies) => AuthorFilter::PostsNoReplies,
        Ok(FeedType::PostsWithMedia) => AuthorFilter::PostsWithMedia,
        Ok(FeedType::PostsWithVideo) => AuthorFilter::PostsWithVideo,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "`feed_type` {} is not a FeedType",
                req.feed_type
            )));
        }
    };
    let Some(author) = state.store.actor_id(&req.actor_did) else {
        return Ok(GetAuthorFeedResponse::default());
    };
    let state = state.clone();
    blocking(move || {
        let source = state.timelines.source();
        let page = starling_timeline::author_feed(source, author, filter, limit, cursor)
            .map_err(internal)?;
        let items = page
            .items
            .iter()
            .filter_map(|item| {
                let (uri, repost) = item_uris(&*state.store, item)?;
                Some(AuthorFeedItem {
                    uri,
                    repost: repost.unwrap_or_default(),
                    posts_and_author_threads: AuthorFilter::PostsAndAuthorThreads.shows(item),
                    posts_no_replies: AuthorFilter::PostsNoReplies.shows(item),
                    posts_with_media: AuthorFilter::PostsWithMedia.shows(item),
                    posts_with_video: AuthorFilter::PostsWithVideo.shows(item),
                    is_reply: has(item, flag::REPLY),
                    is_repost: item.is_repost(),
                    is_quote_post: has(item, flag::QUOTE),
                    ..AuthorFeedItem::default()
                })
            })
            .collect();
        Ok(GetAuthorFeedResponse {
            items,
            cursor: page_cursor(page.cursor),
        })
    })
    .await
}

pub(crate) async fn get_post_records<S: Store + 'static>(
    state: &AppState<S>,
    req: GetPostRecordsRequest,
) -> Result<GetPostRecordsResponse, Status> {
    check_batch("uris", req.uris.len())?;
    for (idx, uri) in req.uris.iter().enumerate() {
        check_uri("uris", idx, uri)?;
    }
    let store = state.store.clone();
    blocking(move || {
        let mut res = GetPostRecordsResponse::default();
        for uri in &req.uris {
            let parsed = RecordUri::parse(uri).ok_or_else(|| internal("checked URI"))?;
            let record = store
                .record(parsed.did, parsed.collection, parsed.rkey)
                .map_err(internal)?;
            let mut meta = PostRecordMeta::default();
            if let Some(record) = &record
                && let Ok((_, Refs::Post { reply, media, .. })) =
                    jetstream::record_fields(parsed.collection, &record.json)
            {
                meta.is_reply = reply.is_some();
                meta.has_media = matches!(media, Media::Images | Media::Video);
                meta.has_video = media == Media::Video;
            }
            res.records.push(record_message(record.as_ref()));
            res.meta.push(meta);
        }
        Ok(res)
    })
    .await
}

pub(crate) async fn get_interaction_counts<S: Store + 'static>(
    state: &AppState<S>,
    req: GetInteractionCountsRequest,
) -> Result<GetInteractionCountsResponse, Status> {
    check_batch("refs", req.refs.len())?;
    for (idx, r) in req.refs.iter().enumerate() {
        check_uri("refs", idx, &r.uri)?;
    }
    let store = state.store.clone();
    blocking(move || {
        let mut res = GetInteractionCountsResponse::default();
        for r in &req.refs {
            let parsed = RecordUri::parse(&r.uri).ok_or_else(|| internal("checked URI"))?;
            let counts = store.record_counts(&parsed).map_err(internal)?;
            res.likes.push(saturate(counts.likes));
            res.reposts.push(saturate(counts.reposts));
            res.replies.push(saturate(counts.replies));
            res.quotes.push(saturate(counts.quotes));
            res.bookmarks.push(0);
        }
        Ok(res)
    })
    .await
}

fn saturate(count: impl TryInto<i32>) -> i32 {
    count.try_into().unwrap_or(i32::MAX)
}

pub(crate) async fn get_counts_for_users<S: Store + 'static>(
    state: &AppState<S>,
    req: GetCountsForUsersRequest,
) -> Result<GetCountsForUsersResponse, Status> {
    check_batch("dids", req.dids.len())?;
    for did in &req.dids {
        check_did("dids", did)?;
    }
    let state = state.clone();
    blocking(move || {
        let mut res = GetCountsForUsersResponse::default();
        for did in &req.dids {
            let actor = state.store.actor_id(did);
            let counts = match actor {
                Some(actor) => state.store.actor_counts(actor).map_err(internal)?,
                None => Default::default(),
            };
            let (followers, following) = actor.map_or((0, 0), |actor| {
                (
                    state.graph.n_followers(actor),
                    state.graph.n_following(actor),
                )
            });
            res.posts.push(saturate(counts.posts));
            res.reposts.push(0);
            res.following.push(saturate(following));
            res.followers.push(saturate(followers));
            res.lists.push(saturate(counts.lists));
            res.feeds.push(saturate(counts.feeds));
            res.starter_packs.push(saturate(counts.starter_packs));
            res.drafts.push(0);
        }
        Ok(res)
    })
    .await
}

pub(crate) fn get_follows_following<S: Store>(
    state: &AppState<S>,
    req: GetFollowsFollowingRequest,
) -> Result<GetFollowsFollowingResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_batch("target_dids", req.target_dids.len())?;
    for did in &req.target_dids {
        check_did("target_dids", did)?;
    }
    let viewer = state.store.actor_id(&req.actor_did);
    let results = req
        .target_dids
        .iter()
        .map(|target_did| {
            let dids = match (viewer, state.store.actor_id(target_did)) {
                (Some(viewer), Some(target)) => state
                    .graph
                    .known_followers(viewer, target, None)
                    .ids
                    .as_slice()
                    .iter()
                    .filter_map(|&id: &ActorId| state.store.did(id))
                    .collect(),
                _ => Vec::new(),
            };
            FollowsFollowing {
                target_did: target_did.clone(),
                dids,
            }
        })
        .collect();
    Ok(GetFollowsFollowingResponse { results })
}
