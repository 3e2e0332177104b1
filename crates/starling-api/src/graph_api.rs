//! `/v1/graph/*`: follow and block queries for operators and tests.
//!
//! DIDs Starling has never seen are empty answers, not errors; malformed DIDs and limits are
//! HTTP 400 with a JSON error. Point queries take microseconds, so they run on the async
//! workers directly; mutuals can name 100,000 DIDs from sets of millions, and run on the
//! blocking pool so they never hold up the workers that answer probes and cheap reads.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use starling_core::ActorId;
use starling_core::syntax::is_valid_did;
use starling_graph::SortedIds;
use starling_store::Store;

use crate::Shown;
use crate::{ApiError, AppState};

/// The largest `limit` a list query accepts.
pub const LIST_LIMIT_MAX: usize = 100_000;
/// The most DIDs one blocks query may name.
pub const BATCH_DIDS_MAX: usize = 1_000;

pub(crate) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(query)| query)
        .map_err(|err| ApiError::bad_request(err.body_text()))
}

pub(crate) fn check_did<'a>(name: &str, did: &'a str) -> Result<&'a str, ApiError> {
    if is_valid_did(did) {
        Ok(did)
    } else {
        Err(ApiError::bad_request(format!(
            "`{name}`: `{}` is not a DID",
            Shown(did)
        )))
    }
}

fn check_limit(limit: Option<usize>) -> Result<Option<usize>, ApiError> {
    match limit {
        Some(limit) if limit == 0 || limit > LIST_LIMIT_MAX => Err(ApiError::bad_request(format!(
            "`limit` is {limit}; it must be between 1 and {LIST_LIMIT_MAX}"
        ))),
        other => Ok(other),
    }
}

fn dids<S: Store>(store: &S, ids: impl IntoIterator<Item = ActorId>) -> Vec<String> {
    ids.into_iter().filter_map(|id| store.did(id)).collect()
}

/// `?actor=DID&subject=DID`.
#[derive(Deserialize)]
pub struct PairQuery {
    actor: String,
    subject: String,
}

/// `{"follows": bool}`.
#[derive(Serialize)]
pub struct FollowsBody {
    follows: bool,
}

/// `GET /v1/graph/follows?actor=DID&subject=DID`: whether `actor` follows `subject`.
pub async fn follows<S: Store>(
    State(state): State<AppState<S>>,
    params: Result<Query<PairQuery>, QueryRejection>,
) -> Result<Json<FollowsBody>, ApiError> {
    let params = query(params)?;
    let actor = check_did("actor", &params.actor)?;
    let subject = check_did("subject", &params.subject)?;
    let follows = match (state.store.actor_id(actor), state.store.actor_id(subject)) {
        (Some(actor), Some(subject)) => state.graph.does_follow(actor, subject),
        _ => false,
    };
    Ok(Json(FollowsBody { follows }))
}

/// `?viewer=DID&target=DID[&limit=N]`.
#[derive(Deserialize)]
pub struct KnownFollowersQuery {
    viewer: String,
    target: String,
    limit: Option<usize>,
}

/// `{"count": N, "dids": [...]}`.
#[derive(Serialize)]
pub struct DidListBody {
    count: usize,
    dids: Vec<String>,
}

/// `GET /v1/graph/known-followers`: the accounts `viewer` follows that follow `target`.
pub async fn known_followers<S: Store>(
    State(state): State<AppState<S>>,
    params: Result<Query<KnownFollowersQuery>, QueryRejection>,
) -> Result<Json<DidListBody>, ApiError> {
    let params = query(params)?;
    let viewer = check_did("viewer", &params.viewer)?;
    let target = check_did("target", &params.target)?;
    let limit = check_limit(params.limit)?;
    let (Some(viewer), Some(target)) = (state.store.actor_id(viewer), state.store.actor_id(target))
    else {
        return Ok(Json(DidListBody {
            count: 0,
            dids: Vec::new(),
        }));
    };
    // Inline: the answer walks the smaller of two sets, microseconds even for big accounts.
    let known = state.graph.known_followers(viewer, target, limit);
    let dids = dids(&*state.store, known.ids.as_slice().iter().copied());
    Ok(Json(DidListBody {
        count: known.count,
        dids,
    }))
}

/// Runs a list query on the blocking pool.
async fn on_blocking_pool(
    work: impl FnOnce() -> DidListBody + Send + 'static,
) -> Result<Json<DidListBody>, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map(Json)
        .map_err(ApiError::internal)
}

/// `?actor=DID[&limit=N]`.
#[derive(Deserialize)]
pub struct ActorQuery {
    actor: String,
    limit: Option<usize>,
}

/// `?actor=DID`, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorOnlyQuery {
    actor: String,
}

/// Counts of one actor's edges.
#[derive(Serialize)]
pub struct ActorBody {
    followers: usize,
    following: usize,
}

/// `GET /v1/graph/actor?actor=DID`: follower and following counts.
pub async fn actor<S: Store>(
    State(state): State<AppState<S>>,
    params: Result<Query<ActorOnlyQuery>, QueryRejection>,
) -> Result<Json<ActorBody>, ApiError> {
    let params = query(params)?;
    let did = check_did("actor", &params.actor)?;
    Ok(Json(match state.store.actor_id(did) {
        Some(id) => ActorBody {
            followers: state.graph.n_followers(id),
            following: state.graph.n_following(id),
        },
        None => ActorBody {
            followers: 0,
            following: 0,
        },
    }))
}

/// `GET /v1/graph/mutuals?actor=DID[&limit=N]`: accounts that `actor` follows and that
/// follow `actor` back.
pub async fn mutuals<S: Store + 'static>(
    State(state): State<AppState<S>>,
    params: Result<Query<ActorQuery>, QueryRejection>,
) -> Result<Json<DidListBody>, ApiError> {
    let params = query(params)?;
    let did = check_did("actor", &params.actor)?;
    let limit = check_limit(params.limit)?;
    let Some(id) = state.store.actor_id(did) else {
        return Ok(Json(DidListBody {
            count: 0,
            dids: Vec::new(),
        }));
    };
    on_blocking_pool(move || {
        let mutuals: SortedIds = state.graph.mutuals(id);
        let ids = mutuals.as_slice();
        let shown = ids.iter().copied().take(limit.unwrap_or(usize::MAX));
        DidListBody {
            count: ids.len(),
            dids: dids(&*state.store, shown),
        }
    })
    .await
}

/// `?viewer=DID&others=DID,DID,...`.
#[derive(Deserialize)]
pub struct BlocksQuery {
    viewer: String,
    others: String,
}

/// Blocks between the viewer and one other account.
#[derive(Serialize)]
pub struct BlockBody {
    did: String,
    blocking: bool,
    blocked_by: bool,
}

/// `GET /v1/graph/blocks?viewer=DID&others=DID,...`: blocks in both directions, one entry per
/// other DID, in order.
pub async fn blocks<S: Store>(
    State(state): State<AppState<S>>,
    params: Result<Query<BlocksQuery>, QueryRejection>,
) -> Result<Json<Vec<BlockBody>>, ApiError> {
    let params = query(params)?;
    let viewer = check_did("viewer", &params.viewer)?;
    let others: Vec<&str> = params
        .others
        .split(',')
        .filter(|did| !did.is_empty())
        .collect();
    if others.len() > BATCH_DIDS_MAX {
        return Err(ApiError::bad_request(format!(
            "`others` names {} DIDs; at most {BATCH_DIDS_MAX} per request",
            others.len()
        )));
    }
    for did in &others {
        check_did("others", did)?;
    }
    let viewer_id = state.store.actor_id(viewer);
    let res = others
        .iter()
        .map(|did| {
            let relation = match (viewer_id, state.store.actor_id(did)) {
                (Some(viewer), Some(other)) => state
                    .graph
                    .block_relationships(viewer, &[other])
                    .first()
                    .copied(),
                _ => None,
            }
            .unwrap_or_default();
            BlockBody {
                did: (*did).to_owned(),
                blocking: relation.blocking,
                blocked_by: relation.blocked_by,
            }
        })
        .collect();
    Ok(Json(res))
}
