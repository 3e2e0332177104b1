#!/usr/bin/env bash
# Backfill and relay-firehose throughput (src/bin/backfill-bench.rs), with the machine and the
# load around it: generates N_REPOS signed repositories of RECORDS_PER_REPO records with the
# reference implementation (appview/repos.mjs: @atproto/repo, installed by
# scripts/setup-appview.sh), then runs the release build against them and against the real
# relay frames of ../shared/data. Prints everything on stdout; keep it as the raw output.
#
# Usage: crates/starling-bench/backfill-bench.sh [N_REPOS] [RECORDS_PER_REPO] [FIREHOSE_REPEAT]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
n_repos=${1:-200}
per_repo=${2:-500}
repeat=${3:-200}
node=$("$root/scripts/setup-appview.sh" | tail -1 | sed -n 's/^appview: node \([^ ]*\).*/\1/p')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "command: crates/starling-bench/backfill-bench.sh $n_repos $per_repo $repeat"
echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo ' (with uncommitted changes)')"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/^Mem:/ {print $2}') GiB RAM"
echo "generator: @atproto/repo $("$node" -p "require('$(dirname "$node")/../../@atproto/repo/package.json').version" 2>/dev/null || echo '?')"
started=$(date +%s)
"$node" "$root/appview/repos.mjs" "$work/repos" "$n_repos" "$per_repo" > "$work/manifest.json"
mv "$work/manifest.json" "$work/repos/manifest.json"
echo "generated $n_repos repositories of $per_repo records in $(( $(date +%s) - started )) s ($(du -sh "$work/repos" | cut -f1) of CAR files)"
cargo build --release --quiet -p starling-bench --bin backfill-bench --manifest-path "$root/Cargo.toml"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$root/target/release/backfill-bench" "$work/repos" "$root/../shared/data" --repeat "$repeat"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
