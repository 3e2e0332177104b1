//! Home timelines through the binary: `starling serve` ingests a generated scenario from a
//! loopback Jetstream in two parts (heads are built between them, so the second part goes
//! through fan-out, unfollows and deletes on live heads), and every page of every user's
//! `/v1/timeline` is compared with a fan-in model the test computes from its own events. Then
//! the process is killed with `kill -9` and restarted: every page reads the same.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod util;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use starling_core::sample;
use util::{Event, FakeJetstream, Proc, Rng};

const TIMEOUT: Duration = Duration::from_secs(60);
const USERS: u32 = 40;
const EVENTS: usize = 2_500;

/// One timeline item as the API renders it: the post, and the repost record if any.
type Item = (String, Option<String>);

/// A post or repost record of the scenario.
#[derive(Clone)]
struct FeedRecord {
    author: u32,
    rkey: String,
    sort_at: u64,
    /// For a repost, the reposted post's URI.
    subject: Option<String>,
    live: bool,
    /// For a live repost: its post was deleted after it, which takes it out of the timelines.
    unfed: bool,
    /// For a reply: the thread root's URI and author.
    root: Option<(String, u32)>,
    /// `images` or `video` for a post with that embed.
    media: Option<&'static str>,
}

impl FeedRecord {
    fn item(&self) -> Item {
        let did = sample::did(self.author);
        match &self.subject {
            None => (format!("at://{did}/app.bsky.feed.post/{}", self.rkey), None),
            Some(subject) => (
                subject.clone(),
                Some(format!("at://{did}/app.bsky.feed.repost/{}", self.rkey)),
            ),
        }
    }
}

/// The scenario as the test tracks it: live follow records and every feed record.
#[derive(Default, Clone)]
struct Model {
    /// (follower, rkey) -> followed.
    follows: BTreeMap<(u32, String), u32>,
    feed: Vec<FeedRecord>,
    deleted: BTreeSet<u32>,
}

impl Model {
    fn follows(&self, reader: u32, author: u32) -> bool {
        self.follows
            .iter()
            .any(|(&(follower, _), &followed)| follower == reader && followed == author)
    }

    /// Deletes `doomed`'s account: its follows and feed records go.
    fn delete_account(&mut self, doomed: u32) {
        self.deleted.insert(doomed);
        self.follows.retain(|&(follower, _), _| follower != doomed);
        for i in 0..self.feed.len() {
            if self.feed[i].author == doomed && self.feed[i].live {
                self.delete(i);
            }
        }
    }

    /// Deletes feed record `i`; a post takes its live reposts out of the timelines.
    fn delete(&mut self, i: usize) {
        self.feed[i].live = false;
        if self.feed[i].subject.is_some() {
            return;
        }
        let (uri, _) = self.feed[i].item();
        for record in &mut self.feed {
            if record.live && record.subject.as_deref() == Some(uri.as_str()) {
                record.unfed = true;
            }
        }
    }

    /// The whole timeline of `reader`: live posts and reposts by the accounts it follows and
    /// by itself, newest first by sort_at, then record key.
    fn timeline(&self, reader: u32) -> Vec<Item> {
        self.timeline_records(reader)
            .iter()
            .map(|r| r.item())
            .collect()
    }

    fn timeline_records(&self, reader: u32) -> Vec<&FeedRecord> {
        let mut items: Vec<&FeedRecord> = self
            .feed
            .iter()
            .filter(|r| r.live && !r.unfed)
            .filter(|r| r.author == reader || self.follows(reader, r.author))
            .collect();
        items.sort_by(|a, b| (b.sort_at, &b.rkey).cmp(&(a.sort_at, &a.rkey)));
        items
    }

    /// Every page of `reader`'s timeline in pages of `limit`, concatenated, as the reference
    /// pages it.
    fn pages(&self, reader: u32, limit: usize) -> Vec<Item> {
        let all = self.timeline_records(reader);
        let own: Vec<bool> = all.iter().map(|record| record.author == reader).collect();
        util::reference_timeline_pages(&own, limit)
            .into_iter()
            .map(|i| all[i].item())
            .collect()
    }
}

/// A seeded scenario: follows, unfollows, posts (some backdated), reposts, deletes, likes and
/// one account deletion, with the model it leaves after each event.
fn scenario(seed: u64) -> (Vec<Event>, Vec<Model>) {
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    let mut events = Vec::with_capacity(EVENTS);
    let mut models = Vec::with_capacity(EVENTS);
    let mut time_us = 1_700_000_000_000_000u64;
    let doomed = rng.range(0, u64::from(USERS)) as u32;
    for idx in 0..EVENTS {
        time_us += rng.range(1, 2_000);
        let author = rng.range(0, u64::from(USERS)) as u32;
        let did = sample::did(author);
        let rkey = sample::tid(time_us, (idx % 1024) as u16);
        let commit = |collection: &str, op: &str, rkey: &str, record: Option<String>| {
            let record = record
                .map(|r| format!(r#","record":{r},"cid":"bafyreib{idx:08x}""#))
                .unwrap_or_default();
            format!(
                r#"{{"did":"{did}","time_us":{time_us},"kind":"commit","commit":{{"rev":"{}","operation":"{op}","collection":"{collection}","rkey":"{rkey}"{record}}}}}"#,
                sample::tid(time_us, 0)
            )
        };
        let roll = rng.range(0, 100);
        let line = if idx == EVENTS * 7 / 10 {
            model.delete_account(doomed);
            let did = sample::did(doomed);
            format!(
                r#"{{"did":"{did}","time_us":{time_us},"kind":"account","account":{{"active":false,"did":"{did}","seq":{idx},"status":"deleted","time":"{}"}}}}"#,
                sample::datetime(time_us)
            )
        } else if model.deleted.contains(&author) {
            // Commits of a deleted account are ignored: a like, which changes no timeline.
            commit("app.bsky.feed.like", "create", &rkey, Some(like(time_us)))
        } else if roll < 25 {
            let subject = rng.range(0, u64::from(USERS)) as u32;
            if subject != author {
                model.follows.insert((author, rkey.clone()), subject);
            }
            let record = format!(
                r#"{{"subject":"{}","createdAt":"{}"}}"#,
                sample::did(subject),
                sample::datetime(time_us)
            );
            commit("app.bsky.graph.follow", "create", &rkey, Some(record))
        } else if roll < 31 {
            let own: Vec<String> = model
                .follows
                .keys()
                .filter(|(follower, _)| *follower == author)
                .map(|(_, rkey)| rkey.clone())
                .collect();
            match own.get(rng.range(0, own.len().max(1) as u64) as usize) {
                Some(old) => {
                    model.follows.remove(&(author, old.clone()));
                    commit("app.bsky.graph.follow", "delete", old, None)
                }
                None => commit("app.bsky.feed.like", "create", &rkey, Some(like(time_us))),
            }
        } else if roll < 66 {
            // A tenth of posts claim a createdAt up to ten seconds back; the rest a little ahead.
            let created = if rng.range(0, 10) == 0 {
                time_us - rng.range(1, 10_000_000)
            } else {
                time_us + rng.range(0, 5_000_000)
            };
            // A third reply to an earlier post; some embed images or a video.
            let posts: Vec<&FeedRecord> =
                model.feed.iter().filter(|r| r.subject.is_none()).collect();
            let root = match posts.get(rng.range(0, 3 * posts.len().max(1) as u64) as usize) {
                Some(parent) => {
                    let (parent_uri, _) = parent.item();
                    let root = parent
                        .root
                        .clone()
                        .unwrap_or((parent_uri.clone(), parent.author));
                    Some((root, parent_uri))
                }
                None => None,
            };
            let media = match rng.range(0, 10) {
                0 | 1 => Some("images"),
                2 => Some("video"),
                _ => None,
            };
            let reply_json = root
                .as_ref()
                .map(|((root_uri, _), parent_uri)| {
                    format!(
                        r#","reply":{{"root":{{"uri":"{root_uri}","cid":"bafyreiaaaaaaaa"}},"parent":{{"uri":"{parent_uri}","cid":"bafyreiaaaaaaaa"}}}}"#
                    )
                })
                .unwrap_or_default();
            let embed_json = media
                .map(|kind| format!(r#","embed":{{"$type":"app.bsky.embed.{kind}"}}"#))
                .unwrap_or_default();
            model.feed.push(FeedRecord {
                author,
                rkey: rkey.clone(),
                sort_at: created.min(time_us),
                subject: None,
                live: true,
                unfed: false,
                root: root.map(|(root, _)| root),
                media,
            });
            let record = format!(
                r#"{{"$type":"app.bsky.feed.post","text":"post {idx}","createdAt":"{}"{reply_json}{embed_json}}}"#,
                sample::datetime(created)
            );
            commit("app.bsky.feed.post", "create", &rkey, Some(record))
        } else if roll < 80 {
            let posts: Vec<&FeedRecord> =
                model.feed.iter().filter(|r| r.subject.is_none()).collect();
            match posts.get(rng.range(0, posts.len().max(1) as u64) as usize) {
                Some(post) => {
                    let (uri, _) = post.item();
                    let record = format!(
                        r#"{{"subject":{{"uri":"{uri}","cid":"bafyreiaaaaaaaa"}},"createdAt":"{}"}}"#,
                        sample::datetime(time_us)
                    );
                    model.feed.push(FeedRecord {
                        author,
                        rkey: rkey.clone(),
                        sort_at: time_us,
                        subject: Some(uri),
                        live: true,
                        unfed: false,
                        root: None,
                        media: None,
                    });
                    commit("app.bsky.feed.repost", "create", &rkey, Some(record))
                }
                None => commit("app.bsky.feed.like", "create", &rkey, Some(like(time_us))),
            }
        } else if roll < 88 {
            let own: Vec<usize> = (0..model.feed.len())
                .filter(|&i| model.feed[i].author == author && model.feed[i].live)
                .collect();
            match own.get(rng.range(0, own.len().max(1) as u64) as usize) {
                Some(&i) => {
                    model.delete(i);
                    let record = &model.feed[i];
                    let collection = if record.subject.is_some() {
                        "app.bsky.feed.repost"
                    } else {
                        "app.bsky.feed.post"
                    };
                    let old = record.rkey.clone();
                    commit(collection, "delete", &old, None)
                }
                None => commit("app.bsky.feed.like", "create", &rkey, Some(like(time_us))),
            }
        } else {
            commit("app.bsky.feed.like", "create", &rkey, Some(like(time_us)))
        };
        events.push(Event { time_us, line });
        models.push(model.clone());
    }
    (events, models)
}

fn like(time_us: u64) -> String {
    format!(
        r#"{{"subject":{{"uri":"at://{}/app.bsky.feed.post/3l3qo2vutsw2b","cid":"bafyreiaaaaaaaa"}},"createdAt":"{}"}}"#,
        sample::did(0),
        sample::datetime(time_us)
    )
}

fn serve(data_dir: &Path, config: &Path, jetstream: Option<&str>) -> (Proc, String) {
    let mut args = vec![
        OsStr::new("serve"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--config"),
        config.as_os_str(),
        OsStr::new("--http-addr"),
        OsStr::new("127.0.0.1:0"),
        OsStr::new("--batch-events-max"),
        OsStr::new("200"),
    ];
    if let Some(url) = jetstream {
        args.extend([OsStr::new("--jetstream"), OsStr::new(url)]);
    }
    let child = Proc::spawn(util::starling(args), "serve");
    let addr = child.wait_for_stdout("starling: http listening on ", TIMEOUT);
    (child, addr)
}

/// Waits until the timelines have applied every event up to `cursor`.
fn wait_for_cursor(child: &mut Proc, addr: &str, cursor: u64) -> Value {
    util::poll_until(TIMEOUT, "timelines to reach the cursor", || {
        child.assert_healthy();
        let stats = util::http_json(addr, "/v1/stats")?;
        match stats["timelines"]["applied_cursor"].as_u64() {
            Some(seen) if seen >= cursor => Ok(stats),
            seen => Err(format!("cursor {seen:?} < {cursor}")),
        }
    })
}

/// Whether an author feed filter shows a record of the author.
type Shows = fn(&FeedRecord, u32) -> bool;

/// The author's own feed under each filter, in one page, against the model.
fn check_author_feed(addr: &str, author: u32, model: &Model) {
    let did = sample::did(author);
    // The lexicon's filters, as the test reads them.
    let filters: [(&str, Shows); 5] = [
        ("posts_with_replies", |_, _| true),
        ("posts_no_replies", |r, _| {
            r.subject.is_some() || r.root.is_none()
        }),
        ("posts_and_author_threads", |r, author| {
            r.subject.is_some() || r.root.as_ref().is_none_or(|(_, root)| *root == author)
        }),
        ("posts_with_media", |r, _| {
            r.subject.is_none() && r.media.is_some()
        }),
        ("posts_with_video", |r, _| {
            r.subject.is_none() && r.media == Some("video")
        }),
    ];
    for (filter, shows) in filters {
        let path = format!("/v1/author-feed?actor={did}&limit=100&filter={filter}");
        let page = util::http_json(addr, &path).unwrap();
        let have: Vec<Item> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(item_of)
            .collect();
        // Reposts show only while the post they repost is live.
        let live_posts: BTreeSet<String> = model
            .feed
            .iter()
            .filter(|r| r.live && r.subject.is_none())
            .map(|r| r.item().0)
            .collect();
        let mut want: Vec<&FeedRecord> = model
            .feed
            .iter()
            .filter(|r| r.live && r.author == author && shows(r, author))
            .filter(|r| {
                r.subject
                    .as_ref()
                    .is_none_or(|post| live_posts.contains(post))
            })
            .collect();
        want.sort_by(|a, b| (b.sort_at, &b.rkey).cmp(&(a.sort_at, &a.rkey)));
        let want: Vec<Item> = want.iter().map(|r| r.item()).collect();
        assert_eq!(have, want, "author feed of user {author}, {filter}");
    }
}

fn item_of(item: &Value) -> Item {
    let uri = item["uri"].as_str().unwrap().to_owned();
    let repost = item.get("repost").map(|r| r.as_str().unwrap().to_owned());
    (uri, repost)
}

/// Every page of `reader`'s timeline in pages of `limit`, concatenated.
fn all_pages(addr: &str, reader: u32, limit: u64) -> Vec<Item> {
    let did = sample::did(reader);
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10_000 {
        let mut path = format!("/v1/timeline?actor={did}&limit={limit}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let page = util::http_json(addr, &path).unwrap();
        let page_items = page["items"].as_array().unwrap();
        assert!(page_items.len() as u64 <= limit, "{path}: page too long");
        items.extend(page_items.iter().map(item_of));
        match page["cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return items,
        }
    }
    panic!("{did}: the timeline never ended");
}

/// Every user's timeline, read in pages of that user's limit.
fn timelines(addr: &str, limits: &[u64]) -> Vec<Vec<Item>> {
    (0..USERS)
        .map(|reader| all_pages(addr, reader, limits[reader as usize]))
        .collect()
}

/// A page size for each user: up to 29, but at most 10 where lossy timelines make the cap on
/// own items (which applies to larger pages) depend on what the loss left.
fn page_limits(rng: &mut Rng, exact: bool) -> Vec<u64> {
    let end = if exact { 30 } else { 11 };
    (0..USERS).map(|_| rng.range(1, end)).collect()
}

/// The timelines' refresh counter, once it has moved past `after`.
fn refreshed_after(child: &mut Proc, addr: &str, after: u64) -> u64 {
    util::poll_until(TIMEOUT, "a timeline cache refresh", || {
        child.assert_healthy();
        let stats = util::http_json(addr, "/v1/stats")?;
        let refreshes = stats["timelines"]["refreshes"].as_u64().unwrap_or(0);
        if refreshes > after {
            Ok(refreshes)
        } else {
            Err(format!("{refreshes} refreshes"))
        }
    })
}

/// Runs the scenario under one `[timeline]` configuration; returns every user's final
/// timeline. `exact` says whether they must equal the model (lossy timelines drop items).
fn run(name: &str, timeline_toml: &str, seed: u64, exact: bool) -> Vec<Vec<Item>> {
    let mut rng = Rng::new(seed ^ 0x7469_6d65);
    let (events, models) = scenario(seed);
    let dir = util::test_dir();
    let config = dir.path().join("starling.toml");
    std::fs::write(&config, format!("[timeline]\n{timeline_toml}\n")).unwrap();
    let data_dir = dir.path().join("data");
    let split = EVENTS / 2;
    let server = FakeJetstream::start(events.clone(), None, Some(split));
    let (mut child, addr) = serve(&data_dir, &config, Some(&server.url()));

    // Part one, then every user reads (building the heads) and is compared with the model.
    wait_for_cursor(&mut child, &addr, events[split - 1].time_us);
    for reader in 0..USERS {
        check_author_feed(&addr, reader, &models[split - 1]);
    }
    let limits = page_limits(&mut rng, exact);
    let first = timelines(&addr, &limits);
    for (reader, items) in first.iter().enumerate() {
        let page = (limits[reader], exact);
        check(
            name,
            "part one",
            reader as u32,
            items,
            &models[split - 1],
            page,
        );
    }
    // Part two arrives over a new connection and fans out into the live heads.
    server.drop_first_connection();
    wait_for_cursor(&mut child, &addr, events[EVENTS - 1].time_us);
    let stats = util::http_json(&addr, "/v1/stats").unwrap();
    // The caches must have seen the final graph, as a restart's will.
    let refreshes = stats["timelines"]["refreshes"].as_u64().unwrap();
    refreshed_after(&mut child, &addr, refreshes);
    let limits = page_limits(&mut rng, exact);
    let before = timelines(&addr, &limits);
    for (reader, items) in before.iter().enumerate() {
        let page = (limits[reader], exact);
        check(
            name,
            "part two",
            reader as u32,
            items,
            &models[EVENTS - 1],
            page,
        );
    }
    let stats = util::http_json(&addr, "/v1/stats").unwrap();
    eprintln!("{name}: {}", stats["timelines"]);
    assert!(
        stats["timelines"]["inserts"].as_u64().unwrap() > 0,
        "{name}: nothing was fanned out"
    );

    // kill -9 and restart without Jetstream: every page reads the same.
    child.kill9();
    let (mut child, addr) = serve(&data_dir, &config, None);
    let after = timelines(&addr, &limits);
    for reader in 0..USERS as usize {
        assert_eq!(
            after[reader], before[reader],
            "{name}: user {reader}'s timeline changed across kill -9 and restart"
        );
    }
    child.terminate();
    child.wait_exit(TIMEOUT);
    before
}

/// Compares a user's pages of `limit` with the model; `exact` says whether they must equal
/// it (lossy timelines drop items).
fn check(name: &str, when: &str, reader: u32, items: &[Item], model: &Model, page: (u64, bool)) {
    let (limit, exact) = page;
    if exact {
        let want = model.pages(reader, limit as usize);
        assert_eq!(
            items, want,
            "{name}, {when}: user {reader}, pages of {limit}"
        );
    } else {
        let want = model.timeline(reader);
        // Lossy: an order-preserving subsequence of the model, own items all kept.
        let mut rest = want.iter();
        for item in items {
            assert!(
                rest.any(|w| w == item),
                "{name}, {when}: user {reader}: {item:?} is not in the model or out of order"
            );
        }
        let own = |list: &[Item]| {
            list.iter()
                .filter(|(uri, repost)| {
                    repost
                        .as_ref()
                        .unwrap_or(uri)
                        .contains(&sample::did(reader))
                })
                .count()
        };
        assert_eq!(
            own(items),
            own(&want),
            "{name}, {when}: user {reader}: own items"
        );
    }
}

// Lossy off, every author fanned out; then celebrity fan-in for authors with more than 4
// followers (most of them, refreshed every second so authors become celebrities mid-stream):
// both equal the model and each other.
#[test]
fn timelines_match_the_fan_in_model_and_survive_kill_9() {
    let seed = util::seed("timelines_match_the_fan_in_model_and_survive_kill_9");
    let fanned_out = run(
        "fan-out",
        "length = 8\nreasonable_limit = 0\ncelebrity_threshold = 0\nrefresh_interval_secs = 1",
        seed,
        true,
    );
    let celebrities = run(
        "celebrities",
        "length = 8\nreasonable_limit = 0\ncelebrity_threshold = 4\nrefresh_interval_secs = 1",
        seed,
        true,
    );
    assert_eq!(fanned_out, celebrities);
}

// Lossy on, with a limit of 3 follows: readers following more keep a share of the items,
// deterministically, so a restart reads the same.
#[test]
fn lossy_timelines_are_subsets_and_survive_kill_9() {
    let seed = util::seed("lossy_timelines_are_subsets_and_survive_kill_9");
    let lossy = run(
        "lossy",
        "length = 8\nreasonable_limit = 3\ncelebrity_threshold = 0\nrefresh_interval_secs = 1",
        seed,
        false,
    );
    let (_, models) = scenario(seed);
    let full: usize = (0..USERS)
        .map(|r| models[EVENTS - 1].timeline(r).len())
        .sum();
    let kept: usize = lossy.iter().map(Vec::len).sum();
    assert!(
        kept < full,
        "lossy timelines dropped nothing ({kept} of {full})"
    );
}
