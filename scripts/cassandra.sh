#!/usr/bin/env bash
# Apache Cassandra 5.0 on loopback for Starling: fetched from Maven Central, nodes on 127.0.0.N.
#
#   scripts/cassandra.sh fetch          download cassandra-all 5.0.x and its jars (idempotent)
#   scripts/cassandra.sh start N        start nodes 1..N one after another, each CQL-ready first
#   scripts/cassandra.sh start-node I   start node I (127.0.0.I) and wait until it answers CQL
#   scripts/cassandra.sh kill-node I    kill -9 node I and wait until the process is gone
#   scripts/cassandra.sh stop           stop every node (SIGTERM, then wait)
#   scripts/cassandra.sh status         one line per node: pid and whether CQL answers
#   scripts/cassandra.sh wait I         wait until node I answers CQL
#   scripts/cassandra.sh nodetool I ... nodetool against node I (status, info, ring, ...)
#   scripts/cassandra.sh wipe           stop every node and delete their data
#
# Maven Central has no Cassandra tarball, only `cassandra-all`: this script resolves it with its
# runtime dependencies and supplies the yaml, logging config and JVM flags itself. Needs Java 17
# (set JAVA=... to choose; Java 21+ refuses to start Cassandra 5.0) and Maven.
#
# Environment: STARLING_CASSANDRA_HOME (jars, default ~/.cache/starling/cassandra),
# STARLING_CASSANDRA_DATA (node directories, default $STARLING_CASSANDRA_HOME/nodes),
# STARLING_CASSANDRA_VERSION (default 5.0.9), STARLING_CASSANDRA_HEAP (default 512M a node:
# 3 nodes, Starling and a Node AppView fit in 24 GiB with room to spare).
set -euo pipefail

HOME_DIR=${STARLING_CASSANDRA_HOME:-$HOME/.cache/starling/cassandra}
DATA_DIR=${STARLING_CASSANDRA_DATA:-$HOME_DIR/nodes}
VERSION=${STARLING_CASSANDRA_VERSION:-5.0.9}
HEAP=${STARLING_CASSANDRA_HEAP:-512M}
READY_SECS=${STARLING_CASSANDRA_READY_SECS:-180}
LIB=$HOME_DIR/lib

die() { echo "cassandra.sh: $*" >&2; exit 1; }

java_bin() {
  if [ -n "${JAVA:-}" ]; then echo "$JAVA"; return; fi
  for candidate in /usr/lib/jvm/java-17-openjdk-amd64/bin/java /usr/lib/jvm/java-17-openjdk/bin/java; do
    [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  echo java
}

# JPMS flags of Cassandra's conf/jvm17-server.options; the daemon and nodetool both need them.
JPMS=(-Djdk.attach.allowAttachSelf=true
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED --add-exports java.base/java.lang.ref=ALL-UNNAMED
  --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
  --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
  --add-exports java.sql/java.sql=ALL-UNNAMED --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
  --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
  --add-opens java.base/java.lang.module=ALL-UNNAMED --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
  --add-opens java.base/jdk.internal.math=ALL-UNNAMED --add-opens java.base/jdk.internal.module=ALL-UNNAMED
  --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.io=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
  --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED
  --add-opens java.base/java.nio=ALL-UNNAMED)

check_node() {
  [[ "$1" =~ ^[1-9]$ ]] || die "node \`$1\` is not a node number 1..9"
}

fetch() {
  if [ -f "$LIB/cassandra-all-$VERSION.jar" ]; then
    echo "cassandra: $VERSION already in $LIB"
    return
  fi
  command -v mvn >/dev/null || die "maven (mvn) is needed to fetch cassandra-all from Maven Central"
  mkdir -p "$HOME_DIR"
  local tmp
  tmp=$(mktemp -d)
  cat > "$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <groupId>local</groupId><artifactId>cassandra-runtime</artifactId><version>1</version><packaging>pom</packaging>
  <dependencies><dependency><groupId>org.apache.cassandra</groupId><artifactId>cassandra-all</artifactId>
    <version>$VERSION</version></dependency></dependencies></project>
POM
  # Into a fresh directory, then renamed: an interrupted fetch never leaves a half lib/.
  (cd "$tmp" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp/lib")
  rm -rf "$LIB"
  mv "$tmp/lib" "$LIB"
  rm -rf "$tmp"
  echo "cassandra: $VERSION fetched into $LIB ($(ls "$LIB" | wc -l) jars)"
}

pid_of() {
  local file=$DATA_DIR/node$1/pid
  [ -f "$file" ] || return 1
  local pid
  pid=$(cat "$file")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

cql_ready() {
  # A CQL OPTIONS frame (protocol v4) answered by a SUPPORTED frame: the native transport is up,
  # which Cassandra opens last, once the node is NORMAL.
  local ip=127.0.0.$1
  timeout 3 bash -c "exec 3<>/dev/tcp/$ip/9042 && printf '\x04\x00\x00\x01\x05\x00\x00\x00\x00' >&3 && head -c 5 <&3 | od -An -tx1" 2>/dev/null \
    | grep -q '84 00 00 01 06'
}

wait_node() {
  check_node "$1"
  local deadline=$((SECONDS + READY_SECS))
  until cql_ready "$1"; do
    if ! pid_of "$1" >/dev/null; then
      # A joining node gives up when the seed's gossip does not answer within its short ring
      # delay, which a loaded machine can miss: the caller may start it again.
      grep -q "Unable to contact any seeds" "$DATA_DIR/node$1/logs/system.log" 2>/dev/null && return 2
      die "node $1 exited before it answered CQL; see $DATA_DIR/node$1/logs/"
    fi
    [ $SECONDS -lt $deadline ] || die "node $1 did not answer CQL on 127.0.0.$1:9042 within ${READY_SECS}s"
    sleep 0.5
  done
  echo "cassandra: node $1 ready on 127.0.0.$1:9042"
}

start_node() {
  check_node "$1"
  local n=$1
  [ -f "$LIB/cassandra-all-$VERSION.jar" ] || die "cassandra is not fetched: run \`scripts/cassandra.sh fetch\`"
  if pid=$(pid_of "$n"); then
    echo "cassandra: node $n already running (pid $pid)"
    wait_node "$n"
    return
  fi
  if cql_ready "$n"; then
    die "127.0.0.$n:9042 already answers CQL, but not from a node in $DATA_DIR: stop that Cassandra first"
  fi
  local ip=127.0.0.$n dir=$DATA_DIR/node$n jmx=$((7199 + 100 * (n - 1)))
  mkdir -p "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,triggers,logs}
  cat > "$dir/cassandra.yaml" <<YAML
cluster_name: starling
num_tokens: 16
allocate_tokens_for_local_replication_factor: 3
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:7000"
listen_address: $ip
rpc_address: $ip
storage_port: 7000
native_transport_port: 9042
start_native_transport: true
data_file_directories: [$dir/data]
commitlog_directory: $dir/commitlog
saved_caches_directory: $dir/saved_caches
hints_directory: $dir/hints
cdc_raw_directory: $dir/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
storage_compatibility_mode: NONE
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
hinted_handoff_enabled: true
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 8
concurrent_compactors: 1
memtable_heap_space: 64MiB
memtable_offheap_space: 64MiB
file_cache_size: 32MiB
key_cache_size: 8MiB
counter_cache_size: 4MiB
prepared_statements_cache_size: 8MiB
batch_size_warn_threshold: 64KiB
batch_size_fail_threshold: 1MiB
# A dropped or truncated table is gone, not snapshotted first: the tests drop a keyspace per
# case, and a loopback cluster keeps no data worth a snapshot. Keep the default on real clusters.
auto_snapshot: false
YAML
  cat > "$dir/logback.xml" <<'XML'
<configuration scan="false">
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>${cassandra.logdir}/system.log</file>
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
XML
  local jvm=(-ea -Xss256k -XX:+UseThreadPriorities -XX:+HeapDumpOnOutOfMemoryError -XX:+ExitOnOutOfMemoryError
    -XX:+PerfDisableSharedMem -Djava.net.preferIPv4Stack=true
    -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1 -XX:G1HeapRegionSize=16m
    -XX:G1RSetUpdatingPauseTimePercent=5 -XX:MaxGCPauseMillis=300 -XX:InitiatingHeapOccupancyPercent=70
    -Dio.netty.tryReflectionSetAccessible=true -Dio.netty.allocator.useCacheForAllThreads=true
    -Dio.netty.allocator.maxOrder=11 -Xms"$HEAP" -Xmx"$HEAP" -javaagent:"$LIB/jamm-0.4.0.jar")
  # Short ring delay and no gossip settling: nodes join one at a time on one host, which is
  # what makes a 3-node start take ~35 s instead of ~180 s. Keep the defaults on real clusters.
  local cass=(-Dcassandra.config="file://$dir/cassandra.yaml" -Dcassandra.storagedir="$dir"
    -Dcassandra.logdir="$dir/logs" -Dcassandra.triggers_dir="$dir/triggers"
    -Dlogback.configurationFile="file://$dir/logback.xml" -Dcassandra.jmx.local.port=$jmx
    -Djava.rmi.server.hostname=127.0.0.1 -Dcassandra-foreground=yes
    -Dcassandra.ring_delay_ms=1000 -Dcassandra.skip_wait_for_gossip_to_settle=0)
  MALLOC_ARENA_MAX=4 nohup "$(java_bin)" "${JPMS[@]}" "${jvm[@]}" "${cass[@]}" \
    -cp "$LIB/*" org.apache.cassandra.service.CassandraDaemon > "$dir/logs/stdout.log" 2>&1 &
  echo $! > "$dir/pid"
  echo "cassandra: node $n starting on $ip (pid $!, data $dir)"
  local status=0
  wait_node "$n" || status=$?
  if [ "$status" = 2 ]; then
    [ "${2:-0}" -lt 2 ] || die "node $n could not contact the seed node three times; see $dir/logs/"
    echo "cassandra: node $n could not contact the seed node; starting it again"
    rm -rf "$dir"/{data,commitlog,saved_caches,hints,cdc_raw,logs}
    start_node "$n" $(( ${2:-0} + 1 ))
  fi
}

kill_node() {
  check_node "$1"
  local pid
  pid=$(pid_of "$1") || { echo "cassandra: node $1 is not running"; return; }
  kill -9 "$pid"
  # The process lingers while its locked memory is torn down; a restart must wait for it.
  while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  echo "cassandra: node $1 killed (pid $pid)"
}

stop_all() {
  local pids=()
  for file in "$DATA_DIR"/node*/pid; do
    [ -f "$file" ] || continue
    local pid
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      pids+=("$pid")
    fi
  done
  local deadline=$((SECONDS + 60))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then kill -9 "$pid" 2>/dev/null || true; fi
      sleep 0.2
    done
  done
  echo "cassandra: stopped ${#pids[@]} node(s)"
}

status() {
  local any=0
  for dir in "$DATA_DIR"/node*; do
    [ -d "$dir" ] || continue
    any=1
    local n=${dir##*node} pid state
    if pid=$(pid_of "$n"); then
      if cql_ready "$n"; then state="up, CQL ready"; else state="up, CQL not ready"; fi
      echo "node$n 127.0.0.$n pid $pid: $state"
    else
      echo "node$n 127.0.0.$n: down"
    fi
  done
  [ $any = 1 ] || echo "cassandra: no nodes in $DATA_DIR"
}

nodetool() {
  check_node "$1"
  local n=$1
  shift
  mkdir -p "$DATA_DIR"
  echo '<configuration><root level="ERROR"/></configuration>' > "$DATA_DIR/logback-tools.xml"
  exec "$(java_bin)" "${JPMS[@]}" -Xmx128m -Dlogback.configurationFile="file://$DATA_DIR/logback-tools.xml" \
    -cp "$LIB/*" org.apache.cassandra.tools.NodeTool -h 127.0.0.1 -p $((7199 + 100 * (n - 1))) "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  fetch) fetch ;;
  start)
    count=${1:-1}
    [[ "$count" =~ ^[1-9]$ ]] || die "start: \`$count\` is not a node count 1..9"
    # Strictly one after another: nodes bootstrapping together pick the same tokens.
    for n in $(seq 1 "$count"); do start_node "$n"; done ;;
  start-node) start_node "${1:?start-node needs a node number}" ;;
  kill-node) kill_node "${1:?kill-node needs a node number}" ;;
  stop) stop_all ;;
  status) status ;;
  wait) wait_node "${1:?wait needs a node number}" ;;
  nodetool) nodetool "${1:?nodetool needs a node number}" "${@:2}" ;;
  wipe) stop_all; rm -rf "$DATA_DIR"; echo "cassandra: wiped $DATA_DIR" ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; [ -z "$cmd" ] || die "unknown command \`$cmd\`"; exit 2 ;;
esac
