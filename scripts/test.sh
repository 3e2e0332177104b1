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
