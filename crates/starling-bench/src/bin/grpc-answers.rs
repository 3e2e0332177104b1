//! grpc-answers: sends each request message of a file once, in order, and prints what came
//! back, so that two servers' answers to the same requests can be compared line by line.
//!
//! ```text
//! grpc-answers -addr 127.0.0.1:PORT -method /bsky.Service/GetTimeline -data FILE [-timeout 30s]
//! ```
//!
//! FILE holds length-prefixed encoded request messages, as for `grpc-load`. One line per
//! message: `INDEX CODE ITEMS SHA256 [URI ...]`. CODE is the gRPC status code's name, ITEMS the
//! number of elements of the response's top-level field 1 (-1 when it does not parse), SHA256
//! the hash of the whole encoded response (the digest `grpc-load -answers` compares), and each
//! URI the field 1 string of one element, in order (a feed item's post URI, followed by `<` and
//! its repost URI when it has one). Calls go one at a time through one h2c connection; a call
//! that fails is printed with its code (ITEMS 0), and the next one is sent.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use starling_bench::cli::{dash_flags, duration};
use starling_bench::grpc_client::{Channel, GrpcChannel, OK, code_name, run_tool};
use starling_bench::wire;

async fn run() -> Result<(), String> {
    let flags = dash_flags(
        std::env::args().skip(1),
        &["addr", "method", "data", "timeout"],
        &[],
    )?;
    let required = |name: &str| {
        flags.get(name).ok_or_else(|| {
            format!("-{name} is required\nusage: grpc-answers -addr HOST:PORT -method /pkg.Service/Method -data FILE [-timeout D]")
        })
    };
    let (addr, method, data) = (required("addr")?, required("method")?, required("data")?);
    let timeout: Duration = duration("-timeout", flags.get("timeout").map_or("30s", |t| t))?;
    let messages = wire::read_messages(data.as_ref()).map_err(|e| e.to_string())?;
    let mut channel = Channel::Grpc(GrpcChannel::connect(addr, method).await?);
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let mut response = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let code = channel
            .call(channel.payload(message), timeout, &mut response)
            .await;
        // A failed call leaves no response: 0 items and no URIs.
        if code != OK {
            response.clear();
        }
        let uris = wire::element_uris(&response);
        let items = uris.as_ref().map_or(-1, |uris| uris.len() as i64);
        let digest = wire::hex(&wire::digest(&response));
        let mut line = format!("{i} {} {items} {digest}", code_name(code));
        for uri in uris.iter().flatten() {
            line.push(' ');
            line.push_str(uri);
        }
        writeln!(out, "{line}").map_err(|err| format!("stdout: {err}"))?;
    }
    out.flush().map_err(|err| format!("stdout: {err}"))
}

fn main() -> ExitCode {
    run_tool("grpc-answers", run())
}
