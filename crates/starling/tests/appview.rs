//! The stock Bluesky AppView (`@atproto/bsky@0.0.280`, unchanged) served by Starling, end to end.
//!
//! Setup: `scripts/setup-appview.sh` (cached) installs Node 22 and the AppView; the test makes
//! seeded secp256k1 keys for a few dozen synthetic users and has `appview/keys.mjs` and
//! `appview/jwt.mjs` turn them into DID documents and service-auth JWTs; a `PlcStandIn` serves
//! those documents and the real ones of `../shared/data/jetstream/did_docs.json.zst`.
//!
//! Data: the real Jetstream events of `../shared/data/jetstream/` go in with `starling replay`;
//! then `starling serve` ingests a generated scenario from a loopback Jetstream: handles,
//! profiles, follows, posts, replies, quotes, reposts, likes, blocks and deletes. A few users
//! have fixed roles (below) so that every run exercises each block rule of the AppView.
//!
//! Checks: the AppView runs against Starling's gRPC address; logged-in viewers (JWTs signed
//! with their keys) and anonymous callers call the eight endpoints of the contract. Every
//! answer must be HTTP 200 (or the 400 the AppView gives for a blocked author feed) and equal
//! what the test computes from its own scenario and the AppView's rules, as read in its code
//! (`dist/views/index.js` and each endpoint's pipeline): blocks hide feed items, followers
//! and likers, turn reply refs, quotes and thread nodes into `blockedPost` or `viewBlocked`,
//! and hide `viewer.following`. Compared: items and their order, counts, viewer state, reply
//! refs, quote embeds, thread trees, known followers. Real authors' feeds must list their
//! live posts with each record passed through unchanged.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

#[path = "appview/lists.rs"]
mod lists;
#[path = "appview/moderation.rs"]
mod moderation;
#[path = "appview/notifications.rs"]
mod notifications;
#[path = "appview/private.rs"]
mod private;
#[path = "appview/search.rs"]
mod search;
#[path = "appview/timeline.rs"]
mod timeline;
mod util;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use starling_core::sample;
use starling_identity::stand_in::{PlcStandIn, load_documents};
use util::{Event, FakeJetstream, Proc, Rng};

const TIMEOUT: Duration = Duration::from_secs(60);
const USERS: u32 = 36;
const CONTENT_EVENTS: usize = 450;
/// The scenario's first `time_us`: 2026-08-01T00:00:00Z. After the real events (`starling
/// replay` leaves Jetstream's cursor at their newest), and in the past, so `sort_at` is the
/// record's own time.
const START_US: u64 = 1_785_542_400_000_000;
/// How long the minted JWTs stay valid; the test takes a fraction of it.
const TOKEN_TTL_SECS: u64 = 3_600;
/// How often a profile is read again when it lacks `viewer.knownFollowers`: the AppView
/// drops them silently when GetFollowsFollowing takes over its 100 ms budget (CONTRACT §0.6).
const KNOWN_FOLLOWERS_TRIES_MAX: usize = 10;

const TIMELINE: &str = "app.bsky.feed.getTimeline";
const PROFILE: &str = "app.bsky.actor.getProfile";
const FOLLOWERS: &str = "app.bsky.graph.getFollowers";
const FOLLOWS: &str = "app.bsky.graph.getFollows";
const AUTHOR_FEED: &str = "app.bsky.feed.getAuthorFeed";
const THREAD: &str = "app.bsky.feed.getPostThread";
const LIKES: &str = "app.bsky.feed.getLikes";
const KNOWN_FOLLOWERS: &str = "app.bsky.graph.getKnownFollowers";
const NSIDS: [&str; 8] = [
    TIMELINE,
    PROFILE,
    FOLLOWERS,
    FOLLOWS,
    AUTHOR_FEED,
    THREAD,
    LIKES,
    KNOWN_FOLLOWERS,
];

const POST_VIEW: &str = "app.bsky.feed.defs#postView";
const BLOCKED_POST: &str = "app.bsky.feed.defs#blockedPost";
const NOT_FOUND_POST: &str = "app.bsky.feed.defs#notFoundPost";
const THREAD_VIEW_POST: &str = "app.bsky.feed.defs#threadViewPost";
const REASON_REPOST: &str = "app.bsky.feed.defs#reasonRepost";
const EMBED_RECORD: &str = "app.bsky.embed.record#viewRecord";
const EMBED_BLOCKED: &str = "app.bsky.embed.record#viewBlocked";
const EMBED_NOT_FOUND: &str = "app.bsky.embed.record#viewNotFound";

// Fixed roles, so that every seed exercises every block rule. Their follows, blocks and posts
// below are never undone by the random part.
/// The main viewer: follows X, Y, Z, W and K, blocks X.
const A: u32 = 0;
/// Blocked by A; posts, and reposts Y.
const X: u32 = 1;
/// Replies to X's post: hidden from A's timeline (ancestor author blocked).
const Y: u32 = 2;
/// Quotes X's post: the quote shows as `viewBlocked` to A.
const Z: u32 = 3;
/// Blocks W.
const V: u32 = 4;
/// Replies to V's post: a third-party block, so the parent is a `blockedPost` for everyone.
const W: u32 = 5;
/// Blocks A: hidden from A's timeline, and A's author feed of K is `BlockedByActor`.
const K: u32 = 6;

// ---------------------------------------------------------------------------------------------
// The scenario and its model.

#[derive(Clone, Debug)]
struct Post {
    author: u32,
    rkey: String,
    cid: String,
    time_us: u64,
    parent: Option<usize>,
    root: Option<usize>,
    quote: Option<usize>,
    live: bool,
    fixed: bool,
}

/// A like or repost (subject: a post index) or a follow or block (subject: a user).
#[derive(Clone, Debug)]
struct Link {
    author: u32,
    rkey: String,
    time_us: u64,
    subject: usize,
    live: bool,
    fixed: bool,
}

#[derive(Default)]
struct World {
    posts: Vec<Post>,
    likes: Vec<Link>,
    reposts: Vec<Link>,
    follows: Vec<Link>,
    blocks: Vec<Link>,
    profile_us: Vec<u64>,
}

fn did(user: u32) -> String {
    sample::did(user)
}

fn handle(user: u32) -> String {
    format!("user{user}.starling.test")
}

fn display_name(user: u32) -> String {
    format!("User {user}")
}

fn record_uri(user: u32, collection: &str, rkey: &str) -> String {
    format!("at://{}/{collection}/{rkey}", did(user))
}

/// The AppView's rendering of a protobuf `Timestamp` Starling sends: protobuf-es `toDate`
/// rounds the nanoseconds up to whole milliseconds, then `toISOString`.
fn iso_ms(time_us: u64) -> String {
    let text = sample::datetime(time_us.div_ceil(1_000) * 1_000);
    format!("{}Z", &text[..23])
}

/// The AppView's rendering of a datetime string in a record: JavaScript's `Date` parses it
/// to whole milliseconds (cutting the rest), then `toISOString`.
fn iso_ms_parsed(time_us: u64) -> String {
    let text = sample::datetime(time_us);
    format!("{}Z", &text[..23])
}

fn live(links: &[Link], author: u32, subject: usize) -> Option<&Link> {
    links
        .iter()
        .find(|link| link.live && link.author == author && link.subject == subject)
}

impl World {
    fn follow(&self, author: u32, subject: u32) -> Option<&Link> {
        live(&self.follows, author, subject as usize)
    }

    fn follow_uri(&self, author: u32, subject: u32) -> Option<String> {
        self.follow(author, subject)
            .map(|link| record_uri(author, "app.bsky.graph.follow", &link.rkey))
    }

    fn block_uri(&self, author: u32, subject: u32) -> Option<String> {
        live(&self.blocks, author, subject as usize)
            .map(|link| record_uri(author, "app.bsky.graph.block", &link.rkey))
    }

    /// A block in either direction.
    fn blocked(&self, a: u32, b: u32) -> bool {
        self.block_uri(a, b).is_some() || self.block_uri(b, a).is_some()
    }

    fn post_uri(&self, post: usize) -> String {
        let p = &self.posts[post];
        record_uri(p.author, "app.bsky.feed.post", &p.rkey)
    }

    fn author(&self, post: usize) -> u32 {
        self.posts[post].author
    }

    fn like_uri(&self, user: u32, post: usize) -> Option<String> {
        live(&self.likes, user, post).map(|l| record_uri(user, "app.bsky.feed.like", &l.rkey))
    }

    fn repost_uri(&self, user: u32, post: usize) -> Option<String> {
        live(&self.reposts, user, post).map(|l| record_uri(user, "app.bsky.feed.repost", &l.rkey))
    }

    fn live_posts(&self) -> Vec<usize> {
        (0..self.posts.len())
            .filter(|&p| self.posts[p].live)
            .collect()
    }

    /// Live direct replies of `post`, newest first.
    fn replies(&self, post: usize) -> Vec<usize> {
        let mut res: Vec<usize> = (0..self.posts.len())
            .filter(|&p| self.posts[p].live && self.posts[p].parent == Some(post))
            .collect();
        res.sort_by_key(|&p| std::cmp::Reverse(self.posts[p].time_us));
        res
    }

    /// Likes, reposts, replies and quotes of `post`, counting live records.
    fn counts(&self, post: usize) -> [usize; 4] {
        let n_links = |links: &[Link]| links.iter().filter(|l| l.live && l.subject == post).count();
        let n_posts = |of: fn(&Post) -> Option<usize>| {
            self.posts
                .iter()
                .filter(|p| p.live && of(p) == Some(post))
                .count()
        };
        [
            n_links(&self.likes),
            n_links(&self.reposts),
            n_posts(|p| p.parent),
            n_posts(|p| p.quote),
        ]
    }

    /// Whom `viewer` follows among `subject`'s followers.
    fn known_followers(&self, viewer: u32, subject: u32) -> BTreeSet<u32> {
        (0..USERS)
            .filter(|&user| {
                self.follow(viewer, user).is_some() && self.follow(user, subject).is_some()
            })
            .collect()
    }
}

/// Writes the scenario's events and keeps the model in step.
struct Gen {
    rng: Rng,
    time_us: u64,
    events: Vec<Event>,
    world: World,
}

/// A CIDv1 (dag-cbor, sha2-256) of random bytes, base32: the lexicons check the format.
fn cid(rng: &mut Rng) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut bytes = vec![0x01, 0x71, 0x12, 0x20];
    for _ in 0..4 {
        bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    let mut res = String::from("b");
    let (mut buffer, mut n_bits) = (0u32, 0u32);
    for byte in bytes {
        buffer = (buffer << 8) | u32::from(byte);
        n_bits += 8;
        while n_bits >= 5 {
            n_bits -= 5;
            res.push(char::from(ALPHABET[((buffer >> n_bits) & 31) as usize]));
        }
        buffer &= (1 << n_bits) - 1;
    }
    if n_bits > 0 {
        res.push(char::from(
            ALPHABET[((buffer << (5 - n_bits)) & 31) as usize],
        ));
    }
    res
}

impl Gen {
    fn tick(&mut self) -> u64 {
        self.time_us += self.rng.range(1_000, 3_000_000);
        self.time_us
    }

    fn push(&mut self, time_us: u64, line: Value) {
        self.events.push(Event {
            time_us,
            line: line.to_string(),
        });
    }

    /// A create of `collection` by `author` with `fields` plus `$type` and `createdAt`;
    /// returns (rkey, cid, time).
    fn create(
        &mut self,
        author: u32,
        collection: &str,
        rkey: Option<&str>,
        fields: Value,
    ) -> (String, String, u64) {
        let time_us = self.tick();
        let rkey = rkey.map_or_else(
            || sample::tid(time_us, (author % 1024) as u16),
            str::to_owned,
        );
        let cid = cid(&mut self.rng);
        let mut record = fields;
        record["$type"] = json!(collection);
        record["createdAt"] = json!(sample::datetime(time_us));
        self.push(
            time_us,
            json!({
                "did": did(author), "time_us": time_us, "kind": "commit",
                "commit": {
                    "rev": sample::tid(time_us, 0), "operation": "create",
                    "collection": collection, "rkey": rkey, "record": record, "cid": cid,
                },
            }),
        );
        (rkey, cid, time_us)
    }

    fn delete(&mut self, author: u32, collection: &str, rkey: &str) {
        let time_us = self.tick();
        self.push(
            time_us,
            json!({
                "did": did(author), "time_us": time_us, "kind": "commit",
                "commit": {
                    "rev": sample::tid(time_us, 0), "operation": "delete",
                    "collection": collection, "rkey": rkey,
                },
            }),
        );
    }

    fn account(&mut self, user: u32) {
        let time_us = self.tick();
        self.push(
            time_us,
            json!({
                "did": did(user), "time_us": time_us, "kind": "identity",
                "identity": {
                    "did": did(user), "handle": handle(user), "seq": time_us,
                    "time": sample::datetime(time_us),
                },
            }),
        );
        let fields =
            json!({ "displayName": display_name(user), "description": "A synthetic user" });
        let (_, _, time_us) = self.create(user, "app.bsky.actor.profile", Some("self"), fields);
        self.world.profile_us.push(time_us);
    }

    fn strong_ref(&self, post: usize) -> Value {
        json!({ "uri": self.world.post_uri(post), "cid": self.world.posts[post].cid })
    }

    fn link(&mut self, author: u32, collection: &str, subject: usize, fixed: bool) -> Link {
        let fields = match collection {
            "app.bsky.graph.follow" | "app.bsky.graph.block" => {
                json!({ "subject": did(subject as u32) })
            }
            _ => json!({ "subject": self.strong_ref(subject) }),
        };
        let (rkey, _, time_us) = self.create(author, collection, None, fields);
        Link {
            author,
            rkey,
            time_us,
            subject,
            live: true,
            fixed,
        }
    }

    fn follow(&mut self, author: u32, subject: u32, fixed: bool) {
        assert!(author != subject && self.world.follow(author, subject).is_none());
        let link = self.link(author, "app.bsky.graph.follow", subject as usize, fixed);
        self.world.follows.push(link);
    }

    fn block(&mut self, author: u32, subject: u32, fixed: bool) {
        assert!(author != subject && self.world.block_uri(author, subject).is_none());
        let link = self.link(author, "app.bsky.graph.block", subject as usize, fixed);
        self.world.blocks.push(link);
    }

    fn like(&mut self, author: u32, post: usize, fixed: bool) {
        assert!(self.world.like_uri(author, post).is_none());
        let link = self.link(author, "app.bsky.feed.like", post, fixed);
        self.world.likes.push(link);
    }

    fn repost(&mut self, author: u32, post: usize, fixed: bool) {
        assert!(self.world.repost_uri(author, post).is_none());
        let link = self.link(author, "app.bsky.feed.repost", post, fixed);
        self.world.reposts.push(link);
    }

    fn post(
        &mut self,
        author: u32,
        parent: Option<usize>,
        quote: Option<usize>,
        fixed: bool,
    ) -> usize {
        let mut fields = json!({ "text": format!("a post by user {author}"), "langs": ["en"] });
        let root = parent.map(|parent| self.world.posts[parent].root.unwrap_or(parent));
        if let (Some(parent), Some(root)) = (parent, root) {
            fields["reply"] =
                json!({ "root": self.strong_ref(root), "parent": self.strong_ref(parent) });
        }
        if let Some(quote) = quote {
            fields["embed"] =
                json!({ "$type": "app.bsky.embed.record", "record": self.strong_ref(quote) });
        }
        let (rkey, cid, time_us) = self.create(author, "app.bsky.feed.post", None, fields);
        self.world.posts.push(Post {
            author,
            rkey,
            cid,
            time_us,
            parent,
            root,
            quote,
            live: true,
            fixed,
        });
        self.world.posts.len() - 1
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.rng.range(0, items.len() as u64) as usize])
    }

    /// Deletes one live, unfixed like, repost, follow or block (`kind`: its collection) of
    /// `author`; false if there is none.
    fn unlink(&mut self, author: u32, kind: &str) -> bool {
        let links = match kind {
            "app.bsky.feed.like" => &self.world.likes,
            "app.bsky.feed.repost" => &self.world.reposts,
            "app.bsky.graph.follow" => &self.world.follows,
            _ => &self.world.blocks,
        };
        let own: Vec<usize> = (0..links.len())
            .filter(|&i| links[i].live && !links[i].fixed && links[i].author == author)
            .collect();
        let Some(idx) = self.pick(&own) else {
            return false;
        };
        let links = match kind {
            "app.bsky.feed.like" => &mut self.world.likes,
            "app.bsky.feed.repost" => &mut self.world.reposts,
            "app.bsky.graph.follow" => &mut self.world.follows,
            _ => &mut self.world.blocks,
        };
        links[idx].live = false;
        let rkey = links[idx].rkey.clone();
        self.delete(author, kind, &rkey);
        true
    }

    /// One random action by `author`; false if it was not possible.
    fn random_action(&mut self, author: u32) -> bool {
        let posts = self.world.live_posts();
        let target = self.pick(&posts);
        let other = self.rng.range(0, u64::from(USERS)) as u32;
        match (self.rng.range(0, 100), target) {
            (0..28, _) | (_, None) => {
                self.post(author, None, None, false);
            }
            (28..46, Some(target)) => {
                self.post(author, Some(target), None, false);
            }
            (46..52, Some(target)) => {
                self.post(author, None, Some(target), false);
            }
            (52..62, Some(target)) if self.world.repost_uri(author, target).is_none() => {
                self.repost(author, target, false);
            }
            (62..82, Some(target)) if self.world.like_uri(author, target).is_none() => {
                self.like(author, target, false);
            }
            (82..86, _) => {
                // A post without live replies, so that every reply's ancestors exist.
                let own: Vec<usize> = posts
                    .iter()
                    .copied()
                    .filter(|&p| {
                        let post = &self.world.posts[p];
                        post.author == author && !post.fixed && self.world.replies(p).is_empty()
                    })
                    .collect();
                let Some(post) = self.pick(&own) else {
                    return false;
                };
                self.world.posts[post].live = false;
                let rkey = self.world.posts[post].rkey.clone();
                self.delete(author, "app.bsky.feed.post", &rkey);
            }
            (86..89, _) => return self.unlink(author, "app.bsky.feed.repost"),
            (89..92, _) => return self.unlink(author, "app.bsky.feed.like"),
            (92..95, _) => return self.unlink(author, "app.bsky.graph.follow"),
            (95..98, _) if other != author && self.world.follow(author, other).is_none() => {
                self.follow(author, other, false);
            }
            (98, _)
                if other > K
                    && other != author
                    && self.world.block_uri(author, other).is_none() =>
            {
                self.block(author, other, false);
            }
            (99, _) => return self.unlink(author, "app.bsky.graph.block"),
            _ => return false,
        }
        true
    }
}

/// The seeded scenario: its events in `time_us` order, and the world they leave.
fn scenario(seed: u64) -> (Vec<Event>, World) {
    let mut g = Gen {
        rng: Rng::new(seed),
        time_us: START_US,
        events: Vec::new(),
        world: World::default(),
    };
    for user in 0..USERS {
        g.account(user);
    }
    for subject in [X, Y, Z, W, K] {
        g.follow(A, subject, true);
    }
    g.block(A, X, true);
    g.block(K, A, true);
    g.block(V, W, true);
    let x_post = g.post(X, None, None, true);
    g.post(Y, Some(x_post), None, true);
    g.post(Z, None, Some(x_post), true);
    let y_post = g.post(Y, None, None, true);
    g.repost(X, y_post, true);
    g.like(A, y_post, true); // A follows Y: every scenario shows a viewer's like
    let v_post = g.post(V, None, None, true);
    g.post(W, Some(v_post), None, true);
    g.post(K, None, None, true);
    for user in 0..USERS {
        for _ in 0..g.rng.range(2, 10) {
            // Skewed toward low numbers: a few popular accounts.
            let a = g.rng.range(0, u64::from(USERS));
            let subject = g.rng.range(0, a + 1) as u32;
            if subject != user && g.world.follow(user, subject).is_none() {
                g.follow(user, subject, false);
            }
        }
    }
    let mut n_actions = 0;
    while n_actions < CONTENT_EVENTS {
        let author = g.rng.range(0, u64::from(USERS)) as u32;
        if g.random_action(author) {
            n_actions += 1;
        }
    }
    (g.events, g.world)
}

// ---------------------------------------------------------------------------------------------
// What the AppView should answer, from the model and the AppView's rules.

/// The model seen by one viewer (`None`: anonymous).
struct Expect<'a> {
    world: &'a World,
    viewer: Option<u32>,
}

/// Whether a post's reply parent, reply root and quoted post are blocked from its author
/// (the AppView's `postBlocks`: third-party blocks, hidden from everyone).
struct PostBlocks {
    parent: bool,
    root: bool,
    embed: bool,
}

impl Expect<'_> {
    fn viewer_blocked(&self, user: u32) -> bool {
        self.viewer
            .is_some_and(|viewer| self.world.blocked(viewer, user))
    }

    fn post_blocks(&self, post: usize) -> PostBlocks {
        let w = self.world;
        let author = w.author(post);
        let blocked_from = |other: Option<usize>| {
            other.is_some_and(|other| {
                w.author(other) != author && w.blocked(author, w.author(other))
            })
        };
        let p = &w.posts[post];
        PostBlocks {
            parent: blocked_from(p.parent),
            root: blocked_from(p.root),
            embed: p
                .quote
                .is_some_and(|quote| w.blocked(author, w.author(quote))),
        }
    }

    /// A post view, as `project_post` reduces one.
    fn post(&self, post: usize) -> Value {
        let w = self.world;
        let p = &w.posts[post];
        let counts = w.counts(post);
        let viewer = self.viewer;
        let embed = p.quote.map_or(Value::Null, |quote| {
            let kind = if self.viewer_blocked(w.author(quote)) || self.post_blocks(post).embed {
                EMBED_BLOCKED
            } else if !w.posts[quote].live {
                EMBED_NOT_FOUND
            } else {
                EMBED_RECORD
            };
            json!([kind, w.post_uri(quote)])
        });
        json!({
            "uri": w.post_uri(post),
            "cid": p.cid,
            "author": did(p.author),
            "handle": handle(p.author),
            "displayName": display_name(p.author),
            "indexedAt": iso_ms(p.time_us),
            "counts": counts,
            "like": viewer.and_then(|v| w.like_uri(v, post)),
            "repost": viewer.and_then(|v| w.repost_uri(v, post)),
            "embed": embed,
        })
    }

    /// The `reply` of a feed item: the kinds and URIs of its root and parent.
    fn reply_ref(&self, post: usize) -> Value {
        let w = self.world;
        let p = &w.posts[post];
        let (Some(parent), Some(root)) = (p.parent, p.root) else {
            return Value::Null;
        };
        let child_blocks = self.post_blocks(post);
        let kind = |other: usize, third_party_block: bool| {
            if !w.posts[other].live {
                NOT_FOUND_POST
            } else if self.viewer_blocked(w.author(other)) || third_party_block {
                BLOCKED_POST
            } else {
                POST_VIEW
            }
        };
        let root_blocked = child_blocks.root || self.post_blocks(parent).root;
        json!({
            "root": [kind(root, root_blocked), w.post_uri(root)],
            "parent": [kind(parent, child_blocks.parent), w.post_uri(parent)],
        })
    }

    fn feed_item(&self, post: usize, repost: Option<&Link>) -> Value {
        let reason = repost.map_or(Value::Null, |r| {
            json!([
                REASON_REPOST,
                did(r.author),
                record_uri(r.author, "app.bsky.feed.repost", &r.rkey)
            ])
        });
        json!({ "post": self.post(post), "reason": reason, "reply": self.reply_ref(post) })
    }

    /// The posts and reposts (of live posts) by `authors`, newest first.
    fn feed_of(&self, authors: &BTreeSet<u32>) -> Vec<(u64, usize, Option<&Link>)> {
        let w = self.world;
        let mut items: Vec<(u64, usize, Option<&Link>)> = (0..w.posts.len())
            .filter(|&p| w.posts[p].live && authors.contains(&w.author(p)))
            .map(|p| (w.posts[p].time_us, p, None))
            .collect();
        items.extend(
            w.reposts
                .iter()
                .filter(|r| r.live && authors.contains(&r.author) && w.posts[r.subject].live)
                .map(|r| (r.time_us, r.subject, Some(r))),
        );
        items.sort_by_key(|&(time_us, _, _)| std::cmp::Reverse(time_us));
        items
    }

    /// getAuthorFeed: the actor's items, or the 400 error the AppView gives for a block.
    fn author_feed(&self, actor: u32, no_replies: bool) -> Result<Vec<Value>, &'static str> {
        let w = self.world;
        if let Some(viewer) = self.viewer {
            if w.block_uri(viewer, actor).is_some() {
                return Err("BlockedActor");
            }
            if w.block_uri(actor, viewer).is_some() {
                return Err("BlockedByActor");
            }
        }
        Ok(self
            .feed_of(&BTreeSet::from([actor]))
            .into_iter()
            .filter(|&(_, post, _)| !self.viewer_blocked(w.author(post)))
            .filter(|&(_, post, repost)| {
                !no_replies || repost.is_some() || w.posts[post].parent.is_none()
            })
            .map(|(_, post, repost)| self.feed_item(post, repost))
            .collect())
    }

    fn thread_post(&self, post: usize, parent: Value, replies: Value) -> Value {
        let w = self.world;
        let root_author = w.author(w.posts[post].root.unwrap_or(post));
        json!({
            "type": THREAD_VIEW_POST,
            "post": self.post(post),
            "rootAuthorLike": w.like_uri(root_author, post),
            "parent": parent,
            "replies": replies,
        })
    }

    /// getPostThread with the default `parentHeight` (80) and `depth` (6).
    fn thread(&self, anchor: usize) -> Value {
        if self.viewer_blocked(self.world.author(anchor)) {
            return json!({ "type": BLOCKED_POST, "uri": self.world.post_uri(anchor) });
        }
        self.thread_post(
            anchor,
            self.thread_parent(anchor, 80),
            self.thread_replies(anchor, 6),
        )
    }

    fn thread_parent(&self, child: usize, height: u32) -> Value {
        let w = self.world;
        let Some(parent) = w.posts[child].parent.filter(|_| height >= 1) else {
            return Value::Null;
        };
        let uri = w.post_uri(parent);
        if self.post_blocks(child).parent || self.viewer_blocked(w.author(parent)) {
            return json!({ "type": BLOCKED_POST, "uri": uri });
        }
        if !w.posts[parent].live {
            return json!({ "type": NOT_FOUND_POST, "uri": uri });
        }
        self.thread_post(parent, self.thread_parent(parent, height - 1), Value::Null)
    }

    fn thread_replies(&self, post: usize, depth: u32) -> Value {
        if depth < 1 {
            return Value::Null;
        }
        let w = self.world;
        let replies = w
            .replies(post)
            .into_iter()
            .filter(|&reply| !self.post_blocks(reply).parent)
            .map(|reply| {
                if self.viewer_blocked(w.author(reply)) {
                    json!({ "type": BLOCKED_POST, "uri": w.post_uri(reply) })
                } else {
                    self.thread_post(reply, Value::Null, self.thread_replies(reply, depth - 1))
                }
            })
            .collect();
        Value::Array(replies)
    }

    /// `viewer` of a profile view: none for anonymous callers; all empty on the viewer's own
    /// (the AppView never asks about self-follows or self-blocks).
    fn profile_viewer(&self, user: u32) -> Value {
        let w = self.world;
        let Some(viewer) = self.viewer else {
            return Value::Null;
        };
        let block = w.blocked(viewer, user);
        json!({
            "following": w.follow_uri(viewer, user).filter(|_| !block),
            "followedBy": w.follow_uri(user, viewer).filter(|_| !block),
            "blocking": w.block_uri(viewer, user),
            "blockedBy": w.block_uri(user, viewer).is_some(),
            "muted": false,
        })
    }

    /// A profile in a list, as `project_profile` reduces one.
    fn profile(&self, user: u32) -> Value {
        json!({
            "did": did(user),
            "handle": handle(user),
            "displayName": display_name(user),
            "viewer": self.profile_viewer(user),
        })
    }

    /// getProfile, as `project_profile_detailed` reduces it (known followers apart).
    fn profile_detailed(&self, user: u32) -> Value {
        let w = self.world;
        let mut viewer = self.profile_viewer(user);
        if let Some(object) = viewer.as_object_mut() {
            let n_known = w.known_followers(self.viewer.unwrap(), user).len();
            object.insert(
                "knownFollowers".into(),
                json!((n_known > 0).then_some(n_known)),
            );
        }
        let profile_us = w.profile_us[user as usize];
        json!({
            "did": did(user),
            "handle": handle(user),
            "displayName": display_name(user),
            "createdAt": iso_ms(profile_us),
            "indexedAt": iso_ms(profile_us),
            "followersCount": w.follows.iter().filter(|f| f.live && f.subject == user as usize).count(),
            "followsCount": w.follows.iter().filter(|f| f.live && f.author == user).count(),
            "postsCount": w.posts.iter().filter(|p| p.live && p.author == user).count(),
            "viewer": viewer,
        })
    }

    /// getFollowers: newest follow first, minus followers blocked with the subject or viewer.
    fn followers(&self, subject: u32) -> Vec<Value> {
        let w = self.world;
        let mut follows: Vec<&Link> = w
            .follows
            .iter()
            .filter(|f| f.live && f.subject == subject as usize)
            .filter(|f| !w.blocked(f.author, subject) && !self.viewer_blocked(f.author))
            .collect();
        follows.sort_by_key(|f| std::cmp::Reverse(f.time_us));
        follows.iter().map(|f| self.profile(f.author)).collect()
    }

    /// getFollows: newest follow first, minus subjects blocked with the actor or the viewer.
    fn follows(&self, actor: u32) -> Vec<Value> {
        let w = self.world;
        let mut follows: Vec<&Link> = w
            .follows
            .iter()
            .filter(|f| f.live && f.author == actor)
            .filter(|f| {
                let subject = f.subject as u32;
                !w.blocked(actor, subject) && !self.viewer_blocked(subject)
            })
            .collect();
        follows.sort_by_key(|f| std::cmp::Reverse(f.time_us));
        follows
            .iter()
            .map(|f| self.profile(f.subject as u32))
            .collect()
    }

    /// getLikes: newest like first, minus likers blocked with the post's author or the viewer.
    fn likes(&self, post: usize) -> Vec<Value> {
        let w = self.world;
        let author = w.author(post);
        let mut likes: Vec<&Link> = w
            .likes
            .iter()
            .filter(|l| l.live && l.subject == post)
            .filter(|l| !w.blocked(author, l.author) && !self.viewer_blocked(l.author))
            .collect();
        likes.sort_by_key(|l| std::cmp::Reverse(l.time_us));
        likes
            .iter()
            .map(|l| json!({ "actor": did(l.author), "createdAt": iso_ms_parsed(l.time_us), "indexedAt": iso_ms(l.time_us) }))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Reducing the AppView's answers to what the model predicts.

fn ref_kind(view: &Value) -> Value {
    json!([view["$type"], view["uri"]])
}

fn project_post(view: &Value) -> Value {
    let embed = &view["embed"];
    let embed = if embed.is_null() {
        Value::Null
    } else {
        json!([embed["record"]["$type"], embed["record"]["uri"]])
    };
    json!({
        "uri": view["uri"],
        "cid": view["cid"],
        "author": view["author"]["did"],
        "handle": view["author"]["handle"],
        "displayName": view["author"]["displayName"],
        "indexedAt": view["indexedAt"],
        "counts": [view["likeCount"], view["repostCount"], view["replyCount"], view["quoteCount"]],
        "like": view["viewer"]["like"],
        "repost": view["viewer"]["repost"],
        "embed": embed,
    })
}

fn project_feed_item(item: &Value) -> Value {
    let reason = &item["reason"];
    let reason = if reason.is_null() {
        Value::Null
    } else {
        json!([reason["$type"], reason["by"]["did"], reason["uri"]])
    };
    let reply = &item["reply"];
    let reply = if reply.is_null() {
        Value::Null
    } else {
        json!({ "root": ref_kind(&reply["root"]), "parent": ref_kind(&reply["parent"]) })
    };
    json!({ "post": project_post(&item["post"]), "reason": reason, "reply": reply })
}

fn project_thread(node: &Value) -> Value {
    if node.is_null() {
        return Value::Null;
    }
    if node["$type"] != THREAD_VIEW_POST {
        return json!({ "type": node["$type"], "uri": node["uri"] });
    }
    let replies = match node.get("replies") {
        Some(Value::Array(replies)) => Value::Array(replies.iter().map(project_thread).collect()),
        _ => Value::Null,
    };
    json!({
        "type": node["$type"],
        "post": project_post(&node["post"]),
        "rootAuthorLike": node["threadContext"]["rootAuthorLike"],
        "parent": project_thread(&node["parent"]),
        "replies": replies,
    })
}

fn project_viewer(viewer: &Value) -> Value {
    if viewer.is_null() {
        return Value::Null;
    }
    json!({
        "following": viewer["following"],
        "followedBy": viewer["followedBy"],
        "blocking": viewer["blocking"],
        "blockedBy": viewer["blockedBy"],
        "muted": viewer["muted"],
    })
}

fn project_profile(view: &Value) -> Value {
    json!({
        "did": view["did"],
        "handle": view["handle"],
        "displayName": view["displayName"],
        "viewer": project_viewer(&view["viewer"]),
    })
}

fn project_profile_detailed(view: &Value) -> Value {
    let mut viewer = project_viewer(&view["viewer"]);
    if let Some(object) = viewer.as_object_mut() {
        object.insert(
            "knownFollowers".into(),
            view["viewer"]["knownFollowers"]["count"].clone(),
        );
    }
    json!({
        "did": view["did"],
        "handle": view["handle"],
        "displayName": view["displayName"],
        "createdAt": view["createdAt"],
        "indexedAt": view["indexedAt"],
        "followersCount": view["followersCount"],
        "followsCount": view["followsCount"],
        "postsCount": view["postsCount"],
        "viewer": viewer,
    })
}

fn project_like(like: &Value) -> Value {
    json!({ "actor": like["actor"]["did"], "createdAt": like["createdAt"], "indexedAt": like["indexedAt"] })
}

// ---------------------------------------------------------------------------------------------
// The harness: processes, tokens, and the XRPC client.

/// Percent-encodes a query value.
fn escape(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A deterministic secp256k1 private key per user, below the curve order (top byte < 0x80).
fn private_key_hex(seed: u64, user: u32) -> String {
    let mut rng = Rng::new(seed ^ 0x6b65_7973 ^ (u64::from(user) << 32));
    let mut res = format!("{:02x}", rng.range(1, 0x80));
    while res.len() < 64 {
        res.push_str(&format!("{:016x}", rng.next_u64()));
    }
    res.truncate(64);
    res
}

/// Reads `{users: [{did, handle, key}], tokens: [{iss, lxm}], ttl}` on stdin and prints
/// `{docs: {did: document}, tokens: [jwt]}`, with the harness's modules in `argv[1]`.
const KEYS_AND_TOKENS_JS: &str = r#"
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
const dir = process.argv[1]
const { makeKeys } = await import(pathToFileURL(join(dir, 'keys.mjs')).href)
const { serviceJwt } = await import(pathToFileURL(join(dir, 'jwt.mjs')).href)
let text = ''
for await (const chunk of process.stdin) text += chunk
const input = JSON.parse(text)
const docs = {}
for (const u of input.users) {
  docs[u.did] = (await makeKeys({ privateKeyHex: u.key, did: u.did, handle: u.handle })).didDocument
}
const keys = Object.fromEntries(input.users.map((u) => [u.did, u.key]))
const tokens = []
for (const t of input.tokens) {
  tokens.push(await serviceJwt({ iss: t.iss, privateKeyHex: keys[t.iss], lxm: t.lxm, ttlSecs: input.ttl }))
}
process.stdout.write(JSON.stringify({ docs, tokens }) + '\n')
"#;

/// A JWT per (viewer, NSID).
type Tokens = HashMap<(u32, &'static str), String>;

/// DID documents for every user, and a JWT for each (viewer, NSID), made by
/// `appview/keys.mjs` and `appview/jwt.mjs` in one Node process.
fn keys_and_tokens(node: &Path, seed: u64, viewers: &[u32]) -> (HashMap<String, Value>, Tokens) {
    let pairs: Vec<(u32, &'static str)> = viewers
        .iter()
        .flat_map(|&v| NSIDS.iter().map(move |&nsid| (v, nsid)))
        .collect();
    mint_keys_and_tokens(node, seed, USERS, pairs)
}

/// DID documents for users `0..n_users`, and a JWT for each (user, NSID) of `pairs`.
fn mint_keys_and_tokens(
    node: &Path,
    seed: u64,
    n_users: u32,
    pairs: Vec<(u32, &'static str)>,
) -> (HashMap<String, Value>, Tokens) {
    let users: Vec<Value> = (0..n_users)
        .map(|u| json!({ "did": did(u), "handle": handle(u), "key": private_key_hex(seed, u) }))
        .collect();
    let tokens: Vec<Value> = pairs
        .iter()
        .map(|&(v, nsid)| json!({ "iss": did(v), "lxm": nsid }))
        .collect();
    let input = json!({ "users": users, "tokens": tokens, "ttl": TOKEN_TTL_SECS });
    let dir = util::repo_root().join("appview");
    let out = util::node_eval(
        node,
        KEYS_AND_TOKENS_JS,
        &[dir.as_os_str()],
        &input.to_string(),
    );
    let out: Value = serde_json::from_str(&out).unwrap();
    let docs = serde_json::from_value(out["docs"].clone()).unwrap();
    let tokens = pairs
        .into_iter()
        .zip(out["tokens"].as_array().unwrap())
        .map(|(pair, token)| (pair, token.as_str().unwrap().to_owned()))
        .collect();
    (docs, tokens)
}

/// A JSON value for a failure message: an array one compact item per line.
fn one_per_line(value: &Value) -> String {
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(idx, item)| format!("[{idx}] {item}"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => value.to_string(),
    }
}

/// The AppView's XRPC API, with a token per viewer and method.
struct Xrpc<'a> {
    addr: String,
    appview: &'a Proc,
    tokens: Tokens,
    n_requests: Cell<usize>,
}

impl Xrpc<'_> {
    /// GET an XRPC method as `viewer` (a Bearer JWT) or anonymously.
    fn get(
        &self,
        viewer: Option<u32>,
        nsid: &'static str,
        query: &[(&str, String)],
    ) -> (u16, Value) {
        let query: Vec<String> = query
            .iter()
            .map(|(key, value)| format!("{key}={}", escape(value)))
            .collect();
        let path = format!("/xrpc/{nsid}?{}", query.join("&"));
        let auth = viewer.map(|v| format!("Bearer {}", self.tokens[&(v, nsid)]));
        let headers: Vec<(&str, &str)> = auth
            .iter()
            .map(|auth| ("Authorization", auth.as_str()))
            .collect();
        self.n_requests.set(self.n_requests.get() + 1);
        let (status, body) = util::http_get_with(&self.addr, &path, &headers)
            .unwrap_or_else(|err| panic!("GET {path}: {err}\n{}", self.failed_rpcs()));
        let value = serde_json::from_str(&body)
            .unwrap_or_else(|err| panic!("GET {path}: {err}: {body}\n{}", self.failed_rpcs()));
        (status, value)
    }

    /// GET until the cursor runs out; the items under `key` of every page, or the first
    /// non-200 answer.
    fn pages(
        &self,
        viewer: Option<u32>,
        nsid: &'static str,
        query: &[(&str, String)],
        key: &str,
    ) -> Result<Vec<Value>, (u16, Value)> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let mut query = query.to_vec();
            if let Some(cursor) = &cursor {
                query.push(("cursor", cursor.clone()));
            }
            let (status, page) = self.get(viewer, nsid, &query);
            if status != 200 {
                return Err((status, page));
            }
            items.extend(page[key].as_array().unwrap().iter().cloned());
            match page["cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(items),
            }
        }
        panic!("{nsid} {query:?}: the pages never ended");
    }

    /// Every page of a list method, each item reduced by `project`; fails on an error.
    #[track_caller]
    fn list(
        &self,
        viewer: Option<u32>,
        nsid: &'static str,
        query: &[(&str, String)],
        key: &str,
        project: fn(&Value) -> Value,
    ) -> Value {
        match self.pages(viewer, nsid, query, key) {
            Ok(items) => Value::Array(items.iter().map(project).collect()),
            Err((status, body)) => panic!(
                "{nsid} {query:?} as {viewer:?}: HTTP {status}: {body}\n{}",
                self.failed_rpcs()
            ),
        }
    }

    /// The dataplane RPCs the AppView saw fail, from its `--trace-rpcs` lines.
    fn failed_rpcs(&self) -> String {
        let failed: Vec<String> = self
            .appview
            .stderr_lines()
            .into_iter()
            .filter(|line| !line.contains(r#""code":"ok""#))
            .collect();
        format!(
            "appview stderr (failed RPCs and errors):\n{}",
            failed.join("\n")
        )
    }

    #[track_caller]
    fn check(&self, what: &str, have: &Value, want: &Value) {
        if have != want {
            let first = match (have, want) {
                (Value::Array(have), Value::Array(want)) => {
                    let idx = have.iter().zip(want).take_while(|(h, w)| h == w).count();
                    format!(
                        "first difference at item {idx} (have {}, want {} items):\nhave {}\nwant {}",
                        have.len(),
                        want.len(),
                        have.get(idx).unwrap_or(&Value::Null),
                        want.get(idx).unwrap_or(&Value::Null)
                    )
                }
                _ => String::new(),
            };
            panic!(
                "{what}: the AppView's answer differs from the model; {first}\n--- have:\n{}\n--- want:\n{}\n{}",
                one_per_line(have),
                one_per_line(want),
                self.failed_rpcs()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// Marker strings counted in the expected answers: repost reasons, blocked reply refs and
/// thread nodes, blocked quotes, thread posts, viewer or root-author likes.
const MARKERS: [&str; 5] = [
    REASON_REPOST,
    BLOCKED_POST,
    EMBED_BLOCKED,
    THREAD_VIEW_POST,
    "/app.bsky.feed.like/",
];

/// What the expected answers exercised, so that a scenario which stops covering a rule
/// fails instead of passing vacuously.
#[derive(Default, Debug)]
struct Coverage(BTreeMap<&'static str, usize>);

impl Coverage {
    fn saw(&mut self, want: &Value) {
        let text = want.to_string();
        for marker in MARKERS {
            self.add(marker, text.matches(marker).count());
        }
    }

    fn add(&mut self, what: &'static str, n: usize) {
        *self.0.entry(what).or_default() += n;
    }

    #[track_caller]
    fn assert_covered(&self, names: &[&'static str]) {
        for name in MARKERS.iter().chain(names) {
            let n = self.0.get(name).copied().unwrap_or(0);
            assert!(n > 0, "the scenario exercised no `{name}`: {self:?}");
        }
    }
}

/// Whom and what the checks ask about.
struct Targets {
    viewers: Vec<u32>,
    subjects: Vec<u32>,
    /// Thread anchors: the fixed roots, the deepest reply and the root of the biggest thread.
    anchors: Vec<usize>,
    /// The most liked posts, and X's.
    liked: Vec<usize>,
}

fn targets(world: &World, seed: u64) -> Targets {
    let mut rng = Rng::new(seed ^ 0x7669_6577);
    let mut randoms: Vec<u32> = Vec::new();
    while randoms.len() < 4 {
        let user = rng.range(u64::from(K) + 1, u64::from(USERS)) as u32;
        if !randoms.contains(&user) {
            randoms.push(user);
        }
    }
    let posts = world.live_posts();
    let depth = |mut post: usize| {
        let mut n = 0;
        while let Some(parent) = world.posts[post].parent {
            (post, n) = (parent, n + 1);
        }
        n
    };
    let n_thread = |root: usize| {
        posts
            .iter()
            .filter(|&&p| world.posts[p].root == Some(root))
            .count()
    };
    let mut anchors: Vec<usize> = posts
        .iter()
        .copied()
        .filter(|&p| world.posts[p].fixed && world.posts[p].parent.is_none())
        .collect();
    let x_post = anchors[0];
    anchors.push(*posts.iter().max_by_key(|&&p| depth(p)).unwrap());
    anchors.push(*posts.iter().max_by_key(|&&p| n_thread(p)).unwrap());
    let mut liked = posts.clone();
    liked.sort_by_key(|&p| std::cmp::Reverse(world.counts(p)[0]));
    liked.truncate(3);
    liked.push(x_post);
    Targets {
        viewers: vec![A, X, V, W, K, randoms[0], randoms[1]],
        subjects: vec![A, X, Y, W, K, randoms[2], randoms[3]],
        anchors,
        liked,
    }
}

impl Expect<'_> {
    fn who(&self) -> String {
        self.viewer
            .map_or_else(|| "anonymous".to_owned(), |v| format!("user {v}"))
    }
}

/// getProfile, read again while `knownFollowers` is missing but expected: the AppView drops
/// it silently when GetFollowsFollowing takes over its 100 ms budget (CONTRACT §0.6).
fn check_profile(x: &Xrpc, expect: &Expect, subject: u32, coverage: &mut Coverage) {
    let what = format!("{}: getProfile of user {subject}", expect.who());
    let known = expect
        .viewer
        .map(|v| expect.world.known_followers(v, subject))
        .unwrap_or_default();
    let mut profile = Value::Null;
    for _ in 0..KNOWN_FOLLOWERS_TRIES_MAX {
        let (status, body) = x.get(expect.viewer, PROFILE, &[("actor", did(subject))]);
        assert_eq!(status, 200, "{what}: {body}\n{}", x.failed_rpcs());
        profile = body;
        if known.is_empty() || !profile["viewer"]["knownFollowers"].is_null() {
            break;
        }
        eprintln!("{what}: no knownFollowers (over the AppView's 100 ms budget?); reading again");
    }
    x.check(
        &what,
        &project_profile_detailed(&profile),
        &expect.profile_detailed(subject),
    );
    if known.is_empty() {
        return;
    }
    // The first 5 of Starling's list, in an order the contract leaves open, minus those
    // blocked with the viewer or the subject.
    coverage.add("known followers", known.len());
    let viewer = expect.viewer.unwrap();
    let shown: BTreeSet<String> = profile["viewer"]["knownFollowers"]["followers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["did"].as_str().unwrap().to_owned())
        .collect();
    let visible: BTreeSet<String> = known
        .iter()
        .filter(|&&u| !expect.world.blocked(viewer, u) && !expect.world.blocked(subject, u))
        .map(|&u| did(u))
        .collect();
    let n_hidden = known.len() - visible.len();
    let fits = if known.len() <= 5 {
        shown == visible
    } else {
        shown.is_subset(&visible) && shown.len() >= 5usize.saturating_sub(n_hidden)
    };
    assert!(
        fits,
        "{what}: known followers shown {shown:?}, of {visible:?} visible ({n_hidden} hidden)"
    );
}

/// getFollowers, getFollows, getKnownFollowers and getAuthorFeed (two filters) of `subject`.
fn check_lists(x: &Xrpc, expect: &Expect, subject: u32, coverage: &mut Coverage) {
    let who = expect.who();
    let viewer = expect.viewer;
    let query = [("actor", did(subject)), ("limit", "100".to_owned())];
    let have = x.list(viewer, FOLLOWERS, &query, "followers", project_profile);
    let want = json!(expect.followers(subject));
    coverage.add("followers", want.as_array().unwrap().len());
    x.check(
        &format!("{who}: getFollowers of user {subject}"),
        &have,
        &want,
    );
    let have = x.list(viewer, FOLLOWS, &query, "follows", project_profile);
    let want = json!(expect.follows(subject));
    x.check(
        &format!("{who}: getFollows of user {subject}"),
        &have,
        &want,
    );
    if let Some(v) = viewer {
        // The whole list, in an order the contract leaves open, minus those blocked with the
        // viewer.
        let have = x.list(viewer, KNOWN_FOLLOWERS, &query, "followers", |p| {
            p["did"].clone()
        });
        let have: BTreeSet<&str> = have
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        let want: BTreeSet<String> = (expect.world.known_followers(v, subject).into_iter())
            .filter(|&u| !expect.world.blocked(v, u))
            .map(did)
            .collect();
        x.check(
            &format!("{who}: getKnownFollowers of user {subject}"),
            &json!(have),
            &json!(want),
        );
    }
    for no_replies in [false, true] {
        let mut query = query.to_vec();
        if no_replies {
            query.push(("filter", "posts_no_replies".to_owned()));
        }
        let what = format!("{who}: getAuthorFeed {query:?}");
        match (
            x.pages(viewer, AUTHOR_FEED, &query, "feed"),
            expect.author_feed(subject, no_replies),
        ) {
            (Ok(have), Ok(want)) => {
                let have: Vec<Value> = have.iter().map(project_feed_item).collect();
                let want = json!(want);
                coverage.saw(&want);
                x.check(&what, &json!(have), &want);
            }
            (Err((400, body)), Err(error)) => {
                coverage.add("blocked author feeds", 1);
                assert_eq!(body["error"], error, "{what}: {body}");
            }
            (have, want) => panic!("{what}: have {have:?}, want {want:?}\n{}", x.failed_rpcs()),
        }
    }
}

fn check_posts(x: &Xrpc, expect: &Expect, targets: &Targets, coverage: &mut Coverage) {
    let who = expect.who();
    let w = expect.world;
    for &anchor in &targets.anchors {
        let what = format!("{who}: getPostThread of {}", w.post_uri(anchor));
        let (status, body) = x.get(expect.viewer, THREAD, &[("uri", w.post_uri(anchor))]);
        assert_eq!(status, 200, "{what}: {body}\n{}", x.failed_rpcs());
        let want = expect.thread(anchor);
        coverage.saw(&want);
        x.check(&what, &project_thread(&body["thread"]), &want);
    }
    for &post in &targets.liked {
        let query = [("uri", w.post_uri(post)), ("limit", "100".to_owned())];
        let have = x.list(expect.viewer, LIKES, &query, "likes", project_like);
        let want = json!(expect.likes(post));
        coverage.add("likes", want.as_array().unwrap().len());
        x.check(
            &format!("{who}: getLikes of {}", w.post_uri(post)),
            &have,
            &want,
        );
    }
}

/// Every endpoint as `viewer` (or anonymously) about every target.
fn check_viewer(x: &Xrpc, expect: &Expect, targets: &Targets, coverage: &mut Coverage) {
    if expect.viewer.is_some() {
        timeline::check_timeline(x, expect, coverage);
    }
    for &subject in &targets.subjects {
        check_profile(x, expect, subject, coverage);
        check_lists(x, expect, subject, coverage);
    }
    check_posts(x, expect, targets, coverage);
}

/// Feed items (post URI, repost URI) by author.
type Feeds = BTreeMap<String, BTreeSet<(String, Option<String>)>>;

/// The real events of `../shared/data/jetstream`, as the test reads them: the live posts
/// (record by URI) and each author's feed items (post URI, repost URI) whose post Starling
/// has. The newest operation on a record by `rev` wins.
fn real_feeds(files: &[PathBuf]) -> (HashMap<String, Value>, Feeds) {
    let mut records: HashMap<String, (String, Value)> = HashMap::new();
    for file in files {
        for line in util::read_lines_of(file) {
            let event: Value = serde_json::from_str(&line).unwrap();
            let commit = &event["commit"];
            if event["kind"] != "commit" {
                continue;
            }
            let uri = format!(
                "at://{}/{}/{}",
                event["did"].as_str().unwrap(),
                commit["collection"].as_str().unwrap(),
                commit["rkey"].as_str().unwrap()
            );
            let rev = commit["rev"].as_str().unwrap().to_owned();
            if records.get(&uri).is_none_or(|(old, _)| *old < rev) {
                records.insert(uri, (rev, commit["record"].clone()));
            }
        }
    }
    let live = |collection: &'static str| {
        records
            .iter()
            .filter(move |(uri, (_, record))| uri.contains(collection) && !record.is_null())
            .map(|(uri, (_, record))| (uri.clone(), record.clone()))
    };
    let posts: HashMap<String, Value> = live("/app.bsky.feed.post/").collect();
    let mut feeds = Feeds::new();
    let author = |uri: &str| uri.split('/').nth(2).unwrap().to_owned();
    for uri in posts.keys() {
        feeds
            .entry(author(uri))
            .or_default()
            .insert((uri.clone(), None));
    }
    for (uri, record) in live("/app.bsky.feed.repost/") {
        let subject = record["subject"]["uri"].as_str().unwrap();
        if posts.contains_key(subject) {
            feeds
                .entry(author(&uri))
                .or_default()
                .insert((subject.to_owned(), Some(uri)));
        }
    }
    (posts, feeds)
}

/// Each real author's feed lists their live posts and reposts (in an order not checked:
/// their `createdAt`s are the clients'), each record passed through unchanged.
fn check_real_authors(x: &Xrpc, files: &[PathBuf]) -> usize {
    let (posts, feeds) = real_feeds(files);
    assert!(!feeds.is_empty(), "no real posts in {files:?}");
    for (author, want) in &feeds {
        let what = format!("anonymous: getAuthorFeed of real author {author}");
        let query = [("actor", author.clone()), ("limit", "100".to_owned())];
        let have = x.list(None, AUTHOR_FEED, &query, "feed", |item| item.clone());
        let mut items = BTreeSet::new();
        for item in have.as_array().unwrap() {
            let uri = item["post"]["uri"].as_str().unwrap();
            let record = posts.get(uri).unwrap_or(&Value::Null);
            x.check(
                &format!("{what}: record of {uri}"),
                &item["post"]["record"],
                record,
            );
            let repost = item["reason"]["uri"].as_str().map(str::to_owned);
            items.insert((uri.to_owned(), repost));
        }
        x.check(&what, &json!(items), &json!(want));
    }
    feeds.len()
}

/// Starling on the replayed real events and the loopback Jetstream, and the AppView on
/// Starling's gRPC address, ready. Fields drop in order: processes first.
struct Stack {
    starling: Proc,
    appview: Proc,
    appview_addr: String,
    _plc: PlcStandIn,
    _runtime: tokio::runtime::Runtime,
    _jetstream: FakeJetstream,
    _dir: tempfile::TempDir,
}

/// Starling serving `events` (after `real_files`) with `extra` arguments for `serve`, and
/// the AppView on it.
fn start(
    node: &Path,
    real_files: &[PathBuf],
    documents: HashMap<String, Value>,
    events: Vec<Event>,
    extra: &[&OsStr],
) -> Stack {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let plc = runtime.block_on(PlcStandIn::start(documents)).unwrap();
    let dir = util::test_dir();
    let data_dir = dir.path().join("data");
    for file in real_files {
        util::replay(file, &data_dir);
    }
    let last_time_us = events.last().unwrap().time_us;
    let jetstream = FakeJetstream::start(events, None, None);
    let (plc_url, jetstream_url) = (plc.url(), jetstream.url());
    let loopback = "127.0.0.1:0";
    let mut args: Vec<&OsStr> = ["serve", "--http-addr", loopback, "--grpc-addr", loopback]
        .map(OsStr::new)
        .to_vec();
    args.extend([OsStr::new("--data-dir"), data_dir.as_os_str()]);
    args.extend(["--plc-url", &plc_url, "--jetstream", &jetstream_url].map(OsStr::new));
    args.extend(extra);
    let mut starling = Proc::spawn(util::starling(args), "serve");
    let http = starling.wait_for_stdout("starling: http listening on ", TIMEOUT);
    let grpc = starling.wait_for_stdout("starling: grpc listening on ", TIMEOUT);
    // The AppView starts while Starling ingests.
    let mut command = Command::new(node);
    command
        .arg(util::repo_root().join("appview/start.mjs"))
        .args(["--dataplane", &format!("http://{grpc}"), "--trace-rpcs"]);
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
    Stack {
        starling,
        appview,
        appview_addr: url.trim_start_matches("http://").to_owned(),
        _plc: plc,
        _runtime: runtime,
        _jetstream: jetstream,
        _dir: dir,
    }
}

// The stock AppView on Starling: every endpoint of the contract, for several viewers and
// anonymously, against the model of a seeded scenario, plus the real recorded events.
#[test]
fn the_stock_appview_serves_the_scenario_from_starling() {
    let Some(shared) = util::shared_data() else {
        return;
    };
    let seed = util::seed("the_stock_appview_serves_the_scenario_from_starling");
    let started = Instant::now();
    let mut lap = Instant::now();
    let mut timing = |step: &str| {
        eprintln!("appview test: {step} in {:.1?}", lap.elapsed());
        lap = Instant::now();
    };
    let node = util::setup_appview();
    timing("setup-appview.sh");
    let (events, world) = scenario(seed);
    let targets = targets(&world, seed);
    let (docs, tokens) = keys_and_tokens(&node, seed, &targets.viewers);
    timing("keys and tokens");
    let jetstream_dir = shared.join("jetstream");
    let mut documents = load_documents(&jetstream_dir.join("did_docs.json.zst")).unwrap();
    assert!(!documents.is_empty());
    documents.extend(docs);
    let real_files = [
        jetstream_dir.join("expected_v1.jsonl"),
        jetstream_dir.join("golden_v1.jsonl"),
    ];
    let n_events = events.len();
    let mut stack = start(&node, &real_files, documents, events, &[]);
    timing(&format!(
        "replay, ingest of {n_events} events, AppView start"
    ));

    let x = Xrpc {
        addr: stack.appview_addr.clone(),
        appview: &stack.appview,
        tokens,
        n_requests: Cell::new(0),
    };
    let mut coverage = Coverage::default();
    for &viewer in &targets.viewers {
        let expect = Expect {
            world: &world,
            viewer: Some(viewer),
        };
        check_viewer(&x, &expect, &targets, &mut coverage);
    }
    let expect = Expect {
        world: &world,
        viewer: None,
    };
    check_viewer(&x, &expect, &targets, &mut coverage);
    // A handle as the actor goes through GetDidsByHandles.
    let (status, profile) = x.get(Some(A), PROFILE, &[("actor", handle(Y))]);
    assert_eq!(status, 200, "getProfile by handle: {profile}");
    x.check("getProfile by handle", &profile["did"], &json!(did(Y)));
    timing(&format!("{} scenario requests", x.n_requests.get()));
    let n_authors = check_real_authors(&x, &real_files);
    timing(&format!("{n_authors} real authors' feeds"));
    eprintln!("appview test: {coverage:?}");
    coverage.assert_covered(&[
        "timeline items",
        "known followers",
        "followers",
        "likes",
        "blocked author feeds",
    ]);

    stack.starling.terminate();
    stack.starling.wait_exit(TIMEOUT);
    stack.appview.terminate();
    stack.appview.wait_exit(TIMEOUT);
    eprintln!("appview test: {:.1?} in all", started.elapsed());
}
