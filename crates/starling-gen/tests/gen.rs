//! The generated stream, checked from the outside: every line decodes with the Jetstream
//! decoder, every reference names a live record written earlier with the CID it was written
//! with, revisions and times increase, the summary equals a recount of the file, the same seed
//! gives the same bytes, and bad parameters are errors that name the flag.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;

use serde_json::Value;
use starling_core::syntax;
use starling_gen::{
    ACTORS_PER_LIST, CID_HEADER, CID_STRING_LEN, GenParams, Generator, LIST_MEMBERS_MAX,
    ParamsError, WriteError, decode_base32_lower, summary_path, write_file,
};

/// Generates in memory: the text and the generator's summary as JSON.
fn generate(params: &GenParams) -> (String, Value) {
    println!("params: {params:?}");
    let mut generator = Generator::new(params).unwrap();
    let mut text = String::new();
    while generator.next_event(&mut text) {}
    let summary = serde_json::to_value(generator.summary()).unwrap();
    (text, summary)
}

/// What a recount of a file finds.
#[derive(Default, Debug)]
struct Recount {
    events: u64,
    identity_events: u64,
    /// (collection, operation) → events.
    commits: BTreeMap<String, BTreeMap<String, u64>>,
    /// Live records by collection.
    live_by_collection: BTreeMap<String, u64>,
    /// Likes received, by the liked post's author DID.
    likes_by_author: HashMap<String, u64>,
    /// Posts written, by author DID.
    posts_by_author: HashMap<String, u64>,
    /// Follows written, by subject DID.
    followers: HashMap<String, u64>,
    replies: u64,
    quotes: u64,
    /// Live items by list URI (every list, even when it has none left).
    members_by_list: BTreeMap<String, u64>,
    /// The list of each live list item, by the item's URI.
    list_of_item: HashMap<String, String>,
}

/// Checks that `cid` is a base32-lower CIDv1 of a dag-cbor record with a sha2-256 digest.
#[track_caller]
fn check_cid(cid: &str, line: &str) {
    assert_eq!(cid.len(), CID_STRING_LEN, "{line}");
    let bytes = decode_base32_lower(cid).unwrap_or_else(|| panic!("`{cid}` is not base32"));
    assert_eq!(bytes.len(), 36, "{cid}");
    assert_eq!(bytes[..4], CID_HEADER, "{cid}");
}

/// Checks that a strong reference names a live record with its CID.
#[track_caller]
fn check_ref(strong_ref: &Value, live: &HashMap<String, String>, line: &str) -> String {
    let uri = strong_ref["uri"].as_str().unwrap();
    let cid = strong_ref["cid"].as_str().unwrap();
    check_cid(cid, line);
    match live.get(uri) {
        Some(written) => assert_eq!(written, cid, "CID mismatch for {uri}: {line}"),
        None => panic!("reference to a record not live: {uri}: {line}"),
    }
    uri.to_owned()
}

fn author_of(uri: &str) -> String {
    uri.strip_prefix("at://")
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Decodes every line twice (the Jetstream decoder, and `serde_json` for the checks here) and
/// checks each event against a model of the records written so far.
fn recount_file(text: &str) -> Recount {
    let mut recount = Recount::default();
    let mut live: HashMap<String, String> = HashMap::new();
    let mut ever: HashSet<String> = HashSet::new();
    let mut revs: HashMap<String, String> = HashMap::new();
    let mut pairs: HashSet<(String, String, String)> = HashSet::new();
    let mut last_time_us = 0u64;
    for line in text.lines() {
        recount.events += 1;
        if let Err(err) = starling_core::jetstream::decode(line.as_bytes()) {
            panic!("does not decode: {err}: {line}");
        }
        let event: Value = serde_json::from_str(line).unwrap();
        let did = event["did"].as_str().unwrap().to_owned();
        let time_us = event["time_us"].as_u64().unwrap();
        assert!(time_us > last_time_us, "time_us does not increase: {line}");
        last_time_us = time_us;
        match event["kind"].as_str().unwrap() {
            "identity" => {
                recount.identity_events += 1;
                let handle = event["identity"]["handle"].as_str().unwrap();
                assert!(syntax::is_valid_handle(handle), "{line}");
                assert!(handle.ends_with(".gen.test"), "{line}");
                continue;
            }
            "commit" => {}
            other => panic!("unexpected kind {other}: {line}"),
        }
        let commit = &event["commit"];
        let rev = commit["rev"].as_str().unwrap().to_owned();
        if let Some(previous) = revs.get(&did) {
            assert!(&rev > previous, "rev does not increase for {did}: {line}");
        }
        revs.insert(did.clone(), rev);
        let collection = commit["collection"].as_str().unwrap();
        let operation = commit["operation"].as_str().unwrap();
        let rkey = commit["rkey"].as_str().unwrap();
        let uri = format!("at://{did}/{collection}/{rkey}");
        *recount
            .commits
            .entry(collection.to_owned())
            .or_default()
            .entry(operation.to_owned())
            .or_default() += 1;
        match operation {
            "delete" => {
                assert!(
                    live.remove(&uri).is_some(),
                    "delete of a dead record: {line}"
                );
                if let Some(list) = recount.list_of_item.remove(&uri) {
                    *recount.members_by_list.get_mut(&list).unwrap() -= 1;
                }
                *recount
                    .live_by_collection
                    .get_mut(collection)
                    .unwrap_or_else(|| panic!("{line}")) -= 1;
                continue;
            }
            "create" => {
                assert!(ever.insert(uri.clone()), "record created twice: {line}");
                *recount
                    .live_by_collection
                    .entry(collection.to_owned())
                    .or_default() += 1;
            }
            "update" => assert!(live.contains_key(&uri), "update of a dead record: {line}"),
            other => panic!("unexpected operation {other}: {line}"),
        }
        let cid = commit["cid"].as_str().unwrap();
        check_cid(cid, line);
        let record = &commit["record"];
        assert_eq!(record["$type"].as_str(), Some(collection), "{line}");
        if let Some(created_at) = record["createdAt"].as_str() {
            assert!(syntax::is_valid_datetime(created_at), "{line}");
        } else {
            panic!("no createdAt: {line}");
        }
        let pair_made = check_record(&mut recount, &uri, record, &live, line);
        if let Some(pair) = pair_made {
            assert!(
                pairs.insert(pair),
                "liked, reposted, followed, blocked or listed twice: {line}"
            );
        }
        live.insert(uri, cid.to_owned());
    }
    recount
}

/// Checks one record created or updated at `uri` against the records live before it, and
/// counts it; returns the (collection, author or list, subject) pair it makes, which must be
/// new, for likes, reposts, follows, blocks and list items.
fn check_record(
    recount: &mut Recount,
    uri: &str,
    record: &Value,
    live: &HashMap<String, String>,
    line: &str,
) -> Option<(String, String, String)> {
    let (did, collection, rkey) = parts_of(uri);
    match collection {
        "app.bsky.actor.profile" => {
            assert_eq!(rkey, "self");
            let name = record["displayName"].as_str().unwrap();
            let description = record["description"].as_str().unwrap();
            assert!(!name.is_empty() && name.chars().count() <= 64, "{line}");
            assert!(description.chars().count() <= 256, "{line}");
        }
        "app.bsky.feed.post" => {
            assert!(syntax::is_valid_tid(rkey), "{line}");
            let text = record["text"].as_str().unwrap();
            assert!(!text.is_empty() && text.chars().count() <= 300, "{line}");
            if !record["reply"].is_null() {
                check_ref(&record["reply"]["root"], live, line);
                check_ref(&record["reply"]["parent"], live, line);
                recount.replies += 1;
            }
            if !record["embed"].is_null() {
                assert_eq!(record["embed"]["$type"], "app.bsky.embed.record");
                check_ref(&record["embed"]["record"], live, line);
                recount.quotes += 1;
            }
            *recount.posts_by_author.entry(did.to_owned()).or_default() += 1;
        }
        "app.bsky.feed.like" | "app.bsky.feed.repost" => {
            let subject = check_ref(&record["subject"], live, line);
            if collection == "app.bsky.feed.like" {
                *recount
                    .likes_by_author
                    .entry(author_of(&subject))
                    .or_default() += 1;
            }
            return Some((collection.to_owned(), did.to_owned(), subject));
        }
        "app.bsky.graph.follow" | "app.bsky.graph.block" => {
            let subject = record["subject"].as_str().unwrap();
            assert!(syntax::is_valid_did(subject), "{line}");
            assert_ne!(subject, did, "{line}");
            if collection == "app.bsky.graph.follow" {
                *recount.followers.entry(subject.to_owned()).or_default() += 1;
            }
            return Some((collection.to_owned(), did.to_owned(), subject.to_owned()));
        }
        "app.bsky.graph.list" => {
            let name = record["name"].as_str().unwrap();
            assert!(!name.is_empty() && name.chars().count() <= 64, "{line}");
            let purpose = record["purpose"].as_str().unwrap();
            assert!(
                [
                    "app.bsky.graph.defs#curatelist",
                    "app.bsky.graph.defs#modlist"
                ]
                .contains(&purpose),
                "{line}"
            );
            recount.members_by_list.insert(uri.to_owned(), 0);
        }
        "app.bsky.graph.listitem" => {
            let list = record["list"].as_str().unwrap();
            let subject = record["subject"].as_str().unwrap();
            assert!(live.contains_key(list), "item of a list not live: {line}");
            assert_eq!(author_of(list), did, "item of another's list: {line}");
            assert!(syntax::is_valid_did(subject), "{line}");
            assert_ne!(subject, did, "{line}");
            *recount.members_by_list.get_mut(list).unwrap() += 1;
            recount.list_of_item.insert(uri.to_owned(), list.to_owned());
            return Some((collection.to_owned(), list.to_owned(), subject.to_owned()));
        }
        other => panic!("unexpected collection {other}: {line}"),
    }
    None
}

/// The DID, collection and rkey of an `at://` URI.
fn parts_of(uri: &str) -> (&str, &str, &str) {
    let mut parts = uri.strip_prefix("at://").unwrap().splitn(3, '/');
    (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    )
}

/// Checks a summary against a recount of its file.
#[track_caller]
fn check_summary(summary: &Value, recount: &Recount, text: &str) {
    assert_eq!(summary["events"], recount.events);
    assert_eq!(summary["bytes"], text.len() as u64);
    assert_eq!(summary["identity_events"], recount.identity_events);
    assert_eq!(summary["identity_events"], summary["actors"]);
    let commits: BTreeMap<String, BTreeMap<String, u64>> =
        serde_json::from_value(summary["commits"].clone()).unwrap();
    assert_eq!(commits, recount.commits);
    let live: BTreeMap<String, u64> = serde_json::from_value(summary["live"].clone()).unwrap();
    let recounted: BTreeMap<String, u64> = live
        .keys()
        .map(|collection| {
            let count = recount.live_by_collection.get(collection).copied();
            (collection.clone(), count.unwrap_or(0))
        })
        .collect();
    assert_eq!(live, recounted);
    assert_eq!(summary["activity"]["replies"], recount.replies);
    assert_eq!(summary["activity"]["quotes"], recount.quotes);
}

// Checks determinism: the same parameters give byte-identical streams, and another seed a
// different one (so the seed is used throughout, not only by the graph).
#[test]
fn same_seed_same_bytes_other_seed_differs() {
    let params = GenParams::new(300, 3_000, 1_500, 5);
    let (first, _) = generate(&params);
    let (second, _) = generate(&params);
    let (other, _) = generate(&GenParams { seed: 6, ..params });
    assert!(first.len() > 100_000, "{} bytes", first.len());
    assert!(first == second, "same seed, different bytes");
    assert!(first != other, "different seeds, same bytes");
}

// Checks every event of a small network against the model in `recount_file` (decodes, live
// references with matching CIDs, increasing revisions and times, no repeated likes, follows or
// blocks), then the generator's own summary against the recount.
#[test]
fn every_event_decodes_and_references_are_live() {
    let params = GenParams::new(500, 5_000, 3_000, 11);
    let (text, summary) = generate(&params);
    let recount = recount_file(&text);
    println!("{recount:?}");
    assert_eq!(summary["activity_skipped"], 0);
    assert!(recount.events > 30_000);
    assert!(recount.replies > 1_000 && recount.quotes > 100);
    for (collection, ops) in [
        ("app.bsky.feed.post", &["create", "delete"][..]),
        ("app.bsky.feed.like", &["create", "delete"]),
        ("app.bsky.feed.repost", &["create", "delete"]),
        ("app.bsky.graph.follow", &["create", "delete"]),
        ("app.bsky.graph.block", &["create"]),
        ("app.bsky.actor.profile", &["create", "update"]),
        ("app.bsky.graph.list", &["create"]),
        ("app.bsky.graph.listitem", &["create", "delete"]),
    ] {
        for op in ops {
            let count = recount.commits[collection].get(*op).copied().unwrap_or(0);
            assert!(count > 0, "no {collection} {op}");
        }
    }
    check_summary(&summary, &recount, &text);
}

// Checks the mix and the skews at a size where they show: the written counts equal the plan
// (nothing skipped) and have the documented proportions; the most followed actors post and
// receive likes far above their share of actors.
#[test]
fn mix_and_skews_are_as_documented() {
    let params = GenParams::new(1_000, 15_000, 4_000, 3);
    let (text, summary) = generate(&params);
    let plan = serde_json::to_value(params.plan()).unwrap();
    assert_eq!(summary["activity"], plan);
    assert_eq!(summary["activity_skipped"], 0);
    let activity: u64 = plan
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let share = |key: &str| plan[key].as_u64().unwrap() as f64 / activity as f64;
    let posts = share("posts") + share("replies") + share("quotes");
    println!(
        "likes {:.3} posts {posts:.3} reposts {:.3} follows {:.3}",
        share("likes"),
        share("reposts"),
        share("follows") + share("unfollows")
    );
    assert!((0.66..0.68).contains(&share("likes")));
    assert!((0.11..0.13).contains(&posts));
    assert!((0.09..0.11).contains(&share("reposts")));
    assert!((0.055..0.065).contains(&(share("follows") + share("unfollows"))));

    let recount = recount_file(&text);
    let mut by_followers: Vec<(&String, &u64)> = recount.followers.iter().collect();
    by_followers.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let top: Vec<&String> = by_followers.iter().take(10).map(|(did, _)| *did).collect();
    let top_posts: u64 = top
        .iter()
        .filter_map(|did| recount.posts_by_author.get(*did))
        .sum();
    let top_likes: u64 = top
        .iter()
        .filter_map(|did| recount.likes_by_author.get(*did))
        .sum();
    let all_posts: u64 = recount.posts_by_author.values().sum();
    let all_likes: u64 = recount.likes_by_author.values().sum();
    println!("top 1% by followers: {top_posts}/{all_posts} posts, {top_likes}/{all_likes} likes");
    // 10 actors are 1% of the network: they write over three times their share of posts, and
    // receive over five times their share of likes.
    assert!(
        top_posts * 100 > all_posts * 3,
        "posts are not skewed to followed actors"
    );
    assert!(
        top_likes * 20 > all_likes,
        "likes are not skewed to followed actors"
    );
    let mut posts_per_author: Vec<u64> = recount.posts_by_author.values().copied().collect();
    posts_per_author.sort_unstable();
    let median = posts_per_author[posts_per_author.len() / 2];
    let max = *posts_per_author.last().unwrap();
    assert!(
        max > 10 * median,
        "posts per author: max {max}, median {median}"
    );
}

// Checks the lists phase on a network with 200 lists: one list per ten actors, sizes as
// documented (half of the lists hold 1 to 3 members, a few over 100, none over the cap), some
// items deleted, and the generator's counts of lists and items equal to a recount. The seed is
// fixed, so the bounds hold or fail the same on every run.
#[test]
fn lists_have_the_documented_sizes() {
    let params = GenParams::new(2_000, 20_000, 1_000, 3);
    let (text, summary) = generate(&params);
    let recount = recount_file(&text);
    check_summary(&summary, &recount, &text);
    let n_lists = (params.n_actors / ACTORS_PER_LIST) as usize;
    assert_eq!(recount.members_by_list.len(), n_lists);
    assert_eq!(summary["live"]["app.bsky.graph.list"], n_lists as u64);
    let live_items: u64 = recount.members_by_list.values().sum();
    assert_eq!(summary["live"]["app.bsky.graph.listitem"], live_items);
    let deletes = &recount.commits["app.bsky.graph.listitem"]["delete"];
    let mut sizes: Vec<u64> = recount.members_by_list.values().copied().collect();
    sizes.sort_unstable();
    let median = sizes[sizes.len() / 2];
    let max = *sizes.last().unwrap();
    println!(
        "lists {n_lists}, live items {live_items}, deletes {deletes}, median {median}, max {max}"
    );
    assert!(*deletes > 0);
    assert!(median <= 4, "median list size {median}");
    assert!(
        sizes.iter().filter(|&&size| size > 100).count() >= 2,
        "{sizes:?}"
    );
    assert!(max <= LIST_MEMBERS_MAX.min(u64::from(params.n_actors) - 1));
}

// Checks the file path end to end: `write_file` writes the same bytes as the in-memory
// generator (decompressed), a summary that equals a recount of the file, no temporary file
// left behind, and byte-identical compressed files from two runs.
#[test]
fn file_and_summary_match_a_recount() {
    let dir = tempfile::tempdir().unwrap();
    let params = GenParams::new(200, 2_000, 800, 9);
    let out = dir.path().join("net.jsonl.zst");
    let mut progress_calls = 0;
    let report = write_file(&params, &out, &mut |_| progress_calls += 1).unwrap();
    assert!(progress_calls > 0);
    assert_eq!(report.summary_path, dir.path().join("net.summary.json"));
    let mut text = String::new();
    zstd::stream::read::Decoder::new(std::fs::File::open(&out).unwrap())
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let (expected, _) = generate(&params);
    assert!(
        text == expected,
        "the file differs from the generator's stream"
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(&report.summary_path).unwrap()).unwrap();
    check_summary(&summary, &recount_file(&text), &text);
    assert_eq!(
        summary["compressed_bytes"],
        std::fs::metadata(&out).unwrap().len()
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let again = dir.path().join("again.jsonl.zst");
    write_file(&params, &again, &mut |_| {}).unwrap();
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&again).unwrap());

    // A `.jsonl` name gives the same lines uncompressed.
    let plain = dir.path().join("plain.jsonl");
    write_file(&params, &plain, &mut |_| {}).unwrap();
    assert!(std::fs::read_to_string(&plain).unwrap() == expected);
}

// Checks the edges of the parameter space: a two-actor network with no follows still writes a
// stream that decodes (likes and unfollows it cannot make are skipped, not looped on), and no
// posts means actors, follows and lists only.
#[test]
fn tiny_networks_finish_and_decode() {
    let (text, summary) = generate(&GenParams::new(2, 0, 50, 1));
    let recount = recount_file(&text);
    check_summary(&summary, &recount, &text);
    assert_eq!(summary["graph_follows"], 0);
    assert!(recount.commits["app.bsky.feed.post"]["create"] == 50);

    let (text, summary) = generate(&GenParams::new(100, 1_000, 0, 1));
    let recount = recount_file(&text);
    check_summary(&summary, &recount, &text);
    // Actors, follows, then the lists phase: 10 lists, their items and item deletes.
    let list_events: u64 = ["app.bsky.graph.list", "app.bsky.graph.listitem"]
        .iter()
        .flat_map(|collection| recount.commits[*collection].values())
        .sum();
    assert_eq!(recount.commits["app.bsky.graph.list"]["create"], 10);
    assert_eq!(recount.events, 200 + 1_000 + list_events);
    assert_eq!(summary["live"]["app.bsky.graph.follow"], 1_000);
}

// Checks that each bad parameter is an error naming the flag and value, and that bad output
// paths are errors naming the path, before anything is written.
#[test]
fn bad_parameters_name_the_flag() {
    let err = GenParams::new(0, 0, 10, 1).validate().unwrap_err();
    assert_eq!(err, ParamsError::TooFewActors(0));
    assert!(err.to_string().contains("`--actors 0`"), "{err}");

    // 10 actors may follow at most 1 each (an eighth of the network, at least 1).
    let err = GenParams::new(10, 11, 10, 1).validate().unwrap_err();
    assert!(err.to_string().contains("`--follows 11`"), "{err}");
    assert!(err.to_string().contains("at most 10"), "{err}");
    assert!(GenParams::new(10, 10, 10, 1).validate().is_ok());
    let err = GenParams::new(1_000, 1_000 * 999, 10, 1)
        .validate()
        .unwrap_err();
    assert!(matches!(err, ParamsError::TooManyFollows { .. }), "{err}");

    let params = GenParams {
        n_likes: Some(5),
        ..GenParams::new(10, 0, 0, 1)
    };
    let err = params.validate().unwrap_err();
    assert!(err.to_string().contains("`--likes 5`"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing").join("net.jsonl.zst");
    let err = write_file(&GenParams::new(10, 0, 10, 1), &missing, &mut |_| {}).unwrap_err();
    assert!(matches!(err, WriteError::NoDirectory(_)), "{err}");
    assert!(err.to_string().contains("missing"), "{err}");
    let err = write_file(&GenParams::new(10, 0, 10, 1), dir.path(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, WriteError::IsDirectory(_)), "{err}");
    assert!(!summary_path(&missing).exists());
}
