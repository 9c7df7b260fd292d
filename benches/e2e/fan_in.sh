#!/usr/bin/env bash
# Fan-in benchmark: many concurrent OTLP Exports multiplexed on one HTTP/2 connection (what an
# L7 proxy or a busy Collector sends) against the same load from 16 concurrent requests. The
# gateway runs one pipeline to a CONSOLE sink that prints only counts. The sender (SENDER=real,
# the default) is pdata's gRPC client (`otap-interop export-traces -signal logs -generate`,
# 4096-log requests of about 1.3 MB, uncompressed and gzip, one connection) sending refused
# requests again as the Collector's exporter does (its retry_on_failure defaults: a backoff
# from 5 s, or the RetryInfo delay when longer); SENDER=loadgen sends with `penstock loadgen`
# instead (zstd rather than gzip, refused requests sent again after the delay asked). Prints,
# per case: records/s, requests sent again, body bytes the gateway read and threw away, and
# the gateway's CPU-seconds per million records.
#
# usage: [PENSTOCK_BIN=path] [SENDER=real|loadgen] [IN_FLIGHT="16 256 1000"]
#        [COMPRESSIONS="none gzip"] benches/e2e/fan_in.sh [RECORDS] [WORKERS]
#        (defaults 1048576 and "1 2")
set -euo pipefail
cd "$(dirname "$0")/../.."
records="${1:-1048576}"
workers_list="${2:-1 2}"
sender="${SENDER:-real}"
in_flight_list="${IN_FLIGHT:-16 256 1000}"
. benches/e2e/bin.sh
work="$(mktemp -d)"
gateway=""
cleanup() { [ -n "$gateway" ] && kill "$gateway" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
if [ "$sender" = real ]; then
  (cd tests/interop-go && go build -o bin/otap-interop .)
  interop=tests/interop-go/bin/otap-interop
  compressions="${COMPRESSIONS:-none gzip}"
else
  compressions="${COMPRESSIONS:-none zstd}"
fi

cat > "$work/fan_in.sql" <<'SQL'
CREATE SOURCE otlp FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK counts TO CONSOLE WITH (limit = 0);
CREATE PIPELINE all_logs FROM otlp AS BEGIN
  INSERT INTO counts SELECT * FROM logs;
END;
SQL

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

for workers in $workers_list; do
  for compression in $compressions; do
  for in_flight in $in_flight_list; do
    "$bin" run --workers "$workers" --admin-listen 127.0.0.1:9464 "$work/fan_in.sql" \
      > "$work/gateway.log" 2>&1 &
    gateway=$!
    for _ in $(seq 1 600); do grep -q "gRPC on" "$work/gateway.log" && break; sleep 0.1; done
    echo "== $workers worker(s), $in_flight concurrent requests on one connection, $compression ($sender)"
    if [ "$sender" = real ]; then
      before=$(cpu_ticks "$gateway")
      "$interop" export-traces -addr 127.0.0.1:4317 -signal logs -generate "$records" \
        -batch 4096 -connections 1 -in-flight "$in_flight" -compression "$compression" \
        -call-timeout 60s -retry -quiet | tee "$work/sent.txt"
      ticks=$(( $(cpu_ticks "$gateway") - before ))
      discarded=$(curl -s 127.0.0.1:9464/metrics \
        | awk '/^penstock_discarded_body_bytes_total/ {print $2}')
      awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v n="$records" -v d="${discarded:-0}" \
        -v line="$(cat "$work/sent.txt")" 'BEGIN {
          split(line, f, " "); seconds = f[5]
          printf "%.0f records/s, %s body bytes discarded, %.3f CPU-s per million records\n",
            n / seconds, d, t / hz / (n / 1e6) }'
    else
      "$bin" loadgen --endpoint http://127.0.0.1:4317 --signal logs --records "$records" \
        --batch 4096 --streams 1 --in-flight "$in_flight" --compression "$compression" \
        --measure-pid "$gateway"
    fi
    kill -TERM "$gateway"; wait "$gateway" 2>/dev/null || true; gateway=""
  done
  done
done
