#!/usr/bin/env bash
# Starling against the reference dataplane (@atproto/bsky's own, on PostgreSQL), side by side on
# the same generated data, in one command. See compare/harness.py for what a run does.
#
# Usage: compare/run.sh [--scale smoke|indexer|bulk] [--write-benchmarks] [harness flags...]
#   smoke    ~120 actors, under a minute; part of the test suite (it fails on any error or
#            wrong answer size or content from either system)
#   indexer  10k actors, 300k follows, 100k posts; the reference loads through its indexer
#            (`--reference-load bulk`: in bulk, minutes instead of ~50)
#   bulk     100k actors, 3M follows, 1M posts; the reference loads in bulk (COPY)
# Env: STARLING_PROFILE  release (default) or debug: which build of starling to run
#      CARGO_TARGET_DIR  where cargo builds (default target), as for cargo itself
#      STARLING_PY_DIR   the Python environment with matplotlib (default ~/.cache/starling/py)
# Installs what it needs on first use: Node 22 and the AppView, PostgreSQL and zstd
# (scripts/setup-reference.sh), grpc-load and wrk (scripts/install-tools.sh), GNU time, and
# matplotlib for the charts.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${STARLING_PROFILE:-release}
py=${STARLING_PY_DIR:-$HOME/.cache/starling/py}

if [ ! -x /usr/bin/time ]; then
    echo "compare: installing GNU time" >&2
    apt-get install -y -qq time >/dev/null
fi
scripts/setup-reference.sh >&2
node=$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')
grpc_load=$(scripts/install-tools.sh | sed -n 's/^tools: grpc-load \([^ ]*\).*/\1/p')
if ! "$py/bin/python" -c 'import matplotlib' 2>/dev/null; then
    echo "compare: installing matplotlib into $py" >&2
    python3 -m venv "$py"
    "$py/bin/pip" install -q 'matplotlib>=3.8,<4' >&2
fi
flags=()
[ "$profile" = release ] && flags=(--release)
cargo build -q "${flags[@]}" -p starling --bin starling -p starling-bench --bin compare-requests
target_dir=${CARGO_TARGET_DIR:-target}
exec "$py/bin/python" compare/harness.py --starling "$target_dir/$profile/starling" \
    --compare-requests "$target_dir/$profile/compare-requests" --grpc-load "$grpc_load" \
    --node "$node" "$@"
