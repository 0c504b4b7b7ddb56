"""``opentelemetry-instrument python examples/zero_code/agent.py``: the unmodified agent traced.

The agent runs in a subprocess under the real ``opentelemetry-instrument`` launcher, exporting
OTLP/HTTP to a receiver in this process that decodes the protobuf requests as a collector
would. One trace must arrive: the agent's graph call with its model and tool calls nested
under it, carrying the GenAI attributes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "zero_code" / "agent.py"


class OtlpReceiver:
    """A minimal OTLP/HTTP receiver: keeps every exported span, answers every signal OK."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.paths.append(self.path)
                if self.path == "/v1/traces":
                    receiver.collect(body)
                    reply = ExportTraceServiceResponse().SerializeToString()
                else:  # logs and metrics: accepted, not inspected here
                    reply = b""
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def collect(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "scope": scope_spans.scope.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex() or None,
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                        }
                    )


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    otlp = OtlpReceiver()
    otlp.thread.start()
    yield otlp
    otlp.server.shutdown()
    otlp.server.server_close()


def run_instrumented(receiver: OtlpReceiver, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANPOINT_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_SERVICE_NAME="support-agent",
        # The dev environment also has the OpenInference and OpenLLMetry instrumentors
        # (test_coexistence.py); this test is about spanpoint alone.
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="langchain",
        SPANPOINT_STORE=str(tmp_path / "checkpoints.db"),
    )
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    return subprocess.run(
        [str(launcher), sys.executable, str(AGENT)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_unmodified_agent_produces_one_nested_trace(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    proc = run_instrumented(receiver, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "refund of 42 EUR" in proc.stdout
    spans = receiver.spans
    assert {s["trace_id"] for s in spans} and len({s["trace_id"] for s in spans}) == 1
    [root] = [s for s in spans if s["parent"] is None]
    assert root["name"] == "invoke_agent support_agent"
    assert root["scope"] == "spanpoint"
    assert root["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert root["attributes"]["gen_ai.agent.name"] == "support_agent"

    chats = [s for s in spans if s["name"] == "chat scripted-support-1"]
    tools = sorted(s["name"] for s in spans if s["name"].startswith("execute_tool "))
    assert len(chats) == 3
    assert tools == ["execute_tool approve_ticket", "execute_tool lookup_ticket"]
    assert all(s["parent"] == root["span_id"] for s in spans if s is not root)
    chat = chats[0]["attributes"]
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.request.model"] == "scripted-support-1"
    assert chat["gen_ai.response.model"] == "scripted-support-1"
    assert chat["gen_ai.usage.input_tokens"] > 0 and chat["gen_ai.usage.output_tokens"] == 12
    [lookup] = [s for s in spans if s["name"] == "execute_tool lookup_ticket"]
    assert lookup["attributes"]["gen_ai.tool.name"] == "lookup_ticket"
    assert lookup["attributes"]["gen_ai.tool.call.id"] == "call_1"
    # Message text stays out by default (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).
    assert not any("gen_ai.input.messages" in s["attributes"] for s in spans)


def test_the_agent_runs_unchanged_without_the_launcher(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(AGENT)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "refund of 42 EUR" in proc.stdout
    assert not (tmp_path / ".spanpoint").exists()  # spanpoint was never loaded
