//! The search index against a naive scan: random actors, posts, starter packs and feed
//! generators are put, replaced and deleted; after each commit, random queries are answered by
//! the index and by a scan of the model's documents with the documented rules, and must agree
//! (the same results in the same order; for posts sorted `top`, the same set, ordered by the
//! index's own BM25 scores, which the scan cannot recompute).

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;

use starling_search::{
    ActorDoc, ActorQuery, Hits, Page, PostDoc, PostFilter, PostQuery, PostSort, RecordDoc,
    RecordKind, SearchIndex, WordsQuery, tie_key,
};

const VOCABULARY: [&str; 12] = [
    "rust", "ferris", "crab", "ocean", "sky", "blue", "bird", "tree", "river", "stone", "ruby",
    "skate",
];
const LANGS: [&str; 3] = ["en", "pt", "ja"];

/// A seeded xorshift generator.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn word(&mut self) -> &'static str {
        VOCABULARY[self.below(VOCABULARY.len())]
    }

    fn words(&mut self, max: usize) -> String {
        let n = self.below(max + 1);
        (0..n).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty() && t.len() < 40)
        .map(str::to_lowercase)
        .collect()
}

#[derive(Default)]
struct Model {
    actors: BTreeMap<String, ActorDoc>,
    posts: BTreeMap<String, PostDoc>,
    records: BTreeMap<String, RecordDoc>,
}

impl Model {
    fn actors(&self, query: &str) -> Vec<(String, f64)> {
        let q = query.trim();
        let q = q.strip_prefix('@').unwrap_or(q).to_lowercase();
        let handle_ok = !q.is_empty()
            && q.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        let mut words = tokens(&q);
        words.dedup();
        let mut res = Vec::new();
        for actor in self.actors.values() {
            let handle = actor.handle.as_deref().unwrap_or("");
            let mut score = 0.0;
            let mut matched = false;
            if handle_ok && actor.handle.is_some() && handle == q {
                score += 8.0;
            }
            if handle_ok && actor.handle.is_some() && handle.starts_with(&q) {
                score += 4.0;
                matched = true;
            }
            let (name, description) = (tokens(&actor.display_name), tokens(&actor.description));
            let word_scores: Vec<f64> = words
                .iter()
                .map(|w| {
                    let name_score = if name.iter().any(|t| t.starts_with(w.as_str())) {
                        2.0
                    } else {
                        0.0
                    };
                    let desc_score = if description.contains(w) { 1.0 } else { 0.0 };
                    name_score + desc_score
                })
                .collect();
            if !words.is_empty() && word_scores.iter().all(|&s| s > 0.0) {
                matched = true;
                score += word_scores.iter().sum::<f64>();
            }
            if matched {
                res.push((actor.did.clone(), score));
            }
        }
        res.sort_by(|a, b| b.1.total_cmp(&a.1).then(tie_key(&a.0).cmp(&tie_key(&b.0))));
        res
    }

    fn records(&self, kind: RecordKind, query: &str) -> Vec<(String, f64)> {
        let mut words = tokens(query);
        words.dedup();
        if words.is_empty() {
            return Vec::new();
        }
        let mut res: Vec<(String, f64, i64)> = Vec::new();
        for record in self.records.values().filter(|r| r.kind == kind) {
            let (name, description) = (tokens(&record.name), tokens(&record.description));
            let scores: Vec<f64> = words
                .iter()
                .map(|w| {
                    let n = if name.iter().any(|t| t.starts_with(w.as_str())) {
                        2.0
                    } else {
                        0.0
                    };
                    n + if description.contains(w) { 1.0 } else { 0.0 }
                })
                .collect();
            if scores.iter().all(|&s| s > 0.0) {
                res.push((record.uri.clone(), scores.iter().sum(), record.sort_at_us));
            }
        }
        res.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then(b.2.cmp(&a.2))
                .then(tie_key(&a.0).cmp(&tie_key(&b.0)))
        });
        res.into_iter()
            .map(|(uri, score, _)| (uri, score))
            .collect()
    }

    /// Matching posts, newest first.
    fn posts(&self, query: &PostQuery, filter: &PostFilter) -> Vec<String> {
        let words = tokens(&query.text);
        let mut res: Vec<&PostDoc> = self
            .posts
            .values()
            .filter(|post| {
                let text = tokens(&post.text);
                words.iter().all(|w| text.contains(w))
                    && filter.author.as_ref().is_none_or(|a| *a == post.author)
                    && filter.lang.as_ref().is_none_or(|l| post.langs.contains(l))
                    && filter.since_us.is_none_or(|s| post.sort_at_us >= s)
                    && filter.until_us.is_none_or(|u| post.sort_at_us < u)
            })
            .collect();
        res.sort_by(|a, b| {
            b.sort_at_us
                .cmp(&a.sort_at_us)
                .then(tie_key(&a.uri).cmp(&tie_key(&b.uri)))
        });
        res.into_iter().map(|post| post.uri.clone()).collect()
    }
}

/// Every page of a search, by offsets, up to `limit` a page.
fn all_pages(limit: usize, mut search: impl FnMut(Page) -> Hits) -> Vec<(String, f64)> {
    let mut res = Vec::new();
    let mut offset = 0;
    loop {
        let hits = search(Page::new(offset, limit).unwrap());
        res.extend(hits.hits.into_iter().map(|hit| (hit.id, hit.score)));
        match hits.next_offset {
            Some(next) => offset = next,
            None => return res,
        }
    }
}

fn did(idx: usize) -> String {
    format!("did:plc:user{idx:020}")
}

fn step(rng: &mut Rng, model: &mut Model, index: &SearchIndex, time: &mut i64) {
    *time += 1_000_000;
    let user = rng.below(30);
    match rng.below(6) {
        0 | 1 => {
            let handle = format!("{}{}.test", rng.word(), rng.below(5));
            let actor = ActorDoc {
                did: did(user),
                handle: (rng.below(5) != 0).then_some(handle),
                display_name: rng.words(3),
                description: rng.words(5),
            };
            index.put_actor(&actor).unwrap();
            model.actors.remove(&actor.did);
            if actor.is_searchable() {
                model.actors.insert(actor.did.clone(), actor);
            }
        }
        2 | 3 => {
            let uri = format!("at://{}/app.bsky.feed.post/{}", did(user), rng.below(40));
            let langs = vec![LANGS[rng.below(3)].to_owned()];
            let post = PostDoc {
                uri: uri.clone(),
                author: did(user),
                text: format!("{} {}", rng.words(4), rng.word()),
                langs,
                sort_at_us: *time - rng.below(3) as i64 * 1_000_000,
            };
            index.put_post(&post).unwrap();
            model.posts.insert(uri, post);
        }
        4 => {
            let kind = [RecordKind::StarterPack, RecordKind::FeedGenerator][rng.below(2)];
            let uri = format!("at://{}/{kind:?}/{}", did(user), rng.below(10));
            let record = RecordDoc {
                kind,
                uri: uri.clone(),
                name: rng.words(3),
                description: rng.words(4),
                sort_at_us: *time,
            };
            index.put_record(&record).unwrap();
            model.records.insert(uri, record);
        }
        _ => {
            let victim = match rng.below(3) {
                0 => model
                    .actors
                    .keys()
                    .nth(rng.below(model.actors.len().max(1)))
                    .cloned(),
                1 => model
                    .posts
                    .keys()
                    .nth(rng.below(model.posts.len().max(1)))
                    .cloned(),
                _ => model
                    .records
                    .keys()
                    .nth(rng.below(model.records.len().max(1)))
                    .cloned(),
            };
            if let Some(id) = victim {
                index.delete(&id);
                model.actors.remove(&id);
                model.posts.remove(&id);
                model.records.remove(&id);
            }
        }
    }
}

/// Checks 20 random queries of each kind; returns the results found, and counts in
/// `n_bounded` the actor queries with results that a bound placed as narrow.
fn check(
    rng: &mut Rng,
    model: &Model,
    index: &SearchIndex,
    time: i64,
    n_bounded: &mut usize,
) -> usize {
    let mut n_found = 0;
    for _ in 0..20 {
        let word = rng.word();
        let prefix: String = word.chars().take(1 + rng.below(word.len())).collect();
        let query = match rng.below(4) {
            0 => format!("@{prefix}"),
            1 => format!("{} {}", rng.word(), prefix.to_uppercase()),
            2 => format!("{}{}.test", rng.word(), rng.below(5)),
            _ => prefix,
        };
        let want = model.actors(&query);
        let q = ActorQuery::parse(&query).unwrap();
        n_found += want.len();
        // The search finds the same actors whatever bound it was prepared with (the bound
        // reads some prefixes' terms in full, and the search then reads them from there), and
        // the bound a caller places it by is never below the matches.
        for max in [0, 1, 2, 4, 8, 16, 32, u64::MAX] {
            let search = index.prepare_actors(&q, max).unwrap();
            let have = all_pages(1 + rng.below(7), |page| search.run(page).unwrap());
            assert_eq!(have, want, "actors for {query:?}, prepared against {max}");
            if search.is_narrow() {
                let n = want.len() as u64;
                assert!(n <= max, "{query:?} matches {n} > {max}");
                *n_bounded += usize::from(n > 0 && max < u64::MAX);
            }
        }
        let have = all_pages(1 + rng.below(7), |page| {
            index.search_actors(&q, page).unwrap()
        });
        assert_eq!(have, want, "actors for {query:?}");

        let kind = [RecordKind::StarterPack, RecordKind::FeedGenerator][rng.below(2)];
        let query = format!("{} {}", rng.word(), &word[..2]);
        let q = WordsQuery::parse(&query).unwrap();
        let have = all_pages(3, |page| index.search_records(kind, &q, page).unwrap());
        assert_eq!(have, model.records(kind, &query), "{kind:?} for {query:?}");

        let mut text = rng.word().to_owned();
        let mut filter = PostFilter::default();
        match rng.below(4) {
            0 => filter.author = Some(did(rng.below(30))),
            1 => filter.lang = Some(LANGS[rng.below(3)].to_owned()),
            2 => {
                filter.since_us = Some(time - rng.below(60) as i64 * 1_000_000);
                filter.until_us = Some(time - rng.below(20) as i64 * 1_000_000);
            }
            _ => text = format!("{text} {}", rng.word()),
        }
        let query = PostQuery {
            text,
            ..PostQuery::default()
        };
        let want = model.posts(&query, &filter);
        let latest = all_pages(4, |page| {
            index
                .search_posts(&query, &filter, PostSort::Latest, page)
                .unwrap()
        });
        let latest: Vec<String> = latest.into_iter().map(|(uri, _)| uri).collect();
        assert_eq!(latest, want, "latest posts for {query:?} {filter:?}");
        let top = all_pages(5, |page| {
            index
                .search_posts(&query, &filter, PostSort::Top, page)
                .unwrap()
        });
        assert!(
            top.windows(2).all(|pair| pair[0].1 >= pair[1].1),
            "top posts are by score: {top:?}"
        );
        let mut top_set: Vec<String> = top.into_iter().map(|(uri, _)| uri).collect();
        let mut want_set = want.clone();
        top_set.sort();
        want_set.sort();
        assert_eq!(top_set, want_set, "top posts for {query:?} {filter:?}");
        n_found += want.len();
    }
    n_found
}

// Checks the index against the naive scan over random puts and deletes, reopening the index
// from its directory halfway (what was committed is still there, with its cursor).
#[test]
fn search_agrees_with_a_naive_scan() {
    let seed: u64 = std::env::var("STARLING_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_5ea7c4);
    eprintln!("seed {seed}");
    let dir = tempfile::tempdir().unwrap();
    let (mut index, covered) = SearchIndex::open(dir.path()).unwrap();
    assert_eq!(covered, None);
    let mut rng = Rng(seed | 1);
    let mut model = Model::default();
    let mut time = 1_700_000_000_000_000;
    let mut n_found = 0;
    let mut n_bounded = 0;
    for round in 0..12 {
        for _ in 0..40 {
            step(&mut rng, &mut model, &index, &mut time);
        }
        index.commit(Some(round)).unwrap();
        n_found += check(&mut rng, &model, &index, time, &mut n_bounded);
        if round == 6 {
            drop(index);
            let (reopened, covered) = SearchIndex::open(dir.path()).unwrap();
            assert_eq!(covered, Some(6));
            index = reopened;
        }
    }
    assert!(n_found > 200, "the queries found things: {n_found}");
    assert!(
        n_bounded > 10,
        "few searches with results were bounded: {n_bounded}"
    );
    // The same actors in an index of one commit, with no deleted documents to loosen the
    // bound: one below the matches is never enough.
    let fresh_dir = tempfile::tempdir().unwrap();
    let (fresh, _) = SearchIndex::open(fresh_dir.path()).unwrap();
    for actor in model.actors.values() {
        fresh.put_actor(actor).unwrap();
    }
    fresh.commit(Some(0)).unwrap();
    assert_tight_bounds(&model, &fresh);
    assert!(!model.actors.is_empty() && !model.posts.is_empty() && !model.records.is_empty());
}

/// Every word and prefix of a word, as a query, matches more actors than one below its
/// matches, by `index`'s bound.
fn assert_tight_bounds(model: &Model, index: &SearchIndex) {
    for word in VOCABULARY {
        for len in 1..=word.len() {
            let query = &word[..len];
            let n = model.actors(query).len() as u64;
            let q = ActorQuery::parse(query).unwrap();
            if n > 0 {
                let narrow = index.prepare_actors(&q, n - 1).unwrap().is_narrow();
                assert!(!narrow, "{query:?} matches {n}, bounded by {}", n - 1);
            }
        }
    }
}
