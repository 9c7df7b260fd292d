#!/usr/bin/env bash
# Scaling of the gateway's workers on this machine: the same job with 1 and with 2 workers,
# nothing else running. On 2 cores an outside load generator would take the second worker's
# core, so the load is made inside the gateway: a GENERATOR source (every worker generates its
# share: synthetic OTLP logs, encoded and decoded into Arrow as a receiver would) goes through
# a pipeline (PIPELINE of pipelines.sh, `full` by default: four renames and a filter) into a
# CONSOLE sink that shows nothing. Per run: wall-clock seconds, logs/s and CPU-seconds per
# million logs of 1 worker, of 2 workers, and of two 1-worker gateways run at once (what the
# machine itself gives two processes that share nothing); the medians of RUNS runs, and the
# throughput of 2 workers and of the two gateways as multiples of 1 worker's.
#
# usage: [PENSTOCK_BIN=path] [RUNS=3] [RECORDS=20000000] [BATCH=4096] [PIPELINE=full]
#        [DISTINCT=16 (0: every batch generated)] benches/compare/scaling.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${RUNS:-3}"
records="${RECORDS:-20000000}"
batch="${BATCH:-4096}"
pipeline="${PIPELINE:-full}"
distinct="${DISTINCT:-16}"
bin="${PENSTOCK_BIN:-target/release/penstock}"
[ -x "$bin" ] || cargo build --release -p penstock-server --locked
. benches/compare/pipelines.sh
out=target/compare
mkdir -p "$out"
sql="$out/scaling.sql"
{
  echo "CREATE SOURCE gen FROM GENERATOR WITH (signal = 'logs', rate = 0, batch = $batch, records = $records, distinct = $distinct);"
  echo "CREATE SINK quiet TO CONSOLE WITH (limit = 0);"
  echo "CREATE PIPELINE p FROM gen AS BEGIN"
  penstock_statements "$pipeline"
  echo "INSERT INTO quiet SELECT * FROM logs;"
  echo "END;"
} > "$sql"
results="$out/scaling.jsonl"
: > "$results"
TIMEFORMAT='%R %U %S'
# record WORKERS RUN REAL USER SYS [PROCESSES]: appends a JSON line.
record() {
  python3 - "$records" "$@" >> "$results" <<'PY'
import json, sys
records, workers, run = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
real, user, sys_ = map(float, sys.argv[4:7])
processes = int(sys.argv[7]) if len(sys.argv) > 7 else 1
total = records * processes
print(json.dumps({"workers": workers, "run": run, "records": total, "seconds": real,
                  "logs_per_s": total / real, "cpu_s_per_m": (user + sys_) / total * 1e6}))
PY
  tail -1 "$results"
}
for run in $(seq 1 "$runs"); do
  for workers in 1 2; do
    timing=$( { time "$bin" run --workers "$workers" "$sql" > /dev/null 2>&1; } 2>&1 )
    read -r real user sys <<< "$timing"
    record "$workers" "$run" "$real" "$user" "$sys"
  done
  # The machine's own ceiling: two single-worker gateways at once, nothing shared between them.
  timing=$( { time { "$bin" run --workers 1 "$sql" > /dev/null 2>&1 &
    "$bin" run --workers 1 "$sql" > /dev/null 2>&1; wait; }; } 2>&1 )
  read -r real user sys <<< "$timing"
  record "2x1" "$run" "$real" "$user" "$sys" 2
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
kinds = {"1": "1 worker", "2": "2 workers", "2x1": "2 gateways of 1 worker at once"}
median = {w: {k: statistics.median(r[k] for r in rows if r["workers"] == w)
              for k in ("logs_per_s", "cpu_s_per_m")} for w in kinds}
for w, name in kinds.items():
    print(f"{name}: {median[w]['logs_per_s']:,.0f} logs/s, "
          f"{median[w]['cpu_s_per_m']:.3f} CPU-s per million logs (median)")
one = median["1"]["logs_per_s"]
print(f"2 workers / 1 worker: {median['2']['logs_per_s'] / one:.2f}x the throughput; "
      f"the machine's ceiling (2 gateways / 1): {median['2x1']['logs_per_s'] / one:.2f}x")
PY
