"""What the guard sees and decides, as OpenTelemetry: span attributes, span events, metrics.

Checks set attributes on the current span (step index, tokens, cost, breaker state);
detections, reflections, recoveries, terminations and resumes are span events, and so is the
tool-call decision (``deny``) of each call a stop keeps from running; counters
count detections by pattern and terminations by reason. All names live in ``semconv``.

The counters come from ``spanpoint.telemetry.metrics`` on spanpoint's meter provider (the one
its own metrics go to) unless a ``meter_provider`` is given. When no span records (a guarded
graph run with no spanpoint or application span around it), each event is a log record of
the same name and attributes on spanpoint's logger provider instead, so a detection is never
lost: docs/design-notes.md, "Guard telemetry".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry._logs import SeverityNumber

from spanpoint import semconv, telemetry
from spanpoint._version import __version__
from spanpoint.guard.detectors import Detection
from spanpoint.telemetry._per_provider import PerProvider
from spanpoint.telemetry.metrics import GuardInstruments, guard_instruments


class GuardTelemetry:
    """Span attributes, span events and metric instruments for one guard.

    Instruments come from ``meter_provider`` when given, else from spanpoint's meter provider
    at the time of each measurement (``configure()`` may come after the guard is built).
    """

    __slots__ = ("_fixed",)

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        self._fixed = guard_instruments(meter_provider) if meter_provider is not None else None

    def _instruments(self) -> GuardInstruments:
        return self._fixed if self._fixed is not None else guard_instruments()

    def check(self, counters: Mapping[str, Any]) -> None:
        """Record the guard's view of the run on the current span."""
        span = trace.get_current_span()
        if not span.is_recording():
            return
        span.set_attributes(
            {
                semconv.GUARD_STEP: counters["steps"],
                semconv.GUARD_TOKENS: counters["tokens"],
                semconv.GUARD_TOKENS_ESTIMATED: counters["tokens_estimated"],
                semconv.GUARD_COST_USD: counters["cost_usd"],
                semconv.GUARD_STATE: counters["breaker"],
            }
        )

    def detection(self, detection: Detection, step: int, mode: str) -> None:
        """A detector fired (or, in observe mode, a budget was overrun)."""
        attrs = {semconv.GUARD_PATTERN: detection.pattern, "mode": mode}
        self._instruments().detections.add(1, attrs)
        _event(
            semconv.EVENT_GUARD_DETECTION,
            {
                semconv.GUARD_PATTERN: detection.pattern,
                semconv.GUARD_CONFIDENCE: detection.confidence,
                semconv.GUARD_EVIDENCE: detection.evidence,
                semconv.GUARD_TOOLS: list(detection.tools),
                semconv.GUARD_STEP: step,
                semconv.GUARD_MODE: mode,
            },
        )

    def reflection(self, pattern: str, step: int, used: int, allowed: int) -> None:
        """A reflection message was scheduled for the next model call."""
        self._instruments().reflections.add(1, {semconv.GUARD_PATTERN: pattern})
        _event(
            semconv.EVENT_GUARD_REFLECTION,
            {
                semconv.GUARD_PATTERN: pattern,
                semconv.GUARD_STEP: step,
                semconv.GUARD_REFLECTIONS: used,
                semconv.GUARD_REFLECTIONS_ALLOWED: allowed,
            },
        )

    def recovered(self, pattern: str, step: int) -> None:
        """A step after a reflection no longer showed the pattern: the breaker closed."""
        _event(
            semconv.EVENT_GUARD_RECOVERED,
            {semconv.GUARD_PATTERN: pattern, semconv.GUARD_STEP: step},
        )

    def terminated(self, termination: Mapping[str, Any]) -> None:
        """The guard stopped the run."""
        self._instruments().terminations.add(
            1, {semconv.GUARD_REASON: termination["reason"], "kind": termination["kind"]}
        )
        _event(
            semconv.EVENT_GUARD_TERMINATED,
            {
                semconv.GUARD_REASON: termination["reason"],
                semconv.GUARD_STOP_KIND: termination["kind"],
                semconv.GUARD_PATTERN: termination.get("pattern") or "",
                semconv.GUARD_EVIDENCE: termination.get("evidence") or "",
                semconv.GUARD_STEP: termination["step"],
                semconv.GUARD_RESUMABLE: termination["resumable"],
                semconv.GUARD_SKIPPED_TOOL_CALLS: termination["skipped"],
            },
        )

    def denied(self, calls: Sequence[Mapping[str, Any]]) -> None:
        """Tool calls the model asked for that a stop keeps from running: a tool-call
        decision event each, outcome ``deny``."""
        for call in calls:
            attributes = {
                semconv.GEN_AI_TOOL_CALL_DECISION_OUTCOME: semconv.DECISION_DENY,
                semconv.GEN_AI_TOOL_NAME: str(call.get("name") or ""),
            }
            if call.get("id"):
                attributes[semconv.GEN_AI_TOOL_CALL_ID] = str(call["id"])
            _event(semconv.EVENT_TOOL_CALL_DECISION, attributes)

    def resumed(self, reason: str, step: int, granted: int, author: str) -> None:
        """A stopped run was continued with a correction."""
        _event(
            semconv.EVENT_GUARD_RESUMED,
            {
                semconv.GUARD_REASON: reason,
                semconv.GUARD_STEP: step,
                semconv.GUARD_REFLECTIONS_GRANTED: granted,
                semconv.GUARD_CORRECTION_AUTHOR: author,
            },
        )


_logger: PerProvider[Any] = PerProvider(
    lambda provider: provider.get_logger(semconv.INSTRUMENTATION_NAME, __version__)
)


def _event(name: str, attributes: Mapping[str, Any]) -> None:
    """An event on the current span; with no recording span, a log record of that name."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(name, dict(attributes))
        return
    _logger(telemetry.logger_provider()).emit(
        event_name=name,
        body=name,
        attributes=dict(attributes),
        severity_number=SeverityNumber.INFO,
        severity_text="INFO",
    )
