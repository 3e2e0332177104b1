//! Labels from a labeler through the stock AppView on Starling: a loopback labeler serves
//! `com.atproto.label.subscribeLabels` frames made and signed by the AppView's own libraries
//! (`@ipld/dag-cbor`, `@atproto/crypto`'s secp256k1 keypair, as Ozone signs them), with the
//! labeler's DID document (its key as `#atproto_label`) in the PLC stand-in; `starling serve
//! --labeler` consumes the stream, and a viewer asks the AppView with
//! `atproto-accept-labelers` naming the labeler.
//!
//! Checks: a label on a post and one on an account show on the post view and the profile; a
//! label with a bad signature and a frame that is not CBOR show nowhere and are counted in
//! `starling_ingest_labels_total`; a later negation removes the account's label, the post's
//! stays. (Resuming from the stored cursor without duplicates is `starling-ingest`'s
//! `tests/labels.rs`.)

use std::net::TcpListener;
use std::time::Duration;

use serde_json::{Value, json};

use super::start_with;
use crate::{Gen, START_US, TIMEOUT, World, did, mint_keys_and_tokens, private_key_hex, util};

const PROFILE: &str = "app.bsky.actor.getProfile";
const POSTS: &str = "app.bsky.feed.getPosts";
const VIEWER: u32 = 0;
const AUTHOR: u32 = 1;
const LABELER: u32 = 3;

/// Reads `{key, frames: [{seq, labels: [{uri, val, neg, bad}]} | {garbage: true}], src}` on
/// stdin and prints the frames as hex, one per line: header and body in DAG-CBOR, each label
/// signed over the DAG-CBOR of the label without `sig` (flipped for `bad`).
const FRAMES_JS: &str = r#"
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
const { importInstalled } = await import(pathToFileURL(join(process.argv[1], 'lib.mjs')).href)
const { Secp256k1Keypair } = await importInstalled('@atproto/crypto')
const cbor = await importInstalled('@ipld/dag-cbor')
let text = ''
for await (const chunk of process.stdin) text += chunk
const input = JSON.parse(text)
const keypair = await Secp256k1Keypair.import(input.key)
for (const frame of input.frames) {
  if (frame.garbage) { process.stdout.write(Buffer.from('not a cbor frame').toString('hex') + '\n'); continue }
  const labels = []
  for (const l of frame.labels) {
    const unsigned = { ver: 1, src: input.src, uri: l.uri, val: l.val, cts: '2026-08-01T00:00:00.000Z', ...(l.neg ? { neg: true } : {}) }
    const sig = await keypair.sign(cbor.encode(unsigned))
    if (l.bad) sig[0] ^= 1
    labels.push({ ...unsigned, sig })
  }
  const header = cbor.encode({ op: 1, t: '#labels' })
  const body = cbor.encode({ seq: frame.seq, labels })
  process.stdout.write(Buffer.concat([header, body]).toString('hex') + '\n')
}
"#;

fn frames(node: &std::path::Path, key: &str, frames: Value) -> Vec<Vec<u8>> {
    let input = json!({ "key": key, "src": did(LABELER), "frames": frames });
    let dir = util::repo_root().join("appview");
    let out = util::node_eval(node, FRAMES_JS, &[dir.as_os_str()], &input.to_string());
    out.lines()
        .map(|line| {
            (0..line.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect()
}

/// A loopback labeler: one connection at a time, each sent the frames `rx` gives.
fn labeler(rx: std::sync::mpsc::Receiver<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut socket = tokio_tungstenite::tungstenite::accept(stream).unwrap();
        for frame in rx {
            socket
                .send(tokio_tungstenite::tungstenite::Message::Binary(
                    frame.into(),
                ))
                .unwrap();
        }
    });
    url
}

fn scenario(seed: u64) -> (Vec<util::Event>, World, usize) {
    let mut g = Gen {
        rng: util::Rng::new(seed),
        time_us: START_US,
        events: Vec::new(),
        world: World::default(),
    };
    for user in 0..4 {
        g.account(user);
    }
    let post = g.post(AUTHOR, None, None, true);
    (g.events, g.world, post)
}

/// The label values on the post and on the author's profile, as the viewer sees them.
fn seen(
    addr: &str,
    token_posts: &str,
    token_profile: &str,
    post_uri: &str,
) -> (Vec<String>, Vec<String>) {
    let accept = did(LABELER);
    let get = |path: String, token: &str| -> Value {
        let auth = format!("Bearer {token}");
        let headers = [
            ("Authorization", auth.as_str()),
            ("atproto-accept-labelers", accept.as_str()),
        ];
        let (status, body) = util::http_get_with(addr, &path, &headers).unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    let vals = |labels: &Value| -> Vec<String> {
        let mut vals: Vec<String> = labels
            .as_array()
            .map(|labels| {
                labels
                    .iter()
                    .inspect(|l| assert_eq!(l["src"], did(LABELER), "{l}"))
                    .map(|l| l["val"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        vals.sort();
        vals
    };
    let posts = get(
        format!("/xrpc/{POSTS}?uris={}", crate::escape(post_uri)),
        token_posts,
    );
    let profile = get(
        format!("/xrpc/{PROFILE}?actor={}", did(AUTHOR)),
        token_profile,
    );
    (vals(&posts["posts"][0]["labels"]), vals(&profile["labels"]))
}

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check() {
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `starling_ingest_labels_total{outcome}` on Starling's `/metrics`.
fn counted(http: &str, outcome: &str) -> u64 {
    let (_, text) = util::http_get_with(http, "/metrics", &[]).unwrap();
    let series = format!("starling_ingest_labels_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

// Labels and a negation from a loopback labeler appear on a post and a profile through the
// AppView; a forged label and a malformed frame are dropped and counted.
#[test]
fn the_stock_appview_shows_labels_from_a_labeler() {
    let seed = util::seed("the_stock_appview_shows_labels_from_a_labeler");
    let node = util::setup_appview();
    let (events, world, post) = scenario(seed);
    let pairs = vec![(VIEWER, POSTS), (VIEWER, PROFILE)];
    let (mut documents, tokens) = mint_keys_and_tokens(&node, seed, 4, pairs);
    // The labeler's key is its signing key, declared as `#atproto_label` too.
    let labeler_doc = documents.get_mut(&did(LABELER)).unwrap();
    let mut method = labeler_doc["verificationMethod"][0].clone();
    method["id"] = json!(format!("{}#atproto_label", did(LABELER)));
    labeler_doc["verificationMethod"]
        .as_array_mut()
        .unwrap()
        .push(method);
    let post_uri = world.post_uri(post);
    let key = private_key_hex(seed, LABELER);
    let first = frames(
        &node,
        &key,
        json!([
            { "seq": 1, "labels": [{ "uri": post_uri, "val": "porn" }, { "uri": did(AUTHOR), "val": "spam" }] },
            { "seq": 2, "labels": [{ "uri": post_uri, "val": "forged", "bad": true }] },
            { "garbage": true },
        ]),
    );
    let negation = frames(
        &node,
        &key,
        json!([{ "seq": 4, "labels": [{ "uri": did(AUTHOR), "val": "spam", "neg": true }] }]),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let url = labeler(rx);
    for frame in first {
        tx.send(frame).unwrap();
    }
    let (mut stack, http_addr) = start_with(&node, documents, events, &["--labeler", &url], &[]);
    let (posts_token, profile_token) = (&tokens[&(VIEWER, POSTS)], &tokens[&(VIEWER, PROFILE)]);
    let addr = stack.appview_addr.clone();
    let want = (vec!["porn".to_owned()], vec!["spam".to_owned()]);
    wait_for("the labels to show", || {
        seen(&addr, posts_token, profile_token, &post_uri) == want
    });
    wait_for("the malformed frame to be counted", || {
        counted(&http_addr, "malformed") == 1
    });
    assert_eq!(counted(&http_addr, "bad_signature"), 1);
    assert_eq!(counted(&http_addr, "applied"), 2);
    for frame in negation {
        tx.send(frame).unwrap();
    }
    let want = (vec!["porn".to_owned()], Vec::new());
    wait_for("the negation to show", || {
        seen(&addr, posts_token, profile_token, &post_uri) == want
    });
    assert_eq!(counted(&http_addr, "negated"), 1);
    stack.starling.terminate();
    stack.starling.wait_exit(TIMEOUT);
    stack.appview.terminate();
    stack.appview.wait_exit(TIMEOUT);
}
