"""The GenAI client metrics, from spanpoint's own spans: one place emits each.

``gen_ai.client.operation.duration`` (s) and ``gen_ai.client.token.usage`` ({token}) with the
attributes the GenAI conventions define for them: ``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.response.model``, ``error.type``
and, for token usage, ``gen_ai.token.type`` (``input`` / ``output``).

They are recorded by :class:`GenAIMetricsProcessor` when a spanpoint span ends, so every path
that makes a GenAI span — ``GraphRunner``, the middleware, the zero-code patches — is counted
exactly once and none of them carries metric code. spanpoint's own ``spanpoint.boundaries``
(by ``spanpoint.boundary.kind`` and ``spanpoint.outcome``: executed, replayed, failed,
interrupted) is added here too, once per durable run (:func:`count_boundaries`). Replayed
spans are not client operations (nothing was called) and are not recorded;
``spanpoint.replays`` counts them.
``invoke_workflow`` spans (plain graphs, not agents) are not GenAI client operations and are
not recorded. Token usage is recorded for ``chat`` spans only: a graph call's usage is the sum
of its model calls, and recording both would count every token twice.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import NonRecordingSpan, StatusCode

from spanpoint import semconv, telemetry
from spanpoint._compat import span_attribute_dict
from spanpoint._version import __version__
from spanpoint.telemetry._per_provider import PerProvider

# Bucket boundaries the GenAI conventions advise for these two histograms.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)

# The operations the conventions define client metrics for. invoke_workflow (a plain graph, a
# proposal upstream) is not a GenAI client operation; its duration is spanpoint.graph.call.*.
_CLIENT_OPERATIONS = frozenset({semconv.OP_CHAT, semconv.OP_EXECUTE_TOOL, semconv.OP_INVOKE_AGENT})

_KEYS = (
    semconv.GEN_AI_OPERATION_NAME,
    semconv.GEN_AI_PROVIDER_NAME,
    semconv.GEN_AI_REQUEST_MODEL,
    semconv.GEN_AI_RESPONSE_MODEL,
)


class _Instruments:
    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter(semconv.INSTRUMENTATION_NAME, __version__)
        self.duration = meter.create_histogram(
            semconv.METRIC_GEN_AI_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            semconv.METRIC_GEN_AI_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.boundaries = meter.create_counter(
            semconv.METRIC_BOUNDARIES,
            unit="{boundary}",
            description="Boundaries of durable runs by kind and outcome (executed, replayed, "
            "failed)",
        )


_instruments: PerProvider[_Instruments] = PerProvider(_Instruments)


class GenAIMetricsProcessor(SpanProcessor):
    """Records the GenAI client metrics of every spanpoint GenAI span when it ends."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Record duration (and, for ``chat``, tokens) of a finished spanpoint GenAI span."""
        scope = span.instrumentation_scope
        if scope is None or scope.name != semconv.INSTRUMENTATION_NAME:
            return
        attrs = span_attributes(span)
        if not attrs:
            return
        try:
            operation = attrs.get(semconv.GEN_AI_OPERATION_NAME)
            if operation in _CLIENT_OPERATIONS and attrs.get(semconv.REPLAYED) is not True:
                record(span, attrs, operation)
        except Exception:  # observability is best effort: never fail the span's caller
            return

    def shutdown(self) -> None:
        """Nothing held."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing buffered here (the meter provider flushes its own readers)."""
        return True


def span_attributes(span: Any) -> Mapping[str, Any]:
    """A span's attributes for reading, cheaply.

    ``ReadableSpan.attributes`` wraps the SDK's ``BoundedAttributes`` (a pure-Python mapping)
    in a mappingproxy, so each ``get`` is two Python calls; an ended span's attributes no
    longer change, so its plain dict is read directly when the SDK has one.
    """
    found = span_attribute_dict(span)
    return found if found is not None else (span.attributes or {})


def record(span: ReadableSpan, attrs: Any, operation: Any) -> None:
    """Record the metrics of one finished span."""
    # Every span of an agent pays this: the SDK's record() is most of it, so the attributes
    # are read once and the instruments found without a lookup in the common case.
    get = attrs.get
    metric_attrs = {}
    for key in _KEYS:
        value = get(key)
        if value is not None:
            metric_attrs[key] = value
    if span.status.status_code is StatusCode.ERROR:
        metric_attrs[semconv.ERROR_TYPE] = get(semconv.ERROR_TYPE, "_OTHER")
    instruments = _current_instruments()
    # Measured in the span's own context: a span ends after it stopped being current, and an
    # exemplar the SDK samples would otherwise point at the parent instead of this operation.
    context = trace.set_span_in_context(NonRecordingSpan(span.context))
    end, start = span.end_time, span.start_time
    if end is not None and start is not None:
        instruments.duration.record((end - start) / 1e9, metric_attrs, context)
    if operation != semconv.OP_CHAT:
        return
    tokens = instruments.tokens
    for key, token_type in _TOKEN_TYPES:
        value = get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            tokens.record(value, {**metric_attrs, semconv.GEN_AI_TOKEN_TYPE: token_type}, context)


_TOKEN_TYPES = (
    (semconv.GEN_AI_USAGE_INPUT_TOKENS, "input"),
    (semconv.GEN_AI_USAGE_OUTPUT_TOKENS, "output"),
)

# (weak ref to the meter provider, its instruments) of the last record: configure() rarely
# changes the provider, and a dictionary lookup per span is worth saving.
_LAST: tuple[Any, _Instruments | None] = (lambda: None, None)


def _current_instruments() -> _Instruments:
    global _LAST
    provider = telemetry.meter_provider()
    last_provider, found = _LAST
    if found is None or last_provider() is not provider:
        found = _instruments(provider)
        with contextlib.suppress(TypeError):  # no weak references: look it up every time
            _LAST = (weakref.ref(provider), found)
    return found


def count_boundaries(counts: Mapping[tuple[str, str], int]) -> None:
    """Add a finished run's boundaries to ``spanpoint.boundaries`` by kind and outcome.

    Counted once per run, not per boundary: a metric ``add`` costs about as much as the rest
    of a replayed boundary, and the counts are exact either way.
    """

    if not counts:
        return
    counter = _current_instruments().boundaries
    for (kind, outcome), value in counts.items():
        counter.add(value, {semconv.BOUNDARY_KIND: kind, semconv.OUTCOME: outcome})


# --- the guard's counters ----------------------------------------------------------------------


class GuardInstruments:
    """The loop guard's counters on one meter provider, with spanpoint's scope and version."""

    __slots__ = ("detections", "reflections", "terminations")

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter(semconv.INSTRUMENTATION_NAME, __version__)
        self.detections = meter.create_counter(
            semconv.METRIC_GUARD_DETECTIONS,
            unit="{detection}",
            description="Loop patterns and budget overruns the guard detected, by pattern.",
        )
        self.reflections = meter.create_counter(
            semconv.METRIC_GUARD_REFLECTIONS,
            unit="{reflection}",
            description="Reflection messages the guard sent to the model, by pattern.",
        )
        self.terminations = meter.create_counter(
            semconv.METRIC_GUARD_TERMINATIONS,
            unit="{termination}",
            description="Runs the guard stopped, by reason.",
        )


_guard_instruments: PerProvider[GuardInstruments] = PerProvider(GuardInstruments)


def guard_instruments(provider: Any = None) -> GuardInstruments:
    """The guard's counters on ``provider``, else on spanpoint's meter provider *now*
    (:func:`spanpoint.telemetry.meter_provider`): the one spanpoint's own metrics go to."""
    return _guard_instruments(provider if provider is not None else telemetry.meter_provider())
