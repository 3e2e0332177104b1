#!/usr/bin/env bash
# End-to-end durable replay benchmark: `starling replay` of a generated stream into a fresh data
# directory, timed under GNU time. Prints events/s, wall time, peak RSS, the progress log and
# `starling stats --json` for each run.
#
# usage: crates/starling-bench/run-replay-bench.sh [BATCH_EVENTS_MAX...]
#   Each argument is one run with that `--batch-events-max`; `default` (or no argument at all)
#   runs with the binary's own default.
# environment:
#   EVENTS (10000000), ACTORS (1000000), SEED (7): the stream, made by `gen-stream` and kept in
#     BENCH_DIR (target/bench-cache) under a name that also hashes the generator's sources, so a
#     changed generator makes a new stream and an unchanged one is reused.
#   KEEP_DATA=1 keeps each run's data directory.
#   PERF=1 records the replay with `perf record` (Debian package linux-perf) into
#     BENCH_DIR/perf-<batch>.data; read it with `perf report -i FILE --sort comm,dso,sym`.
set -euo pipefail

cd "$(dirname "$0")/../.."
EVENTS=${EVENTS:-10000000}
ACTORS=${ACTORS:-1000000}
SEED=${SEED:-7}
BENCH_DIR=${BENCH_DIR:-target/bench-cache}
TARGET_EVENTS_PER_S=250000
batches=("$@")
if [ ${#batches[@]} -eq 0 ]; then
    batches=(default)
fi

if [ ! -x /usr/bin/time ]; then
    echo "installing GNU time (Debian package \`time\`)"
    if ! apt-get install -y time >/dev/null 2>&1; then
        apt-get update >/dev/null && apt-get install -y time >/dev/null
    fi
fi

commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || echo ' with uncommitted changes')"
cargo build --release -p starling --bin starling -p starling-bench --bin gen-stream
mkdir -p "$BENCH_DIR"
gen_hash=$(cat crates/starling-bench/src/stream.rs crates/starling-bench/src/templates.rs \
    crates/starling-bench/src/bin/gen-stream.rs | sha256sum | cut -c1-12)
stream="$BENCH_DIR/stream-e$EVENTS-a$ACTORS-s$SEED-$gen_hash.jsonl.zst"
if [ -s "$stream" ]; then
    echo "reusing $stream"
else
    target/release/gen-stream --events "$EVENTS" --actors "$ACTORS" --seed "$SEED" --out "$stream"
fi

echo "== setup"
echo "commit: $commit (when built)"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "ram: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
echo "disk: $(df -h "$BENCH_DIR" | awk 'NR==2 {print $1 ", " $2 " total, " $4 " free"}')"
echo "stream: $stream ($EVENTS events, $ACTORS actors, seed $SEED, $(du -h "$stream" | cut -f1) compressed)"

for batch in "${batches[@]}"; do
    data=$(mktemp -d "$BENCH_DIR/replay-data.XXXXXX")
    args=()
    if [ "$batch" != default ]; then
        args=(--batch-events-max "$batch")
    fi
    runner=()
    if [ "${PERF:-0}" = 1 ]; then
        # No hardware counters in this VM: sample the software clock, 99 Hz per thread, no
        # stacks (Rust std has no frame pointers), so the overhead stays under 1%.
        runner=(perf record -e cpu-clock -F 99 -o "$BENCH_DIR/perf-$batch.data" --)
    fi
    echo
    echo "== replay, batch-events-max $batch"
    echo "command: starling replay $stream --data-dir $data ${args[*]}"
    start=$(date +%s.%N)
    /usr/bin/time -v -o "$data.time" "${runner[@]}" target/release/starling replay "$stream" \
        --data-dir "$data" "${args[@]}" 2>"$data.log"
    end=$(date +%s.%N)
    rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$data.time")
    awk -v events="$EVENTS" -v start="$start" -v end="$end" -v rss="$rss_kib" \
        -v target="$TARGET_EVENTS_PER_S" 'BEGIN {
            wall = end - start; rate = events / wall
            printf "events: %d\nwall: %.1f s\nevents/s: %.0f\npeak RSS: %.0f MiB\n", events, wall, rate, rss / 1024
            if (rate >= target) printf "target %d events/s: met (%.2fx)\n", target, rate / target
            else printf "target %d events/s: missed by %.0f%% (%.2fx)\n", target, (1 - rate / target) * 100, rate / target
        }'
    grep -E 'User time|System time|Percent of CPU|Elapsed|Maximum resident|File system outputs|Major|Voluntary|Involuntary' "$data.time"
    echo "progress log (every 10th line):"
    awk 'NR % 10 == 1' "$data.log" | sed 's/\x1b\[[0-9;]*m//g' | tail -n 40
    echo "stats:"
    target/release/starling stats --data-dir "$data" --json
    echo "data dir size: $(du -sh "$data" | cut -f1)"
    if [ "${KEEP_DATA:-0}" = 1 ]; then
        echo "kept $data"
    else
        rm -rf "$data"
    fi
    rm -f "$data.time" "$data.log"
done
