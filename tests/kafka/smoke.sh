#!/usr/bin/env bash
# End-to-end check of the Kafka test infrastructure: fetch the
# broker, start it on a free port in a temp dir, create 6-partition topics,
# round-trip OTLP logs/traces/metrics through it in the Collector's
# otlp_proto and otlp_json encodings with tests/kafka-go, check the console
# tools too, then stop the broker. Prints timings. Needs java, mvn, go.
#
#   tests/kafka/smoke.sh [PORT]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
broker="$here/broker.sh"
gomod="$here/../kafka-go"
port="${1:-$((33000 + RANDOM % 8000))}"
bootstrap="127.0.0.1:$port"
work="$(mktemp -d /tmp/penstock-kafka-smoke.XXXXXX)"
pid=""

now() { date +%s%N; }
ms_since() { echo $((($(now) - $1) / 1000000)); }

cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

t=$(now)
"$broker" fetch
echo "fetch: $(ms_since "$t") ms"

t=$(now)
(cd "$gomod" && go build -o bin/kafka-go .)
kgo="$gomod/bin/kafka-go"
echo "kafka-go build: $(ms_since "$t") ms"

t=$(now)
"$broker" start "$work/broker" "$port" >"$work/broker.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/broker.log" >&2; echo "broker died" >&2; exit 1; }
  sleep 0.1
done
echo "broker port open: $(ms_since "$t") ms"

t=$(now)
"$kgo" topic -brokers "$bootstrap" -topic otlp_logs -partitions 6
echo "topic via kafka-go: $(ms_since "$t") ms"
t=$(now)
"$broker" topic "$bootstrap" otlp_spans 6
echo "topic via broker.sh (TopicCommand JVM): $(ms_since "$t") ms"
"$kgo" topic -brokers "$bootstrap" -topic otlp_metrics -partitions 6
"$kgo" topic -brokers "$bootstrap" -topic otlp_logs_json -partitions 6

"$kgo" gen -signal logs -count 20 -items 5 >"$work/logs.bin"
"$kgo" gen -signal traces -count 10 -items 4 >"$work/traces.bin"
"$kgo" gen -signal metrics -count 10 -items 4 >"$work/metrics.bin"

roundtrip() { # signal topic encoding frames count
  "$kgo" produce -brokers "$bootstrap" -topic "$2" -encoding "$3" -signal "$1" <"$4" >"$work/$2.acks"
  "$kgo" consume -brokers "$bootstrap" -topic "$2" -group "smoke-$2" -encoding "$3" -signal "$1" \
    -count "$5" -timeout 30s >"$work/$2.out"
  echo -n "$1 $3 via $2: $(wc -l <"$work/$2.acks") messages acked; "
  "$kgo" same "$4" "$work/$2.out"
}
t=$(now)
roundtrip logs otlp_logs otlp_proto "$work/logs.bin" 20
roundtrip logs otlp_logs_json otlp_json "$work/logs.bin" 20
roundtrip traces otlp_spans otlp_proto "$work/traces.bin" 10
roundtrip metrics otlp_metrics otlp_json "$work/metrics.bin" 10
echo "round trips: $(ms_since "$t") ms"

# The console tools from the same classpath.
printf 'k1:hello\nk2:world\n' | "$broker" tool org.apache.kafka.tools.ConsoleProducer \
  --bootstrap-server "$bootstrap" --topic otlp_logs_json \
  --reader-property parse.key=true --reader-property key.separator=:
got="$("$broker" tool org.apache.kafka.tools.consumer.ConsoleConsumer \
  --bootstrap-server "$bootstrap" --topic otlp_logs_json --group smoke-console \
  --from-beginning --max-messages 22 --timeout-ms 30000 2>/dev/null | grep -c -E '^(hello|world)$')"
[[ "$got" == 2 ]] || { echo "console consumer saw $got of the 2 plain messages" >&2; exit 1; }
echo "console producer/consumer: ok"

echo "broker RSS: $(($(ps -o rss= -p "$pid") / 1024)) MiB"
t=$(now)
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=""
echo "broker stop: $(ms_since "$t") ms"
echo "kafka smoke: ok"
