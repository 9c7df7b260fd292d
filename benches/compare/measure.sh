# Sourced by the comparison benchmarks (after benches/e2e/setup.sh): measures one system on
# one core through one load.
#
#   measure SYSTEM SETTLE SENDER...
#
# starts a grpc-go OTLP receiver on 127.0.0.1:4418 (with RECEIVER=serve, the reference
# otel-arrow OTAP consumer instead), then SYSTEM (penstock: "$bin" run
# --workers 1 "$work/penstock.sql"; collector: "$collector" --config "$work/collector.yaml"
# with GOMAXPROCS=1) on 127.0.0.1:4317, runs SENDER... (its output in "$work/sent.txt"),
# waits SETTLE seconds and until the system's CPU stays still for a second (the work is
# done), stops it with SIGTERM and sets: ticks (user + system clock ticks from before the
# load until the work was done; the drain is not counted), rss (peak RSS in bytes, VmHWM)
# and the receiver's summary in "$work/receiver.err". PENSTOCK_ARGS adds arguments to `penstock
# run`, RECEIVER_ARGS to the receiver's; with METRICS_URL, what it answers once the work is done
# is kept in "$work/metrics.txt".

# cpu_ticks PID: user + system clock ticks of PID so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

measure() {
  local system=$1 settle=$2
  shift 2
  rm -f "$work/in"; mkfifo "$work/in"
  # shellcheck disable=SC2086 # RECEIVER_ARGS: more arguments, split on spaces
  "$interop" "${RECEIVER:-serve-otlp}" -listen 127.0.0.1:4418 ${RECEIVER_ARGS:-} < "$work/in" \
    > /dev/null 2> "$work/receiver.err" &
  local receiver=$!; pids+=("$receiver")
  exec 3> "$work/in"
  wait_port 4418
  if [ "$system" = penstock ]; then
    # shellcheck disable=SC2086 # PENSTOCK_ARGS: more arguments, split on spaces
    "$bin" run --workers 1 ${PENSTOCK_ARGS:-} "$work/penstock.sql" > "$work/system.log" 2>&1 &
  else
    GOMAXPROCS=1 "$collector" --config "$work/collector.yaml" > "$work/system.log" 2>&1 &
  fi
  local pid=$!; pids+=("$pid")
  wait_port 4317
  local before last now
  before=$(cpu_ticks "$pid")
  "$@" > "$work/sent.txt"
  sleep "$settle"
  last=-1
  while now=$(cpu_ticks "$pid") && [ "$now" != "$last" ]; do last=$now; sleep 1; done
  rss=$(awk '/^VmHWM:/ {print $2 * 1024}' "/proc/$pid/status")
  ticks=$(( $(cpu_ticks "$pid") - before ))
  : > "$work/metrics.txt"
  [ -n "${METRICS_URL:-}" ] && curl -s "$METRICS_URL" > "$work/metrics.txt" || true
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  exec 3>&-
  wait "$receiver" 2>/dev/null || true
}
