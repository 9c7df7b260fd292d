#!/usr/bin/env bash
# Fan-in benchmark: many concurrent OTLP Exports multiplexed on one HTTP/2 connection (what an
# L7 proxy or a busy Collector sends) against the same load from 8 concurrent requests. The
# gateway runs one pipeline to a CONSOLE sink that prints only counts; `penstock loadgen`
# sends 4096-log requests (about 1.3 MB each, uncompressed and zstd) on one connection and
# sends refused ones again after the delay the gateway asks. Prints records/s, refusals and
# the gateway's CPU-seconds per million records for each case.
#
# usage: [PENSTOCK_BIN=path] benches/e2e/fan_in.sh [RECORDS] [WORKERS]
#        (defaults 2000000 and 1 and 2 workers)
set -euo pipefail
cd "$(dirname "$0")/../.."
records="${1:-2000000}"
workers_list="${2:-1 2}"
. benches/e2e/bin.sh
work="$(mktemp -d)"
gateway=""
cleanup() { [ -n "$gateway" ] && kill "$gateway" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

cat > "$work/fan_in.sql" <<'SQL'
CREATE SOURCE otlp FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK counts TO CONSOLE WITH (limit = 0);
CREATE PIPELINE all_logs FROM otlp AS BEGIN
  INSERT INTO counts SELECT * FROM logs;
END;
SQL

for workers in $workers_list; do
  for compression in none zstd; do
  for in_flight in 8 64 256; do
    "$bin" run --workers "$workers" "$work/fan_in.sql" > "$work/gateway.log" 2>&1 &
    gateway=$!
    for _ in $(seq 1 600); do grep -q "gRPC on" "$work/gateway.log" && break; sleep 0.1; done
    echo "== $workers worker(s), $in_flight concurrent requests on one connection, $compression"
    "$bin" loadgen --endpoint http://127.0.0.1:4317 --signal logs --records "$records" \
      --batch 4096 --streams 1 --in-flight "$in_flight" --compression "$compression" \
      --measure-pid "$gateway"
    kill -TERM "$gateway"; wait "$gateway" 2>/dev/null || true; gateway=""
  done
  done
done
