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
#          answer known), each sent once and checked (compare/content.mjs), then driven with
#          grpc-load for DURATION at concurrency 16, every answer under load checked.
#
# usage: crates/starling-bench/run-network.sh [load] [serve]
# environment:
#   ACTORS (5500000), FOLLOWS (160000000), POSTS (5200000: ~51M activity events), SEED (7)
#   NET_DIR (target/bench-cache/network-aACTORS-fFOLLOWS-pPOSTS-sSEED), OUT_DIR
#   (crates/starling-bench/results), RESTARTS (3), DURATION (10s), REQUESTS (2000)
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
work=$(mktemp -d)
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

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
    rm -rf "$data"
    timed import-follows "$bin" import-follows "$csv" --data-dir "$data" 2>"$work/import.log"
    grep -o 'import finished.*' "$work/import.log" | sed 's/\x1b\[[0-9;]*m//g' || true
    echo "after the import: $(du -sb "$data" | cut -f1) bytes on disk"
    timed replay "$bin" replay "$activity" --data-dir "$data" --log-format json 2>"$work/replay.log"
    grep '"replay finished"' "$work/replay.log" | tail -n 1
    echo "after the replay: $(du -sb "$data" | cut -f1) bytes on disk"
    touch "$data/.loaded"
}

for phase in $PHASES; do
    {
        echo "== network, phase $phase"
        echo "commit: $commit, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(lscpu | sed -n 's/^Model name: *//p')"
        echo "network: $ACTORS actors, $FOLLOWS follows (gen-follows, seed $SEED), activity: starling gen --actors $ACTORS --follows 0 --posts $POSTS --seed $SEED"
        "${phase}_phase"
    } 2>&1 | tee "$OUT_DIR/network-$phase-$commit.txt"
done
