"""The spans of graph calls that are not boundaries: the zero-code patches' hot path.

A traced graph call ends with its result attributes and, when interrupted, a
``gen_ai.agent.paused`` event (``spanpoint.spans``); a plain dict output with neither
messages nor interrupts (most graph calls) is settled by one type check and two key lookups.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from spanpoint import semconv, spans
from spanpoint.capture import exception_text
from spanpoint.config import settings


def describe_graph_output(output: Any, thread_id: Any) -> dict[str, AttributeValue]:
    """``GraphRunner``'s result attributes, without the state inspection it adds.

    A plain completed call (no interrupt, no messages whose usage to sum) adds nothing: the
    span's OK status says it, and every attribute written costs time on the hot path.
    """
    # For import time: graph.results loads langgraph.types, paid by the first described call.
    from spanpoint.graph.results import build_result, output_interrupts, result_attributes

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

    The same story as :func:`mark_paused` and :func:`describe_graph_output` through
    ``spanpoint.boundary.end_span``, for the zero-code hot path: a plain dict output with
    neither messages nor interrupts (most graph calls) is settled by one type check and two
    key lookups.
    ``args`` / ``kwargs`` are the call's, read for its input only when capture opts in.
    """
    if span.is_recording():
        if type(output) is not dict or "__interrupt__" in output or "messages" in output:
            _describe_graph_call(span, output, thread_id)
            _graph_messages(span, output, args, kwargs)
        span.set_status(spans.STATUS_OK)
    span.end()


def _graph_messages(
    span: trace.Span, output: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None
) -> None:
    """The call's input messages and last reply, when capture opts in."""
    capture = settings().capture
    if not capture.content_on_spans:
        return
    # For import time: calls.attributes loads langchain.agents, paid only with capture on.
    from spanpoint.calls.attributes import graph_input_attributes, graph_output_attributes

    graph_input = args[0] if args else (kwargs or {}).get("input")
    try:
        span.set_attributes(graph_input_attributes(graph_input, capture))
        span.set_attributes(graph_output_attributes(output, capture))
    except Exception as exc:  # observability is best effort
        span.set_attribute(semconv.WARNINGS, [f"describe failed: {exception_text(exc)}"])


def _describe_graph_call(span: trace.Span, output: Any, thread_id: Any) -> None:
    from spanpoint.graph.results import output_interrupts  # for import time (see above)

    interrupts = output_interrupts(output)
    if interrupts:
        spans.paused_event(span, [i.id for i in interrupts], [i.value for i in interrupts])
        _gated(span, interrupts, output)
    try:
        span.set_attributes(describe_graph_output(output, thread_id))
    except Exception as exc:  # observability is best effort
        span.set_attribute(semconv.WARNINGS, [f"describe failed: {exception_text(exc)}"])


def mark_paused(output: Any) -> None:
    """A ``gen_ai.agent.paused`` event on the current span when the graph was interrupted."""
    from spanpoint.graph.results import output_interrupts  # for import time (see above)

    interrupts = output_interrupts(output)
    if interrupts:
        span = trace.get_current_span()
        spans.paused_event(span, [i.id for i in interrupts], [i.value for i in interrupts])
        _gated(span, interrupts, output)


def _gated(span: trace.Span, interrupts: Any, output: Any) -> None:
    """A ``require_approval`` tool-call decision per call an approval gate holds."""
    if not span.is_recording():
        return
    from spanpoint.graph import approvals  # for import time (see above)

    approvals.requested(span, approvals.gates_of(((i.id, i.value) for i in interrupts), output))
