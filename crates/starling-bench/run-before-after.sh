#!/usr/bin/env bash
# Replay throughput and GetTimeline of two revisions, measured in the same run, the two in turn,
# so that a change can be compared with what came before it on the same machine at the same time.
#
# usage: crates/starling-bench/run-before-after.sh BASE_REV [NEW_REV]
#
# 1. Builds release `starling` for BASE_REV and NEW_REV (default HEAD) in two git worktrees,
#    WORK_DIR/base and WORK_DIR/new, each with its own target/ (created once, moved to the
#    revision on later runs, so a later run rebuilds only what changed): a binary is then
#    exactly its commit, whatever is edited or committed in this tree meanwhile. IN_TREE=1
#    builds NEW_REV in this tree's target/release instead, when it is HEAD and no tracked file
#    under crates/ or Cargo.* differs from it (the script stops if the tree moves during the
#    build). `gen-stream`, `compare-requests` and the load generators (`grpc-load`
#    and `grpc-answers`) come from NEW_REV.
# 2. Replay: the stream of EVENTS events (`gen-stream`, kept in BENCH_DIR under the same name as
#    run-replay-bench.sh gives it, so either script reuses the other's) is replayed into a fresh
#    data directory by each binary, REPLAY_PAIRS pairs, the order alternating (base new, new
#    base, ...). Each run is timed on its own (GNU time; removing the previous data directory
#    and reading the stats are outside the timing). After each pair `starling stats --json` of
#    the two data directories must be identical (and identical to the first pair's): a
#    difference stops the script with exit status 1.
# 3. GetTimeline: each binary serves the data directory it replayed last (`starling serve`,
#    stored data only), both at once. The readers are `compare-requests`'s timeline set,
#    drawn from the same stream (REQUESTS random viewers whose followed accounts hold more than
#    a page, limit 50). Every reader's answer is fetched once from each server (`grpc-answers`:
#    this also builds every reader's timeline); each must be OK and non-empty, and the two
#    servers' answers must be identical (items, flags and cursor), or the script stops with exit
#    status 1. Then a WARMUP run of `grpc-load` at each, and TIMELINE_PAIRS pairs of DURATION
#    runs at CONCURRENCY calls in flight over one HTTP/2 connection, the order alternating;
#    `grpc-load -expect` checks every answer's item count against the checked one. Last, the
#    answers are fetched again (now from warm timelines) and must still be identical.
# Prints each run (with the load average before it and the CPU other processes used during
# it) and a summary: min / median / max per revision and of the ratio new/base pair by pair,
# also per CPU-second of the measured process (replay events per CPU-second, server CPU per
# GetTimeline request), which moves less than wall-clock rates when other load shares the cores.
# Output also goes to OUT_DIR/before-after-BASE-NEW[-TAG].txt. On 2 cores, with the binaries
# built and the stream cached, a run with the defaults takes ~16 minutes (8 replays of ~95 s,
# then ~4 minutes of GetTimeline); the first run also generates the stream (~1 minute).
#
# environment:
#   EVENTS (3000000), ACTORS (300000), SEED (7): the stream; TEMPLATES (../shared/data)
#   REPLAY_PAIRS (4), TIMELINE_PAIRS (4), DURATION (20s), WARMUP (5s), CONCURRENCY (16),
#   REQUESTS (2000), BENCH_DIR (target/bench-cache), WORK_DIR (target/before-after),
#   OUT_DIR (crates/starling-bench/results), IN_TREE (0), TAG (names a repeated run in the
#   output file's name, e.g. TAG=run2)
# Requires cargo, GNU time, jq.
set -euo pipefail

cd "$(dirname "$0")/../.."
source crates/starling-bench/lib.sh
root=$PWD
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 BASE_REV [NEW_REV]" >&2
    exit 2
fi
EVENTS=${EVENTS:-3000000}
ACTORS=${ACTORS:-300000}
SEED=${SEED:-7}
TEMPLATES=${TEMPLATES:-$root/../shared/data}
REPLAY_PAIRS=${REPLAY_PAIRS:-4}
TIMELINE_PAIRS=${TIMELINE_PAIRS:-4}
DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-5s}
CONCURRENCY=${CONCURRENCY:-16}
REQUESTS=${REQUESTS:-2000}
BENCH_DIR=${BENCH_DIR:-target/bench-cache}
WORK_DIR=${WORK_DIR:-target/before-after}
OUT_DIR=${OUT_DIR:-crates/starling-bench/results}
SERVE_START_TIMEOUT_S=300
STOP_TIMEOUT_S=60

[ -x /usr/bin/time ] || { echo "GNU time is missing: apt-get install -y time" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is missing: apt-get install -y jq" >&2; exit 1; }

base=$(git rev-parse --short=7 "$1^{commit}")
new=$(git rev-parse --short=7 "${2:-HEAD}^{commit}")
mkdir -p "$WORK_DIR" "$BENCH_DIR" "$OUT_DIR"
WORK_DIR=$(cd "$WORK_DIR" && pwd)

# A worktree at REV in DIR, created once and moved to REV on later runs.
worktree_at() {
    local dir=$1 rev=$2
    if [ ! -e "$dir/.git" ]; then
        git worktree add --detach "$dir" "$rev" >&2
    else
        if ! git -C "$dir" diff --quiet HEAD; then
            echo "$dir has local changes: remove it (git worktree remove --force $dir)" >&2
            exit 1
        fi
        git -C "$dir" checkout -q --detach "$rev"
    fi
}

base_src=$WORK_DIR/base
if [ "${IN_TREE:-0}" = 1 ] && [ "$(git rev-parse "$new")" = "$(git rev-parse HEAD)" ] &&
    git diff --quiet HEAD -- crates Cargo.toml Cargo.lock; then
    new_src=$root
else
    new_src=$WORK_DIR/new
fi
echo "== build: base $base in ${base_src#"$root"/}, new $new in $([ "$new_src" = "$root" ] && echo "this tree" || echo "${new_src#"$root"/}")"
worktree_at "$base_src" "$base"
[ "$new_src" = "$root" ] || worktree_at "$new_src" "$new"
(cd "$base_src" && cargo build --release -p starling --bin starling)
(cd "$new_src" && cargo build --release -p starling --bin starling -p starling-bench \
    --bin gen-stream --bin compare-requests --bin grpc-load --bin grpc-answers)
# The new tree may have moved while it built (another commit): the binary is then not NEW_REV.
if [ "$new_src" = "$root" ] && { [ "$(git rev-parse --short=7 HEAD)" != "$new" ] ||
    ! git diff --quiet HEAD -- crates Cargo.toml Cargo.lock; }; then
    echo "this tree changed during the build (now $(git rev-parse --short=7 HEAD)): run again" >&2
    exit 1
fi
base_bin=$base_src/target/release/starling
new_bin=$new_src/target/release/starling
tools=$WORK_DIR/tools
mkdir -p "$tools"
cp "$new_src/target/release/grpc-load" "$new_src/target/release/grpc-answers" "$tools/"

gen_hash=$(cat "$new_src"/crates/starling-bench/src/stream.rs "$new_src"/crates/starling-bench/src/templates.rs \
    "$new_src"/crates/starling-bench/src/bin/gen-stream.rs | sha256sum | cut -c1-12)
stream=$BENCH_DIR/stream-e$EVENTS-a$ACTORS-s$SEED-$gen_hash.jsonl.zst
if [ ! -s "$stream" ]; then
    "$new_src/target/release/gen-stream" --events "$EVENTS" --actors "$ACTORS" --seed "$SEED" \
        --templates "$TEMPLATES" --out "$stream"
fi
requests=$BENCH_DIR/requests-$(basename "$stream" .jsonl.zst)-r$REQUESTS
if [ ! -f "$requests/.complete" ]; then
    rm -rf "$requests"
    "$new_src/target/release/compare-requests" --events "$stream" --out "$requests" \
        --seed "$SEED" --requests "$REQUESTS" >"$requests.txt"
    touch "$requests/.complete"
fi

run=$WORK_DIR/run
rm -rf "$run"
mkdir -p "$run"
clk_tck=$(getconf CLK_TCK)
out=$OUT_DIR/before-after-$base-$new${TAG:+-$TAG}.txt
status=0

# Percent of one core that all processes used between two sys_ticks readings.
busy_pct() {
    awk -v sb="$1" -v sa="$2" -v cores="$(nproc)" 'BEGIN {
        split(sb, b, " "); split(sa, a, " ")
        printf "%.0f", (a[1] - b[1]) / (a[2] - b[2]) * cores * 100 }'
}
# user + system seconds from a GNU time -v file.
time_cpu() { awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$1"; }
bin_of() { if [ "$1" = base ]; then echo "$base_bin"; else echo "$new_bin"; fi; }
# The pair's order: base first in odd pairs, new first in even ones.
order_of() { if [ $(($1 % 2)) -eq 1 ]; then echo "base new"; else echo "new base"; fi; }

# One replay: role pair. Prints a `replay_result:` line and keeps the stats in run/.
replay_run() {
    local role=$1 pair=$2 bin data load sb sa t0 t1
    bin=$(bin_of "$role")
    data=$run/data-$role
    rm -rf "$data"
    mkdir -p "$data"
    load=$(loadavg)
    sb=$(sys_ticks)
    t0=$EPOCHREALTIME
    if ! /usr/bin/time -v -o "$run/replay-$role.time" "$bin" replay "$stream" --data-dir "$data" \
        >/dev/null 2>"$run/replay-$role.log"; then
        echo "replay by $role ($bin) failed:" >&2
        sed 's/\x1b\[[0-9;]*m//g' "$run/replay-$role.log" | tail -n 20 >&2
        return 1
    fi
    t1=$EPOCHREALTIME
    sa=$(sys_ticks)
    "$bin" stats --data-dir "$data" --json | jq -S . >"$run/stats-$role-$pair.json"
    awk -v role="$role" -v pair="$pair" -v events="$EVENTS" -v t0="$t0" -v t1="$t1" \
        -v cpu="$(time_cpu "$run/replay-$role.time")" -v busy="$(busy_pct "$sb" "$sa")" \
        -v rss="$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$run/replay-$role.time")" \
        -v load="$load" 'BEGIN {
            wall = t1 - t0
            printf "replay_result: role=%s pair=%d wall_s=%.2f events_per_s=%.0f cpu_cores=%.2f events_per_cpu_s=%.0f rss_mib=%.0f others_pct=%.0f load=%s\n",
                role, pair, wall, events / wall, cpu / wall, events / cpu, rss / 1024, busy - cpu / wall * 100, load
        }'
}

serve_pids=()
stop_serves() {
    local pid deadline
    for pid in "${serve_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${serve_pids[@]}"; do
        deadline=$((SECONDS + STOP_TIMEOUT_S))
        while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null || true
    done
    serve_pids=()
}

# Starts `starling serve` of role on its replayed data; sets serve_pid and grpc_port.
start_serve() {
    local role=$1 bin deadline spawned=$EPOCHREALTIME
    bin=$(bin_of "$role")
    "$bin" serve --data-dir "$run/data-$role" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 \
        --plc-url http://127.0.0.1:9 >"$run/serve-$role.out" 2>"$run/serve-$role.log" &
    serve_pid=$!
    serve_pids+=("$serve_pid")
    deadline=$((SECONDS + SERVE_START_TIMEOUT_S))
    grpc_port=""
    while [ -z "$grpc_port" ]; do
        grpc_port=$(sed -n 's/^starling: grpc listening on .*:\([0-9]*\)$/\1/p' "$run/serve-$role.out")
        [ -n "$grpc_port" ] && break
        if ! kill -0 "$serve_pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
            echo "starling serve ($role) did not report grpc listening" >&2
            sed 's/\x1b\[[0-9;]*m//g' "$run/serve-$role.log" | tail -n 20 >&2
            return 1
        fi
        sleep 0.2
    done
    awk -v role="$role" -v s="$spawned" -v e="$EPOCHREALTIME" -v port="$grpc_port" \
        -v rss="$(awk '$1 == "VmRSS:" {print $2}' "/proc/$serve_pid/status")" \
        'BEGIN {printf "serve %s: grpc on 127.0.0.1:%s, listening %.1f s after spawn, VmRSS %.0f MiB\n", role, port, e - s, rss / 1024}'
}

# Every reader's answer from one server: role file.
fetch_answers() {
    local role=$1 file=$2 port
    port=$([ "$role" = base ] && echo "$base_port" || echo "$new_port")
    "$tools/grpc-answers" -addr "127.0.0.1:$port" -method /bsky.Service/GetTimeline \
        -data "$requests/timeline.bin" >"$file"
}

# Checks one pass of answers: every answer OK and non-empty, the two servers' identical.
check_answers() {
    local pass=$1 a b n bad
    a=$run/answers-base-$pass.txt
    b=$run/answers-new-$pass.txt
    n=$(wc -l <"$a")
    echo "answers ($pass): $n readers; items per answer (base): $(awk '{print $3}' "$a" | sort -n | awk '{v[NR] = $1} END {printf "min %d, median %d, max %d", v[1], v[int((NR + 1) / 2)], v[NR]}')"
    echo "  answers equal to compare-requests' expected count (a full page): base $(paste -d' ' "$a" "$requests/timeline.expect" | awk '$3 == $(NF) {n++} END {print n + 0}'), new $(paste -d' ' "$b" "$requests/timeline.expect" | awk '$3 == $(NF) {n++} END {print n + 0}') of $n"
    for f in "$a" "$b"; do
        bad=$(awk '$2 != "OK" || $3 < 1' "$f" | wc -l)
        if [ "$bad" -ne 0 ]; then
            echo "WRONG: $bad answers in ${f##*/} are not OK or empty, e.g.: $(awk '$2 != "OK" || $3 < 1' "$f" | head -n 1 | cut -c1-200)"
            return 1
        fi
    done
    if ! cmp -s "$a" "$b"; then
        echo "WRONG: the two servers' answers differ for $(paste -d'\n' "$a" "$b" | awk 'NR % 2 == 1 {x = $0; next} x != $0 {n++} END {print n}') of $n readers; first difference:"
        diff "$a" "$b" | head -n 4 | cut -c1-400
        return 1
    fi
    echo "  base and new: identical (status, items, item URIs, SHA-256 of every encoded response)"
}

# One grpc-load run: role pair duration. Prints a `timeline_result:` line.
load_run() {
    local role=$1 pair=$2 duration=$3 port pid load sb sa pb pa t0 t1 name
    name=load-$role-$pair
    if [ "$role" = base ]; then port=$base_port pid=$base_pid; else port=$new_port pid=$new_pid; fi
    load=$(loadavg)
    sb=$(sys_ticks)
    pb=$(proc_ticks "$pid")
    t0=$EPOCHREALTIME
    /usr/bin/time -v -o "$run/$name.time" "$tools/grpc-load" -addr "127.0.0.1:$port" \
        -method /bsky.Service/GetTimeline -data "$requests/timeline.bin" -expect "$run/expect.txt" \
        -c "$CONCURRENCY" -connections 1 -duration "$duration" >"$run/$name.out" 2>&1 || true
    t1=$EPOCHREALTIME
    pa=$(proc_ticks "$pid")
    sa=$(sys_ticks)
    awk -v role="$role" -v pair="$pair" -v t0="$t0" -v t1="$t1" -v hz="$clk_tck" -v pb="$pb" -v pa="$pa" \
        -v gen="$(time_cpu "$run/$name.time")" -v busy="$(busy_pct "$sb" "$sa")" -v load="$load" '
        /^grpc_load:/ {for (i = 2; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}; found = 1}
        /wrong response size/ {wrong = $0}
        END {
            if (!found) {print "grpc-load printed no result"; exit 1}
            wall = t1 - t0; server = (pa - pb) / hz / wall * 100; g = gen / wall * 100
            printf "timeline_result: role=%s pair=%s rps=%s p50_ms=%s p99_ms=%s ok=%s errors=%s codes=%s server_pct=%.0f server_us_per_req=%.1f loadgen_pct=%.0f others_pct=%.0f load=%s\n",
                role, pair, v["rps"], v["p50_ms"], v["p99_ms"], v["ok"], v["errors"], v["codes"], server, server / 100 / v["rps"] * 1e6, g, busy - server - g, load
            if (wrong != "") print wrong
        }' "$run/$name.out"
}

# min / median / max of the values in stdin.
mmm() { sort -g | awk '{v[NR] = $1} END {printf "%s / %s / %s", v[1], (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[NR]}'; }
# A field of the result lines of one kind and role: kind role field.
field_of() {
    awk -v kind="$1" -v role="$2" -v key="$3" '$1 == kind ":" {
        delete v; for (i = 2; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}
        if (v["role"] == role) print v["pair"], v[key] }' "$run/results.txt" | sort -n | cut -d' ' -f2
}
summary_row() {
    local kind=$1 key=$2 label=$3 fmt=${4:-%.0f}
    local b n
    b=$(field_of "$kind" base "$key")
    n=$(field_of "$kind" new "$key")
    printf "| %s | %s | %s | %s |\n" "$label" \
        "$(awk -v f="$fmt" '{printf f "\n", $1}' <<<"$b" | mmm)" \
        "$(awk -v f="$fmt" '{printf f "\n", $1}' <<<"$n" | mmm)" \
        "$(paste -d' ' <(echo "$n") <(echo "$b") | awk '{printf "%.3f\n", $1 / $2}' | mmm)"
}

{
    trap stop_serves EXIT
    echo "== before and after: replay and GetTimeline"
    echo "base: $base ($(git log -1 --format='%cs %s' "$base" | cut -c1-100))"
    echo "new: $new ($(git log -1 --format='%cs %s' "$new" | cut -c1-100))$([ "$new_src" = "$root" ] && echo ", built in this tree" || echo ", built in a worktree")"
    echo "command: crates/starling-bench/run-before-after.sh $1${2:+ $2} (EVENTS=$EVENTS ACTORS=$ACTORS SEED=$SEED REPLAY_PAIRS=$REPLAY_PAIRS TIMELINE_PAIRS=$TIMELINE_PAIRS DURATION=$DURATION CONCURRENCY=$CONCURRENCY REQUESTS=$REQUESTS)"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; ram: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
    echo "disk: $(df -h "$WORK_DIR" | awk 'NR==2 {print $1 ", " $2 " total, " $4 " free"}')"
    echo "kernel: $(uname -r); $(rustc --version); go: $("$go" version | cut -d' ' -f3)"
    echo "stream: ${stream#"$root"/} ($EVENTS events, $ACTORS actors, seed $SEED, $(du -h "$stream" | cut -f1) compressed)"
    echo "readers: compare-requests' timeline set, ${requests#"$root"/}:"
    sed 's/^/  /' "$requests.txt"
    echo "uptime: $(uptime)"
    : >"$run/results.txt"

    echo
    echo "== replay: $REPLAY_PAIRS pairs, each binary into a fresh data directory, order alternating"
    for pair in $(seq 1 "$REPLAY_PAIRS"); do
        for role in $(order_of "$pair"); do
            replay_run "$role" "$pair" | tee -a "$run/results.txt"
        done
        if ! cmp -s "$run/stats-base-$pair.json" "$run/stats-new-$pair.json"; then
            echo "WRONG: the stats of the two data directories differ after pair $pair:"
            diff "$run/stats-base-$pair.json" "$run/stats-new-$pair.json" | head -n 20
            exit 1
        fi
        if ! cmp -s "$run/stats-base-$pair.json" "$run/stats-base-1.json"; then
            echo "WRONG: pair $pair's stats differ from pair 1's:"
            diff "$run/stats-base-1.json" "$run/stats-base-$pair.json" | head -n 20
            exit 1
        fi
        echo "stats after pair $pair: identical ($(jq -c '{actors, follows, posts, likes, reposts, blocks}' "$run/stats-base-$pair.json"))"
    done
    echo "stats (both, every pair):"
    jq -c . "$run/stats-base-1.json"

    echo
    echo "== GetTimeline: both binaries serve the data they replayed last"
    start_serve base
    base_port=$grpc_port base_pid=$serve_pid
    start_serve new
    new_port=$grpc_port new_pid=$serve_pid
    for role in base new; do
        sed 's/\x1b\[[0-9;]*m//g' "$run/serve-$role.log" | grep -E 'graph loaded|graph built|timelines' | head -n 3 | cut -c1-200 | sed "s/^/  $role: /" || true
    done
    echo
    echo "-- answers: every reader once from each server (cold: this builds every timeline)"
    for role in base new; do
        t0=$EPOCHREALTIME
        fetch_answers "$role" "$run/answers-$role-cold.txt"
        awk -v role="$role" -v t0="$t0" -v t1="$EPOCHREALTIME" -v n="$REQUESTS" \
            'BEGIN {printf "  %s: %d answers in %.1f s\n", role, n, t1 - t0}'
    done
    check_answers cold
    # Every answer during the load must hold as many items as the checked one.
    awk '{print "1 m " $3}' "$run/answers-base-cold.txt" >"$run/expect.txt"
    echo
    echo "-- warm-up: $WARMUP of grpc-load at each server"
    for role in base new; do
        load_run "$role" 0 "$WARMUP" | sed 's/^timeline_result:/warm-up:/'
    done
    echo
    echo "-- load: $TIMELINE_PAIRS pairs of $DURATION at c=$CONCURRENCY (one HTTP/2 connection), order alternating"
    for pair in $(seq 1 "$TIMELINE_PAIRS"); do
        for role in $(order_of "$pair"); do
            load_run "$role" "$pair" "$DURATION" | tee -a "$run/results.txt"
        done
    done
    echo
    echo "-- answers again (warm timelines)"
    for role in base new; do
        fetch_answers "$role" "$run/answers-$role-warm.txt"
    done
    check_answers warm
    if ! cmp -s "$run/answers-base-cold.txt" "$run/answers-base-warm.txt"; then
        echo "WRONG: warm answers differ from cold ones"
        exit 1
    fi
    echo "  warm answers identical to the cold ones"
    for role in base new; do
        pid=$([ "$role" = base ] && echo "$base_pid" || echo "$new_pid")
        echo "serve $role: VmRSS after the load $(awk '$1 == "VmRSS:" {printf "%.0f MiB", $2 / 1024}' "/proc/$pid/status")"
    done
    stop_serves

    echo
    echo "== summary: base $base, new $new (min / median / max; ratio new/base pair by pair)"
    echo
    echo "| figure | base $base | new $new | new/base |"
    echo "| --- | --- | --- | --- |"
    summary_row replay_result events_per_s "replay events/s"
    summary_row replay_result wall_s "replay wall s" "%.1f"
    summary_row replay_result rss_mib "replay peak RSS MiB"
    summary_row replay_result cpu_cores "replay CPU cores" "%.2f"
    summary_row replay_result events_per_cpu_s "replay events per CPU-second"
    summary_row timeline_result rps "GetTimeline req/s"
    summary_row timeline_result p50_ms "GetTimeline p50 ms" "%.3f"
    summary_row timeline_result p99_ms "GetTimeline p99 ms" "%.3f"
    summary_row timeline_result server_pct "GetTimeline server CPU %"
    summary_row timeline_result server_us_per_req "GetTimeline server CPU µs per request" "%.1f"
    echo
    echo "others' CPU during the runs (% of one core): replay $(awk '$1 == "replay_result:" {sub(/.*others_pct=/, ""); print $1}' "$run/results.txt" | mmm), GetTimeline $(awk '$1 == "timeline_result:" {sub(/.*others_pct=/, ""); print $1}' "$run/results.txt" | mmm)"
    echo "GetTimeline errors (calls not OK, or with another item count than the checked answer): base $(field_of timeline_result base errors | awk '{s += $1} END {print s + 0}'), new $(field_of timeline_result new errors | awk '{s += $1} END {print s + 0}')"
    echo "uptime after: $(uptime)"
} 2>&1 | tee "$out" || status=$?
echo "raw output: $out"
exit "$status"
