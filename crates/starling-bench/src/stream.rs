//! A generator of long Jetstream v1 streams, made by re-keying real events.
//!
//! Each generated event is one of the real events (a [`Template`]), picked uniformly at random
//! so that the stream keeps their mix (about 65% likes, 11% posts, 10% reposts, 6% follows and
//! unfollows, a few blocks, deletes, profile updates, identity and account events), with every
//! identifier replaced:
//! - the repo DID comes from a seeded pool of `actors` DIDs (`did:plc:` + 24 base32 characters),
//!   picked by a power law, P(rank k) ∝ k^-[`REPO_EXPONENT`], so that a few actors are busy;
//! - `time_us` grows by exponential gaps with a mean of [`GAP_MEAN_US`], the spacing of the
//!   real file (about 500 events/s);
//! - `rev` and every TID record key are TIDs of the new `time_us`, so revs grow per repo and
//!   record keys never collide; `createdAt` is a little before `time_us`;
//! - references point into the stream: likes and reposts at posts created earlier (a ring of the
//!   last [`POSTS_RING_MAX`] posts, picked half by recency and half by a fixed popularity rank,
//!   so a few posts get thousands of likes); replies at an earlier post and its thread root;
//!   `via` at an earlier repost; follows, blocks and mentions at pool DIDs, picked by a steeper
//!   power law (P(rank k) ∝ k^-[`SUBJECT_EXPONENT`]) so a few accounts have many followers;
//!   follow and post deletes at records created earlier. A share of [`OLD_POST_SHARE`] of post
//!   references point at posts older than the stream, as in the real firehose.
//!
//! The records are rewritten through `serde_json::Value`: this is a generator, not a hot path.
//! Records are written with sorted keys, as Jetstream writes them (it renders DAG-CBOR, whose
//! keys are sorted); the envelope keeps Jetstream's key order. The same templates, parameters
//! and seed always give the same bytes.

use std::collections::HashMap;
use std::io::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use starling_core::jetstream::nsid;
use starling_core::sample::{datetime, tid};
use starling_core::syntax;

use crate::templates::{Template, TemplateBody};

/// The mean gap between two events' `time_us`, in microseconds: the real file's spacing.
pub const GAP_MEAN_US: f64 = 2_000.0;
/// The exponent of the power law that picks the actor of each event.
pub const REPO_EXPONENT: f64 = 0.8;
/// The exponent of the power law that picks followed, blocked and mentioned actors.
pub const SUBJECT_EXPONENT: f64 = 1.0;
/// Posts remembered as targets of likes, reposts, replies and deletes.
pub const POSTS_RING_MAX: usize = 100_000;
/// Reposts remembered as targets of `via`.
pub const REPOSTS_RING_MAX: usize = 10_000;
/// Follows remembered as targets of unfollows, at most.
pub const FOLLOWS_RING_MAX: usize = 100_000;
/// The share of post references that point at posts older than the stream.
pub const OLD_POST_SHARE: f64 = 0.1;
/// The first `time_us` of a stream: 2026-07-04T14:38:08Z, when the real file was recorded.
pub const START_TIME_US: u64 = 1_783_175_888_000_000;
/// The first relay sequence number of identity and account events.
const START_RELAY_SEQ: u64 = 31_527_000_000;
/// How far `createdAt` may lag `time_us`, at most, in microseconds.
const CREATED_LAG_MAX_US: u64 = 1_500_000;
/// How much older than the stream a post outside it may be, at most: 30 days.
const OLD_POST_AGE_MAX_US: u64 = 30 * 86_400 * 1_000_000;

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamParams {
    /// Actors in the pool (at least 2, at most 2^35).
    pub actors: u32,
    /// The random seed.
    pub seed: u64,
}

/// The `did:plc` of pool actor `idx` in a stream seeded with `seed`: 17 characters of hash, then
/// a bijection of `idx` in 7 base32 characters (35 bits), so that DIDs look random but never
/// collide.
pub fn actor_did(seed: u64, idx: u32) -> String {
    const MASK_35: u64 = (1 << 35) - 1;
    // Multiplying by an odd number modulo 2^35, then adding, permutes the 35-bit values.
    let tail =
        (u64::from(idx).wrapping_mul(0x5_DEEC_E66D) ^ seed).wrapping_add(seed >> 29) & MASK_35;
    let mut res = String::with_capacity(32);
    res.push_str("did:plc:");
    let mut bits = mix64(seed ^ mix64(u64::from(idx)));
    for count in 0..17 {
        if count == 12 {
            bits = mix64(bits);
        }
        res.push(base32_char(bits));
        bits >>= 5;
    }
    for shift in (0..7).rev() {
        res.push(base32_char(tail >> (shift * 5)));
    }
    res
}

fn base32_char(value: u64) -> char {
    char::from(BASE32.get((value & 31) as usize).copied().unwrap_or(b'a'))
}

/// The splitmix64 finalizer: a cheap, good mix of 64 bits.
fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in `0..n`, P(k) ∝ (k+1)^-exponent (continuous approximation): small ones are common.
fn power_law(rng: &mut ChaCha8Rng, n: u64, exponent: f64) -> u64 {
    assert!(n > 0, "empty range");
    let u: f64 = rng.random();
    let top = n as f64 + 1.0;
    let x = if (exponent - 1.0).abs() < 1e-9 {
        top.powf(u)
    } else {
        let a = 1.0 - exponent;
        ((top.powf(a) - 1.0) * u + 1.0).powf(1.0 / a)
    };
    ((x as u64).saturating_sub(1)).min(n - 1)
}

/// An atproto datetime with milliseconds, as clients write `createdAt`.
fn datetime_ms(micros: u64) -> String {
    let full = datetime(micros);
    // `datetime` writes microseconds: `2024-09-01T00:00:00.000000Z`; keep three digits.
    match full.get(..23) {
        Some(head) => format!("{head}Z"),
        None => full,
    }
}

/// A ring of the newest items pushed, at most `cap`.
struct Ring<T> {
    items: Vec<T>,
    cap: usize,
    /// Items ever pushed; the next one goes to slot `pushed % cap`.
    pushed: u64,
}

impl<T> Ring<T> {
    fn new(cap: usize) -> Ring<T> {
        assert!(cap > 0);
        Ring {
            items: Vec::new(),
            cap,
            pushed: 0,
        }
    }

    fn push(&mut self, item: T) {
        let slot = (self.pushed % self.cap as u64) as usize;
        if let Some(old) = self.items.get_mut(slot) {
            *old = item;
        } else {
            self.items.push(item);
        }
        self.pushed += 1;
    }

    /// The item `rank` places back from the newest (`rank < len`).
    fn newest(&self, rank: usize) -> Option<&T> {
        let newest = (self.pushed.checked_sub(1)? % self.cap as u64) as usize;
        let len = self.items.len();
        self.items.get((newest + len - rank % len) % len)
    }
}

/// A post created in the stream.
struct Post {
    author: u32,
    rkey: String,
    uri: String,
    /// The thread root, when the post is a reply.
    root: Option<String>,
}

/// Generates events one at a time; see the module doc for how.
pub struct Generator<'t> {
    templates: &'t [Template],
    params: StreamParams,
    rng: ChaCha8Rng,
    time_us: u64,
    relay_seq: u64,
    posts: Ring<Post>,
    reposts: Ring<String>,
    /// Follows not yet deleted, as (actor, rkey): a bag, so every unfollow finds one.
    follows: Vec<(u32, String)>,
}

impl<'t> Generator<'t> {
    /// A generator over `templates` (not empty).
    pub fn new(templates: &'t [Template], params: StreamParams) -> Generator<'t> {
        assert!(!templates.is_empty(), "no templates");
        assert!(params.actors >= 2, "the actor pool needs at least 2 actors");
        Generator {
            templates,
            params,
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            time_us: START_TIME_US,
            relay_seq: START_RELAY_SEQ,
            posts: Ring::new(POSTS_RING_MAX),
            reposts: Ring::new(REPOSTS_RING_MAX),
            follows: Vec::new(),
        }
    }

    /// Appends the next event and a newline to `out`; returns the index of its template.
    pub fn next_event(&mut self, out: &mut Vec<u8>) -> usize {
        let templates = self.templates;
        let idx = self.rng.random_range(0..templates.len());
        let Some(template) = templates.get(idx) else {
            unreachable!("template index {idx} out of range");
        };
        let gap = -(1.0 - self.rng.random::<f64>()).ln() * GAP_MEAN_US;
        self.time_us += 1 + gap as u64;
        match &template.body {
            TemplateBody::Commit {
                operation,
                collection,
                rkey,
                record,
            } => match record {
                Some(record) => {
                    self.write_upsert(template, operation, collection, rkey, record, out)
                }
                None => self.write_delete(operation, collection, out),
            },
            TemplateBody::Identity(body) => self.write_status("identity", body, out),
            TemplateBody::Account(body) => self.write_status("account", body, out),
        }
        out.push(b'\n');
        idx
    }

    fn repo(&mut self) -> u32 {
        power_law(&mut self.rng, u64::from(self.params.actors), REPO_EXPONENT) as u32
    }

    fn subject(&mut self) -> u32 {
        power_law(
            &mut self.rng,
            u64::from(self.params.actors),
            SUBJECT_EXPONENT,
        ) as u32
    }

    fn did(&self, actor: u32) -> String {
        actor_did(self.params.seed, actor)
    }

    fn created_at(&mut self) -> String {
        let lag = self.rng.random_range(0..CREATED_LAG_MAX_US);
        datetime_ms(self.time_us.saturating_sub(lag))
    }

    /// The rev of a commit by `actor` now: a TID of `time_us`, which grows with every event.
    fn rev(&self, actor: u32) -> String {
        tid(self.time_us, (actor & 0x3ff) as u16)
    }

    /// A new record key: a TID of `time_us`, unique because `time_us` never repeats.
    fn new_rkey(&mut self) -> String {
        let clock = self.rng.random_range(0..1024u16);
        tid(self.time_us, clock)
    }

    fn cid(&mut self) -> String {
        let mut res = String::with_capacity(59);
        res.push_str("bafyrei");
        let mut bits = 0u64;
        for count in 0..52 {
            if count % 12 == 0 {
                bits = self.rng.random();
            }
            res.push(base32_char(bits));
            bits >>= 5;
        }
        res
    }

    /// A post to reference, and its thread root: one from the ring, or one older than the stream.
    fn pick_post(&mut self) -> (String, String) {
        let len = self.posts.items.len();
        if len > 0 && !self.rng.random_bool(OLD_POST_SHARE) {
            // Half by recency (new posts get most attention), half by a fixed popularity rank of
            // ring slots (the post in a low slot gets many likes while it stays in the ring).
            let rank = power_law(&mut self.rng, len as u64, REPO_EXPONENT) as usize;
            let post = if self.rng.random_bool(0.5) {
                self.posts.newest(rank)
            } else {
                self.posts.items.get(rank)
            };
            if let Some(post) = post {
                let root = post.root.clone().unwrap_or_else(|| post.uri.clone());
                return (post.uri.clone(), root);
            }
        }
        let author = self.subject();
        let age = self.rng.random_range(0..OLD_POST_AGE_MAX_US);
        let clock = self.rng.random_range(0..1024u16);
        let uri = format!(
            "at://{}/{}/{}",
            self.did(author),
            nsid::POST,
            tid(START_TIME_US - age, clock)
        );
        (uri.clone(), uri)
    }

    fn pick_repost(&mut self) -> Option<String> {
        let len = self.reposts.items.len();
        if len == 0 {
            return None;
        }
        let rank = power_law(&mut self.rng, len as u64, REPO_EXPONENT) as usize;
        self.reposts.newest(rank).cloned()
    }

    fn write_upsert(
        &mut self,
        template: &Template,
        operation: &str,
        collection: &str,
        template_rkey: &str,
        template_record: &Value,
        out: &mut Vec<u8>,
    ) {
        let actor = self.repo();
        let did = self.did(actor);
        let rkey = if syntax::parse_tid(template_rkey).is_some() {
            self.new_rkey()
        } else {
            // `self` and keys like `did:plc:…::did:web:…` keep their shape, with the new DID.
            template_rkey.replace(&template.did, &did)
        };
        let mut record = template_record.clone();
        let mut memo = HashMap::new();
        memo.insert(template.did.clone(), did.clone());
        let root = self.rewrite_references(collection, &mut record, &mut memo);
        self.rewrite_strings(&mut record, &mut memo);
        if let Some(created_at) = record
            .get_mut("createdAt")
            .filter(|value| value.is_string())
        {
            *created_at = Value::String(self.created_at());
        }
        let rev = self.rev(actor);
        let cid = self.cid();
        write_commit_head(out, &did, self.time_us, &rev, operation, collection, &rkey);
        out.extend_from_slice(br#","record":"#);
        write_json(out, &record);
        out.extend_from_slice(br#","cid":"#);
        write_str(out, &cid);
        out.extend_from_slice(b"}}");
        if operation == "create" {
            self.remember(actor, collection, rkey, &did, root);
        }
    }

    /// Replaces the references whose targets must agree with each other or with the stream
    /// (reply root and parent, like and repost subjects, follow subjects); returns the thread
    /// root of a reply. Old values go into `memo`, so the generic pass maps repeats the same way.
    fn rewrite_references(
        &mut self,
        collection: &str,
        record: &mut Value,
        memo: &mut HashMap<String, String>,
    ) -> Option<String> {
        let mut thread_root = None;
        if let Some(reply) = record.get("reply") {
            let old_root = reply.pointer("/root/uri").and_then(Value::as_str);
            let old_parent = reply.pointer("/parent/uri").and_then(Value::as_str);
            let (parent, root) = self.pick_post();
            // A template whose root is its parent maps both to the new parent.
            if let Some(old) = old_root {
                memo.insert(old.to_owned(), root.clone());
            }
            if let Some(old) = old_parent {
                memo.insert(old.to_owned(), parent.clone());
            }
            thread_root = memo.get(old_root.unwrap_or_default()).cloned();
        }
        match collection {
            nsid::LIKE | nsid::REPOST => {
                if let Some(old) = record.pointer("/subject/uri").and_then(Value::as_str) {
                    let (post, _) = self.pick_post();
                    memo.insert(old.to_owned(), post);
                }
                if let Some(old) = record.pointer("/via/uri").and_then(Value::as_str)
                    && let Some(repost) = self.pick_repost()
                {
                    memo.insert(old.to_owned(), repost);
                }
            }
            nsid::FOLLOW | nsid::BLOCK => {
                if let Some(old) = record.get("subject").and_then(Value::as_str) {
                    let subject = self.subject();
                    memo.insert(old.to_owned(), self.did(subject));
                }
            }
            _ => {}
        }
        thread_root
    }

    /// Maps every DID and AT-URI string in `value` to one of the stream, through `memo`.
    fn rewrite_strings(&mut self, value: &mut Value, memo: &mut HashMap<String, String>) {
        match value {
            Value::String(text) => {
                if let Some(new) = self.map_string(text, memo) {
                    *text = new;
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.rewrite_strings(item, memo);
                }
            }
            Value::Object(fields) => {
                for (_, item) in fields.iter_mut() {
                    self.rewrite_strings(item, memo);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    fn map_string(&mut self, text: &str, memo: &mut HashMap<String, String>) -> Option<String> {
        if let Some(new) = memo.get(text) {
            return Some(new.clone());
        }
        let new = if is_plc_did(text) {
            let subject = self.subject();
            self.did(subject)
        } else if let Some(rest) = text.strip_prefix("at://") {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            if path.starts_with(nsid::POST) && path.len() > nsid::POST.len() {
                self.pick_post().0
            } else {
                let authority = match self.map_string(authority, memo) {
                    Some(mapped) => mapped,
                    None => authority.to_owned(),
                };
                if path.is_empty() {
                    format!("at://{authority}")
                } else {
                    format!("at://{authority}/{path}")
                }
            }
        } else {
            return None;
        };
        memo.insert(text.to_owned(), new.clone());
        Some(new)
    }

    /// Remembers a created record that later events may reference or delete.
    fn remember(
        &mut self,
        actor: u32,
        collection: &str,
        rkey: String,
        did: &str,
        root: Option<String>,
    ) {
        match collection {
            nsid::POST => {
                let uri = format!("at://{did}/{collection}/{rkey}");
                self.posts.push(Post {
                    author: actor,
                    rkey,
                    uri,
                    root,
                });
            }
            nsid::REPOST => self.reposts.push(format!("at://{did}/{collection}/{rkey}")),
            nsid::FOLLOW => {
                if self.follows.len() < FOLLOWS_RING_MAX {
                    self.follows.push((actor, rkey));
                } else {
                    let slot = self.rng.random_range(0..FOLLOWS_RING_MAX);
                    if let Some(old) = self.follows.get_mut(slot) {
                        *old = (actor, rkey);
                    }
                }
            }
            _ => {}
        }
    }

    fn write_delete(&mut self, operation: &str, collection: &str, out: &mut Vec<u8>) {
        let earlier = match collection {
            nsid::FOLLOW => self.take_follow(),
            nsid::POST => self.any_post(),
            _ => None,
        };
        let (actor, rkey) = match earlier {
            Some(earlier) => earlier,
            None => {
                let actor = self.repo();
                (actor, self.new_rkey())
            }
        };
        let did = self.did(actor);
        let rev = self.rev(actor);
        write_commit_head(out, &did, self.time_us, &rev, operation, collection, &rkey);
        out.extend_from_slice(b"}}");
    }

    /// A follow created earlier and not yet deleted, forgotten so it is deleted once.
    fn take_follow(&mut self) -> Option<(u32, String)> {
        if self.follows.is_empty() {
            return None;
        }
        let slot = self.rng.random_range(0..self.follows.len());
        Some(self.follows.swap_remove(slot))
    }

    /// A post created earlier (it may have been deleted already).
    fn any_post(&mut self) -> Option<(u32, String)> {
        let len = self.posts.items.len();
        if len == 0 {
            return None;
        }
        let slot = self.rng.random_range(0..len);
        self.posts
            .items
            .get(slot)
            .map(|post| (post.author, post.rkey.clone()))
    }

    fn write_status(&mut self, kind: &str, template_body: &Value, out: &mut Vec<u8>) {
        let actor = self.repo();
        let did = self.did(actor);
        let mut body = template_body.clone();
        self.relay_seq += 1;
        let time = self.created_at();
        if let Some(fields) = body.as_object_mut() {
            fields.insert("did".to_owned(), Value::String(did.clone()));
            fields.insert("seq".to_owned(), Value::from(self.relay_seq));
            fields.insert("time".to_owned(), Value::String(time));
        }
        out.extend_from_slice(br#"{"did":"#);
        write_str(out, &did);
        let _ = write!(out, r#","time_us":{},"kind":"#, self.time_us);
        write_str(out, kind);
        out.push(b',');
        write_str(out, kind);
        out.push(b':');
        write_json(out, &body);
        out.push(b'}');
    }
}

/// Writes `{"did":…,"time_us":…,"kind":"commit","commit":{"rev":…,"operation":…,
/// "collection":…,"rkey":…` in Jetstream's key order, leaving both objects open.
fn write_commit_head(
    out: &mut Vec<u8>,
    did: &str,
    time_us: u64,
    rev: &str,
    operation: &str,
    collection: &str,
    rkey: &str,
) {
    out.extend_from_slice(br#"{"did":"#);
    write_str(out, did);
    let _ = write!(
        out,
        r#","time_us":{time_us},"kind":"commit","commit":{{"rev":"#
    );
    write_str(out, rev);
    out.extend_from_slice(br#","operation":"#);
    write_str(out, operation);
    out.extend_from_slice(br#","collection":"#);
    write_str(out, collection);
    out.extend_from_slice(br#","rkey":"#);
    write_str(out, rkey);
}

fn write_json(out: &mut Vec<u8>, value: &Value) {
    // Writing JSON into a Vec fails only for maps with non-string keys, which a `Value` parsed
    // from JSON never has.
    if let Err(err) = serde_json::to_writer(&mut *out, value) {
        unreachable!("serializing to memory failed: {err}");
    }
}

fn write_str(out: &mut Vec<u8>, text: &str) {
    if let Err(err) = serde_json::to_writer(&mut *out, text) {
        unreachable!("serializing to memory failed: {err}");
    }
}

/// Whether `text` is a `did:plc` (`did:plc:` + 24 base32 characters).
fn is_plc_did(text: &str) -> bool {
    text.strip_prefix("did:plc:")
        .is_some_and(|id| id.len() == 24 && id.bytes().all(|b| BASE32.contains(&b)))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use starling_core::jetstream::{self, Body, Operation, Refs};

    use super::*;
    use crate::templates::{load_templates, shared_data_dir};

    fn templates() -> Option<Vec<Template>> {
        let dir = shared_data_dir();
        if !dir.is_dir() {
            eprintln!(
                "this test needs ../shared/data (looked in {})",
                dir.display()
            );
            return None;
        }
        Some(load_templates(&dir).unwrap())
    }

    fn generate(templates: &[Template], params: StreamParams, events: usize) -> Vec<String> {
        let mut generator = Generator::new(templates, params);
        let mut out = Vec::new();
        for _ in 0..events {
            generator.next_event(&mut out);
        }
        let text = String::from_utf8(out).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    const PARAMS: StreamParams = StreamParams {
        actors: 1_000,
        seed: 7,
    };

    // Checks that every generated event decodes, that `time_us` strictly grows, that revs grow
    // per repo, and that the same seed gives the same bytes and another seed other bytes.
    #[test]
    fn events_decode_in_order_and_are_deterministic() {
        let Some(templates) = templates() else { return };
        assert_eq!(templates.len(), 162);
        let lines = generate(&templates, PARAMS, 5_000);
        assert_eq!(lines.len(), 5_000);
        let mut last_time = 0;
        let mut last_rev: HashMap<String, u64> = HashMap::new();
        for line in &lines {
            let event = jetstream::decode(line.as_bytes())
                .unwrap_or_else(|err| panic!("generated event does not decode: {err}: {line}"));
            assert!(event.time_us > last_time, "time_us went back: {line}");
            last_time = event.time_us;
            if let Body::Commit(commit) = &event.body {
                let last = last_rev.insert(event.did.to_string(), commit.rev);
                assert!(
                    last.is_none_or(|last| last < commit.rev),
                    "rev went back: {line}"
                );
            }
        }
        assert_eq!(lines, generate(&templates, PARAMS, 5_000));
        let other = StreamParams { seed: 8, ..PARAMS };
        assert_ne!(lines, generate(&templates, other, 5_000));
    }

    // Checks that the stream keeps the templates' mix: the share of each label is within a few
    // points of its share among the templates, counted independently from the template list.
    #[test]
    fn mix_follows_the_templates() {
        let Some(templates) = templates() else { return };
        let mut generator = Generator::new(&templates, PARAMS);
        let events = 20_000;
        let mut counts: HashMap<&str, usize> = HashMap::new();
        let mut out = Vec::new();
        for _ in 0..events {
            let idx = generator.next_event(&mut out);
            *counts.entry(&templates[idx].label).or_default() += 1;
        }
        let mut expected: HashMap<&str, usize> = HashMap::new();
        for template in &templates {
            *expected.entry(&template.label).or_default() += 1;
        }
        let likes = expected["create app.bsky.feed.like"];
        assert!(
            likes * 100 / templates.len() >= 60,
            "templates are mostly likes"
        );
        for (label, n) in expected {
            let want = n as f64 / templates.len() as f64;
            let got = counts.get(label).copied().unwrap_or(0) as f64 / events as f64;
            assert!(
                (want - got).abs() < 0.02,
                "{label}: want {want:.3}, got {got:.3}"
            );
        }
    }

    // Checks that references point into the stream: most likes name a post created earlier in
    // it, some posts collect many likes, every unfollow deletes a follow created earlier by the
    // same repo, and follow subjects are skewed toward a few popular actors.
    #[test]
    fn references_point_at_earlier_records() {
        let Some(templates) = templates() else { return };
        let lines = generate(&templates, PARAMS, 20_000);
        let mut posts = HashSet::new();
        let mut follows = HashSet::new();
        let mut like_hits = 0usize;
        let mut likes = 0usize;
        let mut likes_per_post: HashMap<String, usize> = HashMap::new();
        let mut unfollows = 0usize;
        let mut follow_subjects: HashMap<String, usize> = HashMap::new();
        for line in &lines {
            let event = jetstream::decode(line.as_bytes()).unwrap();
            let Body::Commit(commit) = &event.body else {
                continue;
            };
            let key = format!("{}/{}", event.did, commit.rkey);
            match (&*commit.collection, commit.operation) {
                (nsid::POST, Operation::Create) => {
                    posts.insert(format!("at://{}/{}/{}", event.did, nsid::POST, commit.rkey));
                }
                (nsid::LIKE, Operation::Create) => {
                    let Refs::Subject { subject, .. } = &commit.record.as_ref().unwrap().refs
                    else {
                        panic!("a like without a subject: {line}");
                    };
                    let uri = format!(
                        "at://{}/{}/{}",
                        subject.did, subject.collection, subject.rkey
                    );
                    likes += 1;
                    if posts.contains(&uri) {
                        like_hits += 1;
                    }
                    *likes_per_post.entry(uri).or_default() += 1;
                }
                (nsid::FOLLOW, Operation::Create) => {
                    follows.insert(key);
                    let Refs::Actor { subject } = &commit.record.as_ref().unwrap().refs else {
                        panic!("a follow without a subject: {line}");
                    };
                    *follow_subjects.entry(subject.to_string()).or_default() += 1;
                }
                (nsid::FOLLOW, Operation::Delete) => {
                    // Only an unfollow before any follow has nothing earlier to delete.
                    unfollows += 1;
                    let hit = follows.remove(&key);
                    assert!(
                        hit || follow_subjects.is_empty(),
                        "unfollow of no follow: {line}"
                    );
                }
                _ => {}
            }
        }
        assert!(likes > 10_000, "{likes} likes");
        assert!(
            like_hits * 100 / likes >= 80,
            "{like_hits} of {likes} likes hit the stream"
        );
        let top_likes = likes_per_post.values().max().copied().unwrap_or(0);
        assert!(top_likes >= 50, "the most liked post has {top_likes} likes");
        assert!(unfollows > 100, "{unfollows} unfollows");
        let followed_most = follow_subjects.values().max().copied().unwrap_or(0);
        assert!(
            followed_most >= 30,
            "the most followed actor has {followed_most} follows"
        );
    }

    // Checks the pool DIDs: valid `did:plc`s, distinct, and different for another seed.
    #[test]
    fn actor_dids_are_valid_and_distinct() {
        let dids: HashSet<String> = (0..10_000).map(|idx| actor_did(7, idx)).collect();
        assert_eq!(dids.len(), 10_000);
        for did in &dids {
            assert!(syntax::is_valid_did(did), "{did}");
            assert!(is_plc_did(did), "{did}");
        }
        assert_ne!(actor_did(7, 0), actor_did(8, 0));
    }

    // Checks the power law against its formula: with exponent 1 over n = 999, P(0) is
    // ln(2)/ln(1000), about 10%, and every draw is in range.
    #[test]
    fn power_law_is_skewed_and_in_range() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let draws = 100_000;
        let mut zeros = 0;
        for _ in 0..draws {
            let k = power_law(&mut rng, 999, 1.0);
            assert!(k < 999);
            zeros += usize::from(k == 0);
        }
        let share = zeros as f64 / draws as f64;
        let want = 2f64.ln() / 1000f64.ln();
        assert!((share - want).abs() < 0.01, "P(0) = {share}, want {want}");
    }
}
