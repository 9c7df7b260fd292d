#!/usr/bin/env bash
# Penstock and the OpenTelemetry Collector side by side, through the same load: for each
# cell of the matrix, the same sender (another process) sends the same logs to Penstock and
# then to the Collector (built by build-collector.sh), each with the same number of cores'
# worth of workers (`--workers N` / GOMAXPROCS=N), into a Go receiver (grpc-go OTLP for OTLP
# out, the reference otel-arrow consumer for OTAP out). Per cell and system: logs/s,
# CPU-seconds per million logs (from /proc), peak RSS (VmHWM), wire bytes per log sent, and
# with `penstock loadgen` the codec floor (the CPU of only decompressing what was sent and
# compressing it again); the median of RUNS runs. Writes target/compare/results.jsonl (one
# JSON line per run, naming its sender), results.md and one SVG chart per measure, and with
# REPORT=docs replaces the generated part of docs/benchmarks.md and its charts in docs/img/.
#
# SENDER picks the sender:
#   real (the default): what real clients send. OTLP cells: the pdata gRPC logs client
#     (`otap-interop export-traces -signal logs`, the client of the Collector's otlp
#     exporter) with the cell's compression (zstd: the Collector's pooled compressor),
#     2 connections x 4 calls at once, each call waiting for its answer. OTAP cells: the
#     reference Go producer (`otap-interop send`: otel-arrow v0.50.0's producer, the one
#     inside the Collector's otelarrow exporter) with the exporter's defaults whatever the
#     cell's compression (dictionary deltas, IPC zstd, gRPC compression zstdarrow5 as the
#     exporter's `zstd` sends), one stream (the exporter's on 2 cores) kept open until every
#     batch has its status, as the exporter keeps its streams, 8 batches at most without a
#     status. Both send RECORDS logs rounded up to whole
#     requests of the cell's batch, made once by Penstock's generator and kept in
#     target/compare (frames.sh: the generator `penstock loadgen` uses, about 346 bytes a
#     log, trace ids and bodies that never repeat). CPU is read from /proc of the system's
#     process, from before the load until the work is done (after the sender's last answer,
#     until its CPU stays still for a second); logs/s is the logs over the sender's time from
#     its start to its last answer (the reference producer encodes as it sends); the codec
#     floor is not measured (n/a).
#   loadgen: `penstock loadgen` (2 connections x 4 in flight, the same 8 requests of the
#     generator in turn, gRPC compression of OTLP as the cell's, none for OTAP), which reads
#     the system's CPU from /proc itself, from its start until the last acknowledgement, and
#     measures the codec floor.
#
# usage: [PENSTOCK_BIN=path] [SENDER=real|loadgen] [RUNS=3] [RECORDS=1000000]
#        [SYSTEMS="penstock collector"] [PASS_THROUGH=false] [REPORT=docs]
#        benches/compare/run.sh [CELL...]
#   CELL: IN-OUT-COMPRESSION-BATCH-WORKERS[-PIPELINE], e.g. otap-otap-zstd-4096-1-rename
#   (IN and OUT: otlp or otap; COMPRESSION: none or zstd, of the output, and of the input for
#   OTLP; PIPELINE: pass, rename (the default), renames, full or guard, see pipelines.sh).
#   MATRIX=full runs the whole matrix (72 cells, without `renames`); without cells, a default
#   set.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${RUNS:-3}"
records="${RECORDS:-1000000}"
sender="${SENDER:-real}"
case "$sender" in
  real | loadgen) ;;
  *) echo "SENDER=$sender: real or loadgen" >&2; exit 2 ;;
esac
cells=("$@")
if [ ${#cells[@]} -eq 0 ] && [ "${MATRIX:-}" = full ]; then
  for io in otap-otap otlp-otlp otlp-otap; do
    for compression in none zstd; do
      for pipeline in pass rename full; do
        for batch in 256 4096; do
          for workers in 1 2; do
            cells+=("$io-$compression-$batch-$workers-$pipeline")
          done
        done
      done
    done
  done
elif [ ${#cells[@]} -eq 0 ]; then
  cells=(otlp-otlp-none-4096-1-rename otlp-otlp-zstd-4096-1-rename otap-otap-zstd-4096-1-rename
    otap-otap-zstd-4096-1-full otlp-otap-zstd-4096-1-rename)
fi
. benches/e2e/setup.sh
benches/compare/build-collector.sh
. benches/compare/pipelines.sh
collector=benches/compare/bin/otelcol-penstock-bench
(cd tests/interop-go && go build -o bin/otap-interop .)
interop=tests/interop-go/bin/otap-interop
. benches/compare/frames.sh
out=target/compare
mkdir -p "$out"
: > "$out/results.jsonl"
hz=$(getconf CLK_TCK)

# The real senders' requests, made before any run (the generator uses port 4418 too).
declare -A frames_of
if [ "$sender" = real ]; then
  for cell in "${cells[@]}"; do
    IFS=- read -r _ _ _ batch _ _ <<< "$cell"
    [ -n "${frames_of[$batch]:-}" ] ||
      frames_of[$batch]=$(generator_frames $(( (records + batch - 1) / batch * batch )) "$batch")
  done
fi

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

# penstock IN OUT COMPRESSION WORKERS PIPELINE: starts Penstock on port 4317; sets
# system_pid.
penstock() {
  local kind=OTLP extra=", pass_through = ${PASS_THROUGH:-true}"
  # PASS_THROUGH=false makes an OTAP sink decode and re-encode what it could forward, and an
  # OTLP sink decode and re-encode what it could splice.
  [ "$2" = otap ] && kind=OTAP
  cat > "$work/penstock.sql" <<SQL
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK out TO $kind WITH (endpoint = 'http://127.0.0.1:4418', compression = '$3'$extra);
CREATE PIPELINE p FROM edge AS BEGIN
$(penstock_statements "$5")
  INSERT INTO out SELECT * FROM logs;
END;
SQL
  "$bin" run --workers "$4" "$work/penstock.sql" > "$work/system.log" 2>&1 &
  system_pid=$!
  pids+=("$system_pid")
  wait_port 4317
}

# collector IN OUT COMPRESSION WORKERS PIPELINE: starts the Collector on port 4317; sets
# system_pid.
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
  cat > "$work/collector.yaml" <<YAML
receivers:
  $receiver_yaml
processors:
$(collector_processors "$5")
  batch: {}
exporters:
  $exporter_yaml
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    logs:
      receivers: [${receiver_yaml%%:*}]
      processors: [$(collector_chain "$5")]
      exporters: [${exporter_yaml%%:*}]
YAML
  GOMAXPROCS="$4" "$collector" --config "$work/collector.yaml" > "$work/system.log" 2>&1 &
  system_pid=$!
  pids+=("$system_pid")
  wait_port 4317
}

# field NAME: the number after "NAME " in the load's output (0 when absent).
field() {
  sed -n "s/.*$1 \([0-9.]*\).*/\1/p" "$work/load.txt" | head -1 | grep . || echo 0
}

# cpu_ticks PID: user + system clock ticks of PID so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure_real SYSTEM CELL RUN: one run with the real senders; appends a JSON line.
measure_real() {
  local system=$1 cell=$2 run=$3
  IFS=- read -r in output compression batch workers pipeline <<< "$cell"
  pipeline="${pipeline:-rename}"
  local frames=${frames_of[$batch]}
  local logs=$(( (records + batch - 1) / batch * batch )) requests=$(( (records + batch - 1) / batch ))
  receiver "$output"
  "$system" "$in" "$output" "$compression" "$workers" "$pipeline"
  local before last now name acknowledged
  before=$(cpu_ticks "$system_pid")
  # A run that stalls (LOAD_TIMEOUT, default 300 s) is recorded as failed, with no numbers.
  if [ "$in" = otlp ]; then
    name=pdata-grpc
    timeout "${LOAD_TIMEOUT:-300}" "$interop" export-traces -signal logs -addr 127.0.0.1:4317 \
      -connections 2 -in-flight 4 -compression "$compression" -call-timeout 120s -quiet \
      < "$frames" > "$work/load.txt" 2> "$work/load.err" ||
      echo "$system $cell run $run: the load did not complete: $(cat "$work/load.err")" >&2
    acknowledged=$(sed -n 's/^sent \([0-9]*\) requests in .*, 0 refused,.*/\1/p' "$work/load.txt")
  else
    name=otelarrow-producer
    timeout "${LOAD_TIMEOUT:-300}" "$interop" send -signal logs -addr 127.0.0.1:4317 \
      -compression zstdarrow5 -in-flight 8 -timeout "${LOAD_TIMEOUT:-300}s" -summary \
      < "$frames" > "$work/statuses.txt" 2> "$work/load.txt" ||
      echo "$system $cell run $run: the load did not complete: $(cat "$work/load.txt")" >&2
    acknowledged=$(grep -c '"code":0' "$work/statuses.txt" || true)
  fi
  # The work is done once the system's CPU stays still for a second.
  sleep 1
  last=-1
  while now=$(cpu_ticks "$system_pid") && [ "$now" != "$last" ]; do last=$now; sleep 1; done
  local rss seconds wire
  rss="$(awk '/^VmHWM:/ {print $2 * 1024}' "/proc/$system_pid/status")"
  seconds=$(sed -n 's/^sent [0-9]* [a-z]* in \([0-9.]*\) s,.*/\1/p' "$work/load.txt")
  wire=$(sed -n 's/.*, \([0-9]*\) bytes on the wire.*/\1/p' "$work/load.txt")
  kill -TERM "$system_pid"
  wait "$system_pid" 2>/dev/null || true
  stop_receiver
  if [ "${acknowledged:-0}" != "$requests" ]; then
    echo "$system $cell run $run: ${acknowledged:-0} of $requests requests acknowledged" >&2
    seconds=""
  fi
  awk -v sys="$system" -v cell="$cell" -v run="$run" -v sender="$name" -v logs="$logs" \
    -v seconds="${seconds:-0}" -v ticks="$((now - before))" -v hz="$hz" -v rss="${rss:-0}" \
    -v wire="${wire:-0}" 'BEGIN {
      rate = seconds > 0 ? logs / seconds : 0
      printf "{\"system\":\"%s\",\"cell\":\"%s\",\"sender\":\"%s\",\"run\":%d,\"logs\":%d,\"logs_per_s\":%.0f,\"cpu_s_per_million\":%.3f,\"peak_rss_bytes\":%d,\"wire_bytes_per_log\":%.1f,\"floor_cpu_s_per_million\":null}\n",
        sys, cell, sender, run, logs, rate, ticks / hz / (logs / 1e6), rss, wire / logs
    }' | tee -a "$out/results.jsonl"
}

# measure SYSTEM CELL RUN: one run with `penstock loadgen`; appends a JSON line.
measure() {
  local system=$1 cell=$2 run=$3
  IFS=- read -r in output compression batch workers pipeline <<< "$cell"
  pipeline="${pipeline:-rename}"
  receiver "$output"
  "$system" "$in" "$output" "$compression" "$workers" "$pipeline"
  # COLLECTOR_OTAP_RECORDS (default: as many as the others) sets the logs of the Collector's
  # OTAP-input runs alone; the numbers are per log either way.
  local count=$records
  [ "$system" = collector ] && [ "$in" = otap ] && count="${COLLECTOR_OTAP_RECORDS:-$records}"
  # A run that stalls (LOAD_TIMEOUT, default 300 s) is recorded as failed, with no numbers.
  timeout "${LOAD_TIMEOUT:-300}" "$bin" loadgen --endpoint http://127.0.0.1:4317 \
    --protocol "$in" --records "$count" --batch "$batch" --streams 2 --in-flight 4 \
    --compression "$compression" --measure-pid "$system_pid" --floor > "$work/load.txt" ||
    echo "$system $cell run $run: the load did not complete" >&2
  local rate cpu rss
  rate="$(sed -n 's/.*: \([0-9]*\) records\/s.*/\1/p' "$work/load.txt")"
  cpu="$(sed -n 's/.*CPU-seconds, \([0-9.]*\) CPU-seconds per million.*/\1/p' "$work/load.txt")"
  rss="$(awk '/^VmHWM:/ {print $2 * 1024}' "/proc/$system_pid/status")"
  kill -TERM "$system_pid"
  wait "$system_pid" 2>/dev/null || true
  stop_receiver
  printf '{"system":"%s","cell":"%s","sender":"penstock-loadgen","run":%d,"logs_per_s":%s,"cpu_s_per_million":%s,"peak_rss_bytes":%s,"wire_bytes_per_log":%s,"floor_cpu_s_per_million":%s}\n' \
    "$system" "$cell" "$run" "${rate:-0}" "${cpu:-0}" "${rss:-0}" \
    "$(field "wire bytes per record:")" "$(field "codec floor:")" | tee -a "$out/results.jsonl"
}

for cell in "${cells[@]}"; do
  for run in $(seq 1 "$runs"); do
    for system in ${SYSTEMS:-penstock collector}; do
      if [ "$sender" = real ]; then
        measure_real "$system" "$cell" "$run"
      else
        measure "$system" "$cell" "$run"
      fi
    done
  done
done

args=("$out/results.jsonl" "$out")
[ "${REPORT:-}" = docs ] && args+=(docs/benchmarks.md docs/img)
python3 benches/compare/report.py "${args[@]}"
cat "$out/results.md"
