# Sourced by the end-to-end benchmarks that deliver to a grpc-go OTLP receiver: everything
# setup.sh does, then starts `otap-interop serve-otlp` on 127.0.0.1:4418 (`receiver` is its
# pid). It serves until fd 3 closes, then writes its counts to $work/receiver.err.
. benches/e2e/setup.sh
(cd tests/interop-go && go build -o bin/otap-interop .)
mkfifo "$work/in"
tests/interop-go/bin/otap-interop serve-otlp -listen 127.0.0.1:4418 < "$work/in" \
  > /dev/null 2> "$work/receiver.err" &
receiver=$!
pids+=("$receiver")
exec 3> "$work/in"
