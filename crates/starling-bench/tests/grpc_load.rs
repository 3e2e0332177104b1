//! `grpc-load` against small loopback servers of both wires (gRPC over h2c, and the Connect
//! protocol over HTTP/1.1), each answering a message with the message twice and an empty
//! message with NotFound. Every request index is sent exactly once, so how many calls of each
//! kind come back right, wrong or failed follows from the number of requests the tool reports.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use starling_bench::wire;
use tokio::net::TcpListener;

/// The server's answer to a request message: the message twice, or `None` (NotFound) for an
/// empty one.
fn answer(message: &[u8]) -> Option<Vec<u8>> {
    (!message.is_empty()).then(|| [message, message].concat())
}

async fn grpc_server(listener: TcpListener) {
    loop {
        let (socket, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let mut connection = h2::server::handshake(socket).await.unwrap();
            while let Some(Ok((request, mut respond))) = connection.accept().await {
                tokio::spawn(async move {
                    let mut body = request.into_body();
                    let mut frame = Vec::new();
                    while let Some(chunk) = body.data().await {
                        let chunk = chunk.unwrap();
                        body.flow_control().release_capacity(chunk.len()).unwrap();
                        frame.extend_from_slice(&chunk);
                    }
                    let head = http::Response::builder().header("content-type", "application/grpc");
                    let Some(out) = answer(&frame[5..]) else {
                        let head = head.header("grpc-status", "5").body(()).unwrap();
                        respond.send_response(head, true).unwrap();
                        return;
                    };
                    let mut send = respond
                        .send_response(head.body(()).unwrap(), false)
                        .unwrap();
                    let mut framed = vec![0];
                    framed.extend_from_slice(&(out.len() as u32).to_be_bytes());
                    framed.extend_from_slice(&out);
                    send.send_data(framed.into(), false).unwrap();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().unwrap());
                    send.send_trailers(trailers).unwrap();
                });
            }
        });
    }
}

async fn connect_server(listener: TcpListener) {
    loop {
        let (socket, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|request: http::Request<_>| async move {
                let message = BodyExt::collect(request.into_body()).await?.to_bytes();
                let response = match answer(&message) {
                    Some(out) => http::Response::new(Full::new(Bytes::from(out))),
                    None => http::Response::builder()
                        .status(404)
                        .body(Full::new(Bytes::from_static(br#"{"code":"not_found"}"#)))
                        .unwrap(),
                };
                Ok::<_, hyper::Error>(response)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

/// Runs grpc-load for a second and returns its summary's key=value pairs.
fn load(addr: &str, dir: &Path, extra: &[&str]) -> HashMap<String, String> {
    let data = dir.join("set.bin");
    let answers = dir.join("set.answers");
    let mut args = vec!["-addr", addr, "-method", "/test.Service/Echo", "-c", "4"];
    args.extend(["-duration", "1s", "-data", data.to_str().unwrap()]);
    args.extend(["-answers", answers.to_str().unwrap()]);
    args.extend(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_grpc-load"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let line = stdout
        .lines()
        .find(|l| l.starts_with("grpc_load:"))
        .unwrap();
    line.split_whitespace()
        .skip(1)
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

// Four messages: one answered as its answers line says, one whose line holds another digest,
// one with no verified answer (`-`), and an empty one the server answers with NotFound. The
// tool's codes must split its requests in that order, round-robin, on both wires.
#[test]
fn every_answer_is_judged_on_both_wires() {
    let dir = tempfile::tempdir().unwrap();
    let messages: [&[u8]; 4] = [b"right", b"wrong", b"unverified", b""];
    let mut file = Vec::new();
    for message in messages {
        file.extend_from_slice(&(message.len() as u32).to_le_bytes());
        file.extend_from_slice(message);
    }
    std::fs::write(dir.path().join("set.bin"), file).unwrap();
    let right = wire::hex(&wire::digest(&answer(b"right").unwrap()));
    let other = wire::hex(&wire::digest(b"something else"));
    let lines = format!("{right}\n{other}\n-\n{right}\n");
    std::fs::write(dir.path().join("set.answers"), lines).unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let grpc = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let connect = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addrs = [grpc.local_addr().unwrap(), connect.local_addr().unwrap()];
    runtime.spawn(grpc_server(grpc));
    runtime.spawn(connect_server(connect));

    for (addr, extra) in [(addrs[0], &[][..]), (addrs[1], &["-http1"][..])] {
        let summary = load(&addr.to_string(), dir.path(), extra);
        let requests: u64 = summary["requests"].parse().unwrap();
        assert!(
            requests >= 8,
            "{extra:?}: only {requests} requests in a second"
        );
        // How many of the indices 0..requests fall on message k of 4.
        let on = |k: u64| (requests + 3 - k) / 4;
        let mut codes = vec![format!("NotFound:{}", on(3)), format!("OK:{}", on(0))];
        codes.push(format!("WrongAnswer:{}", on(1) + on(2)));
        assert_eq!(summary["codes"], codes.join(","), "{extra:?}");
        assert_eq!(summary["ok"], on(0).to_string(), "{extra:?}");
        assert_eq!(
            summary["answers_checked"],
            (on(0) + on(1) + on(2)).to_string()
        );
        assert_eq!(summary["response_bytes_mean"], "10", "{extra:?}");
    }
}
