#!/usr/bin/env bash
# GetTimeline served from Cassandra against the embedded store: the same generated network
# (`starling gen`) replayed into each, `starling serve` on it, the same GetTimeline requests
# (limit 50, from compare-requests) driven by grpc-load at a fixed concurrency. Before the load,
# every request is sent to each server and its answer compared with the one compare-requests
# computed from the file (compare/content.mjs); under load, every answer must then be the same
# bytes as that server's right answer (grpc-load -answers), and a wrong answer counts as an
# error. Needs Node 22 and the AppView's packages (scripts/setup-appview.sh) for the check.
#
# Usage: crates/starling-bench/run-cassandra-timeline.sh
# Env: ACTORS (default 2000), CONCURRENCY (16), DURATION (20s per run, after a 5s warm-up).
# Starts its own one-node Cassandra under target/cassandra-bench (wiped first) and stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
actors=${ACTORS:-2000}
concurrency=${CONCURRENCY:-16}
duration=${DURATION:-20s}
work=$(mktemp -d)
export STARLING_CASSANDRA_DATA="$PWD/target/cassandra-bench"
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
  scripts/cassandra.sh stop >/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

grpc_load=$(scripts/install-tools.sh | sed -n 's/^tools: grpc-load \([^ ]*\).*/\1/p')
node=$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')
cargo build -q --release -p starling --bin starling -p starling-bench --bin compare-requests
bin=${CARGO_TARGET_DIR:-target}/release
"$bin/starling" gen --actors "$actors" --seed 7 --out "$work/events.jsonl.zst" >&2
"$bin/compare-requests" --events "$work/events.jsonl.zst" --out "$work/requests" \
  --requests 2000 --limit 50 --seed 7 >&2
scripts/cassandra.sh fetch >&2
scripts/cassandra.sh wipe >&2
scripts/cassandra.sh start 1 >&2

# run NAME [store flags...]: replay, serve, warm up, measure, stop.
run() {
  local name=$1 addr=
  shift
  "$bin/starling" replay "$work/events.jsonl.zst" --data-dir "$work/$name" "$@" 2>&1 \
    | grep 'replay finished' >&2
  "$bin/starling" serve --data-dir "$work/$name" "$@" --http-addr 127.0.0.1:0 \
    --grpc-addr 127.0.0.1:0 --plc-url http://127.0.0.1:9 >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  until [ -n "$addr" ]; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/$name.err" >&2; exit 1; }
    sleep 0.2
    addr=$(sed -n 's/^starling: grpc listening on //p' "$work/$name.out")
  done
  local load=("$grpc_load" -addr "$addr" -method /bsky.Service/GetTimeline
    -data "$work/requests/timeline.bin" -expect "$work/requests/timeline.expect" -c "$concurrency")
  # A failed check still lets the load run: its wrong answers (`-` lines) count as errors there.
  echo "$name: content checked: $("$node" compare/content.mjs --starling "$addr" --as "$name" \
    --dir "$work/requests" --sets timeline)"
  load+=(-answers "$work/requests/timeline.$name.answers")
  "${load[@]}" -duration 5s >/dev/null
  local before after
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  echo "$name: $("${load[@]}" -duration "$duration" | grep '^grpc_load:')"
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  echo "$name: starling CPU $(( (after - before) / $(getconf CLK_TCK) )) s over $duration"
  kill "$pid"
  wait "$pid" || true
  pid=
}

echo "GetTimeline, $actors actors (starling gen --seed 7), c$concurrency, $duration, $(date -u +%F), $(git rev-parse --short HEAD)"
run embedded
run cassandra --store cassandra --cassandra-nodes 127.0.0.1:9042 --cassandra-keyspace bench_timeline
