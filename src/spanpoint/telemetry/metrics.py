"""The GenAI client metrics, from spanpoint's own spans: one place emits each.

``gen_ai.client.operation.duration`` (s), ``gen_ai.client.token.usage`` ({token}) and, for a
priced model call, ``gen_ai.client.operation.cost`` (a proposal, docs/semconv.md) with the
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
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
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
        # Each executed model call's priced cost (a replayed one is not an operation: its
        # saving is counted by the run's spanpoint.run.cost.saved).
        self.cost = meter.create_histogram(
            semconv.METRIC_GEN_AI_OPERATION_COST,
            unit=f"{{{SAVED_COST_CURRENCY}}}",
            description="Priced cost of one GenAI operation",
        )
        # An observable counter over totals kept here, as the graph-call counters are: a run
        # end adds to a dict instead of going through the SDK's measurement pipeline, which
        # would cost every run end far more, a replayed run's included.
        self._lock = threading.Lock()
        self._boundaries: dict[tuple[str, str], int] = {}
        meter.create_observable_counter(
            semconv.METRIC_BOUNDARIES,
            callbacks=[self._observe_boundaries],
            unit="{boundary}",
            description="Boundaries of durable runs by kind and outcome (executed, replayed, "
            "failed)",
        )

    def add_boundaries(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Add a run's (kind, outcome) counts to the ``spanpoint.boundaries`` totals."""
        with self._lock:
            totals = self._boundaries
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value

    def _observe_boundaries(self, options: CallbackOptions) -> list[Observation]:
        with self._lock:
            current = list(self._boundaries.items())
        return [
            Observation(value, {semconv.BOUNDARY_KIND: kind, semconv.OUTCOME: outcome})
            for (kind, outcome), value in current
        ]


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
    amount = get(semconv.GEN_AI_USAGE_COST_AMOUNT)
    if isinstance(amount, int | float) and not isinstance(amount, bool):
        instruments.cost.record(amount, metric_attrs, context)


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

    Counted once per run, not per boundary, into totals the observable counter reports at
    collection: a run's end adds to a dict instead of going through the SDK's measurement
    pipeline, and the counts are exact either way.
    """
    if counts:
        _current_instruments().add_boundaries(counts)


# --- the guard's counters ----------------------------------------------------------------------


class GuardInstruments:
    """The loop guard's counters on one meter provider, with spanpoint's scope and version."""

    __slots__ = ("detections", "reflections", "terminations")

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter(semconv.INSTRUMENTATION_NAME, __version__)
        self.detections, self.reflections, self.terminations = (
            meter.create_counter(name, unit=unit, description=description)
            for name, unit, description in _GUARD_COUNTERS
        )


#: The guard's counters in :class:`GuardInstruments`' order: name, unit, description.
_GUARD_COUNTERS = (
    (
        semconv.METRIC_GUARD_DETECTIONS,
        "{detection}",
        "Loop patterns and budget overruns the guard detected, by pattern.",
    ),
    (
        semconv.METRIC_GUARD_REFLECTIONS,
        "{reflection}",
        "Reflection messages the guard sent to the model, by pattern.",
    ),
    (semconv.METRIC_GUARD_TERMINATIONS, "{termination}", "Runs the guard stopped, by reason."),
)


_guard_instruments: PerProvider[GuardInstruments] = PerProvider(GuardInstruments)


def guard_instruments(provider: Any = None) -> GuardInstruments:
    """The guard's counters on ``provider``, else on spanpoint's meter provider *now*
    (:func:`spanpoint.telemetry.meter_provider`): the one spanpoint's own metrics go to."""
    return _guard_instruments(provider if provider is not None else telemetry.meter_provider())


# --- the run summary's instruments (graph calls) -------------------------------------------


class GraphCallInstruments:
    """The run summary's instruments of one meter provider (``spanpoint.graph.summary``).

    Graph calls, replays and interrupts are observable counters over totals kept here: a
    call adds one to a dict entry instead of going through the SDK's measurement pipeline
    (far costlier per ``add``), and the SDK reads the totals once
    per collection. They export exactly as synchronous counters do (a monotonic cumulative
    sum per attribute set).

    Durations are recorded in batches: a call appends its duration (with the context of its
    span, for exemplars) and the batch goes into the histogram when the SDK collects (the
    counters' callback drains it first, so every collection holds every finished call) or
    when :data:`_MAX_PENDING` calls are waiting (no reader collecting, or a no-op provider).
    One record per call from a cold cache after the graph ran cost several times what it
    costs in a loop.
    """

    def __init__(self, provider: MeterProvider) -> None:
        meter = provider.get_meter(semconv.INSTRUMENTATION_NAME, __version__)
        self._lock = threading.Lock()
        self._attrs: dict[tuple[str, str, str], dict[str, str]] = {}
        self._calls: dict[tuple[str, str, str], int] = {}
        self._replays: dict[tuple[str, str, str], int] = {}
        self._interrupts: dict[tuple[str, str, str], int] = {}
        self._pending: list[tuple[float, dict[str, str], Any]] = []
        for name, unit, description, totals in (
            (semconv.METRIC_GRAPH_CALLS, "{call}", "Graph calls by status", self._calls),
            (
                semconv.METRIC_REPLAYS,
                "{call}",
                "Graph calls replayed from the store",
                self._replays,
            ),
            (semconv.METRIC_INTERRUPTS, "{interrupt}", "Interrupts returned", self._interrupts),
        ):
            meter.create_observable_counter(
                name, callbacks=[self._observer(totals)], unit=unit, description=description
            )
        self.duration = meter.create_histogram(
            semconv.METRIC_GRAPH_CALL_DURATION, unit="s", description="Graph call duration"
        )

    def _observer(self, totals: dict[tuple[str, str, str], int]) -> Any:
        def observe(options: CallbackOptions) -> list[Observation]:
            if totals is self._calls:  # callbacks run before the SDK reads its storage
                self.flush()
            with self._lock:
                current = list(totals.items())
            return [Observation(value, self._attrs[key]) for key, value in current]

        return observe

    def flush(self) -> None:
        """Record the waiting durations in the histogram."""
        with self._lock:
            pending, self._pending = self._pending, []
        record = self.duration.record
        for value, attrs, context in pending:
            record(value, attrs, context)

    def record(self, summary: Mapping[str, Any], context: Any = None) -> None:
        """Count one graph call's summary and queue its duration (``context``: its span's)."""
        key = (summary["name"], summary["status"], summary["strategy"])
        interrupts = len(summary["interrupts"])
        with self._lock:
            attrs = self._attrs.get(key)
            if attrs is None:
                attrs = self._attrs[key] = {
                    semconv.GEN_AI_AGENT_NAME: key[0],
                    semconv.STATUS: key[1],
                    semconv.STRATEGY: key[2],
                }
            self._calls[key] = self._calls.get(key, 0) + 1
            if summary["replayed"]:
                self._replays[key] = self._replays.get(key, 0) + 1
            if interrupts:
                self._interrupts[key] = self._interrupts.get(key, 0) + interrupts
            self._pending.append((summary["duration_s"], attrs, context))
            full = len(self._pending) >= _MAX_PENDING
        if full:
            self.flush()


#: Durations waiting for a collection before they are recorded anyway.
_MAX_PENDING = 64


_graph_call_instruments: PerProvider[GraphCallInstruments] = PerProvider(GraphCallInstruments)


def graph_call_instruments(provider: Any) -> GraphCallInstruments:
    """The graph-call instruments of ``provider`` (``spanpoint.graph.summary`` records)."""
    return _graph_call_instruments(provider)


#: The currency replay savings are counted in: ``spanpoint.calls.cost.CURRENCY`` (a test holds
#: the two equal; plumbing imports no pricing).
SAVED_COST_CURRENCY = "USD"


class RunCostCounters:
    """``spanpoint.run.cost`` and ``spanpoint.run.cost.saved``: what runs paid for the model
    calls they executed, and what replaying the others saved, in currency units."""

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter(semconv.INSTRUMENTATION_NAME, __version__)
        unit = f"{{{SAVED_COST_CURRENCY}}}"  # an annotation: Prometheus adds no unit suffix
        self.paid = meter.create_counter(
            semconv.METRIC_RUN_COST,
            unit=unit,
            description="Cost of the model calls runs executed",
        )
        self.saved = meter.create_counter(
            semconv.METRIC_REPLAY_SAVED_COST,
            unit=unit,
            description="Cost of the model calls runs replayed instead of executing them",
        )


_run_cost: PerProvider[RunCostCounters] = PerProvider(RunCostCounters)


def run_cost_counters(provider: Any) -> RunCostCounters:
    """The run cost counters on ``provider`` (``spanpoint.graph.summary`` adds to them)."""
    return _run_cost(provider)
