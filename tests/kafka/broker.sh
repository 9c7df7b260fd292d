#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft: broker+controller in one JVM)
# for Penstock's Kafka tests, run from jars fetched from Maven
# Central with tests/kafka/pom.xml. No download of a Kafka tarball, no docker.
#
#   broker.sh fetch
#       Copy the broker's jars into $CACHE/lib (once; fast when already there).
#   broker.sh start DIR PORT [CONTROLLER_PORT]
#       Format a KRaft storage in DIR/data (kept if already formatted), write
#       DIR/server.properties and exec the broker in the foreground, PLAINTEXT
#       on 127.0.0.1:PORT. The controller listener takes CONTROLLER_PORT, or a
#       free port picked at random. The process is the broker JVM itself (exec),
#       so a harness stops it by killing that pid; readiness is the harness's
#       job (poll PORT, or `broker.sh topic ...`, which waits for the broker).
#   broker.sh topic BOOTSTRAP NAME PARTITIONS
#       Create topic NAME (replication factor 1) with TopicCommand.
#   broker.sh tool MAIN_CLASS [ARGS...]
#       Run any main class of the classpath with the quiet logging, e.g.
#       org.apache.kafka.tools.ConsoleProducer or
#       org.apache.kafka.tools.consumer.ConsoleConsumer.
#
# Environment:
#   PENSTOCK_KAFKA_CACHE       cache dir (default $HOME/.cache/penstock-kafka)
#   PENSTOCK_KAFKA_MAVEN_REPO  Maven local repository for `fetch` (default: mvn's own)
#   PENSTOCK_KAFKA_HEAP_OPTS   broker heap (default -Xms64m -Xmx512m)
#   PENSTOCK_KAFKA_JVM_OPTS    extra broker JVM options
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${PENSTOCK_KAFKA_CACHE:-$HOME/.cache/penstock-kafka}"
lib="$cache/lib"
pom="$here/pom.xml"
log4j="$here/log4j2.properties"

die() { echo "broker.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

pom_sum() { sha256sum "$pom" | cut -d' ' -f1; }

fetched() { [[ -f "$lib/.pom.sha256" && "$(cat "$lib/.pom.sha256")" == "$(pom_sum)" ]]; }

cmd_fetch() {
  fetched && return 0
  mkdir -p "$cache"
  # Serialize concurrent fetches into the same cache.
  exec 9>"$cache/.lock"
  command -v flock >/dev/null && flock 9
  fetched && return 0
  local tmp="$cache/lib.tmp.$$"
  rm -rf "$tmp"
  local repo=()
  [[ -n "${PENSTOCK_KAFKA_MAVEN_REPO:-}" ]] && repo=("-Dmaven.repo.local=$PENSTOCK_KAFKA_MAVEN_REPO")
  # Output kept in a log, shown only on failure (mvn 3.8 -q still prints
  # escape codes).
  if ! mvn -q -B "${repo[@]}" -f "$pom" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >"$cache/fetch.log" 2>&1; then
    cat "$cache/fetch.log" >&2
    rm -rf "$tmp"
    die "mvn dependency:copy-dependencies failed"
  fi
  ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "no kafka_2.13 jar fetched"; }
  pom_sum >"$tmp/.pom.sha256"
  rm -rf "$lib"
  mv "$tmp" "$lib"
}

need_lib() { fetched || die "jars missing or stale in $lib: run '$0 fetch' first"; }

# java for short-lived command-line tools: small heap, quick start.
run_tool() {
  need_lib
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$log4j" -cp "$lib/*" "$@"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {
  local p _
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 12000))
    if port_free "$p"; then echo "$p"; return 0; fi
  done
  die "no free port found for the controller"
}

# A random KRaft cluster id: 16 random bytes, base64url without padding
# (the form of org.apache.kafka.common.Uuid), not starting with '-'.
cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" != -* ]] && { echo "$id"; return 0; }
  done
}

cmd_start() {
  [[ $# -eq 2 || $# -eq 3 ]] || usage
  local dir="$1" port="$2" cport="${3:-}"
  [[ "$port" =~ ^[0-9]+$ ]] || die "bad port: $port"
  need_lib
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  port_free "$port" || die "port $port is already in use"
  if [[ -z "$cport" ]]; then
    cport="$(pick_port)"
    [[ "$cport" != "$port" ]] || cport="$(pick_port)"
  fi
  [[ "$cport" =~ ^[0-9]+$ ]] || die "bad controller port: $cport"

  cat >"$dir/server.properties" <<EOF
# written by tests/kafka/broker.sh: single-node KRaft test broker
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
${PENSTOCK_KAFKA_PROPERTIES:-}
EOF

  # Format the storage once; a DIR formatted before is kept as it is (with its
  # cluster id), so a broker can be restarted on its old data.
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    run_tool kafka.tools.StorageTool format \
      -t "$(cluster_id)" -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "storage format failed"; }
  fi

  echo "broker.sh: kafka broker 127.0.0.1:$port (controller 127.0.0.1:$cport), data in $dir/data" >&2
  # shellcheck disable=SC2086
  exec java ${PENSTOCK_KAFKA_HEAP_OPTS:--Xms64m -Xmx512m} -XX:+UseSerialGC \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$log4j" \
    ${PENSTOCK_KAFKA_JVM_OPTS:-} -cp "$lib/*" kafka.Kafka "$dir/server.properties"
}

cmd_topic() {
  [[ $# -eq 3 ]] || usage
  run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$1" \
    --create --topic "$2" --partitions "$3" --replication-factor 1
}

case "${1:-}" in
  fetch) shift; [[ $# -eq 0 ]] || usage; cmd_fetch ;;
  start) shift; cmd_start "$@" ;;
  topic) shift; cmd_topic "$@" ;;
  tool) shift; [[ $# -ge 1 ]] || usage; run_tool "$@" ;;
  *) usage ;;
esac
