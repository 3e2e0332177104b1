#!/usr/bin/env bash
# Two builds' durable replay of the bulk network (`starling gen --actors 100000 --follows
# 3000000 --posts 1000000 --seed 7`), in turn: NEW, BASE, NEW, BASE, ... Each run replays the
# whole file into a fresh data directory under `/usr/bin/time -v`, and prints the replay's own
# summary line and the process's times and peak RSS. Alternating the builds spreads the
# machine's drift over both.
#
# usage: crates/starling-bench/run-replay-ab.sh BASE_BIN NEW_BIN
# environment:
#   ROUNDS (2): pairs of runs.
#   BENCH_DIR (target/bench-cache/ab): where the generated file is kept between runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:?usage: run-replay-ab.sh BASE_BIN NEW_BIN}
new=${2:?usage: run-replay-ab.sh BASE_BIN NEW_BIN}
BENCH_DIR=${BENCH_DIR:-target/bench-cache/ab}
events="$BENCH_DIR/gen-a100000-f3000000-p1000000-s7.jsonl.zst"
if [ ! -s "$events" ]; then
    mkdir -p "$BENCH_DIR"
    "$base" gen --actors 100000 --follows 3000000 --posts 1000000 --seed 7 --out "$events"
fi
work=$(mktemp -d "$BENCH_DIR/replay-ab.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "# replay-ab: $events, one build after the other, $(date -u +%Y-%m-%d), $(nproc) cores"
for round in $(seq "${ROUNDS:-2}"); do
    for side in new base; do
        bin=$new
        [ "$side" = base ] && bin=$base
        rm -rf "$work/data"
        /usr/bin/time -v "$bin" replay --data-dir "$work/data" "$events" >"$work/log" 2>&1
        echo "== $side$round ($bin)"
        grep -o 'replay finished.*' "$work/log"
        grep -E "Elapsed|Maximum resident|User time|System time|Percent of CPU" "$work/log"
    done
done
