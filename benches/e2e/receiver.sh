# Sourced by the end-to-end benchmarks that deliver to a grpc-go OTLP receiver: sets `bin`
# (PENSTOCK_BIN, or this checkout's release build), `work` (a scratch directory removed at
# exit, with every process in `pids` killed) and starts `otap-interop serve-otlp` on
# 127.0.0.1:4418 (`receiver` is its pid). It serves until fd 3 closes, then writes its counts
# to $work/receiver.err.
if [ -n "${PENSTOCK_BIN:-}" ]; then
  bin="$PENSTOCK_BIN"
else
  cargo build --release -p penstock-server --locked
  bin=target/release/penstock
fi
(cd tests/interop-go && go build -o bin/otap-interop .)
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkfifo "$work/in"
tests/interop-go/bin/otap-interop serve-otlp -listen 127.0.0.1:4418 < "$work/in" \
  > /dev/null 2> "$work/receiver.err" &
receiver=$!
pids+=("$receiver")
exec 3> "$work/in"

# wait_listening FILE: waits until the gateway logging to FILE listens.
wait_listening() {
  for _ in $(seq 1 600); do grep -q "gRPC on" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "the gateway did not start: $(cat "$1")" >&2
  return 1
}
