"""Streams: durable graph calls whose chunks are events.

``GraphRunner.stream``/``astream`` yield LangGraph's chunks untouched, as they come. Each chunk
becomes a bounded ``spanpoint.stream.chunk`` event on the call's span; the span is current only
while the graph computes the next chunk, never while the caller holds one. A chunk neither
commits nor replays a checkpoint (invariant 4).

The call itself follows :meth:`GraphRunner.invoke`'s rerun rules (``graph/rerun.py``): inside
a run, on a thread with a checkpointer, the stream is stamped with its key; a rerun that finds
the stream's call unfinished continues the thread (``stream(None)``), one that finds it ended
streams what it returned (``values``; any other mode raises :class:`StreamReplayError` before
anything runs). The model and tool calls inside are boundaries (``spanpoint.calls.seams``),
keyed by their task's position, as under ``invoke``: the runner sets its call's scope around
each step (``spanpoint.graph.nested.scoped_stream``), never across a chunk the caller holds.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from opentelemetry import trace

from spanpoint import semconv, spans
from spanpoint.events import StreamRecorder
from spanpoint.graph import rerun
from spanpoint.graph.call import END, GraphCall, close_quietly
from spanpoint.graph.results import result_attributes
from spanpoint.graph.types import RunRequest, StreamReplayError


def _open_recorded(
    call: GraphCall, req: RunRequest, kwargs: dict[str, Any]
) -> tuple[float, trace.Span, StreamRecorder]:
    """Start time, the stream's span, and the recorder that turns its chunks into events."""
    started, span = time.perf_counter(), call.open_span(req, "stream")
    recorder = StreamRecorder(
        span,
        stream_mode=kwargs.get("stream_mode") or getattr(call.graph, "stream_mode", None),
        subgraphs=bool(kwargs.get("subgraphs")),
        policy=call.runner.policy,
    )
    return started, span, recorder


def stream_graph(call: GraphCall, req: RunRequest, kwargs: dict[str, Any]) -> Iterator[Any]:
    """Yield the graph's chunks (or a rerun's, see the module doc); record each as an event."""
    started, span, recorder = _open_recorded(call, req, kwargs)
    try:
        with spans.current(span):
            config, kw, durable = call.stream_setup(span, req, kwargs)
            plan = rerun.START
            if durable is not None:
                plan = rerun.Planner(call.graph, req.state_config(), *durable, kw).plan()
            chunks = _planned(call, req, config, kw, plan, span)
    except BaseException as exc:
        _end_stopped(call, span, recorder, req, started, exc)
        raise
    try:
        while True:
            with spans.current(span):
                chunk = next(chunks, END)
            if chunk is END:
                break
            recorder.record(chunk)
            yield chunk
        snapshot = plan.snapshot if plan.action == "return" else _final_state(call, span, req)
    except BaseException as exc:  # closed early, cancelled or interrupted: end the span
        if isinstance(exc, GeneratorExit):
            close_quietly(chunks)
        _end_stopped(call, span, recorder, req, started, exc)
        raise
    _end_stream(call, span, recorder, req, started, snapshot)


async def astream_graph(
    call: GraphCall, req: RunRequest, kwargs: dict[str, Any]
) -> AsyncIterator[Any]:
    """The async form of :func:`stream_graph`."""
    started, span, recorder = _open_recorded(call, req, kwargs)
    try:
        with spans.current(span):
            config, kw, durable = call.stream_setup(span, req, kwargs)
            plan = rerun.START
            if durable is not None:
                plan = await rerun.Planner(call.graph, req.state_config(), *durable, kw).aplan()
            chunks = _aplanned(call, req, config, kw, plan, span)
    except BaseException as exc:
        _end_stopped(call, span, recorder, req, started, exc)
        raise
    try:
        while True:
            with spans.current(span):
                chunk = await anext(chunks, END)
            if chunk is END:
                break
            recorder.record(chunk)
            yield chunk
        snapshot = (
            plan.snapshot if plan.action == "return" else await _afinal_state(call, span, req)
        )
    except BaseException as exc:  # closed early, cancelled or interrupted: end the span
        _end_stopped(call, span, recorder, req, started, exc)
        raise
    _end_stream(call, span, recorder, req, started, snapshot)


def _planned(
    call: GraphCall,
    req: RunRequest,
    config: dict[str, Any],
    kw: dict[str, Any],
    plan: rerun.Rerun,
    span: trace.Span,
) -> Iterator[Any]:
    """The chunks of a stream that follows ``plan``: the replayed ones, or the graph's."""
    if plan.attribute is not None:
        span.set_attribute(semconv.GRAPH_RERUN, plan.attribute)
    if plan.action == "return":
        return iter(replayed_chunks(call.graph, plan.snapshot, kw))
    graph_input = None if plan.action == "continue" else req.input
    return iter(call.graph.stream(graph_input, config, **kw))


async def _replayed_async(chunks: list[Any]) -> AsyncIterator[Any]:
    for chunk in chunks:
        yield chunk


def _aplanned(
    call: GraphCall,
    req: RunRequest,
    config: dict[str, Any],
    kw: dict[str, Any],
    plan: rerun.Rerun,
    span: trace.Span,
) -> AsyncIterator[Any]:
    """The async form of :func:`_planned`."""
    if plan.attribute is not None:
        span.set_attribute(semconv.GRAPH_RERUN, plan.attribute)
    if plan.action == "return":
        return _replayed_async(replayed_chunks(call.graph, plan.snapshot, kw))
    graph_input = None if plan.action == "continue" else req.input
    return call.graph.astream(graph_input, config, **kw)  # type: ignore[no-any-return]


def replayed_chunks(graph: Any, snapshot: Any, kwargs: dict[str, Any]) -> list[Any]:
    """What a ``values`` stream of a call that ended at ``snapshot`` yielded last: the
    output values (with ``__interrupt__`` when it paused), shaped as LangGraph shapes them
    for the modes and ``subgraphs=`` asked. Any other mode: :class:`StreamReplayError`."""
    modes = kwargs.get("stream_mode") or getattr(graph, "stream_mode", None) or "values"
    asked = [modes] if isinstance(modes, str) else list(modes)
    others = [m for m in asked if m != "values"]
    if others or kwargs.get("version", "v1") != "v1":
        shown = others or [f"version={kwargs.get('version')!r}"]
        raise StreamReplayError(
            f"this stream's graph call ended in an earlier attempt of the run; its state "
            f"can be streamed again as stream_mode='values', but not as {shown}: those "
            "chunks are not kept, and streaming them would run the paid calls again. "
            "Stream the rerun with stream_mode='values', or read it with invoke()"
        )
    values = rerun.snapshot_output(graph, snapshot)
    if isinstance(values, dict) and "__interrupt__" in values:  # as LangGraph streams it
        values = {**values, "__interrupt__": tuple(values["__interrupt__"])}
    chunks = [values]
    if not isinstance(modes, str):
        chunks = [("values", chunk) for chunk in chunks]
    if kwargs.get("subgraphs"):
        chunks = [((), *c) if isinstance(c, tuple) else ((), c) for c in chunks]
    return chunks


def _final_state(call: GraphCall, span: trace.Span, req: RunRequest) -> Any:
    """The thread's state (with its subgraphs) when the stream ended; None without state."""
    if not call.info.has_state:
        return None
    with spans.current(span):
        return call.graph.get_state(req.state_config(), subgraphs=True)


async def _afinal_state(call: GraphCall, span: trace.Span, req: RunRequest) -> Any:
    """The async form of :func:`_final_state`."""
    if not call.info.has_state:
        return None
    with spans.current(span):
        return await call.graph.aget_state(req.state_config(), subgraphs=True)


def _end_stopped(
    call: GraphCall,
    span: trace.Span,
    recorder: StreamRecorder,
    req: RunRequest,
    started: float,
    exc: BaseException,
) -> None:
    """End the span of a stream that did not reach its end: closed early by its consumer
    (``GeneratorExit``, not an error), else failed (cancelled and interrupted too)."""
    if isinstance(exc, GeneratorExit):
        _end_stream(call, span, recorder, req, started, None, closed_early=True)
    else:
        spans.fail_span(span, exc)
        call.summarize(req, started, None, exc, {"chunks": recorder.count})


def _end_stream(
    call: GraphCall,
    span: trace.Span,
    recorder: StreamRecorder,
    req: RunRequest,
    started: float,
    snapshot: Any,
    *,
    closed_early: bool = False,
) -> None:
    recorder.finish()
    output = {"__interrupt__": recorder.interrupts} if recorder.interrupts else None
    result = call.finish(span, req, output, snapshot)
    attrs = result_attributes(result)
    if closed_early:
        attrs[semconv.STREAM_CLOSED_EARLY] = True
    spans.end_ok(span, attrs)
    call.summarize(req, started, result, None, {"chunks": recorder.count}, "stream")
