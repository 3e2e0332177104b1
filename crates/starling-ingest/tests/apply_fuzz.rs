//! A fuzz target for the whole apply path, not only the decoder: arbitrary bytes, random JSON
//! values, real sample events, and sample events with one field replaced (by another event's
//! value or by any JSON value), mixed in random order, pushed through `Applier` (decoding, the
//! future-time bound, the apply rules) into a real embedded store, committed in batches of
//! random sizes.
//!
//! For every case it checks that:
//! - no input is an error of the store or of ingest (bad input is data, never a failure, and the
//!   apply rules never find their own counts broken);
//! - the store counts exactly the inputs that `jetstream::decode` (and the future bound) refuse,
//!   recounted here, as drops;
//! - a dropped input has no other effect: a second store fed only the accepted inputs, in the
//!   same order, ends with the same stats apart from the drops;
//! - the stats survive closing and reopening the store.
//!
//! The normal test run tries a few dozen cases; `PROPTEST_CASES=N` runs more.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::sync::LazyLock;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed};
use serde_json::Value;
use starling_core::jetstream;
use starling_core::sample::{SampleParams, events};
use starling_ingest::{Applier, BatchLimits};
use starling_store::{Committed, EmbeddedStore, Stats, Store};

/// Cases in the normal test run.
const CASES_DEFAULT: u32 = 16;

/// The seed used when `STARLING_TEST_SEED` is unset, so that runs repeat by default.
const SEED_DEFAULT: u64 = 0x4150_504c_595f_4655;

fn config() -> Config {
    let seed = std::env::var("STARLING_TEST_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(SEED_DEFAULT);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(CASES_DEFAULT);
    println!("proptest seed {seed}, {cases} cases (set STARLING_TEST_SEED to change it)");
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    }
}

/// A small sample network's events, parsed once: the valid inputs and the material of the
/// mutated ones.
static SAMPLE: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
    let lines = events(&SampleParams {
        n_actors: 12,
        seed: 3,
    });
    assert!(lines.len() > 100, "too few sample events: {}", lines.len());
    lines
        .into_iter()
        .map(|line| {
            let value = serde_json::from_str(&line).unwrap();
            (line, value)
        })
        .collect()
});

/// Any JSON value, small.
fn json() -> BoxedStrategy<Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "[a-z0-9:./é\"\\\\]{0,12}".prop_map(Value::String),
    ];
    scalar
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..4).prop_map(Value::Array),
                vec(("[a-z$]{1,8}", inner), 0..4)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
        .boxed()
}

/// The paths to every value inside `value`, as lists of object keys and array indices.
fn paths(value: &Value, prefix: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(prefix.clone());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                prefix.push(Value::from(key.as_str()));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (idx, child) in items.iter().enumerate() {
                prefix.push(Value::from(idx));
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn value_at<'a>(value: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |value, step| match step {
        Value::String(key) => value.get_mut(key.as_str()),
        Value::Number(idx) => value.get_mut(idx.as_u64()? as usize),
        _ => None,
    })
}

/// One input of a case.
#[derive(Clone, Debug)]
enum Input {
    /// Arbitrary bytes.
    Bytes(Vec<u8>),
    /// Any JSON value.
    Json(Value),
    /// A sample event as it is.
    Sample(Index),
    /// A sample event with the value at one of its paths replaced by the value at a path of
    /// another (same-named fields of other kinds, collections, records, DIDs, cursors).
    Spliced(Index, Index, Index, Index),
    /// A sample event with the value at one of its paths replaced by any JSON value.
    Replaced(Index, Index, Value),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        1 => vec(any::<u8>(), 0..256).prop_map(Input::Bytes),
        1 => json().prop_map(Input::Json),
        6 => any::<Index>().prop_map(Input::Sample),
        3 => (any::<Index>(), any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(a, b, c, d)| Input::Spliced(a, b, c, d)),
        2 => (any::<Index>(), any::<Index>(), json())
            .prop_map(|(a, b, value)| Input::Replaced(a, b, value)),
    ]
}

/// A sample event with the value at the `at`-th of its paths replaced by `new`.
fn replaced(event: &Value, at: &Index, new: Value) -> Vec<u8> {
    let mut event = event.clone();
    let mut all = Vec::new();
    paths(&event, &mut Vec::new(), &mut all);
    let path = at.get(&all).clone();
    if let Some(slot) = value_at(&mut event, &path) {
        *slot = new;
    }
    serde_json::to_vec(&event).unwrap()
}

fn render(input: &Input) -> Vec<u8> {
    let sample = &*SAMPLE;
    match input {
        Input::Bytes(bytes) => bytes.clone(),
        Input::Json(value) => serde_json::to_vec(value).unwrap(),
        Input::Sample(idx) => idx.get(sample).0.clone().into_bytes(),
        Input::Spliced(into, at, from, from_at) => {
            let mut donor = from.get(sample).1.clone();
            let mut all = Vec::new();
            paths(&donor, &mut Vec::new(), &mut all);
            let path = from_at.get(&all).clone();
            let new = value_at(&mut donor, &path).cloned().unwrap_or(Value::Null);
            replaced(&into.get(sample).1, at, new)
        }
        Input::Replaced(into, at, value) => replaced(&into.get(sample).1, at, value.clone()),
    }
}

/// Whether ingest accepts `bytes`, recounted here from the decoder and the future bound.
fn accepted(bytes: &[u8]) -> bool {
    jetstream::decode(bytes).is_ok_and(|event| {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        event.time_us <= now_us + starling_ingest::FUTURE_SKEW_MAX.as_micros() as u64
    })
}

/// Pushes `inputs` through an applier into `store`, committing every `events_max`.
fn apply(store: &EmbeddedStore, inputs: &[Vec<u8>], events_max: usize) {
    let mut sink = |_: &Committed| {};
    let limits = BatchLimits {
        events_max,
        ..BatchLimits::default()
    };
    let mut applier = Applier::new(store, &mut sink, limits).unwrap();
    for bytes in inputs {
        applier.push(bytes).unwrap();
        if applier.is_full() {
            let cursor = applier.newest_cursor().map(starling_store::Progress::Live);
            applier.commit(cursor).unwrap();
        }
    }
    let cursor = applier.newest_cursor().map(starling_store::Progress::Live);
    applier.commit(cursor).unwrap();
    store.sync().unwrap();
}

fn without_drops(mut stats: Stats) -> Stats {
    stats.dropped.clear();
    stats
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_input_is_applied_or_counted_as_a_drop(
        inputs in vec(input(), 1..48),
        events_max in 1usize..16,
    ) {
        let inputs: Vec<Vec<u8>> = inputs.iter().map(render).collect();
        let n_refused = inputs.iter().filter(|bytes| !accepted(bytes)).count() as u64;
        let dir = tempfile::tempdir().unwrap();

        let store = EmbeddedStore::open(&dir.path().join("all")).unwrap();
        apply(&store, &inputs, events_max);
        let stats = store.stats().unwrap();
        prop_assert_eq!(stats.dropped.values().sum::<u64>(), n_refused, "{:?}", stats);
        drop(store);
        let reopened = EmbeddedStore::open(&dir.path().join("all")).unwrap();
        prop_assert_eq!(&reopened.stats().unwrap(), &stats);

        let good: Vec<Vec<u8>> = inputs.iter().filter(|bytes| accepted(bytes)).cloned().collect();
        let clean = EmbeddedStore::open(&dir.path().join("accepted")).unwrap();
        apply(&clean, &good, events_max);
        let clean_stats = clean.stats().unwrap();
        prop_assert!(clean_stats.dropped.is_empty(), "{:?}", clean_stats);
        prop_assert_eq!(without_drops(stats), clean_stats);
    }
}
