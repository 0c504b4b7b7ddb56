# Shared by the e2e scripts: where builds are cached and how Go is found. Sourced, not run.
# shellcheck shell=bash
SPANPOINT_CACHE=${SPANPOINT_CACHE:-$HOME/.cache/spanpoint}
CACHE_BIN="$SPANPOINT_CACHE/bin"
CACHE_BUILD="$SPANPOINT_CACHE/build"
mkdir -p "$CACHE_BIN" "$CACHE_BUILD"

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }

# A fresh machine may lack Go, or have an older one than the collector needs; the distribution's
# go plus GOTOOLCHAIN=auto fetches the required toolchain through the Go module proxy.
ensure_go() {
  export PATH="$PATH:/usr/local/go/bin:/usr/lib/go/bin"
  if ! command -v go >/dev/null 2>&1; then
    log "installing Go from the distribution's packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >&2
  fi
  export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
  export GOFLAGS=${GOFLAGS:--buildvcs=false}
}

# Serialise concurrent builds of the same artefact (two test runs on one machine).
with_lock() {
  local name=$1; shift
  exec 9>"$CACHE_BUILD/$name.lock"
  flock 9
  "$@"
}
