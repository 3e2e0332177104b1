//! The search index at bulk scale: generates the events of `starling gen --actors A --follows F
//! --posts P --seed S` in process (the same bytes), decodes them, indexes every actor and post
//! as `serve` does (profiles, identity handles, posts, deletes), commits, and reports the build
//! time and the index size per post. Then THREADS threads send SearchActorsTypeahead-shaped
//! queries (a prefix of a random actor's handle, 10 results) and SearchPosts-shaped queries
//! (one or two random words, 25 results, `latest` and `top` in turn) for SECONDS each, and
//! report requests/s and latency percentiles. Every answer is checked: each actor hit matches
//! the query by the documented rule and scores come in order (and a full handle finds its actor
//! first); each post hit holds every query word, `latest` comes newest first and `top` by
//! score.
//!
//! usage: search-bench --dir DIR [--actors 100000] [--follows 3000000] [--posts 1000000]
//!                     [--seed 7] [--threads 2] [--seconds 20]

// A benchmark binary: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use starling_core::jetstream::{self, Body, Operation, nsid};
use starling_gen::{GenParams, Generator};
use starling_search::{
    ActorDoc, ActorQuery, Page, PostDoc, PostFilter, PostQuery, PostSort, SearchIndex,
};

struct Args {
    dir: PathBuf,
    actors: u32,
    follows: u64,
    posts: u64,
    seed: u64,
    threads: usize,
    seconds: u64,
}

fn args() -> Args {
    let mut res = Args {
        dir: PathBuf::new(),
        actors: 100_000,
        follows: 3_000_000,
        posts: 1_000_000,
        seed: 7,
        threads: 2,
        seconds: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => res.dir = PathBuf::from(value),
            "--actors" => res.actors = value.parse().unwrap(),
            "--follows" => res.follows = value.parse().unwrap(),
            "--posts" => res.posts = value.parse().unwrap(),
            "--seed" => res.seed = value.parse().unwrap(),
            "--threads" => res.threads = value.parse().unwrap(),
            "--seconds" => res.seconds = value.parse().unwrap(),
            _ => panic!("unknown flag {flag}"),
        }
    }
    assert!(!res.dir.as_os_str().is_empty(), "--dir is required");
    res
}

/// What the checks need: every actor's document and every live post's words and time.
#[derive(Default)]
struct Corpus {
    actors: HashMap<String, ActorDoc>,
    handles: Vec<String>,
    posts: HashMap<String, (Box<str>, i64)>,
}

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn build(args: &Args, index: &SearchIndex) -> Corpus {
    let params = GenParams::new(args.actors, args.follows, args.posts, args.seed);
    let mut generator = Generator::new(&params).unwrap();
    let mut line = String::new();
    let mut corpus = Corpus::default();
    let mut profiles: HashMap<String, String> = HashMap::new();
    let mut handles: HashMap<String, String> = HashMap::new();
    loop {
        line.clear();
        if !generator.next_event(&mut line) {
            break;
        }
        let Ok(event) = jetstream::decode(line.as_bytes()) else {
            continue;
        };
        let did: &str = &event.did;
        match &event.body {
            Body::Identity {
                handle: Some(handle),
                ..
            } => {
                handles.insert(did.to_owned(), handle.to_string());
            }
            Body::Commit(commit) if commit.collection == nsid::PROFILE => {
                if let Some(record) = &commit.record {
                    profiles.insert(did.to_owned(), record.json.to_owned());
                }
            }
            Body::Commit(commit) if commit.collection == nsid::POST => {
                let uri = format!("at://{did}/{}/{}", nsid::POST, commit.rkey);
                match (&commit.record, commit.operation) {
                    (Some(record), Operation::Create | Operation::Update) => {
                        let time = record.created_at_us.unwrap_or(event.time_us as i64);
                        let doc = PostDoc::new(&uri, did, record.json, time);
                        corpus
                            .posts
                            .insert(uri, (doc.text.to_lowercase().into_boxed_str(), time));
                        index.put_post(&doc).unwrap();
                    }
                    _ => {
                        index.delete(&uri);
                        corpus.posts.remove(&uri);
                    }
                }
            }
            _ => {}
        }
    }
    for (did, handle) in &handles {
        let doc = ActorDoc::new(did, Some(handle), profiles.get(did).map(String::as_str));
        index.put_actor(&doc).unwrap();
        corpus.handles.push(doc.handle.clone().unwrap());
        corpus.actors.insert(did.clone(), doc);
    }
    index.commit(Some(0)).unwrap();
    corpus
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum()
}

/// A seeded xorshift generator per thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

const POST_WORDS: &[&str] = &[
    "coffee", "rust", "garden", "weather", "moon", "ocean", "bread", "recipe", "sketch", "train",
    "question", "timeline", "finally", "music", "project",
];

fn typeahead(index: &SearchIndex, corpus: &Corpus, rng: &mut Rng) {
    let handle = &corpus.handles[rng.below(corpus.handles.len())];
    let full = rng.below(4) == 0;
    let prefix = if full {
        handle.clone()
    } else {
        handle
            .chars()
            .take(5 + rng.below(handle.len() - 4))
            .collect()
    };
    let query = ActorQuery::parse(&prefix).unwrap();
    let hits = index
        .search_actors(&query, Page::new(0, 10).unwrap())
        .unwrap();
    assert!(!hits.hits.is_empty(), "typeahead {prefix}: no hits");
    let q_words = words(&prefix);
    for hit in &hits.hits {
        let actor = &corpus.actors[&hit.id];
        let by_handle = actor.handle.as_deref().unwrap().starts_with(&prefix);
        let name = words(&actor.display_name);
        let description = words(&actor.description);
        let by_words = q_words
            .iter()
            .all(|w| name.iter().any(|n| n.starts_with(w.as_str())) || description.contains(w));
        assert!(
            by_handle || by_words,
            "typeahead {prefix}: {} does not match",
            hit.id
        );
    }
    assert!(hits.hits.windows(2).all(|w| w[0].score >= w[1].score));
    if full {
        assert_eq!(
            corpus.actors[&hits.hits[0].id].handle.as_deref(),
            Some(handle.as_str())
        );
    }
}

fn search_posts(index: &SearchIndex, corpus: &Corpus, rng: &mut Rng, sort: PostSort) {
    let n_words = 1 + rng.below(2);
    let text: Vec<&str> = (0..n_words)
        .map(|_| POST_WORDS[rng.below(POST_WORDS.len())])
        .collect();
    let query = PostQuery {
        text: text.join(" "),
        ..PostQuery::default()
    };
    let hits = index
        .search_posts(
            &query,
            &PostFilter::default(),
            sort,
            Page::new(0, 25).unwrap(),
        )
        .unwrap();
    assert!(!hits.hits.is_empty(), "posts {text:?}: no hits");
    let mut times = Vec::new();
    for hit in &hits.hits {
        let (post_text, time) = &corpus.posts[&hit.id];
        let post_words = words(post_text);
        assert!(
            text.iter().all(|w| post_words.iter().any(|p| p == w)),
            "{} lacks {text:?}",
            hit.id
        );
        times.push(*time);
    }
    match sort {
        PostSort::Latest => assert!(times.windows(2).all(|w| w[0] >= w[1]), "latest order"),
        PostSort::Top => assert!(hits.hits.windows(2).all(|w| w[0].score >= w[1].score)),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn run(name: &str, args: &Args, index: &Arc<SearchIndex>, corpus: &Arc<Corpus>, kind: usize) {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let handles: Vec<_> = (0..args.threads)
        .map(|thread| {
            let (index, corpus) = (index.clone(), corpus.clone());
            let seed = args.seed ^ ((thread as u64 + 1) * 0x9e37_79b9);
            std::thread::spawn(move || {
                let mut rng = Rng(seed | 1);
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    match kind {
                        0 => typeahead(&index, &corpus, &mut rng),
                        _ => {
                            let sort = if latencies.len() % 2 == 0 {
                                PostSort::Latest
                            } else {
                                PostSort::Top
                            };
                            search_posts(&index, &corpus, &mut rng, sort);
                        }
                    }
                    latencies.push(started.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    latencies.sort();
    println!(
        "{name}: {} requests in {} s on {} threads, every answer checked: {:.0} req/s, p50 {:.2?}, p99 {:.2?}, p99.9 {:.2?}, max {:.2?}",
        latencies.len(),
        args.seconds,
        args.threads,
        latencies.len() as f64 / args.seconds as f64,
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        percentile(&latencies, 0.999),
        latencies.last().unwrap(),
    );
}

fn main() {
    let args = args();
    let _ = std::fs::remove_dir_all(&args.dir);
    let (index, _) = SearchIndex::open(&args.dir).unwrap();
    let started = Instant::now();
    let corpus = build(&args, &index);
    let built = started.elapsed();
    let bytes = dir_bytes(&args.dir);
    println!(
        "build: {} actors, {} live posts indexed in {:.1?} (generation and decoding included); {} documents",
        corpus.actors.len(),
        corpus.posts.len(),
        built,
        index.n_docs()
    );
    println!(
        "index: {:.1} MiB, {:.0} bytes per live post (actors included)",
        bytes as f64 / (1024.0 * 1024.0),
        bytes as f64 / corpus.posts.len() as f64
    );
    let (index, corpus) = (Arc::new(index), Arc::new(corpus));
    run("SearchActorsTypeahead", &args, &index, &corpus, 0);
    run("SearchPosts", &args, &index, &corpus, 1);
    let _ = std::fs::remove_dir_all(&args.dir);
}
