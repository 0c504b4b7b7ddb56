#!/usr/bin/env bash
# Install Prometheus from the distribution's packages (needs root) and print the binary's path.
# The package's own service is not used: scripts/e2e/stack.sh runs the binary with its own
# configuration, data directory and a free port on 127.0.0.1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=scripts/e2e/common.sh
source "$ROOT/scripts/e2e/common.sh"

find_prometheus() { command -v prometheus || { [ -x /usr/bin/prometheus ] && echo /usr/bin/prometheus; }; }

if ! find_prometheus >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    log "Prometheus is missing and this is not root: apt-get install -y prometheus, then rerun"
    exit 1
  fi
  log "installing Prometheus from the distribution's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # --no-install-recommends: the exporters it recommends would start services of their own.
  apt-get install -y -qq --no-install-recommends prometheus >&2
fi
find_prometheus
