//! The search RPCs, answered from the built-in index (`starling-search`): SearchActors,
//! SearchActorsV2, SearchActorsTypeahead, SearchPosts, SearchPostsV2, SearchStarterPacks(V2),
//! SearchFeedGenerators(V2). Ranking and query bounds are the index's (see its crate doc);
//! here: validation, the author filter resolved to a DID, cursors (the offset of the next
//! result, in decimal), and the mapping to messages.

use std::sync::Arc;

use starling_search::{
    ActorQuery, Hits, Page, PostFilter, PostQuery, PostSort, RecordKind, SearchError, SearchIndex,
    WordsQuery,
};
use starling_store::Store;
use tonic::Status;

use super::proto::*;
use super::rpc::{blocking, check_did, check_limit, inline_or_blocking};
use crate::{AppState, Shown};

/// Results a typeahead answers when the request's `limit` is 0.
pub const TYPEAHEAD_DEFAULT: usize = 10;

/// The index, or `UNAVAILABLE` when this server runs without one.
fn index(search: Option<&Arc<SearchIndex>>) -> Result<Arc<SearchIndex>, Status> {
    search
        .cloned()
        .ok_or_else(|| Status::unavailable("search is not running on this server"))
}

fn search_status(err: SearchError) -> Status {
    match err {
        SearchError::Engine(_) => super::rpc::internal(err.to_string().as_str()),
        _ => Status::invalid_argument(format!("query: {err}")),
    }
}

/// The offset a search cursor names (`""` is the first page).
fn check_cursor(cursor: &str) -> Result<usize, Status> {
    if cursor.is_empty() {
        return Ok(0);
    }
    cursor
        .parse::<usize>()
        .ok()
        .filter(|&offset| offset <= starling_search::OFFSET_MAX && !cursor.starts_with('+'))
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "`cursor`: `{}` is not a search cursor Starling gave",
                Shown(cursor)
            ))
        })
}

fn page(limit: i32, cursor: &str) -> Result<Page, Status> {
    let limit = check_limit(limit)?;
    let offset = check_cursor(cursor)?;
    Page::new(offset, limit).map_err(search_status)
}

fn cursor(hits: &Hits) -> String {
    hits.next_offset.map(|o| o.to_string()).unwrap_or_default()
}

fn ids(hits: Hits) -> Vec<String> {
    hits.hits.into_iter().map(|hit| hit.id).collect()
}

fn page_info(hits: &Hits) -> Option<PageInfo> {
    Some(PageInfo {
        cursor: cursor(hits),
        hits_total: 0,
    })
}

/// Actors a search may match, at most, to run on the async worker that received it: a bound
/// the index checks from its term dictionaries at a bounded cost. Such a search scores a few
/// hundred documents and reads a page of them, less work than handing it to a blocking thread
/// (the hand-off was about a quarter of the server's CPU per narrow search); a broader one
/// goes there so that it cannot stall the other requests on its worker.
const INLINE_ACTOR_MATCHES_MAX: u64 = 256;

async fn actors(search: Option<&Arc<SearchIndex>>, term: &str, page: Page) -> Result<Hits, Status> {
    let index = index(search)?;
    let query = ActorQuery::parse(term).map_err(search_status)?;
    let search = index
        .prepare_actors(&query, INLINE_ACTOR_MATCHES_MAX)
        .map_err(search_status)?;
    inline_or_blocking(search.is_narrow(), move || {
        search.run(page).map_err(search_status)
    })
    .await
}

pub(crate) async fn search_actors(
    search: Option<&Arc<SearchIndex>>,
    req: SearchActorsRequest,
) -> Result<SearchActorsResponse, Status> {
    let hits = actors(search, &req.term, page(req.limit, &req.cursor)?).await?;
    Ok(SearchActorsResponse {
        cursor: cursor(&hits),
        dids: ids(hits),
    })
}

fn actor_results(hits: Hits) -> Vec<SearchActorResult> {
    hits.hits
        .into_iter()
        .map(|hit| SearchActorResult {
            did: hit.id,
            score: hit.score,
        })
        .collect()
}

fn record_results(hits: Hits) -> Vec<SearchRecordResult> {
    hits.hits
        .into_iter()
        .map(|hit| SearchRecordResult {
            uri: hit.id,
            score: hit.score,
        })
        .collect()
}

pub(crate) async fn search_actors_v2(
    search: Option<&Arc<SearchIndex>>,
    req: SearchActorsV2Request,
) -> Result<SearchActorsV2Response, Status> {
    let params = req.params.unwrap_or_default();
    let hits = actors(search, &params.query, page(params.limit, &params.cursor)?).await?;
    Ok(SearchActorsV2Response {
        page_info: page_info(&hits),
        actors: actor_results(hits),
    })
}

pub(crate) async fn search_actors_typeahead(
    search: Option<&Arc<SearchIndex>>,
    req: SearchActorsTypeaheadRequest,
) -> Result<SearchActorsTypeaheadResponse, Status> {
    let params = req.params.unwrap_or_default();
    let limit = match params.limit {
        0 => TYPEAHEAD_DEFAULT,
        limit => check_limit(limit)?,
    };
    let page = Page::new(0, limit).map_err(search_status)?;
    let hits = actors(search, &params.query, page).await?;
    Ok(SearchActorsTypeaheadResponse {
        actors: actor_results(hits),
    })
}

/// The author filter as a DID: a DID as given, `me` as the viewer, a handle looked up; `None`
/// inside when the author is unknown (nothing matches).
fn resolve_author<S: Store>(
    store: &S,
    author: &str,
    viewer: &str,
) -> Result<Option<String>, Status> {
    if author == "me" {
        return Ok((!viewer.is_empty()).then(|| viewer.to_owned()));
    }
    if author.starts_with("did:") {
        return check_did("author", author).map(|did| Some(did.to_owned()));
    }
    let handle = author.trim_start_matches('@').to_lowercase();
    Ok(store
        .actor_by_handle(&handle)
        .and_then(|actor| store.did(actor)))
}

async fn posts<S: Store + 'static>(
    state: &AppState<S>,
    search: Option<&Arc<SearchIndex>>,
    query: PostQuery,
    viewer: &str,
    sort: PostSort,
    page: Page,
) -> Result<Hits, Status> {
    let index = index(search)?;
    let author = match &query.author {
        Some(author) => match resolve_author(&*state.store, author, viewer)? {
            Some(did) => Some(did),
            None => return Ok(Hits::default()),
        },
        None => None,
    };
    let filter = PostFilter {
        author,
        since_us: query.since_us,
        until_us: query.until_us,
        lang: query.lang.clone(),
    };
    blocking(move || {
        index
            .search_posts(&query, &filter, sort, page)
            .map_err(search_status)
    })
    .await
}

pub(crate) async fn search_posts<S: Store + 'static>(
    state: &AppState<S>,
    search: Option<&Arc<SearchIndex>>,
    req: SearchPostsRequest,
) -> Result<SearchPostsResponse, Status> {
    let page = page(req.limit, &req.cursor)?;
    let query = PostQuery::parse(&req.term).map_err(search_status)?;
    // The reference orders this RPC's results newest first.
    let hits = posts(state, search, query, "", PostSort::Latest, page).await?;
    Ok(SearchPostsResponse {
        cursor: cursor(&hits),
        uris: ids(hits),
    })
}

/// Filters of SearchPostsV2 Starling does not apply: refused rather than ignored.
fn check_unsupported(req: &SearchPostsV2Request) -> Result<(), Status> {
    let filters = req.filters.clone().unwrap_or_default();
    let unsupported = [
        ("filters.mentions", !filters.mentions.is_empty()),
        ("filters.domains", !filters.domains.is_empty()),
        ("filters.urls", !filters.urls.is_empty()),
        (
            "filters.embedded_at_uris",
            !filters.embedded_at_uris.is_empty(),
        ),
        ("filters.hashtags", !filters.hashtags.is_empty()),
        ("filters.authors (more than one)", filters.authors.len() > 1),
        (
            "filters.languages (more than one)",
            filters.languages.len() > 1,
        ),
        (
            "exclude",
            req.exclude
                .as_ref()
                .is_some_and(|e| *e != PostsFilters::default()),
        ),
        ("has_media", req.has_media == Some(true)),
        ("has_video", req.has_video == Some(true)),
        (
            "reply_parent_uri",
            req.reply_parent_uri.as_ref().is_some_and(|u| !u.is_empty()),
        ),
        (
            "thread_root_uri",
            req.thread_root_uri.as_ref().is_some_and(|u| !u.is_empty()),
        ),
        ("exclude_replies", req.exclude_replies == Some(true)),
        ("replies_only", req.replies_only == Some(true)),
        ("following", req.following == Some(true)),
    ];
    match unsupported.iter().find(|(_, set)| *set) {
        Some((name, _)) => Err(Status::invalid_argument(format!(
            "`{name}` is not supported by Starling's search"
        ))),
        None => Ok(()),
    }
}

fn micros(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp
        .seconds
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(timestamp.nanos) / 1_000)
}

pub(crate) async fn search_posts_v2<S: Store + 'static>(
    state: &AppState<S>,
    search: Option<&Arc<SearchIndex>>,
    req: SearchPostsV2Request,
) -> Result<SearchPostsV2Response, Status> {
    check_unsupported(&req)?;
    let params = req.params.clone().unwrap_or_default();
    if !params.viewer.is_empty() {
        check_did("params.viewer", &params.viewer)?;
    }
    let page = page(params.limit, &params.cursor)?;
    let mut query = PostQuery::parse(&params.query).map_err(search_status)?;
    let filters = req.filters.clone().unwrap_or_default();
    if let Some(author) = filters.authors.first() {
        query.author = Some(author.clone());
    }
    if let Some(lang) = filters.languages.first() {
        query.lang = Some(lang.to_lowercase());
    }
    if let Some(since) = &req.since {
        query.since_us = Some(micros(since));
    }
    if let Some(until) = &req.until {
        query.until_us = Some(micros(until));
    }
    let sort = match SearchSortOrder::try_from(req.sort) {
        Ok(SearchSortOrder::Top) => PostSort::Top,
        _ => PostSort::Latest,
    };
    let hits = posts(state, search, query, &params.viewer, sort, page).await?;
    Ok(SearchPostsV2Response {
        page_info: page_info(&hits),
        posts: record_results(hits),
        detected_query_languages: Vec::new(),
    })
}

async fn records(
    search: Option<&Arc<SearchIndex>>,
    kind: RecordKind,
    term: &str,
    page: Page,
) -> Result<Hits, Status> {
    let index = index(search)?;
    let query = WordsQuery::parse(term).map_err(search_status)?;
    blocking(move || {
        index
            .search_records(kind, &query, page)
            .map_err(search_status)
    })
    .await
}

pub(crate) async fn search_starter_packs(
    search: Option<&Arc<SearchIndex>>,
    req: SearchStarterPacksRequest,
) -> Result<SearchStarterPacksResponse, Status> {
    let page = page(req.limit, &req.cursor)?;
    let hits = records(search, RecordKind::StarterPack, &req.term, page).await?;
    Ok(SearchStarterPacksResponse {
        cursor: cursor(&hits),
        uris: ids(hits),
    })
}

pub(crate) async fn search_starter_packs_v2(
    search: Option<&Arc<SearchIndex>>,
    req: SearchStarterPacksV2Request,
) -> Result<SearchStarterPacksV2Response, Status> {
    let params = req.params.unwrap_or_default();
    let page = page(params.limit, &params.cursor)?;
    let hits = records(search, RecordKind::StarterPack, &params.query, page).await?;
    Ok(SearchStarterPacksV2Response {
        page_info: page_info(&hits),
        starter_packs: record_results(hits),
    })
}

pub(crate) async fn search_feed_generators(
    search: Option<&Arc<SearchIndex>>,
    req: SearchFeedGeneratorsRequest,
) -> Result<SearchFeedGeneratorsResponse, Status> {
    let page = page(req.limit, "")?;
    let hits = records(search, RecordKind::FeedGenerator, &req.query, page).await?;
    Ok(SearchFeedGeneratorsResponse { uris: ids(hits) })
}

pub(crate) async fn search_feed_generators_v2(
    search: Option<&Arc<SearchIndex>>,
    req: SearchFeedGeneratorsV2Request,
) -> Result<SearchFeedGeneratorsV2Response, Status> {
    let params = req.params.unwrap_or_default();
    let page = page(params.limit, &params.cursor)?;
    let hits = records(search, RecordKind::FeedGenerator, &params.query, page).await?;
    Ok(SearchFeedGeneratorsV2Response {
        page_info: page_info(&hits),
        feed_generators: record_results(hits),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    // Checks request validation: bad cursors, limits and queries are INVALID_ARGUMENT naming
    // the bad value; a server without an index says UNAVAILABLE.
    #[tokio::test]
    async fn bad_requests_are_invalid_arguments() {
        for cursor in ["x", "-1", "+5", "10001", "1e3"] {
            let err = check_cursor(cursor).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{cursor}");
            assert!(err.message().contains(cursor), "{}", err.message());
        }
        assert_eq!(check_cursor("").unwrap(), 0);
        assert_eq!(check_cursor("25").unwrap(), 25);
        assert_eq!(
            page(101, "").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            page(-1, "").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = SearchIndex::open(dir.path()).unwrap();
        let index = Some(Arc::new(index));
        let long = SearchActorsRequest {
            term: "a".repeat(starling_search::QUERY_BYTES_MAX + 1),
            ..SearchActorsRequest::default()
        };
        let err = search_actors(index.as_ref(), long).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("bytes"), "{}", err.message());
        let words = SearchStarterPacksRequest {
            term: "w ".repeat(starling_search::QUERY_WORDS_MAX + 1),
            ..SearchStarterPacksRequest::default()
        };
        let err = search_starter_packs(index.as_ref(), words)
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        let none = search_actors(None, SearchActorsRequest::default())
            .await
            .unwrap_err();
        assert_eq!(none.code(), tonic::Code::Unavailable);
    }
}
