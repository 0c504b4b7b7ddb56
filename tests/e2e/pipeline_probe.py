"""Send one trace that tests the collector's own defences: redaction and truncation.

spanpoint redacts what it captures before export, so its own spans never carry a planted
secret; this probe plays a user's hand-made span that does. The span ends with ERROR so that
tail sampling keeps the trace. The OTLP endpoint comes from the standard variables.

    python tests/e2e/pipeline_probe.py RUN_ID
"""

from __future__ import annotations

import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

from spanpoint import semconv

PLANTED_KEY = "sk-e2eplanted0123456789abcdef"
LONG_VALUE = "x" * 10_000
TRUNCATED_TO = 4096


def main(run_id: str) -> None:
    """Export the probe span for ``run_id`` and flush."""
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("spanpoint-e2e-probe")
    with tracer.start_as_current_span("probe user code") as span:
        span.set_attribute(semconv.RUN_ID, run_id)
        span.set_attribute("app.note", f"called with key {PLANTED_KEY} by mistake")
        span.set_attribute("app.api_key", "hunter2-matches-no-value-pattern")
        span.set_attribute("app.prompt_preview", LONG_VALUE)
        span.set_status(Status(StatusCode.ERROR, "probe"))
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
