#!/usr/bin/env bash
# Two builds of Starling side by side on the comparison's read RPCs, every answer checked: the
# before and after of a read-path change, measured in one session on one store.
#
# The store is the bulk-scale network (`starling gen --actors 100000 --follows 3000000 --posts
# 1000000 --seed 7`, replayed by NEW into a fresh data directory) and the request sets are the
# comparison's (`compare-requests`, as compare/run.sh draws them). Each round serves the store
# with BASE, then with NEW; each serve first sends every request once and checks its answer
# against what the generated file says it must be (compare/content.mjs), then drives each RPC
# with grpc-load for DURATION at concurrency 16 over one HTTP/2 connection, checking every
# answer under load against the bytes checked right (a wrong answer is an error). The rounds
# alternate so that a machine that slows down mid-run slows both builds alike.
#
# Prints one line per run (`ab: ROUND BUILD RPC rps=… p99_ms=… errors=… checked=…`) and the
# server's peak RSS after each serve's runs, then per RPC the median rate of each build and NEW's
# over BASE's. Exits 1 on any wrong answer or error.
#
# usage: crates/starling-bench/run-rpc-ab.sh BASE NEW
#   BASE, NEW  two `starling` binaries (build the older commit with its own CARGO_TARGET_DIR)
# environment:
#   ROUNDS (2), DURATION (10s), SETS (the RPC sets below), BENCH_DIR (target/bench-cache/compare)
#   DATA_DIR: a data directory that already holds the replay (skips it, ~7 minutes)
#   BASE_DATA_DIR: a second such directory that BASE serves instead (to compare two stores of
#     the same network, e.g. written by two builds, with BASE and NEW the same binary)
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
requests="$work/requests"
"${CARGO_TARGET_DIR:-target}/release/compare-requests" --events "$events" --out "$requests" --requests 2000 \
    --limit 50 --seed 7 >/dev/null

# The server's peak resident memory so far, in MiB.
peak_rss() {
    awk '/^VmHWM:/ {printf "%.0f", $2 / 1024}' "/proc/$server/status"
}

runs="$work/runs.txt"
say() { tee -a "$runs"; }
for round in $(seq "$ROUNDS"); do
    for build in BASE NEW; do
        bin=$base dir=${BASE_DATA_DIR:-$data}
        [ "$build" = NEW ] && bin=$new dir=$data
        serve_grpc "$bin" "$dir" "$work/serve.log"
        check_sets "$node" "$addr" "$requests" "$SETS" | sed "s/^/ab: content $round $build /" | say
        for s in $SETS; do
            line=$(load_set "$grpc_load" "$addr" "$requests" "$s" "$DURATION")
            get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
            echo "ab: $round $build ${s%%:*} rps=$(get rps) p99_ms=$(get p99_ms)" \
                "errors=$(get errors) checked=$(get answers_checked)" | say
        done
        echo "ab: $round $build peak RSS $(peak_rss) MiB" | say
        stop_server
    done
done
python3 - "$runs" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) >= 5 and parts[0] == "ab:" and parts[4].startswith("rps="):
        rates.setdefault(parts[3], {}).setdefault(parts[2], []).append(float(parts[4][4:]))
print("%-28s %12s %12s %8s" % ("RPC", "BASE req/s", "NEW req/s", "NEW/BASE"))
for rpc, by in rates.items():
    base, new = statistics.median(by["BASE"]), statistics.median(by["NEW"])
    print("%-28s %12.0f %12.0f %8.2f" % (rpc, base, new, new / base))
PY
# Every set checked, every answer right, no error under load.
n_content=$(grep -c '^ab: content .*"starling":0}$' "$runs" || true)
n_sets=$(wc -w <<<"$SETS")
if [ "$n_content" -ne $((ROUNDS * 2 * n_sets)) ] || grep -q "errors=[^0]" "$runs"; then
    echo "ab: FAILED: a wrong answer, an error, or a set not checked" >&2
    exit 1
fi
