//! `starling takedown` and `starling untakedown`: through a running `serve`'s HTTP admin
//! endpoint (`--server`, with the admin token), or in the configured store directly (the
//! embedded store only while no `serve` holds it; Cassandra at any time).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, bail};
use starling_store::TakedownSubject;

use crate::cli::{TakedownArgs, TakedownKind};
use crate::config::{Overrides, StoreChoice};
use crate::{Backend, StoreTask, load_config, open_any};

/// How long the admin endpoint may take to connect and to answer.
const SERVER_TIMEOUT: Duration = Duration::from_secs(30);
/// The most bytes of the admin endpoint's answer read.
const ANSWER_BYTES_MAX: u64 = 64 * 1024;

fn kind_name(kind: TakedownKind) -> &'static str {
    match kind {
        TakedownKind::Actor => "actor",
        TakedownKind::Record => "record",
        TakedownKind::Blob => "blob",
    }
}

pub(crate) fn run(args: TakedownArgs, take_down: bool) -> anyhow::Result<()> {
    let kind = kind_name(args.kind);
    let subject =
        starling_api::moderation::takedown_subject(kind, &args.subject, args.cid.as_deref())
            .map_err(anyhow::Error::msg)?;
    if !take_down && args.reference.is_some() {
        bail!("--ref is for `takedown`; `untakedown` takes none");
    }
    let reference = take_down.then(|| args.reference.clone().unwrap_or_default());
    let config = load_config(
        &args.common,
        Overrides {
            admin_token: args.admin_token.clone(),
            ..Overrides::default()
        },
    )?;
    let answer = match &args.server {
        Some(server) => {
            let Some(token) = &config.http_guard.admin_token else {
                bail!(
                    "--server needs the admin token: set STARLING_ADMIN_TOKEN (or http.admin_token)"
                );
            };
            let path = admin_path(&args, take_down);
            post(server, &path, token)?
        }
        None => {
            if config.store == StoreChoice::Embedded && !config.data_dir.exists() {
                bail!(
                    "data directory `{}` does not exist",
                    config.data_dir.display()
                );
            }
            open_any(&config)?.run(SetTakedown { subject, reference })?
        }
    };
    println!("{answer}");
    Ok(())
}

/// Writes the takedown in the store and answers its state as the HTTP endpoint does.
struct SetTakedown {
    subject: TakedownSubject,
    reference: Option<String>,
}

impl StoreTask for SetTakedown {
    type Output = String;

    fn run<S: Backend>(self, store: S) -> anyhow::Result<String> {
        starling_api::moderation::set_takedown(&store, self.subject.clone(), self.reference)
            .context("writing the takedown")?;
        let takedown_ref = store.takedown(&self.subject)?;
        store.finish()?;
        Ok(serde_json::json!({
            "taken_down": takedown_ref.is_some(),
            "takedown_ref": takedown_ref,
        })
        .to_string())
    }
}

/// Percent-encodes a query value (everything but unreserved characters, `:` and `/`).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' | b'/' => {
                out.push(char::from(byte));
            }
            byte => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

fn admin_path(args: &TakedownArgs, take_down: bool) -> String {
    let endpoint = if take_down { "takedown" } else { "untakedown" };
    let mut path = format!(
        "/v1/admin/{endpoint}?kind={}&subject={}",
        kind_name(args.kind),
        encode(&args.subject)
    );
    if let Some(cid) = &args.cid {
        path.push_str(&format!("&cid={}", encode(cid)));
    }
    if let Some(reference) = &args.reference {
        path.push_str(&format!("&ref={}", encode(reference)));
    }
    path
}

/// `POST path` to `server` (HOST:PORT) with the bearer token: the answer's body on 200, else
/// an error with the status and the body.
fn post(server: &str, path: &str, token: &str) -> anyhow::Result<String> {
    let host = server.trim_start_matches("http://").trim_end_matches('/');
    let addr = host
        .to_socket_addrs()
        .with_context(|| format!("resolving --server `{host}`"))?
        .next()
        .with_context(|| format!("--server `{host}` has no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, SERVER_TIMEOUT)
        .with_context(|| format!("connecting to `{host}`"))?;
    stream.set_read_timeout(Some(SERVER_TIMEOUT))?;
    stream.set_write_timeout(Some(SERVER_TIMEOUT))?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .with_context(|| format!("sending to `{host}`"))?;
    let mut answer = String::new();
    stream
        .take(ANSWER_BYTES_MAX)
        .read_to_string(&mut answer)
        .with_context(|| format!("reading the answer of `{host}`"))?;
    let status = answer.get(9..12).unwrap_or("???");
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    match status {
        "200" => Ok(body.to_owned()),
        status => bail!("`{host}` answered HTTP {status}: {body}"),
    }
}
