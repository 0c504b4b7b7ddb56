"""Wrappers of ``Pregel.stream`` / ``astream`` for the zero-code instrumentor.

A stream call is a graph-call span that stays open while the caller iterates; each chunk is a
bounded span event; never a boundary. ``invoke`` runs ``stream`` internally: that inner call is
claimed by the invoke span (:mod:`spanpoint.instrumentation.pregel`) and passed through untraced.

The OpenTelemetry context is attached only *around* each step of a stream, never across a
``yield``, so a consumer that stops early or iterates from another task cannot detach a
context it does not own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from spanpoint import semconv
from spanpoint.instrumentation.pregel import (
    ACTIVE,
    ActiveGraphCall,
    Graphs,
    On,
    PatchOptions,
    Wrapper,
    adopted_span,
    call_attributes,
    config_of,
)
from spanpoint.spans import STATUS_OK, fail_span, paused_event


def _open_stream_span(
    graphs: Graphs, instance: Any, args: Any, kwargs: Any
) -> tuple[trace.Span, Any]:
    from spanpoint.events import StreamRecorder  # for import time: the first stream pays

    meta = graphs.meta(instance)
    attrs, _ = call_attributes(meta, config_of(args, kwargs), nested=ACTIVE.get() is not None)
    span = meta.tracer.start_span(meta.span_name, attributes={**attrs, semconv.STRATEGY: "stream"})
    recorder = StreamRecorder(
        span,
        stream_mode=kwargs.get("stream_mode"),
        subgraphs=bool(kwargs.get("subgraphs", False)),
    )
    return span, recorder


def _end_stream_span(span: trace.Span, recorder: Any, exc: BaseException | None) -> None:
    recorder.finish()
    interrupts = getattr(recorder, "interrupts", None)
    if interrupts and span.is_recording():
        ids = [str(getattr(i, "id", "")) for i in interrupts]
        paused_event(span, ids, [getattr(i, "value", None) for i in interrupts])
    if exc is not None:
        fail_span(span, exc)
        return
    if span.is_recording():
        span.set_status(STATUS_OK)
    span.end()


def graph_stream(options: PatchOptions, switch: Any = On) -> Wrapper:
    """``Pregel.stream``: a graph-call span open while the caller iterates; chunks as events.

    ``invoke`` runs ``stream`` internally: that inner call is claimed and passed through (it
    runs on every ``invoke``, so the check is inline).
    """
    graphs = Graphs(options)

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if switch.active:
            active = ACTIVE.get()
            if active is None or active.graph is not instance or not active.inner_stream_pending:
                return _traced_iter(graphs, wrapped, instance, args, kwargs)
            active.inner_stream_pending = False
        return wrapped(*args, **kwargs)

    return traced


def _stream_scope(
    graphs: Graphs, instance: Any, args: Any, kwargs: Any
) -> tuple[trace.Span, Any, Any, ActiveGraphCall]:
    """The span a stream runs under (adopted from an enclosing graph call, else its own), its
    chunk recorder (None when adopted), the context to attach, and the graph call to mark."""
    adopted = adopted_span(ACTIVE.get(), None, instance)
    span, recorder = (
        (adopted, None) if adopted else _open_stream_span(graphs, instance, args, kwargs)
    )
    graph_call = ActiveGraphCall(instance, inner_stream_pending=False)
    graph_call.span = span
    return span, recorder, trace.set_span_in_context(span), graph_call


def _traced_iter(
    graphs: Graphs, wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any
) -> Iterator[Any]:
    span, recorder, ctx, graph_call = _stream_scope(graphs, instance, args, kwargs)
    graph_call_token = None
    error: BaseException | None = None
    inner = None
    try:
        while True:
            token = otel_context.attach(ctx)
            graph_call_token = ACTIVE.set(graph_call)
            try:
                if inner is None:
                    inner = wrapped(*args, **kwargs)
                chunk = next(inner)
            except StopIteration:
                return
            finally:
                ACTIVE.reset(graph_call_token)
                otel_context.detach(token)
            if recorder is not None:
                recorder.record(chunk)
            yield chunk
    except GeneratorExit:
        if inner is not None:
            token = otel_context.attach(ctx)
            try:
                inner.close()
            finally:
                otel_context.detach(token)
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        if recorder is not None:
            _end_stream_span(span, recorder, error)


def graph_astream(options: PatchOptions, switch: Any = On) -> Wrapper:
    """``Pregel.astream``: the async form of :func:`graph_stream`."""
    graphs = Graphs(options)

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if switch.active:
            active = ACTIVE.get()
            if active is None or active.graph is not instance or not active.inner_stream_pending:
                return _traced_aiter(graphs, wrapped, instance, args, kwargs)
            active.inner_stream_pending = False
        return wrapped(*args, **kwargs)

    return traced


async def _traced_aiter(
    graphs: Graphs, wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any
) -> AsyncIterator[Any]:
    span, recorder, ctx, graph_call = _stream_scope(graphs, instance, args, kwargs)
    error: BaseException | None = None
    inner = None
    try:
        while True:
            token = otel_context.attach(ctx)
            graph_call_token = ACTIVE.set(graph_call)
            try:
                if inner is None:
                    inner = wrapped(*args, **kwargs)
                chunk = await inner.__anext__()
            except StopAsyncIteration:
                return
            finally:
                ACTIVE.reset(graph_call_token)
                otel_context.detach(token)
            if recorder is not None:
                recorder.record(chunk)
            yield chunk
    except GeneratorExit:
        if inner is not None:
            token = otel_context.attach(ctx)
            try:
                await inner.aclose()
            finally:
                otel_context.detach(token)
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        if recorder is not None:
            _end_stream_span(span, recorder, error)
