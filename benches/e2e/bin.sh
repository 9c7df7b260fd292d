# Sourced by the end-to-end benchmarks: `bin` is the binary to measure, PENSTOCK_BIN or this
# checkout's release build (built here, into CARGO_TARGET_DIR when it is set).
if [ -n "${PENSTOCK_BIN:-}" ]; then
  bin="$PENSTOCK_BIN"
else
  cargo build --release -p penstock-server --locked
  bin="${CARGO_TARGET_DIR:-target}/release/penstock"
fi
