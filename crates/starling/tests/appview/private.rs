//! Each user's private state end to end: the stock AppView writes it to a real bsync (on a
//! throwaway PostgreSQL, `appview/bsync.mjs`), Starling's bsync consumer (`serve --bsync-url`)
//! reads it back, and the AppView's answers show it.
//!
//! Scenario: viewer A follows M and N, who post; A mutes M (`muteActor`), mutes the thread of
//! one of N's posts (`muteThread`), bookmarks another (`createBookmark`), subscribes to N's
//! posts (`putActivitySubscription`), sets notification preferences (`putPreferencesV2`) and
//! marks notifications seen (`updateSeen`, which bsync fans out to Starling's
//! `UpdateNotificationSeen`). Every read must answer 200 and equal what the test works out
//! from the scenario and those writes: `getMutes`, A's timeline before and after the mute (M's
//! posts gone), `getProfile` of M (`viewer.muted`), the thread (`viewer.threadMuted`), the
//! bookmarked post (`viewer.bookmarked`, `bookmarkCount`), `getBookmarks`,
//! `listActivitySubscriptions`, `getPreferences`, and `GetNotificationSeen` on Starling itself.
//! M and N like a post of A's, and N posts once A has subscribed to N's posts (the stand-in
//! Jetstream holds that post back until then): `listNotifications` shows N's like and the
//! `subscribed-post` and leaves out the muted M, and `getUnreadCount` counts what is newer than
//! each `updateSeen` (mutes included, as the reference counts them).
//! Writes reach Starling through bsync's long-polled scans, so each read is polled until it
//! matches or a deadline passes.

use super::*;

/// Users of this scenario: A (the viewer), M (muted) and N (followed, bookmarked).
const PA: u32 = 0;
const PM: u32 = 1;
const PN: u32 = 2;
const PRIVATE_USERS: u32 = 3;
const BSYNC_API_KEY: &str = "starling-test-bsync-key";

const GET_MUTES: &str = "app.bsky.graph.getMutes";
const GET_BOOKMARKS: &str = "app.bsky.bookmark.getBookmarks";
const LIST_SUBSCRIPTIONS: &str = "app.bsky.notification.listActivitySubscriptions";
const GET_PREFERENCES: &str = "app.bsky.notification.getPreferences";
const MUTE_ACTOR: &str = "app.bsky.graph.muteActor";
const MUTE_THREAD: &str = "app.bsky.graph.muteThread";
const CREATE_BOOKMARK: &str = "app.bsky.bookmark.createBookmark";
const PUT_SUBSCRIPTION: &str = "app.bsky.notification.putActivitySubscription";
const PUT_PREFERENCES: &str = "app.bsky.notification.putPreferencesV2";
const UPDATE_SEEN: &str = "app.bsky.notification.updateSeen";
const LIST_NOTIFICATIONS: &str = "app.bsky.notification.listNotifications";
const UNREAD_COUNT: &str = "app.bsky.notification.getUnreadCount";

const PRIVATE_NSIDS: [&str; 15] = [
    TIMELINE,
    PROFILE,
    THREAD,
    GET_MUTES,
    GET_BOOKMARKS,
    LIST_SUBSCRIPTIONS,
    GET_PREFERENCES,
    MUTE_ACTOR,
    MUTE_THREAD,
    CREATE_BOOKMARK,
    PUT_SUBSCRIPTION,
    PUT_PREFERENCES,
    UPDATE_SEEN,
    LIST_NOTIFICATIONS,
    UNREAD_COUNT,
];

/// Calls one RPC on Starling's gRPC address (h2c) with the installed AppView's generated
/// client and prints the response as JSON. `argv[1]`: the harness directory, `[2]`: the
/// address, `[3]`: the method (lowerCamelCase), `[4]`: the request as JSON.
const RPC_JS: &str = r#"
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
const [dir, url, method, json] = process.argv.slice(1)
const { importInstalled, importInstalledFile } = await import(pathToFileURL(join(dir, 'lib.mjs')).href)
const { createClient } = await importInstalled('@connectrpc/connect')
const { createGrpcTransport } = await importInstalled('@connectrpc/connect-node')
const { Service } = await importInstalledFile('@atproto/bsky/dist/proto/bsky_connect.js')
const client = createClient(Service, createGrpcTransport({ baseUrl: url, httpVersion: '2' }))
const res = await client[method](Service.methods[method].I.fromJsonString(json))
process.stdout.write(res.toJsonString() + '\n')
process.exit(0)
"#;

/// One RPC on Starling's gRPC address `grpc_addr`, through [`RPC_JS`]; the answer as JSON.
fn rpc(node: &Path, grpc_addr: &str, method: &str, request: &Value) -> Value {
    let dir = util::repo_root().join("appview");
    let url = format!("http://{grpc_addr}");
    let request = request.to_string();
    let args = [
        dir.as_os_str(),
        OsStr::new(&url),
        OsStr::new(method),
        OsStr::new(&request),
    ];
    serde_json::from_str(&util::node_eval(node, RPC_JS, &args, "")).unwrap()
}

/// A post held back from the stand-in Jetstream until A has subscribed to its author.
struct HeldPost {
    event: Event,
    uri: String,
    time_us: u64,
}

/// The scenario's events: three accounts, A follows M and N, two posts each; then M and N
/// (in that order) like a post of A's; then N's post that A's subscription hears of, held
/// back (and left out of the world the other checks read).
fn private_scenario(seed: u64) -> (Vec<Event>, World, HeldPost) {
    let mut g = Gen {
        rng: Rng::new(seed),
        time_us: START_US,
        events: Vec::new(),
        world: World::default(),
    };
    for user in 0..PRIVATE_USERS {
        g.account(user);
    }
    g.follow(PA, PM, true);
    g.follow(PA, PN, true);
    for author in [PM, PN, PM, PN] {
        g.post(author, None, None, true);
    }
    let liked = g.post(PA, None, None, true);
    g.like(PM, liked, false);
    g.like(PN, liked, false);
    let held = g.post(PN, None, None, true);
    let held = HeldPost {
        event: g.events.pop().unwrap(),
        uri: g.world.post_uri(held),
        time_us: g.world.posts.pop().unwrap().time_us,
    };
    (g.events, g.world, held)
}

/// A plain HTTP/1.1 POST of a JSON body with a bearer token; the status and the body.
fn post_json(addr: &str, path: &str, token: &str, body: &Value) -> (u16, String) {
    use std::io::{Read, Write};
    let body = body.to_string();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, body.to_owned())
}

/// A free loopback port, for a server that must be named before it starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The bsync process, stopped with SIGTERM even when the test fails: it stops its PostgreSQL
/// then, which a kill would leave running.
struct Bsync(Proc);

impl Drop for Bsync {
    fn drop(&mut self) {
        if self.0.try_wait().is_none() {
            self.0.terminate();
            // No panic here (the test may be unwinding already); a kill follows if it hangs.
            let _ = self.0.run_until(Instant::now() + TIMEOUT);
        }
    }
}

/// bsync, Starling (consuming bsync) and the AppView (writing to bsync), started in that order.
/// Fields drop in order: the AppView and Starling before bsync.
struct PrivateStack {
    starling: Proc,
    appview: Proc,
    appview_addr: String,
    grpc_addr: String,
    _plc: PlcStandIn,
    _runtime: tokio::runtime::Runtime,
    jetstream: FakeJetstream,
    bsync: Bsync,
    _dir: tempfile::TempDir,
}

/// Starts the stack on `events`; the stand-in Jetstream sends `held` only on the connection
/// after [`FakeJetstream::drop_first_connection`].
fn start_private(
    node: &Path,
    documents: HashMap<String, Value>,
    mut events: Vec<Event>,
    held: Event,
) -> PrivateStack {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let plc = runtime.block_on(PlcStandIn::start(documents)).unwrap();
    let dir = util::test_dir();
    // Starling's gRPC address is named first: bsync fans seen times out to it.
    let grpc_addr = format!("127.0.0.1:{}", free_port());
    let mut command = Command::new(node);
    command
        .arg(util::repo_root().join("appview/bsync.mjs"))
        .arg("--pg-dir")
        .arg(dir.path().join("pg"))
        .args([
            "--api-key",
            BSYNC_API_KEY,
            "--dataplane",
            &format!("http://{grpc_addr}"),
        ]);
    let bsync = Bsync(Proc::spawn(command, "bsync"));
    let bsync_url = bsync.0.wait_for_stdout("bsync: listening on ", TIMEOUT);
    let last_time_us = events.last().unwrap().time_us;
    let n_first = events.len();
    events.push(held);
    let jetstream = FakeJetstream::start(events, None, Some(n_first));
    let data_dir = dir.path().join("data");
    let (plc_url, jetstream_url) = (plc.url(), jetstream.url());
    let args = [
        OsStr::new("serve"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--http-addr"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--grpc-addr"),
        OsStr::new(&grpc_addr),
        OsStr::new("--plc-url"),
        OsStr::new(&plc_url),
        OsStr::new("--jetstream"),
        OsStr::new(&jetstream_url),
        OsStr::new("--bsync-url"),
        OsStr::new(&bsync_url),
        OsStr::new("--bsync-api-key"),
        OsStr::new(BSYNC_API_KEY),
    ];
    let mut starling = Proc::spawn(util::starling(args), "serve");
    let http = starling.wait_for_stdout("starling: http listening on ", TIMEOUT);
    starling.wait_for_stdout("starling: grpc listening on ", TIMEOUT);
    let mut command = Command::new(node);
    command
        .arg(util::repo_root().join("appview/start.mjs"))
        .args([
            "--dataplane",
            &format!("http://{grpc_addr}"),
            "--trace-rpcs",
        ])
        .env("BSKY_BSYNC_URL", &bsync_url)
        .env("BSKY_BSYNC_API_KEY", BSYNC_API_KEY)
        .env("BSKY_BSYNC_HTTP_VERSION", "1.1");
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
    PrivateStack {
        bsync,
        starling,
        appview,
        appview_addr: url.trim_start_matches("http://").to_owned(),
        grpc_addr,
        _plc: plc,
        _runtime: runtime,
        jetstream,
        _dir: dir,
    }
}

impl Xrpc<'_> {
    /// POSTs a procedure as viewer A; it must answer 200.
    #[track_caller]
    fn procedure(&self, nsid: &'static str, body: Value) {
        let token = &self.tokens[&(PA, nsid)];
        let (status, answer) = post_json(&self.addr, &format!("/xrpc/{nsid}"), token, &body);
        assert_eq!(
            status,
            200,
            "{nsid} {body}: {answer}\n{}",
            self.failed_rpcs()
        );
    }

    /// GETs as viewer A until `project` of the 200 answer equals `want` (the write behind it
    /// travels through bsync); fails with the last answer at the deadline.
    #[track_caller]
    fn eventually(
        &self,
        nsid: &'static str,
        query: &[(&str, String)],
        project: impl Fn(&Value) -> Value,
        want: &Value,
    ) {
        let what = format!("{nsid} {query:?} to answer {want}");
        util::poll_until(TIMEOUT, &what, || {
            let (status, answer) = self.get(Some(PA), nsid, query);
            assert_eq!(
                status,
                200,
                "{nsid} {query:?}: {answer}\n{}",
                self.failed_rpcs()
            );
            let have = project(&answer);
            if &have == want {
                Ok(())
            } else {
                Err(format!("{have}\n{}", self.failed_rpcs()))
            }
        });
    }
}

/// A's timeline as post URIs, newest first: every post by the users A follows (and A), minus
/// the muted ones' posts.
fn timeline_uris(world: &World, muted: &[u32]) -> Value {
    let followed: BTreeSet<u32> = world
        .follows
        .iter()
        .filter(|link| link.author == PA && link.live)
        .map(|link| link.subject as u32)
        .chain([PA])
        .collect();
    let mut posts: Vec<(u64, String)> = (0..world.posts.len())
        .filter(|&post| {
            let author = world.posts[post].author;
            followed.contains(&author) && !muted.contains(&author)
        })
        .map(|post| (world.posts[post].time_us, world.post_uri(post)))
        .collect();
    posts.sort_by(|a, b| b.cmp(a));
    Value::Array(posts.into_iter().map(|(_, uri)| json!(uri)).collect())
}

fn feed_uris(answer: &Value) -> Value {
    Value::Array(
        answer["feed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["post"]["uri"].clone())
            .collect(),
    )
}

/// The `n`th post of `author`.
fn post_of(world: &World, author: u32, n: usize) -> usize {
    (0..world.posts.len())
        .filter(|&post| world.posts[post].author == author)
        .nth(n)
        .unwrap()
}

fn check_mutes(x: &Xrpc, world: &World) {
    // Muting M takes M's posts out of A's timeline and shows on M's profile.
    let before = timeline_uris(world, &[]);
    let after = timeline_uris(world, &[PM]);
    assert!(
        before != after,
        "the scenario gives M no posts in A's timeline"
    );
    x.eventually(TIMELINE, &[], feed_uris, &before);
    x.procedure(MUTE_ACTOR, json!({ "actor": did(PM) }));
    let mute_dids = |answer: &Value| {
        Value::Array(
            answer["mutes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["did"].clone())
                .collect(),
        )
    };
    x.eventually(GET_MUTES, &[], mute_dids, &json!([did(PM)]));
    x.eventually(TIMELINE, &[], feed_uris, &after);
    let muted = |answer: &Value| answer["viewer"]["muted"].clone();
    x.eventually(PROFILE, &[("actor", did(PM))], muted, &json!(true));
    x.eventually(PROFILE, &[("actor", did(PN))], muted, &json!(false));
}

fn check_thread_mute_and_bookmark(x: &Xrpc, world: &World) {
    // A thread mute and a bookmark show in the posts' viewer state.
    let (muted_root, bookmarked) = (post_of(world, PN, 0), post_of(world, PN, 1));
    x.procedure(MUTE_THREAD, json!({ "root": world.post_uri(muted_root) }));
    let thread_muted = |answer: &Value| answer["thread"]["post"]["viewer"]["threadMuted"].clone();
    let thread = |post: usize| vec![("uri", world.post_uri(post))];
    x.eventually(THREAD, &thread(muted_root), thread_muted, &json!(true));
    x.eventually(THREAD, &thread(bookmarked), thread_muted, &json!(false));
    let bookmark = json!({ "uri": world.post_uri(bookmarked), "cid": world.posts[bookmarked].cid });
    x.procedure(CREATE_BOOKMARK, bookmark);
    let bookmark_state = |answer: &Value| {
        let post = &answer["thread"]["post"];
        json!([post["viewer"]["bookmarked"], post["bookmarkCount"]])
    };
    x.eventually(
        THREAD,
        &thread(bookmarked),
        bookmark_state,
        &json!([true, 1]),
    );
    x.eventually(
        THREAD,
        &thread(muted_root),
        bookmark_state,
        &json!([false, 0]),
    );
    let bookmark_uris = |answer: &Value| {
        Value::Array(
            answer["bookmarks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["item"]["uri"].clone())
                .collect(),
        )
    };
    x.eventually(
        GET_BOOKMARKS,
        &[],
        bookmark_uris,
        &json!([world.post_uri(bookmarked)]),
    );
}

fn check_subscription_and_preferences(x: &Xrpc) {
    // An activity subscription and notification preferences read back.
    let subscription = json!({ "post": true, "reply": false });
    x.procedure(
        PUT_SUBSCRIPTION,
        json!({ "subject": did(PN), "activitySubscription": subscription }),
    );
    let subscribed = |answer: &Value| {
        Value::Array(
            answer["subscriptions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| json!([p["did"], p["viewer"]["activitySubscription"]]))
                .collect(),
        )
    };
    x.eventually(
        LIST_SUBSCRIPTIONS,
        &[],
        subscribed,
        &json!([[did(PN), subscription]]),
    );
    x.procedure(
        PUT_PREFERENCES,
        json!({ "like": { "include": "follows", "list": true, "push": false } }),
    );
    let like = |answer: &Value| answer["preferences"]["like"].clone();
    x.eventually(
        GET_PREFERENCES,
        &[],
        like,
        &json!({ "include": "follows", "list": true, "push": false }),
    );
}

/// The first whole millisecond after `time_us`, as the AppView writes a seen time.
fn seen_after(time_us: u64) -> (u64, String) {
    let ms = time_us / 1_000 + 1;
    let text = sample::datetime(ms * 1_000);
    (ms * 1_000, format!("{}Z", &text[..23]))
}

/// Marks notifications seen at `seen_at`; the unread count must become `unread` once the
/// write has travelled through bsync.
fn mark_seen(x: &Xrpc, seen_at: &str, unread: usize) {
    x.procedure(UPDATE_SEEN, json!({ "seenAt": seen_at }));
    let count = |answer: &Value| answer["count"].clone();
    x.eventually(UNREAD_COUNT, &[], count, &json!(unread));
}

fn check_notifications_and_seen(
    x: &Xrpc,
    world: &World,
    held: &HeldPost,
    node: &Path,
    grpc_addr: &str,
) {
    // A's notifications: M's like (muted by now), N's, and N's subscribed post, in that order.
    let liked = post_of(world, PA, 0);
    let likes: Vec<&Link> = [PM, PN]
        .iter()
        .map(|&user| world.likes.iter().find(|l| l.author == user).unwrap())
        .collect();
    let count = |answer: &Value| answer["count"].clone();
    x.eventually(UNREAD_COUNT, &[], count, &json!(3));
    // updateSeen goes AppView -> bsync -> Starling's UpdateNotificationSeen; between the two
    // likes, then after everything.
    let (between_us, between) = seen_after(likes[0].time_us);
    assert!(
        between_us < likes[1].time_us,
        "the two likes share a millisecond"
    );
    mark_seen(x, &between, 2);
    let n_like = world.like_uri(PN, liked).unwrap();
    let unmuted = json!([
        { "uri": held.uri, "reason": "subscribed-post", "isRead": false },
        { "uri": n_like, "reason": "like", "isRead": false },
    ]);
    let project = |answer: &Value| {
        let items = answer["notifications"].as_array().unwrap().iter();
        let items =
            items.map(|n| json!({ "uri": n["uri"], "reason": n["reason"], "isRead": n["isRead"] }));
        Value::Array(items.collect())
    };
    x.eventually(LIST_NOTIFICATIONS, &[], project, &unmuted);
    let (_, after) = seen_after(held.time_us);
    mark_seen(x, &after, 0);
    let seen = rpc(
        node,
        grpc_addr,
        "getNotificationSeen",
        &json!({ "actorDid": did(PA) }),
    );
    assert_eq!(
        seen["timestamp"],
        json!(after.replace(".000Z", "Z")),
        "GetNotificationSeen: {seen}"
    );
}

// The stock AppView writes private state to a real bsync; Starling consumes it and serves it
// back: mutes, thread mutes, bookmarks, activity subscriptions, preferences, the seen time.
#[test]
fn the_stock_appview_reads_private_state_through_bsync() {
    let seed = util::seed("the_stock_appview_reads_private_state_through_bsync");
    // PostgreSQL for bsync: installed by setup-reference.sh when missing (as compare/ needs).
    let node = setup_bsync_and_appview();
    let (events, world, held) = private_scenario(seed);
    let pairs = PRIVATE_NSIDS.iter().map(|&nsid| (PA, nsid)).collect();
    let (documents, tokens) = mint_keys_and_tokens(&node, seed, PRIVATE_USERS, pairs);
    let mut stack = start_private(&node, documents, events, held.event.clone());
    let x = Xrpc {
        addr: stack.appview_addr.clone(),
        appview: &stack.appview,
        tokens,
        n_requests: Cell::new(0),
    };
    check_mutes(&x, &world);
    check_thread_mute_and_bookmark(&x, &world);
    check_subscription_and_preferences(&x);
    // The subscription has reached Starling: N's held-back post comes now.
    stack.jetstream.drop_first_connection();
    check_notifications_and_seen(&x, &world, &held, &node, &stack.grpc_addr);
    eprintln!(
        "appview private-state test: {} requests",
        x.n_requests.get()
    );

    for proc in [&mut stack.appview, &mut stack.starling, &mut stack.bsync.0] {
        proc.terminate();
        proc.wait_exit(TIMEOUT);
    }
}

/// PostgreSQL for bsync (installed by setup-reference.sh when missing, as compare/ needs it),
/// and the AppView with bsync; the Node 22 binary.
fn setup_bsync_and_appview() -> PathBuf {
    util::run_ok(Command::new(
        util::repo_root().join("scripts/setup-reference.sh"),
    ));
    util::setup_appview()
}

/// The value of the Prometheus sample `name{labels}` in `/metrics`, if exported.
fn metric(http: &str, sample: &str) -> Result<f64, String> {
    let (status, text) = util::http_get(http, "/metrics").map_err(|err| err.to_string())?;
    assert_eq!(status, 200, "/metrics: {text}");
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse().ok())
        .ok_or_else(|| format!("no `{sample}` in /metrics yet"))
}

/// bsync's Connect JSON API: one call with the test's API key; it must answer 200.
fn bsync_call(bsync_url: &str, method: &str, body: &Value) {
    let addr = bsync_url.trim_start_matches("http://");
    let path = format!("/bsync.Service/{method}");
    let (status, answer) = post_json(addr, &path, BSYNC_API_KEY, body);
    assert_eq!(status, 200, "bsync {method} {body}: {answer}");
}

/// Writes a mute, a malformed bookmark (no subject) and a bookmark to bsync; (actor, muted,
/// bookmarked post).
fn write_to_bsync(bsync_url: &str) -> (String, String, &'static str) {
    let (a, b) = (did(PA), did(PM));
    let post = "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaaa2";
    let payload = |json: Value| util::base64(json.to_string().as_bytes());
    bsync_call(
        bsync_url,
        "AddMuteOperation",
        &json!({ "type": "TYPE_ADD", "actorDid": a, "subject": b }),
    );
    for (key, subject) in [
        ("3kaaaaaaaaab2", json!({})),
        ("3kaaaaaaaaac2", json!({ "uri": post, "cid": "bafyx" })),
    ] {
        let op = json!({
            "actorDid": a, "namespace": "app.bsky.bookmark.defs#bookmark", "key": key,
            "method": "METHOD_CREATE", "payload": payload(json!({ "subject": subject })),
        });
        bsync_call(bsync_url, "PutOperation", &op);
    }
    (a, b, post)
}

/// `starling serve` on `data_dir`, consuming the bsync at `bsync_url`; its HTTP address.
fn serve_with_bsync(data_dir: &Path, grpc_addr: &str, bsync_url: &str) -> (Proc, String) {
    let args = [
        OsStr::new("serve"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--http-addr"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--grpc-addr"),
        OsStr::new(grpc_addr),
        OsStr::new("--bsync-url"),
        OsStr::new(bsync_url),
        OsStr::new("--bsync-api-key"),
        OsStr::new(BSYNC_API_KEY),
    ];
    let starling = Proc::spawn(util::starling(args), "serve");
    let http = starling.wait_for_stdout("starling: http listening on ", TIMEOUT);
    starling.wait_for_stdout("starling: grpc listening on ", TIMEOUT);
    (starling, http)
}

/// Waits until every scan of a bsync that is down has failed twice and the gauge says it is
/// down, with Starling healthy all along.
fn wait_bsync_down(starling: &mut Proc, http: &str) {
    for stream in ["mutes", "notifications", "operations"] {
        let failures = format!("starling_ingest_bsync_failures_total{{stream=\"{stream}\"}}");
        let up = format!("starling_ingest_bsync_up{{stream=\"{stream}\"}}");
        util::poll_until(
            TIMEOUT,
            "scans of a bsync that is down to fail twice",
            || {
                starling.assert_healthy();
                match (metric(http, &failures)?, metric(http, &up)?) {
                    (n, up) if n >= 2.0 && up == 0.0 => Ok(()),
                    seen => Err(format!("{failures}, {up}: {seen:?}")),
                }
            },
        );
    }
}

/// Polls Starling's `GetMutes` of `actor` until it lists `want` (DIDs, newest first).
fn wait_mutes(node: &Path, grpc_addr: &str, actor: &str, want: &[&str]) {
    let want: Vec<Value> = want.iter().map(|did| json!({ "did": did })).collect();
    util::poll_until(TIMEOUT, "the mutes to be applied", || {
        match rpc(node, grpc_addr, "getMutes", &json!({ "actorDid": actor }))["mutes"].clone() {
            seen if seen == json!(want) => Ok(()),
            seen => Err(seen.to_string()),
        }
    });
}

// Starling started while bsync is down keeps serving, retries each scan with backoff and
// shows bsync down in `starling_ingest_bsync_up`; once bsync is up on that address, what was
// written there is applied (a malformed operation counted and skipped, the rest kept). After a
// kill -9, a restart resumes from the stored cursors: what was written meanwhile is applied
// and nothing is applied twice (the bookmark count stays 1).
#[test]
fn starling_waits_out_bsync_and_loses_nothing() {
    let node = setup_bsync_and_appview();
    let dir = util::test_dir();
    let bsync_port = free_port();
    let bsync_url = format!("http://127.0.0.1:{bsync_port}");
    let grpc_addr = format!("127.0.0.1:{}", free_port());
    let data_dir = dir.path().join("data");
    let (mut starling, http) = serve_with_bsync(&data_dir, &grpc_addr, &bsync_url);
    wait_bsync_down(&mut starling, &http);

    let mut command = Command::new(&node);
    command
        .arg(util::repo_root().join("appview/bsync.mjs"))
        .arg("--pg-dir")
        .arg(dir.path().join("pg"))
        .args([
            "--api-key",
            BSYNC_API_KEY,
            "--port",
            &bsync_port.to_string(),
        ]);
    let mut bsync = Bsync(Proc::spawn(command, "bsync"));
    bsync.0.wait_for_stdout("bsync: listening on ", TIMEOUT);
    let (a, b, post) = write_to_bsync(&bsync_url);
    let malformed =
        "starling_ingest_bsync_operations_total{stream=\"operations\",outcome=\"malformed\"}";
    util::poll_until(TIMEOUT, "the malformed bookmark to be counted", || {
        starling.assert_healthy();
        match metric(&http, malformed)? {
            1.0 => Ok(()),
            n => Err(format!("{malformed} {n}")),
        }
    });
    wait_mutes(&node, &grpc_addr, &a, &[&b]);
    let bookmarks = rpc(
        &node,
        &grpc_addr,
        "getActorBookmarks",
        &json!({ "actorDid": a }),
    );
    assert_eq!(
        bookmarks["bookmarks"],
        json!([{ "key": "3kaaaaaaaaac2", "subject": post }])
    );

    starling.kill9();
    let c = did(PN);
    bsync_call(
        &bsync_url,
        "AddMuteOperation",
        &json!({ "type": "TYPE_ADD", "actorDid": a, "subject": c }),
    );
    let (mut starling, _) = serve_with_bsync(&data_dir, &grpc_addr, &bsync_url);
    wait_mutes(&node, &grpc_addr, &a, &[&c, &b]);
    let counts = rpc(
        &node,
        &grpc_addr,
        "getInteractionCounts",
        &json!({ "refs": [{ "uri": post }] }),
    );
    assert_eq!(counts["bookmarks"], json!([1]), "{counts}");
    starling.terminate();
    starling.wait_exit(TIMEOUT);
    bsync.0.terminate();
    bsync.0.wait_exit(TIMEOUT);
}
