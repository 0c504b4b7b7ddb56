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
        values = [getattr(i, "value", None) for i in interrupts]
        paused_event(span, ids, values)
        # For import time: loaded by the first stream that pauses. A stream keeps no final
        # state, so a batched request's calls get no id here.
        from spanpoint.graph import approvals

        approvals.requested(span, approvals.gates_of(zip(ids, values, strict=True)))
    if exc is not None:
        fail_span(span, exc)
        return
    if span.is_recording():
        span.set_status(STATUS_OK)
    span.end()


def _stream_wrapper(options: PatchOptions, switch: Any, traced_iter: Callable[..., Any]) -> Wrapper:
    """The wrapper of ``stream`` or ``astream``: ``traced_iter`` (:func:`_traced_iter` or
    :func:`_traced_aiter`) unless the call is the inner stream of a traced ``invoke``, which
    is claimed and passed through (it runs on every ``invoke``, so the check is inline)."""
    graphs = Graphs(options)

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if switch.active:
            active = ACTIVE.get()
            if active is None or active.graph is not instance or not active.inner_stream_pending:
                return traced_iter(graphs, wrapped, instance, args, kwargs)
            active.inner_stream_pending = False
        return wrapped(*args, **kwargs)

    return traced


def graph_stream(options: PatchOptions, switch: Any = On) -> Wrapper:
    """``Pregel.stream``: a graph-call span open while the caller iterates; chunks as events.

    ``invoke`` runs ``stream`` internally: that inner call is claimed and passed through.
    """
    return _stream_wrapper(options, switch, _traced_iter)


def graph_astream(options: PatchOptions, switch: Any = On) -> Wrapper:
    """``Pregel.astream``: the async form of :func:`graph_stream`."""
    return _stream_wrapper(options, switch, _traced_aiter)


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


#: The end of the inner stream (``next(inner, _END)``).
_END: Any = object()


class _TracedStream:
    """One traced stream, shared by the sync and async iterators.

    Each step computes the next chunk with the stream's context attached and its graph call
    active (never across a ``yield``); the inner stream is opened by the first step. Used as
    a context manager around the whole iteration, it ends the span it opened: failed by an
    exception, ended as it stands when the consumer closed the stream early.
    """

    __slots__ = ("_open", "ctx", "graph_call", "inner", "recorder", "span")

    def __init__(
        self, graphs: Graphs, wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any
    ) -> None:
        self.span, self.recorder, self.ctx, self.graph_call = _stream_scope(
            graphs, instance, args, kwargs
        )
        self._open = lambda: wrapped(*args, **kwargs)
        self.inner: Any = None

    def step(self) -> Any:
        """The next chunk, or ``_END`` after the last."""
        token, call_token = otel_context.attach(self.ctx), ACTIVE.set(self.graph_call)
        try:
            if self.inner is None:
                self.inner = self._open()
            return next(self.inner, _END)
        finally:
            ACTIVE.reset(call_token)
            otel_context.detach(token)

    async def astep(self) -> Any:
        token, call_token = otel_context.attach(self.ctx), ACTIVE.set(self.graph_call)
        try:
            if self.inner is None:
                self.inner = self._open()
            return await anext(self.inner, _END)
        finally:
            ACTIVE.reset(call_token)
            otel_context.detach(token)

    def record(self, chunk: Any) -> None:
        """The chunk as an event of the stream's own span (none on an adopted span)."""
        if self.recorder is not None:
            self.recorder.record(chunk)

    def close(self) -> None:
        """Close the inner stream, in the stream's context (the consumer stopped early)."""
        if self.inner is not None:
            token = otel_context.attach(self.ctx)
            try:
                self.inner.close()
            finally:
                otel_context.detach(token)

    async def aclose(self) -> None:
        if self.inner is not None:
            token = otel_context.attach(self.ctx)
            try:
                await self.inner.aclose()
            finally:
                otel_context.detach(token)

    def __enter__(self) -> _TracedStream:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self.recorder is not None:
            error = None if isinstance(exc, GeneratorExit) else exc
            _end_stream_span(self.span, self.recorder, error)


def _traced_iter(
    graphs: Graphs, wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any
) -> Iterator[Any]:
    with _TracedStream(graphs, wrapped, instance, args, kwargs) as stream:
        while (chunk := stream.step()) is not _END:
            stream.record(chunk)
            try:
                yield chunk
            except GeneratorExit:
                stream.close()
                raise


async def _traced_aiter(
    graphs: Graphs, wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any
) -> AsyncIterator[Any]:
    with _TracedStream(graphs, wrapped, instance, args, kwargs) as stream:
        while (chunk := await stream.astep()) is not _END:
            stream.record(chunk)
            try:
                yield chunk
            except GeneratorExit:
                await stream.aclose()
                raise
