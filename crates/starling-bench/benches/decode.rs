//! Decode-only speed of `starling_core::jetstream::decode`, in events per second.
//!
//! Two inputs: the 162 real events of `../shared/data/jetstream/`, and 20,000 events generated
//! from them (`starling_bench::stream`, seed 7, 100,000 actors). Run with
//! `cargo bench -p starling-bench`.

#![allow(missing_docs)] // criterion_main! generates an undocumented `main`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use starling_bench::stream::{Generator, StreamParams};
use starling_bench::templates::{load_templates, shared_data_dir, template_lines};
use starling_core::jetstream;

/// Generated events decoded per iteration.
const GENERATED_EVENTS: usize = 20_000;

fn decode_lines(lines: &[Vec<u8>]) -> usize {
    let mut ok = 0;
    for line in lines {
        if let Ok(event) = jetstream::decode(black_box(line)) {
            black_box(&event);
            ok += 1;
        }
    }
    ok
}

fn bench_decode(c: &mut Criterion) {
    let dir = shared_data_dir();
    let real: Vec<Vec<u8>> = match template_lines(&dir) {
        Ok(lines) => lines.into_iter().map(String::into_bytes).collect(),
        Err(err) => {
            eprintln!("decode bench skipped: {err}");
            return;
        }
    };
    let templates = match load_templates(&dir) {
        Ok(templates) => templates,
        Err(err) => {
            eprintln!("decode bench skipped: {err}");
            return;
        }
    };
    let mut generator = Generator::new(
        &templates,
        StreamParams {
            actors: 100_000,
            seed: 7,
        },
    );
    let mut text = Vec::new();
    for _ in 0..GENERATED_EVENTS {
        generator.next_event(&mut text);
    }
    let generated: Vec<Vec<u8>> = text
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    // A bench of events that fail to decode would measure the error path instead.
    assert_eq!(
        decode_lines(&real),
        real.len(),
        "a real event does not decode"
    );
    assert_eq!(
        decode_lines(&generated),
        GENERATED_EVENTS,
        "a generated event does not decode"
    );

    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(real.len() as u64));
    group.bench_function("real_162", |b| b.iter(|| decode_lines(&real)));
    group.throughput(Throughput::Elements(generated.len() as u64));
    group.bench_function("generated_20k", |b| b.iter(|| decode_lines(&generated)));
    group.finish();
}

criterion_group!(benches, bench_decode);
criterion_main!(benches);
