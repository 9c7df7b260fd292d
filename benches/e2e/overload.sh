#!/usr/bin/env bash
# Overload with a memory limit: measures the gateway's capacity (logs, 1 rename, OTLP in and
# out, into a grpc-go OTLP receiver), then offers twice that for SECONDS seconds through many
# connections, samples the gateway's resident memory every half second, and reports its
# maximum against the limit, what senders saw (acknowledged, refusals they sent again,
# errors) and what the receiver got (acknowledged must equal delivered).
#
# usage: [PENSTOCK_BIN=path] benches/e2e/overload.sh [LIMIT] [SECONDS] [WORKERS]
#        (defaults 256MiB 60 1); writes the RSS curve to $OUT (default target/overload-rss.csv)
set -euo pipefail
cd "$(dirname "$0")/../.."
limit="${1:-256MiB}"
seconds="${2:-60}"
workers="${3:-1}"
out="${OUT:-target/overload-rss.csv}"
. benches/e2e/receiver.sh

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

acked() { sed -n 's/^\([0-9]*\) logs acknowledged.*/\1/p' "$1"; }

echo "== capacity: 500000 logs, batch 4096, 2 connections x 4 in flight, $workers worker(s)"
"$bin" loadgen --records 500000 --batch 4096 --streams 2 --in-flight 4 | tee "$work/capacity.txt"
capacity="$(sed -n 's/.*: \([0-9]*\) records\/s.*/\1/p' "$work/capacity.txt")"
rate=$((capacity * 2))
records=$((rate * seconds))

echo "== overload: $rate logs/s (2x capacity) for ${seconds}s, 16 connections x 16 in flight, --memory-limit $limit"
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
  | tee "$work/overload.txt"
kill "$sampler" 2>/dev/null || true
metrics="$(curl -s http://127.0.0.1:4419/metrics || true)"
kill -TERM "$gateway"
wait "$gateway" || true
exec 3>&-
wait "$receiver" || true

sent=$(( $(acked "$work/capacity.txt") + $(acked "$work/overload.txt") ))
delivered="$(sed -n 's/.*logs [0-9]* exports, \([0-9]*\) .*/\1/p' "$work/receiver.err")"
max_rss="$(tail -n +2 "$out" | cut -d, -f2 | sort -n | tail -1)"
limit_bytes="$(echo "$metrics" | sed -n 's/^penstock_memory_limit_bytes \([0-9]*\)/\1/p')"
echo "== result"
echo "capacity: $capacity logs/s; offered: $rate logs/s"
echo "acknowledged to senders: $sent logs; delivered to the receiver: $delivered logs"
echo "peak RSS: $((max_rss >> 20)) MiB of a $((limit_bytes >> 20)) MiB limit ($(echo "scale=1; 100 * $max_rss / $limit_bytes" | bc)%)"
echo "$metrics" | grep -E '^penstock_memory_(refusals_total|peak_rss_bytes)' || true
echo "RSS curve: $out"
[ "$sent" = "$delivered" ] || { echo "acknowledged and delivered differ" >&2; exit 1; }
