#!/usr/bin/env bash
# What a disk buffer costs: the same load (logs, OTLP in and out, 1 rename, into a grpc-go
# OTLP receiver) through a sink without a buffer and through one with `buffer = 'disk'`
# (every batch written, synced in groups, read back and delivered); records/s and the
# gateway's CPU-seconds per million records for each.
#
# usage: [PENSTOCK_BIN=path] benches/e2e/buffer.sh [RECORDS] [BATCH] [WORKERS]
#        (defaults 1000000 4096 1)
set -euo pipefail
cd "$(dirname "$0")/../.."
records="${1:-1000000}"
batch="${2:-4096}"
workers="${3:-1}"
. benches/e2e/receiver.sh

for buffer in "" ", buffer = 'disk', buffer_path = '$work/buffer'"; do
  cat > "$work/gateway.sql" <<EOF
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK backend TO OTLP WITH (endpoint = 'http://127.0.0.1:4418'$buffer);
CREATE PIPELINE p FROM edge AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  INSERT INTO backend SELECT * FROM logs;
END;
EOF
  "$bin" run --workers "$workers" "$work/gateway.sql" > "$work/gateway.log" 2>&1 &
  gateway=$!
  pids+=("$gateway")
  wait_listening "$work/gateway.log"
  label="without a buffer"
  [ -n "$buffer" ] && label="with a disk buffer"
  echo "== sink $label: $records logs, batch $batch, $workers worker(s)"
  "$bin" loadgen --records "$records" --batch "$batch" --streams 2 --in-flight 4 --measure-pid "$gateway"
  kill -TERM "$gateway"
  wait "$gateway" || true
done
