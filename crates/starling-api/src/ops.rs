//! The operator's endpoints, served from the first second of `serve`: the status page at `/`,
//! `/livez`, `/readyz` and `/metrics`, with every other path handed to the full API once it is
//! installed.
//!
//! `serve` binds its HTTP listener before the store opens and the graph loads (together 6 to
//! 22 s at full scale), so an orchestrator can tell "alive but starting" from "dead" and a
//! person can watch the start in `/readyz`. Until [`ApiSlot::install`] is called, other paths
//! answer 503 with the list of what is not ready.
//!
//! Readiness is a list of named checks ([`Readiness`]): each is either a value the binary sets
//! as start-up progresses (store open, graph loaded, gRPC serving) or a probe read at request
//! time (ingest connected, writer lease held). `/readyz` is 200 only when all are ready.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use tower::ServiceExt;

use crate::MetricsRenderer;

/// The state of one readiness check, as a probe reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckState {
    /// Whether this part is ready.
    pub ready: bool,
    /// What it is doing, in a few words: `"open"`, `"loading the graph"`, `"connected"`.
    pub detail: String,
}

impl CheckState {
    /// A ready part, with what it is doing.
    pub fn ready(detail: impl Into<String>) -> CheckState {
        CheckState {
            ready: true,
            detail: detail.into(),
        }
    }

    /// A part that is not ready, with why.
    pub fn not_ready(detail: impl Into<String>) -> CheckState {
        CheckState {
            ready: false,
            detail: detail.into(),
        }
    }
}

/// A check read at request time.
pub type Probe = Box<dyn Fn() -> CheckState + Send + Sync>;

enum Check {
    Set(CheckState),
    Probe(Probe),
}

/// The named readiness checks of a process, in the order they were declared.
pub struct Readiness {
    checks: Mutex<Vec<(&'static str, Check)>>,
    started: Instant,
}

impl Readiness {
    /// Checks named `names`, none ready yet (`"starting"`).
    pub fn new(names: &[&'static str]) -> Arc<Readiness> {
        let checks = names
            .iter()
            .map(|&name| (name, Check::Set(CheckState::not_ready("starting"))))
            .collect();
        Arc::new(Readiness {
            checks: Mutex::new(checks),
            started: Instant::now(),
        })
    }

    /// Sets the check `name` (declaring it if it is new).
    pub fn set(&self, name: &'static str, state: CheckState) {
        self.replace(name, Check::Set(state));
    }

    /// Makes the check `name` a probe, read on every `/readyz`.
    pub fn set_probe(&self, name: &'static str, probe: Probe) {
        self.replace(name, Check::Probe(probe));
    }

    fn replace(&self, name: &'static str, check: Check) {
        let mut checks = lock(&self.checks);
        match checks.iter_mut().find(|(known, _)| *known == name) {
            Some(slot) => slot.1 = check,
            None => checks.push((name, check)),
        }
    }

    /// Every check's state now, in declaration order.
    pub fn report(&self) -> ReadinessReport {
        let checks = lock(&self.checks);
        let checks: Vec<(&'static str, CheckState)> = checks
            .iter()
            .map(|(name, check)| {
                let state = match check {
                    Check::Set(state) => state.clone(),
                    Check::Probe(probe) => probe(),
                };
                (*name, state)
            })
            .collect();
        ReadinessReport {
            uptime_secs: self.started.elapsed().as_secs_f64(),
            checks,
        }
    }

    /// Whether every check is ready.
    pub fn is_ready(&self) -> bool {
        self.report().is_ready()
    }
}

/// What `/readyz` answers.
#[derive(Clone, Debug)]
pub struct ReadinessReport {
    /// Seconds since the process declared its checks.
    pub uptime_secs: f64,
    /// Each check by name.
    pub checks: Vec<(&'static str, CheckState)>,
}

impl ReadinessReport {
    /// Whether every check is ready.
    pub fn is_ready(&self) -> bool {
        self.checks.iter().all(|(_, state)| state.ready)
    }

    /// The names of the checks that are not ready.
    pub fn not_ready(&self) -> Vec<&'static str> {
        self.checks
            .iter()
            .filter(|(_, state)| !state.ready)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// The checks, even if a probe panicked while holding the lock: each entry is whole.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Serialize)]
struct ReadyBody {
    status: &'static str,
    uptime_secs: f64,
    not_ready: Vec<&'static str>,
    checks: serde_json::Map<String, serde_json::Value>,
}

impl ReadyBody {
    fn of(report: &ReadinessReport) -> ReadyBody {
        let checks = report
            .checks
            .iter()
            .map(|(name, state)| {
                let value = serde_json::json!({ "ready": state.ready, "detail": state.detail });
                ((*name).to_owned(), value)
            })
            .collect();
        ReadyBody {
            status: if report.is_ready() {
                "ready"
            } else {
                "not_ready"
            },
            uptime_secs: report.uptime_secs,
            not_ready: report.not_ready(),
            checks,
        }
    }
}

/// Where the full API goes once the store and graph are up; until then its paths answer 503.
#[derive(Clone, Default)]
pub struct ApiSlot(Arc<OnceLock<Router>>);

impl ApiSlot {
    /// An empty slot.
    pub fn new() -> ApiSlot {
        ApiSlot::default()
    }

    /// Starts answering every other path with `router`. A second call is a bug of the caller.
    pub fn install(&self, router: Router) {
        let installed = self.0.set(router).is_ok();
        assert!(installed, "the API router was installed twice");
    }
}

#[derive(Clone)]
struct OpsState {
    readiness: Arc<Readiness>,
    metrics: MetricsRenderer,
    api: ApiSlot,
}

/// `/livez`, `/readyz` and `/metrics`, answered from the start; every other path goes to the
/// router installed in `api`, or is a 503 naming what is not ready before that.
pub fn ops_router(readiness: Arc<Readiness>, metrics: MetricsRenderer, api: ApiSlot) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route_layer(axum::middleware::from_fn(crate::http_metrics::track))
        .fallback(forward)
        .with_state(OpsState {
            readiness,
            metrics,
            api,
        })
}

/// The status page: one HTML file with its script and styles inline, drawing small charts
/// from `/metrics`, `/readyz` and `/v1/stats` every 2 s.
const STATUS_PAGE: &str = include_str!("status.html");

/// What the status page may load: only from this origin, and its own inline script and style.
const STATUS_PAGE_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:";

async fn status_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, STATUS_PAGE_CSP),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        STATUS_PAGE,
    )
        .into_response()
}

#[derive(Serialize)]
struct LiveBody {
    status: &'static str,
    uptime_secs: f64,
}

/// The process is alive: its HTTP server answers. Nothing else is checked, so an orchestrator
/// restarts only a process that is wedged, never one that is slowly starting.
async fn livez(State(state): State<OpsState>) -> Response {
    Json(LiveBody {
        status: "alive",
        uptime_secs: state.readiness.started.elapsed().as_secs_f64(),
    })
    .into_response()
}

async fn readyz(State(state): State<OpsState>) -> Response {
    let report = state.readiness.report();
    let status = if report.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(ReadyBody::of(&report))).into_response()
}

async fn metrics_text(State(state): State<OpsState>) -> Response {
    let body = (state.metrics)();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

#[derive(Serialize)]
struct StartingBody {
    error: String,
    not_ready: Vec<&'static str>,
}

async fn forward(State(state): State<OpsState>, request: Request<Body>) -> Response {
    match state.api.0.get() {
        Some(router) => match router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        },
        None => {
            let not_ready = state.readiness.report().not_ready();
            let body = StartingBody {
                error: format!("starling is starting: not ready: {}", not_ready.join(", ")),
                not_ready,
            };
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get_path(router: &Router, path: &str) -> (StatusCode, serde_json::Value) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    // Checks the start-up sequence as `serve` drives it: before anything is ready `/livez` is
    // 200, `/readyz` is 503 naming every check, and API paths are 503; each `set` removes its
    // name from `not_ready`; a probe is read per request; the installed router answers after.
    #[tokio::test]
    async fn readyz_names_what_is_not_ready_until_all_are() {
        let readiness = Readiness::new(&["store", "graph"]);
        let slot = ApiSlot::new();
        let router = ops_router(readiness.clone(), Arc::new(String::new), slot.clone());
        let (status, body) = get_path(&router, "/livez").await;
        assert_eq!(
            (status, body["status"].as_str()),
            (StatusCode::OK, Some("alive"))
        );
        let (status, body) = get_path(&router, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["not_ready"], serde_json::json!(["store", "graph"]));
        let (status, body) = get_path(&router, "/v1/stats").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["not_ready"], serde_json::json!(["store", "graph"]));

        readiness.set("store", CheckState::ready("open"));
        let connected = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let probe_connected = connected.clone();
        readiness.set_probe(
            "ingest",
            Box::new(move || {
                if probe_connected.load(std::sync::atomic::Ordering::Relaxed) {
                    CheckState::ready("connected")
                } else {
                    CheckState::not_ready("connecting")
                }
            }),
        );
        let (_, body) = get_path(&router, "/readyz").await;
        assert_eq!(body["not_ready"], serde_json::json!(["graph", "ingest"]));
        assert_eq!(body["checks"]["store"]["detail"], "open");

        readiness.set("graph", CheckState::ready("loaded"));
        connected.store(true, std::sync::atomic::Ordering::Relaxed);
        slot.install(Router::new().route("/v1/stats", get(|| async { Json(1) })));
        let (status, body) = get_path(&router, "/readyz").await;
        assert_eq!(
            (status, body["status"].as_str()),
            (StatusCode::OK, Some("ready"))
        );
        assert_eq!(body["not_ready"], serde_json::json!([]));
        assert_eq!(
            get_path(&router, "/v1/stats").await,
            (StatusCode::OK, serde_json::json!(1))
        );
    }
}
