//! What an operator sees of the gRPC API: per-RPC counts and latencies, and the standard
//! `grpc.health.v1.Health` service.
//!
//! `RpcMetrics` wraps the `bsky.Service` server and records, for each call,
//! `starling_grpc_requests_total{method,code}` and
//! `starling_grpc_request_duration_seconds{method}`. The method label is the RPC's name, so
//! series are bounded by the service definition: a call answered `UNIMPLEMENTED` (an unknown
//! method, or one Starling does not serve) is counted under `method="other"`.

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Instant;

use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::codegen::http::{Request, Response};
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::server::{HealthReporter, HealthService};

/// The method label of calls counted without their name.
const OTHER_METHOD: &str = "other";

/// The longest RPC name used as a label; anything longer is `other`.
const METHOD_BYTES_MAX: usize = 64;

/// A gRPC service with per-call metrics around it.
#[derive(Clone)]
pub struct RpcMetrics<S> {
    inner: S,
}

impl<S> RpcMetrics<S> {
    /// Records metrics for every call to `inner`.
    pub fn new(inner: S) -> RpcMetrics<S> {
        RpcMetrics { inner }
    }
}

impl<S: NamedService> NamedService for RpcMetrics<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<Request<Body>> for RpcMetrics<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Response<Body>, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let method = method_name(request.uri().path()).to_owned();
        let started = Instant::now();
        let call = self.inner.call(request);
        Box::pin(async move {
            let response = call.await?;
            // An error is a trailers-only response: its status is in the headers. A success
            // carries `grpc-status: 0` in trailers, after the body.
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.parse::<i32>().ok())
                .map_or(tonic::Code::Ok, tonic::Code::from);
            let method = if code == tonic::Code::Unimplemented {
                OTHER_METHOD.to_owned()
            } else {
                method
            };
            metrics::histogram!("starling_grpc_request_duration_seconds", "method" => method.clone())
                .record(started.elapsed());
            metrics::counter!(
                "starling_grpc_requests_total",
                "method" => method,
                "code" => code_name(code),
            )
            .increment(1);
            Ok(response)
        })
    }
}

/// `GetTimeline` of `/bsky.Service/GetTimeline`; `other` for anything that is not a plain name.
fn method_name(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or_default();
    let plain = !name.is_empty()
        && name.len() <= METHOD_BYTES_MAX
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric());
    if plain { name } else { OTHER_METHOD }
}

/// The canonical upper-case name of a status code, as gRPC documents it.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The serving status `grpc.health.v1.Health` reports, for the whole server (`""`) and for
/// `bsky.Service`: `NOT_SERVING` until the binary says it is ready.
#[derive(Clone)]
pub struct GrpcHealth {
    reporter: HealthReporter,
}

impl GrpcHealth {
    /// Both services `NOT_SERVING`.
    pub fn new() -> GrpcHealth {
        let reporter = HealthReporter::new();
        let statuses = reporter.clone();
        // The reporter's lock is a fresh tokio lock nobody else holds yet, so this never waits.
        futures_now(async move {
            for name in SERVICE_NAMES {
                statuses
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
        });
        GrpcHealth { reporter }
    }

    /// Reports both services serving, or not.
    pub async fn set_serving(&self, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in SERVICE_NAMES {
            self.reporter.set_service_status(name, status).await;
        }
    }

    /// The `grpc.health.v1.Health` server answering from this reporter.
    pub(crate) fn server(&self) -> tonic_health::pb::health_server::HealthServer<HealthService> {
        tonic_health::pb::health_server::HealthServer::new(HealthService::from_health_reporter(
            self.reporter.clone(),
        ))
    }
}

impl Default for GrpcHealth {
    fn default() -> GrpcHealth {
        GrpcHealth::new()
    }
}

/// The names health is reported under: the whole server, and the dataplane service.
const SERVICE_NAMES: [&str; 2] = ["", "bsky.Service"];

/// Runs a future that cannot wait to completion, without a runtime.
fn futures_now(future: impl std::future::Future<Output = ()>) {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let done = future.as_mut().poll(&mut cx).is_ready();
    assert!(done, "setting a fresh health reporter had to wait");
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that only plain RPC names become labels, so a client cannot mint series.
    #[test]
    fn method_labels_are_bounded() {
        assert_eq!(method_name("/bsky.Service/GetTimeline"), "GetTimeline");
        assert_eq!(method_name("/grpc.health.v1.Health/Check"), "Check");
        assert_eq!(method_name("/bsky.Service/"), OTHER_METHOD);
        assert_eq!(method_name("/bsky.Service/Get-Timeline"), OTHER_METHOD);
        assert_eq!(method_name(&format!("/x/{}", "A".repeat(65))), OTHER_METHOD);
    }
}
