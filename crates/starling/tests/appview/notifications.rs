//! The notifications screen of the stock AppView on Starling: a scripted network where users
//! like, repost, follow, reply (a thread six posts deep), mention, quote, like and repost via a
//! repost, join a starter pack, verify, and delete (a verification too); viewers call
//! `app.bsky.notification.listNotifications` (paged, with and without reason filters, and
//! priority only) and `getUnreadCount`. Every answer must be HTTP 200 and equal what the test
//! recounts from its own events by the reference's rules.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{
    Gen, KEYS_AND_TOKENS_JS, START_US, TIMEOUT, Tokens, USERS, World, Xrpc, did, display_name,
    handle, iso_ms, private_key_hex, start, util,
};

const LIST: &str = "app.bsky.notification.listNotifications";
const UNREAD: &str = "app.bsky.notification.getUnreadCount";
const POST: &str = "app.bsky.feed.post";
const VERIFICATION: &str = "app.bsky.graph.verification";

/// Viewers whose notifications are read.
const VIEWERS: [u32; 4] = [0, 1, 2, 4];

/// DID documents for every user and a JWT per viewer for the two methods.
fn keys_and_tokens(node: &Path, seed: u64) -> (HashMap<String, Value>, Tokens) {
    let users: Vec<Value> = (0..USERS)
        .map(|u| json!({ "did": did(u), "handle": handle(u), "key": private_key_hex(seed, u) }))
        .collect();
    let pairs: Vec<(u32, &'static str)> = VIEWERS
        .iter()
        .flat_map(|&v| [(v, LIST), (v, UNREAD)])
        .collect();
    let tokens: Vec<Value> = pairs
        .iter()
        .map(|&(v, nsid)| json!({ "iss": did(v), "lxm": nsid }))
        .collect();
    let input = json!({ "users": users, "tokens": tokens, "ttl": super::TOKEN_TTL_SECS });
    let mut child = Command::new(node)
        .args(["--input-type=module", "-e", KEYS_AND_TOKENS_JS])
        .arg(util::repo_root().join("appview"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    let docs = out["docs"]
        .as_object()
        .unwrap()
        .clone()
        .into_iter()
        .collect();
    let tokens = pairs
        .into_iter()
        .zip(out["tokens"].as_array().unwrap())
        .map(|(pair, token)| (pair, token.as_str().unwrap().to_owned()))
        .collect();
    (docs, tokens)
}

/// The scripted events.
fn scenario(seed: u64) -> Vec<util::Event> {
    let mut g = Gen {
        rng: util::Rng::new(seed),
        time_us: START_US,
        events: Vec::new(),
        world: World::default(),
    };
    for user in 0..6 {
        g.account(user);
    }
    // User 4's starter pack, joined by users 6 and 8 (their profiles' first versions name it,
    // the only versions the reference notifies for).
    let list = json!({ "name": "l", "purpose": "app.bsky.graph.defs#referencelist" });
    let (list_rkey, _, _) = g.create(4, "app.bsky.graph.list", None, list);
    let list_uri = format!("at://{}/app.bsky.graph.list/{list_rkey}", did(4));
    let pack = json!({ "name": "pack", "list": list_uri });
    let (pack_rkey, pack_cid, _) = g.create(4, "app.bsky.graph.starterpack", None, pack);
    let pack_uri = format!("at://{}/app.bsky.graph.starterpack/{pack_rkey}", did(4));
    let joined = json!({ "uri": pack_uri, "cid": pack_cid });
    for user in 6..9 {
        g.account(user);
        if user != 7 {
            join_in_first_profile(&mut g, &joined);
        }
    }
    // Verifications: of 4 by 3, which stays, and of 0 by 6, deleted at the end.
    let verification = |user: u32| json!({ "subject": did(user), "handle": handle(user), "displayName": display_name(user) });
    g.create(3, VERIFICATION, None, verification(4));
    let (verification_rkey, _, _) = g.create(6, VERIFICATION, None, verification(0));
    for (author, subject) in [(1, 0), (2, 0), (3, 0), (0, 1), (0, 4)] {
        g.follow(author, subject, true);
    }
    // A thread six posts deep: the last reply reaches four levels up, not the root.
    let mut thread = vec![g.post(0, None, None, true)];
    for author in 1..=5 {
        let parent = *thread.last().unwrap();
        thread.push(g.post(author, Some(parent), None, true));
    }
    let root = thread[0];
    g.post(6, None, Some(root), true);
    g.post(2, Some(thread[2]), Some(thread[1]), true);
    let mention = |user: u32| {
        json!({ "index": { "byteStart": 0, "byteEnd": 2 },
                "features": [{ "$type": "app.bsky.richtext.facet#mention", "did": did(user) }] })
    };
    let fields = json!({ "text": "hi", "facets": [mention(0), mention(1), mention(7)] });
    g.create(7, POST, None, fields);
    for user in [1, 2, 3, 0] {
        g.like(user, root, false);
    }
    g.repost(4, root, true);
    let repost = g.world.repost_uri(4, root).unwrap();
    let repost_ref = json!({ "uri": repost, "cid": g.world.posts[root].cid });
    for (user, collection) in [(5, "app.bsky.feed.like"), (8, "app.bsky.feed.repost")] {
        let fields = json!({ "subject": g.strong_ref(root), "via": repost_ref });
        g.create(user, collection, None, fields);
    }
    // Deletes: a like, the last reply, and a follow.
    let like = g.world.like_uri(2, root).unwrap();
    g.delete(2, "app.bsky.feed.like", like.rsplit('/').next().unwrap());
    let last = &g.world.posts[thread[5]];
    let (author, rkey) = (last.author, last.rkey.clone());
    g.delete(author, POST, &rkey);
    let follow = g.world.follow_uri(3, 0).unwrap();
    g.delete(
        3,
        "app.bsky.graph.follow",
        follow.rsplit('/').next().unwrap(),
    );
    g.delete(6, VERIFICATION, &verification_rkey);
    g.events
}

/// Makes the profile `Gen::account` just created name the starter pack it joined through.
fn join_in_first_profile(g: &mut Gen, pack: &Value) {
    let event = g.events.last_mut().unwrap();
    let mut line: Value = serde_json::from_str(&event.line).unwrap();
    assert_eq!(line["commit"]["collection"], "app.bsky.actor.profile");
    line["commit"]["record"]["joinedViaStarterPack"] = pack.clone();
    event.line = line.to_string();
}

type Key = (String, String, String);

fn split(uri: &str) -> Option<Key> {
    let mut parts = uri.strip_prefix("at://")?.splitn(3, '/');
    Some((
        parts.next()?.to_owned(),
        parts.next()?.to_owned(),
        parts.next()?.to_owned(),
    ))
}

/// One notification a record made: (recipient, reason, reason subject).
type Notified = (String, &'static str, Option<String>);

/// The recount: live records with their time, who each notified when it was written, and
/// the notifications that outlive their records (a deleted verification's `verified`, and the
/// `unverified` its delete makes, at the delete's time), with their time.
#[derive(Default)]
struct Recount {
    records: BTreeMap<Key, (Value, u64)>,
    notified: BTreeMap<Key, Vec<Notified>>,
    kept: Vec<(Key, Notified, u64)>,
}

impl Recount {
    fn apply(&mut self, event: &Value) {
        if event["kind"] != "commit" {
            return;
        }
        let commit = &event["commit"];
        let did = event["did"].as_str().unwrap().to_owned();
        let key = (
            did.clone(),
            commit["collection"].as_str().unwrap().to_owned(),
            commit["rkey"].as_str().unwrap().to_owned(),
        );
        if commit["operation"] == "delete" {
            let (_, created_us) = self.records.remove(&key).unwrap();
            let notified = self.notified.remove(&key).unwrap_or_default();
            if key.1 == VERIFICATION {
                let deleted_us = event["time_us"].as_u64().unwrap();
                for (to, _, _) in notified {
                    let unverified = (to.clone(), "unverified", None);
                    self.kept
                        .push((key.clone(), (to, "verified", None), created_us));
                    self.kept.push((key.clone(), unverified, deleted_us));
                }
            }
            return;
        }
        let record = commit["record"].clone();
        let mut res: Vec<Notified> = Vec::new();
        let mut notify = |recipient: &str, reason, subject: Option<&str>, dedup: bool| {
            // The reference notifies a follow of oneself, and no other record of one's own.
            let own = recipient == did && reason != "follow";
            let again = dedup && res.iter().any(|n| n.0 == recipient);
            if !own && !again {
                res.push((recipient.to_owned(), reason, subject.map(str::to_owned)));
            }
        };
        match key.1.as_str() {
            "app.bsky.feed.like" | "app.bsky.feed.repost" => {
                let subject = record["subject"]["uri"].as_str().unwrap();
                let like = key.1.ends_with("like");
                if split(subject).unwrap().0 != did {
                    notify(
                        &split(subject).unwrap().0,
                        if like { "like" } else { "repost" },
                        Some(subject),
                        false,
                    );
                    if let Some(via) = record["via"]["uri"].as_str() {
                        let reason = if like {
                            "like-via-repost"
                        } else {
                            "repost-via-repost"
                        };
                        notify(&split(via).unwrap().0, reason, Some(via), false);
                    }
                }
            }
            "app.bsky.graph.follow" => {
                notify(record["subject"].as_str().unwrap(), "follow", None, true)
            }
            VERIFICATION => notify(record["subject"].as_str().unwrap(), "verified", None, true),
            "app.bsky.actor.profile" => {
                if let Some(pack) = record["joinedViaStarterPack"]["uri"].as_str() {
                    let pack_author = split(pack).unwrap().0;
                    notify(&pack_author, "starterpack-joined", Some(pack), true);
                }
            }
            POST => {
                for facet in record["facets"].as_array().into_iter().flatten() {
                    notify(
                        facet["features"][0]["did"].as_str().unwrap(),
                        "mention",
                        None,
                        true,
                    );
                }
                if let Some(quoted) = record["embed"]["record"]["uri"].as_str() {
                    notify(&split(quoted).unwrap().0, "quote", Some(quoted), true);
                }
                let mut next = record["reply"]["parent"]["uri"].as_str().map(str::to_owned);
                for _ in 0..4 {
                    let Some(uri) = next.take() else { break };
                    let Some((ancestor, _)) = self.records.get(&split(&uri).unwrap()) else {
                        break;
                    };
                    notify(&split(&uri).unwrap().0, "reply", Some(&uri), true);
                    next = ancestor["reply"]["parent"]["uri"]
                        .as_str()
                        .map(str::to_owned);
                }
            }
            _ => {}
        }
        let time_us = event["time_us"].as_u64().unwrap();
        self.records.insert(key.clone(), (record, time_us));
        self.notified.insert(key, res);
    }

    /// A recipient's notifications as the AppView lists them in pages of `limit`, newest
    /// first, with all reasons or those of `reasons`: uri, reason, reason subject, author,
    /// indexedAt, isRead. With no seen time the AppView takes the first notification of its
    /// first dataplane page that passes the filter as the last one seen, so that one alone is
    /// unread (`listNotifications.ts`, the skeleton's "hack").
    /// With `priority`, only notifications from accounts the recipient follows.
    fn list(
        &self,
        recipient: u32,
        reasons: Option<&[&str]>,
        limit: usize,
        priority: bool,
    ) -> Vec<Value> {
        let mut items: Vec<(u64, &str, Value)> = Vec::new();
        let live = self.notified.iter().flat_map(|(key, notified)| {
            let (_, time_us) = self.records[key];
            notified.iter().map(move |n| (key, n, time_us))
        });
        let kept = self.kept.iter().map(|(key, n, time_us)| (key, n, *time_us));
        for (key, (to, reason, subject), time_us) in live.chain(kept) {
            let subject_live = subject
                .as_ref()
                .is_none_or(|s| self.records.contains_key(&split(s).unwrap()));
            let followed = self
                .records
                .iter()
                .any(|((author, collection, _), (json, _))| {
                    *author == did(recipient)
                        && collection == "app.bsky.graph.follow"
                        && json["subject"] == key.0.as_str()
                });
            if *to == did(recipient) && subject_live && (followed || !priority) {
                let uri = format!("at://{}/{}/{}", key.0, key.1, key.2);
                let view = json!({ "uri": uri, "reason": reason, "reasonSubject": subject,
                    "author": key.0, "indexedAt": iso_ms(time_us), "isRead": true });
                items.push((time_us, reason, view));
            }
        }
        items.sort_by_key(|item| std::cmp::Reverse(item.0));
        let wanted = |reason: &str| reasons.is_none_or(|reasons| reasons.contains(&reason));
        let first_page_has_one = items.iter().take(limit).any(|item| wanted(item.1));
        let mut res: Vec<Value> = items
            .into_iter()
            .filter(|item| wanted(item.1))
            .map(|item| item.2)
            .collect();
        if first_page_has_one {
            res[0]["isRead"] = json!(false);
        }
        res
    }

    fn unread(&self, recipient: u32) -> usize {
        self.notified
            .values()
            .flatten()
            .filter(|n| n.0 == did(recipient))
            .count()
    }
}

fn project(view: &Value) -> Value {
    json!({ "uri": view["uri"], "reason": view["reason"], "reasonSubject": view["reasonSubject"],
            "author": view["author"]["did"], "indexedAt": view["indexedAt"],
            "isRead": view["isRead"] })
}

// The stock AppView's notifications on Starling, against the recount of a scripted network:
// every viewer's list in pages of three, filtered by reasons, by priority, and unread counts.
#[test]
fn the_stock_appview_lists_notifications_from_starling() {
    let seed = util::seed("the_stock_appview_lists_notifications_from_starling");
    let node = util::setup_appview();
    let events = scenario(seed);
    let mut recount = Recount::default();
    for event in &events {
        recount.apply(&serde_json::from_str(&event.line).unwrap());
    }
    let (documents, tokens) = keys_and_tokens(&node, seed);
    let mut stack = start(&node, &[], documents, events, &[]);
    let x = Xrpc {
        addr: stack.appview_addr.clone(),
        appview: &stack.appview,
        tokens,
        n_requests: std::cell::Cell::new(0),
    };
    let (mut n_items, mut n_priority) = (0, 0);
    let mut reasons_listed = std::collections::BTreeSet::new();
    for viewer in VIEWERS {
        let want = recount.list(viewer, None, 3, false);
        n_items += want.len();
        reasons_listed.extend(want.iter().map(|view| view["reason"].to_string()));
        let query = [("limit", "3".to_owned())];
        let have = x.list(Some(viewer), LIST, &query, "notifications", project);
        x.check(
            &format!("notifications of {viewer}"),
            &have,
            &Value::Array(want),
        );
        for reasons in [
            &["like", "reply"][..],
            &["follow"],
            &["mention", "quote", "like-via-repost"],
            &["starterpack-joined", "verified", "unverified"],
        ] {
            let mut query = vec![("limit", "2".to_owned())];
            query.extend(reasons.iter().map(|r| ("reasons", (*r).to_owned())));
            let have = x.list(Some(viewer), LIST, &query, "notifications", project);
            let want = recount.list(viewer, Some(reasons), 2, false);
            x.check(
                &format!("{reasons:?} notifications of {viewer}"),
                &have,
                &Value::Array(want),
            );
        }
        let query = [("limit", "2".to_owned()), ("priority", "true".to_owned())];
        let have = x.list(Some(viewer), LIST, &query, "notifications", project);
        let want = recount.list(viewer, None, 2, true);
        n_priority += want.len();
        x.check(
            &format!("priority notifications of {viewer}"),
            &have,
            &Value::Array(want),
        );
        let (status, unread) = x.get(Some(viewer), UNREAD, &[]);
        assert_eq!(status, 200, "getUnreadCount of {viewer}: {unread}");
        x.check(
            &format!("unread count of {viewer}"),
            &unread["count"],
            &json!(recount.unread(viewer)),
        );
    }
    assert!(n_items >= 20, "the scenario notifies: {n_items} items");
    assert_eq!(
        reasons_listed.len(),
        11,
        "every reason but subscribed-post is listed: {reasons_listed:?}"
    );
    assert!(
        n_priority >= 2,
        "some notifications are priority: {n_priority}"
    );
    stack.starling.terminate();
    stack.starling.wait_exit(TIMEOUT);
    stack.appview.terminate();
    stack.appview.wait_exit(TIMEOUT);
}
