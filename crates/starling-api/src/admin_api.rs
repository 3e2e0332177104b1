//! `/v1/admin/*`: operations that change what is on disk. Behind the guard of expensive queries
//! (a token off loopback), one at a time.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use starling_store::{BackupReport, Store, StoreError};

use crate::graph_api::query;
use crate::{ApiError, AppState};

/// The longest a backup may take before its caller is answered 503 (the copy goes on).
pub const BACKUP_DEADLINE: Duration = Duration::from_secs(6 * 3600);

/// `?name=NAME`.
#[derive(Deserialize)]
pub struct BackupQuery {
    name: String,
}

/// `POST /v1/admin/backup?name=NAME`: a consistent copy of the running store into
/// `backups/NAME` of its data directory; answers what it wrote.
pub async fn backup<S: Store + 'static>(
    State(state): State<AppState<S>>,
    params: Result<Query<BackupQuery>, QueryRejection>,
) -> Result<Json<BackupReport>, ApiError> {
    let name = query(params)?.name;
    let store = state.store.clone();
    tokio::task::spawn_blocking(move || store.backup(&name))
        .await
        .map_err(ApiError::internal)?
        .map(Json)
        .map_err(|err| match err {
            // A name taken, or a store that cannot: the caller's to fix.
            StoreError::DataDir { .. } => ApiError::new(StatusCode::BAD_REQUEST, err.to_string()),
            err => ApiError::internal(err),
        })
}
