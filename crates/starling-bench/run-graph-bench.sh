#!/usr/bin/env bash
# The follow graph through the real `starling` binary, at GraphD's scale:
#   1. `gen-follows` writes the synthetic graph as GraphD's CSV (cached in BENCH_DIR), with a
#      side file of the 500 most-followed accounts and 10,000 viewers;
#   2. `starling import-follows CSV --data-dir D` under GNU time (wall, peak RSS);
#   3. `starling serve --data-dir D --http-addr 127.0.0.1:0`, RESTARTS times from a warm page
#      cache and once after evicting D's files from it: restart time is from spawn to the
#      `starling: http listening on` line on stdout; also the `graph loaded` log line's seconds
#      and VmRSS/VmHWM from /proc/PID/status;
#   4. `wrk` on loopback against the last (cold-started) server, with wrk-graph.lua: known
#      followers (random viewer, target among the top 500) at each concurrency in CONCURRENCY,
#      the same with `limit=5`, `/v1/graph/follows`, and `/health` for the load generator's
#      own ceiling; for each run, the CPU used by starling, by wrk and by everything else;
#   5. with PERF=1, a call-graph profile of the server under the first known-followers load;
#   6. SIGTERM, then `graph-memory` splits the resident memory between store and graph.
# Each step is bounded in time; everything listens on 127.0.0.1 only. A background sampler
# notes the load average and the busiest processes every 10 s (the machine is shared); the
# samples are printed at the end.
#
# usage: crates/starling-bench/run-graph-bench.sh
# environment:
#   ACTORS (5500000), FOLLOWS (160000000), SEED (7): the graph. The CSV is kept in BENCH_DIR
#     (target/bench-cache) under a name that hashes the generator's sources.
#   RESTARTS (3): warm restarts. DURATION (30s), CONCURRENCY ("32 8"), WRK_THREADS (2).
#   PERF=1 (default) profiles with `perf record`; PERF_SECONDS (10). Reports go to OUT_DIR
#     (BENCH_DIR).
#   KEEP_DATA=1 keeps the data directory.
# Requires GNU time and wrk (installed with apt-get when missing) and, for PERF=1, perf.
set -euo pipefail

cd "$(dirname "$0")/../.."
source crates/starling-bench/lib.sh
ACTORS=${ACTORS:-5500000}
FOLLOWS=${FOLLOWS:-160000000}
SEED=${SEED:-7}
BENCH_DIR=${BENCH_DIR:-target/bench-cache}
OUT_DIR=${OUT_DIR:-$BENCH_DIR}
RESTARTS=${RESTARTS:-3}
DURATION=${DURATION:-30s}
CONCURRENCY=${CONCURRENCY:-32 8}
WRK_THREADS=${WRK_THREADS:-2}
PERF=${PERF:-1}
PERF_SECONDS=${PERF_SECONDS:-10}
# Targets of issue 3.
TARGET_RSS_MIB=2048
TARGET_RESTART_S=3
# The frames whose inclusive share the profile report lists: syscalls, response writes, the
# handler's graph and DID lookups, request parsing, the runtime's parking, the allocator.
PROFILE_FRAMES='entry_SYSCALL_64_after_hwframe|Dispatcher<D,Bs,I,T>::poll_write$|tcp_sendmsg$|Graph::known_followers|starling_graph::set::intersect|Container::contains|Store>::actor_id|ActorTable::get|poll_read<hyper::proto::h1::dispatch|Http1Transaction>::parse|Http1Transaction>::encode|__x64_sys_recvfrom|park_internal$|epoll_wait$|deserialize<serde_urlencoded|_mi_malloc_generic|mi_free$'
# Bounds of each wait.
SERVE_START_TIMEOUT_S=180
SERVE_STOP_TIMEOUT_S=60
IMPORT_TIMEOUT=3h
WRK_TIMEOUT_S=300
SAMPLE_EVERY_S=10

for tool in time wrk; do
    path=/usr/bin/$tool
    if [ ! -x "$path" ]; then
        echo "installing $tool (Debian package \`$tool\`)"
        if ! apt-get install -y "$tool" >/dev/null 2>&1; then
            apt-get update >/dev/null && apt-get install -y "$tool" >/dev/null
        fi
    fi
done
if [ "$PERF" = 1 ] && ! command -v perf >/dev/null; then
    echo "perf not found (Debian package linux-perf): no profile"
    PERF=0
fi

commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || echo ' with uncommitted changes')"
cargo build --release -p starling --bin starling \
    -p starling-bench --bin gen-follows --bin graph-memory
mkdir -p "$BENCH_DIR" "$OUT_DIR"
clk_tck=$(getconf CLK_TCK)
lua_script=crates/starling-bench/wrk-graph.lua

run=$(mktemp -d "$BENCH_DIR/graph-run.XXXXXX")
data="$run/data"
serve_pid=""
sampler_pid=""
wrk_pid=""
cleanup() {
    for pid in "$wrk_pid" "$serve_pid" "$sampler_pid"; do
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    if [ "${KEEP_DATA:-0}" = 1 ]; then
        echo "kept $run"
    else
        rm -rf "$run"
    fi
}
trap cleanup EXIT

vm_field() { awk -v key="$2:" '$1 == key {print $2}' "/proc/$1/status"; }
mib() { awk -v kib="$1" 'BEGIN {printf "%.0f", kib / 1024}'; }
against() { # value target unit lower-is-better
    awk -v v="$1" -v t="$2" -v unit="$3" 'BEGIN {
        if (v <= t) printf "target <= %s %s: met (%.0f%% of it)\n", t, unit, v / t * 100
        else printf "target <= %s %s: missed by %.0f%% (%.2fx)\n", t, unit, (v / t - 1) * 100, v / t
    }'
}

sampler() {
    while true; do
        echo "[sample $(date -u +%H:%M:%S)] load $(loadavg); busiest (top, 1 s):"
        top -b -n 2 -d 1 -w 160 -o %CPU | awk '/^top -/ {frame++} frame == 2 && /^ *[0-9]+ / && n++ < 4 {printf "    %s %s%% %s\n", $1, $9, $12}'
        sleep "$SAMPLE_EVERY_S"
    done
}

echo "== setup"
echo "commit: $commit (when built)"
echo "uncommitted files in the build: $(git status --short -- crates Cargo.toml Cargo.lock | tr '\n' ' ')"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "ram: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
echo "disk: $(df -h "$BENCH_DIR" | awk 'NR==2 {print $1 ", " $2 " total, " $4 " free"}')"
echo "kernel: $(uname -r); $(rustc --version); $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2)"
echo "load average: $(loadavg)"

gen_hash=$(cat crates/starling-bench/src/follows.rs crates/starling-bench/src/bin/gen-follows.rs \
    crates/starling-graph/src/synthetic.rs crates/starling-core/src/sample.rs |
    sha256sum | cut -c1-12)
csv="$BENCH_DIR/follows-a$ACTORS-f$FOLLOWS-s$SEED-$gen_hash.csv.zst"
side="${csv%.csv.zst}.side.txt"
echo
echo "== dataset"
if [ -s "$csv" ] && [ -s "$side" ]; then
    echo "reusing $csv"
else
    target/release/gen-follows --actors "$ACTORS" --follows "$FOLLOWS" --seed "$SEED" \
        --out "$csv" --side "$side"
fi
echo "csv: $csv ($(du -h "$csv" | cut -f1))"
echo "side file: $side ($(grep -c '^target ' "$side") targets, $(grep -c '^viewer ' "$side") viewers)"
grep '^target ' "$side" | awk 'NR == 1 || NR == 10 || NR == 100 || NR == 500 {printf "  target rank %d: %s followers\n", NR, $3}'

sampler >"$run/load-samples.txt" 2>&1 &
sampler_pid=$!

echo
echo "== import"
echo "command: starling import-follows $csv --data-dir $data"
echo "load average before: $(loadavg)"
start=$EPOCHREALTIME
/usr/bin/time -v -o "$run/import.time" timeout "$IMPORT_TIMEOUT" \
    target/release/starling import-follows "$csv" --data-dir "$data" \
    >"$run/import.out" 2>"$run/import.err"
end=$EPOCHREALTIME
echo "load average after: $(loadavg)"
cat "$run/import.out"
sed 's/\x1b\[[0-9;]*m//g' "$run/import.err" | grep -E 'import finished|snapshot written' || true
import_s=$(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.1f", e - s}')
import_rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$run/import.time")
awk -v s="$import_s" -v f="$FOLLOWS" 'BEGIN {printf "import wall: %s s (%.0f follows/s)\n", s, f / s}'
echo "import peak RSS: $(mib "$import_rss_kib") MiB"
grep -E 'User time|System time|Percent of CPU|Elapsed|File system outputs' "$run/import.time"
echo "data dir: $(du -sh "$data" | cut -f1) ($(du -sh "$data/fjall" | cut -f1) store, $(du -h "$data/graph.snapshot" | cut -f1) graph snapshot)"

# Starts `starling serve` as a coprocess; sets serve_pid, port, and the spawn-to-listening time.
start_serve() {
    local log=$1 line
    local spawned=$EPOCHREALTIME
    # The bound on expensive HTTP queries (8 by default) is lifted to its maximum: this measures
    # throughput under wrk's connections, not load shedding.
    coproc SERVE { exec target/release/starling serve --data-dir "$data" --http-addr 127.0.0.1:0 --http-expensive-queries-max 256 2>"$log"; }
    serve_pid=$SERVE_PID
    if ! read -r -t "$SERVE_START_TIMEOUT_S" -u "${SERVE[0]}" line; then
        echo "starling serve did not report listening within $SERVE_START_TIMEOUT_S s" >&2
        sed 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 20 >&2
        return 1
    fi
    local listening=$EPOCHREALTIME
    port=${line##*:}
    restart_s=$(awk -v s="$spawned" -v e="$listening" 'BEGIN {printf "%.3f", e - s}')
    loaded_s=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | sed -n 's/.*graph loaded.*seconds="\([0-9.]*\)".*/\1/p' | awk 'NR == 1')
    rss_kib=$(vm_field "$serve_pid" VmRSS)
    hwm_kib=$(vm_field "$serve_pid" VmHWM)
}

# Sends SIGTERM and waits, at most SERVE_STOP_TIMEOUT_S, for the server to exit.
stop_serve() {
    local started=$EPOCHREALTIME deadline=$((SECONDS + SERVE_STOP_TIMEOUT_S))
    kill -TERM "$serve_pid"
    while kill -0 "$serve_pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
        sleep 0.05
    done
    if kill -0 "$serve_pid" 2>/dev/null; then
        echo "starling serve did not stop within $SERVE_STOP_TIMEOUT_S s: SIGKILL" >&2
        kill -KILL "$serve_pid"
    fi
    local rc=0
    wait "$serve_pid" || rc=$?
    awk -v s="$started" -v e="$EPOCHREALTIME" -v rc="$rc" 'BEGIN {printf "stopped by SIGTERM in %.2f s, exit status %d\n", e - s, rc}'
    serve_pid=""
}

echo
echo "== restart: spawn -> 'starling: http listening on'"
echo "command: starling serve --data-dir $data --http-addr 127.0.0.1:0"
restarts=()
for i in $(seq 1 "$RESTARTS") cold; do
    if [ "$i" = cold ]; then
        # Evicts the data directory's files from the page cache (posix_fadvise DONTNEED, this
        # directory only), so the snapshot and the store are read from the disk.
        find "$data" -type f -exec dd if={} iflag=nocache count=0 status=none \;
        echo "cold: page cache of the snapshot after eviction: $(fincore -n -o RES "$data/graph.snapshot" 2>/dev/null || echo '?')"
    fi
    echo "load average before: $(loadavg)"
    start_serve "$run/serve-$i.log"
    echo "restart $i: ${restart_s} s to listening (graph loaded in ${loaded_s} s, everything else $(awk -v r="$restart_s" -v g="${loaded_s:-0}" 'BEGIN {printf "%.2f", r - g}') s); VmRSS $(mib "$rss_kib") MiB, VmHWM $(mib "$hwm_kib") MiB"
    restarts+=("$restart_s")
    if [ "$i" != cold ]; then
        stop_serve
    fi
done
sed 's/\x1b\[[0-9;]*m//g' "$run/serve-cold.log"
serve_rss_kib=$rss_kib

base="http://127.0.0.1:$port"
echo
echo "== responses (200 known-followers requests with curl, same pairs as wrk draws from)"
RANDOM=$SEED
mapfile -t targets < <(awk '$1 == "target" {print $2}' "$side")
mapfile -t viewers < <(awk '$1 == "viewer" {print $2}' "$side")
statuses=""
total_count=0
total_bytes=0
for _ in $(seq 1 200); do
    viewer=${viewers[$(((RANDOM * 32768 + RANDOM) % ${#viewers[@]}))]}
    target=${targets[$((RANDOM % ${#targets[@]}))]}
    out=$(curl -s --max-time 5 -w ' %{http_code} %{size_download}' "$base/v1/graph/known-followers?viewer=$viewer&target=$target")
    read -r code bytes <<<"${out##*\}}"
    count=$(sed -n 's/^{"count":\([0-9]*\).*/\1/p' <<<"$out")
    statuses+="$code "
    total_count=$((total_count + ${count:-0}))
    total_bytes=$((total_bytes + bytes))
done
echo "statuses (count status): $(tr ' ' '\n' <<<"$statuses" | awk 'NF' | sort | uniq -c | tr -s ' \n' ' ')"
awk -v c="$total_count" -v b="$total_bytes" 'BEGIN {printf "mean count: %.1f known followers; mean body: %.0f bytes\n", c / 200, b / 200}'
echo "follows sample: $(curl -s --max-time 5 "$base/v1/graph/follows?actor=${viewers[0]}&subject=${targets[0]}")"

# One wrk run: name mode connections duration [limit]. Prints wrk's output and the CPU split.
wrk_run() {
    local name=$1 mode=$2 conns=$3 duration=$4 limit=${5:-}
    echo
    echo "-- $name: wrk -t$WRK_THREADS -c$conns -d$duration --latency -s wrk-graph.lua $base -- SIDE $mode $SEED $limit"
    echo "load average before: $(loadavg)"
    local serve_before sys_before
    serve_before=$(proc_ticks "$serve_pid")
    sys_before=$(sys_ticks)
    local started=$EPOCHREALTIME
    /usr/bin/time -f '%U %S' -o "$run/wrk-$name.time" \
        timeout "$WRK_TIMEOUT_S" wrk -t"$WRK_THREADS" -c"$conns" -d"$duration" --latency \
        -s "$lua_script" "$base" -- "$side" "$mode" "$SEED" "$limit" >"$run/wrk-$name.out" 2>&1
    local wall
    wall=$(awk -v s="$started" -v e="$EPOCHREALTIME" 'BEGIN {print e - s}')
    local serve_after sys_after
    serve_after=$(proc_ticks "$serve_pid")
    sys_after=$(sys_ticks)
    echo "load average after: $(loadavg)"
    cat "$run/wrk-$name.out"
    read -r wrk_user wrk_sys <"$run/wrk-$name.time"
    awk -v sb="$serve_before" -v sa="$serve_after" -v hz="$clk_tck" -v wall="$wall" \
        -v wu="$wrk_user" -v ws="$wrk_sys" -v sysb="$sys_before" -v sysa="$sys_after" \
        -v cores="$(nproc)" 'BEGIN {
            split(sysb, b, " "); split(sysa, a, " ")
            starling = (sa - sb) / hz / wall * 100
            wrk = (wu + ws) / wall * 100
            busy = (a[1] - b[1]) / (a[2] - b[2]) * cores * 100
            printf "cpu (%% of one core, over %.1f s): starling %.0f%%, wrk %.0f%%, everything else %.0f%%, idle %.0f%% (of %d00%%)\n",
                wall, starling, wrk, busy - starling - wrk, cores * 100 - busy, cores
        }'
}

echo
echo "== HTTP load (wrk on loopback)"
wrk_run warmup known-followers 32 5s
first=""
for conns in $CONCURRENCY; do
    wrk_run "known-followers-c$conns" known-followers "$conns" "$DURATION"
    first=${first:-$conns}
done
wrk_run "known-followers-limit5-c${first}" known-followers "$first" "$DURATION" 5
wrk_run "follows-c${first}" follows "$first" "$DURATION"
wrk_run "health-c${first}" health "$first" "$DURATION"
after_rss_kib=$(vm_field "$serve_pid" VmRSS)
echo
echo "VmRSS after the load runs: $(mib "$after_rss_kib") MiB (VmHWM $(mib "$(vm_field "$serve_pid" VmHWM)") MiB)"

if [ "$PERF" = 1 ]; then
    echo
    echo "== profile: perf record -F 499 --call-graph dwarf, $PERF_SECONDS s of known-followers at c$first"
    perf_data="$run/perf-graph-http.data"
    timeout "$WRK_TIMEOUT_S" wrk -t"$WRK_THREADS" -c"$first" -d"$((PERF_SECONDS + 6))s" \
        -s "$lua_script" "$base" -- "$side" known-followers "$SEED" >"$run/wrk-perf.out" 2>&1 &
    wrk_pid=$!
    sleep 3
    perf record -F 499 --call-graph dwarf,16384 -p "$serve_pid" -o "$perf_data" \
        -- sleep "$PERF_SECONDS" 2>&1 | tail -n 2
    wait "$wrk_pid" || true
    wrk_pid=""
    grep -E 'Requests/sec' "$run/wrk-perf.out" || true
    report="$OUT_DIR/profile-graph-http.txt"
    {
        echo "# perf record -F 499 --call-graph dwarf -p starling-serve, $PERF_SECONDS s under wrk known-followers c$first ($commit)"
        echo "## flat (self time), by thread name and symbol"
        perf report -i "$perf_data" --no-children --sort comm,dso,sym --stdio -g none 2>/dev/null |
            awk 'NF && !/^#/ && n++ < 40' | cut -c1-170 || true
        echo "## inclusive (children), selected frames"
        perf report -i "$perf_data" --children --sort sym --stdio -g none 2>/dev/null |
            grep -E "$PROFILE_FRAMES" | cut -c1-170 || true
    } >"$report"
    echo "profile report: $report"
    sed -n '1,40p' "$report"
fi

echo
echo "== stop"
stop_serve

echo
echo "== memory split (graph-memory --data-dir D, system allocator)"
target/release/graph-memory --data-dir "$data" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'

kill -TERM "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sampler_pid=""
echo
echo "== load samples (every ${SAMPLE_EVERY_S} s through the import, restarts and load runs)"
cat "$run/load-samples.txt"

echo
echo "== summary ($commit)"
echo "import: $import_s s wall, peak RSS $(mib "$import_rss_kib") MiB"
echo "serve VmRSS after load: $(mib "$serve_rss_kib") MiB; $(against "$(mib "$serve_rss_kib")" "$TARGET_RSS_MIB" MiB)"
for idx in "${!restarts[@]}"; do
    label=$((idx + 1))
    [ "$idx" -eq "$RESTARTS" ] && label=cold
    echo "restart $label: ${restarts[$idx]} s; $(against "${restarts[$idx]}" "$TARGET_RESTART_S" s)"
done
for out in "$run"/wrk-*-c*.out; do
    name=$(basename "$out" .out)
    sed -n "s/^wrk_result: /${name#wrk-}: /p" "$out" | awk '{printf "%s %s %s %s %s\n", $1, $4, $5, $7, $12}'
done
