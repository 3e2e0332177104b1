#!/usr/bin/env bash
# Notifications with `notification-bench` (release build):
#   fan-in   the sample network (ACTORS actors) applied to fresh embedded stores with
#            notifications on and off, alternately in one process, ROUNDS times each;
#   read     a recipient with NOTIFICATIONS notifications (likes of one post): pages of 50 from
#            the top and from random cursors, and unread counts, READS times each.
# Each phase's output (with date, commit, command, machine and load average) goes to
# OUT_DIR/notifications-PHASE-COMMIT.txt.
#
# usage: crates/starling-bench/run-notification-bench.sh [fan-in|read...]  (default: both)
# environment: ACTORS (20000), ROUNDS (3), NOTIFICATIONS (1000000), READS (2000), SEED (7),
#   BENCH_DIR (target/bench-cache/notifications), OUT_DIR (crates/starling-bench/results)
set -euo pipefail

cd "$(dirname "$0")/../.."
ACTORS=${ACTORS:-20000}
ROUNDS=${ROUNDS:-3}
NOTIFICATIONS=${NOTIFICATIONS:-1000000}
READS=${READS:-2000}
SEED=${SEED:-7}
BENCH_DIR=${BENCH_DIR:-target/bench-cache/notifications}
OUT_DIR=${OUT_DIR:-crates/starling-bench/results}
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(fan-in read)

cargo build -q --release -p starling-bench --bin notification-bench
bin=target/release/notification-bench
commit=$(git rev-parse --short HEAD)
mkdir -p "$BENCH_DIR" "$OUT_DIR"
for phase in "${phases[@]}"; do
    case "$phase" in
        fan-in) args=(fan-in --dir "$BENCH_DIR" --actors "$ACTORS" --rounds "$ROUNDS" --seed "$SEED") ;;
        read) args=(read --dir "$BENCH_DIR" --notifications "$NOTIFICATIONS" --reads "$READS" --seed "$SEED") ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
    out="$OUT_DIR/notifications-$phase-$commit.txt"
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "commit: $commit"
        echo "command: $bin ${args[*]}"
        echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
        echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
        /usr/bin/time -f 'elapsed: %e s, peak rss: %M KiB' "$bin" "${args[@]}"
    } 2>&1 | tee "$out"
done
