#!/usr/bin/env bash
# OTAP in, OTAP out, with the data the Collector's otelarrow exporter sends: Penstock beside the
# OpenTelemetry Collector (otelarrow receiver, transform, otelarrow exporter) on one core each
# (`--workers 1` / GOMAXPROCS=1), running PIPELINE (default `rename`: `exception.type` to
# `error.type`; `full`: four renames and a delete of the logs below INFO; see pipelines.sh),
# into the reference otel-arrow consumer. The sender is the reference Go
# producer (`otap-interop send`: github.com/open-telemetry/otel-arrow/go v0.50.0's
# arrow_record producer, the one inside the otelarrow exporter, with its defaults: dictionary
# deltas, IPC zstd; gRPC compression zstdarrow5 as the exporter's `zstd` level sends) on one
# stream, LOGS logs (default 1,048,576, about 346 bytes each, made once by Penstock's
# generator and kept in target/compare, see frames.sh) in requests of 4096. Prints, per
# system and run: CPU-seconds per million logs (from /proc, from start until the work was
# done), peak RSS (VmHWM), and for Penstock the batches forwarded as received and decoded,
# and why streams were decoded (penstock_otap_fallbacks_total).
#
# usage: [PENSTOCK_BIN=path] [RUNS=3] [LOGS=1048576] [SYSTEMS="penstock collector"]
#        [PIPELINE=rename|full|...] [SINK_COMPRESSION=zstd|none] benches/compare/otap_reference.sh
#   (SINK_COMPRESSION: the gRPC compression of Penstock's OTAP sink, zstd as the Collector's
#   exporter sends)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${RUNS:-3}"
logs="${LOGS:-1048576}"
systems="${SYSTEMS:-penstock collector}"
pipeline="${PIPELINE:-rename}"
. benches/e2e/setup.sh
benches/compare/build-collector.sh
collector=benches/compare/bin/otelcol-penstock-bench
(cd tests/interop-go && go build -o bin/otap-interop .)
interop=tests/interop-go/bin/otap-interop
. benches/compare/measure.sh
. benches/compare/pipelines.sh
. benches/compare/frames.sh

# The requests, once (frames.sh): Penstock's generator, requests of 4096 logs.
frames=$(generator_frames "$logs" 4096)

cat > "$work/penstock.sql" <<SQL
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK backend TO OTAP WITH (endpoint = 'http://127.0.0.1:4418', compression = '${SINK_COMPRESSION:-zstd}');
CREATE PIPELINE p FROM edge AS BEGIN
$(penstock_statements "$pipeline")
  INSERT INTO backend SELECT * FROM logs;
END;
SQL

cat > "$work/collector.yaml" <<YAML
receivers:
  otelarrow: {protocols: {grpc: {endpoint: 127.0.0.1:4317}}}
processors:
$(collector_processors "$pipeline")
exporters:
  otelarrow: {endpoint: 127.0.0.1:4418, tls: {insecure: true}, compression: zstd}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    logs: {receivers: [otelarrow], processors: [$(collector_chain "$pipeline" | sed 's/,* *batch$//')], exporters: [otelarrow]}
YAML

hz=$(getconf CLK_TCK)
for run in $(seq 1 "$runs"); do
  for system in $systems; do
    RECEIVER=serve PENSTOCK_ARGS="--admin-listen 127.0.0.1:19090" \
      METRICS_URL=$([ "$system" = penstock ] && echo http://127.0.0.1:19090/metrics) \
      measure "$system" 1 \
      sh -c "'$interop' send -signal logs -addr 127.0.0.1:4317 -compression zstdarrow5 \
        -timeout 600s < '$frames' | grep -c '\"code\":0'"
    detail=""
    if [ -s "$work/metrics.txt" ]; then
      detail=$(awk '/^penstock_otap_batches_total/ || (/^penstock_otap_fallbacks_total/ && $2 > 0)' \
        "$work/metrics.txt" | tr '\n' ' ')
    fi
    awk -v s="$system" -v r="$run" -v t="$ticks" -v hz="$hz" -v n="$logs" -v rss="$rss" \
      -v ok="$(cat "$work/sent.txt")" -v d="$detail" 'BEGIN {
        printf "%s run %d: %.3f CPU-s per million logs, peak RSS %.0f MB, %d batches acknowledged %s\n",
          s, r, t / hz / (n / 1e6), rss / 1e6, ok, d }'
  done
done
