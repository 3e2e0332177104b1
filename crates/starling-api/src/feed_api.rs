//! `/v1/timeline` and `/v1/author-feed`: home timelines and author feeds as JSON.
//!
//! `GET /v1/timeline?actor=DID[&limit=N][&cursor=C]` and
//! `GET /v1/author-feed?actor=DID[&filter=F][&limit=N][&cursor=C]` answer
//! `{"items": [{"uri": post, "repost": repost (absent for a post)}], "cursor": C}`, newest
//! first; `cursor` is absent on the last page. A DID Starling has never seen has an empty
//! feed; a malformed DID, limit, cursor or filter is HTTP 400 with a JSON error.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use starling_core::feed::{FeedItem, FeedKey};
use starling_store::{DidMemo, Store};
use starling_timeline::{AuthorFilter, PAGE_ITEMS_MAX, Page};

use crate::Shown;
use crate::graph_api::{check_did, query};
use crate::{ApiError, AppState};

/// Items per page when `limit` is not given.
pub const PAGE_ITEMS_DEFAULT: usize = 50;

/// `?actor=DID&limit=N&cursor=C&filter=F`.
#[derive(Deserialize)]
pub struct FeedQuery {
    actor: String,
    limit: Option<usize>,
    cursor: Option<String>,
    filter: Option<String>,
}

/// One item: the post, and the repost record when the item is a repost.
#[derive(Serialize)]
pub struct ItemBody {
    uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    repost: Option<String>,
}

/// A page of items.
#[derive(Serialize)]
pub struct FeedBody {
    items: Vec<ItemBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<String>,
}

struct Checked {
    limit: usize,
    cursor: Option<FeedKey>,
}

fn check(params: &FeedQuery) -> Result<Checked, ApiError> {
    check_did("actor", &params.actor)?;
    let limit = params.limit.unwrap_or(PAGE_ITEMS_DEFAULT);
    if limit == 0 || limit > PAGE_ITEMS_MAX {
        return Err(ApiError::bad_request(format!(
            "`limit` is {limit}; it must be between 1 and {PAGE_ITEMS_MAX}"
        )));
    }
    let cursor = match params.cursor.as_deref() {
        None | Some("") => None,
        Some(text) => Some(FeedKey::from_cursor(text).ok_or_else(|| {
            ApiError::bad_request(format!(
                "`cursor`: `{}` is not a cursor Starling gave",
                Shown(text)
            ))
        })?),
    };
    Ok(Checked { limit, cursor })
}

/// The post URI and, for a repost, the repost URI of an item; `dids` keeps the DIDs of a
/// page's last few actors (an author feed names its author on nearly every item).
pub fn item_uris<S: Store>(
    store: &S,
    dids: &mut DidMemo,
    item: &FeedItem,
) -> Option<(String, Option<String>)> {
    // Written straight into the URIs: a page has up to 100 items, and a DID string and a
    // formatted URI apiece showed up in profiles.
    let mut post = String::with_capacity(URI_BYTES_TYPICAL);
    item.push_post_uri(dids.did(store, item.post.actor)?, &mut post);
    let repost = if item.is_repost() {
        let mut repost = String::with_capacity(URI_BYTES_TYPICAL);
        item.push_uri(
            dids.did(store, item.key.author)?,
            "app.bsky.feed.repost",
            &mut repost,
        );
        Some(repost)
    } else {
        None
    };
    Some((post, repost))
}

/// Bytes of a typical record URI: a `did:plc`, a collection and a TID.
const URI_BYTES_TYPICAL: usize = 80;

fn body<S: Store>(store: &S, page: Page) -> FeedBody {
    let mut dids = DidMemo::default();
    FeedBody {
        items: page
            .items
            .iter()
            .filter_map(|item| item_uris(store, &mut dids, item))
            .map(|(uri, repost)| ItemBody { uri, repost })
            .collect(),
        cursor: page.cursor.map(|key| key.to_cursor()),
    }
}

/// `GET /v1/timeline`.
pub async fn timeline<S: Store + 'static>(
    State(state): State<AppState<S>>,
    params: Result<Query<FeedQuery>, QueryRejection>,
) -> Result<Json<FeedBody>, ApiError> {
    let params = query(params)?;
    let checked = check(&params)?;
    let Some(reader) = state.store.actor_id(&params.actor) else {
        return Ok(Json(body(&*state.store, Page::default())));
    };
    // A warm page is served here; a first read builds the timeline from the store, which is
    // blocking work.
    let (limit, cursor) = (checked.limit, checked.cursor);
    let page = match state.timelines.read_from_memory(reader, limit, cursor) {
        Some(page) => page,
        None => {
            let timelines = state.timelines.clone();
            tokio::task::spawn_blocking(move || timelines.read(reader, limit, cursor))
                .await
                .map_err(ApiError::internal)?
                .map_err(ApiError::internal)?
        }
    };
    Ok(Json(body(&*state.store, page)))
}

/// `GET /v1/author-feed`.
pub async fn author_feed<S: Store + 'static>(
    State(state): State<AppState<S>>,
    params: Result<Query<FeedQuery>, QueryRejection>,
) -> Result<Json<FeedBody>, ApiError> {
    let params = query(params)?;
    let checked = check(&params)?;
    let filter = match params.filter.as_deref() {
        None => AuthorFilter::default(),
        Some(name) => AuthorFilter::from_name(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "`filter`: `{}` is not one of posts_with_replies, posts_and_author_threads, \
                 posts_no_replies, posts_with_media, posts_with_video",
                Shown(name)
            ))
        })?,
    };
    let Some(author) = state.store.actor_id(&params.actor) else {
        return Ok(Json(body(&*state.store, Page::default())));
    };
    let timelines = state.timelines.clone();
    let page = tokio::task::spawn_blocking(move || {
        let source = timelines.source();
        starling_timeline::author_feed(&source, author, filter, checked.limit, checked.cursor)
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    Ok(Json(body(&*state.store, page)))
}
