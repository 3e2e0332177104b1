//! Newest-first scans of time-bucketed lists: the bucket directory, then each bucket.

use futures_util::{StreamExt, TryStreamExt};
use starling_core::ActorId;

use super::{CassandraStore, Ctx, PAGE_ROWS, layout};
use crate::apply::Records;
use crate::codec::list_entry;
use crate::keys::{self, tag};
use crate::notify;
use crate::queries;
use crate::{DidMemo, ListOf, ListPage, StoreError};

/// Records read ahead of the caller of [`CassandraStore::scan_records`].
const SCAN_AHEAD: usize = 4_096;

/// A stored record's key and value, or the error that ended the scan.
pub(super) type Scanned = Result<(Vec<u8>, Vec<u8>), StoreError>;

impl CassandraStore {
    /// Every stored record (key and value), read by a task on the store's runtime while the
    /// caller consumes them (so that the caller may block on that runtime itself, as a batch does).
    pub(super) fn scan_records(&self) -> std::sync::mpsc::Receiver<Scanned> {
        let (tx, rx) = std::sync::mpsc::sync_channel(SCAN_AHEAD);
        let failed = tx.clone();
        let (session, scan) = (self.session.clone(), self.st.scan_all_records.clone());
        let task = async move {
            let mut rows = session
                .execute_iter(scan, ())
                .await
                .ctx("reading every record")?
                .rows_stream::<(Vec<u8>, Vec<u8>, Vec<u8>)>()
                .ctx("reading every record")?;
            while let Some((partition, k, bytes)) =
                rows.try_next().await.ctx("reading every record")?
            {
                // The partition is the actor's id and a shard; the record key, the actor's id
                // and the clustering key.
                let key = [partition.get(..4).unwrap_or_default(), &k].concat();
                if tx.send(Ok((key, bytes))).is_err() {
                    break;
                }
            }
            Ok::<_, StoreError>(())
        };
        let Some(rt) = self.rt.as_ref() else {
            unreachable!("the runtime lives until the store is dropped");
        };
        rt.spawn(async move {
            if let Err(err) = task.await {
                // The caller stops at this error; a dropped receiver means it stopped already.
                let _ = failed.send(Err(err));
            }
        });
        rx
    }

    /// Every stored record of `actor` (live or a tombstone): key and value.
    pub(super) fn records_of(&self, actor: ActorId) -> Result<Records, StoreError> {
        let store = self;
        let shards: Vec<Vec<u8>> = (0..layout::RECORD_SHARDS)
            .map(|shard| [&actor.0.to_be_bytes()[..], &[shard]].concat())
            .collect();
        let found = store.block(
            futures_util::stream::iter(shards)
                .map(|partition| async move {
                    let mut rows = store
                        .session
                        .execute_iter(store.st.scan_records.clone(), (partition,))
                        .await
                        .ctx("reading an account's records")?
                        .rows_stream::<(Vec<u8>, Vec<u8>)>()
                        .ctx("reading an account's records")?;
                    let mut found = Vec::new();
                    while let Some((key, bytes)) =
                        rows.try_next().await.ctx("reading an account's records")?
                    {
                        found.push(([&actor.0.to_be_bytes()[..], &key].concat(), bytes));
                    }
                    Ok::<_, StoreError>(found)
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>(),
        )?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Visits the entries of the list `p` newest first (clustering keys, descending), below
    /// `upper` (a clustering key) if given, until `visit` says stop.
    pub(super) async fn scan_list(
        &self,
        p: &[u8],
        bits: Option<u32>,
        upper: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let upper_bucket = match (bits, upper) {
            (Some(bits), Some(upper)) => {
                let time: [u8; 8] = upper
                    .get(..8)
                    .and_then(|bytes| bytes.try_into().ok())
                    .ok_or_else(|| StoreError::corrupt("list cursor", &[]))?;
                Some(layout::bucket(keys::time_from_bytes(time), bits))
            }
            _ => None,
        };
        let buckets: Vec<i64> = match bits {
            None => vec![0],
            Some(_) => {
                // The directory is read whole: one row per non-empty bucket of this list.
                let mut rows = self
                    .session
                    .execute_iter(
                        self.st.buckets_desc.clone(),
                        (p, upper_bucket.unwrap_or(i64::MAX)),
                    )
                    .await
                    .ctx("reading a bucket directory")?
                    .rows_stream::<(i64,)>()
                    .ctx("reading a bucket directory")?;
                let mut buckets = Vec::new();
                while let Some((b,)) = rows.try_next().await.ctx("reading a bucket directory")? {
                    buckets.push(b);
                }
                buckets
            }
        };
        for b in buckets {
            let bound = match (upper, upper_bucket) {
                (Some(upper), Some(ub)) if ub == b => Some(upper),
                (Some(upper), None) => Some(upper),
                _ => None,
            };
            let pager = match bound {
                Some(upper) => {
                    self.session
                        .execute_iter(self.st.entries_below.clone(), (p, b, upper))
                        .await
                }
                None => {
                    self.session
                        .execute_iter(self.st.entries_desc.clone(), (p, b))
                        .await
                }
            }
            .ctx("reading a list")?;
            let mut rows = pager.rows_stream::<(Vec<u8>,)>().ctx("reading a list")?;
            while let Some((k,)) = rows.try_next().await.ctx("reading a list")? {
                if !visit(&k)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Visits `recipient`'s notification entries newest first, below `below`, a page at a
    /// time: [`crate::Store::notification_entries`].
    pub(super) fn scan_notifications(
        &self,
        recipient: ActorId,
        below: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let prefix = notify::prefix(recipient);
        let page_rows = PAGE_ROWS as usize;
        let mut tails: Vec<Vec<u8>> = Vec::new();
        let mut next_upper = below.map(<[u8]>::to_vec);
        // A page at a time on the runtime; `visit` runs here.
        loop {
            tails.clear();
            self.block(self.scan_list(
                &prefix,
                layout::bucket_bits(tag::NOTIFICATION),
                next_upper.as_deref(),
                &mut |k: &[u8]| {
                    tails.push(k.to_vec());
                    Ok(tails.len() < page_rows)
                },
            ))?;
            for tail in &tails {
                if !visit(tail)? {
                    return Ok(());
                }
            }
            match tails.pop() {
                Some(last) if tails.len() + 1 == page_rows => next_upper = Some(last),
                _ => return Ok(()),
            }
        }
    }
}

impl CassandraStore {
    /// [`crate::Store::list_page`].
    pub(super) fn scan_list_page(
        &self,
        list: &ListOf<'_>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        if limit == 0 {
            return Ok(ListPage::default());
        }
        let Some(prefix) = queries::list(list, &mut |uri| self.ref_of(uri))? else {
            return Ok(ListPage::default());
        };
        let bits = prefix.first().and_then(|&t| layout::bucket_bits(t));
        // One more than asked: its presence says whether there is a next page.
        let mut tails: Vec<Vec<u8>> = Vec::new();
        self.block(self.scan_list(&prefix, bits, after, &mut |k: &[u8]| {
            tails.push(k.to_vec());
            Ok(tails.len() <= limit)
        }))?;
        let mut page = ListPage::default();
        let more = tails.len() > limit;
        tails.truncate(limit);
        let mut dids = DidMemo::default();
        for tail in &tails {
            page.entries.push(list_entry(list, tail, |id| {
                dids.did(self, id).map(str::to_owned)
            })?);
        }
        if more {
            page.cursor = tails.last().cloned();
        }
        Ok(page)
    }
}
