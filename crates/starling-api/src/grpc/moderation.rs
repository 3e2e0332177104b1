//! The moderation RPCs, as the reference dataplane answers them (`routes/moderation.ts`,
//! `routes/labels.ts`, `updateActorUpstreamStatus` in `routes/profile.ts`):
//! - `Takedown*` record the reference (`TAKEDOWN` when none), `Untakedown*` lift it; the
//!   `seen` time is ignored, as there. `Get*Takedown` answer whether and with which reference.
//!   `GetBlobTakedown` is what the AppView's image and blob proxy asks before it serves one.
//! - Taken-down actors and records are not filtered out here: `GetActors` and the record RPCs
//!   carry `taken_down` and `takedown_ref`, and the AppView hides them.
//! - `UpdateActorUpstreamStatus` sets the status `GetActors` answers for an indexed actor,
//!   until its next `#account` event.
//! - `GetLabels` answers every stored, unexpired label on each subject from one of the issuers,
//!   once per time the subject is asked for, as the JSON of `com.atproto.label.defs#label`.

use starling_store::{PrivateOp, Store, StoreError, TakedownSubject};
use tonic::Status;

use super::proto::*;
use super::rpc::{blocking, check_batch, check_did, check_dids, check_uri, internal};
use crate::AppState;
use crate::moderation::{now_us, set_takedown, takedown_subject};

/// Checks a subject as `takedown_subject` does, as `INVALID_ARGUMENT`.
fn subject(kind: &str, target: &str, cid: Option<&str>) -> Result<TakedownSubject, Status> {
    takedown_subject(kind, target, cid).map_err(Status::invalid_argument)
}

/// Takes down (`Some(reference)`) or lifts the takedown of `subject`.
pub(crate) async fn write<S: Store + 'static>(
    state: &AppState<S>,
    subject: TakedownSubject,
    reference: Option<String>,
) -> Result<(), Status> {
    let store = state.store.clone();
    blocking(move || set_takedown(&*store, subject, reference).map_err(internal)).await
}

/// Whether `subject` is taken down, and its reference.
pub(crate) async fn read<S: Store + 'static>(
    state: &AppState<S>,
    subject: TakedownSubject,
) -> Result<(bool, String), Status> {
    let store = state.store.clone();
    blocking(move || {
        let reference = store.takedown(&subject).map_err(internal)?;
        Ok((reference.is_some(), reference.unwrap_or_default()))
    })
    .await
}

pub(crate) fn actor(did: &str) -> Result<TakedownSubject, Status> {
    subject("actor", did, None)
}

pub(crate) fn record(uri: &str) -> Result<TakedownSubject, Status> {
    check_uri("record_uri", 0, uri)?;
    subject("record", uri, None)
}

pub(crate) fn blob(did: &str, cid: &str) -> Result<TakedownSubject, Status> {
    check_did("did", did)?;
    subject("blob", did, Some(cid))
}

/// Sets `taken_down` and `takedown_ref` on the message of the record `uri`, if stored.
pub(crate) fn flag_record<S: Store + ?Sized>(
    store: &S,
    uri: &str,
    record: &mut Record,
) -> Result<(), StoreError> {
    if record.cid.is_empty() {
        return Ok(());
    }
    let subject = TakedownSubject::Record {
        uri: uri.to_owned(),
    };
    if let Some(reference) = store.takedown(&subject)? {
        record.taken_down = true;
        record.takedown_ref = reference;
    }
    Ok(())
}

/// Sets an actor's takedown and the upstream status the operator set (while no newer
/// `#account` event came) on its `ActorInfo`.
pub(crate) fn flag_actor<S: Store + ?Sized>(
    store: &S,
    info: &starling_store::ActorInfo,
    actor: &mut ActorInfo,
) -> Result<(), StoreError> {
    let subject = TakedownSubject::Actor {
        did: info.did.clone(),
    };
    if let Some(reference) = store.takedown(&subject)? {
        actor.taken_down = true;
        actor.takedown_ref = reference;
    }
    if let Some(set) = store.upstream_status(&info.did)?
        && set.account_seq == info.account_seq
    {
        actor.upstream_status = set.status;
    }
    Ok(())
}

pub(crate) async fn update_actor_upstream_status<S: Store + 'static>(
    state: &AppState<S>,
    req: UpdateActorUpstreamStatusRequest,
) -> Result<UpdateActorUpstreamStatusResponse, Status> {
    check_did("actor_did", &req.actor_did)?;
    let store = state.store.clone();
    blocking(move || {
        // As the reference: an actor it has not indexed is left alone.
        let Some(info) = store.actor(&req.actor_did).map_err(internal)? else {
            return Ok(UpdateActorUpstreamStatusResponse {});
        };
        let op = PrivateOp::SetUpstreamStatus {
            actor: req.actor_did,
            status: req.upstream_status,
            account_seq: info.account_seq,
        };
        store
            .apply_private(&[op], now_us(), None)
            .map_err(internal)?;
        Ok(UpdateActorUpstreamStatusResponse {})
    })
    .await
}

pub(crate) async fn get_labels<S: Store + 'static>(
    state: &AppState<S>,
    req: GetLabelsRequest,
) -> Result<GetLabelsResponse, Status> {
    check_batch("subjects", req.subjects.len())?;
    check_batch("issuers", req.issuers.len())?;
    check_dids("issuers", &req.issuers)?;
    if req.subjects.is_empty() || req.issuers.is_empty() {
        return Ok(GetLabelsResponse::default());
    }
    let store = state.store.clone();
    blocking(move || {
        let now = now_us();
        let mut labels = Vec::new();
        for subject in &req.subjects {
            for label in store.labels(subject).map_err(internal)? {
                if req.issuers.contains(&label.src) && label.exp_us.is_none_or(|exp| exp > now) {
                    labels.push(label.json.into_bytes());
                }
            }
        }
        Ok(GetLabelsResponse { labels })
    })
    .await
}
