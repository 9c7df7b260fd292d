#!/usr/bin/env bash
# Kafka in -> Kafka out: a topic of 6 partitions preloaded with RECORDS logs in the Collector's
# otlp_proto encoding (1,000 records per message, written by tests/kafka-go), read by N gateways
# in one consumer group (one worker each), renamed, and written to another topic keyed by
# service (zstd, acks=all). Reports, per N, the records per second from the first record read
# to the last one acknowledged by the broker, and the gateways' CPU seconds per million
# records. The broker runs on the same machine.
#
# usage: [PENSTOCK_BIN=path] benches/e2e/kafka.sh [RECORDS] [N...]   (defaults 1000000 1 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
bin="${PENSTOCK_BIN:-$root/target/release/penstock}"
records="${1:-1000000}"
shift || true
if [ "$#" -gt 0 ]; then counts=("$@"); else counts=(1 2); fi
per_message=1000
work="$(mktemp -d /tmp/penstock-kafka-bench.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

tests/kafka/broker.sh fetch
(cd tests/kafka-go && go build -o bin/kafka-go .)
kgo="$root/tests/kafka-go/bin/kafka-go"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
brokers="127.0.0.1:$port"
PENSTOCK_KAFKA_HEAP_OPTS="-Xms256m -Xmx1g" tests/kafka/broker.sh start "$work/broker" "$port" \
  >"$work/broker.log" 2>&1 &
pids+=($!)
until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done

"$kgo" topic -brokers "$brokers" -topic bench_in -partitions 6
echo "preloading $records logs ($per_message per message)..."
"$kgo" gen -signal logs -count $((records / per_message)) -items "$per_message" -seed 1 \
  | "$kgo" produce -brokers "$brokers" -topic bench_in -signal logs -encoding otlp_proto \
      -compression zstd >/dev/null

# The sum of a counter over the gateways' admin endpoints.
counter() {
  local total=0 v
  for a in "$@"; do
    v="$(curl -sf "http://$a/metrics" | awk -v m="$metric" '$1 == m {print $2}')"
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for n in "${counts[@]}"; do
  "$kgo" topic -brokers "$brokers" -topic "bench_out_$n" -partitions 6
  cat >"$work/g$n.sql" <<EOF
CREATE SOURCE bus FROM KAFKA WITH (brokers = '$brokers', topic = 'bench_in', group = 'bench-$n',
  signal = 'logs', initial_offset = 'earliest');
CREATE SINK out TO KAFKA WITH (brokers = '$brokers', topic = 'bench_out_$n', key = 'service');
CREATE PIPELINE p FROM bus AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  INSERT INTO out SELECT * FROM logs;
END;
EOF
  admins=()
  gateway_pids=()
  for i in $(seq 1 "$n"); do
    aport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    "$bin" run --workers 1 --admin-listen "127.0.0.1:$aport" "$work/g$n.sql" \
      >"$work/g$n-$i.log" 2>&1 &
    gateway_pids+=($!)
    pids+=($!)
    admins+=("127.0.0.1:$aport")
  done
  for a in "${admins[@]}"; do
    until curl -sf "http://$a/healthz" >/dev/null; do sleep 0.05; done
  done
  metric='penstock_source_records_total{source="bus"}'
  until [ "$(counter "${admins[@]}")" -gt 0 ]; do sleep 0.02; done
  start="$(date +%s.%N)"
  ticks0=0
  for p in "${gateway_pids[@]}"; do ticks0=$((ticks0 + $(cpu_ticks "$p"))); done
  metric='penstock_sink_records_total{sink="out"}'
  until [ "$(counter "${admins[@]}")" -ge "$records" ]; do sleep 0.05; done
  end="$(date +%s.%N)"
  ticks1=0
  for p in "${gateway_pids[@]}"; do ticks1=$((ticks1 + $(cpu_ticks "$p"))); done
  hz="$(getconf CLK_TCK)"
  python3 - "$n" "$records" "$start" "$end" "$ticks0" "$ticks1" "$hz" <<'EOF'
import sys
n, records, start, end, t0, t1, hz = sys.argv[1:]
seconds = float(end) - float(start)
cpu = (int(t1) - int(t0)) / int(hz)
print(f"{n} gateway(s): {int(records) / seconds:,.0f} records/s over {seconds:.2f} s, "
      f"{cpu / (int(records) / 1e6):.3f} CPU-s per million records (gateways only)")
EOF
  for p in "${gateway_pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
done
