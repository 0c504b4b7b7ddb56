"""Wrapper factories for :class:`spanpoint.instrumentor.SpanpointInstrumentor`.

Each factory returns a ``traced(wrapped, instance, args, kwargs)`` function for
``wrapt.wrap_function_wrapper``. The instrumentor decides *what* is patched; this module
decides what a patched call records:

- ``Pregel.invoke`` / ``ainvoke``: one graph-call span (``invoke_agent {name}`` or
  ``invoke_workflow {name}``). Inside ``spanpoint.run`` with the ``graph_call`` strategy the
  *outermost* graph call is a durable boundary; nested graph calls (subgraphs, a node calling
  another graph) are spans only — LangGraph's checkpointer already owns their progress, and a
  second memo could replay a subgraph's output without its checkpoints (docs/compatibility.md).
- ``Pregel.stream`` / ``astream``: a graph-call span that stays open while the caller iterates;
  each chunk is a bounded span event; never a boundary. ``invoke`` runs ``stream`` internally:
  that inner call is not traced twice.
- ``BaseChatModel.invoke`` / ``ainvoke`` and ``BaseTool.invoke`` / ``ainvoke``: ``chat`` and
  ``execute_tool`` spans for calls made inside hand-built graphs, never boundaries; skipped
  when spanpoint already traces that very call (the middleware's span is current).

The OpenTelemetry context is attached only *around* each step of a stream, never across a
``yield``, so a consumer that stops early or iterates from another task cannot detach a
context it does not own.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from spanpoint import semconv
from spanpoint._spans import (
    aspan_call,
    describe_graph_output,
    fail_span,
    mark_paused,
    paused_event,
    span_call,
    start_span,
)
from spanpoint.boundary import BoundarySpec
from spanpoint.config import settings
from spanpoint.run import current_run

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]

STRATEGIES = ("graph_call", "calls")


@dataclass(frozen=True, slots=True)
class PatchOptions:
    """What the patched calls do; fixed when the instrumentor is applied.

    Args:
        strategy: ``graph_call`` makes the outermost graph call inside a run a boundary;
            ``calls`` leaves boundaries to the middleware (graph calls are spans only).
    """

    strategy: str = "graph_call"


# The graph call running in this context (its span), so that nested calls know their parent
# and ``invoke``'s own internal ``stream`` is recognised.
_ACTIVE: ContextVar[_GraphCall | None] = ContextVar("spanpoint_graph_call", default=None)


class _GraphCall:
    """A traced graph call: its graph, its span, whether its internal stream was claimed."""

    __slots__ = ("graph", "inner_stream_pending", "span")

    def __init__(self, graph: Any, inner_stream_pending: bool) -> None:
        self.graph = graph
        self.inner_stream_pending = inner_stream_pending
        self.span: trace.Span | None = None


# --- graph-call attributes -----------------------------------------------------------------


def _config_of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    config = kwargs.get("config")
    if config is None and len(args) > 1:
        config = args[1]
    return config


_INFO: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def graph_info(graph: Any, strategy: str) -> Any:
    """``GraphRunner``'s view of ``graph`` (agent or workflow, checkpointer), once per graph."""
    info = _INFO.get(graph)
    if info is None:
        from spanpoint.graph import DurabilityPolicy
        from spanpoint.graph_info import inspect_graph

        # Zero-code spans carry no durability warnings: nobody chose this graph's checkpointer
        # for spanpoint, and a warning per call would only be noise.
        info = inspect_graph(graph, strategy, DurabilityPolicy(warn_in_process=False), None)
        with contextlib.suppress(TypeError):  # an unhashable graph is inspected every call
            _INFO[graph] = info
    return info


def graph_call_spec(
    graph: Any, config: Any, options: PatchOptions, *, nested: bool, durable: bool
) -> BoundarySpec:
    """The span (and, when ``durable``, boundary) description of one graph call.

    The attributes are ``GraphRunner``'s (:func:`spanpoint.graph_call.graph_call_attributes`);
    a nested call adds its LangGraph namespace and does not capture the config, which LangGraph
    filled with its own internals.
    """
    from spanpoint.graph_call import graph_call_attributes

    name = str(getattr(graph, "name", None) or type(graph).__name__)
    info = graph_info(graph, options.strategy)
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if nested and not configurable:
        from langchain_core.runnables.config import var_child_runnable_config

        parent = var_child_runnable_config.get()
        configurable = parent.get("configurable") if parent else None
    thread_id = configurable.get("thread_id") if configurable else None
    attrs = graph_call_attributes(
        info,
        name,
        options.strategy,
        settings().capture,
        thread_id=None if thread_id is None else str(thread_id),
        configurable=None if nested else configurable,
    )
    if nested and configurable and configurable.get("checkpoint_ns"):
        attrs[semconv.LANGGRAPH_CHECKPOINT_NS] = str(configurable["checkpoint_ns"])
    return BoundarySpec(
        kind=semconv.KIND_GRAPH_CALL,
        name=name,
        span_name=f"{info.span_name} {name}",
        attributes=attrs,
        replay=durable,
        describe=lambda output: describe_graph_output(output, thread_id),
    )


def _identity(args: tuple[Any, ...], kwargs: Mapping[str, Any], config: Any) -> Any:
    configurable = config.get("configurable", {}) if isinstance(config, Mapping) else {}
    return {
        "input": args[0] if args else kwargs.get("input"),
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns"),
    }


def _adopted_span(parent: _GraphCall | None) -> trace.Span | None:
    """The current span when it is a spanpoint graph-call span no patched call owns.

    ``GraphRunner`` opens its own graph-call span and then calls ``graph.invoke``: that call
    must not get a second span (nor a second boundary). A span opened by a patched call
    (``parent``) is owned: a graph called under it is a nested call with its own span.
    """
    span = trace.get_current_span()
    attrs = getattr(span, "attributes", None)
    if not attrs or attrs.get(semconv.BOUNDARY_KIND) != semconv.KIND_GRAPH_CALL:
        return None
    if parent is not None and parent.span is span:
        return None
    return span


def _durable(options: PatchOptions, nested: bool) -> bool:
    if nested or options.strategy != "graph_call":
        return False
    return current_run() is not None


# --- invoke / ainvoke ------------------------------------------------------------------------


def _invoke_spec(
    options: PatchOptions, instance: Any, args: Any, kwargs: Any, *, nested: bool
) -> BoundarySpec:
    config = _config_of(args, kwargs)
    spec = graph_call_spec(
        instance, config, options, nested=nested, durable=_durable(options, nested)
    )
    if spec.replay:
        spec.identity = _identity(args, kwargs, config)
    return spec


def _owning(graph_call: _GraphCall, wrapped: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapped``, noting the span current when it runs (the graph call's own span)."""

    def body(*args: Any, **kwargs: Any) -> Any:
        graph_call.span = trace.get_current_span()
        output = wrapped(*args, **kwargs)
        mark_paused(output)
        return output

    return body


def _aowning(graph_call: _GraphCall, wrapped: Callable[..., Any]) -> Callable[..., Any]:
    """The async form of :func:`_owning`."""

    async def body(*args: Any, **kwargs: Any) -> Any:
        graph_call.span = trace.get_current_span()
        output = await wrapped(*args, **kwargs)
        mark_paused(output)
        return output

    return body


def graph_invoke(options: PatchOptions) -> Wrapper:
    """``Pregel.invoke``: a graph-call span, the outermost one a boundary inside a run."""

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        parent = _ACTIVE.get()
        graph_call = _GraphCall(instance, inner_stream_pending=True)
        token = _ACTIVE.set(graph_call)
        try:
            adopted = _adopted_span(parent)
            if adopted is not None:
                graph_call.span = adopted
                return wrapped(*args, **kwargs)
            spec = _invoke_spec(options, instance, args, kwargs, nested=parent is not None)
            return span_call(spec, _owning(graph_call, wrapped), *args, **kwargs)
        finally:
            _ACTIVE.reset(token)

    return traced


def graph_ainvoke(options: PatchOptions) -> Wrapper:
    """``Pregel.ainvoke``: the async form of :func:`graph_invoke`."""

    async def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        parent = _ACTIVE.get()
        graph_call = _GraphCall(instance, inner_stream_pending=True)
        token = _ACTIVE.set(graph_call)
        try:
            adopted = _adopted_span(parent)
            if adopted is not None:
                graph_call.span = adopted
                return await wrapped(*args, **kwargs)
            spec = _invoke_spec(options, instance, args, kwargs, nested=parent is not None)
            return await aspan_call(spec, _aowning(graph_call, wrapped), *args, **kwargs)
        finally:
            _ACTIVE.reset(token)

    return traced


# --- stream / astream ------------------------------------------------------------------------


def _claim_inner_stream(instance: Any) -> bool:
    """Whether this stream call is ``invoke``'s own (already traced by the invoke span)."""
    active = _ACTIVE.get()
    if active is not None and active.graph is instance and active.inner_stream_pending:
        active.inner_stream_pending = False
        return True
    return False


def _open_stream_span(
    options: PatchOptions, instance: Any, args: Any, kwargs: Any
) -> tuple[trace.Span, Any]:
    from spanpoint.events import StreamRecorder

    config = _config_of(args, kwargs)
    nested = _ACTIVE.get() is not None
    spec = graph_call_spec(instance, config, options, nested=nested, durable=False)
    spec.attributes[semconv.STRATEGY] = "stream"
    span = start_span(spec)
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
        paused_event(span, [str(getattr(i, "id", "")) for i in interrupts])
    if exc is not None:
        fail_span(span, exc)
        return
    if span.is_recording():
        span.set_status(Status(StatusCode.OK))
    span.end()


def graph_stream(options: PatchOptions) -> Wrapper:
    """``Pregel.stream``: a graph-call span open while the caller iterates; chunks as events."""

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if _claim_inner_stream(instance):
            return wrapped(*args, **kwargs)
        return _traced_iter(options, wrapped, instance, args, kwargs)

    return traced


def _stream_scope(
    options: PatchOptions, instance: Any, args: Any, kwargs: Any
) -> tuple[trace.Span, Any, Any, _GraphCall]:
    """The span a stream runs under (adopted from an enclosing graph call, else its own), its
    chunk recorder (None when adopted), the context to attach, and the graph call to mark."""
    adopted = _adopted_span(_ACTIVE.get())
    span, recorder = (
        (adopted, None) if adopted else _open_stream_span(options, instance, args, kwargs)
    )
    graph_call = _GraphCall(instance, inner_stream_pending=False)
    graph_call.span = span
    return span, recorder, trace.set_span_in_context(span), graph_call


def _traced_iter(
    options: PatchOptions, wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any
) -> Iterator[Any]:
    span, recorder, ctx, graph_call = _stream_scope(options, instance, args, kwargs)
    graph_call_token = None
    error: BaseException | None = None
    inner = None
    try:
        while True:
            token = otel_context.attach(ctx)
            graph_call_token = _ACTIVE.set(graph_call)
            try:
                if inner is None:
                    inner = wrapped(*args, **kwargs)
                chunk = next(inner)
            except StopIteration:
                return
            finally:
                _ACTIVE.reset(graph_call_token)
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


def graph_astream(options: PatchOptions) -> Wrapper:
    """``Pregel.astream``: the async form of :func:`graph_stream`."""

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if _claim_inner_stream(instance):
            return wrapped(*args, **kwargs)
        return _traced_aiter(options, wrapped, instance, args, kwargs)

    return traced


async def _traced_aiter(
    options: PatchOptions, wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any
) -> AsyncIterator[Any]:
    span, recorder, ctx, graph_call = _stream_scope(options, instance, args, kwargs)
    error: BaseException | None = None
    inner = None
    try:
        while True:
            token = otel_context.attach(ctx)
            graph_call_token = _ACTIVE.set(graph_call)
            try:
                if inner is None:
                    inner = wrapped(*args, **kwargs)
                chunk = await inner.__anext__()
            except StopAsyncIteration:
                return
            finally:
                _ACTIVE.reset(graph_call_token)
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
