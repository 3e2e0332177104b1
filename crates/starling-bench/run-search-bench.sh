#!/usr/bin/env bash
# The search index at bulk scale with `search-bench` (release build): the events of
# `starling gen --actors ACTORS --follows FOLLOWS --posts POSTS --seed SEED`, generated in
# process, indexed as `serve` indexes them; then SearchActorsTypeahead- and SearchPosts-shaped
# queries from THREADS threads for RUN_SECONDS each, every answer checked. Prints the build time,
# the index size per post, requests/s and latency percentiles. The output (with date, commit,
# command, machine and load average) goes to OUT_DIR/search-COMMIT.txt; the index is removed
# at the end.
#
# usage: crates/starling-bench/run-search-bench.sh
# environment: ACTORS (100000), FOLLOWS (3000000), POSTS (1000000), SEED (7), THREADS (2),
#   RUN_SECONDS (20; not SECONDS, which bash keeps as its own clock), BENCH_DIR (target/bench-cache/search), OUT_DIR (crates/starling-bench/results)
set -euo pipefail

cd "$(dirname "$0")/../.."
ACTORS=${ACTORS:-100000}
FOLLOWS=${FOLLOWS:-3000000}
POSTS=${POSTS:-1000000}
SEED=${SEED:-7}
THREADS=${THREADS:-2}
SECONDS_EACH=${RUN_SECONDS:-20}
BENCH_DIR=${BENCH_DIR:-target/bench-cache/search}
OUT_DIR=${OUT_DIR:-crates/starling-bench/results}

cargo build -q --release -p starling-bench --bin search-bench
bin=target/release/search-bench
commit=$(git rev-parse --short HEAD)
mkdir -p "$(dirname "$BENCH_DIR")" "$OUT_DIR"
args=(--dir "$BENCH_DIR" --actors "$ACTORS" --follows "$FOLLOWS" --posts "$POSTS" --seed "$SEED"
      --threads "$THREADS" --seconds "$SECONDS_EACH")
out="$OUT_DIR/search-$commit.txt"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $commit"
    echo "command: $bin ${args[*]}"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f 'elapsed: %e s, peak rss: %M KiB' "$bin" "${args[@]}"
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} 2>&1 | tee "$out"
