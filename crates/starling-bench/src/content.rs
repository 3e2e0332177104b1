//! The content-checked request sets of `compare-requests`: GetActorLikes, GetListMembers,
//! SearchActors, (in `counts`) GetFollowers, GetInteractionCounts and GetCountsForUsers, (in
//! `feeds`) GetTimeline, GetAuthorFeed and GetFollowsFollowing, and (in `notifications`)
//! GetNotifications and GetUnreadNotificationCount, each request with the answer the data says
//! it must get.
//!
//! [`Content`] follows a Jetstream file to its final state (live likes, reposts, follows,
//! posts, feed items, list items, notifications, each actor's handle);
//! [`Content::write_feed_sets`], [`Content::write_sets`], [`Content::write_count_sets`] and
//! [`Content::write_notification_sets`] draw the requests and write, per set, `NAME.json` and
//! `NAME.bin` (the messages), `NAME.expect` (the answer sizes `grpc-load` checks) and
//! `NAME.content.jsonl`: one line per request, `{"method", "request", "expect"}`, which
//! `compare/content.mjs` sends to both dataplanes and compares.
//!
//! The expectations follow the reference's own queries (its `data-plane/server/routes/*.ts`):
//! - GetActorLikes, GetListMembers: rows ordered by `sortAt` (`least(createdAt, indexedAt)`,
//!   in milliseconds) newest first, then by CID; one page of `limit`. `expect.page` holds the
//!   page in that order as `[uri, subject, sortAtMs]` (the like's subject URI, the item's
//!   member DID); `expect.tied` the further rows sharing the last row's `sortAt`. Rows of one
//!   millisecond may come in any order (Starling breaks such ties by other keys than the CID),
//!   so an answer is right when it has the page's size, is ordered by `sortAt`, holds every
//!   row of the page newer than the last one's millisecond, and fills the rest from that
//!   millisecond's rows.
//! - SearchActors: the reference matches handles containing the term (`like '%term%'`) and
//!   orders by when the actor was indexed; Starling ranks by its own relevance. The engines
//!   order differently, so the check is that the expected actor is in the answer. Terms are a
//!   whole handle or its first label (`user12`), the latter only when at most `limit` handles
//!   contain it, so the actor is on the first page whatever the ranking; `expect.matches` is
//!   how many handles contain the term, and the page must hold `min(matches, limit)`.
//!
//! A network too large to hold whole is followed for a sample of its actors
//! ([`Content::tracking`]): one actor in N (by a hash of the DID) is tracked, and the model
//! keeps only what the answers about tracked actors depend on: every post and repost (a reply
//! notifies ancestors found through posts; a timeline shows any followed author's items), the
//! likes and follows made by or naming a tracked actor, tracked owners' list items, and the
//! notifications of tracked recipients. Requests are then drawn about tracked actors and their
//! posts only: GetFollowsFollowing from a tracked viewer to a tracked target, whose followers
//! are all known. The search-actors set needs every handle and is not drawn from a sample.
//! Follows imported without records ([`Content::import_follow`]) are graph edges only: they
//! count in `followersCount` and `followsCount` (Starling counts the graph's edges), fill
//! timelines and make a notification a priority one; no follower page shows them.

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::fmt::Write as _;
use std::path::Path;

use rand::Rng;
use rand::seq::IndexedRandom;
use serde_json::json;
use starling_core::jetstream::{Body, Event, Operation, Record, Refs, nsid};
use starling_core::syntax::RecordUri;

use crate::requests::{Request, write_requests};

mod counts;
mod feeds;
mod notifications;
mod tracking;

pub use feeds::FeedDraw;

/// A row of a newest-first list: the record's URI, what it names, its `sortAt` in ms, its CID.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    uri: String,
    subject: String,
    sort_at_ms: i64,
    cid: String,
}

/// The final state of a file, as far as the content-checked sets need it.
#[derive(Default)]
pub struct Content {
    /// Live likes by URI, with the liking actor.
    likes: HashMap<String, (String, Row)>,
    /// Every list created (and not deleted): list URI -> its owner.
    lists: HashMap<String, String>,
    /// Live list items by URI, with their list's URI.
    items: HashMap<String, (String, Row)>,
    /// Each actor's handle, from its newest identity event.
    handles: HashMap<String, String>,
    /// Every DID with a commit or identity event: the reference's `actor` rows (it indexes
    /// the handle of each event's repository).
    actors: HashSet<String>,
    /// Live follow records by URI (duplicates of one pair included: see `counts`).
    follows: HashMap<String, Follow>,
    /// Live posts by URI.
    posts: HashMap<String, Post>,
    /// Live reposts by URI: (reposting actor, reposted URI).
    reposts: HashMap<String, (String, String)>,
    /// The reference's `feed_item` rows by URI (see `feeds`).
    feed_items: HashMap<String, feeds::FeedItem>,
    /// The reposts of each post URI, whose feed items go when the post is deleted.
    reposts_of: HashMap<String, Vec<String>>,
    /// The reference's `notification` rows (see `notifications`).
    notifications: notifications::Notifications,
    /// One actor in this many is tracked; 0 or 1: all (see the module doc).
    track_every: u64,
    /// Imported follows by or of tracked actors: (follower, followed).
    imported: HashSet<(String, String)>,
}

/// A live follow record. `row.subject` is the follower (what a GetFollowers page names).
struct Follow {
    /// The followed DID.
    subject: String,
    /// The event's time: of two follows of one pair, the reference keeps the first indexed.
    time_us: u64,
    row: Row,
}

/// A live post, as far as the counts need it.
struct Post {
    creator: String,
    cid: String,
    /// The post replied to, for a reply.
    reply_parent: Option<String>,
    /// The quoted post, for a quote of a post.
    quote: Option<String>,
}

/// `sortAt` as the reference stores it: the earlier of `createdAt` and the event time, both
/// cut to milliseconds (its columns are ISO strings with milliseconds).
fn sort_at_ms(created_at_us: Option<i64>, time_us: u64) -> i64 {
    let indexed_ms = i64::try_from(time_us / 1_000).unwrap_or(i64::MAX);
    created_at_us.map_or(indexed_ms, |created| {
        created.div_euclid(1_000).min(indexed_ms)
    })
}

fn uri_string(uri: &RecordUri<'_>) -> String {
    format!("at://{}/{}/{}", uri.did, uri.collection, uri.rkey)
}

impl Content {
    /// Applies one decoded event.
    pub fn apply(&mut self, event: &Event<'_>) {
        let did = event.did.to_string();
        self.actors.insert(did.clone());
        let commit = match &event.body {
            Body::Identity {
                handle: Some(handle),
                ..
            } => {
                self.handles.insert(did, handle.to_lowercase());
                return;
            }
            Body::Commit(commit) => commit,
            _ => return,
        };
        let uri = format!("at://{did}/{}/{}", commit.collection, commit.rkey);
        let live = commit.operation != Operation::Delete;
        match commit.record.as_ref().filter(|_| live) {
            Some(record) => self.put(did, uri, &commit.collection, record, event.time_us),
            None => self.remove(&commit.collection, &uri),
        }
    }

    /// Records a created (or updated) record.
    fn put(
        &mut self,
        did: String,
        uri: String,
        collection: &str,
        record: &Record<'_>,
        time_us: u64,
    ) {
        let row = |subject: String| Row {
            uri: uri.clone(),
            subject,
            sort_at_ms: sort_at_ms(record.created_at_us, time_us),
            cid: record.cid.to_string(),
        };
        if !self.keeps(&did, collection, &record.refs) {
            return;
        }
        // Before the record is stored: an update keeps or remakes what the first version made.
        self.put_notifications(&did, &uri, collection, record, time_us);
        match (collection, &record.refs) {
            (nsid::LIKE, Refs::Subject { subject, .. }) => {
                let row = row(uri_string(subject));
                self.likes.insert(uri, (did, row));
            }
            (nsid::REPOST, Refs::Subject { subject, .. }) => {
                let subject = uri_string(subject);
                self.put_feed_item(&did, row(subject.clone()));
                self.reposts.insert(uri, (did, subject));
            }
            (nsid::FOLLOW, Refs::Actor { subject }) => {
                let row = row(did);
                let subject = subject.to_string();
                self.follows.insert(
                    uri,
                    Follow {
                        subject,
                        time_us,
                        row,
                    },
                );
            }
            (nsid::POST, Refs::Post { reply, quote, .. }) => {
                self.put_feed_item(&did, row(uri.clone()));
                let post = Post {
                    creator: did,
                    cid: record.cid.to_string(),
                    reply_parent: reply.as_ref().map(|reply| uri_string(&reply.parent)),
                    quote: quote
                        .filter(|quote| quote.collection == nsid::POST)
                        .map(|quote| uri_string(&quote)),
                };
                self.posts.insert(uri, post);
            }
            (nsid::LIST, _) => {
                self.lists.insert(uri, did);
            }
            (nsid::LISTITEM, Refs::ListItem { subject, list }) => {
                let row = row(subject.to_string());
                self.items.insert(uri, (uri_string(list), row));
            }
            _ => {}
        }
    }

    /// Forgets a deleted record.
    fn remove(&mut self, collection: &str, uri: &str) {
        self.remove_feed_items(collection, uri);
        self.notifications.remove(uri);
        match collection {
            nsid::LIKE => drop(self.likes.remove(uri)),
            nsid::REPOST => drop(self.reposts.remove(uri)),
            nsid::FOLLOW => drop(self.follows.remove(uri)),
            nsid::POST => drop(self.posts.remove(uri)),
            nsid::LIST => drop(self.lists.remove(uri)),
            nsid::LISTITEM => drop(self.items.remove(uri)),
            _ => {}
        }
    }

    /// Writes the actor-likes, list-members and search-actors sets, `n_requests` each, into
    /// `out`; returns a `key: value` line per fact about the draw.
    pub fn write_sets<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        n_requests: usize,
        limit: u32,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        let mut facts = Vec::new();
        facts.extend(self.write_actor_likes(out, rng, n_requests, limit)?);
        facts.extend(self.write_list_members(out, rng, n_requests, limit)?);
        // A term's matches are counted over every handle: too slow at the sampled scale.
        if !self.is_sampled() {
            facts.extend(self.write_search_actors(out, rng, n_requests, limit)?);
        }
        Ok(facts)
    }

    fn write_actor_likes<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        n_requests: usize,
        limit: u32,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        let mut by_actor: HashMap<&str, Vec<&Row>> = HashMap::new();
        for (actor, row) in self.likes.values().filter(|(actor, _)| self.tracked(actor)) {
            by_actor.entry(actor).or_default().push(row);
        }
        // Like the author-feed set: actors with more than a page, or at a small scale where
        // nobody has that many, anyone with likes.
        let mut actors = sorted_keys(&by_actor, |rows| rows.len() > limit as usize);
        let n_full = actors.len();
        if actors.is_empty() {
            actors = sorted_keys(&by_actor, |_| true);
        }
        let pages = (n_requests, limit);
        let set = ContentSet::actor_pages(rng, &actors, &by_actor, "getActorLikes", pages)?;
        set.write(out, "actor-likes")?;
        Ok(vec![
            format!("live_likes: {}", self.likes.len()),
            format!("likers_with_full_pages: {n_full} of {}", by_actor.len()),
        ])
    }

    fn write_list_members<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        n_requests: usize,
        limit: u32,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        let mut by_list: HashMap<&str, Vec<&Row>> = (self.lists.iter())
            .filter(|(_, owner)| self.tracked(owner))
            .map(|(list, _)| (list.as_str(), Vec::new()))
            .collect();
        for (list, row) in self.items.values() {
            // Items of lists never created (none in generated files) are nobody's members.
            if let Some(rows) = by_list.get_mut(list.as_str()) {
                rows.push(row);
            }
        }
        let all = sorted_keys(&by_list, |_| true);
        let large = sorted_keys(&by_list, |rows| rows.len() > limit as usize);
        let mut set = ContentSet::messages();
        for idx in 0..n_requests {
            // Half of the requests ask a list with more than a page, the other half any list
            // (most are small).
            let pool = if idx % 2 == 0 && !large.is_empty() {
                &large
            } else {
                &all
            };
            let list = *pool.choose(rng).ok_or("no lists in the file")?;
            let rows = by_list.get(list).map(Vec::as_slice).unwrap_or_default();
            let request = json!({ "listUri": list, "limit": limit });
            set.push_page(
                Request::list_page(list, limit),
                "getListMembers",
                request,
                rows,
                limit,
            );
        }
        set.write(out, "list-members")?;
        let members_max = by_list.values().map(Vec::len).max().unwrap_or(0);
        Ok(vec![
            format!(
                "lists: {}, live list items: {}",
                all.len(),
                self.items.len()
            ),
            format!(
                "lists_with_full_pages: {}, members_max: {members_max}",
                large.len()
            ),
        ])
    }

    fn write_search_actors<R: Rng>(
        &self,
        out: &Path,
        rng: &mut R,
        n_requests: usize,
        limit: u32,
    ) -> Result<Vec<String>, Box<dyn Error>> {
        let mut actors: Vec<(&str, &str)> = self
            .handles
            .iter()
            .map(|(did, handle)| (did.as_str(), handle.as_str()))
            .collect();
        actors.sort_unstable();
        let mut matches_of: HashMap<String, usize> = HashMap::new();
        let mut count = |term: &str| -> usize {
            *matches_of.entry(term.to_owned()).or_insert_with(|| {
                actors
                    .iter()
                    .filter(|(_, handle)| handle.contains(term))
                    .count()
            })
        };
        let mut set = ContentSet::messages();
        let mut n_labels = 0;
        for idx in 0..n_requests {
            let &(did, handle) = actors.choose(rng).ok_or("no actor has a handle")?;
            let label = handle.split('.').next().unwrap_or(handle);
            let term = if idx % 2 == 1 && count(label) <= limit as usize {
                n_labels += 1;
                label
            } else {
                handle
            };
            let matches = count(term);
            let request = json!({ "term": term, "limit": limit });
            let expect = json!({ "did": did, "matches": matches });
            let n_expected = matches.min(limit as usize);
            let request_message = Request::search(term, limit);
            set.push(request_message, "searchActors", request, expect, n_expected);
        }
        set.write(out, "search-actors")?;
        Ok(vec![format!(
            "search_terms: {n_labels} first labels, {} whole handles",
            n_requests - n_labels
        )])
    }
}

/// The keys whose rows pass `keep`, sorted so that a seed gives the same draw.
fn sorted_keys<'a, T>(map: &HashMap<&'a str, Vec<T>>, keep: impl Fn(&[T]) -> bool) -> Vec<&'a str> {
    let mut keys: Vec<&str> = map
        .iter()
        .filter(|(_, rows)| keep(rows))
        .map(|(&key, _)| key)
        .collect();
    keys.sort_unstable();
    keys
}

/// Sorts `rows` in the reference's order: `sortAt` newest first, then CID.
fn newest_first(rows: &mut [&Row]) {
    rows.sort_unstable_by(|a, b| b.sort_at_ms.cmp(&a.sort_at_ms).then(b.cid.cmp(&a.cid)));
}

/// The first page of `rows` in the reference's order, and the rows tied with its last one.
fn page_expectation(rows: &[&Row], limit: u32) -> serde_json::Value {
    let mut rows = rows.to_vec();
    newest_first(&mut rows);
    let n_page = rows.len().min(limit as usize);
    let (page, rest) = rows.split_at(n_page);
    let last_ms = page.last().map(|row| row.sort_at_ms);
    let tied: Vec<&Row> = rest
        .iter()
        .take_while(|row| Some(row.sort_at_ms) == last_ms)
        .copied()
        .collect();
    page_json(page, &tied)
}

/// `{"page", "tied"}`, each row as `[uri, subject, sortAtMs]`.
fn page_json(page: &[&Row], tied: &[&Row]) -> serde_json::Value {
    let triple = |row: &&Row| json!([row.uri, row.subject, row.sort_at_ms]);
    json!({
        "page": page.iter().map(triple).collect::<Vec<_>>(),
        "tied": tied.iter().map(triple).collect::<Vec<_>>(),
    })
}

/// A set being drawn: the messages, their sizes and their expected content.
struct ContentSet {
    /// How `grpc-load` counts the response's field 1: `m` messages (a page), `p` the values of
    /// a packed repeated integer (a count per requested item); `s` when the answer is one
    /// scalar (no size to check, so no `NAME.expect`).
    kind: char,
    requests: Vec<Request>,
    expect: String,
    content: String,
}

impl ContentSet {
    /// A set whose answers are pages (`likes`, `listitems`, `followers`, `dids`, `items`,
    /// `results`).
    fn messages() -> ContentSet {
        ContentSet::of_kind('m')
    }

    /// A set whose answers are counts (`likes` of GetInteractionCounts, `posts` of
    /// GetCountsForUsers).
    fn packed() -> ContentSet {
        ContentSet::of_kind('p')
    }

    /// A set whose answers are one scalar (`count` of GetUnreadNotificationCount).
    fn scalars() -> ContentSet {
        ContentSet::of_kind('s')
    }

    fn of_kind(kind: char) -> ContentSet {
        ContentSet {
            kind,
            requests: Vec::new(),
            expect: String::new(),
            content: String::new(),
        }
    }

    /// `n_requests` GetActorLikes-like requests (`method` with `{actorDid, limit}`) of actors
    /// drawn from `actors`, each expected to page through its `rows`.
    fn actor_pages<R: Rng>(
        rng: &mut R,
        actors: &[&str],
        rows: &HashMap<&str, Vec<&Row>>,
        method: &str,
        (n_requests, limit): (usize, u32),
    ) -> Result<ContentSet, Box<dyn Error>> {
        let mut set = ContentSet::messages();
        for _ in 0..n_requests {
            let actor = *actors
                .choose(rng)
                .ok_or_else(|| format!("no actor to ask {method} of"))?;
            let actor_rows = rows.get(actor).map(Vec::as_slice).unwrap_or_default();
            let request = json!({ "actorDid": actor, "limit": limit });
            let message = Request::actor_page(actor, limit);
            set.push_page(message, method, request, actor_rows, limit);
        }
        Ok(set)
    }

    /// A request for a page of `rows`' list (`limit` a page), expected newest first.
    fn push_page(
        &mut self,
        request: Request,
        method: &str,
        request_json: serde_json::Value,
        rows: &[&Row],
        limit: u32,
    ) {
        let n_expected = rows.len().min(limit as usize);
        self.push(
            request,
            method,
            request_json,
            page_expectation(rows, limit),
            n_expected,
        );
    }

    fn push(
        &mut self,
        request: Request,
        method: &str,
        request_json: serde_json::Value,
        expect: serde_json::Value,
        n_expected: usize,
    ) {
        // Every response's list is its field 1.
        if self.kind != 's' {
            let _ = writeln!(self.expect, "1 {} {n_expected}", self.kind);
        }
        let line = json!({ "method": method, "request": request_json, "expect": expect });
        let _ = writeln!(self.content, "{line}");
        self.requests.push(request);
    }

    fn write(&self, out: &Path, name: &str) -> Result<(), Box<dyn Error>> {
        write_requests(out, name, &self.requests)?;
        if self.kind != 's' {
            std::fs::write(out.join(format!("{name}.expect")), &self.expect)?;
        }
        std::fs::write(out.join(format!("{name}.content.jsonl")), &self.content)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use starling_core::jetstream;

    use super::*;

    const ALICE: &str = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa";
    const BOB: &str = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb";
    const CID: &str = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";

    fn commit(did: &str, time_us: u64, collection: &str, rkey: &str, record: &str) -> String {
        let (operation, tail) = if record.is_empty() {
            ("delete", String::new())
        } else {
            ("create", format!(r#","record":{record},"cid":"{CID}""#))
        };
        format!(
            r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"3l3qo2vutsw2b","operation":"{operation}","collection":"{collection}","rkey":"{rkey}"{tail}}}}}"#
        )
    }

    fn apply(content: &mut Content, line: &str) {
        let event = jetstream::decode_str(line).unwrap();
        content.apply(&event);
    }

    /// One list by Alice, worked out by hand: three items, one deleted, and an item of a list
    /// never created.
    fn fixture() -> (Content, String) {
        let mut content = Content::default();
        let list = format!("at://{ALICE}/app.bsky.graph.list/3l3qo2vuowo2b");
        let list_record = r#"{"$type":"app.bsky.graph.list","name":"n","purpose":"app.bsky.graph.defs#curatelist","createdAt":"2025-01-01T00:00:00.000Z"}"#;
        apply(
            &mut content,
            &commit(
                ALICE,
                1_735_689_600_000_000,
                "app.bsky.graph.list",
                "3l3qo2vuowo2b",
                list_record,
            ),
        );
        let item = |subject: &str, created: &str, list: &str| {
            format!(
                r#"{{"$type":"app.bsky.graph.listitem","subject":"{subject}","list":"{list}","createdAt":"{created}"}}"#
            )
        };
        // Created at .500 but seen at .400: sortAt is the event time, .400.
        let a = item(BOB, "2025-01-01T00:00:01.500Z", &list);
        apply(
            &mut content,
            &commit(
                ALICE,
                1_735_689_601_400_123,
                "app.bsky.graph.listitem",
                "3l3qo2vuowo3a",
                &a,
            ),
        );
        let b = item(ALICE, "2025-01-01T00:00:01.400999Z", &list);
        apply(
            &mut content,
            &commit(
                ALICE,
                1_735_689_601_600_000,
                "app.bsky.graph.listitem",
                "3l3qo2vuowo3b",
                &b,
            ),
        );
        let c = item(BOB, "2025-01-01T00:00:02.000Z", &list);
        apply(
            &mut content,
            &commit(
                ALICE,
                1_735_689_602_000_000,
                "app.bsky.graph.listitem",
                "3l3qo2vuowo3c",
                &c,
            ),
        );
        apply(
            &mut content,
            &commit(
                ALICE,
                1_735_689_602_100_000,
                "app.bsky.graph.listitem",
                "3l3qo2vuowo3c",
                "",
            ),
        );
        let other = item(
            BOB,
            "2025-01-01T00:00:03.000Z",
            &format!("at://{ALICE}/app.bsky.graph.list/3l3qo2vuowo2c"),
        );
        apply(
            &mut content,
            &commit(
                ALICE,
                1_735_689_603_000_000,
                "app.bsky.graph.listitem",
                "3l3qo2vuowo3d",
                &other,
            ),
        );

        (content, list)
    }

    // Checks the list-members expectation on a list worked out by hand: three items, one
    // deleted, another list's item left out; the page is newest `sortAt` first (the earlier of
    // createdAt and the event time, in ms), and with a limit of 1 the row of the same
    // millisecond is the tied one.
    #[test]
    fn list_pages_are_newest_first_with_ties() {
        let (content, list) = fixture();
        let rows: Vec<&Row> = content
            .items
            .values()
            .filter(|(of, _)| *of == list)
            .map(|(_, row)| row)
            .collect();
        let uri = |rkey: &str| format!("at://{ALICE}/app.bsky.graph.listitem/{rkey}");
        let expect = page_expectation(&rows, 50);
        let ms = 1_735_689_601_400i64;
        // Same millisecond, same CID here: the URI order is the hash map's, so compare sets.
        let mut page: Vec<serde_json::Value> = expect["page"].as_array().unwrap().clone();
        page.sort_by_key(|row| row[0].as_str().unwrap().to_owned());
        assert_eq!(
            page,
            vec![
                json!([uri("3l3qo2vuowo3a"), BOB, ms]),
                json!([uri("3l3qo2vuowo3b"), ALICE, ms])
            ]
        );
        assert_eq!(expect["tied"], json!([]));
        let one = page_expectation(&rows, 1);
        assert_eq!(one["page"].as_array().unwrap().len(), 1);
        assert_eq!(one["tied"].as_array().unwrap().len(), 1);
    }

    // Checks what the sets write for the fixture and two handles: four GetListMembers
    // requests of its one list (two members each), and SearchActors terms whose match counts
    // are counted here by hand ("user1" is in both handles, the rest in one).
    #[test]
    fn sets_have_the_expected_sizes_and_matches() {
        let (mut content, _) = fixture();
        let dir = tempfile::tempdir().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        content
            .handles
            .insert(ALICE.into(), "user1.gen.test".into());
        content.handles.insert(BOB.into(), "user12.gen.test".into());
        let (_, item) = content.items.values().next().unwrap().clone();
        content.likes.insert("x".into(), (ALICE.into(), item));
        content.write_sets(dir.path(), &mut rng, 4, 50).unwrap();
        let lines = std::fs::read_to_string(dir.path().join("list-members.expect")).unwrap();
        assert_eq!(lines, "1 m 2\n".repeat(4));
        let search =
            std::fs::read_to_string(dir.path().join("search-actors.content.jsonl")).unwrap();
        for line in search.lines() {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            let term = line["request"]["term"].as_str().unwrap();
            let matches = if term == "user1" { 2 } else { 1 };
            assert_eq!(line["expect"]["matches"], matches, "{term}");
        }
    }
}
