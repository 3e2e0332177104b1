#!/usr/bin/env bash
# The 2024 network on one machine: 5.5M actors and 160M follows (GraphD's synthetic graph,
# imported), with ~50M events of activity on top (likes, posts, reposts, lists, blocks), then
# served and measured.
#
# Phases, each writing its raw output to OUT_DIR/network-PHASE-COMMIT.txt:
#   load   `gen-follows` writes the graph as a CSV and `starling import-follows` stores it; then
#          `starling gen --actors ACTORS --follows 0 --posts POSTS` writes the activity of the
#          same DIDs (`starling_core::sample::did`) to a file, and `starling replay` applies it.
#          Each step under GNU time (wall, peak RSS). The CSV, the activity file and the data
#          directory are kept in NET_DIR, and a step whose output is there is skipped.
#   serve  on the loaded data directory: RESTARTS starts of `starling serve` (spawn to
#          listening, VmRSS/VmHWM); `starling stats --usage` and the bytes on disk; then the
#          request sets of `compare-requests` (drawn from the activity file and the CSV, every
#          answer known, the known followers too: GetFollowsFollowing to 1 and to 25 of the
#          500 most followed tracked accounts), each sent once and checked
#          (compare/content.mjs), then driven with grpc-load for DURATION at concurrency 16,
#          every answer under load checked.
#
# usage: crates/starling-bench/run-network.sh [load] [serve]
# environment:
#   ACTORS (5500000), FOLLOWS (160000000), POSTS (5200000: ~51M activity events), SEED (7)
#   NET_DIR (target/bench-cache/network-aACTORS-fFOLLOWS-pPOSTS-sSEED), OUT_DIR
#   (crates/starling-bench/results), RESTARTS (3), DURATION (10s), REQUESTS (2000)
#   TIMELINE_CLASSES ("100 1000"): a GetTimeline set of readers following about each many
#     accounts, as the gRPC targets ask (empty for none: a small network has no such readers)
# Needs ~30 GB free in NET_DIR; `serve` needs Node 22 (scripts/setup-appview.sh) and grpc-load
# (scripts/install-tools.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
ACTORS=${ACTORS:-5500000}
FOLLOWS=${FOLLOWS:-160000000}
POSTS=${POSTS:-5200000}
SEED=${SEED:-7}
NET_DIR=${NET_DIR:-target/bench-cache/network-a$ACTORS-f$FOLLOWS-p$POSTS-s$SEED}
OUT_DIR=${OUT_DIR:-crates/starling-bench/results}
RESTARTS=${RESTARTS:-3}
DURATION=${DURATION:-10s}
REQUESTS=${REQUESTS:-2000}
TIMELINE_CLASSES=${TIMELINE_CLASSES-100 1000}
PHASES=${*:-load serve}
for phase in $PHASES; do
    case $phase in
    load | serve) ;;
    *) echo "unknown phase \`$phase\` (load, serve)" >&2; exit 2 ;;
    esac
done
[ -x /usr/bin/time ] || { echo "GNU time is missing: apt-get install -y time" >&2; exit 1; }
commit=$(git rev-parse --short HEAD)
cargo build -q --release -p starling --bin starling -p starling-bench --bin gen-follows \
    --bin compare-requests
release=${CARGO_TARGET_DIR:-target}/release
bin=$release/starling
csv=$NET_DIR/follows.csv.zst
activity=$NET_DIR/activity.jsonl.zst
data=$NET_DIR/data
mkdir -p "$NET_DIR" "$OUT_DIR"
source crates/starling-bench/lib.sh
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT

# Runs a command under GNU time; prints its wall time and peak RSS as `NAME: … s, peak RSS …`.
timed() {
    local name=$1
    shift
    /usr/bin/time -o "$work/$name.time" -f "%e %M" "$@"
    read -r wall kib <"$work/$name.time"
    awk -v n="$name" -v w="$wall" -v k="$kib" 'BEGIN {printf "%s: %.1f s, peak RSS %.2f GiB\n", n, w, k / 1048576}'
}

load_phase() {
    if [ -s "$csv" ]; then
        echo "follows: reusing $csv"
    else
        timed gen-follows "$release/gen-follows" --actors "$ACTORS" --follows "$FOLLOWS" \
            --seed "$SEED" --out "$csv.part" --side "$NET_DIR/follows.side.txt"
        mv "$csv.part" "$csv"
    fi
    if [ -s "$activity" ]; then
        echo "activity: reusing $activity"
    else
        # gen writes the file under a temporary name and renames it when complete.
        timed gen "$bin" gen --actors "$ACTORS" --follows 0 --posts "$POSTS" --seed "$SEED" \
            --out "$activity" 2>&1 | grep -v '^\s*$' | tail -n 2
    fi
    echo "follows file $(du -h "$csv" | cut -f1), activity file $(du -h "$activity" | cut -f1)"
    if [ -e "$data/.loaded" ]; then
        echo "data: $data is loaded already"
        return
    fi
    if [ -e "$data/.imported" ]; then
        # A replay stopped part-way resumes where it stopped: only this run is timed.
        echo "data: the import is done; the replay resumes"
    else
        rm -rf "$data"
        timed import-follows "$bin" import-follows "$csv" --data-dir "$data" 2>"$work/import.log"
        grep -o 'import finished.*' "$work/import.log" | sed 's/\x1b\[[0-9;]*m//g' || true
        echo "after the import: $(du -sb "$data" | cut -f1) bytes on disk"
        touch "$data/.imported"
    fi
    timed replay "$bin" replay "$activity" --data-dir "$data" --log-format json 2>"$work/replay.log"
    grep '"replay finished"' "$work/replay.log" | tail -n 1
    echo "after the replay: $(du -sb "$data" | cut -f1) bytes on disk"
    touch "$data/.loaded"
}

# The request sets drawn from a sample: search-actors needs every handle in the model (see
# compare-requests --track).
SETS="GetTimeline:timeline $(for c in $TIMELINE_CLASSES; do printf 'GetTimeline:timeline-%s ' "$c"; done)GetFollowsFollowing:follows-following GetFollowsFollowing:follows-following-25 GetAuthorFeed:author-feed GetInteractionCounts:interaction-counts GetCountsForUsers:counts-for-users GetFollowers:followers GetNotifications:notifications GetUnreadNotificationCount:unread-count GetActorLikes:actor-likes GetListMembers:list-members"
# One actor in this many is tracked by the model the requests are drawn from.
TRACK_EVERY=32

# Draws the request sets into NET_DIR/requests once (about as long as the replay's decode), and
# again when a set is missing (drawn by an older compare-requests).
draw_requests() {
    local requests=$NET_DIR/requests drawn=1
    for s in $SETS; do [ -f "$requests/${s#*:}.bin" ] || drawn=; done
    if [ ! -e "$requests/.complete" ] || [ -z "$drawn" ]; then
        rm -rf "$requests.part"
        timed compare-requests "$release/compare-requests" --events "$activity" --imported "$csv" \
            --track "$TRACK_EVERY" --targets 25 ${TIMELINE_CLASSES:+--timeline-classes "${TIMELINE_CLASSES// /,}"} \
            --out "$requests.part" --requests "$REQUESTS" --limit 50 --seed "$SEED" \
            >"$NET_DIR/requests.txt"
        touch "$requests.part/.complete"
        rm -rf "$requests"
        mv "$requests.part" "$requests"
    fi
    sed 's/^/  /' "$NET_DIR/requests.txt"
}

serve_phase() {
    [ -e "$data/.loaded" ] || { echo "no loaded data directory in $data: run the load phase" >&2; exit 1; }
    local node grpc_load
    node=$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')
    grpc_load=$(scripts/install-tools.sh | sed -n 's/^tools: grpc-load \([^ ]*\).*/\1/p')
    # The first start after a load brings the graph snapshot up to date with the log and
    # builds the search index; the restarts after it are the ones an operator waits for.
    # The binary built above, not a fresh build: sources edited during a run must not change
    # what is measured half way.
    echo "== the first start after the load"
    BIN=$bin START_TIMEOUT_S=1800 crates/starling-bench/run-restart.sh "$data" 1
    echo "== restarts"
    BIN=$bin crates/starling-bench/run-restart.sh "$data" "$RESTARTS"
    echo "== the store"
    "$bin" stats --data-dir "$data"
    "$bin" stats --usage --data-dir "$data" | python3 -c "$USAGE_TABLE"
    echo "== request sets (compare-requests --track $TRACK_EVERY --imported)"
    draw_requests
    local requests=$NET_DIR/requests
    serve_grpc "$bin" "$data" "$work/serve.log"
    echo "== every request once, checked against the model (compare/content.mjs)"
    check_sets "$node" "$addr" "$requests" "$SETS" | tee "$work/content.txt"
    echo "== load: grpc-load -c 16 -duration $DURATION, one HTTP/2 connection, every answer checked"
    for s in $SETS; do
        load_set "$grpc_load" "$addr" "$requests" "$s" "$DURATION" |
            sed "s/^grpc_load:/network: ${s#*:}/" | tee -a "$work/load.txt"
    done
    echo "serve $(server_memory)"
    stop_server
    local n_right
    n_right=$(grep -c '"starling":0}$' "$work/content.txt" || true)
    if [ "$n_right" -ne "$(wc -w <<<"$SETS")" ] || grep -q " errors=[^0]" "$work/load.txt"; then
        echo "network: FAILED: a wrong answer, an error, or a set not checked" >&2
        exit 1
    fi
}

# `stats --usage` as one row per kind, largest first, and the bytes on disk per record.
USAGE_TABLE=$(cat <<'PY'
import json, sys
usage = json.load(sys.stdin)
kinds = sorted(usage["kinds"].items(), key=lambda kv: -kv[1]["bytes"])
total = sum(v["bytes"] for _, v in kinds)
records = sum(v["entries"] for k, v in kinds if k.startswith("record "))
print("%-46s %11s %14s %8s" % ("kind", "entries", "bytes", "B/entry"))
for kind, v in kinds:
    print("%-46s %11d %14d %8.1f" % (kind, v["entries"], v["bytes"], v["bytes"] / max(v["entries"], 1)))
disk = usage["disk_bytes"]
print("before compression: %d bytes; on disk: %d bytes (%.3f of it)" % (total, disk, disk / total))
print("records stored (tombstones included): %d; on disk per record, everything included: %.0f bytes"
      % (records, disk / max(records, 1)))
PY
)

for phase in $PHASES; do
    {
        echo "== network, phase $phase"
        echo "commit: $commit, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(lscpu | sed -n 's/^Model name: *//p')"
        echo "network: $ACTORS actors, $FOLLOWS follows (gen-follows, seed $SEED), activity: starling gen --actors $ACTORS --follows 0 --posts $POSTS --seed $SEED"
        "${phase}_phase"
    } 2>&1 | tee "$OUT_DIR/network-$phase-$commit.txt"
done
