//! Timelines fed from the store: author feeds read from it, and each commit's changes; the
//! periodic refresh of their caches.

use std::sync::Arc;
use std::time::Duration;

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey};
use starling_core::jetstream::nsid;
use starling_store::Store;
use starling_timeline::{FeedSource, SourceError, TimelineStats, Timelines};

use crate::IngestError;
use crate::periodic::Periodic;

/// The store's author feeds, as the source timelines read.
pub struct StoreFeeds<S>(pub Arc<S>);

impl<S: Store> FeedSource for StoreFeeds<S> {
    fn author_feed(
        &self,
        author: ActorId,
        below: Option<FeedKey>,
        visit: &mut dyn FnMut(FeedItem) -> bool,
    ) -> Result<(), SourceError> {
        self.0
            .author_feed(author, below, visit)
            .map_err(source_error)
    }

    fn shows_live_post(&self, item: &FeedItem) -> Result<bool, SourceError> {
        self.0
            .actor_record_is_live(item.post.actor, nsid::POST, &item.post_rkey())
            .map_err(source_error)
    }
}

fn source_error(err: starling_store::StoreError) -> SourceError {
    SourceError {
        unavailable: err.is_unavailable(),
        message: err.to_string(),
    }
}

/// Loads the timelines' caches (follow counts, celebrities), then refreshes them every
/// `interval` on a thread of their own, publishing the timelines' metrics each time.
pub fn start_refresh(
    timelines: Arc<Timelines>,
    interval: Duration,
) -> Result<Periodic, IngestError> {
    timelines.refresh().map_err(IngestError::TimelineRefresh)?;
    Periodic::start("timeline-refresh", interval, move || {
        timelines.refresh().map_err(IngestError::TimelineRefresh)?;
        export_metrics(&timelines.stats());
        Ok(())
    })
}

/// Publishes the timelines' counts; called with each cache refresh, and by `serve` at each
/// scrape of `/metrics`.
pub fn export_metrics(stats: &TimelineStats) {
    metrics::gauge!("starling_timeline_active_readers").set(stats.active_readers as f64);
    metrics::gauge!("starling_timeline_items").set(stats.items as f64);
    metrics::gauge!("starling_timeline_item_bytes").set(stats.item_bytes as f64);
    metrics::gauge!("starling_timeline_celebrities").set(stats.celebrities as f64);
    metrics::gauge!("starling_timeline_lossy_readers").set(stats.lossy_readers as f64);
    metrics::gauge!("starling_timeline_author_heads").set(stats.author_heads as f64);
    metrics::gauge!("starling_timeline_author_head_items").set(stats.author_head_items as f64);
    metrics::counter!("starling_timeline_author_head_fills_total")
        .absolute(stats.author_head_fills);
    metrics::counter!("starling_timeline_inserts_total").absolute(stats.inserts);
    metrics::counter!("starling_timeline_builds_total").absolute(stats.builds);
    metrics::counter!("starling_timeline_evictions_total").absolute(stats.evictions);
}
