"""The one in-memory telemetry harness of the suite: real OpenTelemetry SDK providers wired to
in-memory readers, and what tests read from them (spans, guard events, metric points).

``conftest.configured`` builds it with a store and configures spanpoint on it
(:func:`make_telemetry`); the guard tests take it unconfigured, with a meter provider
(:func:`make_otel`), since the guard is configured by its own arguments.

A module of its own, so a test module can import it by name: ``from conftest import ...``
picks whichever of the several ``conftest`` modules pytest loaded first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

import spanpoint


def metric_points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    """The data points of metric ``name`` that ``reader`` collects now."""
    data = reader.get_metrics_data()
    found = []
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


@dataclass
class Telemetry:
    """SDK providers wired to in-memory readers (and, when spanpoint is configured on them,
    its store)."""

    provider: TracerProvider
    exporter: InMemorySpanExporter
    store: Any = None
    meter_provider: MeterProvider | None = None
    reader: InMemoryMetricReader | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # --- spans ---------------------------------------------------------------------------

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished spans, optionally only those called ``name`` (or starting with it)."""
        spans = list(self.exporter.get_finished_spans())
        if name is None:
            return spans
        return [s for s in spans if s.name == name or s.name.startswith(name + " ")]

    def span(self, name: str) -> ReadableSpan:
        """The finished span called exactly ``name`` (there must be one)."""
        spans = [s for s in self.exporter.get_finished_spans() if s.name == name]
        assert len(spans) == 1, [s.name for s in self.exporter.get_finished_spans()]
        return spans[0]

    def graph_spans(self, name: str) -> list[ReadableSpan]:
        """Like :meth:`spans`, without the runs' roots (``invoke_workflow {run name}`` too)."""
        return [s for s in self.spans(name) if not (s.attributes or {}).get("spanpoint.run.root")]

    def runs(self) -> list[ReadableSpan]:
        """The root spans of ``spanpoint.run`` (``invoke_workflow {name}``), oldest first."""
        return [s for s in self.spans() if (s.attributes or {}).get("spanpoint.run.root")]

    def by_id(self) -> dict[int, ReadableSpan]:
        """Finished spans by span id."""
        return {s.context.span_id: s for s in self.spans()}

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        """The finished parent of ``span``, if any."""
        return self.by_id().get(span.parent.span_id) if span.parent else None

    def guard_events(self, name: str) -> list[tuple[str, dict[str, Any]]]:
        """(event name, attributes) of the guard's events on span ``name``, in order."""
        return [
            (e.name, dict(e.attributes or {}))
            for e in self.span(name).events
            if e.name.startswith("spanpoint.guard")
        ]

    def clear(self) -> None:
        """Forget the spans exported so far."""
        self.exporter.clear()

    # --- metrics -------------------------------------------------------------------------

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` collected now."""
        assert self.reader is not None, "this harness has no metric reader (make_otel has)"
        return metric_points(self.reader, metric)

    def counts(self, metric: str, attribute: str) -> Counter[str]:
        """Sum of a counter's points by one attribute's value."""
        totals: Counter[str] = Counter()
        for point in self.points(metric):
            totals[str(point.attributes.get(attribute))] += point.value
        return totals

    def shutdown(self) -> None:
        """Shut the providers down."""
        self.provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _traced(sampler: Sampler | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def make_telemetry(store: spanpoint.CheckpointStore, sampler: Sampler | None = None) -> Telemetry:
    """A fresh SDK provider with an in-memory exporter, configured as spanpoint's provider."""
    provider, exporter = _traced(sampler)
    spanpoint.configure(tracer_provider=provider, store=store)
    return Telemetry(provider, exporter, store)


def make_otel() -> Telemetry:
    """Fresh SDK tracer and meter providers with in-memory readers (spanpoint left alone)."""
    provider, exporter = _traced()
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    return Telemetry(provider, exporter, meter_provider=meter_provider, reader=reader)


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
