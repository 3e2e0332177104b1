//! The RPCs that read each user's private state (mutes, thread mutes, notification state and
//! preferences, bookmarks, activity subscriptions, drafts), and `UpdateNotificationSeen`, the
//! one write the AppView's bsync fans out to dataplanes. Rules as in `rpc.rs`: answers aligned
//! with the request, cursors hex, malformed input `INVALID_ARGUMENT` naming it.

use prost_types::Timestamp;
use starling_core::syntax::RecordUri;
use starling_store::{PrivateOp, Store};
use tonic::Status;

use super::proto::*;
use super::rpc::{
    blocking, check_batch, check_did, check_dids, check_limit, check_list_cursor, check_uri,
    internal, list_cursor, timestamp,
};
use crate::AppState;

/// bsync's namespaces, as the AppView reads them back in stash references.
const BOOKMARK_NAMESPACE: &str = "app.bsky.bookmark.defs#bookmark";
const ACTIVITY_NAMESPACE: &str = "app.bsky.notification.defs#subjectActivitySubscription";
/// List mutes looked through for `GetActorMutesActorViaList` at most (one point read each).
const LIST_MUTES_SCANNED_MAX: usize = 1_000;

pub(crate) async fn get_actor_mutes_actor<S: Store + 'static>(
    state: &AppState<S>,
    req: GetActorMutesActorRequest,
) -> Result<GetActorMutesActorResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_did("target_did", &req.target_did)?;
    let store = state.store.clone();
    blocking(move || {
        let mute = store
            .mute(&req.actor_did, &req.target_did)
            .map_err(internal)?;
        Ok(match mute {
            Some(mute) => GetActorMutesActorResponse {
                muted: !mute.only_reposts && !mute.only_quoteposts,
                muted_only_reposts: mute.only_reposts,
                muted_only_quoteposts: mute.only_quoteposts,
            },
            None => GetActorMutesActorResponse::default(),
        })
    })
    .await
}

pub(crate) async fn get_mutes<S: Store + 'static>(
    state: &AppState<S>,
    req: GetMutesRequest,
) -> Result<GetMutesResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let limit = check_limit(req.limit)?;
    let after = check_list_cursor(&req.cursor)?;
    let store = state.store.clone();
    blocking(move || {
        let page = store
            .mutes(&req.actor_did, after.as_deref(), limit)
            .map_err(internal)?;
        // `dids` is deprecated for `mutes`, but older AppViews read only it: both are filled.
        #[allow(deprecated)]
        Ok(GetMutesResponse {
            dids: page.items.iter().map(|mute| mute.subject.clone()).collect(),
            mutes: page
                .items
                .into_iter()
                .map(|mute| MuteInfo {
                    did: mute.subject,
                    only_reposts: mute.only_reposts,
                    only_quoteposts: mute.only_quoteposts,
                })
                .collect(),
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

/// The lists `actor` mutes (at most [`LIST_MUTES_SCANNED_MAX`]), newest mute first.
fn muted_lists<S: Store>(store: &S, actor: &str) -> Result<Vec<String>, Status> {
    let page = store
        .list_mutes(actor, None, LIST_MUTES_SCANNED_MAX)
        .map_err(internal)?;
    Ok(page.items)
}

/// The first of `lists` that has `target` as a member (by its owner), if any.
fn muting_list<S: Store>(store: &S, lists: &[String], target: &str) -> Result<String, Status> {
    let Some(target_id) = store.actor_id(target) else {
        return Ok(String::new());
    };
    for list in lists {
        let Some(uri) = RecordUri::parse(list) else {
            continue;
        };
        if store
            .list_item_uri(&uri, target_id)
            .map_err(internal)?
            .is_some()
        {
            return Ok(list.clone());
        }
    }
    Ok(String::new())
}

pub(crate) async fn get_actor_mutes_actor_via_list<S: Store + 'static>(
    state: &AppState<S>,
    req: GetActorMutesActorViaListRequest,
) -> Result<GetActorMutesActorViaListResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_did("target_did", &req.target_did)?;
    let store = state.store.clone();
    blocking(move || {
        Ok(GetActorMutesActorViaListResponse {
            list_uri: muting_list(
                &*store,
                &muted_lists(&*store, &req.actor_did)?,
                &req.target_did,
            )?,
        })
    })
    .await
}

/// Fills in `muted`, `muted_only_*` and `muted_by_list` of the relationships of `actor` with
/// each of `targets` (aligned).
pub(crate) fn add_mutes<S: Store>(
    store: &S,
    actor: &str,
    targets: &[String],
    relationships: &mut [Relationships],
) -> Result<(), Status> {
    let lists = muted_lists(store, actor)?;
    for (target, relationship) in targets.iter().zip(relationships) {
        if let Some(mute) = store.mute(actor, target).map_err(internal)? {
            relationship.muted = !mute.only_reposts && !mute.only_quoteposts;
            relationship.muted_only_reposts = mute.only_reposts;
            relationship.muted_only_quoteposts = mute.only_quoteposts;
        }
        relationship.muted_by_list = muting_list(store, &lists, target)?;
    }
    Ok(())
}

pub(crate) async fn get_mutelist_subscription<S: Store + 'static>(
    state: &AppState<S>,
    req: GetMutelistSubscriptionRequest,
) -> Result<GetMutelistSubscriptionResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_uri("list_uri", 0, &req.list_uri)?;
    let store = state.store.clone();
    blocking(move || {
        Ok(GetMutelistSubscriptionResponse {
            subscribed: store
                .list_muted(&req.actor_did, &req.list_uri)
                .map_err(internal)?,
        })
    })
    .await
}

pub(crate) async fn get_mutelist_subscriptions<S: Store + 'static>(
    state: &AppState<S>,
    req: GetMutelistSubscriptionsRequest,
) -> Result<GetMutelistSubscriptionsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let limit = check_limit(req.limit)?;
    let after = check_list_cursor(&req.cursor)?;
    let store = state.store.clone();
    blocking(move || {
        let page = store
            .list_mutes(&req.actor_did, after.as_deref(), limit)
            .map_err(internal)?;
        Ok(GetMutelistSubscriptionsResponse {
            list_uris: page.items,
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

pub(crate) async fn get_thread_mutes_on_subjects<S: Store + 'static>(
    state: &AppState<S>,
    req: GetThreadMutesOnSubjectsRequest,
) -> Result<GetThreadMutesOnSubjectsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_batch("thread_roots", req.thread_roots.len())?;
    for (idx, root) in req.thread_roots.iter().enumerate() {
        check_uri("thread_roots", idx, root)?;
    }
    let store = state.store.clone();
    blocking(move || {
        let muted = req
            .thread_roots
            .iter()
            .map(|root| store.thread_muted(&req.actor_did, root).map_err(internal))
            .collect::<Result<_, _>>()?;
        Ok(GetThreadMutesOnSubjectsResponse { muted })
    })
    .await
}

pub(crate) async fn get_actor_bookmarks<S: Store + 'static>(
    state: &AppState<S>,
    req: GetActorBookmarksRequest,
) -> Result<GetActorBookmarksResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let limit = check_limit(req.limit)?;
    let after = check_list_cursor(&req.cursor)?;
    let store = state.store.clone();
    blocking(move || {
        let page = store
            .bookmarks(&req.actor_did, after.as_deref(), limit)
            .map_err(internal)?;
        Ok(GetActorBookmarksResponse {
            bookmarks: page
                .items
                .into_iter()
                .map(|bookmark| BookmarkInfo {
                    key: bookmark.key,
                    subject: bookmark.subject_uri,
                })
                .collect(),
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

pub(crate) async fn get_bookmarks_by_actor_and_subjects<S: Store + 'static>(
    state: &AppState<S>,
    req: GetBookmarksByActorAndSubjectsRequest,
) -> Result<GetBookmarksByActorAndSubjectsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_batch("uris", req.uris.len())?;
    for (idx, uri) in req.uris.iter().enumerate() {
        check_uri("uris", idx, uri)?;
    }
    let store = state.store.clone();
    blocking(move || {
        let mut bookmarks = Vec::with_capacity(req.uris.len());
        for uri in &req.uris {
            let bookmark = store.bookmark(&req.actor_did, uri).map_err(internal)?;
            bookmarks.push(match bookmark {
                Some(bookmark) => Bookmark {
                    r#ref: Some(StashRef {
                        actor_did: req.actor_did.clone(),
                        namespace: BOOKMARK_NAMESPACE.to_owned(),
                        key: bookmark.key,
                    }),
                    subject_uri: bookmark.subject_uri,
                    subject_cid: bookmark.subject_cid,
                    indexed_at: Some(timestamp(bookmark.indexed_us)),
                },
                None => Bookmark::default(),
            });
        }
        Ok(GetBookmarksByActorAndSubjectsResponse { bookmarks })
    })
    .await
}

pub(crate) async fn get_activity_subscription_dids<S: Store + 'static>(
    state: &AppState<S>,
    req: GetActivitySubscriptionDidsRequest,
) -> Result<GetActivitySubscriptionDidsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let limit = check_limit(req.limit)?;
    let after = check_list_cursor(&req.cursor)?;
    let store = state.store.clone();
    blocking(move || {
        let page = store
            .activity_subscriptions(&req.actor_did, after.as_deref(), limit)
            .map_err(internal)?;
        Ok(GetActivitySubscriptionDidsResponse {
            dids: page.items.into_iter().map(|sub| sub.subject).collect(),
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

pub(crate) async fn get_activity_subscriptions_by_actor_and_subjects<S: Store + 'static>(
    state: &AppState<S>,
    req: GetActivitySubscriptionsByActorAndSubjectsRequest,
) -> Result<GetActivitySubscriptionsByActorAndSubjectsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    check_batch("subject_dids", req.subject_dids.len())?;
    check_dids("subject_dids", &req.subject_dids)?;
    let store = state.store.clone();
    blocking(move || {
        let mut subscriptions = Vec::with_capacity(req.subject_dids.len());
        for subject in &req.subject_dids {
            let found = store
                .activity_subscription(&req.actor_did, subject)
                .map_err(internal)?;
            let mut res = ActivitySubscription {
                actor_did: req.actor_did.clone(),
                namespace: ACTIVITY_NAMESPACE.to_owned(),
                ..ActivitySubscription::default()
            };
            if let Some(found) = found {
                res.key = found.key;
                res.subject_did = found.subject;
                res.post = found.post.then_some(PostActivitySubscription {});
                res.reply = found.reply.then_some(ReplyActivitySubscription {});
            }
            subscriptions.push(res);
        }
        Ok(GetActivitySubscriptionsByActorAndSubjectsResponse { subscriptions })
    })
    .await
}

pub(crate) async fn get_actor_drafts<S: Store + 'static>(
    state: &AppState<S>,
    req: GetActorDraftsRequest,
) -> Result<GetActorDraftsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let limit = check_limit(req.limit)?;
    let after = check_list_cursor(&req.cursor)?;
    let store = state.store.clone();
    blocking(move || {
        let page = store
            .drafts(&req.actor_did, after.as_deref(), limit)
            .map_err(internal)?;
        Ok(GetActorDraftsResponse {
            drafts: page
                .items
                .into_iter()
                .map(|draft| DraftInfo {
                    key: draft.key,
                    created_at: Some(timestamp(draft.created_us)),
                    updated_at: Some(timestamp(draft.updated_us)),
                    payload: draft.json.into_bytes(),
                })
                .collect(),
            cursor: list_cursor(page.cursor),
        })
    })
    .await
}

pub(crate) async fn get_notification_seen<S: Store + 'static>(
    state: &AppState<S>,
    req: GetNotificationSeenRequest,
) -> Result<GetNotificationSeenResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let store = state.store.clone();
    blocking(move || {
        let notifications = store.notification_state(&req.actor_did).map_err(internal)?;
        Ok(GetNotificationSeenResponse {
            timestamp: notifications.seen_us.map(timestamp),
        })
    })
    .await
}

/// Microseconds since the Unix epoch of a timestamp, if it is a valid one.
fn micros(timestamp: &Timestamp) -> Option<i64> {
    if !(0..1_000_000_000).contains(&timestamp.nanos) {
        return None;
    }
    timestamp
        .seconds
        .checked_mul(1_000_000)?
        .checked_add(i64::from(timestamp.nanos / 1_000))
}

pub(crate) async fn update_notification_seen<S: Store + 'static>(
    state: &AppState<S>,
    req: UpdateNotificationSeenRequest,
) -> Result<UpdateNotificationSeenResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    // As the reference: no timestamp changes nothing.
    let Some(timestamp) = req.timestamp else {
        return Ok(UpdateNotificationSeenResponse {});
    };
    let seen_us = micros(&timestamp).ok_or_else(|| {
        Status::invalid_argument(format!("`timestamp`: {timestamp:?} is not a valid time"))
    })?;
    let store = state.store.clone();
    blocking(move || {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let op = PrivateOp::NotificationSeen {
            actor: req.actor_did,
            seen_us,
        };
        store.apply_private(&[op], now_us, None).map_err(internal)?;
        Ok(UpdateNotificationSeenResponse {})
    })
    .await
}

pub(crate) async fn get_notification_preferences<S: Store + 'static>(
    state: &AppState<S>,
    req: GetNotificationPreferencesRequest,
) -> Result<GetNotificationPreferencesResponse, Status> {
    check_batch("dids", req.dids.len())?;
    check_dids("dids", &req.dids)?;
    let store = state.store.clone();
    blocking(move || {
        let mut preferences = Vec::with_capacity(req.dids.len());
        for did in &req.dids {
            let json = store.notification_preferences(did).map_err(internal)?;
            preferences.push(
                json.map(|json| preferences_message(&json))
                    .unwrap_or_default(),
            );
        }
        Ok(GetNotificationPreferencesResponse { preferences })
    })
    .await
}

/// The message of stored preferences JSON (`app.bsky.notification.defs#preferences`), as the
/// reference converts it: a missing channel is enabled, `include` is `follows` or all.
fn preferences_message(json: &str) -> NotificationPreferences {
    let value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let channels = |name: &str| {
        let pref = value.get(name);
        let enabled = |channel: &str| {
            pref.and_then(|pref| pref.get(channel))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true)
        };
        (
            Some(NotificationChannelList {
                enabled: enabled("list"),
            }),
            Some(NotificationChannelPush {
                enabled: enabled("push"),
            }),
        )
    };
    let filterable = |name: &str| {
        let (list, push) = channels(name);
        let follows = value
            .get(name)
            .and_then(|pref| pref.get("include"))
            .and_then(serde_json::Value::as_str)
            == Some("follows");
        let include = match follows {
            true => NotificationInclude::Follows,
            false => NotificationInclude::All,
        };
        Some(FilterableNotificationPreference {
            include: include as i32,
            list,
            push,
        })
    };
    let plain = |name: &str| {
        let (list, push) = channels(name);
        Some(NotificationPreference { list, push })
    };
    NotificationPreferences {
        entry: json.as_bytes().to_vec(),
        follow: filterable("follow"),
        like: filterable("like"),
        like_via_repost: filterable("likeViaRepost"),
        mention: filterable("mention"),
        quote: filterable("quote"),
        reply: filterable("reply"),
        repost: filterable("repost"),
        repost_via_repost: filterable("repostViaRepost"),
        starterpack_joined: plain("starterpackJoined"),
        subscribed_post: plain("subscribedPost"),
        unverified: plain("unverified"),
        verified: plain("verified"),
    }
}
