//! The list, profile-tab, starter-pack and feed screens of the stock AppView on Starling: a
//! scripted network with a curate list, a moderation list and a starter pack's reference list
//! (one item deleted), a list block, direct blocks (one undone), a starter pack joined twice (once
//! a month ago), feed generators with likes, reposts, quotes, likes (one undone), a thread gate
//! (a reply breaks it, another is hidden), post gates (embedding disabled, a quote detached) and
//! verifications by a trusted verifier (one valid, one stale) and by an untrusted one. A
//! logged-in viewer calls `feed.getRepostedBy`, `feed.getQuotes`, `feed.getActorLikes`,
//! `feed.getActorFeeds`, `feed.getListFeed`, `graph.getBlocks`, `graph.getList`,
//! `graph.getLists`, `graph.getListBlocks`, `graph.getStarterPack`,
//! `graph.getActorStarterPacks`, `actor.getProfile` and `feed.getPostThread`, paging two items
//! at a time. Every answer must be HTTP 200 and equal what the test computes from its own
//! record log by the AppView's rules (newest first; the viewer's blocks, direct or through a
//! list, hide authors).

use std::collections::BTreeSet;
use std::ffi::OsStr;

use serde_json::{Value, json};

use super::{
    Gen, TIMEOUT, World, Xrpc, did, display_name, handle, mint_keys_and_tokens, start, util,
};

const REPOSTED_BY: &str = "app.bsky.feed.getRepostedBy";
const QUOTES: &str = "app.bsky.feed.getQuotes";
const ACTOR_LIKES: &str = "app.bsky.feed.getActorLikes";
const ACTOR_FEEDS: &str = "app.bsky.feed.getActorFeeds";
const LIST_FEED: &str = "app.bsky.feed.getListFeed";
const BLOCKS: &str = "app.bsky.graph.getBlocks";
const LIST: &str = "app.bsky.graph.getList";
const LISTS: &str = "app.bsky.graph.getLists";
const LIST_BLOCKS: &str = "app.bsky.graph.getListBlocks";
const STARTER_PACK: &str = "app.bsky.graph.getStarterPack";
const ACTOR_STARTER_PACKS: &str = "app.bsky.graph.getActorStarterPacks";
const PROFILE: &str = "app.bsky.actor.getProfile";
const THREAD: &str = "app.bsky.feed.getPostThread";
const NSIDS: [&str; 13] = [
    REPOSTED_BY,
    QUOTES,
    ACTOR_LIKES,
    ACTOR_FEEDS,
    LIST_FEED,
    BLOCKS,
    LIST,
    LISTS,
    LIST_BLOCKS,
    STARTER_PACK,
    ACTOR_STARTER_PACKS,
    PROFILE,
    THREAD,
];

const POST: &str = "app.bsky.feed.post";
const LIKE: &str = "app.bsky.feed.like";
const REPOST: &str = "app.bsky.feed.repost";
const GENERATOR: &str = "app.bsky.feed.generator";
const GRAPH_LIST: &str = "app.bsky.graph.list";
const LIST_ITEM: &str = "app.bsky.graph.listitem";
const LIST_BLOCK: &str = "app.bsky.graph.listblock";
const BLOCK: &str = "app.bsky.graph.block";
const FOLLOW: &str = "app.bsky.graph.follow";
const PACK: &str = "app.bsky.graph.starterpack";
const VERIFICATION: &str = "app.bsky.graph.verification";
const PROFILE_RECORD: &str = "app.bsky.actor.profile";
const THREADGATE: &str = "app.bsky.feed.threadgate";
const POSTGATE: &str = "app.bsky.feed.postgate";
const CURATE: &str = "app.bsky.graph.defs#curatelist";
const MODERATION: &str = "app.bsky.graph.defs#modlist";
const REFERENCE: &str = "app.bsky.graph.defs#referencelist";
const EMBED_VIEW_RECORD: &str = "app.bsky.embed.record#viewRecord";
const EMBED_DETACHED: &str = "app.bsky.embed.record#viewDetached";

/// Reads every screen; blocks DAVE, blocks through OWNER's moderation list (FRANK on it).
const VIEWER: u32 = 0;
/// Owns the lists, the starter pack and the feed generators; its root post is thread-gated.
const OWNER: u32 = 1;
const BOB: u32 = 2;
const CAROL: u32 = 3;
const DAVE: u32 = 4;
/// The trusted verifier (`serve --trusted-verifier`).
const EVE: u32 = 5;
const FRANK: u32 = 6;
const GINA: u32 = 7;
const N_USERS: u32 = 8;
/// Items per page asked for, so that every screen's cursor is used.
const PAGE: &str = "2";
const DAY_US: u64 = 86_400_000_000;

/// One record of the scenario, as the test wrote it.
#[derive(Clone, Debug)]
struct Rec {
    author: u32,
    collection: &'static str,
    uri: String,
    cid: String,
    /// The commit's time (the record's `indexedAt`).
    time_us: u64,
    created_us: u64,
    /// What it points at: a record URI, or a DID (follows, blocks, list items, verifications).
    subject: Option<String>,
    /// A list item's list, a list's purpose, a profile's starter pack.
    extra: Option<String>,
    fields: Value,
    live: bool,
}

impl Rec {
    /// `min(createdAt, indexedAt)`, the order of every page.
    fn sort_at(&self) -> u64 {
        self.created_us.min(self.time_us)
    }

    /// The record's field at the JSON `pointer`: its text, or its JSON; empty when absent.
    fn field(&self, pointer: &str) -> String {
        match self.fields.pointer(pointer) {
            Some(Value::String(text)) => text.clone(),
            Some(value) => value.to_string(),
            None => String::new(),
        }
    }
}

/// The record log and what it implies.
struct Log {
    recs: Vec<Rec>,
}

impl Log {
    fn get(&self, uri: &str) -> &Rec {
        self.recs.iter().find(|r| r.uri == uri).unwrap()
    }

    /// Live records of `collection` matching `keep`, newest first.
    fn newest(&self, collection: &str, keep: impl Fn(&Rec) -> bool) -> Vec<&Rec> {
        let mut res: Vec<&Rec> = self
            .recs
            .iter()
            .filter(|r| r.live && r.collection == collection && keep(r))
            .collect();
        res.sort_by_key(|r| std::cmp::Reverse(r.sort_at()));
        res
    }

    fn subject_is(rec: &Rec, subject: &str) -> bool {
        rec.subject.as_deref() == Some(subject)
    }

    /// The live members of `list`, newest item first.
    fn members(&self, list: &str) -> Vec<u32> {
        self.newest(LIST_ITEM, |r| r.extra.as_deref() == Some(list))
            .iter()
            .map(|r| user_of(r.subject.as_deref().unwrap()))
            .collect()
    }

    /// Whom `viewer` blocks, directly or through a subscribed moderation list.
    fn blocked_by(&self, viewer: u32) -> BTreeSet<u32> {
        let mut res: BTreeSet<u32> = self
            .newest(BLOCK, |r| r.author == viewer)
            .iter()
            .map(|r| user_of(r.subject.as_deref().unwrap()))
            .collect();
        for sub in self.newest(LIST_BLOCK, |r| r.author == viewer) {
            res.extend(self.members(sub.subject.as_deref().unwrap()));
        }
        res
    }
}

fn user_of(did_or_uri: &str) -> u32 {
    let did_text = did_or_uri.trim_start_matches("at://");
    let did_text = did_text.split('/').next().unwrap();
    (0..N_USERS).find(|&u| did(u) == did_text).unwrap()
}

/// Writes the scenario's events and its record log.
struct Script {
    g: Gen,
    log: Vec<Rec>,
}

impl Script {
    /// A record by `author`, created now (or `created_us`, when given, for a back-dated one).
    fn add(
        &mut self,
        author: u32,
        collection: &'static str,
        rkey: Option<&str>,
        fields: Value,
        created_us: Option<u64>,
    ) -> String {
        let (rkey, cid, time_us) = self.g.create(author, collection, rkey, fields.clone());
        if let Some(created_us) = created_us {
            let event = self.g.events.last_mut().unwrap();
            let mut line: Value = serde_json::from_str(&event.line).unwrap();
            line["commit"]["record"]["createdAt"] =
                json!(starling_core::sample::datetime(created_us));
            event.line = line.to_string();
        }
        let uri = format!("at://{}/{collection}/{rkey}", did(author));
        let text = |key: &str| fields[key].as_str().map(str::to_owned);
        let subject =
            text("subject").or_else(|| fields["subject"]["uri"].as_str().map(str::to_owned));
        let quote = fields["embed"]["record"]["uri"].as_str().map(str::to_owned);
        let extra = text("list").or_else(|| text("purpose")).or_else(|| {
            fields["joinedViaStarterPack"]["uri"]
                .as_str()
                .map(str::to_owned)
        });
        // A record replacing another (a profile) ends the old one.
        for old in self.log.iter_mut().filter(|r| r.uri == uri) {
            old.live = false;
        }
        self.log.push(Rec {
            author,
            collection,
            uri: uri.clone(),
            cid,
            time_us,
            created_us: created_us.unwrap_or(time_us),
            subject: subject.or(quote),
            extra,
            fields,
            live: true,
        });
        uri
    }

    /// The URI of the newest record of `collection` written so far.
    fn last_uri(&self, collection: &str) -> String {
        let rec = self.log.iter().rev().find(|r| r.collection == collection);
        rec.unwrap().uri.clone()
    }

    fn delete(&mut self, uri: &str) {
        let rec = self
            .log
            .iter_mut()
            .find(|r| r.uri == uri && r.live)
            .unwrap();
        rec.live = false;
        let rkey = uri.rsplit('/').next().unwrap().to_owned();
        let (author, collection) = (rec.author, rec.collection);
        self.g.delete(author, collection, &rkey);
    }

    fn strong_ref(&self, uri: &str) -> Value {
        let rec = self.log.iter().find(|r| r.uri == uri).unwrap();
        json!({ "uri": uri, "cid": rec.cid })
    }

    fn post(&mut self, author: u32, text: &str) -> String {
        self.add(author, POST, None, json!({ "text": text }), None)
    }

    fn quote(&mut self, author: u32, quoted: &str) -> String {
        let embed = json!({ "$type": "app.bsky.embed.record", "record": self.strong_ref(quoted) });
        let fields = json!({ "text": "look", "embed": embed });
        self.add(author, POST, None, fields, None)
    }

    fn reply(&mut self, author: u32, root: &str) -> String {
        let reply = json!({ "root": self.strong_ref(root), "parent": self.strong_ref(root) });
        self.add(
            author,
            POST,
            None,
            json!({ "text": "re", "reply": reply }),
            None,
        )
    }

    fn link(&mut self, author: u32, collection: &'static str, subject: &str) -> String {
        let subject = match collection {
            LIKE | REPOST => self.strong_ref(subject),
            _ => json!(subject),
        };
        self.add(
            author,
            collection,
            None,
            json!({ "subject": subject }),
            None,
        )
    }

    fn list(&mut self, owner: u32, name: &str, purpose: &str, members: &[u32]) -> String {
        let fields = json!({ "name": name, "purpose": purpose });
        let list = self.add(owner, GRAPH_LIST, None, fields, None);
        for &member in members {
            let item = json!({ "subject": did(member), "list": list });
            self.add(owner, LIST_ITEM, None, item, None);
        }
        list
    }

    /// A profile edit of `user` naming the starter pack `pack`, created at `created_us`.
    fn join(&mut self, user: u32, pack: &str, created_us: Option<u64>) {
        let fields = json!({ "displayName": display_name(user), "joinedViaStarterPack": self.strong_ref(pack) });
        self.add(user, PROFILE_RECORD, Some("self"), fields, created_us);
    }

    fn verify(&mut self, verifier: u32, subject: u32, display: &str) {
        let fields =
            json!({ "subject": did(subject), "handle": handle(subject), "displayName": display });
        self.add(verifier, VERIFICATION, None, fields, None);
    }
}

/// The posts the checks ask about.
struct Posts {
    reposted: String,
    quoted: String,
    gated_root: String,
    embed_disabled: String,
    detached_from: String,
}

/// The scripted events, the record log, and the posts the checks ask about.
fn scenario(seed: u64, start_us: u64) -> (Vec<util::Event>, Log, Posts) {
    let mut s = Script {
        g: Gen {
            rng: util::Rng::new(seed),
            time_us: start_us,
            events: Vec::new(),
            world: World::default(),
        },
        log: Vec::new(),
    };
    for user in 0..N_USERS {
        s.g.account(user);
    }
    s.list(OWNER, "friends", CURATE, &[BOB, CAROL, DAVE, GINA]);
    let gina_item = s.last_uri(LIST_ITEM);
    s.delete(&gina_item);
    let spam = s.list(OWNER, "spam", MODERATION, &[FRANK]);
    let pack_list = s.list(OWNER, "pack", REFERENCE, &[BOB, CAROL]);
    s.link(VIEWER, LIST_BLOCK, &spam);
    s.link(VIEWER, BLOCK, &did(DAVE));
    let gina_block = s.link(VIEWER, BLOCK, &did(GINA));
    s.delete(&gina_block);
    let pack_fields = json!({ "name": "Starter", "list": pack_list });
    let pack = s.add(OWNER, PACK, None, pack_fields, None);
    s.join(BOB, &pack, None);
    let month_ago = s.g.time_us - 30 * DAY_US;
    s.join(CAROL, &pack, Some(month_ago));
    feeds(&mut s);
    let posts = posts(&mut s);
    s.verify(EVE, BOB, &display_name(BOB));
    s.verify(EVE, CAROL, "An old name");
    s.verify(FRANK, DAVE, &display_name(DAVE));
    (s.g.events, Log { recs: s.log }, posts)
}

/// Two feed generators of OWNER with likes, one like undone.
fn feeds(s: &mut Script) {
    for (name, likers) in [("Cats", &[VIEWER, BOB, CAROL][..]), ("Dogs", &[BOB, GINA])] {
        let fields = json!({ "did": "did:web:feeds.lists.test", "displayName": name });
        let feed = s.add(OWNER, GENERATOR, None, fields, None);
        for &liker in likers {
            s.link(liker, LIKE, &feed);
        }
    }
    let undone = s.last_uri(LIKE);
    s.delete(&undone);
}

/// Posts by list members and others; reposts, quotes and likes of them; the gates.
fn posts(s: &mut Script) -> Posts {
    let reposted = s.post(BOB, "a post to repost");
    let quoted = s.post(CAROL, "a post to quote");
    let by_dave = s.post(DAVE, "by someone the viewer blocks");
    let by_gina = s.post(GINA, "by someone off the list");
    s.post(BOB, "another post by a list member");
    for user in [CAROL, DAVE, FRANK, GINA, VIEWER] {
        s.link(user, REPOST, &reposted);
    }
    for user in [BOB, DAVE, GINA] {
        s.quote(user, &quoted);
    }
    for post in [&reposted, &quoted, &by_dave, &by_gina] {
        s.link(VIEWER, LIKE, post);
    }
    let undone = s.last_uri(LIKE);
    s.delete(&undone);
    // OWNER's root: replies only from whom OWNER follows (CAROL); one of CAROL's replies hidden.
    s.link(OWNER, FOLLOW, &did(CAROL));
    let gated_root = s.post(OWNER, "replies from friends only");
    s.reply(CAROL, &gated_root);
    s.reply(BOB, &gated_root);
    let hidden = s.reply(CAROL, &gated_root);
    let rkey = gated_root.rsplit('/').next().unwrap().to_owned();
    let gate = json!({ "post": gated_root, "allow": [{ "$type": "app.bsky.feed.threadgate#followingRule" }],
                       "hiddenReplies": [hidden] });
    s.add(OWNER, THREADGATE, Some(&rkey), gate, None);
    // CAROL's post disables embedding before BOB quotes it; GINA's detaches BOB's quote after.
    let embed_disabled = s.post(CAROL, "do not quote me");
    let rkey = embed_disabled.rsplit('/').next().unwrap().to_owned();
    let gate = json!({ "post": embed_disabled,
                       "embeddingRules": [{ "$type": "app.bsky.feed.postgate#disableRule" }] });
    s.add(CAROL, POSTGATE, Some(&rkey), gate, None);
    s.quote(BOB, &embed_disabled);
    let detached_from = s.post(GINA, "quote me once");
    let detached = s.quote(BOB, &detached_from);
    let rkey = detached_from.rsplit('/').next().unwrap().to_owned();
    let gate = json!({ "post": detached_from, "detachedEmbeddingUris": [detached] });
    s.add(GINA, POSTGATE, Some(&rkey), gate, None);
    Posts {
        reposted,
        quoted,
        gated_root,
        embed_disabled,
        detached_from,
    }
}

// ---------------------------------------------------------------------------------------------
// What each screen must list, from the record log.

impl Log {
    fn authors_of(&self, collection: &str, subject: &str, viewer: u32) -> Vec<Value> {
        let blocked = self.blocked_by(viewer);
        self.newest(collection, |r| {
            Log::subject_is(r, subject) && !blocked.contains(&r.author)
        })
        .iter()
        .map(|r| json!(did(r.author)))
        .collect()
    }

    /// getQuotes: each quote's URI and the kind of its embed (detached by a post gate).
    fn quotes(&self, quoted: &str, viewer: u32) -> Vec<Value> {
        let blocked = self.blocked_by(viewer);
        let rkey = quoted.rsplit('/').next().unwrap();
        let gate_uri = format!("at://{}/{POSTGATE}/{rkey}", did(user_of(quoted)));
        let gate = |pointer: &str| {
            self.newest(POSTGATE, |r| r.uri == gate_uri)
                .first()
                .map(|r| r.field(pointer))
        };
        self.newest(POST, |r| {
            Log::subject_is(r, quoted) && !blocked.contains(&r.author)
        })
        .iter()
        .map(|r| {
            let gated = gate("/embeddingRules").is_some_and(|g| g.contains("disableRule"))
                || gate("/detachedEmbeddingUris").is_some_and(|g| g.contains(&r.uri));
            json!([
                r.uri,
                if gated {
                    EMBED_DETACHED
                } else {
                    EMBED_VIEW_RECORD
                }
            ])
        })
        .collect()
    }

    /// getActorLikes: the viewer's liked posts, newest like first.
    fn actor_likes(&self, viewer: u32) -> Vec<Value> {
        let blocked = self.blocked_by(viewer);
        self.newest(LIKE, |r| r.author == viewer)
            .iter()
            .map(|r| r.subject.clone().unwrap())
            .filter(|subject| subject.contains("/app.bsky.feed.post/"))
            .filter(|subject| !blocked.contains(&user_of(subject)))
            .map(Value::from)
            .collect()
    }

    fn actor_feeds(&self, owner: u32) -> Vec<Value> {
        self.newest(GENERATOR, |r| r.author == owner)
            .iter()
            .map(|r| {
                json!([
                    r.uri,
                    self.newest(LIKE, |l| Log::subject_is(l, &r.uri)).len()
                ])
            })
            .collect()
    }

    /// getListFeed: the posts of the list's members whom the viewer does not block.
    fn list_feed(&self, list: &str, viewer: u32) -> Vec<Value> {
        let members = self.members(list);
        let blocked = self.blocked_by(viewer);
        self.newest(POST, |r| {
            members.contains(&r.author) && !blocked.contains(&r.author)
        })
        .iter()
        .map(|r| json!(r.uri))
        .collect()
    }

    fn lists(&self, owner: u32) -> Vec<Value> {
        let shown = |r: &Rec| matches!(r.extra.as_deref(), Some(CURATE | MODERATION));
        self.newest(GRAPH_LIST, |r| r.author == owner && shown(r))
            .iter()
            .map(|r| json!([r.uri, r.extra, self.members(&r.uri).len()]))
            .collect()
    }

    /// All-time and last-week joins of a starter pack (by `min(createdAt, indexedAt)`).
    fn joins(&self, pack: &str, now_us: u64) -> (usize, usize) {
        let joins = self.newest(PROFILE_RECORD, |r| r.extra.as_deref() == Some(pack));
        let week = joins
            .iter()
            .filter(|r| r.sort_at() > now_us - 7 * DAY_US)
            .count();
        (joins.len(), week)
    }

    /// getProfile's block and verification state, as [`project_profile`] reduces it.
    fn profile(&self, user: u32, viewer: u32, trusted: u32) -> Value {
        let direct = self.newest(BLOCK, |r| {
            r.author == viewer && Log::subject_is(r, &did(user))
        });
        let by_list = self
            .newest(LIST_BLOCK, |r| r.author == viewer)
            .into_iter()
            .find(|sub| {
                self.members(sub.subject.as_deref().unwrap())
                    .contains(&user)
            });
        let list = by_list.and_then(|sub| sub.subject.clone());
        let blocking = direct
            .first()
            .map(|r| r.uri.clone())
            .or_else(|| list.clone());
        let verifications: Vec<Value> = self
            .newest(VERIFICATION, |r| {
                r.author == trusted && Log::subject_is(r, &did(user))
            })
            .iter()
            .map(|r| {
                json!([
                    did(trusted),
                    r.uri,
                    r.field("/displayName") == display_name(user)
                ])
            })
            .collect();
        let any_valid = verifications.iter().any(|v| v[2] == json!(true));
        let verification = match (verifications.is_empty(), user == trusted) {
            (true, false) => Value::Null,
            (empty, is_trusted) => json!({
                "verifications": verifications,
                "verifiedStatus": if empty { "none" } else if any_valid { "valid" } else { "invalid" },
                "trustedVerifierStatus": if is_trusted { "valid" } else { "none" },
            }),
        };
        json!({ "did": did(user), "blocking": blocking, "blockingByList": list, "verification": verification })
    }

    /// getPostThread of a gated root: the replies its gate allows (from whom the root's author
    /// follows), the gate and its hidden replies, and whether the viewer may reply.
    fn gated_thread(&self, root: &str, viewer: u32) -> Value {
        let owner = user_of(root);
        let follows = |author: u32| {
            author == owner
                || !self
                    .newest(FOLLOW, |r| {
                        r.author == owner && Log::subject_is(r, &did(author))
                    })
                    .is_empty()
        };
        let replies: Vec<&Rec> = self.newest(POST, |r| {
            r.field("/reply/parent/uri") == root && follows(r.author)
        });
        let gate_uri = format!(
            "at://{}/{THREADGATE}/{}",
            did(owner),
            root.rsplit('/').next().unwrap()
        );
        let hidden = self.get(&gate_uri).fields["hiddenReplies"].clone();
        json!({
            "replies": replies.iter().map(|r| r.uri.clone()).collect::<Vec<_>>(),
            "threadgate": gate_uri,
            "hiddenReplies": hidden,
            "replyDisabled": !follows(viewer),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The AppView's answers, reduced to what the log decides.

fn at_did(item: &Value) -> Value {
    item["did"].clone()
}

fn post_uri(item: &Value) -> Value {
    item["post"]["uri"].clone()
}

fn quote_view(post: &Value) -> Value {
    json!([post["uri"], post["embed"]["record"]["$type"]])
}

fn feed_view(feed: &Value) -> Value {
    json!([feed["uri"], feed["likeCount"]])
}

fn list_view(list: &Value) -> Value {
    json!([list["uri"], list["purpose"], list["listItemCount"]])
}

fn list_uri(list: &Value) -> Value {
    list["uri"].clone()
}

fn member_did(item: &Value) -> Value {
    item["subject"]["did"].clone()
}

fn pack_view(pack: &Value) -> Value {
    json!([
        pack["uri"],
        pack["joinedAllTimeCount"],
        pack["joinedWeekCount"]
    ])
}

fn project_profile(profile: &Value) -> Value {
    let verification = &profile["verification"];
    let verification = match verification.is_null() {
        true => Value::Null,
        false => json!({
            "verifications": verification["verifications"].as_array().unwrap().iter()
                .map(|v| json!([v["issuer"], v["uri"], v["isValid"]])).collect::<Vec<_>>(),
            "verifiedStatus": verification["verifiedStatus"],
            "trustedVerifierStatus": verification["trustedVerifierStatus"],
        }),
    };
    let viewer = &profile["viewer"];
    json!({ "did": profile["did"], "blocking": viewer["blocking"],
            "blockingByList": viewer["blockingByList"]["uri"], "verification": verification })
}

fn project_thread(answer: &Value) -> Value {
    let thread = &answer["thread"];
    let replies: Vec<Value> = thread["replies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|reply| reply["post"]["uri"].clone())
        .collect();
    json!({
        "replies": replies,
        "threadgate": thread["post"]["threadgate"]["uri"],
        "hiddenReplies": answer["threadgate"]["record"]["hiddenReplies"],
        "replyDisabled": thread["post"]["viewer"]["replyDisabled"],
    })
}

/// One paged screen: its method, its parameter, the key of its items, how an item is
/// reduced, and what the log says it must list.
type Screen = (
    &'static str,
    Option<(&'static str, String)>,
    &'static str,
    fn(&Value) -> Value,
    Vec<Value>,
);

/// The screens around posts: reposts, quotes, likes.
fn post_screens(log: &Log, posts: &Posts) -> Vec<Screen> {
    let reposted = &posts.reposted;
    let by = log.authors_of(REPOST, reposted, VIEWER);
    let mut res: Vec<Screen> = vec![(
        REPOSTED_BY,
        Some(("uri", reposted.clone())),
        "repostedBy",
        at_did,
        by,
    )];
    for quoted in [&posts.quoted, &posts.embed_disabled, &posts.detached_from] {
        let want = log.quotes(quoted, VIEWER);
        res.push((
            QUOTES,
            Some(("uri", quoted.clone())),
            "posts",
            quote_view,
            want,
        ));
    }
    let likes = log.actor_likes(VIEWER);
    res.push((
        ACTOR_LIKES,
        Some(("actor", did(VIEWER))),
        "feed",
        post_uri,
        likes,
    ));
    res
}

/// The screens around OWNER and the viewer: feeds, lists, blocks, starter packs.
fn actor_screens(log: &Log, now_us: u64) -> Vec<Screen> {
    let owner = Some(("actor", did(OWNER)));
    let subjects = |collection| {
        let recs = log.newest(collection, |r| r.author == VIEWER);
        recs.iter().map(|r| json!(r.subject)).collect()
    };
    let mut res: Vec<Screen> = vec![
        (
            ACTOR_FEEDS,
            owner.clone(),
            "feeds",
            feed_view,
            log.actor_feeds(OWNER),
        ),
        (LISTS, owner.clone(), "lists", list_view, log.lists(OWNER)),
        (LIST_BLOCKS, None, "lists", list_uri, subjects(LIST_BLOCK)),
        (BLOCKS, None, "blocks", at_did, subjects(BLOCK)),
    ];
    for list in log.newest(GRAPH_LIST, |r| r.author == OWNER) {
        let members = log
            .members(&list.uri)
            .iter()
            .map(|&u| json!(did(u)))
            .collect();
        let param = Some(("list", list.uri.clone()));
        res.push((LIST, param.clone(), "items", member_did, members));
        if list.extra.as_deref() == Some(CURATE) {
            let feed = log.list_feed(&list.uri, VIEWER);
            res.push((LIST_FEED, param, "feed", post_uri, feed));
        }
    }
    let packs = log.newest(PACK, |r| r.author == OWNER);
    let packs = packs.iter().map(|r| {
        let (all, week) = log.joins(&r.uri, now_us);
        json!([r.uri, all, week])
    });
    res.push((
        ACTOR_STARTER_PACKS,
        owner,
        "starterPacks",
        pack_view,
        packs.collect(),
    ));
    res
}

/// Checks every screen as the viewer, two items a page; the number of items compared.
fn check_screens(x: &Xrpc<'_>, log: &Log, posts: &Posts, now_us: u64) -> usize {
    let mut n = 0;
    let screens = post_screens(log, posts)
        .into_iter()
        .chain(actor_screens(log, now_us));
    for (nsid, param, key, project, want) in screens {
        let query: Vec<(&str, String)> = param
            .into_iter()
            .chain([("limit", PAGE.to_owned())])
            .collect();
        let have = x.list(Some(VIEWER), nsid, &query, key, project);
        x.check(
            &format!("{nsid} {query:?}"),
            &have,
            &Value::Array(want.clone()),
        );
        n += want.len();
    }
    let pack = &log.newest(PACK, |r| r.author == OWNER)[0].uri;
    n + check_pack_and_profiles(x, log, pack, now_us) + check_thread(x, log, posts)
}

/// getStarterPack of OWNER's pack, and getProfile of everyone the blocks and verifications
/// touch; the number of items compared.
fn check_pack_and_profiles(x: &Xrpc<'_>, log: &Log, pack: &str, now_us: u64) -> usize {
    let (status, have) = x.get(
        Some(VIEWER),
        STARTER_PACK,
        &[("starterPack", pack.to_owned())],
    );
    assert_eq!(status, 200, "getStarterPack: {have}");
    let view = &have["starterPack"];
    let mut sample: Vec<Value> = view["listItemsSample"]
        .as_array()
        .unwrap()
        .iter()
        .map(member_did)
        .collect();
    sample.sort_by_key(Value::to_string);
    let have = json!([
        pack_view(view),
        view["list"]["uri"],
        view["list"]["listItemCount"],
        sample
    ]);
    let list = log.get(pack).field("/list");
    let (all, week) = log.joins(pack, now_us);
    let mut members: Vec<Value> = log.members(&list).iter().map(|&u| json!(did(u))).collect();
    members.sort_by_key(Value::to_string);
    let want = json!([[pack, all, week], list, members.len(), members]);
    x.check("getStarterPack", &have, &want);
    let mut n = 1;
    for user in [BOB, CAROL, DAVE, EVE, FRANK, GINA] {
        let (status, have) = x.get(Some(VIEWER), PROFILE, &[("actor", did(user))]);
        assert_eq!(status, 200, "getProfile {user}: {have}");
        let want = log.profile(user, VIEWER, EVE);
        x.check(
            &format!("getProfile of {user}"),
            &project_profile(&have),
            &want,
        );
        n += 1;
    }
    n
}

/// getPostThread of the gated root; the number of replies compared.
fn check_thread(x: &Xrpc<'_>, log: &Log, posts: &Posts) -> usize {
    let (status, have) = x.get(Some(VIEWER), THREAD, &[("uri", posts.gated_root.clone())]);
    assert_eq!(status, 200, "getPostThread: {have}");
    let want = log.gated_thread(&posts.gated_root, VIEWER);
    x.check(
        "getPostThread of the gated root",
        &project_thread(&have),
        &want,
    );
    want["replies"].as_array().unwrap().len()
}

/// Whether the answers cover every rule: if the scenario stops exercising one, the test
/// fails instead of passing vacuously.
fn assert_covered(log: &Log, posts: &Posts) {
    let blocked = log.blocked_by(VIEWER);
    assert!(blocked.contains(&DAVE) && blocked.contains(&FRANK) && !blocked.contains(&GINA));
    assert!(log.quotes(&posts.embed_disabled, VIEWER)[0][1] == json!(EMBED_DETACHED));
    assert!(log.quotes(&posts.detached_from, VIEWER)[0][1] == json!(EMBED_DETACHED));
    let thread = log.gated_thread(&posts.gated_root, VIEWER);
    let replies = log.newest(POST, |r| r.field("/reply/parent/uri") == posts.gated_root);
    assert!(thread["replies"].as_array().unwrap().len() < replies.len());
    assert!(
        log.joins(&log.newest(PACK, |_| true)[0].uri, u64::MAX / 2)
            .1
            == 0
    );
}

// The stock AppView's list, profile-tab, starter-pack and feed screens on Starling, against
// the test's own reading of its records.
#[test]
fn the_stock_appview_serves_lists_packs_feeds_and_gates_from_starling() {
    let seed = util::seed("the_stock_appview_serves_lists_packs_feeds_and_gates_from_starling");
    let node = util::setup_appview();
    // Two days ago: every record is in the starter pack's last week, but for one join.
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let (events, log, posts) = scenario(seed, now_us - 2 * DAY_US);
    assert_covered(&log, &posts);
    let pairs: Vec<(u32, &'static str)> = NSIDS.iter().map(|&nsid| (VIEWER, nsid)).collect();
    let (documents, tokens) = mint_keys_and_tokens(&node, seed, N_USERS, pairs);
    let trusted = did(EVE);
    let extra = [OsStr::new("--trusted-verifier"), OsStr::new(&trusted)];
    let mut stack = start(&node, &[], documents, events, &extra);
    let x = Xrpc {
        addr: stack.appview_addr.clone(),
        appview: &stack.appview,
        tokens,
        n_requests: std::cell::Cell::new(0),
    };
    let n = check_screens(&x, &log, &posts, now_us);
    assert!(n >= 30, "the answers listed {n} items");
    stack.starling.terminate();
    stack.starling.wait_exit(TIMEOUT);
    stack.appview.terminate();
    stack.appview.wait_exit(TIMEOUT);
}
