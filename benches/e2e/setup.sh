# Sourced by the end-to-end benchmarks: sets `bin` (PENSTOCK_BIN, or this checkout's release
# build) and `work` (a scratch directory removed at exit, with every process in `pids`
# killed), and defines wait_listening and wait_port.
. benches/e2e/bin.sh
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# wait_listening FILE: waits until the gateway logging to FILE listens.
wait_listening() {
  for _ in $(seq 1 600); do grep -q "gRPC on" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "the gateway did not start: $(cat "$1")" >&2
  return 1
}

# wait_port PORT: until something listens on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 1 600); do
    (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}
