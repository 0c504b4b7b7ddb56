#!/usr/bin/env bash
# The observability stack without Docker: spanpoint's collector (collector/otelcol.yaml), Jaeger v2
# and Prometheus, all on free 127.0.0.1 ports, state and logs in one directory.
#
#   eval "$(scripts/e2e/stack.sh start DIR)"   # builds/installs on first use, exports the
#                                              # endpoints (OTEL_EXPORTER_OTLP_ENDPOINT, …)
#   scripts/e2e/stack.sh stop DIR              # stops exactly the processes started in DIR
#
# The same script backs tests/e2e and collector/README.md's "without Docker" section.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
E2E="$ROOT/scripts/e2e"
# shellcheck source=scripts/e2e/common.sh
source "$E2E/common.sh"

free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# wait_http NAME URL PIDFILE: until URL answers 2xx, failing fast if the process died.
wait_http() {
  local name=$1 url=$2 pidfile=$3 deadline=$((SECONDS + ${STACK_START_TIMEOUT:-60}))
  until python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$url" 2>/dev/null; do
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      log "$name exited during start-up; its log:"; tail -n 40 "$DIR/$name.log" >&2; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      log "$name not ready at $url; its log:"; tail -n 40 "$DIR/$name.log" >&2; return 1
    fi
    sleep 0.3
  done
}

spawn() {  # spawn NAME CMD...: background, own process group, log and pid in $DIR
  local name=$1; shift
  setsid "$@" >"$DIR/$name.log" 2>&1 < /dev/null &
  echo $! >"$DIR/$name.pid"
}

start() {
  mkdir -p "$DIR"
  local otelcol jaeger prometheus
  # On a cold machine both builds start at once: one downloads modules while the other compiles.
  bash "$E2E/build_jaeger.sh" >"$DIR/jaeger.path" &
  local jaeger_build=$!
  otelcol=$(bash "$E2E/build_collector.sh")
  wait "$jaeger_build" || { log "building Jaeger failed"; return 1; }
  jaeger=$(cat "$DIR/jaeger.path")
  prometheus=$(bash "$E2E/install_prometheus.sh")

  read -r OTLP_GRPC OTLP_HTTP HEALTH PROM_EXPORTER J_OTLP J_OTLP_HTTP J_QUERY J_GRPC PROM \
    T_OTLP T_OTLP_HTTP T_QUERY T_GRPC < <(free_ports 13)
  cat >"$DIR/stack.env" <<ENV
OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTLP_HTTP
OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf
SPANPOINT_STACK_DIR=$DIR
SPANPOINT_OTLP_GRPC=127.0.0.1:$OTLP_GRPC
SPANPOINT_JAEGER_URL=http://127.0.0.1:$J_QUERY
SPANPOINT_TEMPO_STANDIN_URL=http://127.0.0.1:$T_QUERY
SPANPOINT_PROMETHEUS_URL=http://127.0.0.1:$PROM
SPANPOINT_COLLECTOR_METRICS_URL=http://127.0.0.1:$PROM_EXPORTER/metrics
SPANPOINT_COLLECTOR_LOG_FILE=$DIR/otelcol-logs.jsonl
SPANPOINT_OTELCOL_BIN=$otelcol
ENV

  JAEGER_OTLP_GRPC_ENDPOINT=127.0.0.1:$J_OTLP JAEGER_OTLP_HTTP_ENDPOINT=127.0.0.1:$J_OTLP_HTTP \
  JAEGER_QUERY_HTTP_ENDPOINT=127.0.0.1:$J_QUERY JAEGER_QUERY_GRPC_ENDPOINT=127.0.0.1:$J_GRPC \
    spawn jaeger "$jaeger" --config "$ROOT/collector/jaeger.yaml"
  # Tempo cannot be had here (AGPL, in no registry we use): a second Jaeger receives what the
  # collector's Tempo exporter sends, so the test can still prove that path delivers.
  JAEGER_OTLP_GRPC_ENDPOINT=127.0.0.1:$T_OTLP JAEGER_OTLP_HTTP_ENDPOINT=127.0.0.1:$T_OTLP_HTTP \
  JAEGER_QUERY_HTTP_ENDPOINT=127.0.0.1:$T_QUERY JAEGER_QUERY_GRPC_ENDPOINT=127.0.0.1:$T_GRPC \
    spawn tempo-standin "$jaeger" --config "$ROOT/collector/jaeger.yaml"

  OTELCOL_OTLP_GRPC_ENDPOINT=127.0.0.1:$OTLP_GRPC OTELCOL_OTLP_HTTP_ENDPOINT=127.0.0.1:$OTLP_HTTP \
  OTELCOL_HEALTH_ENDPOINT=127.0.0.1:$HEALTH OTELCOL_PROMETHEUS_ENDPOINT=127.0.0.1:$PROM_EXPORTER \
  OTELCOL_LOG_FILE="$DIR/otelcol-logs.jsonl" \
  JAEGER_OTLP_ENDPOINT=127.0.0.1:$J_OTLP TEMPO_OTLP_ENDPOINT=127.0.0.1:$T_OTLP \
    spawn otelcol "$otelcol" --config "$ROOT/collector/otelcol.yaml"

  cat >"$DIR/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: otelcol
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:$PROM_EXPORTER"]
YML
  spawn prometheus "$prometheus" --config.file="$DIR/prometheus.yml" \
    --storage.tsdb.path="$DIR/prometheus-data" --web.listen-address="127.0.0.1:$PROM"

  wait_http jaeger "http://127.0.0.1:$J_QUERY/api/services" "$DIR/jaeger.pid"
  wait_http tempo-standin "http://127.0.0.1:$T_QUERY/api/services" "$DIR/tempo-standin.pid"
  wait_http otelcol "http://127.0.0.1:$HEALTH/" "$DIR/otelcol.pid"
  wait_http prometheus "http://127.0.0.1:$PROM/-/ready" "$DIR/prometheus.pid"
  sed 's/^/export /' "$DIR/stack.env"
}

stop() {
  local pidfile pid
  for pidfile in "$DIR"/otelcol.pid "$DIR"/jaeger.pid "$DIR"/tempo-standin.pid "$DIR"/prometheus.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    # Each process leads its own group (setsid), so this ends it and only it.
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

case "${1:-}" in
  start|stop)
    [ -n "${2:-}" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
    DIR=$(mkdir -p "$2" && cd "$2" && pwd)
    "$1" ;;
  *) echo "usage: $0 start|stop DIR   (DIR holds the stack's configs, logs and pids)" >&2; exit 2 ;;
esac
