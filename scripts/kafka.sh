#!/usr/bin/env bash
# A throwaway single-node Apache Kafka broker (KRaft, no ZooKeeper) for headwater's
# `kafka`-marked tests, and Spark's Kafka connector jars.
#
#   bootstrap="$(bash scripts/kafka.sh)"   # fetch if needed, format, start; prints host:port
#   bash scripts/kafka.sh stop             # stop it (the log directory is kept)
#   bash scripts/kafka.sh status           # prints host:port when it answers, else exit 3
#   bash scripts/kafka.sh jars             # Spark's connector jars (+ spark-avro), comma separated
#   bash scripts/kafka.sh delta-jars       # Delta Lake's Spark connector jars, comma separated
#
# Idempotent and safe to run twice. Jars come from Maven Central through `mvn
# dependency:copy-dependencies` (a generated pom) into a cache folder outside the checkout,
# once: a second run (and every test run) works offline. The broker is one process in the
# `broker,controller` roles, its log directory formatted once (kafka.tools.StorageTool, the
# `kafka-storage format --standalone` of the distribution), listening on
# 127.0.0.1:$HEADWATER_KAFKA_PORT (default 59092; the controller on the next port). Only
# the result goes to stdout; logs go to stderr and $dir/server.log.
#
# Spark's connector: org.apache.spark:spark-sql-kafka-0-10_2.13 at $HEADWATER_SPARK_KAFKA
# (default 4.2.0, the pinned PySpark's version: the newest whose connector Maven
# Central serves; 4.3.0's is not published there) and its
# own dependencies not already in pyspark's jars (spark-token-provider-kafka-0-10,
# kafka-clients, commons-pool2), and spark-avro (from_avro, for Avro records) of the same
# version, without its dependencies (pyspark ships avro and xz).
#
# Delta Lake's Spark connector (for spark.read.format("delta") of the tables DeltaSink
# writes): io.delta:delta-spark_2.13 and delta-storage at $HEADWATER_DELTA_SPARK (default
# 4.4.0, the release built against Spark 4.2.0), without their other dependencies (pyspark
# ships them).
set -euo pipefail

version="${HEADWATER_KAFKA_VERSION:-4.1.1}"
connector="${HEADWATER_SPARK_KAFKA:-4.2.0}"
cache="${HEADWATER_CACHE:-$HOME/.cache/headwater}"
jars_dir="$cache/kafka-$version"
connector_dir="$cache/spark-sql-kafka-$connector"
avro_dir="$cache/spark-avro-$connector"
delta_spark="${HEADWATER_DELTA_SPARK:-4.4.0}"
delta_dir="$cache/delta-spark-$delta_spark"
dir="${HEADWATER_KAFKA_DIR:-/tmp/headwater-kafka}"
port="${HEADWATER_KAFKA_PORT:-59092}"
controller_port="$((port + 1))"
bootstrap="127.0.0.1:$port"
action="${1:-start}"

log() { echo "[kafka] $*" >&2; }

# --- jars, fetched once with Maven --------------------------------------------------
# shellcheck source=scripts/maven.sh
. "$(dirname "${BASH_SOURCE[0]}")/maven.sh"

broker_jars() {
  # log4j-slf4j-impl: the distribution's binding, so the broker's log reaches server.log.
  fetch "$jars_dir" "org.apache.kafka:kafka_2.13:$version" \
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"
}

connector_jars() {
  # Only these four: their other dependencies (lz4, snappy, zstd, slf4j) ship with pyspark.
  fetch "$connector_dir" \
    "org.apache.spark:spark-sql-kafka-0-10_2.13:$connector" \
    "org.apache.spark:spark-token-provider-kafka-0-10_2.13:$connector" \
    "org.apache.kafka:kafka-clients:3.9.2" \
    "org.apache.commons:commons-pool2:2.13.1" \
    -- -DexcludeTransitive=true
}

avro_jars() {
  fetch "$avro_dir" "org.apache.spark:spark-avro_2.13:$connector" -- -DexcludeTransitive=true
}

delta_jars() {
  fetch "$delta_dir" \
    "io.delta:delta-spark_2.13:$delta_spark" \
    "io.delta:delta-storage:$delta_spark" \
    -- -DexcludeTransitive=true
}

# --- the broker ----------------------------------------------------------------------
pid_of() { [ -f "$dir/broker.pid" ] && cat "$dir/broker.pid"; }
alive() { local p; p="$(pid_of)" && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }
# Ready: the port answers and the broker has logged its start (metadata served).
ready() { answers && grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null; }

case "$action" in
  jars)
    connector_jars
    avro_jars
    ls "$connector_dir"/*.jar "$avro_dir"/*.jar | paste -sd, -
    exit 0
    ;;
  delta-jars)
    delta_jars
    ls "$delta_dir"/*.jar | paste -sd, -
    exit 0
    ;;
  stop)
    if alive; then
      p="$(pid_of)"
      log "stopping broker (pid $p)"
      kill "$p"
      for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
      if kill -0 "$p" 2>/dev/null; then kill -9 "$p"; fi
    else
      log "not running"
    fi
    rm -f "$dir/broker.pid"
    exit 0
    ;;
  status)
    if alive && answers; then echo "$bootstrap"; exit 0; fi
    log "not running"
    exit 3
    ;;
  start) ;;
  *)
    log "usage: $0 [start|stop|status|jars|delta-jars]"
    exit 2
    ;;
esac

broker_jars
connector_jars
avro_jars
delta_jars
if alive && answers; then
  log "already running ($dir)"
  echo "$bootstrap"
  exit 0
fi
if answers; then
  log "127.0.0.1:$port is taken by another process: set HEADWATER_KAFKA_PORT"
  exit 1
fi

mkdir -p "$dir"
cp="$jars_dir/*"
cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
# A test broker: keep every record (old record timestamps would expire at once).
log.retention.ms=-1
EOF
cat >"$dir/log4j2.yaml" <<EOF
Configuration:
  Appenders:
    Console: {name: STDOUT, PatternLayout: {pattern: "[%d] %p %m (%c)%n"}}
  Loggers:
    Root: {level: WARN, AppenderRef: [{ref: STDOUT}]}
    Logger: [{name: kafka.server.KafkaRaftServer, level: INFO}]
EOF
java_opts=(-Xms256m -Xmx512m -Dlog4j2.configurationFile="$dir/log4j2.yaml")

if [ ! -f "$dir/data/meta.properties" ]; then
  log "formatting $dir/data (KRaft, standalone controller)"
  rm -rf "$dir/data"
  cluster="$(java "${java_opts[@]}" -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null)"
  java "${java_opts[@]}" -cp "$cp" kafka.tools.StorageTool format --standalone \
    -t "$cluster" -c "$dir/server.properties" >&2
fi

log "starting Kafka $version on $bootstrap"
nohup java "${java_opts[@]}" -cp "$cp" kafka.Kafka "$dir/server.properties" \
  >"$dir/server.log" 2>&1 </dev/null &
echo $! >"$dir/broker.pid"
for _ in $(seq 1 300); do
  if ready; then break; fi
  if ! alive; then
    log "the broker exited; tail of $dir/server.log:"
    tail -n 30 "$dir/server.log" >&2 || true
    exit 1
  fi
  sleep 0.2
done
if ! ready; then
  log "no answer on $bootstrap after 60 s; tail of $dir/server.log:"
  tail -n 30 "$dir/server.log" >&2 || true
  exit 1
fi
echo "$bootstrap"
