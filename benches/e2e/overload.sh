#!/usr/bin/env bash
# Overload with a memory limit: measures the gateway's capacity (logs, 1 rename, OTLP in and
# out, into a grpc-go OTLP receiver), then offers twice that for SECONDS seconds through many
# connections, samples the gateway's resident memory every half second, and reports its
# maximum against the limit, what senders saw (acknowledged, refusals they sent again,
# errors) and what the receiver got (acknowledged must equal delivered).
#
# usage: [PENSTOCK_BIN=path] [SYSTEM=penstock|collector] [DEADLINE=seconds]
#        benches/e2e/overload.sh [LIMIT] [SECONDS] [WORKERS] (defaults 256MiB 60 1). With
#        DEADLINE, the senders give up DEADLINE seconds after the overload starts: nothing is
#        sent, or sent again after a refusal, past it (what was sent is still waited for), and
#        the logs left are reported as given up. Writes the RSS curve to $OUT (default
#        target/overload-rss-SYSTEM.csv). SYSTEM=collector runs the same load through the
#        OpenTelemetry Collector (benches/compare/build-collector.sh) with its memory_limiter
#        at LIMIT (spike 20%), GOMAXPROCS=WORKERS, OTLP in, transform, batch, OTLP out.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit="${1:-256MiB}"
seconds="${2:-60}"
workers="${3:-1}"
system="${SYSTEM:-penstock}"
out="${OUT:-target/overload-rss-$system.csv}"
limit_bytes="$(python3 -c "
import re, sys
n, unit = re.fullmatch(r'(\d+)\s*([KMGT]i?B|B?)', sys.argv[1]).groups()
print(int(n) * {'': 1, 'B': 1, 'KiB': 1 << 10, 'MiB': 1 << 20, 'GiB': 1 << 30, 'KB': 10**3, 'MB': 10**6, 'GB': 10**9}[unit])
" "$limit")"
. benches/e2e/receiver.sh

if [ "$system" = collector ]; then
  benches/compare/build-collector.sh
  . benches/compare/rename.sh
  cat > "$work/collector.yaml" <<EOF
receivers:
  otlp: {protocols: {grpc: {endpoint: 127.0.0.1:4317}}}
processors:
  memory_limiter: {check_interval: 100ms, limit_mib: $((limit_bytes >> 20)), spike_limit_mib: $(((limit_bytes >> 20) / 5))}
$RENAME_PROCESSOR
  batch: {}
exporters:
  otlp_grpc: {endpoint: 127.0.0.1:4418, compression: zstd, tls: {insecure: true}}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    logs: {receivers: [otlp], processors: [memory_limiter, transform, batch], exporters: [otlp_grpc]}
EOF
  GOMAXPROCS="$workers" benches/compare/bin/otelcol-penstock-bench --config "$work/collector.yaml" \
    > "$work/gateway.log" 2>&1 &
  gateway=$!
  pids+=("$gateway")
  for _ in $(seq 1 600); do (echo > /dev/tcp/127.0.0.1/4317) 2>/dev/null && break; sleep 0.1; done
else
  cat > "$work/gateway.sql" <<'EOF'
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK backend TO OTLP WITH (endpoint = 'http://127.0.0.1:4418');
CREATE PIPELINE p FROM edge AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  INSERT INTO backend SELECT * FROM logs;
END;
EOF
  "$bin" run --workers "$workers" --memory-limit "$limit" --admin-listen 127.0.0.1:4419 \
    "$work/gateway.sql" > "$work/gateway.log" 2>&1 &
  gateway=$!
  pids+=("$gateway")
  wait_listening "$work/gateway.log"
fi

acked() { sed -n 's/^\([0-9]*\) logs acknowledged.*/\1/p' "$1"; }

echo "== capacity ($system): 500000 logs, batch 4096, 2 connections x 4 in flight, $workers worker(s)"
"$bin" loadgen --records 500000 --batch 4096 --streams 2 --in-flight 4 | tee "$work/capacity.txt"
capacity="$(sed -n 's/.*: \([0-9]*\) records\/s.*/\1/p' "$work/capacity.txt")"
rate=$((capacity * 2))
records=$((rate * seconds))

echo "== overload ($system): $rate logs/s (2x capacity) for ${seconds}s, 16 connections x 16 in flight, memory limit $limit"
: > "$out"
echo "seconds,rss_bytes" >> "$out"
(
  start=$(date +%s.%N)
  while kill -0 "$gateway" 2>/dev/null; do
    rss_kib="$(awk '/^VmRSS:/ {print $2}' "/proc/$gateway/status" 2>/dev/null || echo 0)"
    now=$(date +%s.%N)
    echo "$(echo "$now - $start" | bc),$((rss_kib * 1024))" >> "$out"
    sleep 0.5
  done
) &
sampler=$!
pids+=("$sampler")
"$bin" loadgen --records "$records" --rate "$rate" --batch 4096 --streams 16 --in-flight 16 \
  ${DEADLINE:+--deadline "$DEADLINE"} | tee "$work/overload.txt"
kill "$sampler" 2>/dev/null || true
metrics="$(curl -s http://127.0.0.1:4419/metrics 2>/dev/null || true)"
kill -TERM "$gateway"
wait "$gateway" || true
exec 3>&-
wait "$receiver" || true

sent=$(( $(acked "$work/capacity.txt") + $(acked "$work/overload.txt") ))
delivered="$(sed -n 's/.*logs [0-9]* exports, \([0-9]*\) .*/\1/p' "$work/receiver.err")"
max_rss="$(tail -n +2 "$out" | cut -d, -f2 | sort -n | tail -1)"
echo "== result"
echo "capacity: $capacity logs/s; offered: $rate logs/s"
echo "acknowledged to senders: $sent logs; delivered to the receiver: $delivered logs"
if [ -n "${DEADLINE:-}" ]; then
  given_up="$(sed -n 's/^deadline of [0-9.]* s: \([0-9]*\) .*/\1/p' "$work/overload.txt")"
  echo "given up at the ${DEADLINE} s deadline: $given_up of the $records logs offered"
fi
echo "peak RSS: $((max_rss >> 20)) MiB of a $((limit_bytes >> 20)) MiB limit ($(echo "scale=1; 100 * $max_rss / $limit_bytes" | bc)%)"
echo "$metrics" | grep -E '^penstock_memory_(refusals_total|peak_rss_bytes)' || true
echo "RSS curve: $out"
[ "$sent" = "$delivered" ] || { echo "acknowledged and delivered differ" >&2; exit 1; }
