//! Keeping the in-memory graph in step with the store, and persisting it.
//!
//! The store logs the graph changes of every batch atomically with its records (a sequence
//! number per batch). The graph snapshot file records the log sequence it covers; on start the
//! graph is the snapshot plus the log entries after it. Log entries are absolute ("A follows B
//! now", "A no longer follows B"), so applying an entry the snapshot already holds is harmless,
//! and a snapshot taken while ingest runs only has to be at least as new as its sequence.
//!
//! ```text
//! graph.snapshot: [8: "STRLSEQ1"][8: covered log sequence, LE][4: CRC-32 of the 16 bytes before]
//!                 [graph snapshot (starling-graph, with its own checksums)]
//! ```

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use starling_graph::{EdgeChange, Graph, GraphBuilder};
use starling_store::{Committed, GraphChange, Store, StoreError};
use starling_timeline::Timelines;
use tracing::{info, warn};

use crate::IngestError;
use crate::applier::CommitSink;
use crate::periodic::Periodic;

/// The snapshot's file name in the data directory.
pub const SNAPSHOT_FILE: &str = "graph.snapshot";
const SNAPSHOT_MAGIC: &[u8; 8] = b"STRLSEQ1";

/// How the graph was loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GraphSource {
    /// From the snapshot, plus this many logged changes after it.
    Snapshot {
        /// Changes replayed from the log.
        n_logged: u64,
        /// The graph log sequence the snapshot file covers: when `n_logged` is not zero, a
        /// newer snapshot is due.
        covered: u64,
    },
    /// Rebuilt from every edge in the store (no usable snapshot).
    Rebuilt,
}

/// The converted form of a store change.
pub fn edge_change(change: GraphChange) -> EdgeChange {
    match change {
        GraphChange::Follow(actor, subject) => EdgeChange::Follow { actor, subject },
        GraphChange::Unfollow(actor, subject) => EdgeChange::Unfollow { actor, subject },
        GraphChange::Block(actor, subject) => EdgeChange::Block { actor, subject },
        GraphChange::Unblock(actor, subject) => EdgeChange::Unblock { actor, subject },
    }
}

/// Feeds committed graph changes to the graph, then the graph and feed changes to the
/// timelines, and remembers the graph log sequence they reach.
pub struct GraphUpdater<S> {
    store: Arc<S>,
    graph: Arc<Graph>,
    timelines: Option<Arc<Timelines>>,
    applied_seq: Arc<AtomicU64>,
    buf: Vec<EdgeChange>,
}

impl<S: Store> GraphUpdater<S> {
    /// An updater of `graph`; `applied_seq` is shared with the snapshot writer.
    pub fn new(store: Arc<S>, graph: Arc<Graph>, applied_seq: Arc<AtomicU64>) -> Self {
        GraphUpdater {
            store,
            graph,
            timelines: None,
            applied_seq,
            buf: Vec::new(),
        }
    }

    /// Also keeps `timelines` up to date.
    pub fn with_timelines(mut self, timelines: Arc<Timelines>) -> Self {
        self.timelines = Some(timelines);
        self
    }
}

impl<S: Store> CommitSink for GraphUpdater<S> {
    fn apply(&mut self, committed: &Committed) {
        let changes = &committed.graph;
        self.buf.clear();
        self.buf.extend(changes.iter().copied().map(edge_change));
        self.graph.apply(&self.buf);
        // Batches commit on this thread only, so the store's newest sequence is the batch
        // whose changes were just applied.
        self.applied_seq
            .store(self.store.graph_log_seq(), Ordering::Release);
        metrics::counter!("starling_graph_changes_total").increment(changes.len() as u64);
        if let Some(timelines) = &self.timelines
            && let Err(err) = timelines.apply(&self.buf, &committed.feed)
        {
            // The heads may now miss this batch: drop them all, reads rebuild them from the
            // store, which has the batch.
            tracing::error!(error = %err, "timelines could not take a batch; rebuilding them on read");
            metrics::counter!("starling_timeline_apply_errors_total").increment(1);
            timelines.drop_heads();
        }
        if let (Some(timelines), Some(cursor)) = (&self.timelines, committed.cursor) {
            timelines.mark_applied(cursor.0);
        }
    }
}

fn snapshot_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SNAPSHOT_FILE)
}

/// A snapshot read from disk: the graph and the log sequence it covers.
pub struct LoadedSnapshot {
    graph: Graph,
    seq: u64,
}

/// Reads the snapshot file, if there is a usable one. It needs no store, so it can run while
/// the store opens; a damaged snapshot is logged and treated as absent.
pub fn read_snapshot_file(data_dir: &Path) -> Result<Option<LoadedSnapshot>, IngestError> {
    let path = snapshot_path(data_dir);
    let started = std::time::Instant::now();
    match File::open(&path) {
        Ok(file) => match read_snapshot(&mut BufReader::with_capacity(1 << 20, file)) {
            Ok((graph, seq)) => {
                info!(
                    seconds = format!("{:.2}", started.elapsed().as_secs_f64()),
                    "graph snapshot read"
                );
                Ok(Some(LoadedSnapshot { graph, seq }))
            }
            Err(err) => {
                warn!(path = %path.display(), error = %err, "graph snapshot unusable; rebuilding from the store");
                Ok(None)
            }
        },
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(IngestError::File {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// Loads the graph: the snapshot plus the log after it, or a rebuild from the store's edges.
pub fn load_graph<S: Store>(
    store: &S,
    data_dir: &Path,
) -> Result<(Graph, GraphSource), IngestError> {
    finish_load(store, read_snapshot_file(data_dir)?)
}

/// Brings a snapshot read by [`read_snapshot_file`] up to date with the store's graph log, or
/// rebuilds the graph from the store when there is no usable snapshot.
pub fn finish_load<S: Store>(
    store: &S,
    snapshot: Option<LoadedSnapshot>,
) -> Result<(Graph, GraphSource), IngestError> {
    let started = Instant::now();
    let loaded = match snapshot {
        Some(snapshot) if snapshot.seq > store.graph_log_seq() => {
            warn!(
                seq = snapshot.seq,
                "graph snapshot is newer than the store's graph log; rebuilding from the store"
            );
            None
        }
        Some(snapshot) => Some((snapshot.graph, snapshot.seq)),
        None => None,
    };
    let mut batch = Vec::new();
    let loaded = match loaded {
        Some((graph, seq)) => match store.graph_log_since(seq, &mut |change| {
            batch.push(edge_change(change));
        }) {
            Ok(_) => Some((graph, seq)),
            // Another replica pruned the log past the snapshot while this one was away.
            Err(StoreError::Pruned { after, pruned_upto }) => {
                warn!(
                    seq = after,
                    pruned_upto,
                    "graph snapshot is older than the pruned log; rebuilding from the store"
                );
                None
            }
            Err(err) => return Err(err.into()),
        },
        None => None,
    };
    let (graph, source) = match loaded {
        Some((graph, covered)) => {
            graph.apply(&batch);
            let n_logged = batch.len() as u64;
            (graph, GraphSource::Snapshot { n_logged, covered })
        }
        None => {
            let mut builder = GraphBuilder::new();
            store.for_each_edge(&mut |change| match change {
                GraphChange::Follow(actor, subject) => builder.follow(actor, subject),
                GraphChange::Block(actor, subject) => builder.block(actor, subject),
                GraphChange::Unfollow(..) | GraphChange::Unblock(..) => {}
            })?;
            (builder.build(), GraphSource::Rebuilt)
        }
    };
    info!(
        follows = graph.n_follows(),
        blocks = graph.n_blocks(),
        source = ?source,
        seconds = format!("{:.2}", started.elapsed().as_secs_f64()),
        "graph loaded"
    );
    Ok((graph, source))
}

fn read_snapshot(r: &mut impl Read) -> Result<(Graph, u64), String> {
    let mut header = [0u8; 20];
    r.read_exact(&mut header)
        .map_err(|err| format!("reading the header: {err}"))?;
    let (covered, crc) = header.split_at(16);
    let (magic, seq) = covered.split_at(8);
    if magic != SNAPSHOT_MAGIC {
        return Err("not a Starling graph snapshot (bad magic)".to_owned());
    }
    let crc = u32::from_le_bytes(crc.try_into().map_err(|_| "short header".to_owned())?);
    if crc != crc32fast::hash(covered) {
        return Err("header checksum mismatch".to_owned());
    }
    let seq = u64::from_le_bytes(seq.try_into().map_err(|_| "short header".to_owned())?);
    let graph = Graph::read_snapshot(r).map_err(|err| err.to_string())?;
    Ok((graph, seq))
}

/// Writes a snapshot covering at least log sequence `applied_seq`, then prunes the log up to it.
///
/// The file is written beside the old one and renamed over it after an fsync, so a crash leaves
/// either the old snapshot or the new one.
pub fn write_snapshot<S: Store>(
    store: &S,
    graph: &Graph,
    applied_seq: u64,
    data_dir: &Path,
) -> Result<(), IngestError> {
    let started = Instant::now();
    // The snapshot may only claim log entries that are durable.
    store.sync()?;
    let path = snapshot_path(data_dir);
    let tmp = data_dir.join(format!("{SNAPSHOT_FILE}.tmp"));
    let file_error = |source| IngestError::File {
        path: tmp.display().to_string(),
        source,
    };
    let file = File::create(&tmp).map_err(file_error)?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut header = SNAPSHOT_MAGIC.to_vec();
    header.extend_from_slice(&applied_seq.to_le_bytes());
    let crc = crc32fast::hash(&header);
    w.write_all(&header).map_err(file_error)?;
    w.write_all(&crc.to_le_bytes()).map_err(file_error)?;
    graph.write_snapshot(&mut w).map_err(file_error)?;
    let file = w.into_inner().map_err(|err| file_error(err.into_error()))?;
    file.sync_all().map_err(file_error)?;
    std::fs::rename(&tmp, &path).map_err(file_error)?;
    if let Ok(dir) = File::open(data_dir) {
        // Makes the rename durable; a failure here only risks keeping the old snapshot.
        let _ = dir.sync_all();
    }
    store.prune_graph_log(applied_seq)?;
    info!(
        seq = applied_seq,
        follows = graph.n_follows(),
        seconds = format!("{:.2}", started.elapsed().as_secs_f64()),
        "graph snapshot written"
    );
    Ok(())
}

/// Writes a graph snapshot every `interval` when the graph is newer than the snapshot file,
/// and once more when stopped. `applied_seq` is where the graph updater (or the replica
/// following the change log) says the graph is; `covered` is the sequence the snapshot file
/// covers at the start (older than the graph when the start replayed the log after it).
pub fn start_snapshots<S: Store + 'static>(
    store: Arc<S>,
    graph: Arc<Graph>,
    (applied_seq, mut covered): (Arc<AtomicU64>, u64),
    data_dir: PathBuf,
    interval: Duration,
) -> Result<Periodic, IngestError> {
    Periodic::start("graph-snapshots", interval, move || {
        let now = applied_seq.load(Ordering::Acquire);
        if now > covered {
            write_snapshot(&*store, &graph, now, &data_dir)?;
            covered = now;
        }
        Ok(())
    })
}
