#!/usr/bin/env bash
# Two builds of actor-lookup-bench side by side: what finding an actor by DID and by id costs
# in the table a restart builds, before and after a change to the actor table.
#
# Each round runs BASE, then NEW, each on a fresh store of ACTORS sample actors; the rounds
# alternate so that a machine that slows down mid-run slows both builds alike. Prints each
# run's median line and, per figure, the median of each build's medians and BASE's over NEW's
# (above 1: NEW is faster).
#
# usage: crates/starling-bench/run-actor-lookup-ab.sh BASE NEW
#   BASE, NEW  two `actor-lookup-bench` binaries (build the older commit with its own
#              CARGO_TARGET_DIR; the bench's source is the same in both)
# environment: ACTORS (5500000, the 2024 network), LOOKUPS (1000000), ROUNDS (3)
set -euo pipefail
base=${1:?usage: run-actor-lookup-ab.sh BASE NEW}
new=${2:?usage: run-actor-lookup-ab.sh BASE NEW}
ACTORS=${ACTORS:-5500000}
LOOKUPS=${LOOKUPS:-1000000}
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "actor-lookup-ab: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $ACTORS actors, BASE $base, NEW $new"
for round in $(seq "$ROUNDS"); do
    for build in BASE NEW; do
        bin=$base
        [ "$build" = NEW ] && bin=$new
        rm -rf "$work/data"
        "$bin" --dir "$work/data" --actors "$ACTORS" --lookups "$LOOKUPS" --rounds 5 |
            sed -n "s/^median: /actor-lookup-ab: $round $build /p"
    done
done | tee "$work/runs"
# Per figure (known, unknown, did): the median over rounds of each build, and BASE/NEW.
awk '
    { build = $3; known[build] = known[build] " " $6; unknown[build] = unknown[build] " " $9
      did[build] = did[build] " " $12 }
    function median(list,    n, values, i, j, t) {
        n = split(list, values, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (values[j] + 0 < values[i] + 0) { t = values[i]; values[i] = values[j]; values[j] = t }
        return values[int((n + 1) / 2)]
    }
    END {
        printf "%-24s %10s %10s %9s\n", "ns per call", "BASE", "NEW", "BASE/NEW"
        split("known unknown did", names, " ")
        for (k = 1; k <= 3; k++) {
            name = names[k]
            b = median(name == "known" ? known["BASE"] : name == "unknown" ? unknown["BASE"] : did["BASE"])
            n = median(name == "known" ? known["NEW"] : name == "unknown" ? unknown["NEW"] : did["NEW"])
            label = name == "did" ? "did (by id)" : "actor_id, " name
            printf "%-24s %10.1f %10.1f %9.2f\n", label, b, n, b / n
        }
    }' "$work/runs"
