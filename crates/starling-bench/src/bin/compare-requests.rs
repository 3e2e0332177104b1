//! `compare-requests`: the request sets of the side-by-side benchmark, drawn from the Jetstream
//! file both dataplanes were loaded from.
//!
//! ```text
//! compare-requests --events FILE.jsonl.zst --out DIR [--seed 7] [--requests 2000]
//!                  [--limit 50] [--batch 25] [--top 500]
//! ```
//!
//! Reads the file once (each line through Starling's decoder; lines it drops are skipped, as
//! both dataplanes skip them) and keeps the final state: live follows, posts (with their CIDs)
//! and reposts. Then writes, in `DIR`, for each set `NAME.json` and `NAME.bin` (see
//! `starling_bench::requests`) and `NAME.expect`: one line per request, `FIELD KIND COUNT`,
//! how many elements the response's top-level field FIELD must hold (KIND `m` counts messages,
//! `p` the values of a packed repeated integer). The sets, `--requests` each:
//! - `timeline`: GetTimeline (`--limit`) for random viewers whose followed accounts and own
//!   posts and reposts (of live posts) number more than the limit, so a full page is due;
//! - `follows-following`: GetFollowsFollowing from a random viewer (who follows someone) to
//!   one target among the `--top` most followed (the AppView's getProfile asks one): one result;
//! - `author-feed`: GetAuthorFeed (`--limit`) for random authors with more items than that
//!   (at a small scale where there are none, any author with items): min(limit, items);
//! - `followers`: GetFollowers (`--limit`) for random followed accounts: min(limit, followers);
//! - `interaction-counts`: GetInteractionCounts for `--batch` random live posts;
//! - `counts-for-users`: GetCountsForUsers for `--batch` random actors;
//! - `actor-likes`, `list-members`, `search-actors`: GetActorLikes, GetListMembers and
//!   SearchActors (`--limit`).
//!
//! The last six sets come with each request's expected content in `NAME.content.jsonl` as well
//! (see `starling_bench::content`).
//!
//! Prints one `key: value` line per fact about the draw.

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use rand::SeedableRng;
use rand::seq::IndexedRandom;
use rand_chacha::ChaCha8Rng;
use starling_bench::cli::number;
use starling_bench::content::Content;
use starling_bench::requests::{Request, write_requests};
use starling_core::jetstream::{self, Body, Operation, Refs, nsid};
use starling_core::syntax::RecordUri;

type Res<T> = Result<T, Box<dyn Error>>;

const USAGE: &str = "usage: compare-requests --events FILE.jsonl.zst --out DIR [--seed N] \
                     [--requests N] [--limit N] [--batch N] [--top N]";

struct Args {
    events: PathBuf,
    out: PathBuf,
    seed: u64,
    n_requests: usize,
    limit: u32,
    batch: usize,
    top: usize,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        events: PathBuf::new(),
        out: PathBuf::new(),
        seed: 7,
        n_requests: 2_000,
        limit: 50,
        batch: 25,
        top: 500,
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let value = iter
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--events" => args.events = PathBuf::from(value),
            "--out" => args.out = PathBuf::from(value),
            "--seed" => args.seed = number(&flag, &value)?,
            "--requests" => args.n_requests = number(&flag, &value)?,
            "--limit" => args.limit = number(&flag, &value)?,
            "--batch" => args.batch = number(&flag, &value)?,
            "--top" => args.top = number(&flag, &value)?,
            _ => return Err(format!("unknown flag `{flag}`\n{USAGE}").into()),
        }
    }
    if args.events.as_os_str().is_empty() || args.out.as_os_str().is_empty() {
        return Err(USAGE.into());
    }
    if args.limit == 0 || args.limit > 100 || args.batch == 0 || args.n_requests == 0 {
        return Err("`--limit` must be 1..=100, `--batch` and `--requests` at least 1".into());
    }
    Ok(args)
}

fn main() -> std::process::ExitCode {
    match parse_args().and_then(|args| run(&args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("compare-requests: error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The final state of the file, as far as the request sets need it.
#[derive(Default)]
struct Network {
    /// Live follow records: (author, rkey) -> subject.
    follows: HashMap<(String, String), String>,
    /// Live posts: URI -> CID.
    posts: HashMap<String, String>,
    /// Live reposts: (author, rkey) -> the reposted post's URI.
    reposts: HashMap<(String, String), String>,
    /// Follows, posts, reposts, likes, lists and handles as the content-checked sets count
    /// them.
    content: Content,
}

impl Network {
    fn read(path: &PathBuf) -> Res<(Network, u64)> {
        let file =
            File::open(path).map_err(|err| format!("opening `{}`: {err}", path.display()))?;
        let reader: Box<dyn BufRead> = if path.extension().is_some_and(|ext| ext == "zst") {
            Box::new(BufReader::new(zstd::Decoder::new(file)?))
        } else {
            Box::new(BufReader::new(file))
        };
        let mut network = Network::default();
        let mut n_lines = 0u64;
        for line in reader.lines() {
            let line = line.map_err(|err| format!("reading `{}`: {err}", path.display()))?;
            n_lines += 1;
            if let Ok(event) = jetstream::decode_str(&line) {
                network.apply(&event);
            }
        }
        Ok((network, n_lines))
    }

    fn apply(&mut self, event: &jetstream::Event<'_>) {
        self.content.apply(event);
        let Body::Commit(commit) = &event.body else {
            return;
        };
        let did = event.did.to_string();
        let key = (did.clone(), commit.rkey.to_string());
        let live = commit.operation != Operation::Delete;
        match (&*commit.collection, commit.record.as_ref()) {
            (nsid::FOLLOW, Some(record)) if live => {
                if let Refs::Actor { subject } = &record.refs {
                    self.follows.insert(key, subject.to_string());
                }
            }
            (nsid::FOLLOW, _) => {
                self.follows.remove(&key);
            }
            (nsid::POST, Some(record)) if live => {
                let uri = format!("at://{did}/{}/{}", nsid::POST, commit.rkey);
                self.posts.insert(uri, record.cid.to_string());
            }
            (nsid::POST, _) => {
                self.posts
                    .remove(&format!("at://{did}/{}/{}", nsid::POST, commit.rkey));
            }
            (nsid::REPOST, Some(record)) if live => {
                if let Refs::Subject { subject, .. } = &record.refs
                    && subject.collection == nsid::POST
                {
                    self.reposts.insert(key, uri_of(subject));
                }
            }
            (nsid::REPOST, _) => {
                self.reposts.remove(&key);
            }
            _ => {}
        }
    }

    /// Feed items (posts, and reposts of live posts) per author.
    fn feed_items(&self) -> HashMap<&str, usize> {
        let mut items: HashMap<&str, usize> = HashMap::new();
        for uri in self.posts.keys() {
            if let Some(parsed) = RecordUri::parse(uri) {
                *items.entry(parsed.did).or_default() += 1;
            }
        }
        for ((author, _), subject) in &self.reposts {
            if self.posts.contains_key(subject) {
                *items.entry(author.as_str()).or_default() += 1;
            }
        }
        items
    }
}

fn uri_of(uri: &RecordUri<'_>) -> String {
    format!("at://{}/{}/{}", uri.did, uri.collection, uri.rkey)
}

/// A request set and each request's expected element count.
struct Set {
    requests: Vec<Request>,
    expect: String,
}

impl Set {
    fn new() -> Set {
        Set {
            requests: Vec::new(),
            expect: String::new(),
        }
    }

    fn push(&mut self, request: Request, field: u32, kind: char, count: usize) {
        self.requests.push(request);
        let _ = writeln!(self.expect, "{field} {kind} {count}");
    }

    fn write(&self, args: &Args, name: &str) -> Res<()> {
        write_requests(&args.out, name, &self.requests)?;
        std::fs::write(args.out.join(format!("{name}.expect")), &self.expect)?;
        println!("{name}: {} requests", self.requests.len());
        Ok(())
    }
}

/// Sorted, so that a seed gives the same draw whatever the hash order.
fn sorted<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut items: Vec<&str> = items.into_iter().collect();
    items.sort_unstable();
    items.dedup();
    items
}

fn run(args: &Args) -> Res<()> {
    let (network, n_lines) = Network::read(&args.events)?;
    std::fs::create_dir_all(&args.out)?;
    let (follows, posts, reposts) = (&network.follows, &network.posts, &network.reposts);
    println!("events: {n_lines}");
    println!(
        "live: {} follows, {} posts, {} reposts",
        follows.len(),
        posts.len(),
        reposts.len()
    );
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let limit = args.limit as usize;

    let mut following: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut followers: HashMap<&str, usize> = HashMap::new();
    for ((author, _), subject) in &network.follows {
        following.entry(author).or_default().push(subject);
        *followers.entry(subject).or_default() += 1;
    }
    let feed_items = network.feed_items();

    // Timelines: viewers with more than a page to read.
    let viewers = sorted(following.keys().copied());
    let full: Vec<&str> = viewers
        .iter()
        .copied()
        .filter(|viewer| {
            let followed: HashSet<&str> = following
                .get(viewer)
                .map(|subjects| subjects.iter().copied().collect())
                .unwrap_or_default();
            let items: usize = followed
                .iter()
                .chain(std::iter::once(viewer))
                .map(|author| feed_items.get(author).copied().unwrap_or(0))
                .sum();
            items > limit
        })
        .collect();
    println!(
        "viewers_with_full_pages: {} of {}",
        full.len(),
        viewers.len()
    );
    let mut set = Set::new();
    for _ in 0..args.n_requests {
        let viewer = full
            .choose(&mut rng)
            .ok_or("no viewer has a full timeline page")?;
        set.push(Request::actor_page(viewer, args.limit), 1, 'm', limit);
    }
    set.write(args, "timeline")?;

    // Known followers: one target among the most followed.
    let mut by_followers: Vec<(&str, usize)> = followers.iter().map(|(&d, &n)| (d, n)).collect();
    by_followers.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    by_followers.truncate(args.top);
    println!(
        "top_{}_followers: {}..{}",
        args.top,
        by_followers.last().map_or(0, |t| t.1),
        by_followers.first().map_or(0, |t| t.1)
    );
    let mut set = Set::new();
    for _ in 0..args.n_requests {
        let viewer = viewers.choose(&mut rng).ok_or("nobody follows anyone")?;
        let (target, _) = by_followers.choose(&mut rng).ok_or("nobody is followed")?;
        let request = Request::follows_following(viewer, &[target.to_string()]);
        set.push(request, 1, 'm', 1);
    }
    set.write(args, "follows-following")?;

    // Author feeds with more than a page; at a small scale, any with items.
    let mut authors = sorted(
        feed_items
            .iter()
            .filter(|&(_, &n)| n > limit)
            .map(|(&author, _)| author),
    );
    println!("authors_with_full_pages: {}", authors.len());
    if authors.is_empty() {
        authors = sorted(feed_items.keys().copied());
    }
    let mut set = Set::new();
    for _ in 0..args.n_requests {
        let author = authors.choose(&mut rng).ok_or("no author has posts")?;
        let expected = feed_items.get(author).copied().unwrap_or(0).min(limit);
        set.push(Request::actor_page(author, args.limit), 1, 'm', expected);
    }
    set.write(args, "author-feed")?;

    let content = &network.content;
    let mut facts =
        content.write_count_sets(&args.out, &mut rng, args.n_requests, args.limit, args.batch)?;
    facts.extend(content.write_sets(&args.out, &mut rng, args.n_requests, args.limit)?);
    facts.iter().for_each(|fact| println!("{fact}"));
    Ok(())
}
