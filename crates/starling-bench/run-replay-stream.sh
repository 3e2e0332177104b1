#!/usr/bin/env bash
# Durable replay of a large generated network with no event file on disk: `starling gen --out -`
# piped into `starling replay -`, into a fresh data directory. Reports the rate over the whole
# stream, over its first and last tenth (does the rate hold as the store grows?), the peak RSS,
# and the store's bytes on disk.
#
# The tenths are read from replay's progress lines (every 5 s, `--log-format json`), with the
# time at a tenth's boundary interpolated between two lines. The first tenth is measured from
# the first progress line, so the seconds gen spends drawing the graph before its first event
# are not counted against it. gen runs on the same 2 cores (about 1 µs of CPU per event).
#
# usage: crates/starling-bench/run-replay-stream.sh
# environment:
#   ACTORS (870000), FOLLOWS (26100000), POSTS (8700000), SEED (7): the network; the defaults
#     make about 100M events (2 per actor, the follows, ~8.3 activity events per post).
#   DATA_DIR: where the store goes (default: a temporary directory, removed at the end; a
#     given one must not exist yet and is kept). The default network needs ~35 GB.
#   OUT_DIR (crates/starling-bench/results): the raw output goes to
#     OUT_DIR/replay-stream-COMMIT.txt as well as stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
ACTORS=${ACTORS:-870000}
FOLLOWS=${FOLLOWS:-26100000}
POSTS=${POSTS:-8700000}
SEED=${SEED:-7}
OUT_DIR=${OUT_DIR:-crates/starling-bench/results}
commit=$(git rev-parse --short HEAD)
cargo build -q --release -p starling --bin starling
bin=${CARGO_TARGET_DIR:-target}/release/starling

work=$(mktemp -d)
data=${DATA_DIR:-$work/data}
if [ -e "$data" ]; then
    echo "run-replay-stream.sh: $data already exists; name a new directory" >&2
    exit 2
fi
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT_DIR"
out="$OUT_DIR/replay-stream-$commit.txt"

{
    echo "commit: $commit, $(date -u +%Y-%m-%d), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB"
    echo "network: starling gen --actors $ACTORS --follows $FOLLOWS --posts $POSTS --seed $SEED --out -"
    "$bin" gen --actors "$ACTORS" --follows "$FOLLOWS" --posts "$POSTS" --seed "$SEED" --out - \
        2>"$work/gen.log" |
        /usr/bin/time -o "$work/time.txt" -f "replay: %e s, peak RSS %M KB" \
            "$bin" replay - --data-dir "$data" --log-format json 2>"$work/replay.log"
    grep -v '^\s*$' "$work/gen.log" | tail -1
    cat "$work/time.txt"
    echo "store on disk: $(du -sb "$data" | cut -f1) bytes"
    python3 - "$work/replay.log" <<'PY'
import json, sys
from datetime import datetime

def seconds(line):
    return datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()

samples, total, end = [], None, None
for raw in open(sys.argv[1]):
    try:
        line = json.loads(raw)
    except ValueError:
        continue
    fields = line.get("fields", {})
    if fields.get("message") == "progress" and fields.get("events", 0) > 0:
        samples.append((seconds(line), fields["events"]))
    elif fields.get("message") == "replay finished":
        total, end = fields["events"], seconds(line)
if total is None or len(samples) < 2:
    sys.exit("no `replay finished` line, or too few progress lines: see the replay log")
samples.append((end, total))

def time_at(events):
    """The time the replay reached `events`, interpolated between two samples."""
    for (t0, e0), (t1, e1) in zip(samples, samples[1:]):
        if e0 <= events <= e1:
            return t0 + (t1 - t0) * (events - e0) / max(e1 - e0, 1)
    return samples[-1][0]

first_start, first_events = samples[0]
tenth = total / 10
if first_events > tenth / 2:
    sys.exit("the first progress line is already at %d of %d events: too few to measure a tenth"
             % (first_events, total))
first = (tenth - first_events) / (time_at(tenth) - first_start)
last = tenth / (end - time_at(total - tenth))
print("events: %d in %.1f s from the first progress line: %.0f events/s" %
      (total, end - first_start, (total - first_events) / (end - first_start)))
print("first tenth: %.0f events/s; last tenth: %.0f events/s; last/first = %.2f (target >= 0.50)" %
      (first, last, last / first))
for idx in range(10):
    lo, hi = idx * tenth, (idx + 1) * tenth
    start = max(lo, first_events)
    print("  tenth %d: %.0f events/s" % (idx + 1, (hi - start) / (time_at(hi) - time_at(start))))
PY
    echo "exit: 0"
} 2>&1 | tee "$out"
