"""A real OTLP/HTTP receiver on 127.0.0.1 for tests: decodes what exporters send.

It speaks just enough of OTLP/HTTP (protobuf bodies POSTed to /v1/traces, /v1/logs,
/v1/metrics) to let a test assert on what a real exporter in another process delivered.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_DECODERS: dict[str, Any] = {
    "/v1/traces": ExportTraceServiceRequest,
    "/v1/logs": ExportLogsServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
}


class OtlpReceiver:
    """Collects decoded OTLP export requests by path.

    ``status``: the HTTP status it answers with (e.g. 405, to play a traces-only backend that
    rejects everything); requests are counted (``hits``) whatever it answers.
    """

    def __init__(self, status: int = 200) -> None:
        self.requests: dict[str, list[Any]] = {path: [] for path in _DECODERS}
        self.hits: dict[str, int] = {}
        #: The headers of every request, lower-cased names (auth headers in the docs' recipes).
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []  # as requested, base path included
        self.status = status
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                # A vendor's base path (e.g. /api/public/otel) before /v1/<signal> is accepted.
                path = next((p for p in _DECODERS if self.path.endswith(p)), self.path)
                with receiver._lock:
                    receiver.hits[path] = receiver.hits.get(path, 0) + 1
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                    receiver.paths.append(self.path)
                decoder = _DECODERS.get(path)
                if decoder is None or receiver.status != 200:
                    self.send_response(404 if decoder is None else receiver.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                message = decoder()
                message.ParseFromString(body)
                with receiver._lock:
                    receiver.requests[path].append(message)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def log_records(self) -> Iterator[Any]:
        """Every log record received, in arrival order."""
        with self._lock:
            requests = list(self.requests["/v1/logs"])
        for request in requests:
            for resource_logs in request.resource_logs:
                for scope_logs in resource_logs.scope_logs:
                    yield from scope_logs.log_records

    def metric_names(self) -> set[str]:
        """The names of every metric received."""
        with self._lock:
            requests = list(self.requests["/v1/metrics"])
        return {
            metric.name
            for request in requests
            for resource_metrics in request.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
        }

    def spans(self) -> Iterator[Any]:
        """Every span received, in arrival order."""
        with self._lock:
            requests = list(self.requests["/v1/traces"])
        for request in requests:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    yield from scope_spans.spans
