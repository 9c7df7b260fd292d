#!/usr/bin/env bash
# Parsing JSON log bodies into attributes: Penstock (`UPDATE logs SET attributes = attributes ||
# parse_json(body)`) beside the OpenTelemetry Collector's transform processor
# (`merge_maps(log.attributes, ParseJSON(log.body), "upsert")` on bodies that start with `{`),
# on one core each (`--workers 1` / GOMAXPROCS=1), through the same load: LOGS log records
# (default 1M), each with a body that is a JSON object of 10 fields (6 strings, 2 whole numbers,
# a number with a fraction, a bool; their values differ from record to record) and 3 attributes
# of its own, made and sent by the pdata gRPC logs client (`otap-interop export-traces -signal
# logs -generate`, gzip as the Collector's otlp exporter sends, 4 connections, 1000 records a
# request), to a grpc-go OTLP receiver. Both keep the body and add its fields to the record's
# attributes; the Collector batches before its exporter, in batches of 4096 records (8192
# parsed ones would not fit in a 4 MiB request). Prints, per system and run: CPU-seconds per
# million logs (from /proc, from start until everything was sent), peak RSS (VmHWM), the logs
# the receiver got and, of the first request it got, the records that carry every field of
# their body as an attribute of the same value, with the types the first record's non-string
# fields came as (the Collector's ParseJSON makes every JSON number a double). Then the
# Collector's CPU-seconds and peak RSS over Penstock's (medians of the runs). Exits 1 when a
# system lost logs or left fields out.
#
# usage: [PENSTOCK_BIN=path] [RUNS=3] [LOGS=1000000] benches/compare/parse_json.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${RUNS:-3}"
logs="${LOGS:-1000000}"
. benches/e2e/setup.sh
benches/compare/build-collector.sh
collector=benches/compare/bin/otelcol-penstock-bench
(cd tests/interop-go && go build -o bin/otap-interop .)
interop=tests/interop-go/bin/otap-interop
. benches/compare/measure.sh
# The receiver writes the first request it gets as OTLP/JSON, to be checked.
RECEIVER_ARGS="-first-json $work/first.json"

cat > "$work/penstock.sql" <<'SQL'
CREATE SOURCE edge FROM GRPC WITH (listen = '127.0.0.1:4317');
CREATE SINK backend TO OTLP WITH (endpoint = 'http://127.0.0.1:4418', compression = 'gzip');
CREATE PIPELINE parse FROM edge AS BEGIN
  UPDATE logs SET attributes = attributes || parse_json(body);
  INSERT INTO backend SELECT * FROM logs;
END;
SQL

cat > "$work/collector.yaml" <<'YAML'
receivers:
  otlp: {protocols: {grpc: {endpoint: 127.0.0.1:4317}}}
processors:
  transform:
    error_mode: ignore
    log_statements:
      - context: log
        statements:
          - merge_maps(log.attributes, ParseJSON(log.body), "upsert") where IsMatch(log.body, "^\\{")
  # The batch processor's default, 8192 records, comes to 4.5 MB once the bodies are parsed:
  # more than a gRPC server takes by default (4 MiB; the receiver, as the Collector's own), so
  # its exporter's requests would be refused and dropped. Batches of 4096 fit, as Penstock's
  # OTLP sink keeps its requests under max_request_bytes (4 MiB).
  batch: {send_batch_size: 4096, send_batch_max_size: 4096}
exporters:
  otlp_grpc: {endpoint: 127.0.0.1:4418, compression: gzip, tls: {insecure: true}}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    logs:
      receivers: [otlp]
      processors: [transform, batch]
      exporters: [otlp_grpc]
YAML

# check FILE: of the records of the OTLP/JSON logs request in FILE, "KEPT TOTAL TYPES": how
# many carry every field of their JSON body as an attribute of the same value, how many there
# are, and the attribute types of the first record's non-string body fields.
check() {
  python3 - "$1" <<'PY'
import json, sys
def value(v):
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    return v.get("boolValue", v.get("stringValue"))
def same(a, b):
    return a is b if isinstance(a, bool) or isinstance(b, bool) else a == b
request = json.load(open(sys.argv[1]))
records = [r for rl in request.get("resourceLogs", []) for sl in rl.get("scopeLogs", [])
           for r in sl.get("logRecords", [])]
kept, types = 0, "none"
for i, record in enumerate(records):
    body = json.loads(record["body"]["stringValue"])
    attributes = {a["key"]: a.get("value", {}) for a in record.get("attributes", [])}
    kept += all(k in attributes and same(value(attributes[k]), v) for k, v in body.items())
    if i == 0:
        types = ",".join(f"{k}:{next(iter(attributes.get(k) or {'none': 0})).removesuffix('Value')}"
                         for k, v in body.items() if not isinstance(v, str))
print(kept, len(records), types)
PY
}

failed=0
: > "$work/results.txt"
for run in $(seq 1 "$runs"); do
  for system in penstock collector; do
    rm -f "$work/first.json"
    measure "$system" 1 "$interop" export-traces -signal logs -addr 127.0.0.1:4317 \
      -generate "$logs" -batch 1000 -connections 4 -quiet
    got=$(grep -o 'logs [0-9]* exports, [0-9]* log records' "$work/receiver.err" | awk '{print $4}')
    checked="0 0 none"
    [ ! -s "$work/first.json" ] || checked=$(check "$work/first.json" || echo "0 0 unreadable")
    read -r kept total types <<< "$checked"
    cpu=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v n="$logs" 'BEGIN { print t / hz / (n / 1e6) }')
    echo "$system $cpu $rss" >> "$work/results.txt"
    awk -v s="$system" -v r="$run" -v cpu="$cpu" -v n="$logs" -v rss="$rss" -v got="${got:-0}" \
      -v sent="$(cat "$work/sent.txt")" -v kept="$kept" -v total="$total" -v types="$types" 'BEGIN {
        gsub(/:/, " ", types); gsub(/,/, ", ", types)
        printf "%s run %d: %.3f CPU-s per million logs, peak RSS %.0f MB, %d of %d logs received (%s); first request: %d of %d logs with their body fields as attributes (%s)\n",
          s, r, cpu, rss / 1e6, got, n, sent, kept, total, types }'
    if [ "${got:-0}" != "$logs" ] || [ "$total" = 0 ] || [ "$kept" != "$total" ]; then
      failed=1
    fi
  done
done
python3 - "$work/results.txt" "$runs" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
median = {s: [statistics.median(float(r[i]) for r in rows if r[0] == s) for i in (1, 2)]
          for s in ("penstock", "collector")}
(pc, pr), (cc, cr) = median["penstock"], median["collector"]
print(f"collector / penstock (medians of {sys.argv[2]} runs): {cc / pc:.2f}x the CPU-s per "
      f"million logs ({cc:.3f} / {pc:.3f}), {cr / pr:.2f}x the peak RSS "
      f"({cr / 1e6:.0f} MB / {pr / 1e6:.0f} MB)")
PY
if [ "$failed" = 1 ]; then
  echo "a system lost logs or did not add every body field as an attribute" >&2
  exit 1
fi
