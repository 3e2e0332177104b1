//! Takedowns through the stock AppView on Starling: the AppView's own admin endpoint
//! (`com.atproto.admin.updateSubjectStatus`, as moderation tooling calls it, with the admin
//! password) takes a post and an account down, which calls Starling's `TakedownRecord` and
//! `TakedownActor`; then they are lifted the same way.
//!
//! The expected answers come from the answers before the takedown: after it, the viewer's
//! timeline, the thread, the notifications and the author feeds are those answers without the
//! taken-down post and without every item of the taken-down account; its profile and author
//! feed answer `AccountTakedown` and the post's own thread `NotFound`. After the lift, every
//! answer equals the one before.
//!
//! Blobs: a loopback PDS (the author's `#atproto_pds`) serves two images made by the AppView's
//! own `sharp`; through the AppView's proxy (`/blob/DID/CID` and `/img/PRESET/plain/DID/CID@jpeg`)
//! both answer 200 with the blob (or a JPEG); the one taken down answers 404 on both, as the
//! reference does once `GetBlobTakedown` says so, and the blob again once lifted. The other
//! image is the only one read through `/img/` before the takedown (the AppView caches what it
//! served, and purging that cache is the moderation service's job, not the dataplane's).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use starling_identity::stand_in::PlcStandIn;

use crate::util::{Event, FakeJetstream, Proc};
use crate::{Gen, START_US, Stack, TIMEOUT, Tokens, World, Xrpc, did, mint_keys_and_tokens, util};

/// Labels from a loopback labeler: a scenario of its own, on [`start_with`].
#[path = "labels.rs"]
mod labels;

/// `crate::start` with more flags for `starling serve` and more environment for the AppView;
/// also answers Starling's HTTP address.
fn start_with(
    node: &Path,
    documents: HashMap<String, Value>,
    events: Vec<Event>,
    serve_flags: &[&str],
    appview_env: &[(&str, &str)],
) -> (Stack, String) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let plc = runtime.block_on(PlcStandIn::start(documents)).unwrap();
    let dir = util::test_dir();
    let data_dir = dir.path().join("data");
    let last_time_us = events.last().unwrap().time_us;
    let jetstream = FakeJetstream::start(events, None, None);
    let (plc_url, jetstream_url) = (plc.url(), jetstream.url());
    let mut args: Vec<&OsStr> = [
        "serve",
        "--http-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "127.0.0.1:0",
    ]
    .map(OsStr::new)
    .to_vec();
    args.extend([OsStr::new("--data-dir"), data_dir.as_os_str()]);
    for flag in ["--plc-url", &plc_url, "--jetstream", &jetstream_url] {
        args.push(OsStr::new(flag));
    }
    args.extend(serve_flags.iter().map(OsStr::new));
    let mut starling = Proc::spawn(util::starling(args), "serve");
    let http = starling.wait_for_stdout("starling: http listening on ", TIMEOUT);
    let grpc = starling.wait_for_stdout("starling: grpc listening on ", TIMEOUT);
    let mut command = Command::new(node);
    command
        .arg(util::repo_root().join("appview/start.mjs"))
        .args(["--dataplane", &format!("http://{grpc}"), "--trace-rpcs"])
        .envs(appview_env.iter().copied());
    let appview = Proc::spawn(command, "appview");
    util::poll_until(TIMEOUT, "Starling to apply the scenario", || {
        starling.assert_healthy();
        let stats = util::http_json(&http, "/v1/stats")?;
        match stats["timelines"]["applied_cursor"].as_u64() {
            Some(seen) if seen >= last_time_us => Ok(()),
            seen => Err(format!("applied cursor {seen:?} < {last_time_us}")),
        }
    });
    let url = appview.wait_for_stdout("appview: listening on ", TIMEOUT);
    let stack = Stack {
        starling,
        appview,
        appview_addr: url.trim_start_matches("http://").to_owned(),
        _plc: plc,
        _runtime: runtime,
        _jetstream: jetstream,
        _dir: dir,
    };
    (stack, http)
}

const TIMELINE: &str = "app.bsky.feed.getTimeline";
const THREAD: &str = "app.bsky.feed.getPostThread";
const PROFILE: &str = "app.bsky.actor.getProfile";
const AUTHOR_FEED: &str = "app.bsky.feed.getAuthorFeed";
const NOTIFICATIONS: &str = "app.bsky.notification.listNotifications";
const SEARCH_ACTORS: &str = "app.bsky.actor.searchActors";
const SEARCH_POSTS: &str = "app.bsky.feed.searchPosts";
/// `admin:` and the password `appview/start.mjs` gives the AppView, in Basic auth.
const ADMIN_AUTH: &str = "Basic YWRtaW46c3RhcmxpbmctYWRtaW4=";

/// The viewer; follows 1 and 2.
const VIEWER: u32 = 0;
/// Posts the post taken down (a reply to the viewer's post) and another.
const AUTHOR: u32 = 1;
/// The account taken down: posts, and likes the viewer's post.
const TAKEN: u32 = 2;

/// Indexes of the scenario's posts: the viewer's root, the reply taken down, the author's
/// other post, the taken-down account's post.
struct Posts {
    root: usize,
    reply: usize,
    other: usize,
    taken: usize,
}

fn scenario(seed: u64) -> (Vec<util::Event>, World, Posts) {
    let mut g = Gen {
        rng: util::Rng::new(seed),
        time_us: START_US,
        events: Vec::new(),
        world: World::default(),
    };
    for user in 0..3 {
        g.account(user);
    }
    g.follow(VIEWER, AUTHOR, true);
    g.follow(VIEWER, TAKEN, true);
    g.follow(TAKEN, VIEWER, true);
    let root = g.post(VIEWER, None, None, true);
    let reply = g.post(AUTHOR, Some(root), None, true);
    let other = g.post(AUTHOR, None, None, true);
    let taken = g.post(TAKEN, Some(root), None, true);
    g.like(TAKEN, root, false);
    g.like(AUTHOR, root, false);
    let posts = Posts {
        root,
        reply,
        other,
        taken,
    };
    (g.events, g.world, posts)
}

/// POSTs `body` as JSON to the AppView's XRPC `nsid` with the admin password: the status.
fn admin_post(addr: &str, nsid: &str, body: &Value) -> u16 {
    let body = body.to_string();
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!(
        "POST /xrpc/{nsid} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {ADMIN_AUTH}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response[9..12].parse().unwrap()
}

fn set_takedowns(addr: &str, world: &World, posts: &Posts, applied: bool) {
    let post = &world.posts[posts.reply];
    let subjects = [
        json!({ "$type": "com.atproto.repo.strongRef", "uri": world.post_uri(posts.reply), "cid": post.cid }),
        json!({ "$type": "com.atproto.admin.defs#repoRef", "did": did(TAKEN) }),
    ];
    for subject in subjects {
        let body = json!({ "subject": subject, "takedown": { "applied": applied, "ref": "starling-e2e" } });
        let status = admin_post(addr, "com.atproto.admin.updateSubjectStatus", &body);
        assert_eq!(status, 200, "updateSubjectStatus {body}");
    }
}

/// What the viewer sees: (name, status, answer) of every screen the test compares.
fn screens(x: &Xrpc, world: &World, posts: &Posts) -> Vec<(String, u16, Value)> {
    let mut res = Vec::new();
    let mut add = |name: String, (status, value): (u16, Value)| res.push((name, status, value));
    add("timeline".into(), x.get(Some(VIEWER), TIMELINE, &[]));
    for (name, post) in [
        ("thread of the root", posts.root),
        ("thread of the reply", posts.reply),
    ] {
        let uri = world.post_uri(post);
        add(name.into(), x.get(Some(VIEWER), THREAD, &[("uri", uri)]));
    }
    add(
        "notifications".into(),
        x.get(Some(VIEWER), NOTIFICATIONS, &[]),
    );
    add(
        "search posts".into(),
        x.get(Some(VIEWER), SEARCH_POSTS, &[("q", "post".into())]),
    );
    add(
        "search actors".into(),
        x.get(Some(VIEWER), SEARCH_ACTORS, &[("q", "user".into())]),
    );
    for user in [AUTHOR, TAKEN] {
        add(
            format!("profile {user}"),
            x.get(Some(VIEWER), PROFILE, &[("actor", did(user))]),
        );
        add(
            format!("feed {user}"),
            x.get(Some(VIEWER), AUTHOR_FEED, &[("actor", did(user))]),
        );
    }
    res
}

/// Whether a JSON value mentions `needle` (a URI or a DID) anywhere.
fn mentions(value: &Value, needle: &str) -> bool {
    match value {
        Value::String(text) => text.contains(needle),
        Value::Array(items) => items.iter().any(|v| mentions(v, needle)),
        Value::Object(map) => map.values().any(|v| mentions(v, needle)),
        _ => false,
    }
}

/// `before` without the items that mention the taken-down post or account.
fn without(before: &Value, hidden: &[String]) -> Value {
    let mut res = before.clone();
    for key in ["feed", "notifications", "posts", "actors"] {
        if let Some(items) = res.get_mut(key).and_then(Value::as_array_mut) {
            items.retain(|item| !hidden.iter().any(|h| mentions(item, h)));
        }
    }
    if let Some(replies) = res
        .get_mut("thread")
        .and_then(|thread| thread.get_mut("replies"))
        .and_then(Value::as_array_mut)
    {
        replies.retain(|reply| !hidden.iter().any(|h| mentions(&reply["post"]["uri"], h)));
    }
    res
}

/// Checks the answers with the takedowns applied against those before (`AUTHOR` is 1 and
/// `TAKEN` 2 in the names).
fn check_hidden(
    before: &[(String, u16, Value)],
    after: &[(String, u16, Value)],
    hidden: &[String],
) {
    for ((name, status, old), (_, new_status, new)) in before.iter().zip(after) {
        assert_eq!(*status, 200, "{name} before the takedown: {old}");
        match name.as_str() {
            "profile 2" => {
                assert_eq!(*new_status, 400, "{name}: {new}");
                assert_eq!(new["error"], "AccountTakedown", "{name}: {new}");
            }
            "feed 2" => {
                assert_eq!(*new_status, 400, "{name}: {new}");
                assert_eq!(new["message"], "Profile not found", "{name}: {new}");
            }
            "thread of the reply" => {
                assert_eq!(*new_status, 400, "{name}: {new}");
                assert_eq!(new["error"], "NotFound", "{name}: {new}");
            }
            "profile 1" => assert_eq!(new, old, "{name}"),
            _ => {
                assert_eq!(*new_status, 200, "{name}: {new}");
                let want = without(old, hidden);
                assert_ne!(&want, old, "{name}: the scenario shows what is taken down");
                assert_eq!(new, &want, "{name}");
            }
        }
    }
}

/// Prints `[{cid, hex}]` for two small PNGs made by the AppView's `sharp`, with their CIDs
/// (CIDv1, raw, sha2-256) as `@atproto/common` computes them.
const BLOBS_JS: &str = r#"
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
const { importInstalled } = await import(pathToFileURL(join(process.argv[1], 'lib.mjs')).href)
const sharp = (await importInstalled('sharp')).default
const { sha256RawToCid } = await importInstalled('@atproto/common')
const out = []
for (const r of [200, 20]) {
  const png = await sharp({ create: { width: 16, height: 16, channels: 3, background: { r, g: 90, b: 40 } } }).png().toBuffer()
  out.push({ cid: sha256RawToCid(createHash('sha256').update(png).digest()).toString(), hex: png.toString('hex') })
}
process.stdout.write(JSON.stringify(out) + '\n')
"#;

/// (CID, bytes) of the two test images.
fn blobs(node: &Path) -> Vec<(String, Vec<u8>)> {
    let dir = util::repo_root().join("appview");
    let out = util::node_eval(node, BLOBS_JS, &[dir.as_os_str()], "");
    let out: Value = serde_json::from_str(&out).unwrap();
    out.as_array()
        .unwrap()
        .iter()
        .map(|blob| {
            let hex = blob["hex"].as_str().unwrap();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (blob["cid"].as_str().unwrap().to_owned(), bytes)
        })
        .collect()
}

/// A loopback PDS answering `com.atproto.sync.getBlob` for `blobs` (by CID), 404 otherwise.
fn pds(blobs: Vec<(String, Vec<u8>)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head);
            let path = head.split_whitespace().nth(1).unwrap_or_default();
            let blob = blobs.iter().find(|(cid, _)| {
                path.starts_with("/xrpc/com.atproto.sync.getBlob") && path.contains(cid.as_str())
            });
            let (status, kind, body) = match blob {
                Some((_, bytes)) => ("200 OK", "image/png", bytes.clone()),
                None => (
                    "404 Not Found",
                    "application/json",
                    br#"{"error":"BlobNotFound"}"#.to_vec(),
                ),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    url
}

/// GET `path`: the status and the `content-type` (plain HTTP/1.1, body not read).
fn status_and_type(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response).to_ascii_lowercase();
    let content_type = text
        .lines()
        .find_map(|line| line.strip_prefix("content-type: "))
        .unwrap_or_default()
        .to_owned();
    (text[9..12].parse().unwrap(), content_type)
}

fn set_blob_takedown(addr: &str, cid: &str, applied: bool) {
    let subject =
        json!({ "$type": "com.atproto.admin.defs#repoBlobRef", "did": did(AUTHOR), "cid": cid });
    let body =
        json!({ "subject": subject, "takedown": { "applied": applied, "ref": "starling-e2e" } });
    let status = admin_post(addr, "com.atproto.admin.updateSubjectStatus", &body);
    assert_eq!(status, 200, "updateSubjectStatus {body}");
}

/// The blob proxy and the image proxy, before, during and after a takedown of the second blob.
fn check_blobs(addr: &str, blobs: &[(String, Vec<u8>)]) {
    let blob_path = |cid: &str| format!("/blob/{}/{cid}", did(AUTHOR));
    let img_path = |cid: &str| format!("/img/feed_thumbnail/plain/{}/{cid}@jpeg", did(AUTHOR));
    let (shown, taken) = (&blobs[0], &blobs[1]);
    for (cid, bytes) in blobs {
        let (status, body) = util::http_get_with(addr, &blob_path(cid), &[]).unwrap();
        assert_eq!(status, 200, "{cid}: {body}");
        assert_eq!(body, String::from_utf8_lossy(bytes), "{cid}");
    }
    assert_eq!(
        status_and_type(addr, &img_path(&shown.0)),
        (200, "image/jpeg".to_owned())
    );
    set_blob_takedown(addr, &taken.0, true);
    let (status, body) = util::http_get_with(addr, &blob_path(&taken.0), &[]).unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("Blob not found"), "{body}");
    assert_eq!(status_and_type(addr, &img_path(&taken.0)).0, 404);
    let (status, _) = util::http_get_with(addr, &blob_path(&shown.0), &[]).unwrap();
    assert_eq!(status, 200);
    set_blob_takedown(addr, &taken.0, false);
    let (status, body) = util::http_get_with(addr, &blob_path(&taken.0), &[]).unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, String::from_utf8_lossy(&taken.1));
}

fn tokens_for(node: &Path, seed: u64) -> (HashMap<String, Value>, Tokens) {
    let pairs = [
        TIMELINE,
        THREAD,
        PROFILE,
        AUTHOR_FEED,
        NOTIFICATIONS,
        SEARCH_POSTS,
        SEARCH_ACTORS,
    ]
    .into_iter()
    .map(|nsid| (VIEWER, nsid))
    .collect();
    mint_keys_and_tokens(node, seed, 3, pairs)
}

// A post and an account taken down through the AppView's admin endpoint disappear from the
// viewer's timeline, thread, notifications, search, profile and author feed; lifted, all is
// back. A
// blob taken down is refused by the AppView's blob and image proxies, and served once lifted.
#[test]
fn the_stock_appview_hides_what_starling_takes_down() {
    let seed = util::seed("the_stock_appview_hides_what_starling_takes_down");
    let node = util::setup_appview();
    let (events, world, posts) = scenario(seed);
    let (mut documents, tokens) = tokens_for(&node, seed);
    let blobs = blobs(&node);
    let pds_url = pds(blobs.clone());
    documents.get_mut(&did(AUTHOR)).unwrap()["service"] = json!([
        { "id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": pds_url },
    ]);
    // The AppView fetches blobs only from public HTTPS hosts unless told otherwise.
    let env = [("BSKY_DISABLE_SSRF_PROTECTION", "true")];
    let (mut stack, _) = start_with(&node, documents, events, &[], &env);
    let x = Xrpc {
        addr: stack.appview_addr.clone(),
        appview: &stack.appview,
        tokens,
        n_requests: std::cell::Cell::new(0),
    };
    // Search answers once the index has committed every post (it commits each second).
    util::poll_until(TIMEOUT, "every post to be searchable", || {
        let (_, found) = x.get(Some(VIEWER), SEARCH_POSTS, &[("q", "post".into())]);
        let n = found["posts"].as_array().map_or(0, Vec::len);
        match n == world.posts.len() {
            true => Ok(()),
            false => Err(format!("{n} of {} posts: {found}", world.posts.len())),
        }
    });
    let before = screens(&x, &world, &posts);
    assert!(
        mentions(&before[0].2, &world.post_uri(posts.taken)),
        "{}",
        before[0].2
    );
    assert!(mentions(&before[0].2, &world.post_uri(posts.other)));
    set_takedowns(&stack.appview_addr, &world, &posts, true);
    let hidden = [world.post_uri(posts.reply), did(TAKEN)];
    check_hidden(&before, &screens(&x, &world, &posts), &hidden);
    set_takedowns(&stack.appview_addr, &world, &posts, false);
    let after = screens(&x, &world, &posts);
    for ((name, status, old), (_, new_status, new)) in before.iter().zip(&after) {
        assert_eq!((status, old), (new_status, new), "{name} after the lift");
    }
    check_blobs(&stack.appview_addr, &blobs);
    stack.starling.terminate();
    stack.starling.wait_exit(TIMEOUT);
    stack.appview.terminate();
    stack.appview.wait_exit(TIMEOUT);
}
