//! Private state (`crate::private`) in the `private_state` table: a partition per key
//! partition, clustering keys descending, and one logged batch per [`Store::apply_private`].

use scylla::statement::batch::{Batch as CqlBatch, BatchType};

use super::*;
use crate::private::{PrivateWrites, decide};
use crate::{BsyncStream, PrivateBackend, PrivateKey, PrivateOp, PrivateRows};

impl PrivateBackend for CassandraStore {
    /// Works out and writes private operations: one logged batch, so Cassandra applies all of
    /// its rows or none, with the stream's cursor among them. Serialized with event batches
    /// by the writer lock, with a write timestamp above every earlier batch's.
    ///
    /// Private rows are not fenced by the writer lease: one replica consumes bsync (the
    /// operator gives `--bsync-url` to one), and `UpdateNotificationSeen` only moves a seen
    /// time forward, so two replicas writing it at once lose at most the smaller of two times.
    fn apply(
        &self,
        ops: &[PrivateOp],
        now_us: i64,
        cursor: Option<(BsyncStream, &str)>,
    ) -> Result<(), StoreError> {
        let _writer = lock(&self.writer);
        let writes = decide(self, ops, now_us, cursor)?;
        if writes.is_empty() {
            return Ok(());
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let ts = now.max(self.last_ts.load(Ordering::Acquire) + 1);
        self.block(self.send_private(&writes, ts))?;
        self.last_ts.fetch_max(ts, Ordering::AcqRel);
        Ok(())
    }

    fn value(&self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError> {
        self.private_row(key)
    }

    fn rows(
        &self,
        partition: &PrivateKey,
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivateRows, StoreError> {
        self.private_partition(partition, below, limit)
    }
}

impl CassandraStore {
    async fn send_private(&self, writes: &PrivateWrites, ts: i64) -> Result<(), StoreError> {
        let mut batch = CqlBatch::new(BatchType::Logged);
        let mut values = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            batch.append_statement(self.st.set_private.clone());
            values.push((
                ts,
                value.clone(),
                key.partition.clone(),
                key.clustering.clone(),
            ));
        }
        self.session
            .batch(&batch, values)
            .await
            .ctx("writing private state")?;
        Ok(())
    }

    fn private_row(&self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError> {
        self.block(async {
            let res = self
                .session
                .execute_unpaged(&self.st.get_private, (&key.partition, &key.clustering))
                .await
                .ctx("reading private state")?;
            Ok(res
                .into_rows_result()
                .ctx("reading private state")?
                .maybe_first_row::<(Option<Vec<u8>>,)>()
                .ctx("reading private state")?
                .and_then(|(v,)| v))
        })
    }

    fn private_partition(
        &self,
        partition: &PrivateKey,
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<PrivateRows, StoreError> {
        let limit_rows = i32::try_from(limit).unwrap_or(i32::MAX);
        self.block(async {
            let p = &partition.partition;
            let pager = match below {
                Some(below) => {
                    self.session
                        .execute_iter(self.st.scan_private_below.clone(), (p, below, limit_rows))
                        .await
                }
                None => {
                    self.session
                        .execute_iter(self.st.scan_private.clone(), (p, limit_rows))
                        .await
                }
            }
            .ctx("reading private state")?;
            let mut rows = pager
                .rows_stream::<(Vec<u8>, Option<Vec<u8>>)>()
                .ctx("reading private state")?;
            let mut res = Vec::new();
            while let Some(row) = rows.next().await {
                let (k, v) = row.ctx("reading private state")?;
                if let Some(v) = v {
                    res.push((k, v));
                }
                if res.len() == limit {
                    break;
                }
            }
            Ok(res)
        })
    }
}
