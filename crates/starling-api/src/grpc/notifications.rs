//! GetNotifications, GetUnreadNotificationCount and GetNotificationSeen: a recipient's notifications from the
//! store, newest first, with the priority flag from the in-memory graph.

use starling_core::ActorId;
use starling_core::syntax::parse_datetime_micros;
use starling_store::{Store, keys};
use tonic::Status;

use super::proto::{
    GetNotificationsRequest, GetNotificationsResponse, GetUnreadNotificationCountRequest,
    GetUnreadNotificationCountResponse, Notification,
};
use super::rpc::{
    blocking, check_did, check_limit, check_list_cursor, internal, list_cursor, timestamp,
};
use crate::AppState;

/// Notification entries one GetNotifications page reads at most. A page that filters by
/// priority, or skips notifications whose subject is gone, stops there and hands back a cursor
/// to go on from, so a recipient with millions of notifications costs a bounded scan per page.
pub const NOTIFICATION_SCAN_MAX: usize = 10_000;

/// The most unread notifications counted. A count at the bound means "at least this many":
/// clients show a badge such as "30+" long before it, and the bound keeps the count a scan of
/// at most this many index entries whatever the recipient's total.
pub const UNREAD_COUNT_MAX: u32 = 10_000;

/// Notification entries a page, or unread notifications a count, first reads on the async
/// worker that received the request, on a store that reads inline: most pages and counts
/// end within it (a scan of adjacent keys, tens of microseconds), and handing them to a
/// blocking thread cost more than that. One that reaches it starts over on a blocking thread,
/// with the whole bound.
const INLINE_SCAN_MAX: u32 = 200;

/// The position a GetNotifications cursor names: a cursor Starling gave, or (as the AppView
/// sends on a first page) an ISO datetime, meaning notifications before it.
fn check_notification_cursor(cursor: &str) -> Result<Option<Vec<u8>>, Status> {
    match parse_datetime_micros(cursor) {
        Some(micros) => Ok(Some(keys::time_bytes(micros).to_vec())),
        None => check_list_cursor(cursor),
    }
}

fn message(
    recipient_did: &str,
    notification: starling_store::Notification,
    priority: bool,
) -> Notification {
    Notification {
        recipient_did: recipient_did.to_owned(),
        uri: notification.uri,
        reason: notification.reason.as_str().to_owned(),
        reason_subject: notification.reason_subject.unwrap_or_default(),
        timestamp: Some(timestamp(notification.sort_at_us)),
        priority,
    }
}

pub(crate) async fn get_notifications<S: Store + 'static>(
    state: &AppState<S>,
    req: GetNotificationsRequest,
) -> Result<GetNotificationsResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let limit = check_limit(req.limit)?;
    let below = check_notification_cursor(&req.cursor)?;
    let Some(recipient) = state.store.actor_id(&req.actor_did) else {
        return Ok(GetNotificationsResponse::default());
    };
    let state = state.clone();
    if state.store.reads_inline() {
        let page = notification_page(
            &state,
            &req,
            recipient,
            limit,
            below.as_deref(),
            INLINE_SCAN_MAX as usize,
        )?;
        // Full, or the recipient's last: the whole bound would give the same page.
        if page.notifications.len() == limit || page.cursor.is_empty() {
            return Ok(page);
        }
    }
    blocking(move || {
        notification_page(
            &state,
            &req,
            recipient,
            limit,
            below.as_deref(),
            NOTIFICATION_SCAN_MAX,
        )
    })
    .await
}

/// A page of at most `limit` of `recipient`'s notifications below `below`, reading at most
/// `scan_max` entries.
fn notification_page<S: Store>(
    state: &AppState<S>,
    req: &GetNotificationsRequest,
    recipient: ActorId,
    limit: usize,
    below: Option<&[u8]>,
    scan_max: usize,
) -> Result<GetNotificationsResponse, Status> {
    let (store, graph) = (&state.store, &state.graph);
    let mut notifications = Vec::with_capacity(limit);
    let mut last = None;
    // Priority notifications are the ones from accounts the recipient follows; a priority
    // page skips the others before their records are read.
    let shown = |author| !req.priority || graph.does_follow(recipient, author);
    let stopped = store
        .notifications_by(recipient, below, scan_max, &shown, &mut |mut n| {
            // A priority page shows only notifications `shown` found priority.
            let priority = req.priority || graph.does_follow(recipient, n.author);
            last = Some(std::mem::take(&mut n.cursor));
            notifications.push(message(&req.actor_did, n, priority));
            notifications.len() < limit
        })
        .map_err(internal)?;
    let cursor = if notifications.len() == limit {
        last
    } else {
        stopped
    };
    Ok(GetNotificationsResponse {
        notifications,
        cursor: list_cursor(cursor),
    })
}

pub(crate) async fn get_unread_notification_count<S: Store + 'static>(
    state: &AppState<S>,
    req: GetUnreadNotificationCountRequest,
) -> Result<GetUnreadNotificationCountResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let Some(recipient) = state.store.actor_id(&req.actor_did) else {
        return Ok(GetUnreadNotificationCountResponse::default());
    };
    let store = state.store.clone();
    if store.reads_inline() {
        let count = unread_count(&*store, recipient, INLINE_SCAN_MAX)?;
        // Below its bound, a count is the same whatever the bound.
        if count < INLINE_SCAN_MAX {
            return Ok(unread_response(count));
        }
    }
    let count = blocking(move || unread_count(&*store, recipient, UNREAD_COUNT_MAX)).await?;
    Ok(unread_response(count))
}

/// `recipient`'s notifications newer than the time they last saw them, at most `max`.
fn unread_count<S: Store>(store: &S, recipient: ActorId, max: u32) -> Result<u32, Status> {
    let seen = store.notification_seen(recipient).map_err(internal)?;
    store
        .unread_notifications(recipient, seen, max)
        .map_err(internal)
}

fn unread_response(count: u32) -> GetUnreadNotificationCountResponse {
    GetUnreadNotificationCountResponse {
        count: i32::try_from(count).unwrap_or(i32::MAX),
    }
}
