//! Request counts and latencies of the HTTP API, per route: `starling_http_requests_total{route,
//! status}` and `starling_http_request_duration_seconds{route}`.
//!
//! The route label is the matched route pattern (`/v1/graph/mutuals`), never the raw path, so
//! the number of series is bounded by the routes Starling declares.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

/// Counts and times one request to a matched route (a `route_layer` middleware).
pub async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::histogram!("starling_http_request_duration_seconds", "route" => route.clone())
        .record(started.elapsed());
    metrics::counter!("starling_http_requests_total", "route" => route, "status" => status)
        .increment(1);
    response
}
