#!/usr/bin/env bash
# Builds the OpenTelemetry Collector used by the comparison benchmarks with the
# OpenTelemetry Collector Builder (ocb), from collector-builder.yaml, into
# benches/compare/bin/otelcol-penstock-bench.
#
#   benches/compare/build-collector.sh          # build unless up to date
#   benches/compare/build-collector.sh --force  # rebuild
#
# The build is skipped when the binary exists and the manifest's sha256 equals
# the one stored beside the binary. The builder is installed with `go install`
# at the collector release named in the manifest (the version on the
# go.opentelemetry.io/collector/receiver/otlpreceiver line). Needs Go and the
# Go module proxy; the first build downloads the modules and takes several
# minutes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
manifest="$here/collector-builder.yaml"
name=otelcol-penstock-bench
bin_dir="$here/bin"
binary="$bin_dir/$name"
stamp="$binary.manifest-sha256"
build_dir="$here/.build"

force=0
case "${1:-}" in
  "") ;;
  --force) force=1 ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

say() { echo "build-collector: $*"; }
fail() { echo "build-collector: error: $*" >&2; exit 1; }

[ -f "$manifest" ] || fail "manifest not found: $manifest"

hash=$(sha256sum "$manifest" | cut -d' ' -f1)
if [ "$force" = 0 ] && [ -x "$binary" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  say "up to date: $binary (manifest sha256 $hash)"
  exit 0
fi

command -v go > /dev/null ||
  fail "Go is not installed or not on PATH; the collector builder needs the go command (https://go.dev/doc/install)"
say "using $(go version)"

ocb_version=$(sed -n 's#^[ -]*gomod: *go\.opentelemetry\.io/collector/receiver/otlpreceiver *\(v[^ ]*\).*#\1#p' "$manifest" | head -n 1)
[ -n "$ocb_version" ] ||
  fail "no 'gomod: go.opentelemetry.io/collector/receiver/otlpreceiver VERSION' line in $manifest"

tools_dir="$build_dir/tools/builder-$ocb_version"
ocb="$tools_dir/builder"
if [ ! -x "$ocb" ]; then
  say "installing go.opentelemetry.io/collector/cmd/builder@$ocb_version into $tools_dir"
  mkdir -p "$tools_dir"
  GOBIN="$tools_dir" go install "go.opentelemetry.io/collector/cmd/builder@$ocb_version" ||
    fail "could not install the collector builder $ocb_version"
fi
say "builder: $("$ocb" version 2>&1)"

# ocb resolves output_path against the working directory and creates only its
# last component.
cd "$here"
out_dir=$(awk '$1 == "output_path:" { print $2; exit }' "$manifest")
[ -n "$out_dir" ] || fail "no dist.output_path in $manifest"
mkdir -p "$(dirname "$out_dir")"

say "building $name from $manifest (the first build downloads modules and takes several minutes)"
start=$(date +%s)
"$ocb" --config "$manifest" || fail "ocb failed; see the output above"
built="$out_dir/$name"
[ -x "$built" ] || fail "ocb finished but $here/$built is missing"

mkdir -p "$bin_dir"
rm -f "$stamp"
cp "$built" "$binary.tmp"
mv "$binary.tmp" "$binary"
echo "$hash" > "$stamp"
say "built $binary in $(( $(date +%s) - start ))s ($(du -h "$binary" | cut -f1))"
"$binary" --version
