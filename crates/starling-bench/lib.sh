# Shell functions the benchmark scripts share: serving a store on loopback and driving the
# content-checked request sets of `compare-requests` against it. Sourced by scripts that have
# `set -euo pipefail` and run from the repository root.

server=
addr=

# Serves the data directory $2 with the binary $1 (gRPC and HTTP on free loopback ports, no
# PLC) until `stop_server`, logging to $3; sets `server` (its PID) and `addr` (its gRPC address).
serve_grpc() {
    local bin=$1 data=$2 log=$3
    RUST_LOG=warn "$bin" serve --data-dir "$data" --http-addr 127.0.0.1:0 \
        --grpc-addr 127.0.0.1:0 --plc-url http://127.0.0.1:9 >"$log" 2>&1 &
    server=$!
    addr=
    # Half-second polls: a store at the 2024 scale takes seconds to open.
    for _ in $(seq 1200); do
        addr=$(sed -n 's/^starling: grpc listening on \(.*\)$/\1/p' "$log")
        [ -n "$addr" ] && return 0
        kill -0 "$server" 2>/dev/null || { cat "$log" >&2; server=; return 1; }
        sleep 0.5
    done
    echo "$bin serve: no gRPC address after 600 s" >&2
    return 1
}

# Stops the server `serve_grpc` started, if any (a trap on EXIT calls it too).
stop_server() {
    [ -n "$server" ] || return 0
    kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
    server=
}

# The server's resident memory now and at its peak: `VmRSS X GiB, VmHWM Y GiB`.
server_memory() {
    awk '/^VmRSS|^VmHWM/ {printf "%s%s %.2f GiB", sep, $1, $2 / 1048576; sep = ", "} END {print ""}' \
        "/proc/$server/status"
}

# The CPU time (user and system) the process $1 has used so far, in clock ticks. The fields are
# counted after the command name, which may hold spaces.
proc_ticks() {
    sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

# The machine's CPU time so far, in clock ticks: busy (user, nice, system, irq, softirq, steal)
# then all (idle and iowait as well), space-separated.
sys_ticks() {
    awk '/^cpu / {print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat
}

# The load averages over 1, 5 and 15 minutes.
loadavg() {
    cut -d' ' -f1-3 /proc/loadavg
}

# Sends every request of the sets $4 (words `Method:set`) in the directory $3 once to the server
# at $2 with Node $1 and checks each answer (compare/content.mjs, which writes each set's
# `SET.starling.answers`: the digests of the answers checked right). Prints its lines, one per
# set ending `"starling":0}` when every answer was right; always succeeds.
check_sets() {
    local node=$1 at=$2 dir=$3 names
    names=$(for s in $4; do printf '%s,' "${s#*:}"; done)
    "$node" compare/content.mjs --starling "$at" --dir "$dir" --sets "${names%,}" || true
}

# Drives the set $4 (`Method:set`) in the directory $3 with grpc-load ($1) against $2 for
# the duration $5 at concurrency 16 over one HTTP/2 connection, every answer compared with the
# digests `check_sets` wrote (a wrong answer is an error); prints grpc-load's summary line.
load_set() {
    local grpc_load=$1 at=$2 dir=$3 method=${4%%:*} name=${4#*:}
    local args=(-addr "$at" -method "/bsky.Service/$method" -data "$dir/$name.bin" -c 16
        -duration "$5" -answers "$dir/$name.starling.answers")
    [ -f "$dir/$name.expect" ] && args+=(-expect "$dir/$name.expect")
    "$grpc_load" "${args[@]}" | grep '^grpc_load:'
}

# `load_set` with the same first five arguments, and the server $6's CPU per call over it:
# grpc-load's summary line with ` cpu_us=…` appended (`-` when nothing was answered).
load_set_cpu() {
    local before after line n
    before=$(proc_ticks "$6")
    line=$(load_set "$1" "$2" "$3" "$4" "$5")
    after=$(proc_ticks "$6")
    n=$(sed -n 's/.* requests=\([^ ]*\).*/\1/p' <<<"$line")
    echo "$line cpu_us=$(awk -v t=$((after - before)) -v tick="$(getconf CLK_TCK)" -v n="${n:-0}" \
        'BEGIN {if (n > 0) printf "%.1f", t / tick * 1e6 / n; else print "-"}')"
}
