//! The notifications model: who each live record notified, worked out from the model's records
//! when the record was written, and read back as the dataplane serves them.
//!
//! Written from the reference dataplane's indexing plugins (like, repost, follow, post), not from
//! the store's code: a like or repost notifies the subject's author and the `via` repost's author,
//! and nobody when the subject is the liker's own; a follow notifies its subject, even the follower
//! themself; a post notifies its mentions, the quoted post's author, then the authors of up to four
//! stored ancestors, then the author's activity subscribers who asked for posts (or for replies,
//! when it is one), each account once and never the author. A notification whose reason subject is
//! gone is not served, but still counts as unread.

use std::collections::BTreeMap;

use serde_json::Value;
use starling_core::ActorId;
use starling_store::{BsyncStream, NotificationReason, PrivateOp, Store};

use std::collections::BTreeSet;

use starling_store::EmbeddedStore;

use super::keyspace::FreshKeyspace;
use super::{DIDS, GraphMirror, Model, RKEYS, Slot, apply_lines};

/// Record slots of the model, by (DID, collection, rkey).
pub type Records = BTreeMap<(String, String, String), Slot>;

/// One notification a record made when it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notified {
    pub recipient: String,
    pub reason: NotificationReason,
    /// The ancestor's level for a reply (1 = the parent), else 0.
    pub height: u8,
}

const POST: &str = "app.bsky.feed.post";

fn split(uri: &str) -> Option<(String, String, String)> {
    let rest = uri.strip_prefix("at://")?;
    let mut parts = rest.splitn(3, '/');
    Some((
        parts.next()?.to_owned(),
        parts.next()?.to_owned(),
        parts.next()?.to_owned(),
    ))
}

fn live(records: &Records, uri: &str) -> Option<Value> {
    let key = split(uri)?;
    let json = records.get(&key)?.json.as_ref()?;
    serde_json::from_str(json).ok()
}

/// The notifications a record of `key` with this JSON makes when it is written, given the
/// records stored before it and the private state then: every one the rules give, less those
/// about a post in a thread the recipient mutes.
pub fn derive(
    records: &Records,
    private: &super::private::Model,
    key: &(String, String, String),
    record: &Value,
) -> Vec<Notified> {
    let mut res = derive_all(records, private, key, record);
    res.retain(|n| {
        thread_root(records, record, n)
            .is_none_or(|root| !private.thread_muted(&n.recipient, &root))
    });
    res
}

/// The root of the thread a notification is about: a liked, reposted or quoted post's (itself
/// when it is no reply; none when it is not stored), a reply's own; none for other reasons.
fn thread_root(records: &Records, record: &Value, n: &Notified) -> Option<String> {
    let root_of = |uri: &str| {
        let post = live(records, uri)?;
        Some(
            post["reply"]["root"]["uri"]
                .as_str()
                .unwrap_or(uri)
                .to_owned(),
        )
    };
    match n.reason {
        NotificationReason::Like | NotificationReason::Repost => {
            let subject = record["subject"]["uri"].as_str()?;
            (split(subject)?.1 == POST).then(|| root_of(subject))?
        }
        NotificationReason::Quote => {
            let embed = &record["embed"];
            root_of(
                embed["record"]["uri"]
                    .as_str()
                    .or(embed["record"]["record"]["uri"].as_str())?,
            )
        }
        NotificationReason::Reply => Some(record["reply"]["root"]["uri"].as_str()?.to_owned()),
        _ => None,
    }
}

/// [`derive`] before thread mutes.
fn derive_all(
    records: &Records,
    private: &super::private::Model,
    key: &(String, String, String),
    record: &Value,
) -> Vec<Notified> {
    let (did, collection, _) = key;
    let mut res = Vec::new();
    let push = |res: &mut Vec<Notified>, recipient: &str, reason, height| {
        if recipient != did && !res.iter().any(|n: &Notified| n.recipient == recipient) {
            res.push(Notified {
                recipient: recipient.to_owned(),
                reason,
                height,
            });
        }
    };
    match collection.as_str() {
        "app.bsky.feed.like" | "app.bsky.feed.repost" => {
            let like = collection == "app.bsky.feed.like";
            let Some((subject_did, ..)) = record["subject"]["uri"].as_str().and_then(split) else {
                return res;
            };
            if subject_did == *did {
                return res;
            }
            let (reason, via_reason) = if like {
                (NotificationReason::Like, NotificationReason::LikeViaRepost)
            } else {
                (
                    NotificationReason::Repost,
                    NotificationReason::RepostViaRepost,
                )
            };
            res.push(Notified {
                recipient: subject_did,
                reason,
                height: 0,
            });
            if let Some((via_did, ..)) = record["via"]["uri"].as_str().and_then(split)
                && via_did != *did
            {
                res.push(Notified {
                    recipient: via_did,
                    reason: via_reason,
                    height: 0,
                });
            }
        }
        "app.bsky.graph.follow" => {
            // No self check: the reference notifies a follow of oneself.
            if let Some(subject) = record["subject"].as_str() {
                res.push(Notified {
                    recipient: subject.to_owned(),
                    reason: NotificationReason::Follow,
                    height: 0,
                });
            }
        }
        "app.bsky.graph.verification" | "app.bsky.actor.profile" => {
            if let Some((recipient, reason)) = single_target(collection, record) {
                push(&mut res, &recipient, reason, 0);
            }
        }
        "app.bsky.feed.post" => derive_post(records, private, key, record, &mut res, push),
        _ => {}
    }
    res
}

/// The notifications of a post (see [`derive`]), pushed onto `res` through `push`.
fn derive_post(
    records: &Records,
    private: &super::private::Model,
    key: &(String, String, String),
    record: &Value,
    res: &mut Vec<Notified>,
    push: impl Fn(&mut Vec<Notified>, &str, NotificationReason, u8),
) {
    let did = &key.0;
    for facet in record["facets"].as_array().into_iter().flatten() {
        for feature in facet["features"].as_array().into_iter().flatten() {
            if feature["$type"] == "app.bsky.richtext.facet#mention"
                && let Some(mentioned) = feature["did"].as_str()
            {
                push(res, mentioned, NotificationReason::Mention, 0);
            }
        }
    }
    let embed = &record["embed"];
    let quoted = embed["record"]["uri"]
        .as_str()
        .or(embed["record"]["record"]["uri"].as_str());
    if let Some((quoted_did, quoted_collection, _)) = quoted.and_then(split)
        && quoted_collection == POST
    {
        push(res, &quoted_did, NotificationReason::Quote, 0);
    }
    let mut next = record["reply"]["parent"]["uri"].as_str().map(str::to_owned);
    let mut height = 0;
    while let Some(uri) = next.take()
        && height < 4
    {
        let Some(ancestor_key) = split(&uri).filter(|k| k.1 == POST) else {
            break;
        };
        if ancestor_key == *key {
            break;
        }
        let Some(ancestor) = live(records, &uri) else {
            break;
        };
        height += 1;
        push(res, &ancestor_key.0, NotificationReason::Reply, height);
        next = ancestor["reply"]["parent"]["uri"]
            .as_str()
            .map(str::to_owned);
    }
    let is_reply = record["reply"]["parent"]["uri"].is_string();
    for (owner, post, reply) in private.subscribers(did) {
        if (is_reply && reply) || (!is_reply && post) {
            push(res, &owner, NotificationReason::SubscribedPost, 0);
        }
    }
}

/// The one account a verification (its subject) or a profile (its starter pack's author)
/// notifies, and why.
fn single_target(collection: &str, record: &Value) -> Option<(String, NotificationReason)> {
    if collection == "app.bsky.graph.verification" {
        let subject = record["subject"].as_str()?;
        return Some((subject.to_owned(), NotificationReason::Verified));
    }
    let pack = record["joinedViaStarterPack"]["uri"].as_str();
    let (pack_did, ..) = pack.and_then(split)?;
    Some((pack_did, NotificationReason::StarterpackJoined))
}

/// A notification that outlives its record: a verification's, which the reference keeps when
/// the verification is deleted or replaced, adding an `unverified` one at that time
/// (`verification.ts`, `notifsForDelete`).
#[derive(Clone, Debug)]
pub struct Kept {
    pub recipient: String,
    pub author: String,
    pub sort_at: i64,
    pub key: (String, String, String),
    pub reason: NotificationReason,
}

/// What a record's notifications leave behind when a commit at `time_us` deletes or replaces
/// it: for a live verification, its `verified` notification and an `unverified` one.
pub fn kept_on_removal(key: &(String, String, String), slot: &Slot, time_us: i64) -> Vec<Kept> {
    if key.1 != "app.bsky.graph.verification" || slot.json.is_none() {
        return Vec::new();
    }
    let mut res = Vec::new();
    for notified in &slot.notified {
        for (reason, sort_at) in [
            (NotificationReason::Verified, slot.sort_at),
            (NotificationReason::Unverified, time_us),
        ] {
            res.push(Kept {
                recipient: notified.recipient.clone(),
                author: key.0.clone(),
                sort_at,
                key: key.clone(),
                reason,
            });
        }
    }
    res
}

/// A notification as served: (sort_at, record URI, reason, reason subject).
pub type Served = (i64, String, NotificationReason, Option<String>);

/// The reason subject of a notification of the record at `uri`, resolved against the records
/// now: `Some(None)` for reasons without one, `None` when it is gone (not served).
fn subject(records: &Records, record: &Value, notified: &Notified) -> Option<Option<String>> {
    let first = match notified.reason {
        NotificationReason::Like | NotificationReason::Repost => &record["subject"]["uri"],
        NotificationReason::LikeViaRepost | NotificationReason::RepostViaRepost => {
            &record["via"]["uri"]
        }
        NotificationReason::Quote => {
            let embed = &record["embed"];
            if embed["record"]["uri"].is_string() {
                &embed["record"]["uri"]
            } else {
                &embed["record"]["record"]["uri"]
            }
        }
        NotificationReason::Reply => &record["reply"]["parent"]["uri"],
        NotificationReason::StarterpackJoined => &record["joinedViaStarterPack"]["uri"],
        _ => return Some(None),
    };
    let mut uri = first.as_str()?.to_owned();
    for _ in 1..notified.height {
        let ancestor = live(records, &uri)?;
        uri = ancestor["reply"]["parent"]["uri"].as_str()?.to_owned();
    }
    live(records, &uri)?;
    Some(Some(uri))
}

/// Every recipient's notifications: all of them with their sort_at (what counts as unread),
/// and the ones served, newest first by sort_at. A kept notification counts as unread only
/// while a record is live at its URI (the reference's unread count joins the record), and is
/// served while its author's account is not deleted.
pub fn expected(model: &Model) -> BTreeMap<String, (Vec<i64>, Vec<Served>)> {
    let records = &model.records;
    let mut res: BTreeMap<String, (Vec<i64>, Vec<Served>)> = BTreeMap::new();
    for kept in &model.kept {
        let entry = res.entry(kept.recipient.clone()).or_default();
        if records
            .get(&kept.key)
            .is_some_and(|slot| slot.json.is_some())
        {
            entry.0.push(kept.sort_at);
        }
        if !model.deleted.contains(&kept.author) {
            let (did, collection, rkey) = &kept.key;
            let uri = format!("at://{did}/{collection}/{rkey}");
            entry.1.push((kept.sort_at, uri, kept.reason, None));
        }
    }
    for ((did, collection, rkey), slot) in records {
        let Some(json) = &slot.json else { continue };
        let record: Value = serde_json::from_str(json).unwrap();
        let uri = format!("at://{did}/{collection}/{rkey}");
        for notified in &slot.notified {
            let entry = res.entry(notified.recipient.clone()).or_default();
            entry.0.push(slot.sort_at);
            if let Some(subject) = subject(records, &record, notified) {
                entry
                    .1
                    .push((slot.sort_at, uri.clone(), notified.reason, subject));
            }
        }
    }
    for (times, served) in res.values_mut() {
        times.sort_unstable_by(|a, b| b.cmp(a));
        served.sort_by(|a, b| b.cmp(a));
    }
    res
}

/// [`check`] for every recipient `model` notified, right after a batch's commit: through the
/// heads the batches before filled, once the batch's write is done (entries are read from the
/// engine, not from a write in flight).
pub fn check_after_batch<S: Store>(store: &S, model: &Model) {
    store.sync().unwrap();
    let recipients: Vec<String> = expected(model).into_keys().collect();
    check(store, model, &recipients);
}

/// Reads every recipient's notifications whole and in pages of two, and their unread counts
/// for a few seen times, comparing with the model.
pub fn check<S: Store>(store: &S, model: &Model, dids: &[String]) {
    let expected = expected(model);
    for did in dids {
        let Some(actor) = store.actor_id(did) else {
            assert!(!expected.contains_key(did), "{did} is notified but unknown");
            continue;
        };
        let (times, want) = expected.get(did).cloned().unwrap_or_default();
        let mut whole = Vec::new();
        let stopped = store
            .notifications(actor, None, usize::MAX, &mut |n| {
                whole.push(n);
                true
            })
            .unwrap();
        assert_eq!(stopped, None, "{did}: the whole scan ends");
        let served = |n: &starling_store::Notification| -> Served {
            (
                n.sort_at_us,
                n.uri.clone(),
                n.reason,
                n.reason_subject.clone(),
            )
        };
        let mut have: Vec<Served> = whole.iter().map(served).collect();
        assert_eq!(
            have.iter().map(|n| n.0).collect::<Vec<_>>(),
            want.iter().map(|n| n.0).collect::<Vec<_>>(),
            "{did}: notification times, newest first"
        );
        have.sort_by(|a, b| b.cmp(a));
        assert_eq!(have, want, "{did}: notifications");
        assert_eq!(
            paged(store, actor, &|_| true, 2),
            whole,
            "{did}: pages of two"
        );
        check_by_author(store, actor, &whole, did);
        let mut seens: Vec<Option<i64>> = vec![None, Some(i64::MIN), Some(i64::MAX)];
        seens.extend(times.iter().map(|&t| Some(t)));
        seens.extend(times.iter().map(|&t| Some(t - 1)));
        for seen in seens {
            let want = times
                .iter()
                .filter(|&&t| seen.is_none_or(|s| t > s))
                .count();
            for max in [u32::MAX, 1] {
                let got = store.unread_notifications(actor, seen, max).unwrap();
                assert_eq!(
                    got as usize,
                    want.min(max as usize),
                    "{did}: unread after {seen:?}, at most {max}"
                );
            }
        }
    }
}

/// Reads `actor`'s notifications from half their authors (even ids), whole and in pages of
/// one, comparing with the `whole` unfiltered list filtered the same way.
fn check_by_author<S: Store>(
    store: &S,
    actor: ActorId,
    whole: &[starling_store::Notification],
    did: &str,
) {
    let shown = |author: ActorId| author.0.is_multiple_of(2);
    let want: Vec<_> = whole.iter().filter(|n| shown(n.author)).cloned().collect();
    let mut have = Vec::new();
    store
        .notifications_by(actor, None, usize::MAX, &shown, &mut |n| {
            have.push(n);
            true
        })
        .unwrap();
    assert_eq!(have, want, "{did}: notifications from even author ids");
    assert_eq!(
        paged(store, actor, &shown, 1),
        want,
        "{did}: notifications from even author ids, one a page"
    );
}

/// `actor`'s notifications from the authors `shown` accepts, read in pages of `per_page`, each
/// page starting at the cursor of the last one's final notification.
fn paged<S: Store>(
    store: &S,
    actor: ActorId,
    shown: &dyn Fn(ActorId) -> bool,
    per_page: usize,
) -> Vec<starling_store::Notification> {
    let mut res = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    let mut cursors = std::collections::BTreeSet::new();
    loop {
        let mut page = Vec::new();
        store
            .notifications_by(actor, cursor.as_deref(), usize::MAX, shown, &mut |n| {
                page.push(n);
                page.len() < per_page
            })
            .unwrap();
        let Some(last) = page.last() else { break };
        // A cursor given twice would walk the same pages forever: fail instead.
        assert!(
            cursors.insert(last.cursor.clone()),
            "{actor:?}: a notification cursor repeats"
        );
        cursor = Some(last.cursor.clone());
        res.extend(page);
    }
    res
}

/// The extra fields of a post (reply, quote, mentions) and of a like or repost (`via`) for a
/// `shape`, naming the posts and reposts of `target` and its neighbour so that threads, self
/// replies and repeated recipients all happen.
pub fn extras(target: usize, shape: usize) -> (String, String) {
    let other = DIDS[(target + 1) % DIDS.len()];
    let target_did = DIDS[target];
    let post = |did: &str, rkey: usize| {
        format!(
            r#"{{"uri":"at://{did}/app.bsky.feed.post/{}","cid":"bafyreiaaaaaaaa"}}"#,
            RKEYS[rkey % RKEYS.len()]
        )
    };
    let mention = |did: &str| {
        format!(
            r#","facets":[{{"index":{{"byteStart":0,"byteEnd":2}},"features":[{{"$type":"app.bsky.richtext.facet#mention","did":"{did}"}},{{"$type":"app.bsky.richtext.facet#link","uri":"https://example.com"}}]}}]"#
        )
    };
    let reply = |parent: String| format!(r#","reply":{{"root":{parent},"parent":{parent}}}"#);
    let post_extra = match shape {
        0 => String::new(),
        1 => reply(post(target_did, target)),
        2 => reply(post(target_did, shape + target)) + &mention(other),
        3 => format!(
            r#","embed":{{"$type":"app.bsky.embed.record","record":{}}}{}"#,
            post(target_did, 0),
            mention(target_did)
        ),
        4 => reply(post(other, target)) + &mention(target_did),
        _ => format!(
            r#","embed":{{"$type":"app.bsky.embed.recordWithMedia","record":{{"record":{}}},"media":{{"$type":"app.bsky.embed.images","images":[]}}}}"#,
            post(other, 1)
        ),
    };
    let via = match shape {
        1 | 4 => format!(
            r#","via":{{"uri":"at://{other}/app.bsky.feed.repost/{}","cid":"bafyreiaaaaaaaa"}}"#,
            RKEYS[target % RKEYS.len()]
        ),
        2 => format!(
            r#","via":{{"uri":"at://{target_did}/app.bsky.feed.repost/{}","cid":"bafyreiaaaaaaaa"}}"#,
            RKEYS[0]
        ),
        _ => String::new(),
    };
    (post_extra, via)
}

/// A verification of `subject` made at `created`: (collection, record JSON).
pub fn verification(subject: &str, created: &str) -> (&'static str, String) {
    let record = format!(
        r#"{{"subject":"{subject}","handle":"t.example.com","displayName":"t","createdAt":"{created}"}}"#
    );
    ("app.bsky.graph.verification", record)
}

/// A TID for a small number: 13 base32-sortable characters.
fn tid(n: u64) -> String {
    const ALPHABET: &[u8; 32] = b"234567abcdefghijklmnopqrstuvwxyz";
    let value = (1u64 << 50) + n;
    (0..13)
        .rev()
        .map(|at| char::from(ALPHABET[((value >> (at * 5)) & 31) as usize]))
        .collect()
}

/// A strong reference to `uri`.
fn strong(uri: &str) -> String {
    format!(r#"{{"uri":"{uri}","cid":"bafyreiaaaaaaaa"}}"#)
}

/// The facets field of a post mentioning `did`.
fn mention(did: &str) -> String {
    format!(
        r#","facets":[{{"index":{{"byteStart":0,"byteEnd":1}},"features":[{{"$type":"app.bsky.richtext.facet#mention","did":"{did}"}}]}}]"#
    )
}

/// The event line of the `n`th commit of a script: a create of `record`, or a delete.
fn commit_line(n: u64, did: &str, collection: &str, rkey: &str, record: Option<String>) -> String {
    let rev = tid(n);
    let time_us = 1_700_000_000_000_000 + n * 1_000_000;
    match record {
        Some(record) => format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rev}","operation":"create","collection":"{collection}","rkey":"{rkey}","record":{record},"cid":"bafyreiaaaaaaaa{n}"}}}}"#
        ),
        None => format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{rev}","operation":"delete","collection":"{collection}","rkey":"{rkey}"}}}}"#
        ),
    }
}

/// A scripted network: a seven-post thread (so the later replies reach four levels and
/// more), mentions (one of a parent's author, who hears of the mention only), a quote, likes
/// and reposts of one's own post,
/// likes and reposts via a repost, a self-follow, deletes in the middle of the thread, and the
/// whole history replayed. Returns the event lines.
pub fn scripted_lines() -> Vec<String> {
    let did = |name: &str| format!("did:plc:{name:a<24}");
    let (a, b, c, d, e) = (did("a"), did("b"), did("c"), did("d"), did("e"));
    let mut lines = Vec::new();
    let mut n = 0u64;
    let mut commit = |lines: &mut Vec<String>,
                      did: &str,
                      collection: &str,
                      rkey: &str,
                      record: Option<String>| {
        n += 1;
        lines.push(commit_line(n, did, collection, rkey, record));
    };
    let created = r#""createdAt":"2030-01-01T00:00:00.000Z""#;
    let post_uri = |did: &str, i: u64| format!("at://{did}/{POST}/{}", tid(1000 + i));
    let root = post_uri(&a, 1);
    let thread = [
        (&a, None),
        (&b, Some(1)),
        (&c, Some(2)),
        (&d, Some(3)),
        (&e, Some(4)),
        (&a, Some(5)),
        (&c, Some(6)),
    ];
    for (i, (author, parent)) in thread.iter().enumerate() {
        let i = i as u64 + 1;
        let reply = parent.map_or(String::new(), |parent| {
            let parent_author = thread[parent as usize - 1].0;
            format!(
                r#","reply":{{"root":{},"parent":{}}}"#,
                strong(&root),
                strong(&post_uri(parent_author, parent))
            )
        });
        // The sixth post mentions its parent's author, who then hears of a mention only.
        let extra = match i {
            3 => mention(&d),
            6 => mention(&e),
            _ => String::new(),
        };
        let record = format!(r#"{{"text":"t"{reply}{extra},{created}}}"#);
        commit(&mut lines, author, POST, &tid(1000 + i), Some(record));
    }
    let repost_uri = format!("at://{c}/app.bsky.feed.repost/{}", tid(2002));
    let interactions = [
        (&b, "app.bsky.feed.like", None),
        (&a, "app.bsky.feed.like", None),
        (&c, "app.bsky.feed.repost", None),
        (&d, "app.bsky.feed.like", Some(&repost_uri)),
        (&e, "app.bsky.feed.repost", Some(&repost_uri)),
        (&c, "app.bsky.feed.like", Some(&repost_uri)),
    ];
    for (i, (author, collection, via)) in interactions.iter().enumerate() {
        let via = via.map_or(String::new(), |via| format!(r#","via":{}"#, strong(via)));
        let record = format!(r#"{{"subject":{}{via},{created}}}"#, strong(&root));
        commit(
            &mut lines,
            author,
            collection,
            &tid(2000 + i as u64),
            Some(record),
        );
    }
    let quote = format!(
        r#"{{"text":"q"{},"embed":{{"$type":"app.bsky.embed.record","record":{}}},{created}}}"#,
        mention(&b),
        strong(&root)
    );
    commit(&mut lines, &d, POST, &tid(3000), Some(quote));
    for (author, subject) in [(&e, &a), (&a, &a), (&b, &e)] {
        let record = format!(r#"{{"subject":"{subject}",{created}}}"#);
        commit(
            &mut lines,
            author,
            "app.bsky.graph.follow",
            &tid(4000),
            Some(record),
        );
    }
    for (author, subject) in [(&a, &e), (&b, &d)] {
        let (collection, record) = verification(subject, "2030-01-01T00:00:00.000Z");
        commit(&mut lines, author, collection, &tid(5000), Some(record));
    }
    // The middle of the thread goes, then a like, a follow and a verification.
    commit(&mut lines, &c, POST, &tid(1003), None);
    commit(&mut lines, &b, "app.bsky.feed.like", &tid(2000), None);
    commit(&mut lines, &b, "app.bsky.graph.follow", &tid(4000), None);
    let (verification, _) = verification(&e, "");
    commit(&mut lines, &a, verification, &tid(5000), None);
    let replay = lines.clone();
    lines.extend(replay);
    lines
}

/// Applies the scripted network of [`scripted_lines`] in batches of several
/// sizes and compares the store with the model; checks that the model itself serves every
/// reason and has replies four levels below an ancestor they notified.
fn scripted_case<S: Store>(open: &dyn Fn() -> S) {
    let lines = scripted_lines();
    let mut model = Model::default();
    for line in &lines {
        model.apply(&serde_json::from_str(line).unwrap());
    }
    let expected = expected(&model);
    let served: BTreeSet<_> = expected
        .values()
        .flat_map(|(_, served)| served.iter().map(|n| n.2))
        .collect();
    assert_eq!(served.len(), 10, "every reason is served: {served:?}");
    let heights: BTreeSet<u8> = model
        .records
        .values()
        .filter(|slot| slot.json.is_some())
        .flat_map(|slot| slot.notified.iter().map(|n| n.height))
        .collect();
    assert_eq!(
        heights.last(),
        Some(&4),
        "replies reach four levels up, no more"
    );
    for sizes in [&[1][..], &[3, 5], &[100]] {
        let store = open();
        let mut graph = GraphMirror::default();
        apply_lines(&store, &lines, sizes, &mut graph);
        super::check(&store, &model, &graph);
    }
}

// The scripted notifications network on the embedded store: see `scripted_case`.
#[test]
fn scripted_notifications_match_the_model() {
    let tmp = tempfile::tempdir().unwrap();
    let n = std::cell::Cell::new(0);
    scripted_case(&|| {
        n.set(n.get() + 1);
        EmbeddedStore::open(&tmp.path().join(n.get().to_string())).unwrap()
    });
}

// The scripted notifications network on Cassandra, one fresh keyspace per batching.
#[test]
fn cassandra_scripted_notifications_match_the_model() {
    let keyspaces: Vec<FreshKeyspace> = (0..3)
        .filter_map(|_| FreshKeyspace::new("scripted notifications"))
        .collect();
    if keyspaces.is_empty() {
        return;
    }
    let n = std::cell::Cell::new(0);
    scripted_case(&|| {
        n.set(n.get() + 1);
        keyspaces[n.get() - 1].open()
    });
    for keyspace in keyspaces {
        keyspace.drop_keyspace();
    }
}

/// A commit of a script: author, collection, the number its record key is the TID of, and
/// the record (`None`: a delete).
type Commit<'a> = (&'a str, &'a str, u64, Option<String>);

/// A script step: private operations, then commits.
type Step<'a> = (Vec<PrivateOp>, Vec<Commit<'a>>);

/// Applies each step's private operations and commits to `store` and a model, then replays
/// every commit; compares their notifications for `dids`, and returns the model.
fn run_script<S: Store>(store: &S, steps: Vec<Step<'_>>, dids: &[String]) -> crate::Model {
    let mut model = crate::Model::default();
    let mut all_lines = Vec::new();
    for (step, (ops, commits)) in steps.into_iter().enumerate() {
        let now = 1_000 * (step as i64 + 1);
        for op in &ops {
            model.private.apply(op, now);
        }
        let cursor = (step + 1).to_string();
        store
            .apply_private(&ops, now, Some((BsyncStream::Operations, &cursor)))
            .unwrap();
        let lines: Vec<String> = commits
            .into_iter()
            .map(|(author, collection, rkey, record)| {
                let n = all_lines.len() as u64 + 1;
                let line = commit_line(n, author, collection, &tid(rkey), record);
                all_lines.push(line.clone());
                line
            })
            .collect();
        for line in &lines {
            model.apply(&serde_json::from_str(line).unwrap());
        }
        apply_lines(store, &lines, &[2], &mut GraphMirror::default());
    }
    apply_lines(store, &all_lines, &[3], &mut GraphMirror::default());
    check(store, &model, dids);
    model
}

/// How many live records' notifications are of `reason`, in the model.
fn made(model: &crate::Model, reason: NotificationReason) -> usize {
    model
        .records
        .values()
        .flat_map(|slot| &slot.notified)
        .filter(|n| n.reason == reason)
        .count()
}

/// Five accounts' DIDs.
fn five_dids() -> [String; 5] {
    ["a", "b", "c", "d", "e"].map(|name| format!("did:plc:{name:a<24}"))
}

/// A post record with `extra` fields.
fn post_record(text: &str, extra: &str) -> String {
    format!(r#"{{"text":"{text}"{extra},"createdAt":"2030-01-01T00:00:00.000Z"}}"#)
}

/// A like or repost record of `subject`.
fn interaction(subject: &str) -> String {
    format!(
        r#"{{"subject":{},"createdAt":"2030-01-01T00:00:00.000Z"}}"#,
        strong(subject)
    )
}

/// An activity subscription of `actor` (bsync key `key`) to `subject`.
fn subscribe(actor: &str, key: &str, subject: &str, post: bool, reply: bool) -> PrivateOp {
    PrivateOp::PutActivitySubscription {
        actor: actor.to_owned(),
        key: key.to_owned(),
        subject: subject.to_owned(),
        post,
        reply,
        update: false,
    }
}

/// Subscriptions to b's activity (posts, replies, both, b's own) and to a's, then b's posts,
/// replies and a mention of a subscriber; then the subscriptions change (one removed, one
/// switched from replies to posts, one added) and b posts, replies and deletes a post made
/// under the old subscriptions; then everything is replayed.
fn subscribed_case<S: Store>(store: &S) {
    let [a, b, c, d, e] = five_dids();
    let a_post = format!("at://{a}/{POST}/{}", tid(1000));
    let reply = format!(r#","reply":{{"root":{0},"parent":{0}}}"#, strong(&a_post));
    let steps = vec![
        (
            vec![
                subscribe(&a, "k1", &b, true, false),
                subscribe(&c, "k2", &b, false, true),
                subscribe(&d, "k3", &b, true, true),
                subscribe(&b, "k4", &b, true, true),
                subscribe(&e, "k5", &a, true, false),
            ],
            vec![
                (&*a, POST, 1000, Some(post_record("a", ""))),
                (&b, POST, 1001, Some(post_record("top", ""))),
                (&b, POST, 1002, Some(post_record("re", &reply))),
                (&b, POST, 1003, Some(post_record("hi", &mention(&a)))),
            ],
        ),
        (
            vec![
                PrivateOp::DeleteActivitySubscription {
                    actor: a.clone(),
                    key: "k1".to_owned(),
                },
                PrivateOp::PutActivitySubscription {
                    actor: c.clone(),
                    key: "k2".to_owned(),
                    subject: "did:plc:ignored".to_owned(),
                    post: true,
                    reply: false,
                    update: true,
                },
                subscribe(&e, "k6", &b, true, false),
            ],
            vec![
                (&*b, POST, 1004, Some(post_record("again", ""))),
                (&b, POST, 1005, Some(post_record("re2", &reply))),
                (&b, POST, 1001, None),
            ],
        ),
    ];
    let model = run_script(store, steps, &five_dids());
    let subscribed = made(&model, NotificationReason::SubscribedPost);
    assert!(
        subscribed >= 6,
        "the script notifies subscribers: {subscribed}"
    );
}

/// a's thread and a's other post: once a mutes the thread, likes, reposts, quotes and replies
/// in it notify a no more (b, who mutes nothing, still hears of replies to b's post), while
/// the other post's like still does; a mention in the thread is no thread notification. Then
/// a unmutes and a repost notifies again; a like made under the mute is deleted; and
/// everything is replayed.
fn thread_mute_case<S: Store>(store: &S) {
    let [a, b, c, d, e] = five_dids();
    let uri = |did: &str, n: u64| format!("at://{did}/{POST}/{}", tid(n));
    let (root, b_reply, other) = (uri(&a, 1000), uri(&b, 1001), uri(&a, 1002));
    let reply_to = |parent: &str| {
        format!(
            r#","reply":{{"root":{},"parent":{}}}"#,
            strong(&root),
            strong(parent)
        )
    };
    let quote = format!(
        r#","embed":{{"$type":"app.bsky.embed.record","record":{}}}"#,
        strong(&root)
    );
    let mute = |actor: &str| PrivateOp::MuteThread {
        actor: actor.to_owned(),
        root: root.clone(),
    };
    const LIKE: &str = "app.bsky.feed.like";
    let steps = vec![
        (
            Vec::new(),
            vec![
                (&*a, POST, 1000, Some(post_record("root", ""))),
                (&b, POST, 1001, Some(post_record("re", &reply_to(&root)))),
                (&a, POST, 1002, Some(post_record("other", ""))),
            ],
        ),
        (
            vec![mute(&a), mute(&e)],
            vec![
                (&*c, LIKE, 2000, Some(interaction(&root))),
                (
                    &c,
                    POST,
                    2001,
                    Some(post_record("deep", &reply_to(&b_reply))),
                ),
                (&d, POST, 2002, Some(post_record("q", &quote))),
                (
                    &d,
                    POST,
                    2003,
                    Some(post_record("m", &(reply_to(&b_reply) + &mention(&a)))),
                ),
                (&e, LIKE, 2004, Some(interaction(&b_reply))),
                (&c, LIKE, 2005, Some(interaction(&other))),
            ],
        ),
        (
            vec![PrivateOp::UnmuteThread {
                actor: a.clone(),
                root: root.clone(),
            }],
            vec![
                (&*c, "app.bsky.feed.repost", 3000, Some(interaction(&root))),
                (&c, LIKE, 2000, None),
            ],
        ),
    ];
    let model = run_script(store, steps, &five_dids());
    let to_a = |reason| {
        model
            .records
            .values()
            .flat_map(|slot| &slot.notified)
            .filter(|n| n.recipient == a && n.reason == reason)
            .count()
    };
    assert_eq!(
        to_a(NotificationReason::Reply),
        1,
        "a hears of b's reply only"
    );
    assert_eq!(to_a(NotificationReason::Quote), 0, "the quote is held back");
    assert_eq!(to_a(NotificationReason::Mention), 1, "a mention is not");
    assert_eq!(to_a(NotificationReason::Like), 1, "the other post's like");
    assert_eq!(to_a(NotificationReason::Repost), 1, "after the unmute");
    assert!(
        made(&model, NotificationReason::Reply) >= 3,
        "b hears of replies"
    );
}

// Subscribed-post notifications on the embedded store: see `subscribed_case`.
#[test]
fn subscribed_posts_notify_as_the_model_says() {
    let tmp = tempfile::tempdir().unwrap();
    subscribed_case(&EmbeddedStore::open(tmp.path()).unwrap());
}

// Subscribed-post notifications on Cassandra: see `subscribed_case`.
#[test]
fn cassandra_subscribed_posts_notify_as_the_model_says() {
    if let Some(keyspace) = FreshKeyspace::new("subscribed posts") {
        subscribed_case(&keyspace.open());
        keyspace.drop_keyspace();
    }
}

// Thread mutes holding notifications back on the embedded store: see `thread_mute_case`.
#[test]
fn thread_mutes_hold_notifications_back_as_the_model_says() {
    let tmp = tempfile::tempdir().unwrap();
    thread_mute_case(&EmbeddedStore::open(tmp.path()).unwrap());
}

// Thread mutes holding notifications back on Cassandra: see `thread_mute_case`.
#[test]
fn cassandra_thread_mutes_hold_notifications_back_as_the_model_says() {
    if let Some(keyspace) = FreshKeyspace::new("thread mutes") {
        thread_mute_case(&keyspace.open());
        keyspace.drop_keyspace();
    }
}
