#!/usr/bin/env bash
# Instructions per item of one codec operation, counted by valgrind (cachegrind) rather than
# timed: the count does not depend on how busy the machine is, so small changes compare
# reliably. Runs `codec_loop` for 10 and for 30 rounds of 4096 items and divides the
# difference by 20 x 4096, which leaves out the set-up (data generation, warm-up).
#
#   benches/instructions.sh logs otlp_decode
#   benches/instructions.sh logs otap_encode target/release/examples/codec_loop
#
# Build first: cargo build --release -p penstock-examples --example codec_loop
set -euo pipefail
signal=${1:?signal: logs, traces or metrics}
operation=${2:?operation, e.g. otlp_decode, otlp_encode, otap_decode, otap_encode}
binary=${3:-target/release/examples/codec_loop}
command -v valgrind > /dev/null || { echo "valgrind is not installed" >&2; exit 1; }
count() {
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
    "$binary" "$signal" "$operation" "$1" 2>&1 |
    awk '/I +refs:/ { gsub(",", "", $4); print $4 }'
}
short=$(count 10)
long=$(count 30)
echo "$signal $operation: $(( (long - short) / (20 * 4096) )) instructions per item"
