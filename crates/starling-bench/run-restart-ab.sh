#!/usr/bin/env bash
# Two builds of Starling restarting on one data directory in turn: the before and after of a
# change to what a start reads. Each round runs `run-restart.sh DATA_DIR STARTS` with BASE, then
# with NEW, so that a machine that slows down mid-run slows both builds alike; then prints per
# build every start's time to listening and VmRSS, and the medians.
#
# usage: crates/starling-bench/run-restart-ab.sh DATA_DIR BASE NEW [ROUNDS (3)] [STARTS (2)]
#   BASE, NEW  two `starling` binaries (build the older commit with its own CARGO_TARGET_DIR)
# Both builds must read the data directory's format. Listens on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:?usage: run-restart-ab.sh DATA_DIR BASE NEW [ROUNDS] [STARTS]}
base=${2:?usage: run-restart-ab.sh DATA_DIR BASE NEW [ROUNDS] [STARTS]}
new=${3:?usage: run-restart-ab.sh DATA_DIR BASE NEW [ROUNDS] [STARTS]}
rounds=${4:-3}
starts=${5:-2}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "base: $("$base" --version); new: $("$new" --version); $rounds rounds of $starts starts each"
for round in $(seq 1 "$rounds"); do
    for build in base new; do
        bin=$base
        [ "$build" = new ] && bin=$new
        echo "== round $round build $build"
        BIN=$bin bash crates/starling-bench/run-restart.sh "$data" "$starts" |
            sed "s/^start /$build start /" | tee -a "$out"
    done
done
# From the lines `BUILD start N: S s to listening; VmHWM: H GiB  VmRSS: R GiB`.
echo "== summary"
for build in base new; do
    seconds=$(grep "^$build start " "$out" | awk '{print $4}' | sort -n)
    rss=$(grep "^$build start " "$out" | grep -o 'VmRSS: [0-9.]*' | awk '{print $2}' | sort -n)
    echo "$seconds" | awk -v build="$build" -v rss="$(echo $rss)" '
        {s[NR] = $1}
        END {
            median = NR % 2 ? s[(NR + 1) / 2] : (s[NR / 2] + s[NR / 2 + 1]) / 2
            n = split(rss, r, " ")
            printf "%s: %d starts, to listening %.2f-%.2f s (median %.2f), VmRSS %s-%s GiB\n",
                build, NR, s[1], s[NR], median, r[1], r[n]
        }'
done
