"""Streams are events, never boundaries.

``GraphRunner.stream``/``astream`` yield LangGraph's chunks untouched, as they come. Each chunk
becomes a bounded ``spanpoint.stream.chunk`` event on the call's span; the span is current only
while the graph computes the next chunk, never while the caller holds one. A stream neither
commits nor replays a checkpoint, inside a run or not.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from opentelemetry import trace

from spanpoint import semconv, spans
from spanpoint.events import StreamRecorder
from spanpoint.graph.call import END, GraphCall, close_quietly
from spanpoint.graph.results import result_attributes
from spanpoint.graph.types import RunRequest


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
    """Yield the graph's chunks; record each as a span event."""
    started, span, recorder = _open_recorded(call, req, kwargs)
    with spans.current(span):
        kw = call.call_kwargs(req, kwargs)
        chunks = iter(call.graph.stream(req.input, req.graph_config(), **kw))
    try:
        while True:
            with spans.current(span):
                chunk = next(chunks, END)
            if chunk is END:
                break
            recorder.record(chunk)
            yield chunk
        snapshot = _final_state(call, span, req)
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
    with spans.current(span):
        chunks = call.graph.astream(req.input, req.graph_config(), **call.call_kwargs(req, kwargs))
    try:
        while True:
            with spans.current(span):
                chunk = await anext(chunks, END)
            if chunk is END:
                break
            recorder.record(chunk)
            yield chunk
        snapshot = await _afinal_state(call, span, req)
    except BaseException as exc:  # closed early, cancelled or interrupted: end the span
        _end_stopped(call, span, recorder, req, started, exc)
        raise
    _end_stream(call, span, recorder, req, started, snapshot)


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
