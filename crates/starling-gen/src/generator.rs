//! The event generator: a state machine that appends one Jetstream JSON line at a time.
//!
//! The crate documentation describes the stream; this file keeps the state that makes every
//! reference point at a live record: a ring of recent posts, pools of likes, reposts and follows
//! that may be deleted, and the sets that keep likes, reposts and blocks from repeating.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rustc_hash::{FxHashMap, FxHashSet};
use starling_core::sample::{SplitMix64, datetime, did, tid};
use starling_graph::synthetic::{self, Synthetic, SyntheticParams};

use crate::cid::{digest, push_cid};
use crate::draw::{coprime_multiplier, shuffle, zipf};
use crate::{GenParams, Mix, ParamsError, Summary};

pub(crate) mod lists;

use lists::Lists;

/// Follow edges shuffled together in the graph phase (8 bytes each): the graph generator yields
/// edges actor by actor, and a window this size spreads each actor's follows over time.
pub const FOLLOW_WINDOW_MAX: usize = 1 << 20;

/// Recent posts that likes, reposts, replies, quotes and post deletes choose from (40 bytes
/// each). At the mix's rates a post stays in it for about half a million events.
pub const RECENT_POSTS_MAX: usize = 1 << 16;

/// Likes, reposts and follows kept as candidates for deletion, per collection.
const DELETE_POOL_MAX: usize = 1 << 16;

/// Follow subjects sampled uniformly from the graph: drawing one is drawing an actor with
/// probability proportional to its followers.
const POPULAR_SAMPLE_MAX: usize = 1 << 20;

/// Draws of a target before an event of that kind is given up for this step.
const TARGET_TRIES_MAX: usize = 8;

/// The first `time_us`: 2025-01-01T00:00:00Z.
const START_TIME_US: u64 = 1_735_689_600_000_000;

/// The mean gap between events, so about 1,000 events a second of simulated time.
const TICK_MEAN_US: u64 = 1_000;

/// How far a record's `createdAt` may precede its event: clients stamp records before the
/// relay sees them.
const CREATED_LAG_MAX_US: u64 = 250_000;

/// The Zipf offset of activity ranks: the weight of rank `r` is `1 / (r + offset)`.
const ACTIVITY_ZIPF_OFFSET: f64 = 10.0;

/// The handle domain of generated actors.
const HANDLE_SUFFIX: &str = ".gen.test";

/// Words of generated post text.
const WORDS: &[&str] = &[
    "the", "a", "today", "morning", "coffee", "bluesky", "thread", "thinking", "about", "new",
    "project", "release", "music", "photo", "garden", "cat", "dog", "weather", "train", "city",
    "book", "reading", "writing", "code", "rust", "data", "graph", "timeline", "weekend", "walk",
    "rain", "sun", "night", "friends", "family", "work", "tired", "happy", "finally", "again",
    "really", "great", "small", "big", "little", "question", "answer", "idea", "notes", "draft",
    "art", "sketch", "game", "match", "goal", "news", "local", "space", "moon", "ocean", "tea",
    "bread", "recipe", "and",
];

/// Post text stays under this many characters (the lexicon allows 300 graphemes).
const POST_TEXT_CHARS_MAX: usize = 280;

/// Activity kinds; a kind's discriminant is its index in [`Mix::as_array`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Post,
    Reply,
    Quote,
    Like,
    Repost,
    Follow,
    Unfollow,
    Block,
    LikeDelete,
    PostDelete,
    RepostDelete,
    ProfileUpdate,
}

const KINDS: [Kind; 12] = [
    Kind::Post,
    Kind::Reply,
    Kind::Quote,
    Kind::Like,
    Kind::Repost,
    Kind::Follow,
    Kind::Unfollow,
    Kind::Block,
    Kind::LikeDelete,
    Kind::PostDelete,
    Kind::RepostDelete,
    Kind::ProfileUpdate,
];

/// Collections the generator writes; the discriminant indexes its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Collection {
    Profile,
    Follow,
    Block,
    Post,
    Like,
    Repost,
    List,
    ListItem,
}

const COLLECTIONS: [Collection; 8] = [
    Collection::Profile,
    Collection::Follow,
    Collection::Block,
    Collection::Post,
    Collection::Like,
    Collection::Repost,
    Collection::List,
    Collection::ListItem,
];

impl Collection {
    fn nsid(self) -> &'static str {
        use starling_core::jetstream::nsid;
        match self {
            Collection::Profile => nsid::PROFILE,
            Collection::Follow => nsid::FOLLOW,
            Collection::Block => nsid::BLOCK,
            Collection::Post => nsid::POST,
            Collection::Like => nsid::LIKE,
            Collection::Repost => nsid::REPOST,
            Collection::List => nsid::LIST,
            Collection::ListItem => nsid::LISTITEM,
        }
    }
}

/// Commit operations; the discriminant indexes the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Delete,
}

const OPS: [Op; 3] = [Op::Create, Op::Update, Op::Delete];

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// A record's key: `self` for profiles, else a TID of its creation time.
#[derive(Clone, Copy)]
enum Rkey {
    SelfKey,
    Tid(u64),
}

/// A post in the ring of recent posts.
#[derive(Clone, Copy, Debug)]
struct PostSlot {
    /// The post's number in the file, from 0; its slot is `seq % RECENT_POSTS_MAX`.
    seq: u64,
    author: u32,
    /// The `time_us` of its create: its rkey and CID derive from it.
    time_us: u64,
    /// The thread root (the post itself when it is not a reply).
    root_author: u32,
    root_time_us: u64,
    deleted: bool,
    /// Posts with replies are never deleted, so every reply's root stays live.
    has_replies: bool,
}

/// A bounded pool of records that may be deleted later, as (actor, create `time_us`).
struct Pool {
    items: Vec<(u32, u64)>,
    /// Items ever offered, for uniform reservoir sampling.
    seen: u64,
}

impl Pool {
    fn new() -> Pool {
        Pool {
            items: Vec::new(),
            seen: 0,
        }
    }

    /// Keeps a uniform sample of everything offered (reservoir sampling).
    fn offer_uniform(&mut self, item: (u32, u64), rng: &mut SplitMix64) {
        self.seen += 1;
        if self.items.len() < DELETE_POOL_MAX {
            self.items.push(item);
        } else if let Some(slot) = self.items.get_mut(rng.below(self.seen) as usize) {
            *slot = item;
        }
    }

    /// Keeps mostly recent items: a full pool replaces a random one.
    fn offer_recent(&mut self, item: (u32, u64), rng: &mut SplitMix64) {
        self.seen += 1;
        if self.items.len() < DELETE_POOL_MAX {
            self.items.push(item);
        } else if let Some(slot) = self
            .items
            .get_mut(rng.below(DELETE_POOL_MAX as u64) as usize)
        {
            *slot = item;
        }
    }

    fn take(&mut self, rng: &mut SplitMix64) -> Option<(u32, u64)> {
        if self.items.is_empty() {
            return None;
        }
        let idx = rng.below(self.items.len() as u64) as usize;
        Some(self.items.swap_remove(idx))
    }
}

enum Phase {
    /// Identity event (when `profile_next` is false) or profile of actor `next`.
    Actors {
        next: u32,
        profile_next: bool,
    },
    /// Follows of the graph, a shuffled window at a time.
    Graph,
    Activity,
    /// Lists and their items, after the activity (`lists.rs`).
    Lists,
    Done,
}

/// Generates the events of [`GenParams`], one line at a time. The same parameters give the
/// same bytes.
pub struct Generator {
    params: GenParams,
    plan: Mix,
    rng: SplitMix64,
    time_us: u64,
    phase: Phase,

    // The graph phase.
    edges: Synthetic,
    /// Edges the iterator will still yield, and how many of them are to be held back for the
    /// activity phase (selection sampling: an exact count, uniformly chosen).
    edges_left: u64,
    hold_left: u64,
    held: Vec<(u32, u32)>,
    window: Vec<(u32, u32)>,
    window_next: usize,
    popular: Vec<u32>,
    popular_seen: u64,

    // The activity phase.
    left: [u64; 12],
    posts: Vec<PostSlot>,
    next_post_seq: u64,
    /// Each author's newest post still in the ring.
    latest_post: FxHashMap<u32, u64>,
    /// (post seq × 2 + 1 for reposts, actor) of likes and reposts made in this epoch of
    /// `RECENT_POSTS_MAX` posts and the one before: a post in the ring was liked in no older one.
    liked_now: FxHashSet<(u64, u32)>,
    liked_before: FxHashSet<(u64, u32)>,
    follows: Pool,
    likes: Pool,
    reposts: Pool,
    blocks: FxHashSet<(u32, u32)>,
    /// Activity rank `r` is actor `(r * rank_mult + rank_add) % n_actors`.
    rank_mult: u64,
    rank_add: u64,

    // The lists phase, with a random stream of its own.
    lists: Lists,

    // What was written.
    counts: [[u64; 3]; 8],
    identity_events: u64,
    graph_follows: u64,
    written: [u64; 12],
    skipped: u64,
    events: u64,
    bytes: u64,

    // Scratch buffers, reused for every event.
    record: String,
    scratch: String,
}

impl Generator {
    /// A generator for `params`, or the reason they are bad.
    pub fn new(params: &GenParams) -> Result<Generator, ParamsError> {
        params.validate()?;
        let plan = params.plan();
        let graph_params = SyntheticParams::new(
            params.n_actors,
            params.n_follows + plan.follows,
            params.seed,
        );
        let edges = synthetic::generate(graph_params);
        let edges_left = edges.len() as u64;
        let mut rng = SplitMix64::new(params.seed ^ 0x5354_4152_4c49_4e47);
        let n = u64::from(params.n_actors);
        let rank_mult = coprime_multiplier(n, &mut rng);
        let rank_add = rng.below(n);
        Ok(Generator {
            params: params.clone(),
            plan,
            rng,
            time_us: START_TIME_US,
            phase: Phase::Actors {
                next: 0,
                profile_next: false,
            },
            edges,
            edges_left,
            hold_left: plan.follows.min(edges_left),
            held: Vec::new(),
            window: Vec::new(),
            window_next: 0,
            popular: Vec::new(),
            popular_seen: 0,
            left: plan.as_array(),
            posts: Vec::new(),
            next_post_seq: 0,
            latest_post: FxHashMap::default(),
            liked_now: FxHashSet::default(),
            liked_before: FxHashSet::default(),
            follows: Pool::new(),
            likes: Pool::new(),
            reposts: Pool::new(),
            blocks: FxHashSet::default(),
            rank_mult,
            rank_add,
            lists: Lists::new(params),
            counts: [[0; 3]; 8],
            identity_events: 0,
            graph_follows: 0,
            written: [0; 12],
            skipped: 0,
            events: 0,
            bytes: 0,
            record: String::new(),
            scratch: String::new(),
        })
    }

    /// The events the parameters call for: identity and profile per actor, the graph's
    /// follows, the activity plan, the lists. The file has fewer only if some were skipped.
    pub fn events_planned(&self) -> u64 {
        2 * u64::from(self.params.n_actors)
            + self.params.n_follows
            + self.plan.total()
            + self.lists.events_planned()
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The phase being written: `actors`, `follows`, `activity`, `lists` or `done`.
    pub fn phase(&self) -> &'static str {
        match self.phase {
            Phase::Actors { .. } => "actors",
            Phase::Graph => "follows",
            Phase::Activity => "activity",
            Phase::Lists => "lists",
            Phase::Done => "done",
        }
    }

    /// Appends the next event and its newline to `out`; false when there are no more.
    pub fn next_event(&mut self, out: &mut String) -> bool {
        let before = out.len();
        let wrote = match self.phase {
            Phase::Actors { next, profile_next } => {
                self.actor_event(out, next, profile_next);
                true
            }
            Phase::Graph => self.graph_event(out),
            Phase::Activity => self.activity_event(out),
            Phase::Lists => self.list_event(out),
            Phase::Done => false,
        };
        if wrote {
            out.push('\n');
            self.events += 1;
            self.bytes += (out.len() - before) as u64;
        }
        wrote
    }

    /// What was written so far: the whole file's summary once [`Generator::next_event`] has
    /// returned false.
    pub fn summary(&self) -> Summary {
        let mut commits = BTreeMap::new();
        let mut live = BTreeMap::new();
        for (collection, counts) in COLLECTIONS.iter().zip(&self.counts) {
            let by_op: BTreeMap<String, u64> = OPS
                .iter()
                .zip(counts)
                .filter(|&(_, &count)| count > 0)
                .map(|(op, &count)| (op.as_str().to_owned(), count))
                .collect();
            if !by_op.is_empty() {
                commits.insert(collection.nsid().to_owned(), by_op);
            }
            // Deletes only ever name live records, so creates minus deletes is what is live.
            let [creates, _, deletes] = *counts;
            live.insert(collection.nsid().to_owned(), creates - deletes);
        }
        Summary {
            seed: self.params.seed,
            actors: self.params.n_actors,
            events: self.events,
            bytes: self.bytes,
            compressed_bytes: None,
            identity_events: self.identity_events,
            commits,
            graph_follows: self.graph_follows,
            activity: Mix::from_array(self.written),
            activity_skipped: self.skipped,
            live,
        }
    }

    fn tick(&mut self) -> u64 {
        self.time_us += 1 + self.rng.below(2 * TICK_MEAN_US - 1);
        self.time_us
    }

    /// A record's `createdAt`, a little before its event.
    fn push_created_at(&mut self, time_us: u64) {
        let lag = self.rng.below(CREATED_LAG_MAX_US);
        self.record.push_str(r#","createdAt":""#);
        self.record.push_str(&datetime(time_us - lag));
        self.record.push('"');
    }

    // Phase 1: actors.

    fn actor_event(&mut self, out: &mut String, actor: u32, profile_next: bool) {
        let time_us = self.tick();
        if profile_next {
            self.record.clear();
            self.record.push_str(r#"{"$type":"app.bsky.actor.profile""#);
            self.push_profile_fields(actor, false);
            self.commit(
                out,
                actor,
                Collection::Profile,
                Op::Create,
                Rkey::SelfKey,
                time_us,
            );
            self.phase = if actor + 1 < self.params.n_actors {
                Phase::Actors {
                    next: actor + 1,
                    profile_next: false,
                }
            } else {
                Phase::Graph
            };
        } else {
            let did = did(actor);
            // The relay's sequence only has to increase; the event time does.
            let _ = write!(
                out,
                r#"{{"did":"{did}","time_us":{time_us},"kind":"identity","identity":{{"did":"{did}","handle":"user{actor}{HANDLE_SUFFIX}","seq":{time_us},"time":"{}"}}}}"#,
                datetime(time_us)
            );
            self.identity_events += 1;
            self.phase = Phase::Actors {
                next: actor,
                profile_next: true,
            };
        }
    }

    /// The profile's fields after `$type`; an update rewrites the description.
    fn push_profile_fields(&mut self, actor: u32, update: bool) {
        // Account creation precedes the stream, one second apart in actor order; a function of
        // the actor so an update can repeat it.
        let created_us = START_TIME_US - u64::from(self.params.n_actors - actor) * 1_000_000;
        let _ = write!(
            self.record,
            r#","createdAt":"{}","description":""#,
            datetime(created_us)
        );
        let topics = 2 + self.rng.below(3);
        if update {
            self.record.push_str("Updated: now about ");
        } else {
            self.record.push_str("Generated account; here for ");
        }
        for idx in 0..topics {
            if idx > 0 {
                self.record
                    .push_str(if idx + 1 == topics { " and " } else { ", " });
            }
            let word = self.word();
            self.record.push_str(word);
        }
        let _ = write!(self.record, r#"","displayName":"Gen User {actor}"}}"#);
    }

    fn word(&mut self) -> &'static str {
        WORDS
            .get(self.rng.below(WORDS.len() as u64) as usize)
            .copied()
            .unwrap_or("the")
    }

    // Phase 2: the follow graph.

    fn graph_event(&mut self, out: &mut String) -> bool {
        if self.window_next >= self.window.len() && !self.refill_window() {
            self.start_activity();
            return self.activity_event(out);
        }
        let Some(&(actor, subject)) = self.window.get(self.window_next) else {
            return false;
        };
        self.window_next += 1;
        self.follow(out, actor, subject);
        self.graph_follows += 1;
        true
    }

    /// Reads the next window of edges, holding some back, and shuffles it; false at the end.
    fn refill_window(&mut self) -> bool {
        self.window.clear();
        self.window_next = 0;
        while self.window.len() < FOLLOW_WINDOW_MAX {
            let Some((actor, subject)) = self.edges.next() else {
                break;
            };
            let edge = (actor.0, subject.0);
            self.popular_seen += 1;
            if self.popular.len() < POPULAR_SAMPLE_MAX {
                self.popular.push(edge.1);
            } else if let Some(slot) = self
                .popular
                .get_mut(self.rng.below(self.popular_seen) as usize)
            {
                *slot = edge.1;
            }
            if self.hold_left > 0 && self.rng.below(self.edges_left) < self.hold_left {
                self.held.push(edge);
                self.hold_left -= 1;
            } else {
                self.window.push(edge);
            }
            self.edges_left = self.edges_left.saturating_sub(1);
        }
        shuffle(&mut self.window, &mut self.rng);
        !self.window.is_empty()
    }

    fn follow(&mut self, out: &mut String, actor: u32, subject: u32) {
        let time_us = self.tick();
        self.record.clear();
        self.record.push_str(r#"{"$type":"app.bsky.graph.follow""#);
        self.push_created_at(time_us);
        let _ = write!(self.record, r#","subject":"{}"}}"#, did(subject));
        self.commit(
            out,
            actor,
            Collection::Follow,
            Op::Create,
            Rkey::Tid(time_us),
            time_us,
        );
        self.follows.offer_uniform((actor, time_us), &mut self.rng);
    }

    // Phase 3: activity.

    fn start_activity(&mut self) {
        // The held-back follows come in random order, not the graph's actor order.
        shuffle(&mut self.held, &mut self.rng);
        // Fewer than planned only if the graph generator yielded fewer edges than asked.
        let follows_left = self.held.len() as u64;
        if let Some(left) = self.left.get_mut(Kind::Follow as usize) {
            self.skipped += left.saturating_sub(follows_left);
            *left = (*left).min(follows_left);
        }
        self.window = Vec::new();
        self.phase = Phase::Activity;
    }

    fn activity_event(&mut self, out: &mut String) -> bool {
        let mut excluded = [false; 12];
        loop {
            let total: u64 = self
                .left
                .iter()
                .zip(&excluded)
                .filter(|&(_, &excluded)| !excluded)
                .map(|(&left, _)| left)
                .sum();
            if total == 0 {
                // What is left cannot be made: nothing an event could do would change that.
                self.skipped += self.left.iter().sum::<u64>();
                self.left = [0; 12];
                self.phase = Phase::Lists;
                return self.list_event(out);
            }
            let mut draw = self.rng.below(total);
            let mut chosen = 0;
            for (idx, (&left, &excluded)) in self.left.iter().zip(&excluded).enumerate() {
                if excluded {
                    continue;
                }
                if draw < left {
                    chosen = idx;
                    break;
                }
                draw -= left;
            }
            let Some(&kind) = KINDS.get(chosen) else {
                return false;
            };
            if self.try_kind(out, kind) {
                if let Some(left) = self.left.get_mut(chosen) {
                    *left -= 1;
                }
                if let Some(written) = self.written.get_mut(chosen) {
                    *written += 1;
                }
                return true;
            }
            if let Some(excluded) = excluded.get_mut(chosen) {
                *excluded = true;
            }
        }
    }

    /// Writes one event of `kind`, or nothing and false if no record can be referenced now.
    fn try_kind(&mut self, out: &mut String, kind: Kind) -> bool {
        match kind {
            Kind::Post => {
                let author = self.author();
                self.post(out, author, None, None);
                true
            }
            Kind::Reply => {
                let author = self.active_actor();
                let Some(parent) = self.pick_post(author, None) else {
                    return false;
                };
                self.post(out, author, Some(parent), None);
                true
            }
            Kind::Quote => {
                let author = self.author();
                let Some(quoted) = self.pick_post(author, None) else {
                    return false;
                };
                self.post(out, author, None, Some(quoted));
                true
            }
            Kind::Like | Kind::Repost => {
                let actor = self.active_actor();
                let is_repost = kind == Kind::Repost;
                let Some(post) = self.pick_post(actor, Some(is_repost)) else {
                    return false;
                };
                self.like_or_repost(out, actor, post, is_repost);
                true
            }
            Kind::Follow => {
                let Some((actor, subject)) = self.held.pop() else {
                    return false;
                };
                self.follow(out, actor, subject);
                true
            }
            Kind::Unfollow => {
                let Some((actor, created)) = self.follows.take(&mut self.rng) else {
                    return false;
                };
                self.delete(out, actor, Collection::Follow, created);
                true
            }
            Kind::Block => self.block(out),
            Kind::LikeDelete => {
                let Some((actor, created)) = self.likes.take(&mut self.rng) else {
                    return false;
                };
                self.delete(out, actor, Collection::Like, created);
                true
            }
            Kind::RepostDelete => {
                let Some((actor, created)) = self.reposts.take(&mut self.rng) else {
                    return false;
                };
                self.delete(out, actor, Collection::Repost, created);
                true
            }
            Kind::PostDelete => self.delete_post(out),
            Kind::ProfileUpdate => {
                let actor = self.rng.below(u64::from(self.params.n_actors)) as u32;
                let time_us = self.tick();
                self.record.clear();
                self.record.push_str(r#"{"$type":"app.bsky.actor.profile""#);
                self.push_profile_fields(actor, true);
                self.commit(
                    out,
                    actor,
                    Collection::Profile,
                    Op::Update,
                    Rkey::SelfKey,
                    time_us,
                );
                true
            }
        }
    }

    /// An actor drawn by activity: a power law over a seeded ranking, with a uniform floor.
    fn active_actor(&mut self) -> u32 {
        let n = u64::from(self.params.n_actors);
        if self.rng.below(4) == 0 {
            return self.rng.below(n) as u32;
        }
        let rank = zipf(&mut self.rng, n, ACTIVITY_ZIPF_OFFSET);
        ((u128::from(rank) * u128::from(self.rank_mult) + u128::from(self.rank_add))
            % u128::from(n)) as u32
    }

    /// An actor drawn with probability proportional to its followers.
    fn popular_actor(&mut self) -> u32 {
        if self.popular.is_empty() {
            return self.active_actor();
        }
        let idx = self.rng.below(self.popular.len() as u64) as usize;
        self.popular.get(idx).copied().unwrap_or(0)
    }

    /// A post's author: half by activity, half by followers.
    fn author(&mut self) -> u32 {
        if self.rng.below(2) == 0 {
            self.popular_actor()
        } else {
            self.active_actor()
        }
    }

    /// A live post in the ring for `actor` to reference: half the time a followed author's
    /// newest post, else a recent one. With `dedup` (false: like, true: repost), never one the
    /// actor already liked (reposted).
    fn pick_post(&mut self, actor: u32, dedup: Option<bool>) -> Option<PostSlot> {
        if self.next_post_seq == 0 {
            return None;
        }
        for _ in 0..TARGET_TRIES_MAX {
            let seq = if self.rng.below(2) == 0 {
                let author = self.popular_actor();
                match self.latest_post.get(&author) {
                    Some(&seq) => seq,
                    None => continue,
                }
            } else {
                let in_ring = self.next_post_seq.min(RECENT_POSTS_MAX as u64);
                self.next_post_seq - 1 - self.rng.skewed_below(in_ring)
            };
            let Some(&slot) = self.posts.get(ring_idx(seq)) else {
                continue;
            };
            if slot.seq != seq || slot.deleted {
                continue;
            }
            if let Some(is_repost) = dedup {
                let key = (seq * 2 + u64::from(is_repost), actor);
                if self.liked_now.contains(&key) || self.liked_before.contains(&key) {
                    continue;
                }
                self.liked_now.insert(key);
            }
            return Some(slot);
        }
        None
    }

    fn post(
        &mut self,
        out: &mut String,
        author: u32,
        parent: Option<PostSlot>,
        quoted: Option<PostSlot>,
    ) {
        let time_us = self.tick();
        self.record.clear();
        self.record.push_str(r#"{"$type":"app.bsky.feed.post""#);
        self.push_created_at(time_us);
        if let Some(quoted) = quoted {
            self.record
                .push_str(r#","embed":{"$type":"app.bsky.embed.record","record":"#);
            self.push_strong_ref(quoted.author, Collection::Post, quoted.time_us);
            self.record.push('}');
        }
        self.record.push_str(r#","langs":["en"]"#);
        if let Some(parent) = parent {
            self.record.push_str(r#","reply":{"parent":"#);
            self.push_strong_ref(parent.author, Collection::Post, parent.time_us);
            self.record.push_str(r#","root":"#);
            self.push_strong_ref(parent.root_author, Collection::Post, parent.root_time_us);
            self.record.push('}');
        }
        self.record.push_str(r#","text":""#);
        self.push_text();
        self.record.push_str("\"}");
        self.commit(
            out,
            author,
            Collection::Post,
            Op::Create,
            Rkey::Tid(time_us),
            time_us,
        );

        let (root_author, root_time_us) = match parent {
            Some(parent) => {
                if let Some(slot) = self.posts.get_mut(ring_idx(parent.seq)) {
                    slot.has_replies = true;
                }
                (parent.root_author, parent.root_time_us)
            }
            None => (author, time_us),
        };
        let seq = self.next_post_seq;
        self.next_post_seq += 1;
        if seq > 0 && seq.is_multiple_of(RECENT_POSTS_MAX as u64) {
            self.liked_before = std::mem::take(&mut self.liked_now);
        }
        let slot = PostSlot {
            seq,
            author,
            time_us,
            root_author,
            root_time_us,
            deleted: false,
            has_replies: false,
        };
        match self.posts.get_mut(ring_idx(seq)) {
            Some(old) => {
                if self.latest_post.get(&old.author) == Some(&old.seq) {
                    self.latest_post.remove(&old.author);
                }
                *old = slot;
            }
            None => self.posts.push(slot),
        }
        self.latest_post.insert(author, seq);
    }

    /// A few words, skewed short, within the lexicon's length.
    fn push_text(&mut self) {
        let n_words = 2 + self.rng.below(6) + self.rng.below(6) + self.rng.skewed_below(40);
        let start = self.record.len();
        for idx in 0..n_words {
            let word = self.word();
            if self.record.len() - start + word.len() + 1 > POST_TEXT_CHARS_MAX {
                break;
            }
            if idx > 0 {
                self.record.push(' ');
            }
            self.record.push_str(word);
        }
    }

    fn like_or_repost(&mut self, out: &mut String, actor: u32, post: PostSlot, is_repost: bool) {
        let collection = if is_repost {
            Collection::Repost
        } else {
            Collection::Like
        };
        let time_us = self.tick();
        self.record.clear();
        let _ = write!(self.record, r#"{{"$type":"{}""#, collection.nsid());
        self.push_created_at(time_us);
        self.record.push_str(r#","subject":"#);
        self.push_strong_ref(post.author, Collection::Post, post.time_us);
        self.record.push('}');
        self.commit(
            out,
            actor,
            collection,
            Op::Create,
            Rkey::Tid(time_us),
            time_us,
        );
        let pool = if is_repost {
            &mut self.reposts
        } else {
            &mut self.likes
        };
        pool.offer_recent((actor, time_us), &mut self.rng);
    }

    fn block(&mut self, out: &mut String) -> bool {
        let n = u64::from(self.params.n_actors);
        for _ in 0..TARGET_TRIES_MAX {
            let actor = self.active_actor();
            let subject = self.rng.below(n) as u32;
            if subject == actor || !self.blocks.insert((actor, subject)) {
                continue;
            }
            let time_us = self.tick();
            self.record.clear();
            self.record.push_str(r#"{"$type":"app.bsky.graph.block""#);
            self.push_created_at(time_us);
            let _ = write!(self.record, r#","subject":"{}"}}"#, did(subject));
            self.commit(
                out,
                actor,
                Collection::Block,
                Op::Create,
                Rkey::Tid(time_us),
                time_us,
            );
            return true;
        }
        false
    }

    fn delete_post(&mut self, out: &mut String) -> bool {
        let in_ring = self.posts.len() as u64;
        if in_ring == 0 {
            return false;
        }
        for _ in 0..TARGET_TRIES_MAX {
            let idx = self.rng.below(in_ring) as usize;
            let Some(slot) = self.posts.get_mut(idx) else {
                continue;
            };
            if slot.deleted || slot.has_replies {
                continue;
            }
            slot.deleted = true;
            let slot = *slot;
            if self.latest_post.get(&slot.author) == Some(&slot.seq) {
                self.latest_post.remove(&slot.author);
            }
            self.delete(out, slot.author, Collection::Post, slot.time_us);
            return true;
        }
        false
    }

    fn delete(&mut self, out: &mut String, actor: u32, collection: Collection, created: u64) {
        let time_us = self.tick();
        self.commit(
            out,
            actor,
            collection,
            Op::Delete,
            Rkey::Tid(created),
            time_us,
        );
    }

    /// Appends `{"cid":…,"uri":…}` for the record `author` created at `created`.
    fn push_strong_ref(&mut self, author: u32, collection: Collection, created: u64) {
        self.record.push_str(r#"{"cid":""#);
        push_cid(&mut self.record, &digest(self.params.seed, created));
        let _ = write!(
            self.record,
            r#"","uri":"at://{}/{}/{}"}}"#,
            did(author),
            collection.nsid(),
            tid(created, rkey_clock(author))
        );
    }

    /// Writes a commit event; creates and updates carry `self.record` and its CID.
    fn commit(
        &mut self,
        out: &mut String,
        actor: u32,
        collection: Collection,
        op: Op,
        rkey: Rkey,
        time_us: u64,
    ) {
        self.scratch.clear();
        match rkey {
            Rkey::SelfKey => self.scratch.push_str("self"),
            Rkey::Tid(created) => self.scratch.push_str(&tid(created, rkey_clock(actor))),
        }
        let _ = write!(
            out,
            r#"{{"did":"{}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{}","operation":"{}","collection":"{}","rkey":"{}""#,
            did(actor),
            tid(time_us, rev_clock(actor)),
            op.as_str(),
            collection.nsid(),
            self.scratch,
        );
        if op == Op::Delete {
            out.push_str("}}");
        } else {
            out.push_str(r#","record":"#);
            out.push_str(&self.record);
            out.push_str(r#","cid":""#);
            push_cid(out, &digest(self.params.seed, time_us));
            out.push_str("\"}}");
        }
        if let Some(count) = self
            .counts
            .get_mut(collection as usize)
            .and_then(|counts| counts.get_mut(op as usize))
        {
            *count += 1;
        }
    }
}

/// The TID clock id of an actor's revisions.
fn rev_clock(actor: u32) -> u16 {
    (actor % 1024) as u16
}

/// The TID clock id of an actor's record keys: not the revision's, so a record's key and the
/// revision that created it differ, as they do on the network.
fn rkey_clock(actor: u32) -> u16 {
    ((actor + 512) % 1024) as u16
}

fn ring_idx(seq: u64) -> usize {
    (seq % RECENT_POSTS_MAX as u64) as usize
}
