//! `actor-lookup-bench`: what finding an actor costs, by DID and by id, in a table of N actors.
//!
//! ```text
//! actor-lookup-bench --dir DIR [--actors N] [--lookups N] [--rounds N] [--seed N]
//! ```
//!
//! Interns `--actors` sample DIDs (`starling_core::sample::did`) into a fresh embedded store in
//! DIR, reopens it (so the table is the one a restart builds), then times, `--rounds` times:
//! `Store::actor_id` of `--lookups` known DIDs drawn at random, of as many DIDs never interned,
//! and `Store::did` of as many random ids. Every answer is checked against the ids the interning
//! gave back. Prints nanoseconds per call for each kind and round, their medians, and the
//! process's resident memory after the reopen.

use std::error::Error;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use starling_bench::cli::number;
use starling_core::ActorId;
use starling_core::sample::did;
use starling_store::{EmbeddedStore, Store};

type Res<T> = Result<T, Box<dyn Error>>;

const USAGE: &str =
    "usage: actor-lookup-bench --dir DIR [--actors N] [--lookups N] [--rounds N] [--seed N]";
/// DIDs interned per call.
const INTERN_CHUNK: usize = 100_000;

struct Args {
    dir: PathBuf,
    actors: u32,
    lookups: usize,
    rounds: usize,
    seed: u64,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        dir: PathBuf::new(),
        actors: 100_000,
        lookups: 1_000_000,
        rounds: 5,
        seed: 7,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(USAGE)?;
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value),
            "--actors" => args.actors = number(&flag, &value)?,
            "--lookups" => args.lookups = number(&flag, &value)?,
            "--rounds" => args.rounds = number(&flag, &value)?,
            "--seed" => args.seed = number(&flag, &value)?,
            _ => return Err(USAGE.into()),
        }
    }
    if args.dir.as_os_str().is_empty() || args.actors == 0 {
        return Err(USAGE.into());
    }
    Ok(args)
}

/// Interns `n` sample DIDs, returning each one's id.
fn intern(store: &EmbeddedStore, n: u32) -> Res<Vec<ActorId>> {
    let dids: Vec<String> = (0..n).map(did).collect();
    let mut ids = Vec::with_capacity(dids.len());
    for chunk in dids.chunks(INTERN_CHUNK) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        ids.extend(store.intern_actors(&chunk)?);
    }
    Ok(ids)
}

/// Nanoseconds per call of `call` over `inputs`, after checking each answer with `check`.
fn time_calls<I, O>(
    inputs: &[I],
    call: impl Fn(&I) -> O,
    check: impl Fn(&I, &O) -> bool,
) -> Res<f64> {
    for input in inputs {
        if !check(input, &call(input)) {
            return Err("a lookup gave a wrong answer".into());
        }
    }
    let started = Instant::now();
    for input in inputs {
        black_box(call(black_box(input)));
    }
    Ok(started.elapsed().as_nanos() as f64 / inputs.len() as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn resident_mib() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .map_or_else(|| "unknown".to_owned(), |kb| kb.trim().to_owned())
}

fn main() -> Res<()> {
    let args = parse_args()?;
    let ids = intern(&EmbeddedStore::open(&args.dir)?, args.actors)?;
    let store = EmbeddedStore::open(&args.dir)?;
    println!(
        "actor-lookup-bench: {} actors, VmRSS after reopen {}",
        ids.len(),
        resident_mib()
    );
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let known: Vec<(String, ActorId)> = (0..args.lookups)
        .map(|_| {
            let n = rng.random_range(0..args.actors);
            ids.get(n as usize).map(|&id| (did(n), id))
        })
        .collect::<Option<_>>()
        .ok_or("fewer ids than actors interned")?;
    let unknown: Vec<String> = (0..args.lookups)
        .map(|_| did(args.actors + rng.random_range(0..args.actors)))
        .collect();
    let by_id: Vec<(ActorId, String)> = known.iter().map(|(did, id)| (*id, did.clone())).collect();
    let mut figures: [Vec<f64>; 3] = Default::default();
    for round in 1..=args.rounds {
        let known_ns = time_calls(
            &known,
            |(did, _)| store.actor_id(did),
            |(_, id), got| *got == Some(*id),
        )?;
        let unknown_ns = time_calls(&unknown, |did| store.actor_id(did), |_, got| got.is_none())?;
        let did_ns = time_calls(
            &by_id,
            |(id, _)| store.did(*id),
            |(_, did), got| got.as_deref() == Some(did.as_str()),
        )?;
        println!(
            "round {round}: actor_id known {known_ns:.1} ns, unknown {unknown_ns:.1} ns, did {did_ns:.1} ns"
        );
        for (list, ns) in figures.iter_mut().zip([known_ns, unknown_ns, did_ns]) {
            list.push(ns);
        }
    }
    let [known_ns, unknown_ns, did_ns] = figures.map(median);
    println!(
        "median: actor_id known {known_ns:.1} ns, unknown {unknown_ns:.1} ns, did {did_ns:.1} ns"
    );
    Ok(())
}
