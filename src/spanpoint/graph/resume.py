"""Resuming an interrupted graph call: the request that answers it, or a durable wait for it.

``build_resume_request(result, value)`` builds the ``Command(resume=...)`` call on the same
thread; ``wait_for_interrupt(result)`` bridges a LangGraph interrupt to a durable wait
(``spanpoint.waits``) and returns that request once the value is provided.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from langgraph.types import Command
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, TraceFlags

from spanpoint import semconv
from spanpoint.errors import ConfigurationError
from spanpoint.graph import approvals
from spanpoint.graph.results import RunResult, pick_interrupt, resume_map
from spanpoint.graph.types import RunRequest
from spanpoint.waits import wait_for_input


def build_resume_request(
    result: RunResult, value: Any, *, interrupt_index: int | None = None
) -> RunRequest:
    """The request that answers ``result``'s interrupt(s) with ``value`` on the same thread:
    :meth:`RunResult.resume_request`, for callers that hold a result of unknown type."""
    if not isinstance(result, RunResult):
        raise ConfigurationError(
            f"build_resume_request needs the RunResult of a graph call, not {type(result).__name__}"
        )
    return result.resume_request(value, interrupt_index=interrupt_index)


def wait_for_interrupt(
    result: RunResult,
    *,
    schema: Mapping[str, Any] | None = None,
    question: str | None = None,
    name: str | None = None,
    interrupt_index: int | None = None,
) -> RunRequest:
    """Bridge a LangGraph interrupt to a durable wait; return the request that resumes it.

    The wait is named ``name`` (default ``interrupt-<id prefix>``, stable across attempts)
    and asks ``question`` (default: the interrupt's ``question`` field or string value).
    """
    if not isinstance(result, RunResult) or not result.interrupts:
        build_resume_request(result, None)  # raises for a result that is not interrupted
        raise ConfigurationError(
            "the graph stopped at a static breakpoint, which takes no input; resume it with "
            "build_resume_request(result, None)"
        )
    if interrupt_index is None and len(result.interrupts) > 1:
        raise ConfigurationError(
            f"the result has {len(result.interrupts)} interrupts; pass interrupt_index=N to "
            "wait for one of them"
        )
    info = pick_interrupt(result.interrupts, interrupt_index or 0)
    value = wait_for_input(
        name or f"interrupt-{info.id[:12]}",
        schema=schema,
        question=question or _question_of(info.value),
    )
    return build_resume_request(result, value, interrupt_index=interrupt_index)


def _question_of(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("question"), str):
        return str(value["question"])
    return None


# --- the link from a resume to the span that paused -----------------------------------------

#: The attributes of a resume's link to the paused call's span.
_PAUSED_LINK = {"spanpoint.link": "paused"}


def traceparent(span: trace.Span) -> str | None:
    """``span``'s W3C traceparent (``00-<trace>-<span>-<flags>``), None for an invalid one."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _pause_note(thread_id: Any, checkpoint_id: str) -> str:
    """The note key of the span that paused a thread at ``checkpoint_id``."""
    return json.dumps(["graph-pause", str(thread_id), checkpoint_id])


def _note_store() -> Any:
    """The store pause origins are noted in: the run's, else the configured one."""
    from spanpoint.config import settings  # for import time: with the first pause
    from spanpoint.run import current_run

    scope = current_run()
    return scope.store if scope is not None else settings().store


def note_pause_origin(thread_id: Any, checkpoint_id: str | None, parent: str) -> Link | None:
    """Note in spanpoint's store that the span ``parent`` (a traceparent) paused the thread
    at ``checkpoint_id``: a resume that finds the paused checkpoint finds the span, in any
    process sharing the store. LangGraph's checkpoint carries nothing of it. Best effort: a
    failed write only costs the link across processes. Returns the link to ``parent``."""
    link = paused_link(parent)
    if link is not None and checkpoint_id:
        # Observability is best effort: a failed write only costs the link from elsewhere.
        with contextlib.suppress(Exception):
            _note_store().put_note(_pause_note(thread_id, checkpoint_id), parent)
    return link


def pause_origin(thread_id: Any, snapshot: Any) -> Link | None:
    """The link to the span that paused the thread at ``snapshot`` (its checkpoint), when
    spanpoint's store noted one (:func:`note_pause_origin`)."""
    config = getattr(snapshot, "config", None) or {}
    checkpoint_id = (config.get("configurable") or {}).get("checkpoint_id")
    if not checkpoint_id:
        return None
    try:
        return paused_link(_note_store().get_note(_pause_note(thread_id, str(checkpoint_id))))
    except Exception:  # observability is best effort: no link
        return None


def paused_link(parent: Any) -> Link | None:
    """The link to the span a traceparent names; None when it is not one."""
    if not isinstance(parent, str):
        return None
    parts = parent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        ctx = SpanContext(
            int(parts[1], 16), int(parts[2], 16), is_remote=True,
            trace_flags=TraceFlags(int(parts[3], 16) & 0xFF),
        )  # fmt: skip
    except ValueError:
        return None
    return Link(ctx, _PAUSED_LINK) if ctx.is_valid else None


def link_to_pause(span: trace.Span, link: Link | None) -> None:
    """Link ``span`` (a resume) to the span that paused, when known."""
    if link is not None and span.is_recording():
        span.add_link(link.context, link.attributes)


# --- the zero-code Pregel.invoke patch: the same story without a GraphRunner -----------------


def _resumed(graph_input: Any) -> bool:
    return isinstance(graph_input, Command) and graph_input.resume is not None


def _announce(span: trace.Span, graph_input: Any, snapshot: Any, thread_id: Any) -> None:
    """The ``gen_ai.agent.resumed`` event and the link to the paused span, from the thread's
    state before the resume runs (the paused checkpoint names the span that paused)."""
    # For import time: the events and span helpers load with the first resume described.
    from spanpoint.config import settings
    from spanpoint.events import add_bounded_event
    from spanpoint.spans import resume_attributes

    resume = graph_input.resume
    mapped = resume_map(resume)
    if mapped is not None:
        ids = [str(k) for k in mapped]
    else:
        ids = [str(i.id) for i in getattr(snapshot, "interrupts", ()) or ()]
    link_to_pause(span, pause_origin(thread_id, snapshot))
    attrs = resume_attributes(ids)
    if thread_id is not None:
        attrs[semconv.GEN_AI_CONVERSATION_ID] = str(thread_id)
    add_bounded_event(semconv.EVENT_AGENT_RESUMED, attrs, span=span, policy=settings().capture)
    if snapshot is not None and approvals.carries_decisions(resume):
        pending = getattr(snapshot, "interrupts", ()) or ()
        gates = approvals.gates_of(((i.id, i.value) for i in pending), snapshot.values)
        approvals.decided(span, resume, gates, settings().capture)


def _thread(config: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    return thread_id, {"configurable": {"thread_id": thread_id}}


def _prepare(graph_input: Any, config: Any) -> tuple[Any, Any, Any]:
    """(config, the call's span, and the (thread id, state config) to read the resumed
    interrupts from, or None): the half of a traced call's config both forms share."""
    span = trace.get_current_span()
    thread_id, state_config = _thread(config or {})
    wanted = _resumed(graph_input) and thread_id is not None and span.is_recording()
    return config, span, (thread_id, state_config) if wanted else None


def traced_call_config(graph: Any, graph_input: Any, config: Any, *, stamp: bool = False) -> Any:
    """A zero-code graph call's config, unchanged, and, for a ``Command(resume=...)``, the
    resume described on the span. Best effort: a failed state read only costs the ids and
    link.

    The instrumentor changes nothing LangGraph keeps (its checkpoint metadata is compared by
    LangGraph's own suite): the link to the paused span comes from spanpoint's store when a
    ``GraphRunner`` noted the pause there, else from what this process remembers. ``stamp``
    is accepted for callers written when the config carried the span; it changes nothing."""
    del stamp
    config, span, read = _prepare(graph_input, config)
    if read is not None:
        try:
            snapshot = graph.get_state(read[1])
        except Exception:  # an async checkpointer, a failed read: no ids, no link
            snapshot = None
        _announce(span, graph_input, snapshot, read[0])
    return config


async def atraced_call_config(
    graph: Any, graph_input: Any, config: Any, *, stamp: bool = False
) -> Any:
    """The async form of :func:`traced_call_config` (``aget_state``)."""
    del stamp
    config, span, read = _prepare(graph_input, config)
    if read is not None:
        try:
            snapshot = await graph.aget_state(read[1])
        except Exception:
            snapshot = None
        _announce(span, graph_input, snapshot, read[0])
    return config
