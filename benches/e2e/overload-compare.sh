#!/usr/bin/env bash
# The overload benchmark (overload.sh) for Penstock and then the OpenTelemetry Collector,
# with the same limit, duration and workers, and a chart of both resident memory curves
# against the limit: target/overload-rss.svg (and docs/img/overload-rss.svg with
# REPORT=docs). Each system's summary is in target/overload-SYSTEM.txt.
#
# Both runs' senders give up DEADLINE seconds after the overload starts (default three times
# SECONDS; see overload.sh), so a system that drains slowly ends in bounded time and reports
# what it left unacknowledged.
#
# usage: [PENSTOCK_BIN=path] [REPORT=docs] [DEADLINE=seconds] benches/e2e/overload-compare.sh
#        [LIMIT] [SECONDS] [WORKERS] (defaults 256MiB 60 1)
set -euo pipefail
cd "$(dirname "$0")/../.."
limit="${1:-256MiB}"
seconds="${2:-60}"
workers="${3:-1}"
export DEADLINE="${DEADLINE:-$((seconds * 3))}"
mkdir -p target
for system in penstock collector; do
  SYSTEM=$system OUT="target/overload-rss-$system.csv" \
    benches/e2e/overload.sh "$limit" "$seconds" "$workers" | tee "target/overload-$system.txt"
done
limit_bytes="$(python3 -c "
import re, sys
n, unit = re.fullmatch(r'(\d+)\s*([KMGT]i?B|B?)', sys.argv[1]).groups()
print(int(n) * {'': 1, 'B': 1, 'KiB': 1 << 10, 'MiB': 1 << 20, 'GiB': 1 << 30, 'KB': 10**3, 'MB': 10**6, 'GB': 10**9}[unit])
" "$limit")"
python3 benches/e2e/rss_chart.py "$limit_bytes" target/overload-rss.svg \
  penstock=target/overload-rss-penstock.csv collector=target/overload-rss-collector.csv
if [ "${REPORT:-}" = docs ]; then
  mkdir -p docs/img
  cp target/overload-rss.svg docs/img/overload-rss.svg
fi
echo "chart: target/overload-rss.svg"
