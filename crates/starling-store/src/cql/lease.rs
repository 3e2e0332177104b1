//! The writer lease and the fencing epoch: which replica writes, and why a replica that lost
//! the lease can no longer land a batch.
//!
//! # The `writer` row
//! One row (table `writer`, name `writer`), only ever written by lightweight transactions
//! (Paxos, SERIAL), holds:
//!
//! | column | meaning |
//! |---|---|
//! | `owner` | the lease holder: a cell with a TTL, so a dead holder's lease expires by itself |
//! | `epoch` | the fencing token: never expires, one higher after every take |
//! | `batch_seq`, `batch_ts`, `batch_chunks`, `batch_writer` | the newest committed batch: its sequence, write timestamp, `batch_chunks` rows and the id of the store that logged them |
//!
//! Taking the lease is one conditional batch on the row: `owner` with the TTL and `epoch + 1`,
//! if nobody holds it and the epoch is the one just read. Renewing is `IF owner = me AND epoch =
//! mine`. Committing a batch (see [`commit`]) is `IF epoch = mine AND owner = me AND batch_seq =
//! the head I know`: the one request of a batch that is a lightweight transaction, and its
//! commit point. Paxos orders every take and every commit on the row, so after a take has
//! bumped the epoch no commit of an older epoch can succeed: a writer that stalled past its
//! lease (a pause of the process, a long stop of the world) gets `[applied] = false`, and its
//! batch is refused before any of its data writes is sent ([`StoreError::Fenced`]).
//!
//! # Stores without the lease
//! `starling replay`, `import-follows` and the tests write without taking the lease. Such a
//! store takes a new epoch with its first commit, in the same transaction, if no replica holds
//! the lease and nothing was committed since the store loaded its state (`batch_seq` is still
//! the head it read). So it, too, writes under an epoch of its own, is refused once a replica
//! takes the lease, and never writes from a stale view of the store.
//!
//! # Taking over
//! A replica that takes the lease must call [`super::CassandraStore::recover`] before it
//! writes (until then its commits are refused). Recovery reads the row at SERIAL, after the
//! take, so it sees every batch an older epoch committed: the newest is re-applied if it is
//! not marked applied, with the timestamp it was committed with, which is above every earlier
//! batch's; this store's own batches then take timestamps above it. See `write_batch` in
//! `mod.rs` for why the window between a commit and its data writes is safe.

use std::time::Duration;

use scylla::value::{CqlValue, Row};

use super::{CassandraStore, Ctx};
use crate::StoreError;
use crate::locks::lock;

/// What this store may write under; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fence {
    /// Holds no epoch. Its first commit takes `epoch + 1`, provided no replica holds the lease
    /// and the newest committed batch is still `head_seq`.
    Reader {
        /// The epoch read at the last recovery.
        epoch: i64,
        /// The newest committed batch at the last recovery.
        head_seq: i64,
    },
    /// Took the lease under `epoch`; writes once recovery has run.
    Taken {
        /// The epoch the take set.
        epoch: i64,
        /// The lease owner.
        owner: String,
    },
    /// Writes under `epoch`, holding the lease of `owner` (or, with `None`, no lease).
    Writer {
        /// The epoch every commit is conditioned on.
        epoch: i64,
        /// The lease owner, if this store holds the lease.
        owner: Option<String>,
        /// The newest committed batch: this store's own last one.
        head_seq: i64,
    },
    /// Lost the lease, or had a commit refused or fail: never writes again (reopen the store).
    Lost,
}

/// The newest committed batch, as the `writer` row names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchHead {
    /// The batch sequence.
    pub seq: i64,
    /// The write timestamp of all its writes, in microseconds.
    pub ts: i64,
    /// Its rows in `batch_chunks`.
    pub chunks: i32,
    /// The id of the store that logged it (the `writer` of its `batch_chunks` rows).
    pub writer: i64,
}

/// The `writer` row, read at SERIAL.
#[derive(Clone, Debug)]
pub(crate) struct WriterRow {
    pub owner: Option<String>,
    pub epoch: i64,
    pub head: BatchHead,
}

/// The condition and the epoch of one commit, decided before the batch is logged.
#[derive(Clone, Debug)]
pub(crate) struct Claim {
    /// The epoch the row must hold.
    epoch_if: i64,
    /// The epoch the commit leaves (one higher for a store's first commit without the lease).
    epoch_set: i64,
    owner: Option<String>,
    /// The newest committed batch the row must name.
    pub head_seq: i64,
}

fn applied(res: scylla::response::query_result::QueryResult) -> Result<bool, StoreError> {
    let rows = res.into_rows_result().ctx("reading a writer row answer")?;
    let row = rows
        .maybe_first_row::<Row>()
        .ctx("reading a writer row answer")?;
    Ok(matches!(
        row.as_ref().and_then(|row| row.columns.first()),
        Some(Some(CqlValue::Boolean(true)))
    ))
}

/// The lease TTL in whole seconds, at least one.
fn ttl_secs(ttl: Duration) -> i32 {
    ttl.as_secs().clamp(1, i32::MAX as u64) as i32
}

/// Reads the `writer` row at SERIAL: every transaction accepted before this read is in it.
pub(crate) async fn read_row(store: &CassandraStore) -> Result<WriterRow, StoreError> {
    type Columns = (
        Option<String>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i32>,
        Option<i64>,
    );
    let res = store
        .session
        .execute_unpaged(&store.st.writer.get, ())
        .await
        .ctx("reading the writer row")?;
    let row = res
        .into_rows_result()
        .ctx("reading the writer row")?
        .maybe_first_row::<Columns>()
        .ctx("reading the writer row")?;
    let Some((owner, Some(epoch), seq, ts, chunks, writer)) = row else {
        return Err(StoreError::corrupt(
            "the writer row is missing or has no epoch",
            b"writer",
        ));
    };
    Ok(WriterRow {
        owner,
        epoch,
        head: BatchHead {
            seq: seq.unwrap_or(0),
            ts: ts.unwrap_or(0),
            chunks: chunks.unwrap_or(0),
            writer: writer.unwrap_or(0),
        },
    })
}

/// Renews the lease if `owner` holds it through this store, else takes it if nobody holds it;
/// whether `owner` holds it now. A store that held the lease and lost it never takes it again.
pub(crate) async fn try_acquire(
    store: &CassandraStore,
    owner: &str,
    ttl: Duration,
) -> Result<bool, StoreError> {
    let fence = lock(&store.fence).clone();
    let held = match &fence {
        Fence::Lost => return Ok(false),
        Fence::Taken { epoch, owner: mine } if mine == owner => Some(*epoch),
        Fence::Writer {
            epoch,
            owner: Some(mine),
            ..
        } if mine == owner => Some(*epoch),
        // Any other lease of this store's was lost: its state may be stale.
        Fence::Taken { .. } | Fence::Writer { owner: Some(_), .. } => return Ok(false),
        Fence::Reader { .. } | Fence::Writer { owner: None, .. } => None,
    };
    if let Some(epoch) = held {
        let res = store
            .session
            .execute_unpaged(
                &store.st.writer.lease_renew,
                (ttl_secs(ttl), owner, owner, epoch),
            )
            .await
            .ctx("renewing the writer lease")?;
        let renewed = applied(res)?;
        if !renewed {
            *lock(&store.fence) = Fence::Lost;
        }
        return Ok(renewed);
    }
    let row = read_row(store).await?;
    if row.owner.is_some() {
        return Ok(false);
    }
    let epoch = row.epoch + 1;
    let res = store
        .session
        .execute_unpaged(
            &store.st.writer.lease_take,
            (ttl_secs(ttl), owner, row.epoch, epoch),
        )
        .await
        .ctx("taking the writer lease")?;
    if !applied(res)? {
        return Ok(false);
    }
    let mut fence = lock(&store.fence);
    if *fence == Fence::Lost {
        // A commit failed meanwhile: this store writes no more, lease or not.
        return Ok(false);
    }
    *fence = Fence::Taken {
        epoch,
        owner: owner.to_owned(),
    };
    Ok(true)
}

/// Releases the lease if `owner` holds it, so that another replica need not wait for the TTL.
/// The store then writes no more (reopen it to write again).
pub(crate) async fn release(store: &CassandraStore, owner: &str) -> Result<(), StoreError> {
    store
        .session
        .execute_unpaged(&store.st.writer.lease_release, (owner,))
        .await
        .ctx("releasing the writer lease")?;
    let mut fence = lock(&store.fence);
    let mine = match &*fence {
        Fence::Taken { owner: mine, .. } => mine == owner,
        Fence::Writer {
            owner: Some(mine), ..
        } => mine == owner,
        _ => false,
    };
    if mine {
        // Writing again needs a new epoch, taken only if nothing was committed since.
        *fence = Fence::Lost;
    }
    Ok(())
}

/// Sets what this store writes under after a recovery that read `row` (after any take).
pub(crate) fn recovered(store: &CassandraStore, row: &WriterRow) {
    let mut fence = lock(&store.fence);
    *fence = match &*fence {
        Fence::Taken { epoch, owner }
        | Fence::Writer {
            epoch,
            owner: Some(owner),
            ..
        } if *epoch == row.epoch && row.owner.as_deref() == Some(owner) => Fence::Writer {
            epoch: *epoch,
            owner: Some(owner.clone()),
            head_seq: row.head.seq,
        },
        Fence::Writer {
            epoch, owner: None, ..
        } if *epoch == row.epoch => Fence::Writer {
            epoch: *epoch,
            owner: None,
            head_seq: row.head.seq,
        },
        // The lease was lost before recovery finished: another replica writes now.
        Fence::Taken { .. } | Fence::Writer { .. } | Fence::Lost => Fence::Lost,
        Fence::Reader { .. } => Fence::Reader {
            epoch: row.epoch,
            head_seq: row.head.seq,
        },
    };
}

/// Sends the commit until its outcome is known: whether it landed.
async fn commit_resolved(
    store: &CassandraStore,
    claim: &Claim,
    head: BatchHead,
) -> Result<bool, StoreError> {
    let mut backoff = COMMIT_BACKOFF_FIRST;
    let mut attempt = 1;
    loop {
        let err = match send_commit(store, claim, head).await {
            Ok(committed) => return Ok(committed),
            Err(err) => err,
        };
        tracing::warn!(seq = head.seq, attempt, error = %err, "batch commit outcome unknown");
        let outcome = loop {
            if attempt == COMMIT_ATTEMPTS_MAX {
                return Err(err);
            }
            attempt += 1;
            tokio::time::sleep(backoff).await;
            backoff *= 2;
            match read_row(store).await {
                Ok(row) => break outcome_of(&row, claim, head),
                Err(read_err) => {
                    tracing::warn!(seq = head.seq, attempt, error = %read_err, "resolving a batch commit");
                }
            }
        };
        match outcome {
            CommitOutcome::Landed => return Ok(true),
            CommitOutcome::Refused => return Ok(false),
            CommitOutcome::NotLanded => {}
        }
    }
}

/// One conditional commit; whether it was applied.
async fn send_commit(
    store: &CassandraStore,
    claim: &Claim,
    head: BatchHead,
) -> Result<bool, StoreError> {
    let res = store
        .session
        .execute_unpaged(
            &store.st.writer.commit,
            (
                claim.epoch_set,
                head.seq,
                head.ts,
                head.chunks,
                head.writer,
                claim.epoch_if,
                claim.owner.as_deref(),
                claim.head_seq,
            ),
        )
        .await
        .ctx("committing a batch")?;
    applied(res)
}

/// What a SERIAL read of the writer row says of a commit whose answer was lost.
#[derive(Debug, PartialEq, Eq)]
enum CommitOutcome {
    /// The row names the batch: it landed.
    Landed,
    /// The row still holds the claim's condition: it did not land, and may be sent again.
    NotLanded,
    /// Someone else moved the row on: it can never land.
    Refused,
}

fn outcome_of(row: &WriterRow, claim: &Claim, head: BatchHead) -> CommitOutcome {
    if row.head == head && row.epoch == claim.epoch_set {
        CommitOutcome::Landed
    } else if row.head.seq == claim.head_seq
        && row.epoch == claim.epoch_if
        && row.owner == claim.owner
    {
        CommitOutcome::NotLanded
    } else {
        CommitOutcome::Refused
    }
}

/// What the next commit is conditioned on, or why this store may not write.
pub(crate) fn claim(store: &CassandraStore) -> Result<Claim, StoreError> {
    match lock(&store.fence).clone() {
        Fence::Reader { epoch, head_seq } => Ok(Claim {
            epoch_if: epoch,
            epoch_set: epoch + 1,
            owner: None,
            head_seq,
        }),
        Fence::Writer {
            epoch,
            owner,
            head_seq,
        } => Ok(Claim {
            epoch_if: epoch,
            epoch_set: epoch,
            owner,
            head_seq,
        }),
        Fence::Taken { epoch, .. } => Err(StoreError::Fenced {
            what: format!(
                "took the writer lease (epoch {epoch}) but has not recovered the store yet"
            ),
        }),
        Fence::Lost => Err(StoreError::Fenced {
            what: "this store lost the writer lease or had a commit refused; reopen it to write"
                .to_owned(),
        }),
    }
}

/// How many times a commit whose outcome is unknown is resolved (and, if it did not land,
/// sent again) before the store gives up writing.
const COMMIT_ATTEMPTS_MAX: u32 = 6;
/// The pause before the first resolution; it doubles with each attempt (0.2 s to 3.2 s, 6.2 s
/// in all, so a node that died without the cluster noticing yet is marked down before the last
/// one).
const COMMIT_BACKOFF_FIRST: Duration = Duration::from_millis(200);

/// The commit point of a batch whose writes are logged: makes `head` the newest committed batch
/// if the row still holds `claim`'s epoch, owner and head. Refused: [`StoreError::Fenced`], and
/// the store writes no more. Failed (outcome unknown, as a Paxos round that timed out while a
/// node died): resolved by reading the row at SERIAL, which finishes any round in flight, and
/// sent again if it did not land; after [`COMMIT_ATTEMPTS_MAX`] failures, the error, and the
/// store writes no more (whichever writer recovers next finds the batch committed or not).
pub(crate) async fn commit(
    store: &CassandraStore,
    claim: &Claim,
    head: BatchHead,
) -> Result<(), StoreError> {
    assert_eq!(
        head.seq,
        claim.head_seq + 1,
        "batch sequence after the head"
    );
    let committed = match commit_resolved(store, claim, head).await {
        Ok(committed) => committed,
        Err(err) => {
            *lock(&store.fence) = Fence::Lost;
            return Err(err);
        }
    };
    if !committed {
        *lock(&store.fence) = Fence::Lost;
        let now = match read_row(store).await {
            Ok(row) => format!(
                "epoch {}, lease {}, newest batch {}",
                row.epoch,
                row.owner.as_deref().unwrap_or("free"),
                row.head.seq
            ),
            Err(err) => format!("unread: {err}"),
        };
        return Err(StoreError::Fenced {
            what: format!(
                "batch {} refused: it was conditioned on epoch {}, lease {}, newest batch {}, \
                 and the writer row now says {now}",
                head.seq,
                claim.epoch_if,
                claim.owner.as_deref().unwrap_or("free"),
                claim.head_seq
            ),
        });
    }
    let mut fence = lock(&store.fence);
    if *fence != Fence::Lost {
        *fence = Fence::Writer {
            epoch: claim.epoch_set,
            owner: claim.owner.clone(),
            head_seq: head.seq,
        };
    }
    Ok(())
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    fn head(seq: i64, writer: i64) -> BatchHead {
        BatchHead {
            seq,
            ts: 1_000 + seq,
            chunks: 1,
            writer,
        }
    }

    fn row(owner: Option<&str>, epoch: i64, head: BatchHead) -> WriterRow {
        WriterRow {
            owner: owner.map(str::to_owned),
            epoch,
            head,
        }
    }

    /// A commit whose answer was lost is judged by the row alone: landed only if the row names
    /// this very batch under the epoch the commit sets; sent again only if the row is still
    /// what the commit was conditioned on; otherwise refused. Each case is built from the
    /// condition the writer row is documented to hold, for a lease holder and a lease-less
    /// store (whose first commit takes the next epoch).
    #[test]
    fn a_lost_commit_answer_is_resolved_from_the_writer_row() {
        let holder = Claim {
            epoch_if: 4,
            epoch_set: 4,
            owner: Some("a".to_owned()),
            head_seq: 9,
        };
        let mine = head(10, 77);
        let cases = [
            (row(Some("a"), 4, mine), CommitOutcome::Landed),
            (row(Some("a"), 4, head(9, 77)), CommitOutcome::NotLanded),
            // Another store's batch 10 under the same epoch cannot be this one.
            (row(Some("a"), 4, head(10, 5)), CommitOutcome::Refused),
            // The lease expired, or another replica took it.
            (row(None, 4, head(9, 77)), CommitOutcome::Refused),
            (row(Some("b"), 5, head(9, 77)), CommitOutcome::Refused),
        ];
        for (row, want) in cases {
            assert_eq!(outcome_of(&row, &holder, mine), want, "{row:?}");
        }
        let reader = Claim {
            epoch_if: 4,
            epoch_set: 5,
            owner: None,
            head_seq: 9,
        };
        let cases = [
            (row(None, 5, mine), CommitOutcome::Landed),
            (row(None, 4, head(9, 77)), CommitOutcome::NotLanded),
            (row(None, 4, mine), CommitOutcome::Refused),
            (row(Some("b"), 4, head(9, 77)), CommitOutcome::Refused),
        ];
        for (row, want) in cases {
            assert_eq!(outcome_of(&row, &reader, mine), want, "{row:?}");
        }
    }
}
