//! The writer lease: which replica ingests.
//!
//! One row (`lease`, name `writer`) names the owner. Taking it is a lightweight transaction
//! (`INSERT ... IF NOT EXISTS USING TTL`), keeping it is another (`UPDATE ... USING TTL ... IF
//! owner = me`), both at SERIAL consistency, so two replicas can never both hold it: Paxos
//! orders the attempts. The TTL makes a dead holder's lease expire by itself; the holder renews
//! it well within the TTL and stops writing when a renewal fails. A replica that takes the
//! lease over calls [`super::CassandraStore::recover`] before it writes: the batch the previous
//! holder logged but may not have finished is applied again (with its own timestamp, so it
//! cannot overwrite anything newer), and the in-memory tables are reloaded.

use std::time::Duration;

use scylla::value::{CqlValue, Row};

use super::{CassandraStore, Ctx};
use crate::StoreError;

fn applied(res: scylla::response::query_result::QueryResult) -> Result<bool, StoreError> {
    let rows = res.into_rows_result().ctx("reading a lease answer")?;
    let row = rows
        .maybe_first_row::<Row>()
        .ctx("reading a lease answer")?;
    Ok(matches!(
        row.as_ref().and_then(|row| row.columns.first()),
        Some(Some(CqlValue::Boolean(true)))
    ))
}

/// Renews the lease if `owner` holds it, else takes it if nobody does; whether `owner` holds
/// it now.
pub(crate) async fn try_acquire(
    store: &CassandraStore,
    owner: &str,
    ttl: Duration,
) -> Result<bool, StoreError> {
    let ttl_secs = ttl.as_secs().clamp(1, i32::MAX as u64) as i32;
    let res = store
        .session
        .execute_unpaged(&store.st.lease_renew, (ttl_secs, owner, owner))
        .await
        .ctx("renewing the writer lease")?;
    if applied(res)? {
        return Ok(true);
    }
    let res = store
        .session
        .execute_unpaged(&store.st.lease_acquire, (owner, ttl_secs))
        .await
        .ctx("taking the writer lease")?;
    applied(res)
}

/// Releases the lease if `owner` holds it, so that another replica need not wait for the TTL.
pub(crate) async fn release(store: &CassandraStore, owner: &str) -> Result<(), StoreError> {
    store
        .session
        .execute_unpaged(&store.st.lease_release, (owner,))
        .await
        .ctx("releasing the writer lease")?;
    Ok(())
}
