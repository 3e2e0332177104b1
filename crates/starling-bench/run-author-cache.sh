#!/usr/bin/env bash
# GetAuthorFeed with the author feed cache missing on every page, off, and at its default size:
# what a miss costs against no cache, and what a hit saves, in server CPU per call.
#
# One `starling` binary serves one store three ways in turn, per round: `author_heads_items = 1`
# (no head fits, so every first page reads a head from the store and drops it), `= 0` (the
# cache off: pages read the store) and the default (1,000,000). Each serve first gets every
# request of the set once with its answer checked (compare/content.mjs), then grpc-load drives
# the set for DURATION at concurrency 16 over one HTTP/2 connection, every answer compared
# with those checked right. Prints one line per run (`author-cache: ROUND items=N rps=…
# p99_ms=… errors=… cpu_us=…`, the last the server's CPU per call) and the cache's metrics
# after it. Exits 1 on any wrong answer or error.
#
# usage: crates/starling-bench/run-author-cache.sh STARLING DATA_DIR REQUESTS_DIR
#   DATA_DIR: a data directory holding the bulk network (see run-rpc-ab.sh)
#   REQUESTS_DIR: the request sets compare-requests drew from it (`author-feed.*` is used)
# environment: ROUNDS (3), DURATION (8s)
# Requires Node 22 (scripts/setup-appview.sh) and grpc-load (scripts/install-tools.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: run-author-cache.sh STARLING DATA_DIR REQUESTS_DIR}
data=${2:?usage: run-author-cache.sh STARLING DATA_DIR REQUESTS_DIR}
requests=${3:?usage: run-author-cache.sh STARLING DATA_DIR REQUESTS_DIR}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
node=$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')
grpc_load=$(scripts/install-tools.sh | sed -n 's/^tools: grpc-load \([^ ]*\).*/\1/p')
source crates/starling-bench/lib.sh
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT
echo "author-cache: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $bin"
set=GetAuthorFeed:author-feed
failed=0
for round in $(seq "$ROUNDS"); do
    for items in 1 0 1000000; do
        printf '[timeline]\nauthor_heads_items = %s\n' "$items" >"$work/config.toml"
        STARLING_CONFIG="$work/config.toml" serve_grpc "$bin" "$data" "$work/serve.log"
        rm -rf "$work/requests" && mkdir "$work/requests"
        cp "$requests"/author-feed.* "$work/requests/"
        content=$(check_sets "$node" "$addr" "$work/requests" "$set")
        echo "author-cache: content items=$items $content"
        grep -q '"starling":0}$' <<<"$content" || failed=1
        line=$(load_set_cpu "$grpc_load" "$addr" "$work/requests" "$set" "$DURATION" "$server")
        get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
        echo "author-cache: $round items=$items rps=$(get rps) p99_ms=$(get p99_ms)" \
            "errors=$(get errors) cpu_us=$(get cpu_us)"
        [ "$(get errors)" = 0 ] && [ "$(get cpu_us)" != - ] || failed=1
        http=$(sed -n 's/^starling: http listening on \(.*\)$/\1/p' "$work/serve.log")
        curl -s "http://$http/metrics" | grep '^starling_timeline_author_head' | sort |
            tr '\n' ' ' | sed 's/^/author-cache: metrics /;s/ $/\n/'
        stop_server
    done
done
if [ "$failed" != 0 ]; then
    echo "author-cache: FAILED: a wrong answer, an error, or a run that answered nothing" >&2
    exit 1
fi
