#!/usr/bin/env bash
# Restart of `starling serve` on a data directory that already holds a network (for the 2024
# scale, the one `run-graph-bench.sh` imports with KEEP_DATA=1): RESTARTS starts, each from
# spawn to the `starling: http listening on` line, with VmRSS and VmHWM then, and the store's
# `actor table loaded` and `graph loaded` log lines; each start ends with SIGTERM and a clean
# exit, which leaves the actor snapshot the next start reads. Listens on 127.0.0.1 only.
#
# usage: crates/starling-bench/run-restart.sh DATA_DIR [RESTARTS (3)]
# environment: START_TIMEOUT_S (180): the longest a start may take (the first start after a
#   bulk load rebuilds the search index, minutes at the 2024 scale)
#   BIN (target/release/starling, built first): the binary to start
#   REBUILD_SEARCH=1: removes DATA_DIR/search before each start, so that each rebuilds it
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:?usage: run-restart.sh DATA_DIR [RESTARTS]}
restarts=${2:-3}
# Bounds of each wait, in tenths of a second.
START_TIMEOUT=$((${START_TIMEOUT_S:-180} * 10))
STOP_TIMEOUT=600
[ -d "$data" ] || { echo "no data directory \`$data\`" >&2; exit 1; }
bin=${BIN:-target/release/starling}
[ -n "${BIN:-}" ] || cargo build -q --release -p starling --bin starling
echo "binary: $("$bin" --version); checkout: $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Each thread name's CPU seconds so far: the store's background compaction shares the cores
# with the load.
thread_cpu() {
    for task in /proc/"$1"/task/*; do
        echo "$(cat "$task/comm") $(awk '{print $14 + $15}' "$task/stat")"
    done | awk -v hz="$(getconf CLK_TCK)" '{cpu[$1] += $2}
        END {for (name in cpu) if (cpu[name] > 0) printf "%s %.2f  ", name, cpu[name] / hz}'
}
log=$(mktemp)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -f "$log"' EXIT
for i in $(seq 1 "$restarts"); do
    [ "${REBUILD_SEARCH:-}" = 1 ] && rm -rf "$data/search"
    started=$(date +%s.%N)
    RUST_LOG=info "$bin" serve --data-dir "$data" --http-addr 127.0.0.1:0 \
        --plc-url http://127.0.0.1:9 >"$log" 2>&1 &
    pid=$!
    for _ in $(seq "$START_TIMEOUT"); do
        grep -q "starling: http listening on" "$log" && break
        kill -0 "$pid" 2>/dev/null || { echo "start $i: serve exited" >&2; cat "$log" >&2; exit 1; }
        sleep 0.1
    done
    grep -q "starling: http listening on" "$log" || { echo "start $i: not listening" >&2; exit 1; }
    ready=$(date +%s.%N)
    memory=$(awk '/^VmRSS|^VmHWM/ {printf "%s %.2f GiB  ", $1, $2 / 1048576}' "/proc/$pid/status")
    echo "start $i: $(echo "$ready - $started" | bc) s to listening; $memory"
    echo "  CPU seconds by thread name at listening: $(thread_cpu "$pid")"
    grep -o 'actor table loaded.*\|graph snapshot read.*\|graph loaded.*\|rebuilt the search index.*' "$log" | sed 's/^/  /'
    kill -TERM "$pid"
    for _ in $(seq "$STOP_TIMEOUT"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    wait "$pid" || { echo "start $i: unclean exit" >&2; exit 1; }
    pid=
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
