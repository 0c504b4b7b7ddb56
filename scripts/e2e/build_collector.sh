#!/usr/bin/env bash
# Build the spanpoint OpenTelemetry Collector from collector/builder.yaml with ocb, once per
# machine: the binary is cached under $SPANPOINT_CACHE/bin keyed by the manifest's hash, so
# editing builder.yaml (a version bump, a new component) rebuilds and nothing else does.
# Prints the binary's path on stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=scripts/e2e/common.sh
source "$ROOT/scripts/e2e/common.sh"

MANIFEST="$ROOT/collector/builder.yaml"
OCB_VERSION=$(sed -n 's|.*go.opentelemetry.io/collector/receiver/otlpreceiver \(v[0-9.]*\).*|\1|p' "$MANIFEST")
KEY=$(sha256sum "$MANIFEST" | cut -c1-12)
TARGET="$CACHE_BIN/otelcol-spanpoint-$KEY"

build() {
  [ -x "$TARGET" ] && return 0
  ensure_go
  local ocb="$CACHE_BIN/ocb-$OCB_VERSION"
  if [ ! -x "$ocb" ]; then
    log "installing ocb $OCB_VERSION through the Go module proxy"
    GOBIN="$CACHE_BUILD/ocb-$OCB_VERSION" go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION"
    mv "$CACHE_BUILD/ocb-$OCB_VERSION/builder" "$ocb"
  fi
  local dir="$CACHE_BUILD/otelcol-$KEY"
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$MANIFEST" "$dir/builder.yaml"
  log "building the collector ($KEY) in $dir — the first build takes several minutes"
  local start=$SECONDS
  (cd "$dir" && "$ocb" --config builder.yaml >&2)
  cp "$dir/_build/otelcol-spanpoint" "$TARGET.tmp" && mv "$TARGET.tmp" "$TARGET"
  log "built $TARGET in $((SECONDS - start))s"
}

with_lock "otelcol-$KEY" build
echo "$TARGET"
