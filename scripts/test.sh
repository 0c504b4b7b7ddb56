#!/usr/bin/env bash
# The full test suite, as `make test` and .ci/run run it. Starts (and stops) every service an
# integration test needs. pytest's exit code 5 ("no tests ran") is a failure here.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}

cleanup() { for hook in "${CLEANUP[@]}"; do eval "$hook" || true; done; }
CLEANUP=()
trap cleanup EXIT

# Services for integration tests register themselves here (see scripts/services.d/).
if [ -d scripts/services.d ]; then
  for svc in scripts/services.d/*.sh; do
    [ -e "$svc" ] || continue
    # shellcheck source=/dev/null
    source "$svc"
  done
fi

"$BIN/python" -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests — that is a failure" >&2
  exit 1
fi
exit "$status"
