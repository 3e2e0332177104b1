//! The operator's takedowns, shared by the gRPC admin RPCs (`grpc/moderation.rs`), the HTTP
//! ops API (`POST /v1/admin/takedown`, `POST /v1/admin/untakedown`, `GET /v1/admin/takedown`)
//! and the `starling takedown` command: what a subject is, how it is checked, and the one
//! store write each makes.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use starling_core::syntax::{RecordUri, is_valid_cid, is_valid_did};
use starling_store::{PrivateOp, Store, StoreError, TakedownSubject};

use crate::graph_api::query;
use crate::{ApiError, AppState, Shown};

/// The subject named by a kind (`actor`, `record` or `blob`), a DID or AT-URI, and for a blob
/// its CID; an error names what is wrong.
pub fn takedown_subject(
    kind: &str,
    subject: &str,
    cid: Option<&str>,
) -> Result<TakedownSubject, String> {
    let did = |did: &str| match is_valid_did(did) {
        true => Ok(did.to_owned()),
        false => Err(format!("`{}` is not a DID", Shown(did))),
    };
    match (kind, cid) {
        ("actor", None) => Ok(TakedownSubject::Actor { did: did(subject)? }),
        ("record", None) => match RecordUri::parse(subject) {
            Some(_) => Ok(TakedownSubject::Record {
                uri: subject.to_owned(),
            }),
            None => Err(format!(
                "`{}` is not a record AT-URI (at://DID/COLLECTION/RKEY)",
                Shown(subject)
            )),
        },
        ("blob", Some(cid)) if is_valid_cid(cid) => Ok(TakedownSubject::Blob {
            did: did(subject)?,
            cid: cid.to_owned(),
        }),
        ("blob", Some(cid)) => Err(format!("`{}` is not a CID", Shown(cid))),
        ("blob", None) => Err("a blob takedown needs the blob's CID".to_owned()),
        ("actor" | "record", Some(_)) => Err(format!("a {kind} takedown takes no CID")),
        (kind, _) => Err(format!(
            "`{}` is not a takedown kind (expected actor, record or blob)",
            Shown(kind)
        )),
    }
}

/// Microseconds since the Unix epoch, now.
pub(crate) fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Takes `subject` down with `reference` (`Some`), or lifts its takedown (`None`), durably.
pub fn set_takedown<S: Store + ?Sized>(
    store: &S,
    subject: TakedownSubject,
    reference: Option<String>,
) -> Result<(), StoreError> {
    let op = match reference {
        Some(reference) => PrivateOp::Takedown { subject, reference },
        None => PrivateOp::Untakedown { subject },
    };
    store.apply_private(&[op], now_us(), None)
}

/// `?kind=actor|record|blob&subject=DID-or-URI[&cid=CID][&ref=REF]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TakedownQuery {
    kind: String,
    subject: String,
    cid: Option<String>,
    #[serde(rename = "ref")]
    reference: Option<String>,
}

/// What the takedown endpoints answer: the subject's takedown after the call.
#[derive(Serialize)]
pub struct TakedownState {
    /// Whether it is taken down.
    pub taken_down: bool,
    /// The takedown's reference, if it is.
    pub takedown_ref: Option<String>,
}

async fn run<S: Store + 'static>(
    state: AppState<S>,
    params: Result<Query<TakedownQuery>, QueryRejection>,
    write: Option<bool>,
) -> Result<Json<TakedownState>, ApiError> {
    let params = query(params)?;
    let subject = takedown_subject(&params.kind, &params.subject, params.cid.as_deref())
        .map_err(ApiError::bad_request)?;
    let store = state.store.clone();
    tokio::task::spawn_blocking(move || {
        match write {
            Some(true) => set_takedown(
                &*store,
                subject.clone(),
                Some(params.reference.unwrap_or_default()),
            )?,
            Some(false) => set_takedown(&*store, subject.clone(), None)?,
            None => {}
        }
        let takedown_ref = store.takedown(&subject)?;
        Ok(TakedownState {
            taken_down: takedown_ref.is_some(),
            takedown_ref,
        })
    })
    .await
    .map_err(ApiError::internal)?
    .map(Json)
    .map_err(|err: StoreError| ApiError::internal(err))
}

/// `POST /v1/admin/takedown`: takes the subject down.
pub async fn takedown<S: Store + 'static>(
    State(state): State<AppState<S>>,
    params: Result<Query<TakedownQuery>, QueryRejection>,
) -> Result<Json<TakedownState>, ApiError> {
    run(state, params, Some(true)).await
}

/// `POST /v1/admin/untakedown`: lifts the subject's takedown.
pub async fn untakedown<S: Store + 'static>(
    State(state): State<AppState<S>>,
    params: Result<Query<TakedownQuery>, QueryRejection>,
) -> Result<Json<TakedownState>, ApiError> {
    run(state, params, Some(false)).await
}

/// `GET /v1/admin/takedown`: the subject's takedown.
pub async fn takedown_state<S: Store + 'static>(
    State(state): State<AppState<S>>,
    params: Result<Query<TakedownQuery>, QueryRejection>,
) -> Result<Json<TakedownState>, ApiError> {
    run(state, params, None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks subject parsing against hand-written cases: each kind with a valid subject, and
    // each way a subject can be wrong named in the error.
    #[test]
    fn subjects_are_checked() {
        let cid = "bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy";
        assert_eq!(
            takedown_subject("actor", "did:plc:abc", None),
            Ok(TakedownSubject::Actor {
                did: "did:plc:abc".into()
            })
        );
        assert_eq!(
            takedown_subject("blob", "did:plc:abc", Some(cid)),
            Ok(TakedownSubject::Blob {
                did: "did:plc:abc".into(),
                cid: cid.into()
            })
        );
        let uri = "at://did:plc:abc/app.bsky.feed.post/3kaaaaaaaaaa2";
        assert_eq!(
            takedown_subject("record", uri, None),
            Ok(TakedownSubject::Record { uri: uri.into() })
        );
        for (kind, subject, cid, wrong) in [
            ("actor", "alice", None, "`alice` is not a DID"),
            ("record", "did:plc:abc", None, "is not a record AT-URI"),
            ("blob", "did:plc:abc", None, "needs the blob's CID"),
            ("blob", "did:plc:abc", Some("xyz"), "`xyz` is not a CID"),
            ("actor", "did:plc:abc", Some(cid), "takes no CID"),
            ("post", "did:plc:abc", None, "`post` is not a takedown kind"),
        ] {
            let err = takedown_subject(kind, subject, cid).unwrap_err();
            assert!(err.contains(wrong), "{kind} {subject}: {err}");
        }
    }
}
