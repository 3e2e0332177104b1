//! Private state (`crate::private`) in the `private_state` table: a partition per key
//! partition, clustering keys descending, and one logged batch per [`Store::apply_private`].

use super::*;
use crate::private::{PrivateKey, PrivateRules, PrivateWrites, StoreReads};
use crate::{BsyncStream, PrivateOp};
use scylla::statement::batch::{Batch as CqlBatch, BatchType};

impl CassandraStore {
    /// Works out and writes private operations: one logged batch, so Cassandra applies all of
    /// its rows or none, with the stream's cursor among them.
    ///
    /// Only the process that ingests writes private state (the bsync consumer runs beside
    /// ingest), so private batches have one writer, serialized by `private_writer`.
    pub(super) fn write_private(
        &self,
        ops: &[PrivateOp],
        now_us: i64,
        cursor: Option<(BsyncStream, &str)>,
    ) -> Result<(), StoreError> {
        let _writer = lock(&self.private_writer);
        let mut reads = StoreReads(self);
        let mut rules = PrivateRules::new(&mut reads, now_us);
        for op in ops {
            rules.apply(op)?;
        }
        let writes = rules.finish(cursor);
        if writes.is_empty() {
            return Ok(());
        }
        // One timestamp per batch, above the previous batch's even if the clock stepped back.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let ts = now.max(self.private_ts.load(Ordering::Acquire) + 1);
        self.block(self.send_private(&writes, ts))?;
        self.private_ts.store(ts, Ordering::Release);
        Ok(())
    }

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

    pub(super) fn private_row(&self, key: &PrivateKey) -> Result<Option<Vec<u8>>, StoreError> {
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

    pub(super) fn private_partition(
        &self,
        partition: &PrivateKey,
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
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
