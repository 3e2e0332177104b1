//! [`crate::Store::usage`] on Cassandra: one pass over the records, index entries, counts, pair
//! counts and actors, with the entries' keys put back together as the embedded store keeps
//! them, so that both backends count alike. The smaller tables (the bucket directory, meta,
//! the change log, private state) are left out; `nodetool tablestats` has them all.

use futures_util::TryStreamExt;

use super::{CassandraStore, Ctx};
use crate::StoreError;
use crate::locks::read;
use crate::usage::Usage;

impl CassandraStore {
    pub(super) fn scan_usage(&self) -> Result<Usage, StoreError> {
        let mut usage = Usage::default();
        {
            let collections = read(&self.collections);
            for scanned in self.scan_records() {
                let (key, value) = scanned?;
                usage.add_record(&collections, &key, &value);
            }
        }
        self.block(self.scan_tables(&mut usage))?;
        Ok(usage)
    }

    /// The index entries, counts, pair counts and actor rows.
    async fn scan_tables(&self, usage: &mut Usage) -> Result<(), StoreError> {
        const WHAT: &str = "reading every row of a table for the usage";
        let mut entries = self
            .rows::<(Vec<u8>, Vec<u8>)>(&self.st.scan_all_entries)
            .await?;
        while let Some((p, k)) = entries.try_next().await.ctx(WHAT)? {
            usage.add_entry(&[p, k].concat(), &[]);
        }
        let mut counts = self
            .rows::<(Vec<u8>, i64)>(&self.st.scan_all_counts)
            .await?;
        while let Some((k, n)) = counts.try_next().await.ctx(WHAT)? {
            usage.add_entry(&k, &n.to_be_bytes());
        }
        let mut pairs = self.rows::<(Vec<u8>, i32)>(&self.st.scan_all_pairs).await?;
        while let Some((k, n)) = pairs.try_next().await.ctx(WHAT)? {
            usage.add_entry(&k, &n.to_be_bytes());
        }
        let mut actors = self
            .rows::<(String, Vec<u8>)>(&self.st.scan_all_actors)
            .await?;
        while let Some((did, state)) = actors.try_next().await.ctx(WHAT)? {
            usage.add("actors", did.as_bytes(), &state);
        }
        Ok(())
    }

    /// Every row of `statement`, paged.
    async fn rows<R>(
        &self,
        statement: &scylla::statement::prepared::PreparedStatement,
    ) -> Result<impl futures_util::Stream<Item = Result<R, impl std::fmt::Display>>, StoreError>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm> + 'static,
    {
        const WHAT: &str = "starting a scan of a table for the usage";
        self.session
            .execute_iter(statement.clone(), ())
            .await
            .ctx(WHAT)?
            .rows_stream::<R>()
            .ctx(WHAT)
    }
}
