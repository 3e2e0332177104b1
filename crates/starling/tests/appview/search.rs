//! Search and suggestions of the stock AppView on Starling: a scripted network with handles,
//! profiles (one edited, one handle changed), posts in several languages (one deleted), starter
//! packs and feed generators with likes, follows and a block. A logged-in viewer calls
//! `actor.searchActors`, `actor.searchActorsTypeahead`, `feed.searchPosts` (with operators, with
//! the author, language and date filters, sorted `top` and `latest`), `graph.searchStarterPacks`,
//! `unspecced.getPopularFeedGenerators` (with and without a query), `feed.getSuggestedFeeds`,
//! `actor.getSuggestions` and `unspecced.getTaggedSuggestions`, both through the AppView's
//! first search path (SearchActors, SearchPosts, ...) and, with its override header, the second
//! (SearchActorsTypeahead, SearchPostsV2, ...). Every answer must be HTTP 200 and list what the
//! test computes from its own events by the documented ranking, in that order.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use starling_core::sample;

use super::{Gen, START_US, TIMEOUT, World, Xrpc, did, mint_keys_and_tokens, start, util};

const SEARCH_ACTORS: &str = "app.bsky.actor.searchActors";
const TYPEAHEAD: &str = "app.bsky.actor.searchActorsTypeahead";
const SEARCH_POSTS: &str = "app.bsky.feed.searchPosts";
const SEARCH_STARTER_PACKS: &str = "app.bsky.graph.searchStarterPacks";
const POPULAR_FEEDS: &str = "app.bsky.unspecced.getPopularFeedGenerators";
const SUGGESTED_FEEDS: &str = "app.bsky.feed.getSuggestedFeeds";
const SUGGESTIONS: &str = "app.bsky.actor.getSuggestions";
const TAGGED: &str = "app.bsky.unspecced.getTaggedSuggestions";
const NSIDS: [&str; 7] = [
    SEARCH_ACTORS,
    TYPEAHEAD,
    SEARCH_POSTS,
    SEARCH_STARTER_PACKS,
    POPULAR_FEEDS,
    SUGGESTED_FEEDS,
    SUGGESTIONS,
];
/// The value of `x-bsky-search-v2-override` that `appview/start.mjs` configures.
const V2_OVERRIDE: &str = "starling-test";

const VIEWER: u32 = 0;
const NAMES: [&str; 9] = [
    "alice", "alina", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
];

fn handle(user: u32) -> String {
    format!("{}.search.test", NAMES[user as usize])
}

/// What the test knows of the searchable state.
#[derive(Default)]
struct Model {
    /// user → (handle, display name, description).
    actors: BTreeMap<u32, (String, String, String)>,
    /// (uri, author, text, lang, time) of live posts.
    posts: Vec<(String, u32, String, String, u64)>,
    /// (uri, name, description, time) of starter packs and of feed generators.
    starter_packs: Vec<(String, String, String, u64)>,
    feeds: Vec<(String, String, String, u64)>,
    /// Feed URI → likes.
    feed_likes: BTreeMap<String, u64>,
    follows: BTreeSet<(u32, u32)>,
    blocks: BTreeSet<(u32, u32)>,
}

fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Name prefix `+2`, description word `+1`, for each query word; `None` unless every word
/// matches.
fn words_score(words: &[String], name: &str, description: &str) -> Option<f64> {
    let (name, description) = (tokens(name), tokens(description));
    let mut total = 0.0;
    for word in words {
        let mut score = 0.0;
        if name.iter().any(|t| t.starts_with(word.as_str())) {
            score += 2.0;
        }
        if description.contains(word) {
            score += 1.0;
        }
        if score == 0.0 {
            return None;
        }
        total += score;
    }
    (!words.is_empty()).then_some(total)
}

impl Model {
    /// The documented actor ranking (`starling-search`), by a scan of every actor, less the
    /// accounts in a block with the viewer (the AppView drops them).
    fn actors(&self, query: &str) -> Vec<String> {
        let q = query.trim().trim_start_matches('@').to_lowercase();
        let words = tokens(&q);
        let mut res: Vec<(f64, u64, String)> = Vec::new();
        for (&user, (handle, name, description)) in &self.actors {
            if self.blocks.contains(&(user, VIEWER)) || self.blocks.contains(&(VIEWER, user)) {
                continue;
            }
            let mut score = 0.0;
            let mut matched = false;
            if handle == &q {
                score += 8.0;
            }
            if handle.starts_with(&q) {
                score += 4.0;
                matched = true;
            }
            if let Some(s) = words_score(&words, name, description) {
                score += s;
                matched = true;
            }
            if matched {
                res.push((score, starling_search::tie_key(&did(user)), did(user)));
            }
        }
        res.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        res.into_iter().map(|(_, _, did)| did).collect()
    }

    fn records(records: &[(String, String, String, u64)], query: &str) -> Vec<String> {
        let words = tokens(query);
        let mut res: Vec<(f64, u64, u64, String)> = records
            .iter()
            .filter_map(|(uri, name, description, time)| {
                let score = words_score(&words, name, description)?;
                Some((score, *time, starling_search::tie_key(uri), uri.clone()))
            })
            .collect();
        res.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        res.into_iter().map(|(.., uri)| uri).collect()
    }

    /// Posts with every word, passing the filter, newest first.
    fn posts_latest(&self, words: &str, keep: impl Fn(u32, &str, u64) -> bool) -> Vec<String> {
        let words = tokens(words);
        let mut res: Vec<&(String, u32, String, String, u64)> = self
            .posts
            .iter()
            .filter(|(_, author, text, lang, time)| {
                let text = tokens(text);
                words.iter().all(|w| text.contains(w)) && keep(*author, lang, *time)
            })
            .collect();
        res.sort_by_key(|b| std::cmp::Reverse(b.4));
        res.into_iter().map(|p| p.0.clone()).collect()
    }

    /// Posts with `word`, by BM25 (k1 = 1.2, b = 0.75 over the live posts' lengths), then
    /// newest; the scenario keeps the scores well apart.
    fn posts_top(&self, word: &str) -> Vec<String> {
        let lengths: Vec<f64> = self
            .posts
            .iter()
            .map(|p| tokens(&p.2).len() as f64)
            .collect();
        let average = lengths.iter().sum::<f64>() / lengths.len() as f64;
        let mut res: Vec<(f64, u64, String)> = self
            .posts
            .iter()
            .filter_map(|(uri, _, text, _, time)| {
                let text = tokens(text);
                let tf = text.iter().filter(|t| *t == word).count() as f64;
                let norm = 1.2 * (0.25 + 0.75 * text.len() as f64 / average);
                (tf > 0.0).then(|| (tf * 2.2 / (tf + norm), *time, uri.clone()))
            })
            .collect();
        res.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        res.into_iter().map(|(.., uri)| uri).collect()
    }

    /// Accounts followed by the viewer's follows, by how many, ties by DID.
    fn suggestions(&self, viewer: u32) -> Vec<String> {
        let mine: BTreeSet<u32> = self
            .follows
            .iter()
            .filter(|(a, _)| *a == viewer)
            .map(|(_, b)| *b)
            .collect();
        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        for &(a, b) in &self.follows {
            if mine.contains(&a) {
                *counts.entry(b).or_default() += 1;
            }
        }
        let mut res: Vec<(u32, String)> = counts
            .into_iter()
            .filter(|(b, _)| {
                *b != viewer
                    && !mine.contains(b)
                    && !self.blocks.contains(&(viewer, *b))
                    && !self.blocks.contains(&(*b, viewer))
            })
            .map(|(b, n)| (n, did(b)))
            .collect();
        res.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        res.into_iter().map(|(_, did)| did).collect()
    }
}

fn identity(g: &mut Gen, user: u32, handle: &str) {
    let time_us = g.tick();
    g.push(
        time_us,
        json!({
            "did": did(user), "time_us": time_us, "kind": "identity",
            "identity": { "did": did(user), "handle": handle, "seq": time_us,
                          "time": sample::datetime(time_us) },
        }),
    );
}

fn profile(g: &mut Gen, m: &mut Model, user: u32, name: &str, description: &str) {
    let fields = json!({ "displayName": name, "description": description });
    g.create(user, "app.bsky.actor.profile", Some("self"), fields);
    let entry = m.actors.entry(user).or_default();
    entry.1 = name.to_owned();
    entry.2 = description.to_owned();
}

fn post(g: &mut Gen, m: &mut Model, user: u32, text: &str, lang: &str) -> String {
    let fields = json!({ "text": text, "langs": [lang] });
    let (rkey, _, time_us) = g.create(user, "app.bsky.feed.post", None, fields);
    let uri = format!("at://{}/app.bsky.feed.post/{rkey}", did(user));
    m.posts
        .push((uri.clone(), user, text.to_owned(), lang.to_owned(), time_us));
    uri
}

fn follow(g: &mut Gen, m: &mut Model, actor: u32, subject: u32) {
    g.create(
        actor,
        "app.bsky.graph.follow",
        None,
        json!({ "subject": did(subject) }),
    );
    m.follows.insert((actor, subject));
}

/// A starter pack (with its list) or a feed generator; returns its URI and CID.
fn named(g: &mut Gen, user: u32, collection: &str, fields: Value) -> (String, String, u64) {
    let (rkey, cid, time_us) = g.create(user, collection, None, fields);
    (
        format!("at://{}/{collection}/{rkey}", did(user)),
        cid,
        time_us,
    )
}

/// Feed generators with likes.
fn feed_generators(g: &mut Gen, m: &mut Model) {
    for (user, name, description, likers) in [
        (0, "River feed", "posts about rivers", &[1][..]),
        (2, "Cats", "only cats", &[0, 1, 3]),
        (4, "Riverside news", "local", &[2, 3]),
    ] {
        let fields = json!({ "did": "did:web:feeds.search.test", "displayName": name,
                             "description": description });
        let (uri, cid, time) = named(g, user, "app.bsky.feed.generator", fields);
        for &liker in likers {
            let subject = json!({ "subject": { "uri": uri, "cid": cid } });
            g.create(liker, "app.bsky.feed.like", None, subject);
        }
        m.feed_likes.insert(uri.clone(), likers.len() as u64);
        m.feeds
            .push((uri, name.to_owned(), description.to_owned(), time));
    }
}

fn scenario(seed: u64) -> (Vec<util::Event>, Model) {
    let mut g = Gen {
        rng: util::Rng::new(seed),
        time_us: START_US,
        events: Vec::new(),
        world: World::default(),
    };
    let mut m = Model::default();
    for user in 0..NAMES.len() as u32 {
        identity(&mut g, user, &handle(user));
        m.actors.entry(user).or_default().0 = handle(user);
    }
    let profiles = [
        ("Alice Rivers", "I paint rivers and lakes"),
        ("Alina Stone", "geology"),
        ("Bob Smith", "friend of alice"),
        ("Carol Alison", "painter"),
        ("Dave", "rivers are nice"),
        ("Erin Original", "writer"),
        ("Frank", "cook"),
        ("Grace", "climber"),
    ];
    for (user, (name, description)) in profiles.iter().enumerate() {
        profile(&mut g, &mut m, user as u32, name, description);
    }
    // Edits: a profile replaced, a handle changed.
    profile(&mut g, &mut m, 5, "Erin Updated", "writer");
    identity(&mut g, 8, "hydra.search.test");
    m.actors.get_mut(&8).unwrap().0 = "hydra.search.test".to_owned();
    for (actor, subject) in [
        (0, 2),
        (0, 3),
        (0, 4),
        (2, 7),
        (2, 8),
        (2, 5),
        (2, 1),
        (3, 7),
        (3, 8),
        (3, 0),
        (4, 7),
        (4, 6),
    ] {
        follow(&mut g, &mut m, actor, subject);
    }
    g.create(
        6,
        "app.bsky.graph.block",
        None,
        json!({ "subject": did(0) }),
    );
    m.blocks.insert((6, 0));
    post(&mut g, &mut m, 0, "river river river", "en");
    post(&mut g, &mut m, 2, "river river boat", "en");
    post(
        &mut g,
        &mut m,
        3,
        "the river is long and wide and deep today",
        "pt",
    );
    post(&mut g, &mut m, 4, "mountain trail", "en");
    let gone = post(&mut g, &mut m, 7, "river obsolete", "en");
    post(
        &mut g,
        &mut m,
        0,
        "a quiet river at dawn with friends and coffee",
        "en",
    );
    post(&mut g, &mut m, 5, "Rivers and lakes", "en");
    g.delete(7, "app.bsky.feed.post", gone.rsplit('/').next().unwrap());
    m.posts.retain(|p| p.0 != gone);
    for (user, name, description) in [
        (0, "River lovers", "people who paint rivers"),
        (2, "Rock climbers", "stone and river walls"),
        (3, "Painters", "watercolor"),
    ] {
        let list = json!({ "purpose": "app.bsky.graph.defs#referencelist", "name": name });
        let (list_uri, _, _) = named(&mut g, user, "app.bsky.graph.list", list);
        let fields = json!({ "name": name, "description": description, "list": list_uri });
        let (uri, _, time) = named(&mut g, user, "app.bsky.graph.starterpack", fields);
        m.starter_packs
            .push((uri, name.to_owned(), description.to_owned(), time));
    }
    feed_generators(&mut g, &mut m);
    (g.events, m)
}

/// GET as the viewer (or anonymously), through the second search path when `v2`.
fn get(
    x: &Xrpc<'_>,
    viewer: Option<u32>,
    nsid: &'static str,
    query: &[(&str, &str)],
    v2: bool,
) -> Value {
    let query: Vec<String> = query
        .iter()
        .map(|(key, value)| format!("{key}={}", super::escape(value)))
        .collect();
    let path = format!("/xrpc/{nsid}?{}", query.join("&"));
    let auth = viewer.map(|v| format!("Bearer {}", x.tokens[&(v, nsid)]));
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth));
    }
    if v2 {
        headers.push(("x-bsky-search-v2-override", V2_OVERRIDE));
    }
    let (status, body) = util::http_get_with(&x.addr, &path, &headers).unwrap();
    assert_eq!(
        status,
        200,
        "GET {path} (v2 {v2}): {body}\n{}",
        x.failed_rpcs()
    );
    serde_json::from_str(&body).unwrap()
}

fn field(items: &Value, key: &str, inner: &str) -> Value {
    Value::Array(
        items[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item[inner].clone())
            .collect(),
    )
}

fn check(x: &Xrpc<'_>, what: &str, have: Value, want: &[String]) -> usize {
    assert!(!want.is_empty(), "{what}: the scenario expects results");
    x.check(what, &have, &json!(want));
    want.len()
}

fn check_actors(x: &Xrpc<'_>, m: &Model) -> usize {
    let mut n = 0;
    for q in ["alice", "updated", "@Rivers"] {
        for v2 in [false, true] {
            let have = get(x, Some(VIEWER), SEARCH_ACTORS, &[("q", q)], v2);
            n += check(
                x,
                &format!("searchActors {q} v2 {v2}"),
                field(&have, "actors", "did"),
                &m.actors(q),
            );
        }
    }
    let have = get(x, Some(VIEWER), SEARCH_ACTORS, &[("q", "original")], false);
    assert_eq!(
        have["actors"],
        json!([]),
        "the old name of an edited profile"
    );
    for q in ["ali", "hyd", "car", "Grace"] {
        for v2 in [false, true] {
            let have = get(x, Some(VIEWER), TYPEAHEAD, &[("q", q)], v2);
            n += check(
                x,
                &format!("typeahead {q} v2 {v2}"),
                field(&have, "actors", "did"),
                &m.actors(q),
            );
        }
    }
    // An old handle finds nothing; an account that blocks the viewer is hidden.
    for q in ["heidi", "frank"] {
        assert!(m.actors(q).is_empty());
        let have = get(x, Some(VIEWER), TYPEAHEAD, &[("q", q)], false);
        assert_eq!(have["actors"], json!([]), "typeahead {q}");
    }
    n
}

fn check_posts(x: &Xrpc<'_>, m: &Model) -> usize {
    let mut n = 0;
    let all = |_: u32, _: &str, _: u64| true;
    // The first path passes only `q`: operators filter, newest first.
    let have = get(x, Some(VIEWER), SEARCH_POSTS, &[("q", "river")], false);
    n += check(
        x,
        "searchPosts river",
        field(&have, "posts", "uri"),
        &m.posts_latest("river", all),
    );
    let q = format!("river from:{}", handle(0));
    let have = get(x, Some(VIEWER), SEARCH_POSTS, &[("q", &q)], false);
    let want = m.posts_latest("river", |author, _, _| author == 0);
    n += check(x, "searchPosts from:", field(&have, "posts", "uri"), &want);
    let have = get(
        x,
        Some(VIEWER),
        SEARCH_POSTS,
        &[("q", "river lang:pt")],
        false,
    );
    let want = m.posts_latest("river", |_, lang, _| lang == "pt");
    n += check(x, "searchPosts lang:", field(&have, "posts", "uri"), &want);
    // The second path: sorts and filters as parameters.
    for (sort, want) in [
        ("latest", m.posts_latest("river", all)),
        ("top", m.posts_top("river")),
    ] {
        let have = get(
            x,
            Some(VIEWER),
            SEARCH_POSTS,
            &[("q", "river"), ("sort", sort)],
            true,
        );
        n += check(
            x,
            &format!("searchPosts sort {sort}"),
            field(&have, "posts", "uri"),
            &want,
        );
    }
    let author = handle(0);
    let query = [
        ("q", "river"),
        ("sort", "latest"),
        ("author", author.as_str()),
    ];
    let have = get(x, Some(VIEWER), SEARCH_POSTS, &query, true);
    let want = m.posts_latest("river", |author, _, _| author == 0);
    n += check(x, "searchPosts author", field(&have, "posts", "uri"), &want);
    let times: Vec<u64> = m.posts.iter().map(|p| p.4).collect();
    // Datetimes to the millisecond, as the AppView passes them on.
    let (since, until) = (times[1] / 1_000 * 1_000, times[4] / 1_000 * 1_000);
    let iso = |us: u64| format!("{}Z", &sample::datetime(us)[..23]);
    let (since_iso, until_iso) = (iso(since), iso(until));
    let query = [
        ("q", "river"),
        ("since", since_iso.as_str()),
        ("until", until_iso.as_str()),
    ];
    let have = get(x, Some(VIEWER), SEARCH_POSTS, &query, true);
    let want = m.posts_latest("river", |_, _, time| time >= since && time < until);
    n += check(
        x,
        "searchPosts since/until",
        field(&have, "posts", "uri"),
        &want,
    );
    let have = get(x, Some(VIEWER), SEARCH_POSTS, &[("q", "obsolete")], true);
    assert_eq!(have["posts"], json!([]), "a deleted post");
    n
}

fn check_feeds_and_packs(x: &Xrpc<'_>, m: &Model) -> usize {
    let mut n = 0;
    for v2 in [false, true] {
        let have = get(x, Some(VIEWER), SEARCH_STARTER_PACKS, &[("q", "river")], v2);
        let want = Model::records(&m.starter_packs, "river");
        n += check(
            x,
            &format!("searchStarterPacks v2 {v2}"),
            field(&have, "starterPacks", "uri"),
            &want,
        );
        let have = get(x, Some(VIEWER), POPULAR_FEEDS, &[("query", "river")], v2);
        let want = Model::records(&m.feeds, "river");
        n += check(
            x,
            &format!("getPopularFeedGenerators query v2 {v2}"),
            field(&have, "feeds", "uri"),
            &want,
        );
    }
    let mut by_likes: Vec<(u64, String)> = m
        .feed_likes
        .iter()
        .map(|(uri, n)| (*n, uri.clone()))
        .collect();
    by_likes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let want: Vec<String> = by_likes.into_iter().map(|(_, uri)| uri).collect();
    let have = get(x, Some(VIEWER), POPULAR_FEEDS, &[], false);
    n += check(
        x,
        "getPopularFeedGenerators",
        field(&have, "feeds", "uri"),
        &want,
    );
    let have = get(x, Some(VIEWER), SUGGESTED_FEEDS, &[("limit", "2")], false);
    n += check(
        x,
        "getSuggestedFeeds",
        field(&have, "feeds", "uri"),
        &want[..2],
    );
    n
}

// The stock AppView's search and suggestion endpoints on Starling, against the test's own
// computation from its events by the documented ranking.
#[test]
fn the_stock_appview_searches_and_suggests_from_starling() {
    let seed = util::seed("the_stock_appview_searches_and_suggests_from_starling");
    let node = util::setup_appview();
    let (events, model) = scenario(seed);
    let pairs: Vec<(u32, &'static str)> = NSIDS.iter().map(|&nsid| (VIEWER, nsid)).collect();
    let (documents, tokens) = mint_keys_and_tokens(&node, seed, NAMES.len() as u32, pairs);
    let mut stack = start(&node, &[], documents, events, &[]);
    let x = Xrpc {
        addr: stack.appview_addr.clone(),
        appview: &stack.appview,
        tokens,
        n_requests: std::cell::Cell::new(0),
    };
    // The index commits within a second of ingest: wait for the last record to be found.
    let last_feed = model.feeds.last().unwrap().0.clone();
    util::poll_until(TIMEOUT, "the search index to hold the scenario", || {
        let have = get(
            &x,
            Some(VIEWER),
            POPULAR_FEEDS,
            &[("query", "riverside")],
            false,
        );
        match field(&have, "feeds", "uri") == json!([last_feed]) {
            true => Ok(()),
            false => Err(format!("{have}")),
        }
    });
    let mut n = check_actors(&x, &model);
    n += check_posts(&x, &model);
    n += check_feeds_and_packs(&x, &model);
    let have = get(&x, Some(VIEWER), SUGGESTIONS, &[], false);
    n += check(
        &x,
        "getSuggestions",
        field(&have, "actors", "did"),
        &model.suggestions(VIEWER),
    );
    let have = get(&x, None, TAGGED, &[], false);
    assert_eq!(have, json!({ "suggestions": [] }), "getTaggedSuggestions");
    assert!(n >= 40, "the answers listed {n} results");
    stack.starling.terminate();
    stack.starling.wait_exit(TIMEOUT);
    stack.appview.terminate();
    stack.appview.wait_exit(TIMEOUT);
}
