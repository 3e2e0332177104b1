//! A synthetic follow graph as GraphD's CSV adjacency list, plus the query inputs of its worst
//! case: the most-followed accounts and a sample of viewers.
//!
//! The edges come from `starling_graph::synthetic` (Bluesky-shaped, seeded); each actor id `i`
//! is written as `starling_core::sample::did(i)`, one `actor_did,subject_did` line per follow,
//! in the generator's order (actors ascending). The load generator then needs, as GraphD
//! measured social proof, random viewers against the 500 most-followed accounts: [`FollowCsv`]
//! counts in- and out-degrees while it writes, and [`FollowCsv::finish`] picks both.

use std::collections::HashSet;
use std::io::{self, Write};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starling_core::sample::did;
use starling_graph::synthetic::{self, SyntheticParams};

/// Bytes of every DID `starling_core::sample::did` makes (`did:plc:` + 24 characters).
pub const DID_BYTES: usize = 32;
/// Bytes of one CSV line: two DIDs, a comma and a newline.
pub const LINE_BYTES: usize = 2 * DID_BYTES + 2;
/// Viewers drawn at most per viewer wanted, before giving up on finding distinct active ones.
const VIEWER_DRAWS_PER_VIEWER_MAX: usize = 1_000;
/// Mixed into the seed of the viewer sample so that it is not the generator's own stream.
const VIEWER_SEED_SALT: u64 = 0x5649_4557_4552_5321;

/// Every actor's DID, computed once, [`DID_BYTES`] each.
pub struct DidTable {
    bytes: Vec<u8>,
}

impl DidTable {
    /// The DIDs of ids `0..n_actors`.
    pub fn new(n_actors: u32) -> Result<DidTable, String> {
        let mut bytes = Vec::with_capacity(n_actors as usize * DID_BYTES);
        for id in 0..n_actors {
            let text = did(id);
            if text.len() != DID_BYTES {
                return Err(format!(
                    "the DID of actor {id} (`{text}`) is {} bytes, not {DID_BYTES}",
                    text.len()
                ));
            }
            bytes.extend_from_slice(text.as_bytes());
        }
        Ok(DidTable { bytes })
    }

    /// The DID of `id`, if `id` is in the table.
    pub fn get(&self, id: u32) -> Option<&[u8]> {
        let start = id as usize * DID_BYTES;
        self.bytes.get(start..start + DID_BYTES)
    }

    /// The DID of `id` as text.
    pub fn text(&self, id: u32) -> String {
        self.get(id)
            .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
            .unwrap_or_default()
    }
}

/// One actor and a degree: followers for a target, accounts followed for a viewer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    /// The generator's id.
    pub id: u32,
    /// Its DID.
    pub did: String,
    /// Followers (targets) or follows (viewers).
    pub degree: u32,
}

/// What [`FollowCsv::finish`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Lines (follows) written.
    pub n_follows: u64,
    /// Bytes of CSV written, before compression.
    pub n_bytes: u64,
    /// Actors that follow at least one account.
    pub n_active: u64,
    /// The most-followed accounts, most followed first (ties by id).
    pub targets: Vec<Picked>,
    /// Distinct viewers, uniform over the actors that follow at least one account, in draw
    /// order.
    pub viewers: Vec<Picked>,
}

/// Writes the CSV of a synthetic graph in chunks and keeps the degree counts.
pub struct FollowCsv {
    params: SyntheticParams,
    dids: DidTable,
    in_degree: Vec<u32>,
    out_degree: Vec<u32>,
    n_follows: u64,
    n_bytes: u64,
}

impl FollowCsv {
    /// A writer for the graph of `params`; computes every DID up front.
    pub fn new(params: SyntheticParams) -> Result<FollowCsv, String> {
        let n = params.n_actors as usize;
        Ok(FollowCsv {
            dids: DidTable::new(params.n_actors)?,
            params,
            in_degree: vec![0; n],
            out_degree: vec![0; n],
            n_follows: 0,
            n_bytes: 0,
        })
    }

    /// Generates every edge and hands the CSV to `emit` in chunks of about `chunk_bytes`.
    pub fn write_all(
        &mut self,
        chunk_bytes: usize,
        mut emit: impl FnMut(Vec<u8>) -> io::Result<()>,
    ) -> io::Result<()> {
        let capacity = chunk_bytes + LINE_BYTES;
        let mut chunk = Vec::with_capacity(capacity);
        for (actor, subject) in synthetic::generate(self.params.clone()) {
            let (Some(actor_did), Some(subject_did)) =
                (self.dids.get(actor.0), self.dids.get(subject.0))
            else {
                return Err(io::Error::other(format!(
                    "the generator made an edge {} -> {} outside 0..{}",
                    actor.0, subject.0, self.params.n_actors
                )));
            };
            chunk.extend_from_slice(actor_did);
            chunk.push(b',');
            chunk.extend_from_slice(subject_did);
            chunk.push(b'\n');
            if let Some(count) = self.out_degree.get_mut(actor.0 as usize) {
                *count += 1;
            }
            if let Some(count) = self.in_degree.get_mut(subject.0 as usize) {
                *count += 1;
            }
            self.n_follows += 1;
            if chunk.len() >= chunk_bytes {
                self.n_bytes += chunk.len() as u64;
                emit(std::mem::replace(&mut chunk, Vec::with_capacity(capacity)))?;
            }
        }
        if !chunk.is_empty() {
            self.n_bytes += chunk.len() as u64;
            emit(chunk)?;
        }
        Ok(())
    }

    /// Picks the `n_targets` most-followed accounts and `n_viewers` distinct active viewers,
    /// the latter with a generator seeded from the graph's seed.
    pub fn finish(self, n_targets: usize, n_viewers: usize) -> Summary {
        let mut by_followers: Vec<(u32, u32)> = self
            .in_degree
            .iter()
            .enumerate()
            .filter_map(|(id, &degree)| Some((degree, u32::try_from(id).ok()?)))
            .collect();
        let n_targets = n_targets.min(by_followers.len());
        if n_targets > 0 {
            // Most followers first, then the lower id.
            let order = |a: &(u32, u32), b: &(u32, u32)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
            by_followers.select_nth_unstable_by(n_targets - 1, order);
            by_followers.truncate(n_targets);
            by_followers.sort_unstable_by(order);
        } else {
            by_followers.clear();
        }
        let targets = by_followers
            .into_iter()
            .map(|(degree, id)| Picked {
                id,
                did: self.dids.text(id),
                degree,
            })
            .collect();

        let active: Vec<u32> = self
            .out_degree
            .iter()
            .enumerate()
            .filter(|&(_, &degree)| degree > 0)
            .filter_map(|(id, _)| u32::try_from(id).ok())
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(self.params.seed ^ VIEWER_SEED_SALT);
        let mut seen = HashSet::new();
        let mut viewers = Vec::with_capacity(n_viewers.min(active.len()));
        let draws_max = n_viewers.saturating_mul(VIEWER_DRAWS_PER_VIEWER_MAX);
        let mut n_draws = 0;
        while viewers.len() < n_viewers && !active.is_empty() && n_draws < draws_max {
            n_draws += 1;
            let Some(&id) = active.get(rng.random_range(0..active.len())) else {
                continue;
            };
            if seen.insert(id) {
                viewers.push(Picked {
                    id,
                    did: self.dids.text(id),
                    degree: self.out_degree.get(id as usize).copied().unwrap_or(0),
                });
            }
        }
        Summary {
            n_follows: self.n_follows,
            n_bytes: self.n_bytes,
            n_active: active.len() as u64,
            targets,
            viewers,
        }
    }
}

/// Writes the side file the load generator reads: `#` comments, then one `target DID FOLLOWERS`
/// line per target and one `viewer DID FOLLOWS` line per viewer.
pub fn write_side_file(
    w: &mut impl Write,
    params: &SyntheticParams,
    summary: &Summary,
) -> io::Result<()> {
    writeln!(
        w,
        "# gen-follows side file: {} actors, {} follows, seed {}",
        params.n_actors, summary.n_follows, params.seed
    )?;
    writeln!(
        w,
        "# target DID FOLLOWERS: the {} most-followed accounts, most followed first",
        summary.targets.len()
    )?;
    writeln!(
        w,
        "# viewer DID FOLLOWS: {} distinct viewers, uniform over the {} actors that follow anyone",
        summary.viewers.len(),
        summary.n_active
    )?;
    for target in &summary.targets {
        writeln!(w, "target {} {}", target.did, target.degree)?;
    }
    for viewer in &summary.viewers {
        writeln!(w, "viewer {} {}", viewer.did, viewer.degree)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use starling_core::syntax::is_valid_did;

    use super::*;

    fn run(params: &SyntheticParams, n_targets: usize, n_viewers: usize) -> (Vec<u8>, Summary) {
        let mut csv = FollowCsv::new(params.clone()).unwrap();
        let mut out = Vec::new();
        csv.write_all(1000, |chunk| {
            out.extend_from_slice(&chunk);
            Ok(())
        })
        .unwrap();
        (out, csv.finish(n_targets, n_viewers))
    }

    #[test]
    fn csv_targets_and_viewers_match_a_recount() {
        // Checks, at 3,000 actors / 60,000 follows (seed 5), that the CSV has one valid
        // `did,did` line per generated edge, and that the targets and viewers agree with
        // degrees recounted here from the CSV text alone.
        let params = SyntheticParams::new(3_000, 60_000, 5);
        let (out, summary) = run(&params, 50, 200);
        let text = String::from_utf8(out.clone()).unwrap();
        let edges: Vec<(&str, &str)> = text
            .lines()
            .map(|line| line.split_once(',').unwrap())
            .collect();
        let expected = synthetic::generate(params.clone()).count();
        assert!(expected > 0);
        assert_eq!(edges.len(), expected);
        assert_eq!(summary.n_follows, expected as u64);
        assert_eq!(summary.n_bytes, out.len() as u64);
        assert_eq!(out.len(), expected * LINE_BYTES);
        assert!(
            edges
                .iter()
                .all(|(a, b)| is_valid_did(a) && is_valid_did(b) && a != b)
        );

        let mut followers: HashMap<&str, u32> = HashMap::new();
        let mut follows: HashMap<&str, u32> = HashMap::new();
        for &(actor, subject) in &edges {
            *follows.entry(actor).or_default() += 1;
            *followers.entry(subject).or_default() += 1;
        }
        let mut ranked: Vec<(u32, &str)> = followers.iter().map(|(d, &n)| (n, *d)).collect();
        ranked.sort_unstable_by_key(|&(n, _)| std::cmp::Reverse(n));
        assert_eq!(summary.targets.len(), 50);
        for (rank, target) in summary.targets.iter().enumerate() {
            // Ties may order differently; the counts at each rank must agree.
            assert_eq!(target.degree, ranked[rank].0, "rank {rank}");
            assert_eq!(followers[target.did.as_str()], target.degree);
        }
        assert_eq!(summary.viewers.len(), 200);
        assert_eq!(summary.n_active, follows.len() as u64);
        let distinct: HashSet<&str> = summary.viewers.iter().map(|v| v.did.as_str()).collect();
        assert_eq!(distinct.len(), 200);
        for viewer in &summary.viewers {
            assert_eq!(follows[viewer.did.as_str()], viewer.degree);
        }
    }

    #[test]
    fn same_seed_same_output() {
        // Checks determinism: seed 9 twice gives the same CSV, targets and viewers; seed 10
        // gives other viewers.
        let (out_a, summary_a) = run(&SyntheticParams::new(2_000, 20_000, 9), 10, 100);
        let (out_b, summary_b) = run(&SyntheticParams::new(2_000, 20_000, 9), 10, 100);
        let (_, summary_c) = run(&SyntheticParams::new(2_000, 20_000, 10), 10, 100);
        assert!(!out_a.is_empty());
        assert_eq!(out_a, out_b);
        assert_eq!(summary_a, summary_b);
        assert_ne!(summary_a.viewers, summary_c.viewers);
    }

    #[test]
    fn side_file_lists_every_pick() {
        // Checks the side file's line format against the summary it was written from.
        let params = SyntheticParams::new(1_000, 8_000, 3);
        let (_, summary) = run(&params, 5, 20);
        let mut side = Vec::new();
        write_side_file(&mut side, &params, &summary).unwrap();
        let side = String::from_utf8(side).unwrap();
        let targets: Vec<&str> = side
            .lines()
            .filter_map(|line| line.strip_prefix("target "))
            .map(|rest| rest.split(' ').next().unwrap())
            .collect();
        let viewers = side
            .lines()
            .filter(|l| l.starts_with("viewer did:"))
            .count();
        assert_eq!(targets.len(), 5);
        assert_eq!(targets[0], summary.targets[0].did);
        assert_eq!(viewers, 20);
    }
}
