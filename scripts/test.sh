#!/usr/bin/env bash
# Runs every check and test of the project. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== cargo xtask tidy"
cargo xtask tidy
echo "== compare: the side-by-side harness, smoke scale (Starling and the reference dataplane)"
STARLING_PROFILE=debug compare/run.sh --scale smoke
echo "== compare: the reference's bulk loader leaves the rows its indexer does"
"$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')" compare/test/bulk-equals-indexer.mjs
