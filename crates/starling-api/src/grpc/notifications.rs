//! GetNotifications, GetUnreadNotificationCount and GetNotificationSeen: a recipient's notifications from the
//! store, newest first, with the priority flag from the in-memory graph.

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
    let (store, graph) = (state.store.clone(), state.graph.clone());
    blocking(move || {
        let mut notifications = Vec::with_capacity(limit);
        let mut last = None;
        // Priority notifications are the ones from accounts the recipient follows; a priority
        // page skips the others before their records are read.
        let shown = |author| !req.priority || graph.does_follow(recipient, author);
        let stopped = store
            .notifications_by(
                recipient,
                below.as_deref(),
                NOTIFICATION_SCAN_MAX,
                &shown,
                &mut |n| {
                    // A priority page shows only notifications `shown` found priority.
                    let priority = req.priority || graph.does_follow(recipient, n.author);
                    last = Some(n.cursor.clone());
                    notifications.push(message(&req.actor_did, n, priority));
                    notifications.len() < limit
                },
            )
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
    })
    .await
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
    blocking(move || {
        let seen = store.notification_seen(recipient).map_err(internal)?;
        let count = store
            .unread_notifications(recipient, seen, UNREAD_COUNT_MAX)
            .map_err(internal)?;
        Ok(GetUnreadNotificationCountResponse {
            count: i32::try_from(count).unwrap_or(i32::MAX),
        })
    })
    .await
}
