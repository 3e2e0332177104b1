//! Timelines fed from the store: author feeds read from it, and each commit's changes.

use std::sync::Arc;

use starling_core::ActorId;
use starling_core::feed::{FeedItem, FeedKey};
use starling_core::jetstream::nsid;
use starling_store::Store;
use starling_timeline::{FeedSource, SourceError};

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
        let Some(did) = self.0.did(item.post.actor) else {
            return Ok(false);
        };
        let record = self
            .0
            .record(&did, nsid::POST, &item.post_rkey())
            .map_err(source_error)?;
        Ok(record.is_some())
    }
}

fn source_error(err: starling_store::StoreError) -> SourceError {
    SourceError {
        unavailable: err.is_unavailable(),
        message: err.to_string(),
    }
}
