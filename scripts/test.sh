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
echo "== cassandra: the store model test and replica fail-over on one node, the cluster fault test on three"
scripts/cassandra.sh fetch
# A cluster of its own under target/, wiped first: a developer's cluster (perhaps with nodes
# down) must not decide where a test keyspace's data lives.
export STARLING_CASSANDRA_DATA="$PWD/target/cassandra-test"
scripts/cassandra.sh wipe
trap 'scripts/cassandra.sh stop' EXIT
# `--workspace` as above, so that the features, and so the build, are the ones just tested: a
# `-p` run would build the workspace again with fewer features.
scripts/cassandra.sh start 1
export STARLING_TEST_CASSANDRA=127.0.0.1:9042
cargo test --workspace --locked --test apply_model cassandra
cargo test --workspace --locked --lib cql::
cargo test --workspace --locked --test replicas
unset STARLING_TEST_CASSANDRA
# The cluster test on three fresh nodes (RF 3): one node is killed under load.
scripts/cassandra.sh wipe
scripts/cassandra.sh start 3
STARLING_TEST_CASSANDRA_CLUSTER=127.0.0.1:9042,127.0.0.2:9042,127.0.0.3:9042 \
  cargo test --workspace --locked --test cluster -- --nocapture
scripts/cassandra.sh stop
trap - EXIT
echo "== cargo xtask tidy"
cargo xtask tidy
echo "== compare: the side-by-side harness, smoke scale (Starling and the reference dataplane)"
STARLING_PROFILE=debug compare/run.sh --scale smoke
echo "== compare: the reference's bulk loader leaves the rows its indexer does"
"$(scripts/setup-appview.sh | sed -n 's/^appview: node \([^ ]*\).*/\1/p')" compare/test/bulk-equals-indexer.mjs
