#!/usr/bin/env bash
# What live queries cost the data path, in instructions (repeatable on a noisy machine, unlike
# CPU time): the front gateway of run.sh runs under `valgrind --tool=callgrind`, its counters
# are zeroed when the load starts and dumped when it ends, first with no query attached, then
# with the 4 live queries of queries.sh. Prints the instructions of each case and their ratio.
#
# usage: [PENSTOCK_BIN=path] benches/e2e/queries_instructions.sh [RECORDS] [WORKERS]
#        (defaults 300000 2; about a minute per case)
set -euo pipefail
cd "$(dirname "$0")/../.."
records="${1:-300000}"
workers="${2:-2}"
. benches/e2e/bin.sh
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

wait_for() { # FILE TEXT: waits for TEXT in FILE
  for _ in $(seq 1 1200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "gateway did not start: $(cat "$1")" >&2; return 1
}

. benches/e2e/live_queries.sh
sed "s/@PROTOCOL@/OTLP/" benches/e2e/front.sql.in > "$work/front.sql"
declare -A counted
for queries in 0 4; do
  "$bin" run --workers "$workers" benches/e2e/back.sql > "$work/back.log" 2>&1 & pids+=($!)
  wait_for "$work/back.log" "gRPC on"
  valgrind --tool=callgrind --callgrind-out-file="$work/front.$queries.out" \
    "$bin" run --workers "$workers" --query-listen 127.0.0.1:4320 "$work/front.sql" \
    > "$work/front.log" 2>&1 & front=$!; pids+=($front)
  wait_for "$work/front.log" "Flight SQL on"
  if [ "$queries" -gt 0 ]; then
    attach_live_queries http://127.0.0.1:4320
    # The queries are planned and attached before the counters are zeroed.
    for _ in $(seq 1 100); do
      attached=$("$bin" query --endpoint http://127.0.0.1:4320 --format csv \
        "SELECT count(*) FROM system.queries WHERE sql NOT LIKE '%system.%'" | tail -1)
      [ "$attached" = "4" ] && break
      sleep 0.2
    done
  fi
  callgrind_control -z "$front" > /dev/null
  "$bin" loadgen --endpoint http://127.0.0.1:4317 --protocol otlp --signal logs \
    --records "$records" --batch 4096 --streams 2 --in-flight 4 > "$work/load.log"
  callgrind_control -d "$front" > /dev/null
  [ "$queries" -gt 0 ] && exec 3>&-
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
  counted[$queries]=$(grep -h '^summary' "$work"/front.$queries.out.* | sort -n -k2 | tail -1 | awk '{print $2}')
  echo "== $records logs, batch 4096, $workers workers, $queries live queries: ${counted[$queries]} instructions"
  grep acknowledged "$work/load.log"
done
awk -v a="${counted[0]}" -v b="${counted[4]}" 'BEGIN { printf "ratio (4 live queries / none): %.3f\n", b / a }'
