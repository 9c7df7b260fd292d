#!/usr/bin/env bash
# Penstock and the OpenTelemetry Collector side by side, through the same load: for each
# cell of the matrix, the same `penstock loadgen` run (another process) goes to Penstock and
# then to the Collector (built by build-collector.sh), each with one core's worth of workers
# (`--workers 1` / GOMAXPROCS=1, or 2), renaming `exception.type` to `error.type`, into a Go
# receiver (grpc-go OTLP for OTLP out, the reference otel-arrow consumer for OTAP out). Per
# cell and system: logs/s, CPU-seconds per million logs (from /proc), peak RSS (VmHWM); the
# median of RUNS runs. Writes target/compare/results.jsonl and target/compare/results.md.
#
# usage: [PENSTOCK_BIN=path] [RUNS=3] [RECORDS=1000000] [SYSTEMS="penstock collector"]
#          benches/compare/run.sh [CELL...]
#   CELL: IN-OUT-COMPRESSION-BATCH-WORKERS, e.g. otap-otap-zstd-4096-1 (IN and OUT: otlp or
#   otap; COMPRESSION: none or zstd, of the output, and of the input for OTLP). Without
#   cells, a default set.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${RUNS:-3}"
records="${RECORDS:-1000000}"
cells=("$@")
if [ ${#cells[@]} -eq 0 ]; then
  cells=(otlp-otlp-none-4096-1 otlp-otlp-zstd-4096-1 otap-otap-zstd-4096-1 otlp-otap-zstd-4096-1)
fi
. benches/e2e/setup.sh
benches/compare/build-collector.sh
. benches/compare/rename.sh
collector=benches/compare/bin/otelcol-penstock-bench
(cd tests/interop-go && go build -o bin/otap-interop .)
interop=tests/interop-go/bin/otap-interop
out=target/compare
mkdir -p "$out"
: > "$out/results.jsonl"

# wait_port PORT: until something listens on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 1 600); do
    (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# receiver OUT: starts the Go receiver for OUT on port 4418 (fd 3 keeps it serving).
receiver() {
  rm -f "$work/in"
  mkfifo "$work/in"
  local serve=serve-otlp
  [ "$1" = otap ] && serve=serve
  "$interop" "$serve" -listen 127.0.0.1:4418 < "$work/in" > /dev/null 2> "$work/receiver.err" &
  receiver_pid=$!
  pids+=("$receiver_pid")
  exec 3> "$work/in"
  wait_port 4418
}

stop_receiver() {
  exec 3>&-
  wait "$receiver_pid" 2>/dev/null || true
}

# penstock IN OUT COMPRESSION WORKERS: starts Penstock on port 4317; sets system_pid.
penstock() {
  local kind=OTLP
  [ "$2" = otap ] && kind=OTAP
  cat > "$work/penstock.sql" <<EOF
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK out TO $kind WITH (endpoint = 'http://127.0.0.1:4418', compression = '$3');
CREATE PIPELINE p FROM edge AS BEGIN
  ALTER TABLE logs RENAME ATTRIBUTE 'exception.type' TO 'error.type';
  INSERT INTO out SELECT * FROM logs;
END;
EOF
  "$bin" run --workers "$4" "$work/penstock.sql" > "$work/system.log" 2>&1 &
  system_pid=$!
  pids+=("$system_pid")
  wait_port 4317
}

# collector IN OUT COMPRESSION WORKERS: starts the Collector on port 4317; sets system_pid.
collector() {
  local receiver_yaml exporter_yaml
  if [ "$1" = otap ]; then
    receiver_yaml="otelarrow: {protocols: {grpc: {endpoint: 127.0.0.1:4317}}}"
  else
    receiver_yaml="otlp: {protocols: {grpc: {endpoint: 127.0.0.1:4317}}}"
  fi
  if [ "$2" = otap ]; then
    exporter_yaml="otelarrow: {endpoint: 127.0.0.1:4418, compression: $3, tls: {insecure: true}}"
  else
    exporter_yaml="otlp_grpc: {endpoint: 127.0.0.1:4418, compression: $3, tls: {insecure: true}}"
  fi
  cat > "$work/collector.yaml" <<EOF
receivers:
  $receiver_yaml
processors:
$RENAME_PROCESSOR
  batch: {}
exporters:
  $exporter_yaml
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    logs:
      receivers: [${receiver_yaml%%:*}]
      processors: [transform, batch]
      exporters: [${exporter_yaml%%:*}]
EOF
  GOMAXPROCS="$4" "$collector" --config "$work/collector.yaml" > "$work/system.log" 2>&1 &
  system_pid=$!
  pids+=("$system_pid")
  wait_port 4317
}

# measure SYSTEM CELL RUN: one run; appends a JSON line.
measure() {
  local system=$1 cell=$2 run=$3
  IFS=- read -r in output compression batch workers <<< "$cell"
  receiver "$output"
  "$system" "$in" "$output" "$compression" "$workers"
  local load_compression=$compression
  # A run that stalls (LOAD_TIMEOUT, default 300 s) is recorded as failed, with no numbers.
  timeout "${LOAD_TIMEOUT:-300}" "$bin" loadgen --endpoint http://127.0.0.1:4317 \
    --protocol "$in" --records "$records" --batch "$batch" --streams 2 --in-flight 4 \
    --compression "$load_compression" --measure-pid "$system_pid" > "$work/load.txt" ||
    echo "$system $cell run $run: the load did not complete" >&2
  local rate cpu rss
  rate="$(sed -n 's/.*: \([0-9]*\) records\/s.*/\1/p' "$work/load.txt")"
  cpu="$(sed -n 's/.*CPU-seconds, \([0-9.]*\) CPU-seconds per million.*/\1/p' "$work/load.txt")"
  rss="$(awk '/^VmHWM:/ {print $2 * 1024}' "/proc/$system_pid/status")"
  kill -TERM "$system_pid"
  wait "$system_pid" 2>/dev/null || true
  stop_receiver
  printf '{"system":"%s","cell":"%s","run":%d,"logs_per_s":%s,"cpu_s_per_million":%s,"peak_rss_bytes":%s}\n' \
    "$system" "$cell" "$run" "${rate:-0}" "${cpu:-0}" "${rss:-0}" | tee -a "$out/results.jsonl"
}

for cell in "${cells[@]}"; do
  for run in $(seq 1 "$runs"); do
    for system in ${SYSTEMS:-penstock collector}; do
      measure "$system" "$cell" "$run"
    done
  done
done

# The median of each cell and system, as a Markdown table.
python3 - "$out/results.jsonl" > "$out/results.md" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
cells = list(dict.fromkeys(r["cell"] for r in rows))
def median(system, cell, key):
    # Runs that did not complete have no rate (0) and are left out.
    values = [r[key] for r in rows if r["system"] == system and r["cell"] == cell and r["logs_per_s"] > 0]
    return statistics.median(values) if values else float("nan")
print("| cell (in-out-compression-batch-workers) | Penstock logs/s | Collector logs/s | Penstock CPU-s/M | Collector CPU-s/M | Collector / Penstock CPU | Penstock peak RSS | Collector peak RSS |")
print("|---|---|---|---|---|---|---|---|")
for cell in cells:
    p, c = (median(s, cell, "cpu_s_per_million") for s in ("penstock", "collector"))
    print(f"| {cell} | {median('penstock', cell, 'logs_per_s'):,.0f} | {median('collector', cell, 'logs_per_s'):,.0f} "
          f"| {p:.3f} | {c:.3f} | {c / p:.1f}x | {median('penstock', cell, 'peak_rss_bytes') / 2**20:.0f} MiB "
          f"| {median('collector', cell, 'peak_rss_bytes') / 2**20:.0f} MiB |")
EOF
cat "$out/results.md"
