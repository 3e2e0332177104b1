//! Starling's network APIs: the HTTP JSON API for operators, health, and Prometheus metrics.
//!
//! HTTP routes (`router`): `GET /health`, `GET /metrics`, `GET /v1/stats`, the graph
//! queries under `/v1/graph/` (see `graph_api.rs`), `/v1/timeline` and `/v1/author-feed`
//! (see `feed_api.rs`), and `POST /v1/admin/backup` (`admin_api.rs`); the expensive ones behind
//! `guard.rs`. `ops.rs` serves the probes, `/metrics` and the status page from the first second
//! of `serve`, and the full router once it is installed.
//!
//! Owns: routing, request validation, JSON responses and errors, graceful shutdown of listeners.
//! Does not: ingest events, render metrics itself (the binary hands in a renderer), or touch
//! the storage engine (it goes through `starling_store::Store`).
//! Must not depend on: `starling-ingest`, the storage engine, `clap`.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod admin_api;
mod feed_api;
mod graph_api;
pub mod grpc;
pub mod guard;
mod http_metrics;
mod listen;
pub mod moderation;
pub mod ops;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use starling_store::Store;
use tokio::net::TcpListener;
use tracing::error;

pub use listen::ListenerLimits;

/// Renders the Prometheus text exposition of every metric.
pub type MetricsRenderer = Arc<dyn Fn() -> String + Send + Sync>;

/// What the HTTP handlers share.
pub struct AppState<S> {
    /// The store.
    pub store: Arc<S>,
    /// The follow and block graph.
    pub graph: Arc<starling_graph::Graph>,
    /// Home timelines and author feeds.
    pub timelines: Arc<starling_timeline::Timelines>,
    /// Renders `/metrics`.
    pub metrics: MetricsRenderer,
    /// Whether the service is ready to serve (false while starting or shutting down).
    pub ready: Arc<AtomicBool>,
}

impl<S> Clone for AppState<S> {
    fn clone(&self) -> Self {
        AppState {
            store: self.store.clone(),
            graph: self.graph.clone(),
            timelines: self.timelines.clone(),
            metrics: self.metrics.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// The most bytes of a client's value an error message repeats; the rest is elided, so a
/// huge bad value never makes a huge error (or, in gRPC, a status too big for its header).
pub const SHOWN_VALUE_BYTES_MAX: usize = 128;

/// The most bytes of an HTTP error message, whatever it holds.
const ERROR_MESSAGE_BYTES_MAX: usize = 1024;

/// A client's value as error messages show it: at most [`SHOWN_VALUE_BYTES_MAX`] bytes, then
/// `…` and the full length.
pub(crate) struct Shown<'a>(pub &'a str);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.len() <= SHOWN_VALUE_BYTES_MAX {
            return f.write_str(self.0);
        }
        write!(
            f,
            "{}… ({} bytes)",
            truncated(self.0, SHOWN_VALUE_BYTES_MAX),
            self.0.len()
        )
    }
}

/// The longest prefix of `text` of at most `bytes_max` bytes that ends on a character boundary.
fn truncated(text: &str, bytes_max: usize) -> &str {
    let mut end = bytes_max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// A JSON error body: `{"error": "..."}`.
#[derive(Serialize)]
struct ErrorBody {
    error: String,
}

/// An HTTP error with a JSON body.
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    /// An error with `status`, whose message the client sees.
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// A 400 naming what is wrong with the request.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        let mut message = message.into();
        if message.len() > ERROR_MESSAGE_BYTES_MAX {
            message = format!("{}…", truncated(&message, ERROR_MESSAGE_BYTES_MAX));
        }
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message,
        }
    }

    /// A 500 for a failure on our side; the detail goes to the log, not to the client.
    pub fn internal(detail: impl std::fmt::Display) -> ApiError {
        error!(error = %detail, "request failed");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "internal error".into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
            }),
        )
            .into_response()
    }
}

/// The HTTP routes: `/health`, `/metrics`, `/v1/stats`, the graph and feed queries, with the
/// expensive queries guarded by the defaults of [`guard::GuardConfig`] (loopback).
pub fn router<S: Store + 'static>(state: AppState<S>) -> Router {
    router_guarded(state, guard::GuardConfig::default())
}

/// The HTTP routes with the expensive queries (graph lists and intersections, timelines,
/// author feeds) behind `guard`: a token off loopback, a bound and a deadline.
pub fn router_guarded<S: Store + 'static>(state: AppState<S>, guard: guard::GuardConfig) -> Router {
    let expensive = Router::new()
        .route(
            "/v1/graph/known-followers",
            get(graph_api::known_followers::<S>),
        )
        .route("/v1/graph/mutuals", get(graph_api::mutuals::<S>))
        .route("/v1/graph/blocks", get(graph_api::blocks::<S>))
        .route("/v1/timeline", get(feed_api::timeline::<S>))
        .route("/v1/author-feed", get(feed_api::author_feed::<S>))
        .route_layer(axum::middleware::from_fn_with_state(
            guard::Guard::new(guard.clone()),
            guard::expensive,
        ));
    let admin_guard = guard::GuardConfig {
        concurrent_max: 1,
        deadline: admin_api::BACKUP_DEADLINE,
        ..guard.clone()
    };
    let admin = Router::new()
        .route("/v1/admin/backup", post(admin_api::backup::<S>))
        .route_layer(axum::middleware::from_fn_with_state(
            guard::Guard::new(admin_guard),
            guard::admin,
        ));
    let takedowns = Router::new()
        .route("/v1/admin/takedown", post(moderation::takedown::<S>))
        .route("/v1/admin/untakedown", post(moderation::untakedown::<S>))
        .route_layer(axum::middleware::from_fn_with_state(
            guard::Guard::new(guard.clone()),
            guard::admin,
        ))
        .route(
            "/v1/admin/takedown",
            get(moderation::takedown_state::<S>).route_layer(axum::middleware::from_fn_with_state(
                guard::Guard::new(guard.clone()),
                guard::expensive,
            )),
        );
    Router::new()
        .route("/health", get(health::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/v1/stats", get(stats::<S>))
        .route("/v1/graph/follows", get(graph_api::follows::<S>))
        .route("/v1/graph/actor", get(graph_api::actor::<S>))
        .merge(expensive)
        .merge(admin)
        .merge(takedowns)
        .route_layer(axum::middleware::from_fn(http_metrics::track))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Any path without a route: a 404 in the JSON error shape, naming the path.
async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("no route for `{}`", Shown(uri.path())),
    }
}

/// A route asked with a method it does not answer: a 405 in the JSON error shape.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!("`{}` does not answer {method}", Shown(uri.path())),
    }
}

#[derive(Serialize)]
struct Health {
    status: &'static str,
}

async fn health<S: Store>(State(state): State<AppState<S>>) -> Response {
    if state.ready.load(Ordering::Relaxed) {
        Json(Health { status: "ok" }).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "unavailable",
            }),
        )
            .into_response()
    }
}

async fn metrics<S: Store>(State(state): State<AppState<S>>) -> Response {
    let body = (state.metrics)();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// `/v1/stats`: the store's counts, and the timelines' under `timelines`.
#[derive(Serialize)]
struct StatsBody {
    #[serde(flatten)]
    store: starling_store::Stats,
    timelines: starling_timeline::TimelineStats,
}

async fn stats<S: Store + 'static>(State(state): State<AppState<S>>) -> Result<Response, ApiError> {
    let store = state.store.clone();
    let stats = tokio::task::spawn_blocking(move || store.stats())
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    Ok(Json(StatsBody {
        store: stats,
        timelines: state.timelines.stats(),
    })
    .into_response())
}

/// Serves `router` on `listener` under `limits` until `shutdown` resolves, then drains open
/// requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listen::serve_http(listener, router, limits, shutdown).await
}
