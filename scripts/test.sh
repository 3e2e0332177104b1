#!/usr/bin/env bash
# Runs every check and test of the project. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
# The status page test opens the page in headless Chromium (Debian's package).
scripts/install-chromium.sh
cargo test --workspace --locked
echo "== cassandra: the store model test, replica fail-over and the cluster fault test, on three nodes"
scripts/cassandra.sh fetch
# A cluster of its own under target/, wiped first: a developer's cluster (perhaps with nodes
# down) must not decide where a test keyspace's data lives.
export STARLING_CASSANDRA_DATA="$PWD/target/cassandra-test"
scripts/cassandra.sh wipe
trap 'scripts/cassandra.sh stop' EXIT
scripts/cassandra.sh start 3
STARLING_TEST_CASSANDRA=127.0.0.1:9042 cargo test --locked -p starling-store --test apply_model cassandra
STARLING_TEST_CASSANDRA=127.0.0.1:9042 cargo test --locked -p starling-store --lib cql::
STARLING_TEST_CASSANDRA=127.0.0.1:9042 cargo test --locked -p starling --test replicas
STARLING_TEST_CASSANDRA_CLUSTER=127.0.0.1:9042,127.0.0.2:9042,127.0.0.3:9042 \
  cargo test --locked -p starling --test cluster -- --nocapture
scripts/cassandra.sh stop
trap - EXIT
echo "== cargo xtask tidy"
cargo xtask tidy
echo "== compare: the side-by-side harness, smoke scale (Starling and the reference dataplane)"
STARLING_PROFILE=debug compare/run.sh --scale smoke
echo "== compare: the reference's bulk loader leaves the rows its indexer does"
"$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')" compare/test/bulk-equals-indexer.mjs
