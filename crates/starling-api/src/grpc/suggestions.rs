//! Suggestions: GetFollowSuggestions and GetActorFollowsActors from the in-memory graph,
//! GetSuggestedFeeds from the feed generators of the search index ranked by likes, and
//! GetSuggestedEntities (an operator's curated list in the reference, which Starling does not
//! keep: always empty).
//!
//! Ranking of follow suggestions: the accounts followed by the accounts the viewer follows
//! (`starling_graph::follow_suggestions`: not the viewer, not already followed, no block either
//! way), most of the viewer's follows following them first, ties by DID ascending. Suggested
//! feeds: most likes first, ties by URI ascending. Cursors are the offset of the next result.

use std::sync::Arc;

use starling_core::syntax::RecordUri;
use starling_search::{RecordKind, SearchIndex};
use starling_store::{EdgeKind, Store};
use tonic::Status;

use super::proto::*;
use super::rpc::{blocking, check_batch, check_did, check_dids, check_limit, internal};
use crate::{AppState, Shown};

/// The most feed generators ranked for GetSuggestedFeeds (newest first, then by likes).
pub const SUGGESTED_FEEDS_SCANNED_MAX: usize = 10_000;
/// How deep suggestion pages may go.
pub const SUGGESTION_OFFSET_MAX: usize = 10_000;

fn check_offset(cursor: &str) -> Result<usize, Status> {
    if cursor.is_empty() {
        return Ok(0);
    }
    cursor
        .parse::<usize>()
        .ok()
        .filter(|&offset| offset <= SUGGESTION_OFFSET_MAX && !cursor.starts_with('+'))
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "`cursor`: `{}` is not a suggestion cursor Starling gave",
                Shown(cursor)
            ))
        })
}

/// `items[offset..offset + limit]` and the cursor of the page after it.
fn page_of<T: Clone>(items: &[T], offset: usize, limit: usize) -> (Vec<T>, String) {
    let page: Vec<T> = items.iter().skip(offset).take(limit).cloned().collect();
    let end = offset + page.len();
    let cursor = if end < items.len() && end < SUGGESTION_OFFSET_MAX {
        end.to_string()
    } else {
        String::new()
    };
    (page, cursor)
}

pub(crate) async fn get_follow_suggestions<S: Store + 'static>(
    state: &AppState<S>,
    req: GetFollowSuggestionsRequest,
) -> Result<GetFollowSuggestionsResponse, Status> {
    if !req.actor_did.is_empty() {
        check_did("actor_did", &req.actor_did)?;
    }
    if !req.relative_to_did.is_empty() {
        check_did("relative_to_did", &req.relative_to_did)?;
    }
    let limit = check_limit(req.limit)?;
    let offset = check_offset(&req.cursor)?;
    // An anonymous viewer has no follows to walk.
    let Some(viewer) = state.store.actor_id(&req.actor_did) else {
        return Ok(GetFollowSuggestionsResponse::default());
    };
    let state = state.clone();
    blocking(move || {
        let suggestions = starling_graph::follow_suggestions(&state.graph, viewer);
        let mut ranked: Vec<(u32, String)> = suggestions
            .into_iter()
            .filter_map(|s| Some((s.n_followed_by_follows, state.store.did(s.actor)?)))
            .collect();
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let dids: Vec<String> = ranked.into_iter().map(|(_, did)| did).collect();
        let (dids, cursor) = page_of(&dids, offset, limit);
        Ok(GetFollowSuggestionsResponse { dids, cursor })
    })
    .await
}

pub(crate) async fn get_actor_follows_actors<S: Store + 'static>(
    state: &AppState<S>,
    req: GetActorFollowsActorsRequest,
) -> Result<GetActorFollowsActorsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_batch("target_dids", req.target_dids.len())?;
    check_dids("target_dids", &req.target_dids)?;
    let state = state.clone();
    blocking(move || {
        let actor = state.store.actor_id(&req.actor_did);
        let mut uris = Vec::with_capacity(req.target_dids.len());
        for did in &req.target_dids {
            let uri = match (actor, state.store.actor_id(did)) {
                (Some(actor), Some(target)) if state.graph.does_follow(actor, target) => state
                    .store
                    .edge_uri(EdgeKind::Follow, actor, target)
                    .map_err(internal)?
                    .unwrap_or_default(),
                _ => String::new(),
            };
            uris.push(uri);
        }
        Ok(GetActorFollowsActorsResponse { uris })
    })
    .await
}

pub(crate) async fn get_suggested_feeds<S: Store + 'static>(
    state: &AppState<S>,
    search: Option<&Arc<SearchIndex>>,
    req: GetSuggestedFeedsRequest,
) -> Result<GetSuggestedFeedsResponse, Status> {
    if !req.actor_did.is_empty() {
        check_did("actor_did", &req.actor_did)?;
    }
    let limit = check_limit(req.limit)?;
    let offset = check_offset(&req.cursor)?;
    let Some(index) = search.cloned() else {
        return Err(Status::unavailable("search is not running on this server"));
    };
    let store = state.store.clone();
    blocking(move || {
        let uris = index
            .all_records(RecordKind::FeedGenerator, SUGGESTED_FEEDS_SCANNED_MAX)
            .map_err(|err| internal(err.to_string().as_str()))?;
        let mut ranked = Vec::with_capacity(uris.len());
        for uri in uris {
            let Some(parsed) = RecordUri::parse(&uri) else {
                continue;
            };
            let likes = store.record_counts(&parsed).map_err(internal)?.likes;
            ranked.push((likes, uri));
        }
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let uris: Vec<String> = ranked.into_iter().map(|(_, uri)| uri).collect();
        let (uris, cursor) = page_of(&uris, offset, limit);
        Ok(GetSuggestedFeedsResponse { uris, cursor })
    })
    .await
}

pub(crate) fn get_suggested_entities(
    req: GetSuggestedEntitiesRequest,
) -> Result<GetSuggestedEntitiesResponse, Status> {
    if req.limit != 0 {
        check_limit(req.limit)?;
    }
    Ok(GetSuggestedEntitiesResponse::default())
}
