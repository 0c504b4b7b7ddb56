"""Bounded exit: a closed, hanging or throttling collector delays exit by the export timeout.

Each case runs a real process with a run and its steps, exporting over OTLP to a collector
that fails in one way, and checks that the process is gone within the documented bound
(``OTEL_EXPORTER_OTLP_TIMEOUT``) plus a generous margin for start-up on a busy machine. This is
a correctness bound, not a speed measurement: without it, exit waited for every batch of every
signal in turn, each with its retries (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1`` makes one batch per
span, so the unbounded exit takes well over a minute here).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

#: OTEL_EXPORTER_OTLP_TIMEOUT for these tests, in seconds: the documented bound of exit.
TIMEOUT_S = 2
#: Start-up, the run itself and a loaded machine; far below the unbounded exit (> 30 s).
MARGIN_S = 10

APP = textwrap.dedent(
    """
    import spanpoint

    @spanpoint.step(name="work")
    def work(x):
        return x + 1

    with spanpoint.run("shutdown-run", name="shutdown"):
        for i in range(30):
            work(i)
    print("run done", flush=True)
    """
)


def run_app(tmp_path: Path, endpoint: str, protocol: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_EXPORTER_OTLP_TIMEOUT=str(TIMEOUT_S),
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="1",
    )
    try:
        return subprocess.run(
            [sys.executable, "-c", APP],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S + MARGIN_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"exit took longer than OTEL_EXPORTER_OTLP_TIMEOUT={TIMEOUT_S} s + {MARGIN_S} s "
            f"against {endpoint} ({protocol}); stderr: {exc.stderr!r:.400}"
        )


@pytest.fixture
def hanging() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture
def closed_port() -> Iterator[str]:
    """A port on 127.0.0.1 that refuses connections: bound and held, never listening (a
    released port could be taken by a test running beside this one)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    probe.close()


@pytest.fixture
def throttling() -> Iterator[str]:
    """An HTTP server that answers every request 429 Too Many Requests."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(429)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("collector", ["hanging", "closed_port", "throttling"])
def test_exit_is_bounded_by_the_export_timeout(
    tmp_path: Path, collector: str, protocol: str, request: pytest.FixtureRequest
) -> None:
    endpoint = request.getfixturevalue(collector)
    done = run_app(tmp_path, endpoint, protocol)
    # The run's results never depend on the exporter: it completed and exited cleanly.
    assert done.returncode == 0, done.stderr
    assert "run done" in done.stdout
    # The exporters' own warnings still reach stderr (spanpoint's reason capture is a
    # logging handler, which would otherwise hide them from logging's last resort). An
    # exporter whose request is still waiting on a collector that never answers logs nothing
    # before exit stops waiting for it: then spanpoint says the telemetry was dropped.
    told = "Failed to export" in done.stderr or "exit stopped waiting" in done.stderr
    assert told, done.stderr
    if collector != "hanging":
        assert "Failed to export" in done.stderr


def test_exit_says_when_it_stops_waiting_for_an_exporter() -> None:
    """Exit cut short by the budget names the drop and the check, once, on stderr."""
    app = textwrap.dedent(
        """
        import time
        from spanpoint.telemetry import exporters

        class Stuck:
            def shutdown(self):
                time.sleep(30)

        exporters.shutdown_at_exit(Stuck())
        print("registered", flush=True)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    env["OTEL_EXPORTER_OTLP_TIMEOUT"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", app], env=env, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("exit stopped waiting for the telemetry exporters after 1 s") == 1
    assert "spanpoint doctor" in done.stderr
