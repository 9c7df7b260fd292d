# Sourced by the comparison benchmarks that send with the Go senders (after
# benches/e2e/setup.sh, with `interop` set): the requests they send, made once and kept in
# target/compare.
#
#   generator_frames LOGS BATCH
#
# prints the path of a file of LOGS logs in OTLP logs requests of BATCH logs, each a frame (a
# 4-byte little-endian length and the ExportLogsServiceRequest), made the first time: Penstock's
# generator (`engine::datagen`, the logs `penstock loadgen` sends: a service resource, 8-12
# attributes including `exception.type` and `http.*`, a text body; here with trace ids and
# bodies that never repeat, about 346 bytes a log) sent by its OTLP sink, uncompressed, into a
# grpc-go OTLP receiver that writes the requests out (after a line saying where it listens: a
# signal byte and the request, length-prefixed), kept without the signal byte.
generator_frames() {
  local logs=$1 batch=$2
  local frames="target/compare/generator-logs-$logs-$batch.bin"
  if [ ! -s "$frames" ]; then
    mkdir -p target/compare
    cat > "$work/generate.sql" <<SQL
CREATE SOURCE g FROM GENERATOR WITH (signal = 'logs', batch = $batch, records = $logs, rate = 0, seed = 7);
CREATE SINK o TO OTLP WITH (endpoint = 'http://127.0.0.1:4418', compression = 'none', batch = $batch);
CREATE PIPELINE p FROM g AS BEGIN INSERT INTO o SELECT * FROM logs; END;
SQL
    rm -f "$work/gen.in"; mkfifo "$work/gen.in"
    "$interop" serve-otlp -listen 127.0.0.1:4418 < "$work/gen.in" > "$work/tagged.bin" 2> /dev/null &
    local gen_receiver=$!
    exec 4> "$work/gen.in"
    wait_port 4418 >&2
    "$bin" run --workers 1 "$work/generate.sql" > "$work/generate.log" 2>&1
    exec 4>&-
    wait "$gen_receiver" 2>/dev/null || true
    python3 - "$work/tagged.bin" "$frames.part" "$(( (logs + batch - 1) / batch ))" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
# After the receiver's "listening ADDR" line.
out, at, count = bytearray(), data.index(b"\n") + 1, 0
while at < len(data):
    (n,) = struct.unpack_from("<I", data, at)
    frame = data[at + 5 : at + 4 + n]
    out += struct.pack("<I", len(frame)) + frame
    at += 4 + n
    count += 1
if count != int(sys.argv[3]):
    sys.exit(f"the generator's requests: {count}, not {sys.argv[3]}")
open(sys.argv[2], "wb").write(out)
PY
    mv "$frames.part" "$frames"
  fi
  echo "$frames"
}
