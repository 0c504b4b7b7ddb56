"""One span life: a span made current, ended OK, or failed as a pause or an error.

Every path that ends a spanpoint span shares these helpers: boundaries (``spanpoint.boundary``),
span-only calls (``boundary.span_call`` with ``replay=False``), ``GraphRunner``'s traced-only
calls and streams (``spanpoint.graph``) and the zero-code patches
(``spanpoint.instrumentation``). LangGraph's control flow travels as exceptions, and one
rule (:func:`fail`) holds on every path: a ``GraphInterrupt`` (``interrupt()``) is a pause —
the ``gen_ai.agent.paused`` event and the pause attributes, no ERROR; any other
``GraphBubbleUp`` (``ParentCommand`` for ``Command(graph=PARENT)``, a swarm or supervisor
handoff) is neither an error nor a pause — no status, no event; anything else is an error.

It knows nothing of runs, settings or stores: the capture policy comes from
``spanpoint.capture.default_policy()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from spanpoint import semconv
from spanpoint.capture import CapturePolicy, default_policy, record_failure

# Status is immutable: one instance serves every span that ends OK.
STATUS_OK = Status(StatusCode.OK)


def current(span: trace.Span) -> Any:
    """``span`` made current without ending it or recording an exception on exit."""
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def end_ok(span: trace.Span, attributes: Mapping[str, Any] | None = None) -> None:
    """End ``span`` with status OK, after setting ``attributes`` when it records."""
    if span.is_recording():
        if attributes:
            span.set_attributes(dict(attributes))
        span.set_status(STATUS_OK)
    span.end()


def fail(span: trace.Span, exc: BaseException) -> str:
    """Record why ``span`` did not end OK, without ending it: the one rule for every path.

    Returns the outcome: ``"interrupted"`` (a ``GraphInterrupt``: the paused event and the
    pause on the span), ``"handoff"`` (any other ``GraphBubbleUp``, such as a
    ``ParentCommand``: LangGraph's control flow, recorded as nothing) or ``"error"`` (the
    redacted exception, ERROR, ``error.type`` and ``spanpoint.status=failed``).
    """
    if is_interrupt(exc):
        if span.is_recording():
            paused_event(span, interrupt_ids(exc), interrupt_values(exc))
        return "interrupted"
    if is_control_flow(exc):
        return "handoff"
    if span.is_recording():
        record_failure(span, exc)  # message and stack trace redacted
        span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
        span.set_attribute(semconv.STATUS, "failed")
    return "error"


def fail_span(span: trace.Span, exc: BaseException) -> None:
    """End ``span`` after ``exc`` ended its work, by the rule of :func:`fail`."""
    fail(span, exc)
    span.end()


def paused_event(
    span: trace.Span,
    ids: list[str],
    values: list[Any] | None = None,
    *,
    policy: CapturePolicy | None = None,
    details: Mapping[str, Any] | None = None,
    shows_pause: bool | None = None,
) -> None:
    """The ``gen_ai.agent.paused`` event, and the pause on the span itself where viewers
    look without opening events: its id, reason and (capture on) the interrupt's value.

    The one builder of the paused event, for every span path. ``details`` adds what the
    caller knows beyond the interrupts (a graph call's nodes, namespaces, next nodes);
    ``shows_pause`` says whether the span itself shows the pause (default: when there are
    interrupt ids — a ``ParentCommand`` is control flow too, but no pause).
    """
    # For import time: the event machinery loads with the first pause, not with every boundary.
    from spanpoint.events import add_bounded_event

    policy = policy or default_policy()
    pause = pause_attributes(ids, values, policy)
    event: dict[str, Any] = {
        semconv.LANGGRAPH_INTERRUPT_COUNT: len(ids),
        semconv.LANGGRAPH_INTERRUPT_IDS: ids,
        **(details or {}),
    }
    for key in (semconv.GEN_AI_AGENT_PAUSE_ID, semconv.GEN_AI_AGENT_PAUSE_REASON):
        if key in pause:
            event[key] = pause[key]
    add_bounded_event(semconv.EVENT_AGENT_PAUSED, event, span=span, policy=policy)
    if (bool(ids) if shows_pause is None else shows_pause) and span.is_recording():
        span.set_attributes(pause)


def pause_attributes(
    ids: Sequence[str], values: Sequence[Any] | None, capture: CapturePolicy
) -> dict[str, AttributeValue]:
    """Span attributes of a graph call, agent or tool that an interrupt paused.

    ``gen_ai.agent.pause.id`` is LangGraph's interrupt id (the first, when several are
    pending: ``langgraph.interrupt.ids`` lists them all); a LangGraph interrupt waits for a
    resume value, which semantic-conventions-genai #445 calls ``human_input``. The
    interrupt's value (the question) is content: only when capture opts in.
    """
    attrs: dict[str, AttributeValue] = {
        semconv.GEN_AI_AGENT_PAUSE_REASON: semconv.PAUSE_REASON_HUMAN_INPUT,
        semconv.LANGGRAPH_INTERRUPT_COUNT: len(ids),
        semconv.STATUS: "interrupted",
    }
    if ids:
        attrs[semconv.GEN_AI_AGENT_PAUSE_ID] = str(ids[0])
        attrs[semconv.LANGGRAPH_INTERRUPT_IDS] = [str(i) for i in ids]
    if values is not None and (capture.captures_content or capture.capture_state):
        attrs[semconv.GRAPH_INTERRUPT_VALUES] = capture.to_json(list(values))
    return attrs


def resume_attributes(ids: Sequence[str]) -> dict[str, AttributeValue]:
    """Attributes of a ``gen_ai.agent.resumed`` event: the interrupts its value answers."""
    attrs: dict[str, AttributeValue] = {semconv.LANGGRAPH_INTERRUPT_IDS: [str(i) for i in ids]}
    if ids:
        attrs[semconv.GEN_AI_AGENT_RESUMED_FROM_TYPE] = semconv.RESUMED_FROM_PAUSE
        attrs[semconv.GEN_AI_AGENT_RESUMED_FROM_ID] = str(ids[0])
    return attrs


def interrupt_ids(exc: BaseException) -> list[str]:
    """The interrupt ids a ``GraphInterrupt`` carries (none for a ``ParentCommand``)."""
    if not is_interrupt(exc) or not exc.args:
        return []
    found = exc.args[0]
    if not isinstance(found, list | tuple):
        return []
    return [str(getattr(i, "id", "")) for i in found]


def interrupt_values(exc: BaseException) -> list[Any]:
    """The values of the interrupts a ``GraphInterrupt`` carries (what they ask)."""
    found = exc.args[0] if exc.args else None
    if not isinstance(found, list | tuple):
        return []
    return [getattr(i, "value", None) for i in found]


def is_control_flow(exc: BaseException) -> bool:
    """LangGraph's interrupts and parent commands bubble up as exceptions; not failures.

    Matched by class name (``langgraph.errors.GraphBubbleUp`` and its subclasses), so that
    spanpoint's core does not import LangGraph's runtime.
    """
    return _is_langgraph(exc, "GraphBubbleUp")


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is LangGraph's ``GraphInterrupt`` (``interrupt()``), matched by name."""
    return _is_langgraph(exc, "GraphInterrupt")


def _is_langgraph(exc: BaseException, name: str) -> bool:
    return any(c.__name__ == name and c.__module__ == "langgraph.errors" for c in type(exc).__mro__)
