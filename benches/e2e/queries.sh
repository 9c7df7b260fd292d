#!/usr/bin/env bash
# What live queries cost the data path: `penstock loadgen` sends OTLP logs (batch 4096) to the
# front gateway of run.sh (4 renames, a filter, two routes, OTLP on to a back gateway), first
# with no query attached, then with 4 live queries attached (three readers and one client that
# never reads). Reports the front gateway's CPU-seconds per million records for each.
#
# usage: [PENSTOCK_BIN=path] [QUERY_COUNTS="0 4"] benches/e2e/queries.sh [RECORDS] [WORKERS]
#        (defaults 2000000 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
records="${1:-2000000}"
workers="${2:-2}"
. benches/e2e/bin.sh
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

wait_for() { # FILE TEXT: waits for TEXT in FILE
  for _ in $(seq 1 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "gateway did not start: $(cat "$1")" >&2; return 1
}

. benches/e2e/live_queries.sh
sed "s/@PROTOCOL@/OTLP/" benches/e2e/front.sql.in > "$work/front.sql"
for queries in ${QUERY_COUNTS:-0 4}; do
  "$bin" run --workers "$workers" benches/e2e/back.sql > "$work/back.log" 2>&1 & pids+=($!)
  wait_for "$work/back.log" "gRPC on"
  "$bin" run --workers "$workers" --query-listen 127.0.0.1:4320 "$work/front.sql" \
    > "$work/front.log" 2>&1 & front=$!; pids+=($front)
  wait_for "$work/front.log" "Flight SQL on"
  if [ "$queries" -gt 0 ]; then
    attach_live_queries http://127.0.0.1:4320
    sleep 2
  fi
  echo "== OTLP in -> OTLP out, $records logs, batch 4096, $workers workers, $queries live queries"
  "$bin" loadgen --endpoint http://127.0.0.1:4317 --protocol otlp --signal logs \
    --records "$records" --batch 4096 --streams 2 --in-flight 4 --measure-pid "$front"
  if [ "$queries" -gt 0 ]; then
    "$bin" query --endpoint http://127.0.0.1:4320 \
      "SELECT batches_offered, batches_skipped, sql FROM system.queries WHERE sql NOT LIKE '%system.%'"
    exec 3>&-
  fi
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
done
