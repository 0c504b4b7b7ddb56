"""Spans that are never boundaries, for the zero-code patches.

``call_boundary`` (``spanpoint.boundary``) treats every exception as a failure, which is right
for a boundary: nothing must be committed. A span-only call differs in one way: LangGraph's
control flow travels as exceptions (``GraphInterrupt`` for ``interrupt()``, ``ParentCommand``
for ``Command(graph=PARENT)``), and those are a pause, not an error — the span gets a
``gen_ai.agent.paused`` event and no ERROR status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from spanpoint import semconv
from spanpoint.boundary import BoundarySpec, acall_boundary, call_boundary
from spanpoint.capture import exception_text, record_failure
from spanpoint.config import settings

# Status is immutable: one instance serves every span that ends OK.
STATUS_OK = Status(StatusCode.OK)


def describe_graph_output(output: Any, thread_id: Any) -> dict[str, AttributeValue]:
    """``GraphRunner``'s result attributes, without the state inspection it adds.

    A plain completed call (no interrupt, no messages whose usage to sum) adds nothing: the
    span's OK status says it, and every attribute written costs time on the hot path.
    """
    from spanpoint.graph_results import build_result, output_interrupts, result_attributes

    if not (isinstance(output, dict) and "messages" in output) and not output_interrupts(output):
        return {}
    result = build_result(output, "" if thread_id is None else str(thread_id), None)
    attrs = result_attributes(result)
    attrs.pop(semconv.LANGGRAPH_CHECKPOINT_NS, None)  # None without a snapshot; kept from start
    return attrs


def end_graph_span(
    span: trace.Span,
    output: Any,
    thread_id: Any,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
) -> None:
    """End a graph call's span that is not a boundary: paused event, result attributes, OK.

    The same story as :func:`mark_paused` and ``describe_graph_output`` through
    :func:`end_span`, for the zero-code hot path: a plain dict output with neither messages
    nor interrupts (most graph calls) is settled by one type check and two key lookups.
    ``args`` / ``kwargs`` are the call's, read for its input only when capture opts in.
    """
    if span.is_recording():
        if type(output) is not dict or "__interrupt__" in output or "messages" in output:
            _describe_graph_call(span, output, thread_id)
            _graph_messages(span, output, args, kwargs)
        span.set_status(STATUS_OK)
    span.end()


def _graph_messages(
    span: trace.Span, output: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None
) -> None:
    """The call's input messages and last reply, when capture opts in (issue 19)."""
    capture = settings().capture
    if not capture.content_on_spans:
        return
    from spanpoint.genai_spans import graph_input_attributes, graph_output_attributes

    graph_input = args[0] if args else (kwargs or {}).get("input")
    try:
        span.set_attributes(graph_input_attributes(graph_input, capture))
        span.set_attributes(graph_output_attributes(output, capture))
    except Exception as exc:  # observability is best effort
        span.set_attribute(semconv.WARNINGS, [f"describe failed: {exception_text(exc)}"])


def _describe_graph_call(span: trace.Span, output: Any, thread_id: Any) -> None:
    from spanpoint.graph_results import output_interrupts

    interrupts = output_interrupts(output)
    if interrupts:
        paused_event(span, [i.id for i in interrupts], [i.value for i in interrupts])
    try:
        span.set_attributes(describe_graph_output(output, thread_id))
    except Exception as exc:  # observability is best effort
        span.set_attribute(semconv.WARNINGS, [f"describe failed: {exception_text(exc)}"])


def mark_paused(output: Any) -> None:
    """A ``gen_ai.agent.paused`` event on the current span when the graph was interrupted."""
    from spanpoint.graph_results import output_interrupts

    interrupts = output_interrupts(output)
    if interrupts:
        span = trace.get_current_span()
        paused_event(span, [i.id for i in interrupts], [i.value for i in interrupts])


def paused_event(span: trace.Span, ids: list[str], values: list[Any] | None = None) -> None:
    """The ``gen_ai.agent.paused`` event, and the pause on the span itself where viewers
    look without opening events: its id, reason and (capture on) the interrupt's value."""
    from spanpoint.events import add_bounded_event
    from spanpoint.genai_spans import pause_attributes

    pause = pause_attributes(ids, values, settings().capture)
    event: dict[str, AttributeValue] = {
        semconv.LANGGRAPH_INTERRUPT_COUNT: len(ids),
        semconv.LANGGRAPH_INTERRUPT_IDS: ids,
    }
    for key in (semconv.GEN_AI_AGENT_PAUSE_ID, semconv.GEN_AI_AGENT_PAUSE_REASON):
        if key in pause:
            event[key] = pause[key]
    add_bounded_event(semconv.EVENT_AGENT_PAUSED, event, span=span)
    if ids and span.is_recording():  # a ParentCommand is control flow too, but no pause
        span.set_attributes(pause)


# --- span-only calls -------------------------------------------------------------------------


def start_span(spec: BoundarySpec) -> trace.Span:
    attrs = spec.attributes
    attrs[semconv.BOUNDARY_KIND] = spec.kind
    attrs[semconv.BOUNDARY_NAME] = spec.name
    return settings().tracer.start_span(spec.span_name, kind=spec.span_kind, attributes=attrs)


def end_span(spec: BoundarySpec, span: trace.Span, output: Any) -> None:
    if span.is_recording():
        if spec.describe is not None:
            try:
                span.set_attributes(dict(spec.describe(output)))
            except Exception as exc:  # observability is best effort
                span.set_attribute(semconv.WARNINGS, [f"describe failed: {exception_text(exc)}"])
        span.set_status(STATUS_OK)
    span.end()


def fail_span(span: trace.Span, exc: BaseException) -> None:
    if span.is_recording():
        if is_control_flow(exc):
            # An interrupt or a Command to the parent graph: LangGraph's control flow.
            paused_event(span, interrupt_ids(exc), interrupt_values(exc))
        else:
            record_failure(span, exc)  # message and stack trace redacted
            span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
    span.end()


def interrupt_ids(exc: BaseException) -> list[str]:
    """The interrupt ids a ``GraphInterrupt`` carries (none for a ``ParentCommand``)."""
    from langgraph.errors import GraphInterrupt

    if not isinstance(exc, GraphInterrupt) or not exc.args:
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
    """LangGraph's interrupts and parent commands bubble up as exceptions; not failures."""
    from langgraph.errors import GraphBubbleUp

    return isinstance(exc, GraphBubbleUp)


def current(span: trace.Span) -> Any:
    return trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def span_call(spec: BoundarySpec, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as the boundary ``spec`` when it replays, else in a plain span
    where LangGraph's control-flow exceptions (interrupts) are not errors."""
    if spec.replay:
        return call_boundary(spec, fn, *args, **kwargs)
    span = start_span(spec)
    with current(span):
        try:
            output = fn(*args, **kwargs)
        except BaseException as exc:
            fail_span(span, exc)
            raise
    end_span(spec, span, output)
    return output


async def aspan_call(spec: BoundarySpec, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The async form of :func:`span_call`."""
    if spec.replay:
        return await acall_boundary(spec, fn, *args, **kwargs)
    span = start_span(spec)
    with current(span):
        try:
            output = await fn(*args, **kwargs)
        except BaseException as exc:
            fail_span(span, exc)
            raise
    end_span(spec, span, output)
    return output
