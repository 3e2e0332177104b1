//! `starling serve`: load the graph, start the HTTP and gRPC APIs, ingest (`starling_ingest`:
//! live ingest for a sole writer, the replica protocol on a shared store), wait for a signal,
//! stop in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::Context;
use starling_api::AppState;
use starling_api::ops::CheckState;
use starling_graph::Graph;
use starling_ingest::graph_sync::{self, GraphSource, GraphUpdater, LoadedSnapshot};
use starling_ingest::live::LiveStatus;
use starling_ingest::replica::{Replica, Role};
use starling_ingest::search_sync::{self, SearchSync, SearchUpdater};
use starling_ingest::timeline_sync::{self, StoreFeeds};
use starling_ingest::{CommitSink, IngestError, ReplayOptions};
use starling_store::{Committed, Store};
use starling_timeline::Timelines;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use crate::cli::ServeArgs;
use crate::config::{Config, Overrides};
use crate::ops::{self, Ops};
use crate::telemetry::{ServedGauges, Telemetry};
use crate::{Backend, StoreTask, load_config, open_any};

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = load_config(&args.common, overrides(&args))?;
    // One process-wide TLS provider, chosen here so no dependency picks one implicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let telemetry = Telemetry::install(&config.data_dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The operator's endpoints answer while the store opens and the graph loads.
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let ops = runtime.block_on(ops::start(&config, telemetry, shutdown_rx.clone()))?;
    ops.readiness.set("store", CheckState::not_ready("opening"));
    ops.readiness.set("graph", CheckState::not_ready("loading"));
    // The graph snapshot and the store load side by side: neither needs the other until the
    // snapshot is brought up to date with the store's graph log.
    let snapshot_dir = config.data_dir.clone();
    let snapshot = std::thread::Builder::new()
        .name("graph-load".to_owned())
        .spawn(move || graph_sync::read_snapshot_file(&snapshot_dir))
        .context("starting the graph loader")?;
    let store = open_any(&config);
    if store.is_ok() {
        ops.readiness.set("store", CheckState::ready("open"));
    }
    let snapshot = match snapshot.join() {
        Ok(res) => res?,
        Err(_) => anyhow::bail!("the graph loader thread panicked"),
    };
    let store = store?;
    store.run(Serve {
        snapshot,
        demo: args.demo,
        config,
        runtime,
        ops,
        shutdown: (shutdown_tx, shutdown_rx),
    })
}

fn overrides(args: &ServeArgs) -> Overrides {
    Overrides {
        http_addr: args.http_addr.clone(),
        http_token: args.http_token.clone(),
        admin_token: args.admin_token.clone(),
        labelers: args.labelers.clone(),
        http_expensive_queries_max: args.http_expensive_queries_max,
        grpc_addr: args.grpc_addr.clone(),
        grpc_tls_cert: args.grpc_tls_cert.clone(),
        grpc_tls_key: args.grpc_tls_key.clone(),
        plc_url: args.plc_url.clone(),
        bsync_url: args.bsync_url.clone(),
        bsync_api_key: args.bsync_api_key.clone(),
        jetstream: args.jetstream.clone(),
        wanted_collections: args.wanted_collections.clone(),
        zstd_dictionary: args.zstd_dictionary.clone(),
        batch_events_max: args.batch_events_max,
        relay: args.relay.clone(),
        backfill: args.backfill.clone(),
        trusted_verifiers: args.trusted_verifiers.clone(),
        ..Overrides::default()
    }
}

/// Serving on the opened store, until a signal or an ingest failure.
struct Serve {
    snapshot: Option<LoadedSnapshot>,
    demo: bool,
    config: Config,
    runtime: tokio::runtime::Runtime,
    /// The operator's listener, already answering.
    ops: Ops,
    /// Stops every listener and ingest when it turns true.
    shutdown: (watch::Sender<bool>, watch::Receiver<bool>),
}

/// What the APIs and ingest share.
struct Served<S> {
    store: Arc<S>,
    graph: Arc<Graph>,
    timelines: Arc<Timelines>,
    /// The graph log sequence the graph reflects (see `GraphUpdater`).
    applied_seq: Arc<AtomicU64>,
    /// The search index and its commits.
    search: Arc<SearchSync>,
}

impl StoreTask for Serve {
    type Output = ();

    fn run<S: Backend>(self, store: S) -> anyhow::Result<()> {
        let Serve {
            snapshot,
            demo,
            config,
            runtime,
            ops,
            shutdown,
        } = self;
        let store = Arc::new(store);
        if demo {
            ops.readiness
                .set("graph", CheckState::not_ready("replaying the demo sample"));
            replay_demo(&*store, &config)?;
        }
        let (graph, applied_seq, covered) = load_graph(&*store, snapshot, &config)?;
        ops.readiness.set("graph", CheckState::ready("loaded"));
        let (search, search_source) = search_sync::open(&*store, &config.data_dir)?;
        info!(source = ?search_source, "search index loaded");
        let search_commits = search_sync::start_commits(search.clone())?;
        log_config(&config);
        let snapshots = graph_sync::start_snapshots(
            store.clone(),
            graph.clone(),
            (applied_seq.clone(), covered),
            config.data_dir.clone(),
            config.graph_snapshot_interval,
        )?;
        let timelines = Arc::new(Timelines::new(
            config.timeline,
            graph.clone(),
            Arc::new(StoreFeeds(store.clone())),
        ));
        let refresh =
            timeline_sync::start_refresh(timelines.clone(), config.timeline_refresh_interval)
                .context("loading the timeline caches")?;
        let served = Served {
            store: store.clone(),
            graph,
            timelines,
            applied_seq,
            search: search.clone(),
        };
        let data_dir = config.data_dir.clone();
        let res = runtime.block_on(serve_async(served, config, ops, shutdown));
        // The final snapshot runs after ingest has stopped, so it covers everything applied.
        let snapshot_res = snapshots.stop().map_err(anyhow::Error::from);
        let refresh_res = refresh.stop().map_err(anyhow::Error::from);
        let search_res = search_commits.stop().map_err(anyhow::Error::from);
        let flush_res = store.finish();
        let res = res
            .and(snapshot_res)
            .and(refresh_res)
            .and(search_res)
            .and(flush_res);
        // A store without a live cursor can tell its index current only by this mark.
        res.and_then(|()| Ok(search.mark_current(&*store, &data_dir)?))
    }
}

/// `--demo`: replays a generated sample network first, so there is something to see.
fn replay_demo<S: Store>(store: &S, config: &Config) -> anyhow::Result<()> {
    // The search index does not follow a replay: it is rebuilt from the store next.
    search_sync::invalidate(&config.data_dir)?;
    let path = config.data_dir.join("demo-sample.jsonl");
    let lines = starling_core::sample::events(&starling_core::sample::SampleParams {
        n_actors: 500,
        seed: 7,
    });
    std::fs::write(&path, lines.join("\n") + "\n")
        .with_context(|| format!("writing `{}`", path.display()))?;
    let options = ReplayOptions {
        limits: config.limits,
        from_start: false,
    };
    crate::replay::replay_one(store, &path, &options)
}

/// The graph, up to date with the store, the graph log sequence it reflects, and the one the
/// snapshot file covers.
fn load_graph<S: Store>(
    store: &S,
    snapshot: Option<LoadedSnapshot>,
    config: &Config,
) -> anyhow::Result<(Arc<Graph>, Arc<AtomicU64>, u64)> {
    let (graph, source) = graph_sync::finish_load(store, snapshot)?;
    let applied_seq = store.graph_log_seq();
    let covered = match source {
        GraphSource::Snapshot { covered, .. } => covered,
        GraphSource::Rebuilt if graph.n_follows() + graph.n_blocks() > 0 => {
            // The next start then loads the snapshot instead of scanning every edge.
            graph_sync::write_snapshot(store, &graph, applied_seq, &config.data_dir)?;
            applied_seq
        }
        GraphSource::Rebuilt => applied_seq,
    };
    Ok((
        Arc::new(graph),
        Arc::new(AtomicU64::new(applied_seq)),
        covered,
    ))
}

fn log_config(config: &Config) {
    info!(
        data_dir = %config.data_dir.display(),
        http_addr = %config.http_addr,
        http_token_required = config.http_guard.token_required,
        http_token_set = config.http_guard.token.is_some(),
        grpc_addr = ?config.grpc_addr,
        bsync = ?config.bsync.as_ref().map(|bsync| &bsync.url),
        labelers = ?config.labelers,
        admin_token_set = config.http_guard.admin_token.is_some(),
        jetstream = ?config.live.urls,
        relay = ?config.relay_url,
        backfill = ?config.backfill_relay,
        wanted_collections = ?config.live.wanted_collections,
        zstd_dictionary = ?config.zstd_dictionary_path,
        batch_events_max = config.limits.events_max,
        "starting"
    );
}

async fn serve_async<S: Backend>(
    served: Served<S>,
    config: Config,
    ops: Ops,
    (shutdown_tx, shutdown_rx): (watch::Sender<bool>, watch::Receiver<bool>),
) -> anyhow::Result<()> {
    let ready = Arc::new(AtomicBool::new(false));
    let render = ops.telemetry.clone();
    let state = AppState {
        store: served.store.clone(),
        graph: served.graph.clone(),
        timelines: served.timelines.clone(),
        metrics: Arc::new(move || render.render()),
        ready: ready.clone(),
    };
    let ingest_status = Arc::new(LiveStatus::default());
    let shared = S::shared(&served.store).is_some();
    ops::probe_ingest(&ops.readiness, ingest_status.clone(), shared, ready.clone());
    let store = served.store.clone();
    ops.telemetry.serve(ServedGauges {
        graph: served.graph.clone(),
        timelines: served.timelines.clone(),
        ingest: ingest_status.clone(),
        shared,
        store_caches: Box::new(move || store.caches()),
    });
    ops.api.install(starling_api::router_guarded(
        state.clone(),
        config.http_guard.clone(),
    ));
    let signal = shutdown_signal();
    // Tests and scripts wait for this line rather than sleeping: the whole API answers now.
    println!("starling: http listening on {}", ops.addr);
    let resolver = starling_identity::Resolver::new(config.identity.clone())
        .context("configuring DID resolution")?;
    let search_index = served.search.index().clone();
    let grpc = start_grpc(&state, search_index, &config, &resolver, &ops, &shutdown_rx).await?;
    let bsync = start_bsync(&served, &config, &shutdown_rx);
    let labels = start_labelers(&served, &config, &resolver, &shutdown_rx);
    let mut ingest = start_ingest(served, config, resolver, ingest_status, shutdown_rx);
    ready.store(true, Ordering::Relaxed);
    // Ingest ending on its own means the store failed or a bug: stop serving, exit non-zero.
    let ingest_result = tokio::select! {
        _ = signal => {
            let _ = shutdown_tx.send(true);
            (&mut ingest).await
        }
        res = &mut ingest => res,
    };
    info!("shutting down");
    ready.store(false, Ordering::Relaxed);
    let _ = shutdown_tx.send(true);
    ops.http
        .await
        .context("http task")?
        .context("http server")?;
    if let Some(grpc) = grpc {
        grpc.await.context("grpc task")?.context("grpc server")?;
    }
    if let Some(bsync) = bsync {
        bsync.await.context("bsync task")?;
    }
    if let Some(labels) = labels {
        labels.await.context("labels task")?;
    }
    ingest_result
        .context("ingest task")?
        .context("ingest stopped")?;
    info!("stopped");
    Ok(())
}

/// Resolves once `shutdown` turns true (or its sender is gone).
async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

async fn start_grpc<S: Store + 'static>(
    state: &AppState<S>,
    search: Arc<starling_search::SearchIndex>,
    config: &Config,
    resolver: &starling_identity::Resolver,
    ops: &Ops,
    shutdown: &watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<std::io::Result<()>>>> {
    let Some(addr) = config.grpc_addr else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the gRPC API to {addr}"))?;
    let service = starling_api::grpc::DataplaneService::new(state.clone())
        .with_identity(resolver.clone())
        .with_in_flight_max(config.grpc_in_flight_max)
        .with_search(search)
        .with_trusted_verifiers(config.trusted_verifiers.clone());
    ops::mirror_grpc_health(ops.readiness.clone(), service.health(), shutdown.clone());
    let (router, wire) = match &config.grpc_tls {
        Some(tls) => (
            starling_api::grpc::grpc_tls_router(service, tls).map_err(anyhow::Error::msg)?,
            "TLS",
        ),
        None => (starling_api::grpc::grpc_router(service), "h2c"),
    };
    info!(wire, "serving bsky.Service over gRPC");
    println!("starling: grpc listening on {}", listener.local_addr()?);
    ops.readiness.set("grpc", CheckState::ready("serving"));
    Ok(Some(tokio::spawn(starling_api::grpc::serve_grpc_limited(
        listener,
        router,
        config.listeners,
        stopped(shutdown.clone()),
    ))))
}

/// Starts the bsync consumer, if configured. A store error there exits the process at once,
/// as one in ingest does: the store refuses writes after a failed one, and recovery runs at the
/// next start.
fn start_bsync<S: Backend>(
    served: &Served<S>,
    config: &Config,
    shutdown: &watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    let options = config.bsync.clone()?;
    let consumer = starling_ingest::run_bsync(served.store.clone(), options, shutdown.clone());
    Some(tokio::spawn(async move {
        if let Err(err) = consumer.await {
            tracing::error!(error = %err, "bsync consumer failed: exiting");
            eprintln!("starling: error: {err}");
            std::process::exit(1);
        }
    }))
}

/// Starts the labelers' consumers, if any. A store error there exits the process at once, as
/// one in bsync does.
fn start_labelers<S: Backend>(
    served: &Served<S>,
    config: &Config,
    resolver: &starling_identity::Resolver,
    shutdown: &watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    if config.labelers.is_empty() {
        return None;
    }
    let consumer = starling_ingest::run_labelers(
        served.store.clone(),
        config.labelers.clone(),
        resolver.clone(),
        shutdown.clone(),
    );
    Some(tokio::spawn(async move {
        if let Err(err) = consumer.await {
            tracing::error!(error = %err, "label consumer failed: exiting");
            eprintln!("starling: error: {err}");
            std::process::exit(1);
        }
    }))
}

/// Starts ingest: always on a sole store, only while holding the writer lease on a shared one.
fn start_ingest<S: Backend>(
    served: Served<S>,
    config: Config,
    resolver: starling_identity::Resolver,
    status: Arc<LiveStatus>,
    shutdown: watch::Receiver<bool>,
) -> JoinHandle<Result<(), IngestError>> {
    let Served {
        store,
        graph,
        timelines,
        applied_seq,
        search,
    } = served;
    let role = match S::shared(&store) {
        Some(shared) => Role::Replica(Replica::new(
            shared,
            graph.clone(),
            timelines.clone(),
            applied_seq.clone(),
        )),
        None => Role::Sole,
    };
    let mut live = config.live;
    if let Some(url) = config.relay_url {
        live.relay = Some(starling_ingest::RelayOptions::new(url, resolver.clone()));
    }
    if let Some(url) = config.backfill_relay {
        let source = starling_ingest::BackfillSource::Relay(url);
        let mut backfill = starling_ingest::BackfillOptions::new(source, resolver.clone());
        backfill.limits = config.limits;
        live.backfill = Some(backfill);
    }
    let feeder = Box::new(CommitFeeder {
        updater: GraphUpdater::new(store.clone(), graph, applied_seq).with_timelines(timelines),
        store: store.clone(),
        resolver,
        search: SearchUpdater::new(store.clone(), search),
    });
    let ingest = role.run_ingest(store, live, feeder, status, shutdown);
    tokio::spawn(async move {
        let res = ingest.await;
        if let Err(err) = &res
            && err.is_lease_lost()
        {
            // Writing on without the lease could race the next writer: exit now, without the
            // graceful shutdown, and let the supervisor restart this replica as a follower.
            tracing::error!(error = %err, "lost the writer lease: exiting");
            eprintln!("starling: error: {err}");
            std::process::exit(1);
        }
        if let Err(err) = &res
            && err.is_store_failure()
        {
            // A failed engine write (a full disk, an I/O error) poisons the store, and the
            // graceful shutdown's flush would wait forever on the engine's dead background
            // work: exit now; the next start recovers from the journal.
            tracing::error!(error = %err, "the store failed: exiting");
            eprintln!("starling: error: ingest stopped: {err}");
            std::process::exit(1);
        }
        res
    })
}

/// Resolves at SIGTERM or SIGINT. The handlers are installed when this is called, not when it
/// is first polled: a signal that comes right after the "listening" lines then stops `serve`
/// gracefully instead of killing it by the signal's default action.
fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// What `serve` does with each committed batch: graph and timelines, then drops the cached
/// DID documents of actors whose identity changed.
struct CommitFeeder<S: Store> {
    updater: GraphUpdater<S>,
    store: Arc<S>,
    resolver: starling_identity::Resolver,
    search: SearchUpdater<S>,
}

impl<S: Store> CommitSink for CommitFeeder<S> {
    fn apply(&mut self, committed: &Committed) {
        self.updater.apply(committed);
        for &actor in &committed.identities {
            if let Some(did) = self.store.did(actor) {
                self.resolver.invalidate(&did);
            }
        }
        self.search.apply(committed);
    }
}
