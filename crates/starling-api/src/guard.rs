//! The guard in front of the HTTP API's expensive queries (graph lists and intersections,
//! timelines, author feeds): a bearer token off loopback, a bound on how many run at once, and
//! a deadline.
//!
//! Cheap reads (`/v1/stats`, `/v1/graph/follows`, `/v1/graph/actor`) and the operator's
//! endpoints (`/livez`, `/readyz`, `/metrics`) are never behind it, so a flood of
//! `mutuals?limit=100000` cannot starve the probes an orchestrator relies on. A query over the
//! bound is answered 503 with `Retry-After` at once instead of queueing without limit; one past
//! its deadline is answered 503 too (its blocking work finishes on its own thread, but holds
//! its permit until then, so the bound still counts it).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::ApiError;

/// How the expensive queries are guarded.
#[derive(Clone, Debug)]
pub struct GuardConfig {
    /// The bearer token expensive queries must carry when `token_required`.
    pub token: Option<String>,
    /// Whether the token is asked for: the listener is not on a loopback address.
    pub token_required: bool,
    /// Expensive queries running at once, at most; more are answered 503.
    pub concurrent_max: usize,
    /// The longest an expensive query may take before it is answered 503.
    pub deadline: Duration,
    /// The bearer token the admin endpoints (those that change the store) need, on every
    /// listener, loopback included; with none configured they answer 403.
    pub admin_token: Option<String>,
}

/// Expensive queries at once, by default: about what two cores get through without queueing
/// behind each other on the blocking pool.
pub const EXPENSIVE_QUERIES_MAX_DEFAULT: usize = 8;

/// The deadline of an expensive query, by default.
pub const QUERY_DEADLINE_DEFAULT: Duration = Duration::from_secs(10);

impl Default for GuardConfig {
    /// Loopback: no token; the default bound and deadline.
    fn default() -> GuardConfig {
        GuardConfig {
            token: None,
            token_required: false,
            concurrent_max: EXPENSIVE_QUERIES_MAX_DEFAULT,
            deadline: QUERY_DEADLINE_DEFAULT,
            admin_token: None,
        }
    }
}

/// The guard's state, shared by every expensive route.
#[derive(Clone)]
pub struct Guard {
    config: Arc<GuardConfig>,
    permits: Arc<Semaphore>,
}

impl Guard {
    /// A guard configured by `config`.
    pub fn new(config: GuardConfig) -> Guard {
        assert!(
            config.concurrent_max > 0,
            "a bound of 0 would refuse every query"
        );
        Guard {
            permits: Arc::new(Semaphore::new(config.concurrent_max)),
            config: Arc::new(config),
        }
    }
}

/// 503 with `Retry-After: 1`, counted by reason.
fn shed(reason: &'static str, message: &str) -> Response {
    metrics::counter!("starling_http_shed_total", "reason" => reason).increment(1);
    let mut response = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Whether `request` carries `Authorization: Bearer TOKEN`, compared in constant time.
fn has_token(request: &Request, token: &str) -> bool {
    let Some(given) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
    else {
        return false;
    };
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The middleware of the expensive routes.
pub async fn expensive(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let config = &guard.config;
    if config.token_required {
        match &config.token {
            None => {
                return ApiError::new(
                    StatusCode::FORBIDDEN,
                    "this query needs a bearer token off loopback, and none is configured: \
                     set STARLING_HTTP_TOKEN (or http.token)",
                )
                .into_response();
            }
            Some(token) if !has_token(&request, token) => {
                let mut response = ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "this query needs `Authorization: Bearer TOKEN` (the configured http.token)",
                )
                .into_response();
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
            Some(_) => {}
        }
    }
    bounded(&guard, request, next).await
}

/// 401 asking for `Authorization: Bearer TOKEN`.
fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The middleware of the admin routes (backups, takedowns): the admin token on every listener,
/// then the bound and deadline of [`expensive`].
pub async fn admin(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    match &guard.config.admin_token {
        None => ApiError::new(
            StatusCode::FORBIDDEN,
            "this endpoint changes the store and needs the admin token, and none is \
             configured: set STARLING_ADMIN_TOKEN (or http.admin_token)",
        )
        .into_response(),
        Some(token) if !has_token(&request, token) => unauthorized(
            "this endpoint needs `Authorization: Bearer TOKEN` (the configured http.admin_token)",
        ),
        Some(_) => bounded(&guard, request, next).await,
    }
}

/// Runs `request` within the guard's bound and deadline.
async fn bounded(guard: &Guard, request: Request, next: Next) -> Response {
    let config = &guard.config;
    let Ok(permit) = guard.permits.clone().try_acquire_owned() else {
        return shed(
            "busy",
            &format!(
                "too many expensive queries at once (at most {}); retry later",
                config.concurrent_max
            ),
        );
    };
    match tokio::time::timeout(config.deadline, next.run(request)).await {
        Ok(response) => {
            drop(permit);
            response
        }
        Err(_) => shed(
            "deadline",
            &format!(
                "the query took over its {} ms deadline",
                config.deadline.as_millis()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

    async fn status_of(router: &Router, authorization: Option<&str>) -> StatusCode {
        let mut request = axum::http::Request::get("/q");
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let request = request.body(Body::empty()).unwrap();
        router.clone().oneshot(request).await.unwrap().status()
    }

    fn guarded(config: GuardConfig) -> Router {
        let guard = Guard::new(config);
        Router::new()
            .route("/q", get(|| async { "ok" }))
            .route_layer(axum::middleware::from_fn_with_state(guard, expensive))
    }

    // Checks the token rules: none asked on loopback; off loopback a missing or wrong token is
    // 401, the right one passes, and with no token configured the query is 403 (never open).
    #[tokio::test]
    async fn token_is_required_off_loopback_only() {
        let loopback = guarded(GuardConfig::default());
        assert_eq!(status_of(&loopback, None).await, StatusCode::OK);
        let open = guarded(GuardConfig {
            token: Some("s3cret".into()),
            token_required: true,
            ..GuardConfig::default()
        });
        assert_eq!(status_of(&open, None).await, StatusCode::UNAUTHORIZED);
        assert_eq!(
            status_of(&open, Some("Bearer s3creT")).await,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status_of(&open, Some("Bearer s3cret1")).await,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status_of(&open, Some("s3cret")).await,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            status_of(&open, Some("Bearer s3cret")).await,
            StatusCode::OK
        );
        let unset = guarded(GuardConfig {
            token_required: true,
            ..GuardConfig::default()
        });
        assert_eq!(
            status_of(&unset, Some("Bearer x")).await,
            StatusCode::FORBIDDEN
        );
    }

    fn admin_guarded(config: GuardConfig) -> Router {
        Router::new()
            .route("/q", get(|| async { "ok" }))
            .route_layer(axum::middleware::from_fn_with_state(
                Guard::new(config),
                admin,
            ))
    }

    // Checks the admin token rules: asked for on loopback too; missing or wrong is 401, the
    // right one passes, the read token does not, and with no admin token configured it is 403.
    #[tokio::test]
    async fn admin_token_is_required_everywhere() {
        let unset = admin_guarded(GuardConfig {
            token: Some("reader".into()),
            ..GuardConfig::default()
        });
        assert_eq!(status_of(&unset, None).await, StatusCode::FORBIDDEN);
        assert_eq!(
            status_of(&unset, Some("Bearer reader")).await,
            StatusCode::FORBIDDEN
        );
        let set = admin_guarded(GuardConfig {
            token: Some("reader".into()),
            admin_token: Some("adm1n".into()),
            ..GuardConfig::default()
        });
        assert_eq!(status_of(&set, None).await, StatusCode::UNAUTHORIZED);
        assert_eq!(
            status_of(&set, Some("Bearer reader")).await,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(status_of(&set, Some("Bearer adm1n")).await, StatusCode::OK);
    }

    // Checks the bound and the deadline with handlers held open by the test: with a bound of 2,
    // two held queries make the third 503 at once; releasing one lets the next through; a
    // query past its deadline is 503 (paused time, so no real waiting).
    #[tokio::test(start_paused = true)]
    async fn bound_and_deadline_answer_503() {
        let gate = Arc::new(tokio::sync::Notify::new());
        let entered = Arc::new(Semaphore::new(0));
        let (handler_gate, handler_entered) = (gate.clone(), entered.clone());
        let guard = Guard::new(GuardConfig {
            concurrent_max: 2,
            deadline: Duration::from_secs(5),
            ..GuardConfig::default()
        });
        let router = Router::new()
            .route(
                "/q",
                get(move || {
                    let (gate, entered) = (handler_gate.clone(), handler_entered.clone());
                    async move {
                        entered.add_permits(1);
                        gate.notified().await;
                        "ok"
                    }
                }),
            )
            .route_layer(axum::middleware::from_fn_with_state(guard, expensive));
        let held: Vec<_> = (0..2)
            .map(|_| {
                tokio::spawn({
                    let router = router.clone();
                    async move { status_of(&router, None).await }
                })
            })
            .collect();
        entered.acquire_many(2).await.unwrap().forget();
        let request = axum::http::Request::get("/q").body(Body::empty()).unwrap();
        let refused = router.clone().oneshot(request).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        // One held query is let go and answers 200; the other waits on until its deadline
        // (the paused clock jumps there once everything is idle) and answers 503.
        gate.notify_one();
        let mut answers = Vec::new();
        for task in held {
            answers.push(task.await.unwrap());
        }
        answers.sort();
        assert_eq!(answers, [StatusCode::OK, StatusCode::SERVICE_UNAVAILABLE]);
    }
}
