//! The `ActorInfo` fields from an actor's other records: verifications by trusted verifiers
//! (`verified_by`) and whether the actor is one (`trusted_verifier`), whether it runs a
//! labeler (an `app.bsky.labeler.service/self` record), who may start a chat with it (its
//! `chat.bsky.actor.declaration/self`'s `allowIncoming`), and its status record
//! (`app.bsky.actor.status/self`), as the reference's GetActors fills them.
//!
//! Trusted verifiers are configured (`serve --trusted-verifier DID`, repeatable; see the
//! README): the reference keeps the same flag per actor in its database. A verification
//! counts only when a trusted verifier wrote it; `verified_by` maps each verifier's DID to the
//! verification's record key, the handle and display name it names, and its `sort_at`.

use std::collections::BTreeSet;

use serde_json::Value;
use starling_core::jetstream::nsid;
use starling_store::{ListOf, Store};
use tonic::Status;

use super::proto::*;
use super::rpc::{internal, record_message, timestamp};
use crate::AppState;

/// Verifications of one actor read, at most (a trusted verifier writes one per actor).
pub const VERIFICATIONS_READ_MAX: usize = 100;

/// `app.bsky.labeler.service`.
const LABELER: &str = "app.bsky.labeler.service";
/// `chat.bsky.actor.declaration`.
const CHAT_DECLARATION: &str = "chat.bsky.actor.declaration";
/// `app.bsky.actor.status`.
const STATUS: &str = "app.bsky.actor.status";

/// The DIDs whose verifications count, as configured.
pub type TrustedVerifiers = std::sync::Arc<BTreeSet<String>>;

/// Fills the fields the module documentation lists into `info`, the actor `did`'s.
pub(crate) fn fill<S: Store>(
    state: &AppState<S>,
    trusted: &TrustedVerifiers,
    did: &str,
    info: &mut ActorInfo,
) -> Result<(), Status> {
    let store = &*state.store;
    info.trusted_verifier = trusted.contains(did);
    info.labeler = store
        .record_is_live(did, LABELER, "self")
        .map_err(internal)?;
    if let Some(declaration) = store
        .record(did, CHAT_DECLARATION, "self")
        .map_err(internal)?
        && let Ok(declaration) = serde_json::from_str::<Value>(&declaration.json)
        && let Some(allow) = at(&declaration, "allowIncoming").as_str()
    {
        info.allow_incoming_chats_from = allow.to_owned();
    }
    if let Some(status) = store.record(did, STATUS, "self").map_err(internal)? {
        info.status_record = Some(record_message(Some(&status)));
    }
    if trusted.is_empty() {
        return Ok(());
    }
    let Some(actor) = store.actor_id(did) else {
        return Ok(());
    };
    let page = store
        .list_page(&ListOf::Verifications(actor), None, VERIFICATIONS_READ_MAX)
        .map_err(internal)?;
    // Oldest first, so that of two by one verifier the newest wins, as the reference's map.
    for entry in page.entries.iter().rev() {
        let Some(verifier) = store.did(entry.author) else {
            continue;
        };
        if !trusted.contains(&verifier) {
            continue;
        }
        let rkey = entry.uri.rsplit('/').next().unwrap_or_default();
        let Some(record) = store
            .record(&verifier, nsid::VERIFICATION, rkey)
            .map_err(internal)?
        else {
            continue;
        };
        let json: Value = serde_json::from_str(&record.json).unwrap_or(Value::Null);
        let text = |field: &str| at(&json, field).as_str().unwrap_or_default().to_owned();
        info.verified_by.insert(
            verifier,
            VerificationMeta {
                rkey: rkey.to_owned(),
                handle: text("handle"),
                display_name: text("displayName"),
                sorted_at: Some(timestamp(record.sort_at_us)),
            },
        );
    }
    Ok(())
}

/// A JSON object's field, or null.
fn at<'v>(value: &'v Value, name: &str) -> &'v Value {
    value.get(name).unwrap_or(&Value::Null)
}
