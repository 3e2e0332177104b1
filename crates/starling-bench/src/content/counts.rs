//! The content-checked sets of follows and counts: GetFollowers, GetInteractionCounts and
//! GetCountsForUsers, each request with the answer the reference's tables give for the file.
//!
//! What the reference counts, as its indexing plugins (`follow`, `like`, `repost`, `post`) and
//! its routes (`follows.ts`, `interactions.ts`) define it:
//! - A follow, like or repost of a (creator, subject) pair that already has one is a duplicate:
//!   kept aside, it counts nothing, and it takes the pair's place (with its own times) only when
//!   the pair's record is deleted. So counts are of distinct live pairs, and a pair's row is its
//!   first live record in the file.
//! - `followersCount` and `followsCount` count the `follow` rows of the subject and of the
//!   creator: a self-follow counts, and so does a follow of a DID the file never names.
//!   Follows a store imported without records (no reference holds them) count as well, once
//!   per pair with the records: Starling reads both counts from its graph.
//! - `postsCount` counts every live post of the creator, replies and quotes included.
//! - `likeCount` and `repostCount` count the rows naming the post; `replyCount` the live posts
//!   whose reply parent it is (less those violating a threadgate: the generator writes none);
//!   `quoteCount` the live posts quoting it. The reference counts quotes by the quoted CID, not
//!   the URI; the generator quotes each post with the CID it was written with and never updates
//!   a post, so the two agree here.
//! - GetFollowers: the subject's follows joined to their creators' `actor` rows (an inner join:
//!   a follower the reference never saw an event of is left out), ordered by `sortAt` newest
//!   first, then by CID, one page; checked like the likes pages (`expect.page` holds `[follow
//!   URI, follower DID, sortAtMs]`).
//!
//! Counts are expected exactly, in request order (`expect.likes`, `expect.followers`, ...: one
//! value per requested post or actor).

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::path::Path;

use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::json;

use super::{Content, ContentSet, Follow, Row, sorted_keys};
use crate::requests::Request;

/// How many of each key, e.g. followers per followed DID.
fn tally<'a>(keys: impl Iterator<Item = &'a str>) -> HashMap<&'a str, u32> {
    let mut res: HashMap<&str, u32> = HashMap::new();
    for key in keys {
        *res.entry(key).or_default() += 1;
    }
    res
}

/// Sorted, so that a seed gives the same draw whatever the hash order.
fn sorted<'a>(keys: impl Iterator<Item = &'a String>) -> Vec<&'a str> {
    let mut res: Vec<&str> = keys.map(String::as_str).collect();
    res.sort_unstable();
    res
}

/// `{name: [count of each item]}` for the named tallies.
fn expect_counts(tallies: &[(&str, HashMap<&str, u32>)], items: &[&str]) -> serde_json::Value {
    let res: serde_json::Map<String, serde_json::Value> = tallies
        .iter()
        .map(|(name, tally)| {
            let counts: Vec<u32> = items
                .iter()
                .map(|item| tally.get(item).copied().unwrap_or(0))
                .collect();
            ((*name).to_owned(), json!(counts))
        })
        .collect();
    serde_json::Value::Object(res)
}

impl Content {
    /// Writes the followers, interaction-counts and counts-for-users sets, `n_requests` each
    /// (`batch` posts or actors a count request), into `out`; returns a `key: value` line per
    /// fact about the draw.
    pub fn write_count_sets<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        n_requests: usize,
        limit: u32,
        batch: usize,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        let follows = self.unique_follows();
        let mut facts = self.write_followers(out, rng, &follows, n_requests, limit)?;
        facts.extend(self.write_interaction_counts(out, rng, n_requests, batch)?);
        facts.extend(self.write_counts_for_users(out, rng, n_requests, batch)?);
        Ok(facts)
    }

    /// The row of each followed pair: its first live follow in the file, as the reference
    /// keeps it.
    pub(super) fn unique_follows(&self) -> Vec<&Follow> {
        let mut first: HashMap<(&str, &str), &Follow> = HashMap::new();
        for follow in self.follows.values() {
            let pair = (follow.row.subject.as_str(), follow.subject.as_str());
            let kept = first.entry(pair).or_insert(follow);
            if follow.time_us < kept.time_us {
                *kept = follow;
            }
        }
        first.into_values().collect()
    }

    /// Every followed (follower, followed) pair: of the live follow records and imported.
    pub(super) fn follow_pairs(&self) -> HashSet<(&str, &str)> {
        let recorded = (self.unique_follows().into_iter())
            .map(|follow| (follow.row.subject.as_str(), follow.subject.as_str()));
        let imported =
            (self.imported.iter()).map(|(actor, subject)| (actor.as_str(), subject.as_str()));
        recorded.chain(imported).collect()
    }

    fn write_followers<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        follows: &[&Follow],
        n_requests: usize,
        limit: u32,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        let mut by_subject: HashMap<&str, Vec<&Row>> = HashMap::new();
        for follow in follows
            .iter()
            .filter(|follow| self.tracked(&follow.subject))
        {
            let rows = by_subject.entry(&follow.subject).or_default();
            // The reference's page joins each follow to its creator's actor row.
            if self.actors.contains(&follow.row.subject) {
                rows.push(&follow.row);
            }
        }
        let subjects = sorted_keys(&by_subject, |_| true);
        let pages = (n_requests, limit);
        let set = ContentSet::actor_pages(rng, &subjects, &by_subject, "getFollowers", pages)?;
        set.write(out, "followers")?;
        Ok(vec![format!(
            "live follows: {} (distinct pairs), followed: {}",
            follows.len(),
            subjects.len()
        )])
    }

    fn write_interaction_counts<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        n_requests: usize,
        batch: usize,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        let like_pairs: HashSet<(&str, &str)> = (self.likes.values())
            .map(|(actor, row)| (actor.as_str(), row.subject.as_str()))
            .collect();
        let repost_pairs: HashSet<(&str, &str)> = (self.reposts.values())
            .map(|(actor, subject)| (actor.as_str(), subject.as_str()))
            .collect();
        let posts = self.posts.values();
        let replies = tally(
            posts
                .clone()
                .filter_map(|post| post.reply_parent.as_deref()),
        );
        let quotes = tally(posts.filter_map(|post| post.quote.as_deref()));
        let facts = vec![format!(
            "live posts: {}, replied to: {}, quoted: {}",
            self.posts.len(),
            replies.len(),
            quotes.len()
        )];
        let tallies = [
            ("likes", tally(like_pairs.iter().map(|pair| pair.1))),
            ("reposts", tally(repost_pairs.iter().map(|pair| pair.1))),
            ("replies", replies),
            ("quotes", quotes),
        ];
        let by_tracked = self
            .posts
            .iter()
            .filter(|(_, post)| self.tracked(&post.creator));
        let uris = sorted(by_tracked.map(|(uri, _)| uri));
        let mut set = ContentSet::packed();
        for _ in 0..n_requests {
            let drawn: Vec<&str> = (0..batch)
                .filter_map(|_| uris.choose(rng).copied())
                .collect();
            if drawn.is_empty() {
                return Err("no live posts".into());
            }
            let refs: Vec<(String, String)> = (drawn.iter())
                .map(|&uri| {
                    let cid = self.posts.get(uri).map(|post| post.cid.clone());
                    (uri.to_owned(), cid.unwrap_or_default())
                })
                .collect();
            let refs_json: Vec<_> = (refs.iter())
                .map(|(uri, cid)| json!({ "uri": uri, "cid": cid }))
                .collect();
            set.push(
                Request::interaction_counts(&refs),
                "getInteractionCounts",
                json!({ "refs": refs_json }),
                expect_counts(&tallies, &drawn),
                refs.len(),
            );
        }
        set.write(out, "interaction-counts")?;
        Ok(facts)
    }

    fn write_counts_for_users<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        n_requests: usize,
        batch: usize,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        // Starling counts the graph's edges, imported ones included.
        let pairs = self.follow_pairs();
        let followers = tally(pairs.iter().map(|pair| pair.1));
        let following = tally(pairs.iter().map(|pair| pair.0));
        let posts = tally(self.posts.values().map(|post| post.creator.as_str()));
        let tallies = [
            ("followers", followers),
            ("following", following),
            ("posts", posts),
        ];
        let actors = sorted(self.actors.iter().filter(|actor| self.tracked(actor)));
        let mut set = ContentSet::packed();
        for _ in 0..n_requests {
            let drawn: Vec<&str> = (0..batch)
                .filter_map(|_| actors.choose(rng).copied())
                .collect();
            if drawn.is_empty() {
                return Err("no actors in the file".into());
            }
            let dids: Vec<String> = drawn.iter().map(|&did| did.to_owned()).collect();
            set.push(
                Request::counts_for_users(&dids),
                "getCountsForUsers",
                json!({ "dids": dids }),
                expect_counts(&tallies, &drawn),
                dids.len(),
            );
        }
        set.write(out, "counts-for-users")?;
        Ok(vec![format!("actors: {}", actors.len())])
    }
}

#[cfg(test)]
pub(super) mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use starling_core::jetstream;

    use super::*;

    pub(in crate::content) const ALICE: &str = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa";
    pub(in crate::content) const BOB: &str = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb";
    pub(in crate::content) const CAROL: &str = "did:plc:cccccccccccccccccccccccc";
    const CID: &str = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";
    const T0_US: u64 = 1_735_689_600_000_000;

    /// A create of `record` (a delete when empty) by `did` at `T0_US + second` seconds.
    pub(in crate::content) fn apply(
        content: &mut Content,
        did: &str,
        second: u64,
        collection: &str,
        rkey: &str,
        record: &str,
    ) {
        let time_us = T0_US + second * 1_000_000;
        let (operation, tail) = if record.is_empty() {
            ("delete", String::new())
        } else {
            let record = format!(
                r#"{{"$type":"{collection}",{record},"createdAt":"2025-01-01T00:00:{second:02}.000Z"}}"#
            );
            ("create", format!(r#","record":{record},"cid":"{CID}""#))
        };
        let line = format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"3l3qo2vutsw2b","operation":"{operation}","collection":"{collection}","rkey":"{rkey}"{tail}}}}}"#
        );
        content.apply(&jetstream::decode_str(&line).unwrap());
    }

    pub(in crate::content) fn post_uri(did: &str, rkey: &str) -> String {
        format!("at://{did}/app.bsky.feed.post/{rkey}")
    }

    /// Worked out by hand: Alice follows Bob twice (the first deleted), herself, and Carol
    /// (who never has an event); Bob follows Alice. Bob posts p1; Alice replies to it and
    /// quotes it; Alice likes it twice (a duplicate) and Bob reposts it; a deleted reply
    /// counts nothing.
    fn fixture() -> Content {
        let mut content = Content::default();
        let follow = |did: &str| format!(r#""subject":"{did}""#);
        let graph = "app.bsky.graph.follow";
        apply(&mut content, ALICE, 1, graph, "f1", &follow(BOB));
        apply(&mut content, ALICE, 2, graph, "f2", &follow(BOB));
        apply(&mut content, ALICE, 3, graph, "f1", "");
        apply(&mut content, ALICE, 4, graph, "f3", &follow(ALICE));
        apply(&mut content, ALICE, 5, graph, "f4", &follow(CAROL));
        apply(&mut content, BOB, 6, graph, "f5", &follow(ALICE));
        let p1 = post_uri(BOB, "p1");
        let strong = format!(r#"{{"uri":"{p1}","cid":"{CID}"}}"#);
        let post = "app.bsky.feed.post";
        apply(&mut content, BOB, 7, post, "p1", r#""text":"hi""#);
        let reply = format!(r#""text":"re","reply":{{"root":{strong},"parent":{strong}}}"#);
        apply(&mut content, ALICE, 8, post, "p2", &reply);
        let quote =
            format!(r#""text":"q","embed":{{"$type":"app.bsky.embed.record","record":{strong}}}"#);
        apply(&mut content, ALICE, 9, post, "p3", &quote);
        apply(&mut content, BOB, 10, post, "p4", &reply);
        apply(&mut content, BOB, 11, post, "p4", "");
        let subject = format!(r#""subject":{strong}"#);
        apply(
            &mut content,
            ALICE,
            12,
            "app.bsky.feed.like",
            "l1",
            &subject,
        );
        apply(
            &mut content,
            ALICE,
            13,
            "app.bsky.feed.like",
            "l2",
            &subject,
        );
        apply(
            &mut content,
            BOB,
            14,
            "app.bsky.feed.repost",
            "r1",
            &subject,
        );
        content
    }

    pub(in crate::content) fn lines(dir: &Path, name: &str) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(dir.join(format!("{name}.content.jsonl"))).unwrap();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    // Checks the counts and the followers pages on the fixture against the hand-worked
    // answers: one row per followed pair (the second follow of Alice -> Bob, after the first
    // was deleted), a self-follow and a follow of an unknown DID counted, replies and quotes
    // of live posts, and a duplicate like counted once.
    #[test]
    fn counts_follow_the_reference_rules() {
        let content = fixture();
        let dir = tempfile::tempdir().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        content
            .write_count_sets(dir.path(), &mut rng, 20, 10, 5)
            .unwrap();
        let follows_of = |did: &str| match did {
            ALICE => (2, 3, 2),
            BOB => (1, 1, 1),
            _ => (1, 0, 0),
        };
        for line in lines(dir.path(), "counts-for-users") {
            let dids = line["request"]["dids"].as_array().unwrap();
            for (idx, did) in dids.iter().enumerate() {
                let (followers, following, posts) = follows_of(did.as_str().unwrap());
                assert_eq!(line["expect"]["followers"][idx], followers, "{did}");
                assert_eq!(line["expect"]["following"][idx], following, "{did}");
                assert_eq!(line["expect"]["posts"][idx], posts, "{did}");
            }
        }
        let p1 = post_uri(BOB, "p1");
        for line in lines(dir.path(), "interaction-counts") {
            let refs = line["request"]["refs"].as_array().unwrap();
            for (idx, post_ref) in refs.iter().enumerate() {
                let is_p1 = post_ref["uri"] == p1.as_str();
                let want = u32::from(is_p1);
                for field in ["likes", "reposts", "replies", "quotes"] {
                    assert_eq!(line["expect"][field][idx], want, "{field} of {post_ref}");
                }
            }
        }
        for line in lines(dir.path(), "followers") {
            let page: Vec<&str> = (line["expect"]["page"].as_array().unwrap().iter())
                .map(|row| row[1].as_str().unwrap())
                .collect();
            let want: &[&str] = match line["request"]["actorDid"].as_str().unwrap() {
                ALICE => &[BOB, ALICE],
                BOB => &[ALICE],
                _ => &[ALICE],
            };
            assert_eq!(page, want);
        }
    }
}
