#!/usr/bin/env bash
# Two load generators against one `starling serve`: what each costs per call, and what it lets
# the server reach, on a machine they share. Ping on an empty store, so the server does no work
# but the wire's.
#
# Each round runs the Go `grpc-load` of the commit GO_REV (its sources as they were there, built
# with `go build`), then this tree's Rust `grpc-load`, each for DURATION at concurrency 16 over
# one HTTP/2 connection, alternating so that a machine that slows down slows both alike. Each
# run prints the generator's summary, then its CPU (GNU time) and the server's (/proc), both in
# microseconds per call.
#
# usage: crates/starling-bench/run-load-generators.sh
# environment: GO_REV (3757e7e^, the last commit with the Go tool), ROUNDS (3), DURATION (10s)
# Requires Go, GNU time, and a release build of starling (built here).
set -euo pipefail
cd "$(dirname "$0")/../.."
. crates/starling-bench/lib.sh
GO_REV=${GO_REV:-3757e7e^}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT
go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
git archive "$GO_REV" crates/starling-bench/grpc/load | tar -x -C "$work"
(cd "$work/crates/starling-bench/grpc/load" && "$go" build -trimpath -o "$work/grpc-load-go" .)
cargo build -q --release --locked -p starling --bin starling -p starling-bench --bin grpc-load
printf '\0\0\0\0' >"$work/ping.bin"
serve_grpc target/release/starling "$work/data" "$work/serve.log"
tick=$(getconf CLK_TCK)
echo "load-generators: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, Go grpc-load of $(git rev-parse --short "$GO_REV"), Rust grpc-load of $(git rev-parse --short HEAD)"
for round in $(seq "$ROUNDS"); do
    for tool in go rust; do
        bin=target/release/grpc-load
        [ "$tool" = go ] && bin=$work/grpc-load-go
        before=$(proc_ticks "$server")
        /usr/bin/time -f '%U %S' -o "$work/time" "$bin" -addr "$addr" -method /bsky.Service/Ping \
            -data "$work/ping.bin" -c 16 -duration "$DURATION" >"$work/out"
        after=$(proc_ticks "$server")
        line=$(grep '^grpc_load:' "$work/out")
        echo "round $round $tool: $line"
        requests=$(sed -n 's/.* requests=\([0-9]*\) .*/\1/p' <<<"$line")
        awk -v r="$round" -v t="$tool" -v n="$requests" -v s=$((after - before)) -v tick="$tick" \
            '{ printf "round %s %s: generator %.1f µs of CPU per call, server %.1f\n", r, t,
               ($1 + $2) * 1e6 / n, s / tick * 1e6 / n }' "$work/time"
    done
done
