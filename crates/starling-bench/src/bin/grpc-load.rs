//! grpc-load: a lean closed-loop load generator for unary gRPC calls, every answer checked.
//!
//! ```text
//! grpc-load -addr 127.0.0.1:PORT -method /bsky.Service/GetTimeline -data FILE -c 32 \
//!           [-connections 1] [-duration 30s] [-timeout 5s] [-http1] [-expect FILE]
//!           [-answers FILE] [-percentiles FILE]
//! ```
//!
//! It sends request messages that are already encoded (FILE: see `starling_bench::wire`),
//! round-robin over the file, and does no message work, so that on a small machine it takes as
//! little as it can from the server it measures. C workers each keep one call in flight,
//! sharing CONNECTIONS HTTP/2 connections, on one thread; a worker starts no call after the
//! duration ends, so no call is cut off. Prints one `grpc_load:` line of key=value pairs
//! (latencies in milliseconds; response bytes are the mean encoded response size).
//!
//! `-http1` is for servers without HTTP/2, such as the reference dataplane of `@atproto/bsky`:
//! each call is a Connect-protocol unary request over HTTP/1.1, one in flight per connection,
//! so each worker keeps its own keep-alive connection and `-connections` is ignored.
//!
//! `-expect FILE` checks every OK response's size, and `-answers FILE` its content: a response
//! whose size differs counts as the code `WrongCount`, one whose digest differs (or any
//! response to a message with no verified answer) as `WrongAnswer`, not as OK, and
//! `answers_checked` counts the responses compared. The first wrong one is reported on stderr.
//! `-percentiles FILE` writes the latency distribution, one `QUANTILE MILLISECONDS` line per
//! permille (and the top 0.1% per 1/10,000), for charts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use starling_bench::cli::{dash_flags, duration, number};
use starling_bench::grpc_client::{Channel, ConnectChannel, GrpcChannel, OK, code_name, run_tool};
use starling_bench::wire::{self, Answer, Expectation};

const USAGE: &str = "usage: grpc-load -addr HOST:PORT -method /pkg.Service/Method -data FILE -c N \
                     [-connections N] [-duration D] [-timeout D] [-http1] [-expect FILE] \
                     [-answers FILE] [-percentiles FILE]";

struct Options {
    addr: String,
    method: String,
    data: PathBuf,
    concurrency: usize,
    connections: usize,
    duration: Duration,
    timeout: Duration,
    http1: bool,
    expect: Option<PathBuf>,
    answers: Option<PathBuf>,
    percentiles: Option<PathBuf>,
}

fn options() -> Result<Options, String> {
    let known = [
        "addr",
        "method",
        "data",
        "c",
        "connections",
        "duration",
        "timeout",
        "expect",
        "answers",
        "percentiles",
    ];
    let flags = dash_flags(std::env::args().skip(1), &known, &["http1"])?;
    let text = |name: &str| flags.get(name).cloned();
    let required = |name: &str| text(name).ok_or_else(|| format!("-{name} is required"));
    let count = |name: &str, default: usize| -> Result<usize, String> {
        let value = text(name).map_or(Ok(default), |v| number(&format!("-{name}"), &v))?;
        if value == 0 {
            return Err(format!("-{name} must be at least 1"));
        }
        Ok(value)
    };
    let time = |name: &str, default: &str| {
        duration(&format!("-{name}"), &text(name).unwrap_or(default.into()))
    };
    Ok(Options {
        addr: required("addr")?,
        method: required("method")?,
        data: required("data")?.into(),
        concurrency: count("c", 8)?,
        connections: count("connections", 1)?,
        duration: time("duration", "30s")?,
        timeout: time("timeout", "5s")?,
        http1: text("http1").is_some_and(|v| v == "true"),
        expect: text("expect").map(PathBuf::from),
        answers: text("answers").map(PathBuf::from),
        percentiles: text("percentiles").map(PathBuf::from),
    })
}

/// What every OK response is held to; either may be absent.
struct Checks {
    expectations: Option<Vec<Expectation>>,
    answers: Option<Vec<Answer>>,
}

/// A wrong OK response: the code it counts as, and why.
struct Wrong {
    code: &'static str,
    why: String,
}

impl Checks {
    fn read(options: &Options, messages: usize) -> Result<Checks, String> {
        let sized = |path: &PathBuf, lines: usize| {
            if lines == messages {
                Ok(())
            } else {
                Err(format!(
                    "{} has {lines} lines for {messages} messages",
                    path.display()
                ))
            }
        };
        let mut checks = Checks {
            expectations: None,
            answers: None,
        };
        if let Some(path) = &options.expect {
            let expectations = wire::read_expectations(path).map_err(|e| e.to_string())?;
            sized(path, expectations.len())?;
            checks.expectations = Some(expectations);
        }
        if let Some(path) = &options.answers {
            let answers = wire::read_answers(path).map_err(|e| e.to_string())?;
            sized(path, answers.len())?;
            checks.answers = Some(answers);
        }
        Ok(checks)
    }

    /// Judges the OK response to message `idx`; `checked` says whether its digest was compared.
    fn judge(&self, idx: usize, response: &[u8], checked: &mut u64) -> Option<Wrong> {
        if let Some(want) = self.expectations.as_ref().and_then(|all| all.get(idx)) {
            let got = wire::count_field(response, want.field, want.packed);
            if got != Some(want.count) {
                let got = got.map_or("no parse".to_owned(), |n| n.to_string());
                let why = format!(
                    "message {idx}: field {} holds {got}, expected {}",
                    want.field, want.count
                );
                return Some(Wrong {
                    code: "WrongCount",
                    why,
                });
            }
        }
        let want = self.answers.as_ref().and_then(|all| all.get(idx))?;
        *checked += 1;
        let (right, got) = want.check(response);
        let why = match want {
            _ if right => return None,
            Answer::Unknown => format!("message {idx}: no verified answer (`-`)"),
            Answer::Exact(want) | Answer::Unordered(want) => format!(
                "message {idx}: answer sha256 {}, expected {}",
                wire::hex(&got[..8]),
                wire::hex(&want[..8])
            ),
        };
        Some(Wrong {
            code: "WrongAnswer",
            why,
        })
    }
}

/// What one worker saw.
#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    codes: BTreeMap<&'static str, u64>,
    response_bytes: u64,
    answers_checked: u64,
    first_wrong: Option<String>,
}

struct Shared {
    payloads: Vec<Bytes>,
    checks: Checks,
    next: AtomicUsize,
    timeout: Duration,
}

async fn worker(shared: Arc<Shared>, mut channel: Channel, deadline: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut response = Vec::new();
    while Instant::now() < deadline {
        let idx = shared.next.fetch_add(1, Ordering::Relaxed) % shared.payloads.len();
        let payload = shared.payloads.get(idx).cloned().unwrap_or_default();
        let started = Instant::now();
        let code = channel.call(payload, shared.timeout, &mut response).await;
        tally.latencies.push(started.elapsed());
        if code == OK {
            if let Some(wrong) = shared
                .checks
                .judge(idx, &response, &mut tally.answers_checked)
            {
                *tally.codes.entry(wrong.code).or_default() += 1;
                tally.first_wrong.get_or_insert(wrong.why);
                continue;
            }
            tally.response_bytes += response.len() as u64;
        }
        *tally.codes.entry(code_name(code)).or_default() += 1;
    }
    tally
}

async fn channels(options: &Options) -> Result<Vec<Channel>, String> {
    if options.http1 {
        let channel = || Channel::Connect(ConnectChannel::new(&options.addr, &options.method));
        return Ok((0..options.concurrency).map(|_| channel()).collect());
    }
    let mut connections = Vec::new();
    for _ in 0..options.connections {
        connections.push(GrpcChannel::connect(&options.addr, &options.method).await?);
    }
    let shared = connections.iter().cycle().take(options.concurrency);
    Ok(shared
        .map(|channel| Channel::Grpc(channel.clone()))
        .collect())
}

async fn run(options: Options) -> Result<(), String> {
    let messages = wire::read_messages(&options.data).map_err(|e| e.to_string())?;
    let checks = Checks::read(&options, messages.len())?;
    let channels = channels(&options).await?;
    let first = channels.first().ok_or("no workers")?;
    let payloads = messages.iter().map(|m| first.payload(m)).collect();
    let shared = Arc::new(Shared {
        payloads,
        checks,
        next: AtomicUsize::new(0),
        timeout: options.timeout,
    });
    let started = Instant::now();
    let deadline = started + options.duration;
    let workers: Vec<_> = channels
        .into_iter()
        .map(|channel| tokio::spawn(worker(shared.clone(), channel, deadline)))
        .collect();
    let mut total = Tally::default();
    for worker in workers {
        let tally = worker
            .await
            .map_err(|err| format!("a worker failed: {err}"))?;
        if let Some(why) = &tally.first_wrong {
            eprintln!("grpc-load: wrong response: {why}");
        }
        total.latencies.extend(tally.latencies);
        for (code, n) in tally.codes {
            *total.codes.entry(code).or_default() += n;
        }
        total.response_bytes += tally.response_bytes;
        total.answers_checked += tally.answers_checked;
    }
    report(&options, &mut total, started.elapsed().as_secs_f64())
}

fn report(options: &Options, total: &mut Tally, seconds: f64) -> Result<(), String> {
    let all = &mut total.latencies;
    all.sort_unstable();
    let ms = |q: f64| {
        let idx = ((q * all.len() as f64) as usize).min(all.len().saturating_sub(1));
        all.get(idx).map_or(0.0, |d| d.as_micros() as f64 / 1000.0)
    };
    if let Some(path) = &options.percentiles {
        let permille = (0..999).map(|q| f64::from(q) / 1000.0);
        let top = (9990..=10000).map(|q| f64::from(q) / 10000.0);
        let lines: String = permille
            .chain(top)
            .map(|q| format!("{q:.4} {:.3}\n", ms(q)))
            .collect();
        std::fs::write(path, lines).map_err(|err| format!("{}: {err}", path.display()))?;
    }
    let ok = total.codes.get("OK").copied().unwrap_or(0);
    let requests = all.len() as u64;
    let codes: Vec<String> = total
        .codes
        .iter()
        .map(|(code, n)| format!("{code}:{n}"))
        .collect();
    let mean_bytes = if ok > 0 {
        total.response_bytes as f64 / ok as f64
    } else {
        0.0
    };
    println!(
        "grpc_load: method={} c={} connections={} requests={requests} seconds={seconds:.2} \
         rps={:.0} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} p999_ms={:.3} max_ms={:.3} ok={ok} \
         errors={} codes={} response_bytes_mean={mean_bytes:.0} answers_checked={}",
        options.method,
        options.concurrency,
        if options.http1 {
            options.concurrency
        } else {
            options.connections
        },
        requests as f64 / seconds,
        ms(0.50),
        ms(0.90),
        ms(0.99),
        ms(0.999),
        ms(1.0),
        requests - ok,
        codes.join(","),
        total.answers_checked,
    );
    Ok(())
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(err) => {
            eprintln!("grpc-load: {err}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    run_tool("grpc-load", run(options))
}
