//! The unary calls the load tools make, with request messages already encoded and responses
//! kept as bytes: gRPC over h2c (Starling), or the Connect protocol over HTTP/1.1 (the
//! reference dataplane of `@atproto/bsky`, express over `node:http`, which has no HTTP/2).
//!
//! Calls go straight through `h2` and `hyper`'s connection types, with no message work, so
//! that the client takes as little as it can of a machine it shares with the server it
//! measures. A call's outcome is its gRPC status code ([`Code`]); a failed connection or a
//! malformed response is a code too, never a panic.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderMap, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Runs a load tool's `main` on one thread, so that its calls interleave there and it never
/// takes more than a core from the server beside it; an error is printed after the tool's
/// `name` and exits with status 1.
pub fn run_tool(name: &str, main: impl Future<Output = Result<(), String>>) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(main),
        Err(err) => Err(format!("no async runtime: {err}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{name}: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A gRPC status code.
pub type Code = u32;

/// The call succeeded.
pub const OK: Code = 0;
const UNKNOWN: Code = 2;
const DEADLINE_EXCEEDED: Code = 4;
const INTERNAL: Code = 13;
const UNAVAILABLE: Code = 14;

/// The codes' names, as gRPC spells them, indexed by code.
const NAMES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// A code's name; a code past the known ones is `Unknown`.
pub fn code_name(code: Code) -> &'static str {
    NAMES.get(code as usize).copied().unwrap_or("Unknown")
}

/// The code the Connect protocol's snake_case name stands for (`not_found`: `NotFound`).
fn connect_code(name: &str) -> Code {
    let snake = |camel: &str| {
        let mut out = String::new();
        let mut lower_before = false;
        for ch in camel.chars() {
            if ch.is_ascii_uppercase() && lower_before {
                out.push('_');
            }
            lower_before = ch.is_ascii_lowercase();
            out.push(ch.to_ascii_lowercase());
        }
        out
    };
    NAMES
        .iter()
        .position(|known| snake(known) == name)
        .map_or(UNKNOWN, |code| code as Code)
}

/// How a request is sent: the connection kind and the method it calls.
pub enum Channel {
    /// gRPC over h2c; clones share one HTTP/2 connection.
    Grpc(GrpcChannel),
    /// The Connect protocol over one HTTP/1.1 keep-alive connection (one call at a time).
    Connect(ConnectChannel),
}

impl Channel {
    /// The bytes to send for an encoded request message: gRPC frames it, Connect sends it bare.
    pub fn payload(&self, message: &[u8]) -> Bytes {
        match self {
            Channel::Grpc(_) => grpc_frame(message),
            Channel::Connect(_) => Bytes::copy_from_slice(message),
        }
    }

    /// Makes one call with a payload from [`Channel::payload`] and a deadline; on `OK`,
    /// `response` holds the encoded response message.
    pub async fn call(
        &mut self,
        payload: Bytes,
        timeout: Duration,
        response: &mut Vec<u8>,
    ) -> Code {
        response.clear();
        let call = async {
            match self {
                Channel::Grpc(channel) => channel.call(payload, timeout, response).await,
                Channel::Connect(channel) => channel.call(payload, timeout, response).await,
            }
        };
        let code = tokio::time::timeout(timeout, call)
            .await
            .unwrap_or(DEADLINE_EXCEEDED);
        // An HTTP/1.1 connection left in the middle of a response serves no other call.
        if let (Channel::Connect(channel), DEADLINE_EXCEEDED) = (&mut *self, code) {
            channel.send = None;
        }
        code
    }
}

/// A gRPC message frame: no compression, the length, the message.
fn grpc_frame(message: &[u8]) -> Bytes {
    let len = u32::try_from(message.len()).expect("a request message under 4 GiB");
    let mut frame = Vec::with_capacity(5 + message.len());
    frame.push(0);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(message);
    frame.into()
}

fn timeout_millis(timeout: Duration) -> u128 {
    timeout.as_millis().max(1)
}

/// Calls over an h2c connection.
#[derive(Clone)]
pub struct GrpcChannel {
    send: h2::client::SendRequest<Bytes>,
    uri: Uri,
}

impl GrpcChannel {
    /// Opens an HTTP/2 connection (prior knowledge, no TLS) to `addr` for calls of `method`
    /// (`/package.Service/Method`).
    pub async fn connect(addr: &str, method: &str) -> Result<Self, String> {
        let uri: Uri = format!("http://{addr}{method}")
            .parse()
            .map_err(|err| format!("`{addr}` and `{method}` make no URI: {err}"))?;
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|err| format!("connecting to {addr}: {err}"))?;
        tcp.set_nodelay(true)
            .map_err(|err| format!("connecting to {addr}: {err}"))?;
        // Windows large enough that responses rarely wait for a window update.
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(4 << 20)
            .initial_connection_window_size(64 << 20)
            .handshake(tcp)
            .await
            .map_err(|err| format!("HTTP/2 handshake with {addr}: {err}"))?;
        // The connection ends with an error when the server goes away; the calls then fail
        // with `Unavailable`, which is where it is reported.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(GrpcChannel { send, uri })
    }

    async fn call(&mut self, frame: Bytes, timeout: Duration, response: &mut Vec<u8>) -> Code {
        match self.exchange(frame, timeout, response).await {
            Ok(code) if code == OK => unframe(response),
            Ok(code) => code,
            Err(_) => UNAVAILABLE,
        }
    }

    async fn exchange(
        &mut self,
        frame: Bytes,
        timeout: Duration,
        response: &mut Vec<u8>,
    ) -> Result<Code, h2::Error> {
        std::future::poll_fn(|cx| self.send.poll_ready(cx)).await?;
        let request = Request::post(self.uri.clone())
            .header(CONTENT_TYPE, "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", format!("{}m", timeout_millis(timeout)))
            .body(())
            .expect("a request of a valid URI and fixed headers");
        let (pending, mut stream) = self.send.send_request(request, false)?;
        stream.send_data(frame, true)?;
        let head = pending.await?;
        // A trailers-only response (an error) carries its status in the headers.
        if let Some(code) = grpc_status(head.headers()) {
            return Ok(code);
        }
        if head.status() != http::StatusCode::OK {
            return Ok(UNKNOWN);
        }
        let mut body = head.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            // Only fails once the stream is gone, which the next read reports.
            let _ = body.flow_control().release_capacity(chunk.len());
            response.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await?;
        Ok(trailers.as_ref().and_then(grpc_status).unwrap_or(UNKNOWN))
    }
}

fn grpc_status(headers: &HeaderMap) -> Option<Code> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// Leaves the one message of a gRPC response body in `response`: `OK`, or `Internal` for a
/// body that is not exactly one uncompressed frame.
fn unframe(response: &mut Vec<u8>) -> Code {
    let Some((&[0, a, b, c, d], message)) = response.split_first_chunk::<5>() else {
        return INTERNAL;
    };
    if message.len() != u32::from_be_bytes([a, b, c, d]) as usize {
        return INTERNAL;
    }
    response.drain(..5);
    OK
}

/// Calls over an HTTP/1.1 keep-alive connection, opened again after one fails.
pub struct ConnectChannel {
    addr: String,
    path: String,
    send: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>>,
}

impl ConnectChannel {
    /// A channel to `addr` for calls of `method`; it connects on its first call.
    pub fn new(addr: &str, method: &str) -> Self {
        ConnectChannel {
            addr: addr.to_owned(),
            path: method.to_owned(),
            send: None,
        }
    }

    async fn call(&mut self, message: Bytes, timeout: Duration, response: &mut Vec<u8>) -> Code {
        match self.exchange(message, timeout, response).await {
            Ok(code) => code,
            Err(()) => {
                self.send = None;
                UNAVAILABLE
            }
        }
    }

    async fn exchange(
        &mut self,
        message: Bytes,
        timeout: Duration,
        response: &mut Vec<u8>,
    ) -> Result<Code, ()> {
        let send = match &mut self.send {
            Some(send) => send,
            None => self.send.insert(self.connect().await?),
        };
        send.ready().await.map_err(drop)?;
        let request = Request::post(self.path.as_str())
            .header(HOST, self.addr.as_str())
            .header(CONTENT_TYPE, "application/proto")
            .header("connect-protocol-version", "1")
            .header("connect-timeout-ms", timeout_millis(timeout).to_string())
            .body(Full::new(message))
            .expect("a request of a valid path and fixed headers");
        let head = send.send_request(request).await.map_err(drop)?;
        let status = head.status();
        let body = head.into_body().collect().await.map_err(drop)?.to_bytes();
        if status != http::StatusCode::OK {
            return Ok(connect_error(&body));
        }
        response.extend_from_slice(&body);
        Ok(OK)
    }

    async fn connect(&self) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, ()> {
        let tcp = TcpStream::connect(&self.addr).await.map_err(drop)?;
        tcp.set_nodelay(true).map_err(drop)?;
        let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(drop)?;
        // A closed connection shows in the next call, which opens another.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(send)
    }
}

/// The code of a Connect error body (`{"code": "not_found", ...}`), `Unknown` when it has none.
fn connect_error(body: &[u8]) -> Code {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|error| error.get("code")?.as_str().map(connect_code))
        .unwrap_or(UNKNOWN)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every Connect code name maps to the gRPC code of the same name, as the protocol's table
    // pairs them; anything else is Unknown.
    #[test]
    fn connect_codes_pair_with_grpc_codes() {
        let connect = [
            "ok",
            "canceled",
            "unknown",
            "invalid_argument",
            "deadline_exceeded",
            "not_found",
            "already_exists",
            "permission_denied",
            "resource_exhausted",
            "failed_precondition",
            "aborted",
            "out_of_range",
            "unimplemented",
            "internal",
            "unavailable",
            "data_loss",
            "unauthenticated",
        ];
        for (code, name) in connect.iter().enumerate() {
            assert_eq!(connect_code(name), code as Code, "{name}");
        }
        assert_eq!(connect_error(br#"{"code":"not_found","message":"x"}"#), 5);
        assert_eq!(connect_error(b"<html>"), UNKNOWN);
        assert_eq!(connect_code("NotFound"), UNKNOWN);
    }

    // A response body is accepted as exactly one uncompressed frame and nothing else.
    #[test]
    fn responses_unframe_exactly() {
        let mut body = grpc_frame(b"abc").to_vec();
        assert_eq!(unframe(&mut body), OK);
        assert_eq!(body, b"abc");
        for bad in [
            &[0, 0, 0, 0, 4, 1, 2, 3][..],
            &[1, 0, 0, 0, 0],
            &[0, 0, 0],
            &[],
        ] {
            assert_eq!(unframe(&mut bad.to_vec()), INTERNAL, "{bad:?}");
        }
    }
}
