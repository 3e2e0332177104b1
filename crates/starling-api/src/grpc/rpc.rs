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
use starling_core::syntax::{RecordUri, format_tid, is_valid_did};
use starling_store::{DidMemo, EdgeKind, InteractionKind, ListOf, Store, StoredRecord};
use starling_timeline::AuthorFilter;
use tonic::Status;

use super::proto::*;
use crate::AppState;
use crate::Shown;
use crate::feed_api::item_uris;

pub(super) use super::cursors::{check_list_cursor, list_cursor};

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

/// Items of a batch of counts (GetInteractionCounts, GetCountsForUsers) read on the async
/// worker that received it, when the store reads inline: a few lookups in memory each, or
/// engine reads when memory misses, so a batch stays well under a millisecond unless the
/// engine goes to disk. Handing a small batch to a blocking thread cost more CPU than its
/// reads (the scheduler's switches were a fifth of the server's CPU); a bigger batch goes
/// there so that it cannot stall the other requests on its worker.
const INLINE_COUNTS_MAX: usize = 50;

/// Runs store work on this async worker when `inline`, else as [`blocking`] does. Besides
/// small batches of counts, a page of one list runs inline on a store that reads inline: at
/// most `PAGE_ITEMS_MAX` adjacent index entries (a block or two of the engine) and a lookup
/// or two per entry, no more work than such a batch. So does an actor search the index
/// bounds as narrow (`search.rs`).
pub(crate) async fn inline_or_blocking<T: Send + 'static>(
    inline: bool,
    work: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    if inline { work() } else { blocking(work).await }
}

/// An error an RPC fails with, and whether it is a passing failure of the store cluster.
pub(crate) trait Failure: std::fmt::Display {
    /// Whether a retry, on another replica, may well succeed.
    fn unavailable(&self) -> bool {
        false
    }
}

impl Failure for starling_store::StoreError {
    fn unavailable(&self) -> bool {
        self.is_unavailable()
    }
}

impl Failure for starling_timeline::TimelineError {
    fn unavailable(&self) -> bool {
        self.is_unavailable()
    }
}

impl Failure for starling_timeline::SourceError {
    fn unavailable(&self) -> bool {
        self.unavailable
    }
}

impl Failure for &str {}

pub(crate) fn internal(err: impl Failure) -> Status {
    tracing::error!(error = %err, "rpc failed");
    // A storage cluster that fails a request (a node down, a timeout) is usually a passing
    // state: `UNAVAILABLE` makes the AppView retry, on another replica.
    if err.unavailable() {
        return Status::unavailable("the store cluster is unavailable; retry");
    }
    Status::internal("internal error")
}

pub(super) fn check_did<'a>(field: &str, did: &'a str) -> Result<&'a str, Status> {
    if is_valid_did(did) {
        Ok(did)
    } else {
        Err(Status::invalid_argument(format!(
            "`{field}`: `{}` is not a DID",
            Shown(did)
        )))
    }
}

pub(super) fn check_batch(field: &str, len: usize) -> Result<(), Status> {
    if len > BATCH_ITEMS_MAX {
        return Err(Status::invalid_argument(format!(
            "`{field}` has {len} entries; at most {BATCH_ITEMS_MAX} are allowed"
        )));
    }
    Ok(())
}

pub(super) fn check_limit(limit: i32) -> Result<usize, Status> {
    match limit {
        0 => Ok(PAGE_ITEMS_DEFAULT as usize),
        1..=PAGE_ITEMS_MAX => Ok(limit as usize),
        _ => Err(Status::invalid_argument(format!(
            "`limit` is {limit}; it must be between 1 and {PAGE_ITEMS_MAX} (0 for {PAGE_ITEMS_DEFAULT})"
        ))),
    }
}

pub(super) fn check_feed_cursor(cursor: &str) -> Result<Option<FeedKey>, Status> {
    if cursor.is_empty() {
        return Ok(None);
    }
    FeedKey::from_cursor(cursor).map(Some).ok_or_else(|| {
        Status::invalid_argument(format!(
            "`cursor`: `{}` is not a cursor Starling gave",
            Shown(cursor)
        ))
    })
}

pub(super) fn check_uri<'a>(
    field: &str,
    idx: usize,
    uri: &'a str,
) -> Result<RecordUri<'a>, Status> {
    RecordUri::parse(uri).ok_or_else(|| {
        Status::invalid_argument(format!(
            "`{field}[{idx}]`: `{}` is not an AT-URI of a record",
            Shown(uri)
        ))
    })
}

pub(super) fn timestamp(micros: i64) -> Timestamp {
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
pub(super) fn page_cursor(cursor: Option<FeedKey>) -> String {
    cursor.map(|key| key.to_cursor()).unwrap_or_default()
}

pub(super) fn has(item: &FeedItem, bits: u8) -> bool {
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
    // A warm page is served here; a cold build or a page below the head reads the store.
    let page = match state.timelines.read_from_memory(reader, limit, cursor) {
        Some(page) => page,
        None => {
            let timelines = state.timelines.clone();
            blocking(move || timelines.read(reader, limit, cursor).map_err(internal)).await?
        }
    };
    let mut dids = DidMemo::default();
    let items = page
        .items
        .iter()
        .filter_map(|item| {
            let (uri, repost) = item_uris(&*state.store, &mut dids, item)?;
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
    // An unfiltered page reads at most `limit` + 1 items; a filtered one may scan thousands.
    let inline = state.store.reads_inline() && filter == AuthorFilter::PostsWithReplies;
    let state = state.clone();
    inline_or_blocking(inline, move || {
        let source = state.timelines.source();
        let page = starling_timeline::author_feed(&source, author, filter, limit, cursor)
            .map_err(internal)?;
        let mut dids = DidMemo::default();
        let items = page
            .items
            .iter()
            .filter_map(|item| {
                let (uri, repost) = item_uris(&*state.store, &mut dids, item)?;
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
    let state = state.clone();
    blocking(move || {
        let store = &state.store;
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
                super::gates::fill(&state, &parsed, &record.json, &mut meta)?;
            }
            let mut message = record_message(record.as_ref());
            super::moderation::flag_record(&**store, uri, &mut message).map_err(internal)?;
            res.records.push(message);
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
    let store = state.store.clone();
    let inline = store.reads_inline() && req.refs.len() <= INLINE_COUNTS_MAX;
    inline_or_blocking(inline, move || {
        // Parsed once, where they are read: every URI is checked before any is.
        let uris = (req.refs.iter().enumerate())
            .map(|(idx, r)| check_uri("refs", idx, &r.uri))
            .collect::<Result<Vec<_>, _>>()?;
        let mut res = GetInteractionCountsResponse::default();
        for (r, parsed) in req.refs.iter().zip(&uris) {
            let counts = store.record_counts(parsed).map_err(internal)?;
            res.likes.push(saturate(counts.likes));
            res.reposts.push(saturate(counts.reposts));
            res.replies.push(saturate(counts.replies));
            res.quotes.push(saturate(counts.quotes));
            res.bookmarks
                .push(saturate(store.bookmark_count(&r.uri).map_err(internal)?));
        }
        Ok(res)
    })
    .await
}

pub(super) fn saturate(count: impl TryInto<i32>) -> i32 {
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
    let inline = state.store.reads_inline() && req.dids.len() <= INLINE_COUNTS_MAX;
    let state = state.clone();
    inline_or_blocking(inline, move || {
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
            res.drafts
                .push(saturate(state.store.draft_count(did).map_err(internal)?));
        }
        Ok(res)
    })
    .await
}

/// Graph probes a request may make on the async worker that received it; more go to a
/// blocking thread so that one big batch cannot stall the other RPCs on that worker.
const INLINE_PROBES_MAX: usize = 2_000;

pub(crate) async fn get_follows_following<S: Store + 'static>(
    state: &AppState<S>,
    req: GetFollowsFollowingRequest,
) -> Result<GetFollowsFollowingResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_batch("target_dids", req.target_dids.len())?;
    for did in &req.target_dids {
        check_did("target_dids", did)?;
    }
    // An unknown viewer follows nobody, and an unknown target has no followers: an id no
    // actor has answers both.
    let viewer = state
        .store
        .actor_id(&req.actor_did)
        .unwrap_or(ActorId(u32::MAX));
    let probes = state
        .graph
        .n_following(viewer)
        .saturating_mul(req.target_dids.len());
    if probes <= INLINE_PROBES_MAX {
        return Ok(follows_following(state, viewer, req.target_dids));
    }
    let state = state.clone();
    blocking(move || Ok(follows_following(&state, viewer, req.target_dids))).await
}

fn follows_following<S: Store>(
    state: &AppState<S>,
    viewer: ActorId,
    target_dids: Vec<String>,
) -> GetFollowsFollowingResponse {
    let targets: Vec<ActorId> = target_dids
        .iter()
        .map(|did| state.store.actor_id(did).unwrap_or(ActorId(u32::MAX)))
        .collect();
    let answers = state.graph.known_followers_batch(viewer, &targets, None);
    let results = target_dids
        .into_iter()
        .zip(answers)
        .map(|(target_did, answer)| FollowsFollowing {
            target_did,
            dids: answer
                .ids
                .as_slice()
                .iter()
                .filter_map(|&id| state.store.did(id))
                .collect(),
        })
        .collect();
    GetFollowsFollowingResponse { results }
}

/// The records `uris` name, aligned; a URI of another collection than `collection` is missing.
pub(crate) async fn records<S: Store + 'static>(
    state: &AppState<S>,
    uris: Vec<String>,
    collection: &'static str,
) -> Result<Vec<Record>, Status> {
    check_batch("uris", uris.len())?;
    for (idx, uri) in uris.iter().enumerate() {
        check_uri("uris", idx, uri)?;
    }
    let store = state.store.clone();
    blocking(move || {
        uris.iter()
            .map(|uri| {
                let parsed = RecordUri::parse(uri).ok_or_else(|| internal("checked URI"))?;
                let record = if parsed.collection == collection {
                    store
                        .record(parsed.did, parsed.collection, parsed.rkey)
                        .map_err(internal)?
                } else {
                    None
                };
                let mut message = record_message(record.as_ref());
                super::moderation::flag_record(&*store, uri, &mut message).map_err(internal)?;
                Ok(message)
            })
            .collect()
    })
    .await
}

pub(crate) async fn get_identity_by_did(
    resolver: Option<&starling_identity::Resolver>,
    req: GetIdentityByDidRequest,
) -> Result<GetIdentityByDidResponse, Status> {
    check_did("did", &req.did)?;
    let Some(resolver) = resolver else {
        return Err(Status::not_found(format!(
            "{}: no identity resolver is configured",
            Shown(&req.did)
        )));
    };
    match resolver.resolve(&req.did).await {
        Ok(Some(identity)) => Ok(GetIdentityByDidResponse {
            did: identity.did,
            handle: identity.handle.unwrap_or_default(),
            keys: identity.keys_json,
            services: identity.services_json,
            updated: Some(prost_types::Timestamp::from(identity.updated)),
        }),
        Ok(None) => Err(Status::not_found(format!(
            "{}: no DID document",
            Shown(&req.did)
        ))),
        Err(err) if err.is_transient() => Err(Status::unavailable(err.to_string())),
        Err(err) => Err(Status::not_found(err.to_string())),
    }
}

/// The newest revision of the actor's repository that Starling applied (empty when none): the
/// AppView sends it as `Atproto-Repo-Rev` so a client can tell whether its own write is in.
pub(crate) fn get_latest_rev<S: Store>(
    state: &AppState<S>,
    req: GetLatestRevRequest,
) -> Result<GetLatestRevResponse, Status> {
    let did = check_did("actor_did", &req.actor_did)?;
    let rev = match state.store.actor_id(did) {
        Some(actor) => state.store.latest_rev(actor).map_err(internal)?,
        None => None,
    };
    Ok(GetLatestRevResponse {
        rev: rev.map(format_tid).unwrap_or_default(),
    })
}

pub(crate) fn get_dids_by_handles<S: Store>(
    state: &AppState<S>,
    req: GetDidsByHandlesRequest,
) -> Result<GetDidsByHandlesResponse, Status> {
    check_batch("handles", req.handles.len())?;
    let dids = req
        .handles
        .iter()
        .map(|handle| {
            state
                .store
                .actor_by_handle(handle)
                .and_then(|id| state.store.did(id))
                .unwrap_or_default()
        })
        .collect();
    Ok(GetDidsByHandlesResponse { dids })
}

pub(super) fn check_dids<'a>(
    field: &str,
    dids: impl IntoIterator<Item = &'a String>,
) -> Result<(), Status> {
    for did in dids {
        check_did(field, did)?;
    }
    Ok(())
}

pub(crate) async fn get_actors<S: Store + 'static>(
    state: &AppState<S>,
    trusted: super::actors::TrustedVerifiers,
    req: GetActorsRequest,
) -> Result<GetActorsResponse, Status> {
    check_batch("dids", req.dids.len())?;
    check_dids("dids", &req.dids)?;
    let state = state.clone();
    blocking(move || {
        let store = &state.store;
        let mut actors = Vec::with_capacity(req.dids.len());
        for did in &req.dids {
            let Some(info) = store.actor(did).map_err(internal)? else {
                actors.push(ActorInfo::default());
                continue;
            };
            let profile = store
                .record(did, jetstream::nsid::PROFILE, "self")
                .map_err(internal)?;
            let upstream_status = match info.status {
                jetstream::AccountStatus::Active => "",
                jetstream::AccountStatus::Takendown => "takendown",
                jetstream::AccountStatus::Suspended => "suspended",
                jetstream::AccountStatus::Deleted => "deleted",
                jetstream::AccountStatus::Deactivated => "deactivated",
                jetstream::AccountStatus::OtherInactive => "deactivated",
            };
            let deleted = info.status == jetstream::AccountStatus::Deleted;
            let mut profile_message = profile.as_ref().map(|p| record_message(Some(p)));
            if let Some(message) = &mut profile_message {
                let uri = format!("at://{did}/{}/self", jetstream::nsid::PROFILE);
                super::moderation::flag_record(&**store, &uri, message).map_err(internal)?;
            }
            let mut actor = ActorInfo {
                exists: !deleted,
                handle: info.handle.clone().unwrap_or_default(),
                created_at: profile
                    .as_ref()
                    .and_then(|p| p.created_at_us)
                    .map(timestamp),
                profile: profile_message,
                upstream_status: upstream_status.to_owned(),
                ..ActorInfo::default()
            };
            super::actors::fill(&state, &trusted, did, &mut actor)?;
            super::moderation::flag_actor(&**store, &info, &mut actor).map_err(internal)?;
            actors.push(actor);
        }
        Ok(GetActorsResponse { actors })
    })
    .await
}

/// The URI of `actor`'s `kind` record naming `subject`, or empty.
///
/// The graph in memory answers first: nearly every pair the AppView asks about has no edge,
/// and saying so from memory saves a store read. It is updated right after each batch's
/// commit, so an edge committed a moment ago may still read as absent, as it would a moment
/// earlier.
fn edge_uri<S: Store>(
    state: &AppState<S>,
    kind: EdgeKind,
    actor: Option<ActorId>,
    subject: Option<ActorId>,
) -> Result<String, Status> {
    let (Some(actor), Some(subject)) = (actor, subject) else {
        return Ok(String::new());
    };
    let in_graph = match kind {
        EdgeKind::Follow => state.graph.does_follow(actor, subject),
        EdgeKind::Block => state.graph.blocks(actor, subject),
    };
    if !in_graph {
        return Ok(String::new());
    }
    Ok(state
        .store
        .edge_uri(kind, actor, subject)
        .map_err(internal)?
        .unwrap_or_default())
}

pub(crate) async fn get_relationships<S: Store + 'static>(
    state: &AppState<S>,
    req: GetRelationshipsRequest,
) -> Result<GetRelationshipsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_batch("target_dids", req.target_dids.len())?;
    check_dids("target_dids", &req.target_dids)?;
    let state = state.clone();
    blocking(move || {
        let viewer = state.store.actor_id(&req.actor_did);
        let store = &*state.store;
        let viewer_lists = match viewer {
            Some(_) => super::lists::blocked_lists(store, &req.actor_did)?,
            None => Vec::new(),
        };
        let mut relationships = Vec::with_capacity(req.target_dids.len());
        for did in &req.target_dids {
            let target = state.store.actor_id(did);
            let blocked_by_list = match (viewer, target) {
                (Some(_), Some(_)) => super::lists::block_via_list(store, did, &req.actor_did)?,
                _ => String::new(),
            };
            relationships.push(Relationships {
                following: edge_uri(&state, EdgeKind::Follow, viewer, target)?,
                followed_by: edge_uri(&state, EdgeKind::Follow, target, viewer)?,
                blocking: edge_uri(&state, EdgeKind::Block, viewer, target)?,
                blocked_by: edge_uri(&state, EdgeKind::Block, target, viewer)?,
                blocking_by_list: super::lists::list_with_member(store, &viewer_lists, target)?,
                blocked_by_list,
                ..Relationships::default()
            });
        }
        super::private::add_mutes(
            &*state.store,
            &req.actor_did,
            &req.target_dids,
            &mut relationships,
        )?;
        Ok(GetRelationshipsResponse { relationships })
    })
    .await
}

pub(crate) async fn get_block_existence<S: Store + 'static>(
    state: &AppState<S>,
    req: GetBlockExistenceRequest,
) -> Result<GetBlockExistenceResponse, Status> {
    check_batch("pairs", req.pairs.len())?;
    for pair in &req.pairs {
        check_did("pairs.a", &pair.a)?;
        check_did("pairs.b", &pair.b)?;
    }
    let state = state.clone();
    blocking(move || {
        let mut res = GetBlockExistenceResponse::default();
        for pair in &req.pairs {
            let (a, b) = (state.store.actor_id(&pair.a), state.store.actor_id(&pair.b));
            let (blocking_by_list, blocked_by_list) = match (a, b) {
                (Some(_), Some(_)) => (
                    super::lists::block_via_list(&*state.store, &pair.a, &pair.b)?,
                    super::lists::block_via_list(&*state.store, &pair.b, &pair.a)?,
                ),
                _ => (String::new(), String::new()),
            };
            let block = BlockExistence {
                blocking: edge_uri(&state, EdgeKind::Block, a, b)?,
                blocked_by: edge_uri(&state, EdgeKind::Block, b, a)?,
                blocking_by_list,
                blocked_by_list,
            };
            res.exists.push(
                !block.blocking.is_empty()
                    || !block.blocked_by.is_empty()
                    || !block.blocking_by_list.is_empty()
                    || !block.blocked_by_list.is_empty(),
            );
            res.blocks.push(block);
        }
        Ok(res)
    })
    .await
}

/// A page of an actor's followers (`followers`) or follows.
pub(crate) async fn follow_page<S: Store + 'static>(
    state: &AppState<S>,
    actor_did: String,
    limit: i32,
    cursor: String,
    followers: bool,
) -> Result<(Vec<FollowInfo>, String), Status> {
    check_did("actor_did", &actor_did)?;
    let limit = check_limit(limit)?;
    let after = check_list_cursor(&cursor)?;
    let Some(actor) = state.store.actor_id(&actor_did) else {
        return Ok((Vec::new(), String::new()));
    };
    let store = state.store.clone();
    inline_or_blocking(store.reads_inline(), move || {
        let list = if followers {
            ListOf::Followers(actor)
        } else {
            ListOf::Follows(actor)
        };
        let page = store
            .list_page(&list, after.as_deref(), limit)
            .map_err(internal)?;
        // One side of every follow on the page is the actor asked about: only the other
        // side's DID is looked up.
        let did_of = |id: ActorId| store.did(id).unwrap_or_default();
        let infos = page
            .entries
            .into_iter()
            .map(|entry| {
                let (actor_did, subject_did) = if followers {
                    (did_of(entry.author), actor_did.clone())
                } else {
                    (
                        actor_did.clone(),
                        entry.subject.map(did_of).unwrap_or_default(),
                    )
                };
                FollowInfo {
                    uri: entry.uri,
                    actor_did,
                    subject_did,
                }
            })
            .collect();
        Ok((infos, list_cursor(page.cursor)))
    })
    .await
}

pub(crate) async fn get_likes_by_subject_sorted<S: Store + 'static>(
    state: &AppState<S>,
    req: GetLikesBySubjectSortedRequest,
) -> Result<GetLikesBySubjectSortedResponse, Status> {
    let subject = req.subject.unwrap_or_default();
    check_uri("subject", 0, &subject.uri)?;
    let limit = check_limit(req.limit)?;
    let after = check_list_cursor(&req.cursor)?;
    let store = state.store.clone();
    blocking(move || {
        let parsed = RecordUri::parse(&subject.uri).ok_or_else(|| internal("checked URI"))?;
        let page = store
            .list_page(&ListOf::Likes(parsed), after.as_deref(), limit)
            .map_err(internal)?;
        Ok(GetLikesBySubjectSortedResponse {
            uris: page.entries.into_iter().map(|entry| entry.uri).collect(),
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

/// The URIs of `actor_did`'s likes or reposts of each ref, aligned; empty where none.
pub(crate) async fn interactions<S: Store + 'static>(
    state: &AppState<S>,
    actor_did: String,
    refs: Vec<RecordRef>,
    kind: InteractionKind,
) -> Result<Vec<String>, Status> {
    check_did("actor_did", &actor_did)?;
    check_batch("refs", refs.len())?;
    for (idx, r) in refs.iter().enumerate() {
        check_uri("refs", idx, &r.uri)?;
    }
    let Some(actor) = state.store.actor_id(&actor_did) else {
        return Ok(vec![String::new(); refs.len()]);
    };
    let store = state.store.clone();
    blocking(move || {
        refs.iter()
            .map(|r| {
                let parsed = RecordUri::parse(&r.uri).ok_or_else(|| internal("checked URI"))?;
                Ok(store
                    .interaction_uri(kind, actor, &parsed)
                    .map_err(internal)?
                    .unwrap_or_default())
            })
            .collect()
    })
    .await
}

/// Thread levels above or below the anchor a request may ask for.
pub const THREAD_DEPTH_MAX: i32 = 1_000;
/// Descendants one thread answer lists at most.
pub const THREAD_REPLIES_MAX: usize = 10_000;

pub(crate) async fn get_thread<S: Store + 'static>(
    state: &AppState<S>,
    req: GetThreadRequest,
) -> Result<GetThreadResponse, Status> {
    check_uri("post_uri", 0, &req.post_uri)?;
    for (field, depth) in [("above", req.above), ("below", req.below)] {
        if !(0..=THREAD_DEPTH_MAX).contains(&depth) {
            return Err(Status::invalid_argument(format!(
                "`{field}` is {depth}; it must be between 0 and {THREAD_DEPTH_MAX}"
            )));
        }
    }
    let store = state.store.clone();
    blocking(move || {
        let anchor = RecordUri::parse(&req.post_uri).ok_or_else(|| internal("checked URI"))?;
        let Some(record) = store
            .record(anchor.did, anchor.collection, anchor.rkey)
            .map_err(internal)?
        else {
            return Ok(GetThreadResponse::default());
        };
        // Ancestors, nearest first while walking, then listed root first.
        let mut ancestors = Vec::new();
        let mut parent = reply_parent(anchor.collection, &record.json);
        while let Some(uri) = parent.take() {
            if ancestors.len() >= req.above as usize || ancestors.contains(&uri) {
                break;
            }
            let Some(parsed) = RecordUri::parse(&uri) else {
                break;
            };
            let Some(record) = store
                .record(parsed.did, parsed.collection, parsed.rkey)
                .map_err(internal)?
            else {
                break;
            };
            parent = reply_parent(parsed.collection, &record.json);
            ancestors.push(uri);
        }
        ancestors.reverse();
        let mut uris = ancestors;
        uris.push(req.post_uri.clone());
        // Descendants, level by level, newest reply first among siblings.
        let mut level = vec![req.post_uri.clone()];
        for _ in 0..req.below {
            let mut next = Vec::new();
            for uri in &level {
                let Some(parsed) = RecordUri::parse(uri) else {
                    continue;
                };
                let room = THREAD_REPLIES_MAX.saturating_sub(uris.len() + next.len());
                if room == 0 {
                    break;
                }
                let page = store
                    .list_page(&ListOf::Replies(parsed), None, room)
                    .map_err(internal)?;
                next.extend(page.entries.into_iter().map(|entry| entry.uri));
            }
            if next.is_empty() {
                break;
            }
            uris.extend(next.iter().cloned());
            level = next;
        }
        Ok(GetThreadResponse {
            uris,
            op_thread: Vec::new(),
        })
    })
    .await
}

/// The reply parent of a stored post, if it is a reply.
fn reply_parent(collection: &str, json: &str) -> Option<String> {
    match jetstream::record_fields(collection, json) {
        Ok((
            _,
            Refs::Post {
                reply: Some(reply), ..
            },
        )) => Some(format!(
            "at://{}/{}/{}",
            reply.parent.did, reply.parent.collection, reply.parent.rkey
        )),
        _ => None,
    }
}

/// Items of each list, aligned with `refs`.
pub(crate) async fn list_counts<S: Store + 'static>(
    state: &AppState<S>,
    refs: Vec<RecordRef>,
) -> Result<Vec<i32>, Status> {
    check_batch("refs", refs.len())?;
    for (idx, r) in refs.iter().enumerate() {
        check_uri("refs", idx, &r.uri)?;
    }
    let store = state.store.clone();
    blocking(move || {
        refs.iter()
            .map(|r| {
                let parsed = RecordUri::parse(&r.uri).ok_or_else(|| internal("checked URI"))?;
                Ok(saturate(
                    store.record_counts(&parsed).map_err(internal)?.list_items,
                ))
            })
            .collect()
    })
    .await
}

/// `actor_did`'s list item URI in each list, or empty, aligned with `list_uris`.
pub(crate) async fn list_membership<S: Store + 'static>(
    state: &AppState<S>,
    actor_did: String,
    list_uris: Vec<String>,
) -> Result<Vec<String>, Status> {
    check_did("actor_did", &actor_did)?;
    check_batch("list_uris", list_uris.len())?;
    for (idx, uri) in list_uris.iter().enumerate() {
        check_uri("list_uris", idx, uri)?;
    }
    let Some(actor) = state.store.actor_id(&actor_did) else {
        return Ok(vec![String::new(); list_uris.len()]);
    };
    let store = state.store.clone();
    blocking(move || {
        list_uris
            .iter()
            .map(|uri| {
                let parsed = RecordUri::parse(uri).ok_or_else(|| internal("checked URI"))?;
                Ok(store
                    .list_item_uri(&parsed, actor)
                    .map_err(internal)?
                    .unwrap_or_default())
            })
            .collect()
    })
    .await
}
