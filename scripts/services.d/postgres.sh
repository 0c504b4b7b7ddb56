# Sourced by scripts/test.sh: a throwaway PostgreSQL for the tests marked `postgres`.
# Exports SPANPOINT_TEST_PG_DSN and registers the server's stop in CLEANUP. In CI (CI=true) a
# server that cannot start fails the run; elsewhere the postgres tests skip with the reason.
if [ -z "${SPANPOINT_TEST_PG_DSN:-}" ]; then
  if _spanpoint_pg_env=$(PG_FSYNC=off bash scripts/pg.sh start); then
    eval "$_spanpoint_pg_env"
    export SPANPOINT_TEST_PG_DSN="$SPANPOINT_PG_DSN"
    CLEANUP+=("bash scripts/pg.sh stop '$SPANPOINT_PG_DIR'")
    echo "services.d/postgres.sh: PostgreSQL for tests at $SPANPOINT_TEST_PG_DSN" >&2
  elif [ "${CI:-}" = "true" ]; then
    echo "services.d/postgres.sh: PostgreSQL could not be started and CI=true: failing" >&2
    exit 1
  else
    echo "services.d/postgres.sh: WARNING: PostgreSQL could not be started;" \
      "tests marked postgres will be SKIPPED" >&2
  fi
  unset _spanpoint_pg_env
fi
