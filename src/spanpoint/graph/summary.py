"""Run summaries: one OTLP log record and a few metrics after every graph call.

The summary is the JSON-safe record of one graph call — status, thread, checkpoint ids,
interrupts, counters, usage, warnings, duration — sent as the log record
``spanpoint.run_summary`` (correlated with the call's span) and counted in metrics:
graph calls by status, replays, interrupts, and a duration histogram.

Observability writes are best effort (design invariant 5): a failing logger, meter or
exporter never changes a graph result. ``spanpoint.configure(strict=True)`` raises instead.

Where they go is decided by ``spanpoint.configure``: the application's logger and meter
providers when it has SDK ones, else what ``OTEL_LOGS_EXPORTER`` / ``OTEL_METRICS_EXPORTER``
and the OTLP variables ask (per-signal over generic), else, with no endpoint, JSON-lines files
next to the local trace file (``.spanpoint/logs.jsonl``, ``metrics.jsonl``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, SeverityNumber
from opentelemetry.metrics import MeterProvider

from spanpoint import semconv
from spanpoint._version import __version__
from spanpoint.calls.cost import RunCost, scope_cost
from spanpoint.config import settings
from spanpoint.errors import SpanpointError
from spanpoint.graph.results import RunResult
from spanpoint.guard.state import STATE_KEY as GUARD_STATE_KEY
from spanpoint.run import RunScope, current_run
from spanpoint.telemetry._per_provider import PerProvider
from spanpoint.telemetry.metrics import graph_call_instruments, run_cost_counters

logger = logging.getLogger("spanpoint")


def build_summary(
    *,
    name: str,
    strategy: str,
    status: str,
    thread_id: str,
    duration_s: float,
    result: RunResult | None = None,
    error: BaseException | None = None,
    counters: Mapping[str, int] | None = None,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON-safe summary of one graph call (no state values, no message text)."""
    scope = current_run()
    summary: dict[str, Any] = {
        "name": name,
        "strategy": strategy,
        "status": status,
        "thread_id": thread_id,
        "run_id": scope.run_id if scope else None,
        "attempt": scope.attempt if scope else None,
        "replayed": bool(result and result.replayed),
        "duration_s": round(duration_s, 6),
        "checkpoint_id": result.latest_checkpoint_id if result else None,
        "checkpoint_ns": result.checkpoint_ns if result else None,
        "next_nodes": list(result.next_nodes) if result else [],
        "interrupts": [
            {"id": i.id, "node": i.node, "namespace": i.namespace}
            for i in (result.interrupts if result else ())
        ],
        "counters": dict(counters or {}),
        "usage": dict(result.usage) if result else {},
        "warnings": list(result.warnings if result else ()) + list(warnings),
        "trace_id": result.trace_id if result else None,
        "span_id": result.span_id if result else None,
    }
    if error is not None:
        summary["error"] = type(error).__qualname__
    if scope is not None:
        cost = _attempt_cost(scope)
        if cost is not None:
            summary["cost"] = cost
    guard = _guard_report(result)
    if guard is not None:
        summary["guard"] = guard
    return summary


def _attempt_cost(scope: RunScope) -> dict[str, Any] | None:
    """Tokens and cost of the attempt's executed and replayed model calls so far, also set on
    the run's root span (``spanpoint.run.cost``, ``spanpoint.run.cost.saved``): the same
    totals ``spanpoint show`` reads back from the store later."""
    if not any(kind == semconv.KIND_MODEL_CALL for kind, _ in scope.boundary_counts):
        # No model-call boundary in this attempt (a graph_call run): zero, without reading
        # every checkpoint of the run from the store after each graph call.
        return RunCost().to_dict()
    # What the attempt kept of its model calls, not the whole run read from the store after
    # each graph call (a run's k-th graph call read k graph calls' checkpoints: half of the
    # CPU at 300 graph calls in one run). The same totals `spanpoint show` reads back later.
    cost = scope_cost(scope)  # the calls kept since the last graph call only
    if scope.span is not None and scope.span.is_recording():
        scope.span.set_attributes(cost.span_attributes())
    return cost.to_dict()


def _guard_report(result: RunResult | None) -> dict[str, Any] | None:
    """The guard's report when the graph ran under the guard (its state is in the output)."""
    output = result.output if result is not None else None
    if not isinstance(output, Mapping) or GUARD_STATE_KEY not in output:
        return None
    # For import time: only graphs that run the guard pay for the guard's report.
    from spanpoint.guard.report import GuardReport

    report = GuardReport.from_state(
        output, thread_id=result.thread_id, checkpoint_id=result.latest_checkpoint_id
    )
    return report.to_dict() if report is not None else None


def emit_summary(
    summary: Mapping[str, Any], *, span: trace.Span | None = None, context: Any = None
) -> None:
    """Send ``summary`` as the ``spanpoint.run_summary`` log record and update the metrics.

    The record is correlated with ``span``, or with ``context`` (an OTel ``Context`` holding
    the call's span) when given. Best effort: failures are logged, and raised only under
    ``configure(strict=True)``.
    """
    cfg = settings()
    try:
        if context is None and span is not None:
            context = trace.set_span_in_context(span)
        _emit_log(cfg.logger_provider, summary, context)
        # The context now, not the one current when the batch is recorded (exemplars).
        instruments = graph_call_instruments(cfg.meter_provider)
        instruments.record(summary, context or otel_context.get_current())
        _count_cost(cfg.meter_provider, summary)
    except Exception as exc:
        if cfg.strict:
            raise SpanpointError(f"could not emit the run summary: {exc}") from exc
        logger.warning("spanpoint: could not emit the run summary: %s", exc)


# (run id, attempt) -> (paid, saved) already counted: a summary holds the attempt's totals so
# far, the counters get what is new since the attempt's previous graph call.
_counted_cost: dict[tuple[str, int], tuple[float, float]] = {}
_counted_lock = threading.Lock()


def _count_cost(provider: MeterProvider, summary: Mapping[str, Any]) -> None:
    cost, run_id = summary.get("cost"), summary.get("run_id")
    if not cost or not run_id:
        return
    key = (run_id, int(summary.get("attempt") or 0))
    paid, saved = cost["executed"]["cost"], cost["saved"]
    with _counted_lock:
        before = _counted_cost.get(key, (0.0, 0.0))
        if len(_counted_cost) >= 4096:
            _counted_cost.clear()
        _counted_cost[key] = (paid, saved)
    if paid > before[0] or saved > before[1]:
        attrs = {semconv.GEN_AI_AGENT_NAME: summary["name"], semconv.STRATEGY: summary["strategy"]}
        counters = run_cost_counters(provider)
        if paid > before[0]:
            counters.paid.add(paid - before[0], attrs)
        if saved > before[1]:
            counters.saved.add(saved - before[1], attrs)


_logger: PerProvider[Any] = PerProvider(
    lambda provider: provider.get_logger(semconv.INSTRUMENTATION_NAME, __version__)
)


def _emit_log(provider: LoggerProvider, summary: Mapping[str, Any], context: Any) -> None:
    otel_logger = _logger(provider)
    attributes: dict[str, Any] = {
        semconv.GEN_AI_AGENT_NAME: summary["name"],
        semconv.GEN_AI_CONVERSATION_ID: summary["thread_id"],
        semconv.STATUS: summary["status"],
        semconv.STRATEGY: summary["strategy"],
        semconv.REPLAYED: summary["replayed"],
    }
    if summary.get("run_id"):
        attributes[semconv.RUN_ID] = summary["run_id"]
    failed = summary["status"] == "failed"
    otel_logger.emit(
        event_name=semconv.LOG_RUN_SUMMARY,
        # build_summary's dict is fresh and never touched again: no defensive copy needed.
        body=summary if type(summary) is dict else dict(summary),
        attributes=attributes,
        context=context,
        severity_number=SeverityNumber.ERROR if failed else SeverityNumber.INFO,
        severity_text="ERROR" if failed else "INFO",
    )
