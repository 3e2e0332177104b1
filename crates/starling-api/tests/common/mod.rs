//! What the API tests share: the state `serve` builds around a store and a graph.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use starling_api::AppState;
use starling_graph::Graph;
use starling_ingest::timeline_sync::StoreFeeds;
use starling_store::EmbeddedStore;
use starling_timeline::{TimelineConfig, Timelines};

/// The API's state over `store` and `graph`: default timelines (refreshed once, as `serve`
/// does after loading the graph), no metrics, ready.
pub fn app_state(store: Arc<EmbeddedStore>, graph: Arc<Graph>) -> AppState<EmbeddedStore> {
    let timelines = Timelines::new(
        TimelineConfig::default(),
        graph.clone(),
        Arc::new(StoreFeeds(store.clone())),
    );
    timelines.refresh().expect("timeline refresh");
    AppState {
        store,
        graph,
        timelines: Arc::new(timelines),
        metrics: Arc::new(String::new),
        ready: Arc::new(AtomicBool::new(true)),
    }
}
