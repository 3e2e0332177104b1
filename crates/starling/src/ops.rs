//! `serve`'s operator side: the HTTP listener bound before anything else starts, the readiness
//! checks as start-up moves on, and the gRPC health status that mirrors them.
//!
//! The listener answers `/livez`, `/readyz` and `/metrics` from the first second (the store
//! and graph take 6 to 22 s to load at full scale); the full HTTP API is installed into it
//! once the store, graph and timelines are up (`starling_api::ops::ApiSlot`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use starling_api::grpc::GrpcHealth;
use starling_api::ops::{ApiSlot, CheckState, Readiness};
use starling_ingest::live::{IngestMode, LiveStatus};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::telemetry::Telemetry;

/// The readiness checks of `serve`, in the order `/readyz` lists them.
pub const CHECKS: [&str; 6] = ["store", "graph", "grpc", "ingest", "lease", "serving"];

/// How often the gRPC health status is brought in line with the readiness checks.
const GRPC_HEALTH_INTERVAL: Duration = Duration::from_millis(500);

/// The operator's listener and what it reports.
pub struct Ops {
    pub readiness: Arc<Readiness>,
    /// Where the full HTTP API goes once it can answer.
    pub api: ApiSlot,
    pub telemetry: Arc<Telemetry>,
    /// The HTTP server task.
    pub http: JoinHandle<std::io::Result<()>>,
    /// The address the HTTP listener is bound to.
    pub addr: SocketAddr,
}

/// Binds the HTTP address and starts answering the operator's endpoints, until `shutdown`.
pub async fn start(
    config: &Config,
    telemetry: Arc<Telemetry>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Ops> {
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding the HTTP API to {}", config.http_addr))?;
    let addr = listener.local_addr()?;
    let readiness = Readiness::new(&CHECKS);
    if config.grpc_addr.is_none() {
        readiness.set("grpc", CheckState::ready("off: no --grpc-addr"));
    }
    let api = ApiSlot::new();
    let render = telemetry.clone();
    let router = starling_api::ops::ops_router(
        readiness.clone(),
        Arc::new(move || render.render()),
        api.clone(),
    );
    // Scripts and tests wait for this line to probe a starting process.
    println!("starling: ops listening on {addr}");
    let http = tokio::spawn(starling_api::serve(
        listener,
        router,
        config.listeners,
        async move {
            let mut shutdown = shutdown;
            let _ = shutdown.wait_for(|stop| *stop).await;
        },
    ));
    Ok(Ops {
        readiness,
        api,
        telemetry,
        http,
        addr,
    })
}

/// Makes `ingest` and `lease` probes of what ingest reports, and `serving` of `ready` (false
/// once shutdown begins).
pub fn probe_ingest(
    readiness: &Readiness,
    status: Arc<LiveStatus>,
    shared: bool,
    ready: Arc<AtomicBool>,
) {
    let ingest_status = status.clone();
    readiness.set_probe(
        "ingest",
        Box::new(move || {
            let connected = ingest_status.connected.load(Ordering::Relaxed);
            match ingest_status.mode() {
                IngestMode::Starting => CheckState::not_ready("starting"),
                IngestMode::Off => CheckState::ready("off: no --jetstream URL"),
                IngestMode::Following => CheckState::ready("following the change log"),
                IngestMode::Writing if connected => CheckState::ready("connected to Jetstream"),
                IngestMode::Writing => CheckState::not_ready("not connected to Jetstream"),
                IngestMode::Stopped => CheckState::not_ready("stopped"),
            }
        }),
    );
    readiness.set_probe(
        "lease",
        Box::new(move || match (shared, status.mode()) {
            (false, _) => CheckState::ready("not needed: the only writer of its store"),
            (true, IngestMode::Writing) => CheckState::ready("held"),
            (true, IngestMode::Following | IngestMode::Off) => {
                CheckState::ready("following: another replica may hold it")
            }
            (true, IngestMode::Starting) => CheckState::not_ready("starting"),
            (true, IngestMode::Stopped) => CheckState::not_ready("stopped"),
        }),
    );
    readiness.set_probe(
        "serving",
        Box::new(move || {
            if ready.load(Ordering::Relaxed) {
                CheckState::ready("serving")
            } else {
                CheckState::not_ready("starting or shutting down")
            }
        }),
    );
}

/// Keeps `grpc.health.v1.Health` in line with the readiness checks until `shutdown`, then
/// reports `NOT_SERVING` while the server drains.
pub fn mirror_grpc_health(
    readiness: Arc<Readiness>,
    health: GrpcHealth,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut serving = None;
        loop {
            let now = readiness.is_ready() && !*shutdown.borrow();
            if serving != Some(now) {
                health.set_serving(now).await;
                serving = Some(now);
            }
            if *shutdown.borrow() {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(GRPC_HEALTH_INTERVAL) => {}
                _ = shutdown.changed() => {}
            }
        }
    })
}
