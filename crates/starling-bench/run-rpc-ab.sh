#!/usr/bin/env bash
# Two builds of Starling side by side on the comparison's read RPCs, every answer checked: the
# before and after of a read-path change, measured in one session on one store.
#
# The store is the bulk-scale network (`starling gen --actors 100000 --follows 3000000 --posts
# 1000000 --seed 7`, replayed by NEW into a fresh data directory) and the request sets are the
# comparison's (`compare-requests`, as compare/run.sh draws them). BASE and NEW serve at once,
# each its own copy of the store. Each first gets every request once and has its answer
# checked against what the generated file says it must be (compare/content.mjs); then each
# round drives every RPC with grpc-load for DURATION at concurrency 16 over one HTTP/2
# connection, on BASE and NEW in turn (which goes first alternates by round), checking every
# answer under load against the bytes checked right (a wrong answer is an error). Runs of the
# two builds on one RPC follow each other within seconds, so a machine whose speed drifts
# (this one's did by a third within minutes) slows both alike; the ratio of each such pair is
# the figure, not the ratio of two medians taken minutes apart.
#
# Prints one line per run (`ab: ROUND BUILD RPC rps=… p99_ms=… errors=… checked=…
# cpu_us=…`, the last the server's CPU per call) and each server's peak RSS, then per RPC each
# build's median rate and the median over rounds of NEW's rate and CPU per call over BASE's.
# Exits 1 on any wrong answer or error.
#
# usage: crates/starling-bench/run-rpc-ab.sh BASE NEW
#   BASE, NEW  two `starling` binaries (build the older commit with its own CARGO_TARGET_DIR)
# environment:
#   ROUNDS (2), DURATION (10s), SETS (the RPC sets below), BENCH_DIR (target/bench-cache/compare)
#   DATA_DIR: a data directory that already holds the replay (skips it, ~7 minutes)
#   REQUESTS_DIR: the request sets `compare-requests` already drew from the events, as drawn
#     here (`--requests 2000 --limit 50 --seed 7`; skips it, ~5 minutes)
#   BASE_DATA_DIR: a second such directory that BASE serves (by default a copy of DATA_DIR; to
#     compare two stores of the same network, e.g. written by two builds, give both builds the
#     same binary)
# Requires Node 22 (scripts/setup-appview.sh) and grpc-load (scripts/install-tools.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:?usage: run-rpc-ab.sh BASE NEW}
new=${2:?usage: run-rpc-ab.sh BASE NEW}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10s}
BENCH_DIR=${BENCH_DIR:-target/bench-cache/compare}
SETS=${SETS:-"GetAuthorFeed:author-feed GetInteractionCounts:interaction-counts GetCountsForUsers:counts-for-users GetFollowers:followers GetNotifications:notifications GetUnreadNotificationCount:unread-count"}
node=$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')
grpc_load=$(scripts/install-tools.sh | sed -n 's/^tools: grpc-load \([^ ]*\).*/\1/p')
# Built with `starling`, as the other scripts build it: the same features, so no rebuild.
cargo build -q --release -p starling --bin starling -p starling-bench --bin compare-requests

source crates/starling-bench/lib.sh
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT
echo "ab: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, BASE $base, NEW $new"

events="$BENCH_DIR/gen-a100000-f3000000-p1000000-s7.jsonl.zst"
if [ ! -s "$events" ]; then
    mkdir -p "$BENCH_DIR"
    "$new" gen --actors 100000 --follows 3000000 --posts 1000000 --seed 7 --out "$events"
fi
data=${DATA_DIR:-}
if [ -z "$data" ]; then
    data="$work/data"
    "$new" replay "$events" --data-dir "$data" 2>&1 | grep -v progress
fi
requests=${REQUESTS_DIR:-}
if [ -z "$requests" ]; then
    requests="$work/requests"
    "${CARGO_TARGET_DIR:-target}/release/compare-requests" --events "$events" --out "$requests" \
        --requests 2000 --limit 50 --seed 7 >/dev/null
fi

# The peak resident memory of the process $1 so far, in MiB.
peak_rss() {
    awk '/^VmHWM:/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"
}

base_data=${BASE_DATA_DIR:-}
if [ -z "$base_data" ]; then
    base_data="$work/base-data"
    cp -a "$data" "$base_data"
fi
declare -A pid at dir
stop_servers() {
    for p in "${pid[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
}
trap 'stop_servers; rm -rf "$work"' EXIT
for build in BASE NEW; do
    bin=$base store=$base_data
    [ "$build" = NEW ] && bin=$new store=$data
    serve_grpc "$bin" "$store" "$work/serve-$build.log"
    pid[$build]=$server at[$build]=$addr
    server=
    # Each build's own answers, so that a change in the bytes of a right answer is no error.
    dir[$build]="$work/requests-$build"
    cp -r "$requests" "${dir[$build]}"
done

runs="$work/runs.txt"
say() { tee -a "$runs"; }
for build in BASE NEW; do
    check_sets "$node" "${at[$build]}" "${dir[$build]}" "$SETS" | sed "s/^/ab: content $build /" | say
done
for round in $(seq "$ROUNDS"); do
    order="BASE NEW"
    [ $((round % 2)) = 0 ] && order="NEW BASE"
    for s in $SETS; do
        for build in $order; do
            line=$(load_set_cpu "$grpc_load" "${at[$build]}" "${dir[$build]}" "$s" "$DURATION" \
                "${pid[$build]}")
            get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
            echo "ab: $round $build ${s%%:*} rps=$(get rps) p99_ms=$(get p99_ms)" \
                "errors=$(get errors) checked=$(get answers_checked) cpu_us=$(get cpu_us)" | say
        done
    done
done
for build in BASE NEW; do
    echo "ab: $build peak RSS $(peak_rss "${pid[$build]}") MiB" | say
done
python3 - "$runs" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) >= 9 and parts[0] == "ab:" and parts[4].startswith("rps="):
        fields = dict(p.split("=", 1) for p in parts[4:])
        runs.setdefault(parts[3], {}).setdefault(parts[1], {})[parts[2]] = fields
print("%-28s %11s %11s %9s %12s" % ("RPC", "BASE req/s", "NEW req/s", "NEW/BASE", "CPU/call"))
for rpc, by in runs.items():
    # A run that answered nothing has no CPU per call ("-"): it fails the check below.
    pairs = [(r["BASE"], r["NEW"]) for r in by.values()
             if len(r) == 2 and "-" not in (r["BASE"]["cpu_us"], r["NEW"]["cpu_us"])]
    if not pairs:
        print("%-28s no pair of runs that answered" % rpc)
        continue
    rate = lambda b: statistics.median(float(p[b]["rps"]) for p in pairs)
    ratio = lambda f: statistics.median(float(n[f]) / float(b[f]) for b, n in pairs)
    print("%-28s %11.0f %11.0f %9.3f %12.3f"
          % (rpc, rate(0), rate(1), ratio("rps"), ratio("cpu_us")))
PY
# Every set checked, every answer right, no error under load.
n_content=$(grep -c '^ab: content .*"starling":0}$' "$runs" || true)
n_sets=$(wc -w <<<"$SETS")
if [ "$n_content" -ne $((2 * n_sets)) ] || grep -q "errors=[^0]" "$runs"; then
    echo "ab: FAILED: a wrong answer, an error, or a set not checked" >&2
    exit 1
fi
