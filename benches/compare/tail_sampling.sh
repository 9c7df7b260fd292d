#!/usr/bin/env bash
# Tail sampling: Penstock beside the OpenTelemetry Collector's tail_sampling processor, on one
# core each (`--workers 1` / GOMAXPROCS=1), through the same load: SPANS spans (default 1M) in
# traces of 1 to 8 spans, made and sent by the pdata gRPC traces client (`otap-interop
# export-traces -generate`, gzip as the Collector's otlp exporter sends, 4 connections), to a
# grpc-go OTLP receiver. The policy: any error, or a trace longer than 2 s, or 5% of traces;
# decision_wait 2 s; room for every trace of the run (max_traces / num_traces 400000); the
# Collector batches what tail_sampling keeps before its exporter, as its docs advise. Prints,
# per system and run: CPU-seconds per million spans (from /proc, from start until every trace
# was decided and sent), peak RSS (VmHWM), and the spans the receiver got.
#
# usage: [PENSTOCK_BIN=path] [RUNS=3] [SPANS=1000000] benches/compare/tail_sampling.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${RUNS:-3}"
spans="${SPANS:-1000000}"
. benches/e2e/setup.sh
benches/compare/build-collector.sh
collector=benches/compare/bin/otelcol-penstock-bench
(cd tests/interop-go && go build -o bin/otap-interop .)
interop=tests/interop-go/bin/otap-interop
. benches/compare/measure.sh

cat > "$work/penstock.sql" <<'SQL'
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK backend TO OTLP WITH (endpoint = 'http://127.0.0.1:4418', compression = 'gzip');
CREATE PIPELINE sample FROM edge WITH (decision_wait = '2s', max_traces = 400000, max_held_bytes = '4GiB') AS BEGIN
  INSERT INTO backend SELECT * FROM spans
    WHERE trace_id IN (SELECT trace_id FROM spans GROUP BY trace_id
                       HAVING bool_or(status.code = 2)
                           OR max(CAST(end_time_unix_nano AS BIGINT)) - min(CAST(start_time_unix_nano AS BIGINT)) >= 2000000000
                           OR sample(trace_id, 0.05));
END;
SQL

cat > "$work/collector.yaml" <<'YAML'
receivers:
  otlp: {protocols: {grpc: {endpoint: 127.0.0.1:4317}}}
processors:
  tail_sampling:
    decision_wait: 2s
    num_traces: 400000
    policies:
      - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
      - {name: slow, type: latency, latency: {threshold_ms: 2000}}
      - {name: share, type: probabilistic, probabilistic: {sampling_percentage: 5}}
  # tail_sampling sends each kept trace as a request of its own: without batching them, the
  # exporter's queue (1000 requests) overflows and drops traces.
  batch: {}
exporters:
  otlp_grpc: {endpoint: 127.0.0.1:4418, compression: gzip, tls: {insecure: true}}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    traces:
      receivers: [otlp]
      processors: [tail_sampling, batch]
      exporters: [otlp_grpc]
YAML

for run in $(seq 1 "$runs"); do
  for system in penstock collector; do
    # Every trace is decided 2 s after its first span and then sent.
    measure "$system" 3 "$interop" export-traces -addr 127.0.0.1:4317 -generate "$spans" \
      -connections 4 -quiet
    got=$(grep -o 'traces [0-9]* exports, [0-9]* spans' "$work/receiver.err" | awk '{print $4}')
    hz=$(getconf CLK_TCK)
    awk -v s="$system" -v r="$run" -v t="$ticks" -v hz="$hz" -v n="$spans" -v rss="$rss" \
      -v got="${got:-0}" -v sent="$(cat "$work/sent.txt")" 'BEGIN {
        printf "%s run %d: %.3f CPU-s per million spans, peak RSS %.0f MB, %d of %d spans kept (%s)\n",
          s, r, t / hz / (n / 1e6), rss / 1e6, got, n, sent }'
  done
done
