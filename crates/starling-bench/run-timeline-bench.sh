#!/usr/bin/env bash
# Home timelines (`starling-timeline`) at the 2024 network's scale, with `timeline-bench`:
#   setup              the synthetic graph (5.5M actors, 160M follows, seed 7) plus a celebrity
#                      with 2M followers, its snapshot, and a store with every DID interned and
#                      20-30 posts/reposts for each author the read benchmark's readers follow
#                      (cached in DIR; SETUP=1 redoes it);
#   read               warm reads, pages past the head, cold rebuilds and the process's memory
#                      with 100,000 active readers, over the store (page cache of the store
#                      evicted first, so the first cold pass reads the disk);
#   celebrity-100k     one post by the celebrity, 100,000 random active readers, length 500;
#   celebrity-2m       the same with all 2M followers active, length 50;
#   sustained-*        Timelines::apply over posts and reposts, 1M active readers, length 50,
#                      authors by follower count or Zipf, celebrity threshold 100,000 or none;
#   e2e-off, e2e-on    replay of the first EVENTS events of the gen-stream stream through
#                      store + graph (+ timelines, 100,000 active readers, default length).
# Each phase is its own process, bounded by `timeout`, and its output (with date, commit,
# command and load average) goes to OUT_DIR/timeline-PHASE-COMMIT.txt.
#
# usage: crates/starling-bench/run-timeline-bench.sh [PHASE...]   (default: all, in order)
# environment: ACTORS (5500000), FOLLOWS (160000000), SEED (7), CELEBRITY_FOLLOWERS (2000000),
#   EVENTS (2000000), BENCH_DIR (target/bench-cache), OUT_DIR (crates/starling-bench/results),
#   SETUP=1 rebuilds the cached graph and store, PHASE_TIMEOUT (20m),
#   PERF=1 records each fan-out phase with `perf record -g` into BENCH_DIR/perf-timeline-PHASE.data,
#   TAG=NAME writes OUT_DIR/timeline-PHASE-NAME-COMMIT.txt instead (a variant of a phase, such as
#   TAG=hugetlb GLIBC_TUNABLES=glibc.malloc.hugetlb=1 for huge pages from the system allocator).
set -euo pipefail

cd "$(dirname "$0")/../.."
ACTORS=${ACTORS:-5500000}
FOLLOWS=${FOLLOWS:-160000000}
SEED=${SEED:-7}
CELEBRITY_FOLLOWERS=${CELEBRITY_FOLLOWERS:-2000000}
EVENTS=${EVENTS:-2000000}
BENCH_DIR=${BENCH_DIR:-target/bench-cache}
OUT_DIR=${OUT_DIR:-crates/starling-bench/results}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-20m}
PERF=${PERF:-0}
TAG=${TAG:-}
phases=("$@")
if [ ${#phases[@]} -eq 0 ]; then
    phases=(setup read celebrity-100k celebrity-2m sustained-followers sustained-zipf
        sustained-followers-nocelebrity e2e-off e2e-on)
fi

commit=$(git rev-parse --short HEAD)
dirty=$(git status --short -- crates Cargo.toml Cargo.lock ':!crates/starling-bench/results' | tr '\n' ' ')
cargo build --release -p starling-bench --bin timeline-bench --bin gen-stream
bin=target/release/timeline-bench
dir="$BENCH_DIR/timeline-a$ACTORS-f$FOLLOWS-s$SEED-c$CELEBRITY_FOLLOWERS"
mkdir -p "$BENCH_DIR" "$OUT_DIR"
scale=(--actors "$ACTORS" --follows "$FOLLOWS" --seed "$SEED")

header() {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $commit; uncommitted files in the build: ${dirty:-none}"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; ram: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
    echo "disk: $(df -h "$BENCH_DIR" | awk 'NR==2 {print $1 ", " $2 " total, " $4 " free"}')"
    echo "kernel: $(uname -r); $(rustc --version)"
    echo "starling-timeline sources (sha256 of src/*.rs): $(cat crates/starling-timeline/src/*.rs | sha256sum | cut -c1-12)"
    echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null); GLIBC_TUNABLES: ${GLIBC_TUNABLES:-unset}"
    echo "uptime: $(uptime)"
}

# Drops the page cache of every file under $1, so that the next reads come from the disk.
evict() {
    find "$1" -type f -exec dd if={} iflag=nocache count=0 status=none \; 2>/dev/null || true
}

# run PHASE ARGS...: one timeline-bench process, its output kept in OUT_DIR.
run() {
    local phase=$1
    shift
    local out="$OUT_DIR/timeline-$phase${TAG:+-$TAG}-$commit.txt"
    local prefix=()
    if [ "$PERF" = 1 ] && [[ $phase == celebrity-* || $phase == sustained-* ]]; then
        prefix=(perf record -g -F 199 -o "$BENCH_DIR/perf-timeline-$phase.data" --)
    fi
    echo "== $phase -> $out"
    {
        header
        echo "command: $bin $*"
        echo
        timeout "$PHASE_TIMEOUT" /usr/bin/time -v "${prefix[@]}" "$bin" "$@" 2>&1
        echo
        echo "uptime after: $(uptime)"
    } | tee "$out"
}

stream() {
    local found
    found=$(ls "$BENCH_DIR"/stream-e10000000-a1000000-s7-*.jsonl.zst 2>/dev/null | head -1 || true)
    if [ -z "$found" ]; then
        found="$BENCH_DIR/stream-e$EVENTS-a1000000-s7.jsonl.zst"
        [ -s "$found" ] || target/release/gen-stream --events "$EVENTS" --actors 1000000 --seed 7 \
            --out "$found" >&2
    fi
    echo "$found"
}

for phase in "${phases[@]}"; do
    case $phase in
    setup)
        if [ "${SETUP:-0}" = 1 ] || [ ! -s "$dir/graph.snapshot" ] || [ ! -d "$dir/store" ]; then
            rm -rf "$dir"
            run setup setup --dir "$dir" "${scale[@]}" --celebrity-followers "$CELEBRITY_FOLLOWERS"
        else
            echo "== setup: reusing $dir"
        fi
        ;;
    read)
        evict "$dir/store"
        run read read --dir "$dir" --heads 100000
        ;;
    celebrity-100k)
        run "$phase" fanout-celebrity --dir "$dir" --heads 100000 --length 500 --active random
        ;;
    celebrity-2m)
        run "$phase" fanout-celebrity --dir "$dir" --heads "$CELEBRITY_FOLLOWERS" --length 50 \
            --active followers
        ;;
    sustained-followers)
        run "$phase" fanout-sustained --dir "$dir" --heads 1000000 --length 50 \
            --authors followers --celebrity-threshold 100000 --seconds 120
        ;;
    sustained-zipf)
        run "$phase" fanout-sustained --dir "$dir" --heads 1000000 --length 50 \
            --authors zipf --celebrity-threshold 100000 --seconds 120
        ;;
    sustained-followers-nocelebrity)
        run "$phase" fanout-sustained --dir "$dir" --heads 1000000 --length 50 \
            --authors followers --celebrity-threshold none --seconds 120
        ;;
    e2e-off)
        run "$phase" e2e --dir "$dir" --stream "$(stream)" --events "$EVENTS" --timelines off
        ;;
    e2e-on)
        run "$phase" e2e --dir "$dir" --stream "$(stream)" --events "$EVENTS" --heads 100000 \
            --length 500 --timelines on
        ;;
    *)
        echo "unknown phase \`$phase\`" >&2
        exit 2
        ;;
    esac
done
