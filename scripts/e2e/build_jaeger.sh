#!/usr/bin/env bash
# Build Jaeger v2 (the all-in-one `jaeger` binary, itself an OpenTelemetry Collector
# distribution) from its Go module, once per machine, cached under $SPANPOINT_CACHE/bin keyed by
# version. `go install module@version` refuses modules with replace directives (Jaeger has one),
# so the module source comes from the proxy via `go mod download` and is built in place.
# Jaeger's v2 releases are tagged on the v1 module path: v1.76.0 is Jaeger v2.13.0.
# Prints the binary's path on stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=scripts/e2e/common.sh
source "$ROOT/scripts/e2e/common.sh"

JAEGER_MODULE_VERSION=${JAEGER_MODULE_VERSION:-v1.76.0}
TARGET="$CACHE_BIN/jaeger-$JAEGER_MODULE_VERSION"

build() {
  [ -x "$TARGET" ] && return 0
  ensure_go
  log "fetching github.com/jaegertracing/jaeger@$JAEGER_MODULE_VERSION through the Go module proxy"
  local src
  src=$(cd "$CACHE_BUILD" && go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_MODULE_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || { log "go mod download gave no source directory"; return 1; }
  local dir="$CACHE_BUILD/jaeger-$JAEGER_MODULE_VERSION"
  rm -rf "$dir" && cp -r "$src" "$dir" && chmod -R u+w "$dir"
  log "building jaeger in $dir — the first build takes several minutes"
  local start=$SECONDS
  # -s -w: no symbol tables; a smaller binary links faster and needs less memory.
  (cd "$dir" && go build -trimpath -ldflags="-s -w" -o "$TARGET.tmp" ./cmd/jaeger >&2)
  mv "$TARGET.tmp" "$TARGET"
  log "built $TARGET in $((SECONDS - start))s"
}

with_lock "jaeger-$JAEGER_MODULE_VERSION" build
echo "$TARGET"
