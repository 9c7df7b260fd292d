#!/usr/bin/env bash
# End-to-end benchmark of `penstock run` on loopback: `penstock loadgen` sends logs to a front
# gateway (4 renames + filter + route) that forwards to a back gateway, over OTAP and then over
# OTLP, and reports records/s and the front gateway's CPU-seconds per million records.
#
# usage: [PENSTOCK_BIN=path] benches/e2e/run.sh [RECORDS] [BATCH] [WORKERS]
#        (defaults 2000000 4096 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
records="${1:-2000000}"
batch="${2:-4096}"
workers="${3:-2}"
. benches/e2e/bin.sh
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

wait_listening() { # FILE: waits for the "gRPC on" line
  for _ in $(seq 1 600); do grep -q "gRPC on" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "gateway did not start: $(cat "$1")" >&2; return 1
}

for protocol in OTAP OTLP; do
  sed "s/@PROTOCOL@/$protocol/" benches/e2e/front.sql.in > "$work/front.sql"
  "$bin" run --workers "$workers" benches/e2e/back.sql > "$work/back.log" 2>&1 & pids+=($!)
  wait_listening "$work/back.log"
  "$bin" run --workers "$workers" "$work/front.sql" > "$work/front.log" 2>&1 & front=$!; pids+=($front)
  wait_listening "$work/front.log"
  lower="$(echo "$protocol" | tr '[:upper:]' '[:lower:]')"
  echo "== $protocol in -> $protocol out, $records logs, batch $batch, $workers workers"
  "$bin" loadgen --endpoint http://127.0.0.1:4317 --protocol "$lower" --signal logs \
    --records "$records" --batch "$batch" --streams 2 --in-flight 4 --measure-pid "$front"
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
done
