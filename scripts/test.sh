#!/usr/bin/env bash
# The test suite, as `make test` and .ci/run run it (.ci/run adds --full: upstream suites, the
# collector stack, every crash-fuzz trial). Starts (and stops) every service an integration
# test needs. pytest's exit code 5 ("no tests ran") is a failure here.
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

# On every core (pytest-xdist; each test has its own store files, ports and PostgreSQL
# database). Many tests wait on the subprocesses they start, so one worker more than cores.
# SPANPOINT_TEST_WORKERS=0 runs in one process; arguments given here override these.
workers=${SPANPOINT_TEST_WORKERS:-$(( $(nproc 2>/dev/null || echo 1) + 1 ))}
parallel=()
if [ "$workers" != "0" ]; then parallel=(-n "$workers" --dist worksteal); fi
"$BIN/python" -m pytest "${parallel[@]}" "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests — that is a failure" >&2
  exit 1
fi
exit "$status"
