#!/usr/bin/env bash
# Kafka in -> Kafka out: a topic of 6 partitions preloaded with RECORDS logs in the Collector's
# otlp_proto encoding (1,000 records per message, written by tests/kafka-go), read by N gateways
# in one consumer group (one worker each), renamed, and written to another topic keyed by
# service (zstd, acks=all). Reports, per N, the records per second
# once the group settled (every gateway holds partitions) to the last record acknowledged by
# the broker, and the gateways' CPU seconds per million records over that time. The broker
# and the load run on the same machine.
#
# usage: [PENSTOCK_BIN=path] benches/e2e/kafka.sh [RECORDS] [N...]   (defaults 3000000 1 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
bin="${PENSTOCK_BIN:-$root/target/release/penstock}"
records="${1:-3000000}"
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
# The group waits 3 s for more members before its first assignment, so N gateways start
# together instead of the first taking every partition until the others join.
PENSTOCK_KAFKA_PROPERTIES="group.initial.rebalance.delay.ms=3000" \
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
# Whether the N gateways of run RUN (settled RUN N): their latest assignments ("the group assigned partitions [0, 1, 2]") cover
# the 6 partitions, each gateway holding some.
settled() {
  local total=0 i list
  for i in $(seq 1 "$2"); do
    list="$(grep -o 'assigned partitions \[[0-9, ]*\]' "$work/g$1-$i.log" | tail -1 |
      sed 's/.*\[//; s/\]//; s/,/ /g')"
    [ -n "$list" ] || return 1
    total=$((total + $(wc -w <<<"$list")))
  done
  [ "$total" -eq 6 ]
}

run=0
for n in "${counts[@]}"; do
  run=$((run + 1))
  "$kgo" topic -brokers "$brokers" -topic "bench_out_$run" -partitions 6
  cat >"$work/g$run.sql" <<EOF
CREATE SOURCE bus FROM KAFKA WITH (brokers = '$brokers', topic = 'bench_in', group = 'bench-$run',
  signal = 'logs', initial_offset = 'earliest');
CREATE SINK out TO KAFKA WITH (brokers = '$brokers', topic = 'bench_out_$run', key = 'service');
CREATE PIPELINE p FROM bus AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  INSERT INTO out SELECT * FROM logs;
END;
EOF
  admins=()
  gateway_pids=()
  for i in $(seq 1 "$n"); do
    aport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    "$bin" run --workers 1 --admin-listen "127.0.0.1:$aport" "$work/g$run.sql" \
      >"$work/g$run-$i.log" 2>&1 &
    gateway_pids+=($!)
    pids+=($!)
    admins+=("127.0.0.1:$aport")
  done
  for a in "${admins[@]}"; do
    until curl -sf "http://$a/healthz" >/dev/null; do sleep 0.05; done
  done
  # The clock starts once the group settled: every gateway holds partitions, 6 in all.
  until settled "$run" "$n"; do sleep 0.02; done
  start="$(date +%s.%N)"
  metric='penstock_sink_records_total{sink="out"}'
  records0="$(counter "${admins[@]}")"
  ticks0=0
  for p in "${gateway_pids[@]}"; do ticks0=$((ticks0 + $(cpu_ticks "$p"))); done
  until [ "$(counter "${admins[@]}")" -ge "$records" ]; do sleep 0.05; done
  end="$(date +%s.%N)"
  ticks1=0
  for p in "${gateway_pids[@]}"; do ticks1=$((ticks1 + $(cpu_ticks "$p"))); done
  hz="$(getconf CLK_TCK)"
  python3 - "$n" "$((records - records0))" "$start" "$end" "$ticks0" "$ticks1" "$hz" <<'EOF'
import sys
n, records, start, end, t0, t1, hz = sys.argv[1:]
seconds = float(end) - float(start)
cpu = (int(t1) - int(t0)) / int(hz)
print(f"{n} gateway(s): {int(records) / seconds:,.0f} records/s ({int(records):,} records in "
      f"{seconds:.2f} s after the group settled), {cpu / (int(records) / 1e6):.3f} CPU-s per "
      f"million records (gateways only)")
EOF
  for p in "${gateway_pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
done
