#!/usr/bin/env bash
# Merging metric series: Penstock beside the OpenTelemetry Collector's metricstransform
# processor (aggregate_labels, what it can do of the same), on one core each (`--workers 1` /
# GOMAXPROCS=1), through the same load: POINTS data points (default 1M) of a delta sum in
# 10,000 series (100 routes x 100 pods), made and sent by the pdata gRPC metrics client
# (`otap-interop export-traces -signal metrics -generate`, gzip as the Collector's otlp exporter
# sends, 4 connections, 1000 points a request), to a grpc-go OTLP receiver. Both drop the pod:
# 100 series are left. Penstock merges them per 1 s interval across requests
# (`ALTER TABLE metrics DROP ATTRIBUTE 'k8s.pod.name'`, `metric_interval = '1s'`, so that every
# interval ends while it runs); metricstransform sums the points of one request that collide,
# so the Collector still sends one point per series and request. Prints, per system and run:
# CPU-seconds per million points (from /proc, from start until everything was sent), peak
# RSS (VmHWM), and the points the receiver got.
#
# usage: [PENSTOCK_BIN=path] [RUNS=3] [POINTS=1000000] benches/compare/merge_metrics.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${RUNS:-3}"
points="${POINTS:-1000000}"
. benches/e2e/setup.sh
benches/compare/build-collector.sh
collector=benches/compare/bin/otelcol-penstock-bench
(cd tests/interop-go && go build -o bin/otap-interop .)
interop=tests/interop-go/bin/otap-interop
. benches/compare/measure.sh

cat > "$work/penstock.sql" <<'SQL'
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK backend TO OTLP WITH (endpoint = 'http://127.0.0.1:4418', compression = 'gzip');
CREATE PIPELINE pods FROM edge WITH (metric_interval = '1s') AS BEGIN
  ALTER TABLE metrics DROP ATTRIBUTE 'k8s.pod.name';
  INSERT INTO backend SELECT * FROM metrics;
END;
SQL

cat > "$work/collector.yaml" <<'YAML'
receivers:
  otlp: {protocols: {grpc: {endpoint: 127.0.0.1:4317}}}
processors:
  metricstransform:
    transforms:
      - include: http.server.requests
        action: update
        operations:
          - {action: aggregate_labels, label_set: [http.route], aggregation_type: sum}
  batch: {}
exporters:
  otlp_grpc: {endpoint: 127.0.0.1:4418, compression: gzip, tls: {insecure: true}}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [metricstransform, batch]
      exporters: [otlp_grpc]
YAML

for run in $(seq 1 "$runs"); do
  for system in penstock collector; do
    measure "$system" 1 "$interop" export-traces -signal metrics -addr 127.0.0.1:4317 \
      -generate "$points" -series 10000 -batch 1000 -connections 4 -quiet
    got=$(grep -o 'metrics [0-9]* exports, [0-9]* data points' "$work/receiver.err" | awk '{print $4}')
    hz=$(getconf CLK_TCK)
    awk -v s="$system" -v r="$run" -v t="$ticks" -v hz="$hz" -v n="$points" -v rss="$rss" \
      -v got="${got:-0}" -v sent="$(cat "$work/sent.txt")" 'BEGIN {
        printf "%s run %d: %.3f CPU-s per million points, peak RSS %.0f MB, %d of %d points sent on (%s)\n",
          s, r, t / hz / (n / 1e6), rss / 1e6, got, n, sent }'
  done
done
