#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests and benchmarks, bound to 127.0.0.1 on a free port.
#
#   eval "$(scripts/pg.sh start)"     # exports SPANPOINT_PG_DSN and SPANPOINT_PG_DIR
#   scripts/pg.sh stop "$SPANPOINT_PG_DIR"     # stop the server and delete its files
#   scripts/pg.sh pause DIR / resume DIR       # stop / start it again, keeping data and port
#
# Installs PostgreSQL from the distribution's packages when it is missing (needs root).
# PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.
# PG_FSYNC=off trades crash safety of the *server* for speed (tests kill clients, not it);
# PG_TMPDIR picks where the throwaway cluster lives (default /tmp).
set -euo pipefail

pg_bindir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then
    pg_config --bindir; return 0
  fi
  return 1
}

ensure_installed() {
  if pg_bindir >/dev/null; then return 0; fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "pg.sh: PostgreSQL is not installed and this is not root; install the 'postgresql'" \
      "package (apt-get install -y postgresql) and run again" >&2
    return 1
  fi
  echo "pg.sh: installing PostgreSQL from the distribution's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q postgresql >&2
  pg_bindir >/dev/null
}

# Run a server binary as a non-root user: postgres refuses root.
as_server_user() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  ensure_installed
  local bin dir port
  bin=$(pg_bindir)
  # Under /tmp by default: as root the server runs as `postgres`, which must reach the folder
  # (a root-only $TMPDIR would not do).
  dir=$(mktemp -d "${PG_TMPDIR:-/tmp}/spanpoint-pg.XXXXXX")
  chmod 0755 "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
  as_server_user "$bin/initdb" -D "$dir/data" -U spanpoint --auth=trust -E UTF8 \
    --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
  port=$(free_port)
  {
    echo "listen_addresses = '127.0.0.1'"
    echo "port = $port"
    echo "unix_socket_directories = '$dir'"
    echo "max_connections = 200"
    echo "fsync = ${PG_FSYNC:-on}"
    if [ "${PG_FSYNC:-on}" = off ]; then
      echo "synchronous_commit = off"
      echo "full_page_writes = off"
    fi
  } | as_server_user tee -a "$dir/data/postgresql.conf" >/dev/null
  echo "$port" >"$dir/port"
  server_start "$dir"
  "$bin/psql" -X -q -h 127.0.0.1 -p "$port" -U spanpoint -d postgres \
    -c "CREATE DATABASE spanpoint" >&2
  local dsn="postgresql://spanpoint@127.0.0.1:$port/spanpoint"
  echo "$dsn" >"$dir/dsn"
  echo "export SPANPOINT_PG_DSN='$dsn'"
  echo "export SPANPOINT_PG_DIR='$dir'"
}

server_start() {
  local bin dir=$1
  bin=$(pg_bindir)
  as_server_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
    || { cat "$dir/server.log" >&2; return 1; }
}

# fast: a clean stop that keeps every acknowledged commit (with PG_FSYNC=off an immediate
# stop may lose the last ones); immediate: for a server whose files are deleted next.
server_stop() {
  local bin dir=$1 mode=${2:-fast}
  bin=$(pg_bindir)
  [ -f "$dir/data/postmaster.pid" ] || return 0
  as_server_user "$bin/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null
}

case "${1:-}" in
  start) start ;;
  stop)
    dir=${2:?usage: pg.sh stop DIR}
    server_stop "$dir" immediate || true
    case "$dir" in */spanpoint-pg.*) rm -rf "$dir" ;; esac
    ;;
  pause) server_stop "${2:?usage: pg.sh pause DIR}" ;;
  resume) server_start "${2:?usage: pg.sh resume DIR}" ;;
  install) ensure_installed ;;
  *)
    echo "usage: pg.sh start | stop DIR | pause DIR | resume DIR | install" >&2
    exit 2
    ;;
esac
