#!/usr/bin/env bash
# The `bsky.Service` gRPC API of `starling serve`, and the stock AppView's getTimeline on top of
# it, on loopback, at the 2024 network's scale.
#
# Data set: the timeline benchmark's cached one (`run-timeline-bench.sh setup`: 5,500,001 DIDs
# interned in graph-id order, the synthetic graph of 5.5M actors and 160M follows plus a
# celebrity with 2M followers, and 20-30 posts or reposts for every author its readers follow).
# That store holds no follow records: the graph lives only in its `graph.snapshot`, written
# without Starling's header. The script copies the store once into RUN_DIR (the cache itself is
# never written) and writes the snapshot there with the header (`grpc-requests
# --snapshot-out`), so `serve` loads the graph instead of rebuilding an empty one.
#
# Phases (default: both):
#   grpc     `starling serve --grpc-addr 127.0.0.1:0`, warm-up (every reader's head is built),
#            then at each concurrency in CONCURRENCY, for DURATION each: Ping (the load
#            generator's ceiling), GetTimeline (limit 50) for readers following ~100 and
#            ~1,000 accounts, GetFollowsFollowing with a random viewer and TARGETS (25) targets
#            among the 500 most-followed accounts, and with 1 target (GraphD's pair); each with
#            two load generators: ghz, and grpc-load (src/bin/grpc-load.rs: the same requests
#            pre-encoded, sent straight through h2 with no message work, because ghz spends
#            ~70 µs of CPU per call on a machine whose 2 cores it shares with the server). Each run
#            reports the generator's summary, its CPU (GNU time), starling's (/proc/PID/stat)
#            and everything else's (/proc/stat).
#   appview  the same server plus the stock AppView (`appview/start.mjs`, NODE_ENV=production),
#            driven by wrk on app.bsky.feed.getTimeline through the test back door for
#            APPVIEW_READERS readers following ~100 accounts, at each concurrency in
#            APPVIEW_CONCURRENCY; then one traced run (`--trace-rpcs`) that times every
#            dataplane RPC each request makes, and a CPU profile of the AppView.
#   profile  (not run by default) `perf record --call-graph dwarf` of starling for PERF_SECONDS
#            under grpc-load at c32: GetTimeline (~1,000 follows), GetFollowsFollowing (TARGETS
#            targets), Ping; inclusive shares of selected frames and the flat top.
# Each phase prints to stdout and to OUT_DIR/grpc-PHASE[-TAG]-COMMIT.txt.
#
# The machine may be shared: before the phase starts (and before copying the data set), the
# script waits until no `timeline-bench` process runs and the 1-minute load average is below
# QUIET_LOAD, polling every 30 s for at most QUIET_WAIT_MAX_S; before each run it waits only for
# `timeline-bench` to be gone (our own runs raise the load). Each run prints the load average
# before and after it, and the CPU of starling, of the load generator and of everything else.
#
# usage: crates/starling-bench/run-grpc-bench.sh [grpc] [appview] [profile]
# environment:
#   TIMELINE_DIR (target/bench-cache/timeline-a5500000-f160000000-s7-c2000000), SEED (7)
#   RUN_DIR (target/bench-cache/grpc-$(basename TIMELINE_DIR)); REFRESH=1 copies the data again
#   DURATION (30s), WARMUP (5s), CONCURRENCY ("32 8"), CONNECTIONS (1: one HTTP/2 connection,
#     as the AppView's dataplane client uses), TARGETS (25)
#   APPVIEW_READERS (20), APPVIEW_CONCURRENCY ("8 32"), APPVIEW_DURATION (30s)
#   OUT_DIR (crates/starling-bench/results), QUIET_LOAD (1.0), QUIET_WAIT_MAX_S (7200)
#   PERF_SECONDS (10); TAG names a variant in the output file's name (e.g. TAG=conn4)
# Requires ghz and wrk (scripts/install-tools.sh), Node 22 and the AppView
# (scripts/setup-appview.sh), GNU time, jq.
set -euo pipefail

cd "$(dirname "$0")/../.."
source crates/starling-bench/lib.sh
SEED=${SEED:-7}
BENCH_DIR=${BENCH_DIR:-target/bench-cache}
TIMELINE_DIR=${TIMELINE_DIR:-$BENCH_DIR/timeline-a5500000-f160000000-s7-c2000000}
RUN_DIR=${RUN_DIR:-$BENCH_DIR/grpc-$(basename "$TIMELINE_DIR")}
DURATION=${DURATION:-30s}
WARMUP=${WARMUP:-5s}
CONCURRENCY=${CONCURRENCY:-32 8}
CONNECTIONS=${CONNECTIONS:-1}
TARGETS=${TARGETS:-25}
APPVIEW_READERS=${APPVIEW_READERS:-20}
APPVIEW_CONCURRENCY=${APPVIEW_CONCURRENCY:-8 32}
APPVIEW_DURATION=${APPVIEW_DURATION:-30s}
OUT_DIR=${OUT_DIR:-crates/starling-bench/results}
QUIET_LOAD=${QUIET_LOAD:-1.0}
QUIET_WAIT_MAX_S=${QUIET_WAIT_MAX_S:-7200}
PHASES=${*:-grpc appview}
# The AppView's admin password: start.mjs's default (appview/lib.mjs).
ADMIN_PASSWORD=starling-admin
PROTO=crates/starling-api/proto/bsky.proto
# Bounds of each wait.
SERVE_START_TIMEOUT_S=300
APPVIEW_START_TIMEOUT_S=120
STOP_TIMEOUT_S=60
RUN_TIMEOUT_S=300
QUIET_POLL_S=30
# Before each run, other processes must use less than this share of one core (percent).
OTHERS_MAX_PCT=10
PERF_SECONDS=${PERF_SECONDS:-10}
# Frames whose inclusive share the profile lists: the RPC handlers, the timeline read, the
# graph, DID lookups, URI formatting, protobuf encoding, h2 and tonic, syscalls, the allocator.
PROFILE_FRAMES='get_timeline|Timelines::read_from_memory|Timelines::read$|celebrity_page|Head::page|sort_newest_first|get_follows_following|Graph::known_followers|starling_graph::set::intersect|Container::contains|ActorTable::get$|Store>::did$|Store>::actor_id$|item_uris|alloc::fmt::format|prost::message::Message::encode|h2::proto::connection|h2::codec|tonic::codec::encode|tonic::codec::decode|entry_SYSCALL_64_after_hwframe|tcp_sendmsg$|__x64_sys_recvfrom|park_internal|epoll_wait$|spawn_blocking|_mi_malloc_generic|mi_free$|RwLock<T>::read|futex' 

for phase in $PHASES; do
    case $phase in
    grpc | appview | profile) ;;
    *) echo "unknown phase \`$phase\` (grpc, appview, profile)" >&2; exit 2 ;;
    esac
done
[ -f "$TIMELINE_DIR/graph.snapshot" ] && [ -d "$TIMELINE_DIR/store/fjall" ] || {
    echo "no timeline data set in $TIMELINE_DIR: run crates/starling-bench/run-timeline-bench.sh setup" >&2
    exit 1
}
[ -x /usr/bin/time ] || { echo "GNU time is missing: apt-get install -y time" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is missing: apt-get install -y jq" >&2; exit 1; }
tools=$(scripts/install-tools.sh)
ghz=$(sed -n 's/^tools: ghz \([^ ]*\).*/\1/p' <<<"$tools")
grpc_load=$(sed -n 's/^tools: grpc-load \([^ ]*\).*/\1/p' <<<"$tools")
wrk_version=$( (wrk --version 2>&1 || true) | head -n 1 | cut -d" " -f1-2)
node=""
if [[ " $PHASES " == *" appview "* || " $PHASES " == *" profile "* ]]; then
    node=$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')
fi

# The source files that go into the build and differ from HEAD (results are not sources).
tree_state() { git status --short -- crates Cargo.toml Cargo.lock appview ':!crates/starling-bench/results' | tr '\n' ' '; }
commit="$(git rev-parse --short HEAD)"
dirty=$(tree_state)
cargo build --release -p starling --bin starling -p starling-bench --bin grpc-requests
# Another engineer may commit or edit while this builds: say so if the tree moved.
if [ "$(git rev-parse --short HEAD)" != "$commit" ] || [ "$(tree_state)" != "$dirty" ]; then
    dirty="$dirty (the tree changed during the build: now $(git rev-parse --short HEAD), $(tree_state))"
fi
mkdir -p "$RUN_DIR" "$OUT_DIR"
run=$(mktemp -d "$RUN_DIR/run.XXXXXX")
clk_tck=$(getconf CLK_TCK)

serve_pid=""
appview_pid=""
# Each phase runs in the subshell of a pipeline (`| tee`), which sets its own trap.
stop_children() {
    for pid in "$appview_pid" "$serve_pid"; do
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
}
trap 'rm -rf "$run"' EXIT

strip_ansi() { sed 's/\x1b\[[0-9;]*m//g'; }

# Waits for no `timeline-bench` process and, with `load`, for the 1-minute load average below
# QUIET_LOAD; polls every QUIET_POLL_S seconds, at most QUIET_WAIT_MAX_S in all.
wait_quiet() {
    local want_load=${1:-} started=$SECONDS
    while true; do
        local busy=""
        if pgrep -f timeline-bench >/dev/null; then
            busy="timeline-bench is running"
        elif [ -n "$want_load" ] && awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v q="$QUIET_LOAD" 'BEGIN {exit !(l >= q)}'; then
            busy="load average $(loadavg) (waiting for < $QUIET_LOAD)"
        fi
        [ -z "$busy" ] && return 0
        if [ $((SECONDS - started)) -ge "$QUIET_WAIT_MAX_S" ]; then
            echo "still busy after ${QUIET_WAIT_MAX_S} s ($busy): measuring anyway"
            return 0
        fi
        echo "waiting: $busy" >&2
        sleep "$QUIET_POLL_S"
    done
}

# Waits until processes other than ours (`name=pid` arguments) use under OTHERS_MAX_PCT of one
# core over 3 s, re-checking every 10 s, at most QUIET_WAIT_MAX_S; prints what they used.
wait_others_idle() {
    local started=$SECONDS pct
    while true; do
        local sys_before sys_after ours_before=0 ours_after=0 w
        sys_before=$(sys_ticks)
        for w in "$@"; do ours_before=$((ours_before + $(proc_ticks "${w#*=}"))); done
        sleep 3
        sys_after=$(sys_ticks)
        for w in "$@"; do ours_after=$((ours_after + $(proc_ticks "${w#*=}"))); done
        pct=$(awk -v sb="$sys_before" -v sa="$sys_after" -v ob="$ours_before" -v oa="$ours_after" \
            -v cores="$(nproc)" 'BEGIN {
                split(sb, b, " "); split(sa, a, " ")
                busy = (a[1] - b[1]) / (a[2] - b[2]) * cores * 100
                ours = (oa - ob) / (a[2] - b[2]) * cores * 100
                printf "%.0f", busy - ours
            }')
        if [ "$pct" -lt "$OTHERS_MAX_PCT" ] || [ $((SECONDS - started)) -ge "$QUIET_WAIT_MAX_S" ]; then
            break
        fi
        echo "waiting: other processes use ${pct}% of one core" >&2
        sleep 10
    done
    echo "other processes over 3 s before the run: ${pct}% of one core"
}

# Copies the timeline data set into RUN_DIR/data once, and draws the request files.
prepare_data() {
    local data=$RUN_DIR/data requests=$RUN_DIR/requests
    if [ "${REFRESH:-0}" = 1 ] || [ ! -f "$data/.complete" ]; then
        wait_quiet  # timeline-bench may have the source store open
        rm -rf "$data" "$requests"
        echo "copying $TIMELINE_DIR/store to $data"
        cp -a "$TIMELINE_DIR/store" "$data"
        target/release/grpc-requests --dir "$TIMELINE_DIR" --out "$requests" --seed "$SEED" \
            --targets "$TARGETS" --snapshot-out "$data/graph.snapshot" >"$RUN_DIR/requests.txt"
        touch "$data/.complete"
    fi
    echo "data dir: $data ($(du -sh "$data" | cut -f1); copy of $TIMELINE_DIR/store, snapshot with Starling's header)"
    echo "request files: $requests ($(ls "$requests" | tr '\n' ' '))"
    sed 's/^/  /' "$RUN_DIR/requests.txt"
}

# Starts `starling serve` as a coprocess; sets serve_pid, grpc_port, http_port.
start_serve() {
    local log=$1 line spawned=$EPOCHREALTIME
    coproc SERVE { exec target/release/starling serve --data-dir "$RUN_DIR/data" \
        --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 2>"$log"; }
    serve_pid=$SERVE_PID
    grpc_port="" http_port=""
    while [ -z "$grpc_port" ]; do
        if ! read -r -t "$SERVE_START_TIMEOUT_S" -u "${SERVE[0]}" line; then
            echo "starling serve did not report grpc listening within $SERVE_START_TIMEOUT_S s" >&2
            strip_ansi <"$log" | tail -n 20 >&2
            return 1
        fi
        case $line in
        "starling: http listening on "*) http_port=${line##*:} ;;
        "starling: grpc listening on "*) grpc_port=${line##*:} ;;
        esac
    done
    awk -v s="$spawned" -v e="$EPOCHREALTIME" 'BEGIN {printf "serve: listening %.1f s after spawn\n", e - s}'
    strip_ansi <"$log" | grep -E 'graph loaded|starting' | cut -c1-300
    if ! strip_ansi <"$log" | grep 'graph loaded' | grep -q 'Snapshot'; then
        echo "the graph was not loaded from the snapshot: the benchmark would run on an empty graph" >&2
        return 1
    fi
    echo "serve: VmRSS $(awk '$1 == "VmRSS:" {printf "%.0f MiB", $2 / 1024}' "/proc/$serve_pid/status")"
}

# Sends SIGTERM to PID and waits, at most STOP_TIMEOUT_S, for it to exit.
stop_pid() {
    local pid=$1 deadline=$((SECONDS + STOP_TIMEOUT_S))
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "process $pid did not stop within $STOP_TIMEOUT_S s: SIGKILL" >&2
        kill -KILL "$pid"
    fi
    wait "$pid" 2>/dev/null || true
}

# Runs a load generator command (after `--`) under GNU time and prints the CPU split of the run:
# starling, the generator, PIDS given before `--` (each `name=pid`), everything else, idle.
with_cpu() {
    local name=$1
    shift
    local watched=()
    while [ "$1" != -- ]; do
        watched+=("$1")
        shift
    done
    shift
    wait_quiet
    wait_others_idle "${watched[@]}"
    echo "load average before: $(loadavg)"
    local before=() w sys_before started=$EPOCHREALTIME
    for w in "${watched[@]}"; do before+=("$(proc_ticks "${w#*=}")"); done
    sys_before=$(sys_ticks)
    /usr/bin/time -v -o "$run/$name.time" timeout "$RUN_TIMEOUT_S" "$@" >"$run/$name.out" 2>&1 || true
    local wall sys_after
    wall=$(awk -v s="$started" -v e="$EPOCHREALTIME" 'BEGIN {print e - s}')
    sys_after=$(sys_ticks)
    echo "load average after: $(loadavg)"
    cat "$run/$name.out"
    local gen_cpu
    gen_cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$run/$name.time")
    local split="" others=0 i=0
    for w in "${watched[@]}"; do
        local pct
        pct=$(awk -v b="${before[$i]}" -v a="$(proc_ticks "${w#*=}")" -v hz="$clk_tck" -v wall="$wall" \
            'BEGIN {printf "%.0f", (a - b) / hz / wall * 100}')
        split+="${w%%=*} ${pct}%, "
        others=$((others + pct))
        i=$((i + 1))
    done
    awk -v sb="$sys_before" -v sa="$sys_after" -v wall="$wall" -v gen="$gen_cpu" -v procs="$split" \
        -v watched="$others" -v cores="$(nproc)" -v tool="${1##*/}" 'BEGIN {
            split(sb, b, " "); split(sa, a, " ")
            busy = (a[1] - b[1]) / (a[2] - b[2]) * cores * 100
            g = gen / wall * 100
            printf "cpu (%% of one core, over %.1f s): %s%s %.0f%%, everything else %.0f%%, idle %.0f%% (of %d00%%)\n",
                wall, procs, tool, g, busy - watched - g, cores * 100 - busy, cores
        }'
    grep -E 'Maximum resident' "$run/$name.time" | sed "s/^\s*/${1##*\/} /"
}

# Prints the CPU per request of each process of a wrk run (from its `cpu` line and wrk_result).
cpu_per_request() {
    local name=$1
    awk '/^wrk_result:/ {for (i = 2; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}}
        /^cpu / {line = $0}
        END {
            split(line, parts, ": "); over = line; sub(/.*over /, "", over); sub(/ s.*/, "", over)
            n = split(parts[2], procs, ", ")
            out = ""
            for (i = 1; i <= n; i++) if (procs[i] ~ /^(appview|starling)/) {
                split(procs[i], f, " "); sub(/%/, "", f[2])
                out = out sprintf("%s %.2f ms, ", f[1], f[2] / 100 * over / v["requests"] * 1000)
            }
            printf "cpu per request: %s(%d requests in %s s)\n", out, v["requests"], over
        }' "$run/$name.out" "$run/$name.report"
}

# One ghz run: name call data-file concurrency duration. Prints a `grpc_result:` line.
ghz_run() {
    local name=$1 call=$2 data=$3 conc=$4 duration=$5
    echo
    echo "-- $name: ghz --insecure --proto $PROTO --call bsky.Service/$call --data-file ${data##*/} -c $conc --connections $CONNECTIONS -z $duration 127.0.0.1:$grpc_port"
    with_cpu "ghz-$name" "starling=$serve_pid" -- "$ghz" --insecure --proto "$PROTO" \
        --call "bsky.Service/$call" --data-file "$data" -c "$conc" --connections "$CONNECTIONS" \
        -z "$duration" --timeout 5s "127.0.0.1:$grpc_port" | tee "$run/ghz-$name.report"
    # ghz prints latencies in the unit it picks (ns, µs, ms, s); convert to ms.
    awk -v name="$name" -v conc="$conc" '
        function ms(v, unit) { return unit == "s" ? v * 1000 : unit == "ms" ? v : (unit == "µs" || unit == "us") ? v / 1000 : v / 1e6 }
        /Requests\/sec:/ {rps = $2}
        /^ *50 % in/ {p50 = ms($4, $5)}
        /^ *99 % in/ {p99 = ms($4, $5)}
        /^Status code distribution:/ {section = "codes"; next}
        /^Error distribution:/ {section = "errors"; next}
        /^ *$/ {section = ""}
        section == "codes" && /^ *\[OK\]/ {ok = $2}
        section == "errors" && /^ *\[[0-9]+\]/ {
            n = $1; gsub(/[][]/, "", n)
            # Calls in flight when ghz stops at the end of -z are failed by ghz itself.
            if (/closed network connection|client connection is closing/) cut += n; else errors += n
        }
        /^cpu / {cpu = $0; sub(/^cpu [^:]*: /, "", cpu)}
        END {printf "grpc_result: ghz %s c=%s rps=%.0f p50_ms=%.3f p99_ms=%.3f ok=%d errors=%d cut_at_end=%d | %s\n",
            name, conc, rps, p50, p99, ok, errors + 0, cut + 0, cpu}' "$run/ghz-$name.report" | tee -a "$run/results.txt"
}

# One grpc-load run: name method data-file(.bin) concurrency duration. Prints a `grpc_result:` line.
load_run() {
    local name=$1 call=$2 data=$3 conc=$4 duration=$5
    echo
    echo "-- $name: grpc-load -addr 127.0.0.1:$grpc_port -method /bsky.Service/$call -data ${data##*/} -c $conc -connections $CONNECTIONS -duration $duration"
    with_cpu "load-$name" "starling=$serve_pid" -- "$grpc_load" -addr "127.0.0.1:$grpc_port" \
        -method "/bsky.Service/$call" -data "$data" -c "$conc" -connections "$CONNECTIONS" \
        -duration "$duration" | tee "$run/load-$name.report"
    awk -v name="$name" '
        /^grpc_load:/ {for (i = 2; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}}
        /^cpu / {cpu = $0; sub(/^cpu [^:]*: /, "", cpu)}
        END {printf "grpc_result: grpc-load %s c=%s rps=%s p50_ms=%s p99_ms=%s ok=%s errors=%s response_bytes=%s | %s\n",
            name, v["c"], v["rps"], v["p50_ms"], v["p99_ms"], v["ok"], v["errors"], v["response_bytes_mean"], cpu}' \
        "$run/load-$name.report" | tee -a "$run/results.txt"
}

grpc_phase() {
    local requests=$RUN_DIR/requests
    start_serve "$run/serve-grpc.log"
    echo
    echo "== check: HTTP /v1/timeline of the first readers (the same Timelines::read as GetTimeline)"
    local class did
    for class in 100 1000; do
        for did in $(head -n 3 "$requests/readers-$class.txt"); do
            echo "reader ~$class follows: $(curl -s --max-time 30 "127.0.0.1:$http_port/v1/timeline?actor=$did&limit=50" | jq '.items | length') items"
        done
    done

    echo
    echo "== warm-up: every reader's head is built ($WARMUP of each call at c8)"
    for file in timeline-100 timeline-1000; do
        ghz_run "warmup-$file" GetTimeline "$requests/$file.json" 8 "$WARMUP" >/dev/null
        grep grpc_result "$run/results.txt" | tail -n 1
    done
    ghz_run "warmup-follows-following" GetFollowsFollowing "$requests/follows-following-$TARGETS.json" 8 "$WARMUP" >/dev/null
    grep grpc_result "$run/results.txt" | tail -n 1
    : >"$run/results.txt"

    echo
    echo "== load (closed loop, $CONNECTIONS HTTP/2 connection(s)): ghz, then grpc-load, per call"
    local conc run_name call file
    for conc in $CONCURRENCY; do
        for run_name in ping timeline-100 timeline-1000 "follows-following-$TARGETS" follows-following-1; do
            case $run_name in
            ping) call=Ping ;;
            timeline-*) call=GetTimeline ;;
            *) call=GetFollowsFollowing ;;
            esac
            file=$requests/$run_name
            ghz_run "$run_name-c$conc" "$call" "$file.json" "$conc" "$DURATION"
            load_run "$run_name-c$conc" "$call" "$file.bin" "$conc" "$DURATION"
        done
    done
    echo
    echo "serve: VmRSS after the runs $(awk '$1 == "VmRSS:" {printf "%.0f MiB", $2 / 1024}' "/proc/$serve_pid/status")"
    stop_pid "$serve_pid"
    serve_pid=""
    echo
    echo "== summary ($commit)"
    cat "$run/results.txt"
}

# Starts the AppView as a coprocess against the gRPC port; sets appview_pid, appview_url.
start_appview() {
    local log=$1
    shift
    local line
    coproc APPVIEW { NODE_ENV=production NODE_OPTIONS=${APPVIEW_NODE_OPTIONS:-} exec "$node" appview/start.mjs \
        --dataplane "http://127.0.0.1:$grpc_port" "$@" 2>"$log"; }
    appview_pid=$APPVIEW_PID
    if ! read -r -t "$APPVIEW_START_TIMEOUT_S" -u "${APPVIEW[0]}" line; then
        echo "the AppView did not report listening within $APPVIEW_START_TIMEOUT_S s" >&2
        tail -n 20 "$log" >&2
        return 1
    fi
    appview_url=${line#appview: listening on }
    echo "appview: $line (pid $appview_pid, NODE_ENV=production $*)"
}

timeline_via_appview() {
    curl -s --max-time 30 -u "admin:$ADMIN_PASSWORD" -H "appview-as-did: $1" \
        "$appview_url/xrpc/app.bsky.feed.getTimeline?limit=50"
}

appview_phase() {
    local readers=$run/appview-readers.txt
    head -n "$APPVIEW_READERS" "$RUN_DIR/requests/readers-100.txt" >"$readers"
    start_serve "$run/serve-appview.log"
    start_appview "$run/appview.log"
    echo "node: $("$node" --version), @atproto/bsky $(jq -r .version "$(dirname "$node")/../../@atproto/bsky/package.json")"
    echo
    echo "== check: getTimeline through the AppView, and Starling's own page, for the first readers"
    local did
    for did in $(head -n 3 "$readers"); do
        echo "$did: appview $(timeline_via_appview "$did" | jq -c '{feed: (.feed // [] | length), error, cursor: (.cursor != null)}'); starling $(curl -s --max-time 30 "127.0.0.1:$http_port/v1/timeline?actor=$did&limit=50" | jq '.items | length') items"
    done
    echo "one response: $(timeline_via_appview "$(head -n 1 "$readers")" | wc -c) bytes"

    echo
    echo "== load: wrk on app.bsky.feed.getTimeline?limit=50, $(wc -l <"$readers") readers following ~100 accounts"
    local conc wrk_cmd
    for conc in warmup $APPVIEW_CONCURRENCY; do
        local c=$conc duration=$APPVIEW_DURATION
        [ "$conc" = warmup ] && c=8 duration=$WARMUP
        echo
        echo "-- appview-$conc: wrk -t2 -c$c -d$duration --latency -s wrk-appview.lua $appview_url -- READERS PASSWORD 50"
        with_cpu "wrk-appview-$conc" "appview(node)=$appview_pid" "starling=$serve_pid" -- \
            wrk -t2 -c"$c" -d"$duration" --latency -s crates/starling-bench/wrk-appview.lua \
            "$appview_url" -- "$readers" "$ADMIN_PASSWORD" 50 | tee "$run/wrk-appview-$conc.report"
        [ "$conc" = warmup ] && continue
        cpu_per_request "wrk-appview-$conc"
        sed -n "s/^wrk_result: /appview_result: c=$c /p" "$run/wrk-appview-$conc.out" |
            awk -v cpu="$(sed -n 's/^cpu [^:]*: //p' "$run/wrk-appview-$conc.report")" '{print $0 " | " cpu}' |
            tee -a "$run/results.txt"
    done
    stop_pid "$appview_pid"
    appview_pid=""

    echo
    echo "== where the time goes: the AppView with --trace-rpcs and --cpu-prof; a $WARMUP warm-up at c8, then one connection (no queueing) for $APPVIEW_DURATION"
    local prof_dir=$run/cpu-prof
    mkdir -p "$prof_dir"
    APPVIEW_NODE_OPTIONS="--cpu-prof --cpu-prof-dir=$prof_dir"
    start_appview "$run/appview-trace.log" --trace-rpcs
    APPVIEW_NODE_OPTIONS=""
    wrk -t2 -c8 -d"$WARMUP" -s crates/starling-bench/wrk-appview.lua "$appview_url" -- "$readers" "$ADMIN_PASSWORD" 50 >/dev/null
    local first_rpc
    first_rpc=$(grep -c '^{"rpc"' "$run/appview-trace.log" || true)
    with_cpu "wrk-appview-trace" "appview(node)=$appview_pid" "starling=$serve_pid" -- \
        wrk -t1 -c1 -d"$APPVIEW_DURATION" --latency -s crates/starling-bench/wrk-appview.lua \
        "$appview_url" -- "$readers" "$ADMIN_PASSWORD" 50 >"$run/wrk-appview-trace.report"
    sed -n 's/^wrk_result: /traced run, c=1: /p' "$run/wrk-appview-trace.out"
    sed -n '/^cpu /p' "$run/wrk-appview-trace.report"
    cpu_per_request "wrk-appview-trace"
    local run_s
    run_s=$(sed -n 's/^cpu (% of one core, over \([0-9.]*\) s.*/\1/p' "$run/wrk-appview-trace.report")
    stop_pid "$appview_pid"
    appview_pid=""
    echo "dataplane RPCs of the traced requests at c=1 (ms as the AppView sees them: call to decoded response):"
    tail -n +"$((first_rpc + 1))" "$run/appview-trace.log" | grep '^{"rpc"' | jq -rs '
        def pct(p): sort | .[(length * p | floor)];
        def r2: . * 100 | round / 100;
        (map(.req) | unique | length) as $n
        | "requests traced: \($n); RPCs per request: \(length / $n | r2)",
          "per request: sum of its RPC times p50 \(group_by(.req) | map(map(.ms) | add) | pct(0.5) | r2) ms, p99 \(group_by(.req) | map(map(.ms) | add) | pct(0.99) | r2) ms",
          (group_by(.rpc) | map({rpc: .[0].rpc, calls: length, per_req: (length / $n | r2),
              codes: (map(.code) | unique | join(",")),
              mean_ms: ((map(.ms) | add) / length | r2), p50_ms: (map(.ms) | pct(0.5)),
              p99_ms: (map(.ms) | pct(0.99))})
           | sort_by(-.calls * .mean_ms)[] | "  \(.rpc): \(.calls) calls, \(.per_req)/request, mean \(.mean_ms) ms, p50 \(.p50_ms) ms, p99 \(.p99_ms) ms, codes \(.codes)")'
    local profile
    profile=$(ls "$prof_dir"/*.cpuprofile 2>/dev/null | head -n 1)
    if [ -n "$profile" ]; then
        echo "AppView CPU profile (--cpu-prof), samples of the last ${run_s} s before exit (the c=1 run), self time by package, idle excluded:"
        "$node" -e '
            const p = JSON.parse(require("fs").readFileSync(process.argv[1]));
            const from = p.endTime - Number(process.argv[2]) * 1e6;
            const self = new Map(p.nodes.map((n) => [n.id, 0]));
            const idle = new Set(p.nodes.filter((n) => n.callFrame.functionName === "(idle)").map((n) => n.id));
            const dt = p.timeDeltas; let total = 0, at = p.startTime;
            p.samples.forEach((id, i) => {
              at += dt[i] || 0;
              if (at < from || idle.has(id)) return;
              self.set(id, self.get(id) + (dt[i] || 0)); total += dt[i] || 0;
            });
            const where = (n) => {
              const url = n.callFrame.url || "";
              const m = /node_modules\/((@[^/]+\/)?[^/]+)\/(.*)/.exec(url);
              if (m) return m[1] + (m[1] === "@atproto/bsky" ? "/" + m[3].split("/").slice(0, 2).join("/") : "");
              if (!url) return "(" + n.callFrame.functionName + ")";
              return url.startsWith("node:") ? "node:internal" : url.replace(/.*\//, "");
            };
            const by = new Map(); const fn = new Map();
            for (const n of p.nodes) {
              const k = where(n), t = self.get(n.id);
              by.set(k, (by.get(k) || 0) + t);
              const f = k + " " + (n.callFrame.functionName || "(anonymous)");
              fn.set(f, (fn.get(f) || 0) + t);
            }
            const show = (m, k) => [...m].sort((a, b) => b[1] - a[1]).slice(0, k)
              .forEach(([name, t]) => console.log("  " + (t / total * 100).toFixed(1).padStart(5) + "%  " + name));
            console.log("  " + (total / 1e6).toFixed(1) + " s of the main thread busy");
            show(by, 15);
            console.log("  top functions (self time):");
            show(fn, 15);
        ' "$profile" "${run_s:-30}"
    fi
    stop_pid "$serve_pid"
    serve_pid=""
    echo
    echo "== summary ($commit)"
    cat "$run/results.txt"
}

profile_phase() {
    command -v perf >/dev/null || { echo "perf not found (Debian package linux-perf)"; return 1; }
    local requests=$RUN_DIR/requests
    start_serve "$run/serve-profile.log"
    local run_name call
    for run_name in timeline-1000 "follows-following-$TARGETS" ping; do
        case $run_name in
        ping) call=Ping ;;
        timeline-*) call=GetTimeline ;;
        *) call=GetFollowsFollowing ;;
        esac
        echo
        echo "== profile: perf record -F 499 --call-graph dwarf,16384 -p STARLING for $PERF_SECONDS s under grpc-load $call ($run_name) c32"
        wait_quiet
        wait_others_idle "starling=$serve_pid"
        "$grpc_load" -addr "127.0.0.1:$grpc_port" -method "/bsky.Service/$call" \
            -data "$requests/$run_name.bin" -c 32 -duration "$((PERF_SECONDS + 6))s" >"$run/perf-load.out" 2>&1 &
        local load_pid=$!
        sleep 3
        perf record -F 499 --call-graph dwarf,16384 -p "$serve_pid" -o "$run/perf.data" \
            -- sleep "$PERF_SECONDS" 2>&1 | tail -n 1
        wait "$load_pid" || true
        cat "$run/perf-load.out"
        echo "-- flat (self time), by thread name and symbol"
        perf report -i "$run/perf.data" --no-children --sort comm,sym --stdio -g none 2>/dev/null |
            awk 'NF && !/^#/ && n++ < 30' | cut -c1-160 || true
        echo "-- inclusive (children), selected frames"
        perf report -i "$run/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
            grep -E "$PROFILE_FRAMES" | awk 'n++ < 40' | cut -c1-160 || true
    done

    # Starling under the AppView's getTimeline: which RPC handlers its CPU goes to.
    [ -n "$node" ] || node=$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')
    local readers=$run/appview-readers.txt
    head -n "$APPVIEW_READERS" "$requests/readers-100.txt" >"$readers"
    start_appview "$run/appview-profile.log"
    wrk -t2 -c8 -d"$WARMUP" -s crates/starling-bench/wrk-appview.lua "$appview_url" -- "$readers" "$ADMIN_PASSWORD" 50 >/dev/null
    echo
    echo "== profile: perf record of starling for $PERF_SECONDS s under the AppView's getTimeline (wrk -c8)"
    wait_others_idle "starling=$serve_pid" "appview=$appview_pid"
    wrk -t2 -c8 -d"$((PERF_SECONDS + 6))s" -s crates/starling-bench/wrk-appview.lua "$appview_url" -- \
        "$readers" "$ADMIN_PASSWORD" 50 >"$run/perf-wrk.out" 2>&1 &
    local wrk_pid=$!
    sleep 3
    perf record -F 499 --call-graph dwarf,16384 -p "$serve_pid" -o "$run/perf.data" \
        -- sleep "$PERF_SECONDS" 2>&1 | tail -n 1
    wait "$wrk_pid" || true
    sed -n 's/^wrk_result: /appview getTimeline: /p' "$run/perf-wrk.out"
    echo "-- inclusive (children): the RPC handlers, the store and the runtime"
    perf report -i "$run/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
        grep -E 'starling_api::grpc::rpc::[a-z_]+$|starling_api::grpc::rpc::[a-z_]+::\{\{closure\}\}$|EmbeddedStore as starling_store::Store>::[a-z_]+$|fjall::|lsm_tree::tree::Tree::get|entry_SYSCALL_64_after_hwframe|h2::proto::connection|prost::message::Message::encode|park_internal' |
        awk 'n++ < 40' | cut -c1-160 || true
    stop_pid "$appview_pid"
    appview_pid=""
    stop_pid "$serve_pid"
    serve_pid=""
}

for phase in $PHASES; do
    out="$OUT_DIR/grpc-$phase${TAG:+-$TAG}-$commit.txt"
    {
        trap stop_children EXIT
        echo "== grpc bench, phase $phase"
        echo "commit: $commit; uncommitted files in the build: ${dirty:-none}"
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; ram: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
        echo "disk: $(df -h "$RUN_DIR" | awk 'NR==2 {print $1 ", " $2 " total, " $4 " free"}')"
        echo "kernel: $(uname -r); $(rustc --version); go: $(go version 2>/dev/null | cut -d' ' -f3)"
        sed -e "s|$HOME|~|g" -e "s/^/load generator: /" <<<"$tools"
        echo "command: crates/starling-bench/run-grpc-bench.sh $phase (DURATION=$DURATION CONCURRENCY=\"$CONCURRENCY\" CONNECTIONS=$CONNECTIONS TARGETS=$TARGETS APPVIEW_READERS=$APPVIEW_READERS APPVIEW_CONCURRENCY=\"$APPVIEW_CONCURRENCY\")"
        echo "uptime: $(uptime)"
        echo
        echo "== data"
        prepare_data
        echo
        echo "== waiting for a quiet machine (no timeline-bench, load average < $QUIET_LOAD)"
        wait_quiet load
        echo "uptime: $(uptime)"
        : >"$run/results.txt"
        "${phase}_phase"
        echo
        echo "uptime after: $(uptime)"
    } 2>&1 | tee "$out"
    echo "raw output: $out"
done
