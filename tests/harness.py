"""The in-memory telemetry harness the fixtures build (``conftest.configured``), and the
counters tests share.

A module of its own, so a test module can import it by name: ``from conftest import ...``
picks whichever of the several ``conftest`` modules pytest loaded first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

import spanpoint


@dataclass
class Telemetry:
    """A configured spanpoint with its provider, exporter and store."""

    provider: TracerProvider
    exporter: InMemorySpanExporter
    store: spanpoint.CheckpointStore

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished spans, optionally only those called ``name`` (or starting with it)."""
        spans = list(self.exporter.get_finished_spans())
        if name is None:
            return spans
        return [s for s in spans if s.name == name or s.name.startswith(name + " ")]

    def graph_spans(self, name: str) -> list[ReadableSpan]:
        """Like :meth:`spans`, without the runs' roots (``invoke_workflow {run name}`` too)."""
        return [s for s in self.spans(name) if not (s.attributes or {}).get("spanpoint.run.root")]

    def runs(self) -> list[ReadableSpan]:
        """The root spans of ``spanpoint.run`` (``invoke_workflow {name}``), oldest first."""
        return [s for s in self.spans() if (s.attributes or {}).get("spanpoint.run.root")]

    def clear(self) -> None:
        """Forget the spans exported so far."""
        self.exporter.clear()


def make_telemetry(store: spanpoint.CheckpointStore, sampler: Sampler | None = None) -> Telemetry:
    """A fresh SDK provider with an in-memory exporter, configured as spanpoint's provider."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spanpoint.configure(tracer_provider=provider, store=store)
    return Telemetry(provider, exporter, store)


def count_redactions(monkeypatch: Any, value: Any) -> list[Any]:
    """Every time from now on that spanpoint's capture policy redacts a value equal to
    ``value``, appended to the returned list (how often the arguments were walked)."""
    from spanpoint.capture import CapturePolicy

    walked: list[Any] = []
    redact = CapturePolicy.redact

    def counting(self: CapturePolicy, found: Any) -> Any:
        if found == value:
            walked.append(found)
        return redact(self, found)

    monkeypatch.setattr(CapturePolicy, "redact", counting)
    return walked
