//! The graph on a real directed social graph: SNAP's soc-Slashdot0902 (82,168 nodes, 948,464
//! edges), from `../shared/data/graphs/`, its format described in `../shared/data/README.md`.
//!
//! Self-loops (78,303 of them) are skipped by both the graph and the naive model here:
//! following yourself is not a Bluesky relation, and the graph ignores such edges by design.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starling_core::ActorId;
use starling_graph::{EdgeChange, Graph, GraphBuilder};

const EDGE_LINES: usize = 948_464;
const SELF_LOOPS: usize = 78_303;

fn dataset_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/graphs/soc-Slashdot0902.txt.zst")
}

/// Reads every edge line (self-loops included) from the compressed file.
fn read_edges(path: &PathBuf) -> Vec<(u32, u32)> {
    let file = std::fs::File::open(path).unwrap();
    let reader = BufReader::new(zstd::Decoder::new(file).unwrap());
    let mut edges = Vec::with_capacity(EDGE_LINES);
    for line in reader.lines() {
        let line = line.unwrap();
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (from, to) = line.split_once('\t').unwrap();
        edges.push((from.parse().unwrap(), to.parse().unwrap()));
    }
    edges
}

fn sorted(set: Option<&HashSet<u32>>) -> Vec<u32> {
    let mut res: Vec<u32> = set.map(|s| s.iter().copied().collect()).unwrap_or_default();
    res.sort_unstable();
    res
}

fn ids(ids: &[ActorId]) -> Vec<u32> {
    ids.iter().map(|id| id.0).collect()
}

#[test]
fn slashdot_known_followers_and_mutuals_match_naive() {
    // Checks known followers (count and ids, with and without a limit) and mutuals for 2,000
    // seeded random (viewer, target) pairs against HashMap/HashSet intersections built here
    // from the raw edges, on the graph loaded in bulk and on one built by live batched
    // updates; the two graphs must also be equal. Viewers and targets are drawn in four ways
    // (see below) so that active viewers, popular targets and non-empty answers are all
    // well represented.
    let path = dataset_path();
    if !path.exists() {
        let message = format!(
            "this test needs ../shared/data beside the repository ({} is missing)",
            path.display()
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
        println!("skipping: {message}");
        return;
    }
    let edges = read_edges(&path);
    assert_eq!(edges.len(), EDGE_LINES);
    let n_self_loops = edges.iter().filter(|(a, b)| a == b).count();
    assert_eq!(n_self_loops, SELF_LOOPS);

    let mut following: HashMap<u32, HashSet<u32>> = HashMap::new();
    let mut followers: HashMap<u32, HashSet<u32>> = HashMap::new();
    for &(a, b) in edges.iter().filter(|(a, b)| a != b) {
        following.entry(a).or_default().insert(b);
        followers.entry(b).or_default().insert(a);
    }
    let n_follows = following.values().map(HashSet::len).sum::<usize>();
    assert_eq!(n_follows, EDGE_LINES - SELF_LOOPS);

    // A lower array limit than the default so that the biggest sets (2,500 members) are
    // bitmaps and every kernel runs on real data.
    let mut builder = GraphBuilder::with_capacity(edges.len()).array_members_max(512);
    for &(a, b) in &edges {
        builder.follow(ActorId(a), ActorId(b));
    }
    let graph = builder.build();
    assert_eq!(graph.n_follows(), n_follows as u64);
    assert!(graph.stats().n_bitmap_sets > 0);

    let live = Graph::with_array_members_max(82_168, 512);
    let changes: Vec<EdgeChange> = edges
        .iter()
        .map(|&(a, b)| EdgeChange::Follow {
            actor: ActorId(a),
            subject: ActorId(b),
        })
        .collect();
    for batch in changes.chunks(1000) {
        live.apply(batch);
    }
    assert!(live == graph, "live updates and bulk load disagree");

    let seed = 20_090_200;
    println!("seed: {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n_nodes = 82_168;
    let (mut total_known, mut total_mutuals) = (0, 0);
    for pair_idx in 0..2_000 {
        // Four kinds of pairs: uniform viewer and target; uniform viewer, popular target;
        // active viewer, popular target; active viewer and a target two follows away from it,
        // so that at least one known follower exists.
        let kind = pair_idx % 4;
        let viewer = if kind < 2 {
            rng.random_range(0..n_nodes)
        } else {
            edges[rng.random_range(0..edges.len())].0
        };
        let target = match kind {
            0 => rng.random_range(0..n_nodes),
            1 | 2 => edges[rng.random_range(0..edges.len())].1,
            _ => {
                // An edge's source may have only its self-loop; then any target will do.
                let followed: Vec<u32> = sorted(following.get(&viewer));
                let next: Vec<u32> = match followed.len() {
                    0 => Vec::new(),
                    n => sorted(following.get(&followed[rng.random_range(0..n)])),
                };
                match next.len() {
                    0 => rng.random_range(0..n_nodes),
                    n => next[rng.random_range(0..n)],
                }
            }
        };
        let viewer_following = following.get(&viewer);
        let target_followers = followers.get(&target);
        let mut expected: Vec<u32> = match (viewer_following, target_followers) {
            (Some(f), Some(g)) => f.intersection(g).copied().collect(),
            _ => Vec::new(),
        };
        expected.sort_unstable();
        for g in [&graph, &live] {
            let all = g.known_followers(ActorId(viewer), ActorId(target), None);
            assert_eq!(
                all.count,
                expected.len(),
                "known_followers({viewer}, {target})"
            );
            assert_eq!(
                ids(&all.ids),
                expected,
                "known_followers({viewer}, {target})"
            );
            let first = g.known_followers(ActorId(viewer), ActorId(target), Some(5));
            assert_eq!(first.count, expected.len());
            assert_eq!(ids(&first.ids), expected[..expected.len().min(5)]);
        }
        total_known += expected.len();

        let mut expected_mutuals: Vec<u32> = match (viewer_following, followers.get(&viewer)) {
            (Some(f), Some(g)) => f.intersection(g).copied().collect(),
            _ => Vec::new(),
        };
        expected_mutuals.sort_unstable();
        assert_eq!(
            ids(&graph.mutuals(ActorId(viewer))),
            expected_mutuals,
            "mutuals({viewer})"
        );
        total_mutuals += expected_mutuals.len();

        assert_eq!(
            ids(&graph.following(ActorId(viewer))),
            sorted(viewer_following)
        );
        assert_eq!(
            ids(&graph.followers(ActorId(target))),
            sorted(target_followers)
        );
    }
    println!("known followers found: {total_known}, mutuals found: {total_mutuals}");
    // The comparison must have compared something.
    assert!(total_known > 5_000);
    assert!(total_mutuals > 10_000);
}
