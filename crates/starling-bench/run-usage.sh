#!/usr/bin/env bash
# Bytes per record kind, the inputs of ARCHITECTURE.md's resource model: `starling stats
# --usage` on a store holding the bulk-scale network (`starling gen --actors 100000 --follows
# 3000000 --posts 1000000 --seed 7`, replayed into a fresh data directory), printed as one row
# per kind (entries, bytes before compression, bytes per entry) and the store's bytes on disk.
#
# usage: crates/starling-bench/run-usage.sh
# environment:
#   DATA_DIR: a data directory that already holds that replay (skips the replay, ~7 minutes).
#   BENCH_DIR (target/bench-cache/compare): where the generated file is kept between runs.
#   BIN and REV: measure the binary BIN, built from commit REV (to compare with an earlier
#     commit in the same session), instead of building this tree's.
#   KEEP_DIR: replay into this new directory and keep it (to serve it afterwards).
set -euo pipefail
cd "$(dirname "$0")/../.."
BENCH_DIR=${BENCH_DIR:-target/bench-cache/compare}
if [ -n "${BIN:-}" ]; then
    starling=$BIN
    rev=${REV:?REV names the commit BIN was built from}
else
    cargo build -q --release -p starling --bin starling
    starling=target/release/starling
    rev=$(git rev-parse --short HEAD)
fi
echo "commit: $rev, $(date -u +%Y-%m-%d), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB"
data=${DATA_DIR:-}
if [ -z "$data" ]; then
    events="$BENCH_DIR/gen-a100000-f3000000-p1000000-s7.jsonl.zst"
    if [ ! -s "$events" ]; then
        mkdir -p "$BENCH_DIR"
        "$starling" gen --actors 100000 --follows 3000000 --posts 1000000 --seed 7 \
            --out "$events"
    fi
    if [ -n "${KEEP_DIR:-}" ]; then
        [ ! -e "$KEEP_DIR" ] || { echo "run-usage.sh: $KEEP_DIR already exists" >&2; exit 2; }
        data=$KEEP_DIR
    else
        data=$(mktemp -d)
        trap 'rm -rf "$data"' EXIT
    fi
    /usr/bin/time -f "replay: %e s, peak RSS %M KB" \
        "$starling" replay "$events" --data-dir "$data" 2>&1 | grep -v progress
fi
"$starling" stats --data-dir "$data"
table=$(cat <<'PY'
import json, sys
usage = json.load(sys.stdin)
kinds = sorted(usage["kinds"].items(), key=lambda kv: -kv[1]["bytes"])
total = sum(v["bytes"] for _, v in kinds)
print("%-46s %10s %13s %8s" % ("kind", "entries", "bytes", "B/entry"))
for kind, v in kinds:
    print("%-46s %10d %13d %8.1f" % (kind, v["entries"], v["bytes"], v["bytes"] / max(v["entries"], 1)))
disk = usage["disk_bytes"]
print("before compression: %d bytes; on disk: %d bytes (%.3f of it)" % (total, disk, disk / total))
PY
)
"$starling" stats --usage --data-dir "$data" | python3 -c "$table"
