//! Replicas of a shared store: which one writes, and how the others keep up.
//!
//! Several `serve` processes may share one store ([`SharedStore`]: the Cassandra backend).
//! One of them at a time, the holder of the writer lease, ingests. The lease lasts
//! [`LEASE_TTL`] without renewal and its holder renews it every [`LEASE_RENEW`]; a holder that
//! finds another replica holding it, or that cannot renew it before it would expire, must stop
//! writing at once: ingest ends with [`IngestError::LeaseLost`], the binary exits, and its supervisor restarts it as a follower.
//!
//! The other replicas read the change log every [`FOLLOW_INTERVAL`] into their graph and
//! timelines, and try to take the lease every [`LEASE_RENEW`]. The one that takes it runs
//! [`SharedStore::recover`] (the batch the previous writer may have left half applied, then
//! the in-memory tables) and reads the rest of the change log before it ingests. A replica
//! with no Jetstream URL never takes the lease: it only follows. A writer that stops cleanly
//! releases the lease, so the next one need not wait for the TTL.
//!
//! A store only one process uses (the embedded store) has no lease: its process is always
//! the writer ([`Role::Sole`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use starling_graph::Graph;
use starling_store::{SharedStore, Store, StoreError};
use starling_timeline::Timelines;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::IngestError;
use crate::applier::CommitSink;
use crate::graph_sync::edge_change;
use crate::live::{IngestMode, LiveOptions, LiveStatus, run_live};

/// How long the writer lease lasts without renewal: a dead writer's replacement starts within
/// about this long.
pub const LEASE_TTL: Duration = Duration::from_secs(10);
/// How often the writer renews its lease, and how often the others try to take it.
pub const LEASE_RENEW: Duration = Duration::from_secs(2);
/// How often a replica that does not write reads the change log.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(500);

/// Why a writer lost its lease.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseLoss {
    /// Another replica holds it.
    #[error("another replica holds the writer lease")]
    Taken,
    /// Renewals failed until the lease would expire.
    #[error("the writer lease could not be renewed: {0}")]
    NotRenewed(StoreError),
    /// The renewing task could not run.
    #[error("the lease task: {0}")]
    Task(String),
}

/// Whether this process always writes its store, or only while it holds the writer lease.
pub enum Role {
    /// The only process using its store (the embedded store): always the writer.
    Sole,
    /// One of the replicas sharing a store: the writer only while it holds the lease.
    Replica(Replica),
}

impl Role {
    /// Runs `serve`'s ingest until `shutdown` turns true: live ingest for a sole writer, the
    /// replica protocol ([`Replica`]) for a replica, and only a wait when there is nothing to
    /// ingest. `sink` takes each batch this process commits; `status` shows what ingest is
    /// doing (its mode, the Jetstream connection) to health checks and metrics.
    pub async fn run_ingest<S: Store + 'static>(
        self,
        store: Arc<S>,
        options: LiveOptions,
        sink: Box<dyn CommitSink + Send>,
        status: Arc<LiveStatus>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), IngestError> {
        let res = match self {
            Role::Replica(replica) => {
                replica
                    .run(store, options, sink, status.clone(), shutdown)
                    .await
            }
            Role::Sole if !options.has_source() => {
                info!("no --jetstream URL: serving stored data only");
                status.set_mode(IngestMode::Off);
                let _ = shutdown.wait_for(|stop| *stop).await;
                Ok(())
            }
            Role::Sole => {
                status.set_mode(IngestMode::Writing);
                run_live(store, options, sink, status.clone(), shutdown).await
            }
        };
        status.set_mode(IngestMode::Stopped);
        res
    }
}

/// One replica of a shared store: follows its change log until it takes the writer lease,
/// then ingests while it keeps the lease. Its store calls block, so each runs on a blocking
/// thread.
#[derive(Clone)]
pub struct Replica {
    store: Arc<dyn SharedStore>,
    graph: Arc<Graph>,
    timelines: Arc<Timelines>,
    /// The change log sequence the graph and timelines reflect. Shared with the graph updater,
    /// which moves it once this replica writes, and with the snapshot writer, which records it.
    applied_seq: Arc<AtomicU64>,
    /// This process's name in the lease: unique per process start.
    owner: String,
}

impl Replica {
    /// A replica of `store` keeping `graph` and `timelines` current from `applied_seq` on.
    pub fn new(
        store: Arc<dyn SharedStore>,
        graph: Arc<Graph>,
        timelines: Arc<Timelines>,
        applied_seq: Arc<AtomicU64>,
    ) -> Replica {
        Replica {
            store,
            graph,
            timelines,
            applied_seq,
            owner: lease_owner(),
        }
    }

    /// This replica's name in the writer lease.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Follows the change log until this replica takes the lease, then ingests while it keeps
    /// it; with no Jetstream URL it only follows. Returns when `shutdown` turns true, or with
    /// [`IngestError::LeaseLost`] when it lost the lease.
    pub async fn run<S: Store + 'static>(
        self,
        store: Arc<S>,
        options: LiveOptions,
        sink: Box<dyn CommitSink + Send>,
        status: Arc<LiveStatus>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<(), IngestError> {
        status.set_mode(IngestMode::Following);
        if !options.has_source() {
            info!("no --jetstream URL: following the change log only");
            return self.follow(shutdown).await;
        }
        if !self.await_lease(shutdown.clone()).await? {
            return Ok(());
        }
        status.set_mode(IngestMode::Writing);
        let ingest = run_live(store, options, sink, status, shutdown);
        tokio::select! {
            res = ingest => {
                // A clean stop hands the lease over at once instead of after its TTL.
                self.release_lease().await;
                res
            }
            // Dropping `ingest` stops reading Jetstream; the caller must exit at once.
            loss = self.keep_lease() => Err(IngestError::LeaseLost(loss)),
        }
    }

    /// Follows the change log until `shutdown` turns true, never taking the lease.
    pub async fn follow(&self, mut shutdown: watch::Receiver<bool>) -> Result<(), IngestError> {
        loop {
            self.on_blocking_thread("the change log task", |me| me.apply_changes())
                .await?;
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_INTERVAL) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
            }
        }
    }

    /// Follows the change log until this replica takes the writer lease (then the store is
    /// recovered and the log read to its end); `false` if shutdown came first.
    pub async fn await_lease(
        &self,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<bool, IngestError> {
        let mut last_try: Option<Instant> = None;
        loop {
            if *shutdown.borrow() {
                return Ok(false);
            }
            let now = Instant::now();
            let try_lease = last_try.is_none_or(|at| now.duration_since(at) >= LEASE_RENEW);
            if try_lease {
                last_try = Some(now);
            }
            let took = self
                .on_blocking_thread("the change log task", move |me| {
                    me.take_lease_or_follow(try_lease)
                })
                .await?;
            if took {
                info!(owner = %self.owner, "holding the writer lease: ingesting");
                return Ok(true);
            }
            tokio::select! {
                _ = tokio::time::sleep(FOLLOW_INTERVAL) => {}
                _ = shutdown.wait_for(|stop| *stop) => return Ok(false),
            }
        }
    }

    /// Renews the writer lease until it cannot, and returns why. A failed renewal is retried
    /// while the lease would still outlive two more attempts.
    pub async fn keep_lease(&self) -> LeaseLoss {
        let mut last_held = Instant::now();
        loop {
            tokio::time::sleep(LEASE_RENEW).await;
            let res = self
                .on_blocking_thread("the lease task", |me| {
                    Ok(me.store.try_lease(&me.owner, LEASE_TTL))
                })
                .await;
            match res {
                Ok(Ok(true)) => last_held = Instant::now(),
                Ok(Ok(false)) => return LeaseLoss::Taken,
                Ok(Err(err)) if last_held.elapsed() < LEASE_TTL - 2 * LEASE_RENEW => {
                    warn!(error = %err, "renewing the writer lease; retrying");
                }
                Ok(Err(err)) => return LeaseLoss::NotRenewed(err),
                Err(err) => return LeaseLoss::Task(err.to_string()),
            }
        }
    }

    /// Gives the lease up; a failure only means the next writer waits for the TTL.
    async fn release_lease(&self) {
        let res = self
            .on_blocking_thread("the lease task", |me| Ok(me.store.release_lease(&me.owner)))
            .await;
        if let Ok(Err(err)) = res {
            warn!(error = %err, "releasing the writer lease");
        }
    }

    /// One step of waiting for the lease: tries to take it when `try_lease`, recovers the
    /// store when it did, then reads the change log. Whether it took the lease. Blocks.
    fn take_lease_or_follow(&self, try_lease: bool) -> Result<bool, IngestError> {
        let took = try_lease && self.store.try_lease(&self.owner, LEASE_TTL)?;
        if took {
            self.store.recover().map_err(IngestError::TakeOver)?;
        }
        self.apply_changes()?;
        Ok(took)
    }

    /// Applies the change log after the applied sequence to the graph and timelines. Blocks.
    fn apply_changes(&self) -> Result<(), IngestError> {
        let after = self.applied_seq.load(Ordering::Acquire);
        let mut edges = Vec::new();
        let last = self
            .store
            .changes_since(after, &mut |_, committed| {
                edges.clear();
                edges.extend(committed.graph.iter().copied().map(edge_change));
                self.graph.apply(&edges);
                if let Err(err) = self.timelines.apply(&edges, &committed.feed) {
                    error!(error = %err, "timelines could not take a logged batch; rebuilding them on read");
                    self.timelines.drop_heads();
                }
                if let Some(cursor) = committed.cursor {
                    self.timelines.mark_applied(cursor.0);
                }
            })
            .map_err(IngestError::ChangeLog)?;
        self.applied_seq.store(last, Ordering::Release);
        Ok(())
    }

    /// Runs `work` on a blocking thread with a clone of this replica.
    async fn on_blocking_thread<T: Send + 'static>(
        &self,
        what: &'static str,
        work: impl FnOnce(&Replica) -> Result<T, IngestError> + Send + 'static,
    ) -> Result<T, IngestError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || work(&me))
            .await
            .map_err(|err| IngestError::Task {
                what,
                reason: err.to_string(),
            })?
    }
}

/// This process's name in the writer lease: unique per process start.
fn lease_owner() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("starling-{}-{nanos}", std::process::id())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use starling_core::ActorId;
    use starling_core::feed::{FeedItem, FeedKey};
    use starling_store::{Committed, EmbeddedStore, GraphChange};
    use starling_timeline::{FeedSource, SourceError, TimelineConfig};

    use super::*;

    /// A shared store in memory: one lease row, a change log, and every call in order.
    #[derive(Default)]
    struct FakeShared {
        state: Mutex<FakeState>,
    }

    #[derive(Default)]
    struct FakeState {
        holder: Option<String>,
        log: Vec<(u64, Committed)>,
        calls: Vec<&'static str>,
        /// Every lease request fails as an unreachable cluster would.
        unreachable: bool,
    }

    impl FakeShared {
        fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
            self.state.lock().unwrap()
        }

        fn n_calls(&self, name: &str) -> usize {
            self.state()
                .calls
                .iter()
                .filter(|call| **call == name)
                .count()
        }
    }

    impl SharedStore for FakeShared {
        fn try_lease(&self, owner: &str, ttl: Duration) -> Result<bool, StoreError> {
            assert_eq!(ttl, LEASE_TTL);
            let mut state = self.state();
            state.calls.push("try_lease");
            if state.unreachable {
                return Err(StoreError::Unavailable {
                    what: "the test cluster is down".to_owned(),
                });
            }
            match &state.holder {
                Some(holder) if holder != owner => Ok(false),
                _ => {
                    state.holder = Some(owner.to_owned());
                    Ok(true)
                }
            }
        }

        fn release_lease(&self, owner: &str) -> Result<(), StoreError> {
            let mut state = self.state();
            state.calls.push("release_lease");
            if state.holder.as_deref() == Some(owner) {
                state.holder = None;
            }
            Ok(())
        }

        fn recover(&self) -> Result<(), StoreError> {
            self.state().calls.push("recover");
            Ok(())
        }

        fn changes_since(
            &self,
            after: u64,
            visit: &mut dyn FnMut(u64, &Committed),
        ) -> Result<u64, StoreError> {
            let mut state = self.state();
            state.calls.push("changes_since");
            let mut last = after;
            for (seq, committed) in state.log.iter().filter(|(seq, _)| *seq > after) {
                visit(*seq, committed);
                last = *seq;
            }
            Ok(last)
        }
    }

    /// Author feeds with nothing in them: these tests need timelines only as a sink.
    struct NoFeeds;

    impl FeedSource for NoFeeds {
        fn author_feed(
            &self,
            _: ActorId,
            _: Option<FeedKey>,
            _: &mut dyn FnMut(FeedItem) -> bool,
        ) -> Result<(), SourceError> {
            Ok(())
        }
    }

    struct Fixture {
        shared: Arc<FakeShared>,
        graph: Arc<Graph>,
        applied_seq: Arc<AtomicU64>,
        replica: Replica,
    }

    fn fixture() -> Fixture {
        let shared = Arc::new(FakeShared::default());
        let graph = Arc::new(Graph::new());
        let timelines = Arc::new(Timelines::new(
            TimelineConfig::default(),
            graph.clone(),
            Arc::new(NoFeeds),
        ));
        let applied_seq = Arc::new(AtomicU64::new(0));
        let replica = Replica::new(
            shared.clone(),
            graph.clone(),
            timelines,
            applied_seq.clone(),
        );
        Fixture {
            shared,
            graph,
            applied_seq,
            replica,
        }
    }

    fn follow(seq: u64, actor: u32, subject: u32) -> (u64, Committed) {
        let committed = Committed {
            graph: vec![GraphChange::Follow(ActorId(actor), ActorId(subject))],
            ..Committed::default()
        };
        (seq, committed)
    }

    // Checks taking a free lease: the replica takes it on its first try, recovers the store
    // before anything else, then reads the whole change log into its graph before it says it
    // holds the lease.
    #[tokio::test(start_paused = true)]
    async fn a_free_lease_is_taken_and_the_store_recovered_before_ingest() {
        let fx = fixture();
        fx.shared.state().log.push(follow(3, 1, 2));
        let (_stop, shutdown) = watch::channel(false);
        assert!(fx.replica.await_lease(shutdown).await.unwrap());
        assert_eq!(
            fx.shared.state().calls,
            ["try_lease", "recover", "changes_since"]
        );
        assert_eq!(
            fx.shared.state().holder.as_deref(),
            Some(fx.replica.owner())
        );
        assert!(fx.graph.does_follow(ActorId(1), ActorId(2)));
        assert_eq!(fx.applied_seq.load(Ordering::Acquire), 3);
    }

    // Checks following while another replica writes: the change log is read every
    // FOLLOW_INTERVAL and the lease tried every LEASE_RENEW (counted over 4 s of paused time);
    // a logged follow reaches the graph; the replica recovers the store only once the other
    // replica has released the lease and it has taken it.
    #[tokio::test(start_paused = true)]
    async fn a_follower_keeps_up_with_the_log_and_takes_over_a_released_lease() {
        let fx = fixture();
        fx.shared.state().holder = Some("other".to_owned());
        let (_stop, shutdown) = watch::channel(false);
        let replica = fx.replica.clone();
        let waiting = tokio::spawn(async move { replica.await_lease(shutdown).await });
        tokio::time::sleep(Duration::from_millis(4_250)).await;
        // Tries at 0, 2 and 4 s; reads at every 0.5 s from 0 to 4 s.
        assert_eq!(fx.shared.n_calls("try_lease"), 3);
        assert_eq!(fx.shared.n_calls("changes_since"), 9);
        fx.shared.state().log.push(follow(1, 5, 6));
        tokio::time::sleep(FOLLOW_INTERVAL).await;
        assert!(fx.graph.does_follow(ActorId(5), ActorId(6)));
        assert_eq!(fx.applied_seq.load(Ordering::Acquire), 1);
        assert_eq!(fx.shared.n_calls("recover"), 0);
        assert!(!waiting.is_finished());

        fx.shared.state().holder = None;
        assert!(waiting.await.unwrap().unwrap());
        assert_eq!(fx.shared.n_calls("recover"), 1);
        assert_eq!(
            fx.shared.state().holder.as_deref(),
            Some(fx.replica.owner())
        );
    }

    // Checks that shutdown ends the wait for the lease with `false`, never taking it.
    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wait_for_the_lease() {
        let fx = fixture();
        fx.shared.state().holder = Some("other".to_owned());
        let (stop, shutdown) = watch::channel(false);
        let replica = fx.replica.clone();
        let waiting = tokio::spawn(async move { replica.await_lease(shutdown).await });
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.send(true).unwrap();
        assert!(!waiting.await.unwrap().unwrap());
        assert_eq!(fx.shared.state().holder.as_deref(), Some("other"));
        assert_eq!(fx.shared.n_calls("recover"), 0);
    }

    // Checks that the writer notices another holder at its next renewal: renewals at 2 and
    // 4 s succeed, the lease changes hands at 5 s, and the renewal at 6 s returns `Taken`.
    #[tokio::test(start_paused = true)]
    async fn the_writer_gives_up_at_the_renewal_after_another_replica_took_the_lease() {
        let fx = fixture();
        fx.shared.state().holder = Some(fx.replica.owner().to_owned());
        let started = Instant::now();
        let replica = fx.replica.clone();
        let keeping = tokio::spawn(async move { replica.keep_lease().await });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(fx.shared.n_calls("try_lease"), 2);
        assert!(!keeping.is_finished());
        fx.shared.state().holder = Some("other".to_owned());
        let loss = keeping.await.unwrap();
        assert!(matches!(loss, LeaseLoss::Taken), "{loss}");
        assert_eq!(started.elapsed(), 3 * LEASE_RENEW);
    }

    // Checks the retry window of renewals: with the cluster unreachable, failed renewals at 2
    // and 4 s are retried, and the one at 6 s (two renewal periods before the 10 s TTL) gives
    // up, so the writer stops while its lease still holds.
    #[tokio::test(start_paused = true)]
    async fn failed_renewals_are_retried_until_two_periods_before_the_lease_expires() {
        let fx = fixture();
        fx.shared.state().unreachable = true;
        let started = Instant::now();
        let loss = fx.replica.keep_lease().await;
        assert!(matches!(loss, LeaseLoss::NotRenewed(_)), "{loss}");
        assert_eq!(fx.shared.n_calls("try_lease"), 3);
        assert_eq!(started.elapsed(), LEASE_TTL - 2 * LEASE_RENEW);
        let err = IngestError::LeaseLost(loss);
        assert!(err.is_lease_lost());
        assert!(
            err.to_string()
                .starts_with("lost the writer lease: the writer lease could not be renewed: "),
            "{err}"
        );
    }

    fn embedded_store() -> (tempfile::TempDir, Arc<EmbeddedStore>) {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        (dir, Arc::new(store))
    }

    // Checks that a replica with no Jetstream URL only follows: over 5 s it reads the change
    // log many times and never asks for the lease, although the lease is free; shutdown ends
    // it cleanly.
    #[tokio::test(start_paused = true)]
    async fn a_replica_without_jetstream_never_takes_the_lease() {
        let fx = fixture();
        fx.shared.state().log.push(follow(2, 7, 8));
        let (_dir, store) = embedded_store();
        let (stop, shutdown) = watch::channel(false);
        let sink: Box<dyn CommitSink + Send> = Box::new(|_: &Committed| {});
        let status = Arc::new(LiveStatus::default());
        let running = tokio::spawn(fx.replica.clone().run(
            store,
            LiveOptions::default(),
            sink,
            status.clone(),
            shutdown,
        ));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(status.mode(), IngestMode::Following);
        assert!(fx.shared.n_calls("changes_since") >= 10);
        assert_eq!(fx.shared.n_calls("try_lease"), 0);
        assert!(fx.graph.does_follow(ActorId(7), ActorId(8)));
        stop.send(true).unwrap();
        running.await.unwrap().unwrap();
        assert_eq!(fx.shared.state().holder, None);
    }

    // Checks the writer's clean stop: a replica with a Jetstream URL (one that refuses
    // connections) takes the free lease and ingests; on shutdown it releases the lease, so
    // the next writer need not wait for the TTL.
    #[tokio::test]
    async fn a_writer_that_stops_cleanly_releases_the_lease() {
        let fx = fixture();
        let (_dir, store) = embedded_store();
        let (stop, shutdown) = watch::channel(false);
        let options = LiveOptions {
            urls: vec!["ws://127.0.0.1:1/subscribe".to_owned()],
            ..LiveOptions::default()
        };
        let sink: Box<dyn CommitSink + Send> = Box::new(|_: &Committed| {});
        let status = Arc::new(LiveStatus::default());
        let running =
            tokio::spawn(
                fx.replica
                    .clone()
                    .run(store, options, sink, status.clone(), shutdown),
            );
        let deadline = Instant::now() + Duration::from_secs(10);
        while status.mode() != IngestMode::Writing {
            assert!(Instant::now() < deadline, "the lease was never taken");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            fx.shared.state().holder.as_deref(),
            Some(fx.replica.owner())
        );
        stop.send(true).unwrap();
        running.await.unwrap().unwrap();
        assert_eq!(fx.shared.state().holder, None);
        assert_eq!(fx.shared.n_calls("release_lease"), 1);
    }
}
