//! The batch being written on a thread of its own while the next one is applied (see
//! [`InFlight`]): handing it over, waiting for it, and reading what it wrote.

use std::sync::Arc;

use super::{
    Done, EmbeddedStore, InFlight, InFlightData, lock, records_liveness, rows_moved, unstall,
};
use crate::StoreError;

impl EmbeddedStore {
    /// Waits until the batch being written in the background, if any, has finished, without
    /// taking it from the batch thread; a failed write is reported there.
    pub(super) fn wait_durable(&self) -> Result<(), StoreError> {
        let done = lock(&self.in_flight)
            .as_ref()
            .map(|in_flight| in_flight.done.clone());
        done.map_or(Ok(()), |done| done.wait())
    }

    /// Waits until the batch being written in the background, if any, is durable, and reports
    /// its error. Only for the thread that applies batches, and for shutdown.
    pub(super) fn wait_in_flight(&self) -> Result<(), StoreError> {
        let Some(in_flight) = lock(&self.in_flight).take() else {
            return Ok(());
        };
        // A write can wait on the engine forever (see `unstall.rs`); the writer thread's end
        // is checked as well, since a panic there never sets `done`.
        while !in_flight.writer.is_finished()
            && !in_flight.done.finished_within(unstall::CHECK_AFTER)
        {
            // The batch's own result, below, is the one to report: an engine that fails here
            // fails its write as well.
            if let Err(err) = self.restart_compactions(unstall::L0_TABLES_HALTING) {
                tracing::warn!(error = %err, "the engine could not be asked for a compaction step");
            }
        }
        match in_flight.writer.join() {
            Ok(res) => Ok(res?),
            Err(_) => Err(StoreError::corrupt("the batch writer thread panicked", &[])),
        }
    }

    /// Hands a write batch to a `batch-writer` thread, once the previous one is durable.
    pub(super) fn write_in_background(
        &self,
        writes: fjall::OwnedWriteBatch,
        data: InFlightData,
    ) -> Result<(), StoreError> {
        // Batches reach the disk in order: the previous write must be durable before this one.
        self.wait_in_flight()?;
        let done = Arc::new(Done::default());
        let data = Arc::new(data);
        let writer = std::thread::Builder::new()
            .name("batch-writer".to_owned())
            .spawn({
                let done = done.clone();
                let data = data.clone();
                let (count_cache, live_cache) = (self.count_cache.clone(), self.live_cache.clone());
                let (row_cache, heads) = (self.row_cache.clone(), self.heads.clone());
                move || {
                    let counts = data.counts.iter().map(|(key, &count)| (key, Some(count)));
                    let touched = data.touched.iter().map(|prefix| (prefix, None));
                    // The row cache's write spans the count cache's: a row read count by count
                    // while the count cache is being updated is never kept.
                    let res = row_cache.write(rows_moved(&data.counts), || {
                        count_cache.write(counts, || {
                            live_cache.write(records_liveness(&data.records), || {
                                heads.write(touched, || writes.commit())
                            })
                        })
                    });
                    done.set(&res);
                    res
                }
            })
            .map_err(|err| StoreError::Writer(err.to_string()))?;
        *lock(&self.in_flight) = Some(InFlight { data, writer, done });
        Ok(())
    }
    /// The data of the batch being written in the background, if any.
    pub(super) fn in_flight_data(&self) -> Option<Arc<InFlightData>> {
        lock(&self.in_flight)
            .as_ref()
            .map(|in_flight| in_flight.data.clone())
    }
}
