"""Wrapper factories for :class:`spanpoint.instrumentation.SpanpointInstrumentor`.

Each factory returns a ``traced(wrapped, instance, args, kwargs)`` function for
``wrapt.wrap_function_wrapper``. The instrumentor decides *what* is patched; this module
decides what a patched call records:

- ``Pregel.invoke`` / ``ainvoke``: one graph-call span (``invoke_agent {name}`` or
  ``invoke_workflow {name}``). Inside ``spanpoint.run`` with the ``graph_call`` strategy the
  *outermost* graph call is a durable boundary; nested graph calls (subgraphs, a node calling
  another graph) are spans only — LangGraph's checkpointer already owns their progress, and a
  second memo could replay a subgraph's output without its checkpoints (docs/compatibility.md).
- ``Pregel.stream`` / ``astream`` (:mod:`spanpoint.instrumentation.pregel_stream`): a
  graph-call span that stays open while the caller iterates. ``invoke`` runs ``stream``
  internally: that inner call is not traced twice.

Model and tool calls are not patched here: the instrumentor installs the seams of
:mod:`spanpoint.calls.seams` for their ``chat`` and ``execute_tool`` spans.

Every graph call goes through these wrappers and a zero-code span may cost only a few per
cent of a small graph's call, so a call that is not a boundary takes a short path: the graph's
attributes are cached, the span is started and made current directly.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from spanpoint import semconv
from spanpoint.boundary import BoundarySpec, aspan_call, span_call
from spanpoint.config import settings
from spanpoint.instrumentation.graph_spans import (
    describe_graph_output,
    end_graph_span,
    mark_paused,
)
from spanpoint.run import current_run
from spanpoint.spans import fail_span

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
ACTIVE: ContextVar[ActiveGraphCall | None] = ContextVar("spanpoint_graph_call", default=None)


class ActiveGraphCall:
    """A traced graph call: its graph, its span, whether its internal stream was claimed."""

    __slots__ = ("graph", "inner_stream_pending", "span")

    def __init__(self, graph: Any, inner_stream_pending: bool) -> None:
        self.graph = graph
        self.inner_stream_pending = inner_stream_pending
        self.span: trace.Span | None = None


# --- graph-call attributes -----------------------------------------------------------------


class On:
    """The switch of a wrapper that is always live (tests and direct use of the factories)."""

    active = True


class GraphMeta:
    """What every call span of one graph shares, built on its first call.

    A zero-code call must add as little as possible to ``graph.invoke`` (a few per cent of a
    small graph's call): the name, the span name and the attributes of a call without config are
    invariant per graph, so they are computed once. The entry is rebuilt when the graph is
    renamed or given another checkpointer, or spanpoint is configured again (new tracer, new
    capture policy).
    """

    __slots__ = (
        "attrs",
        "checkpointer",
        "info",
        "name",
        "raw_name",
        "settings",
        "span_name",
        "strategy",
        "tracer",
    )

    def __init__(self, graph: Any, raw_name: Any, current: Any, strategy: str) -> None:
        # For import time: the graph inspection loads LangGraph's checkpointers, paid by the
        # first call of each graph, not by importing the instrumentation.
        from spanpoint.graph.inspect import graph_call_attributes, inspect_graph
        from spanpoint.graph.types import DurabilityPolicy

        self.raw_name = raw_name
        self.checkpointer = getattr(graph, "checkpointer", None)
        self.strategy = strategy
        self.settings = current
        self.tracer = current.tracer
        self.name = name = str(raw_name or type(graph).__name__)
        # Zero-code spans carry no durability warnings: nobody chose this graph's checkpointer
        # for spanpoint, and a warning per call would only be noise.
        policy = DurabilityPolicy(warn_in_process=False)
        self.info = info = inspect_graph(graph, strategy, policy, None)
        self.span_name = f"{info.span_name} {name}"
        self.attrs = graph_call_attributes(
            info, name, strategy, current.capture, thread_id=None, configurable=None
        )
        self.attrs[semconv.BOUNDARY_KIND] = semconv.KIND_GRAPH_CALL
        self.attrs[semconv.BOUNDARY_NAME] = name


class Graphs:
    """The :class:`GraphMeta` of each graph, for one set of :class:`PatchOptions`."""

    __slots__ = ("cache", "options")

    def __init__(self, options: PatchOptions) -> None:
        self.options = options
        self.cache: weakref.WeakKeyDictionary[Any, GraphMeta] = weakref.WeakKeyDictionary()

    def meta(self, graph: Any) -> GraphMeta:
        raw_name = getattr(graph, "name", None)
        current = settings()
        try:
            meta = self.cache.get(graph)
        except TypeError:  # a graph that cannot be weakly referenced is described every call
            return GraphMeta(graph, raw_name, current, self.options.strategy)
        if (
            meta is None
            or meta.raw_name is not raw_name
            or meta.settings is not current
            or meta.checkpointer is not getattr(graph, "checkpointer", None)
        ):
            meta = self.cache[graph] = GraphMeta(graph, raw_name, current, self.options.strategy)
        return meta


def config_of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    config = kwargs.get("config")
    if config is None and len(args) > 1:
        config = args[1]
    return config


def call_attributes(meta: GraphMeta, config: Any, *, nested: bool) -> tuple[dict[str, Any], Any]:
    """The attributes of one call (and its thread id): the graph's, plus what its config adds.

    A call without config (the common ``graph.invoke(input)``) shares the graph's attributes;
    a nested call adds its LangGraph namespace and does not capture the config, which
    LangGraph filled with its own internals.
    """
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if nested and not configurable:
        from langchain_core.runnables.config import var_child_runnable_config

        parent = var_child_runnable_config.get()
        configurable = parent.get("configurable") if parent else None
    if not configurable:
        return meta.attrs, None
    from spanpoint.graph.inspect import graph_call_attributes  # for import time (see GraphMeta)

    thread_id = configurable.get("thread_id")
    if thread_id is None and nested:
        # A sub-agent invoked with a config of its own (Deep Agents' ``task`` passes only
        # ``ls_agent_type``) still runs in its parent's conversation.
        from langchain_core.runnables.config import var_child_runnable_config

        parent = var_child_runnable_config.get()
        thread_id = ((parent or {}).get("configurable") or {}).get("thread_id")
    attrs = graph_call_attributes(
        meta.info,
        meta.name,
        meta.strategy,
        meta.settings.capture,
        thread_id=None if thread_id is None else str(thread_id),
        configurable=None if nested else configurable,
    )
    if nested and configurable.get("checkpoint_ns"):
        attrs[semconv.LANGGRAPH_CHECKPOINT_NS] = str(configurable["checkpoint_ns"])
    attrs[semconv.BOUNDARY_KIND] = semconv.KIND_GRAPH_CALL
    attrs[semconv.BOUNDARY_NAME] = meta.name
    return attrs, thread_id


def _meta_spec(meta: GraphMeta, config: Any, *, nested: bool, durable: bool) -> BoundarySpec:
    """The span (and, when ``durable``, boundary) description of one graph call."""
    attrs, thread_id = call_attributes(meta, config, nested=nested)
    return BoundarySpec(
        kind=semconv.KIND_GRAPH_CALL,
        name=meta.name,
        span_name=meta.span_name,
        attributes=dict(attrs),
        replay=durable,
        describe=lambda output: describe_graph_output(output, thread_id),
    )


def _identity(
    graph: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], config: Any, *, durable: bool
) -> dict[str, Any]:
    """A graph call's identity by the rule ``GraphRunner`` keys by (spanpoint.graph.identity):
    its input, thread, context, configurable values and keyword arguments."""
    from spanpoint.graph.identity import graph_call_identity  # for import time: first call

    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    configurable = configurable if isinstance(configurable, Mapping) else {}
    rest = {k: v for k, v in kwargs.items() if k not in ("input", "config")}
    return graph_call_identity(
        graph,
        args[0] if args else kwargs.get("input"),
        thread_id=configurable.get("thread_id"),
        checkpoint_ns=configurable.get("checkpoint_ns"),
        context=None,
        configurable=configurable,
        kwargs=rest,
        durable=durable,
        config=config if isinstance(config, Mapping) else None,
    )


def adopted_span(
    parent: ActiveGraphCall | None, ctx: Any = None, graph: Any = None
) -> trace.Span | None:
    """The span current in ``ctx`` (default: the current context) when it is a spanpoint
    graph-call span no patched call owns.

    ``GraphRunner`` opens its own graph-call span and then calls ``graph.invoke``: that call
    must not get a second span (nor a second boundary). A span opened by a patched call
    (``parent``) is owned: a graph called under it is a nested call with its own span.
    Under ``strategy="calls"`` the runner's span is no boundary: the runner's own call of
    ``graph`` is recognised by the runner's scope (``spanpoint.graph.nested``).
    """
    span = trace.get_current_span(ctx)
    attrs = getattr(span, "attributes", None)
    if not attrs or attrs.get(semconv.BOUNDARY_KIND) != semconv.KIND_GRAPH_CALL:
        # Not loaded: no GraphRunner has run in this process, so none is running now.
        nested = sys.modules.get("spanpoint.graph.nested")
        if parent is None and graph is not None and nested is not None and nested.own_call(graph):
            return span
        return None
    if parent is not None and parent.span is span:
        return None
    return span


def _durable(options: PatchOptions, parent: ActiveGraphCall | None) -> bool:
    """Whether a call is a boundary: the outermost graph call inside a run (graph_call)."""
    return parent is None and options.strategy == "graph_call" and current_run() is not None


# --- invoke / ainvoke ------------------------------------------------------------------------


def _durable_spec(meta: GraphMeta, graph: Any, args: Any, kwargs: Any) -> BoundarySpec:
    config = config_of(args, kwargs)
    spec = _meta_spec(meta, config, nested=False, durable=True)
    spec.identity = _identity(graph, args, kwargs, config, durable=True)
    capture = settings().capture
    if capture.content_on_spans:  # what went in and came out, where viewers read it
        # For import time: the GenAI attributes load langchain.agents, paid with capture on.
        from spanpoint.calls.attributes import graph_input_attributes, graph_output_attributes

        spec.attributes.update(graph_input_attributes(spec.identity["input"], capture))
        describe = spec.describe
        assert describe is not None
        spec.describe = lambda output: {
            **describe(output),
            **graph_output_attributes(output, capture),
        }
    return spec


def _rerun_target(
    meta: GraphMeta, graph: Any, options: PatchOptions, args: Any, kwargs: Any
) -> tuple[Any, str | None] | None:
    """(run, key) of an outermost graph call inside a run, which a rerun may continue
    (spanpoint.graph.rerun); None outside a run. The key is None under ``graph_call``: the
    boundary's own, read inside it."""
    scope = current_run()
    if scope is None:
        return None
    if options.strategy == "graph_call":
        return scope, None
    from spanpoint.graph import rerun  # for import time: loaded by the first call in a run

    identity = _identity(graph, args, kwargs, config_of(args, kwargs), durable=False)
    return scope, rerun.identity_key(scope, meta.name, identity)


def _boundary_key(scope: Any, key: str | None) -> str:
    if key is not None:
        return key
    from spanpoint.graph.identity import keyed_frame_identity  # for import time (see _identity)

    return keyed_frame_identity(scope)  # the graph call's boundary frame


def _rerunning(
    wrapped: Callable[..., Any],
    graph: Any,
    meta: GraphMeta,
    parent: ActiveGraphCall | None,
    options: PatchOptions,
    args: Any,
    kwargs: Any,
    *,
    asynchronous: bool = False,
) -> Callable[..., Any]:
    """``wrapped``, or for an outermost call on a thread with a checkpointer, ``wrapped`` with
    the call's span in its checkpoints' metadata and a resume described on the span
    (``spanpoint.graph.resume``), inside a run through
    ``spanpoint.graph.rerun.invoke_rerunning``. ``asynchronous``: ``wrapped`` is
    ``Pregel.ainvoke``, and so is what this returns."""
    if parent is not None:
        return wrapped
    target = _rerun_target(meta, graph, options, args, kwargs) if meta.info.has_state else None
    noting = _anoting if asynchronous else _noting
    if target is None and not meta.info.has_state:
        scope = current_run()
        return wrapped if scope is None else noting(wrapped, scope)
    body = (_arerun_body if asynchronous else _rerun_body)(wrapped, graph, target)
    return body if target is None else noting(body, target[0])


def _rerun_body(wrapped: Callable[..., Any], graph: Any, target: Any) -> Any:
    # For import time: loaded by the first call of a graph with a checkpointer.
    from spanpoint.graph import rerun, resume

    def body(*a: Any, **kw: Any) -> Any:
        graph_input, config, rest = rerun.split_invoke_args(a, kw)
        config = resume.traced_call_config(graph, graph_input, config, stamp=False)
        thread = _PAUSES.before(graph_input, config)
        key = _boundary_key(target[0], target[1]) if target is not None else ""
        if not key:
            output = wrapped(graph_input, config, **rest)
        else:
            args = (graph_input, config)
            output = rerun.invoke_rerunning(wrapped, graph, args, rest, target[0], key)
        _PAUSES.after(thread, output)
        return output

    return body


def _arerun_body(wrapped: Callable[..., Any], graph: Any, target: Any) -> Any:
    from spanpoint.graph import rerun, resume  # for import time (see _rerun_body)

    async def body(*a: Any, **kw: Any) -> Any:
        graph_input, config, rest = rerun.split_invoke_args(a, kw)
        config = await resume.atraced_call_config(graph, graph_input, config, stamp=False)
        thread = _PAUSES.before(graph_input, config)
        key = _boundary_key(target[0], target[1]) if target is not None else ""
        if not key:
            output = await wrapped(graph_input, config, **rest)
        else:
            args = (graph_input, config)
            output = await rerun.ainvoke_rerunning(wrapped, graph, args, rest, target[0], key)
        _PAUSES.after(thread, output)
        return output

    return body


class _Pauses:
    """The span of each thread's last pause, in this process: a zero-code resume links to it.

    Kept here rather than in LangGraph's checkpoint metadata, which the instrumentor leaves
    exactly as LangGraph writes it (docs/compatibility.md). Bounded: the oldest threads are
    forgotten first; a thread's pause is forgotten by its next call.
    """

    _LIMIT = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._links: OrderedDict[tuple[Any, Any], Any] = OrderedDict()

    def before(self, graph_input: Any, config: Mapping[str, Any]) -> tuple[Any, Any] | None:
        """Link a resume to its thread's paused span; returns the thread's key (or None)."""
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            return None
        thread = (thread_id, configurable.get("checkpoint_ns") or "")
        with self._lock:
            link = self._links.pop(thread, None)
        from langgraph.types import Command  # for import time: loaded with the graph modules

        from spanpoint.graph.resume import link_to_pause  # for import time (see _rerun_body)

        if link is not None and isinstance(graph_input, Command) and graph_input.resume is not None:
            link_to_pause(trace.get_current_span(), link)
        return thread

    def after(self, thread: tuple[Any, Any] | None, output: Any) -> None:
        """Remember the current span when the call paused at an interrupt."""
        if thread is None or not (isinstance(output, Mapping) and output.get("__interrupt__")):
            return
        from spanpoint.graph.resume import paused_link, traceparent  # for import time

        link = paused_link(traceparent(trace.get_current_span()))
        if link is None:
            return
        with self._lock:
            self._links[thread] = link
            while len(self._links) > self._LIMIT:
                self._links.popitem(last=False)


_PAUSES = _Pauses()


def _note(scope: Any, output: Any) -> None:
    """The run's status after its outermost graph call: ``stopped`` when the guard stopped
    it, as GraphRunner's result says."""
    from spanpoint.graph.results import guard_stopped, note_run_status  # for import time

    note_run_status(scope, "stopped" if guard_stopped(output) else "completed")


def _noting(wrapped: Callable[..., Any], scope: Any) -> Callable[..., Any]:
    def body(*a: Any, **kw: Any) -> Any:
        output = wrapped(*a, **kw)
        _note(scope, output)
        return output

    return body


def _anoting(wrapped: Callable[..., Any], scope: Any) -> Callable[..., Any]:
    async def body(*a: Any, **kw: Any) -> Any:
        output = await wrapped(*a, **kw)
        _note(scope, output)
        return output

    return body


def _owning(graph_call: ActiveGraphCall, wrapped: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapped``, noting the span current when it runs (the graph call's own span)."""

    def body(*args: Any, **kwargs: Any) -> Any:
        graph_call.span = trace.get_current_span()
        output = wrapped(*args, **kwargs)
        mark_paused(output)
        return output

    return body


def _aowning(graph_call: ActiveGraphCall, wrapped: Callable[..., Any]) -> Callable[..., Any]:
    """The async form of :func:`_owning`."""

    async def body(*args: Any, **kwargs: Any) -> Any:
        graph_call.span = trace.get_current_span()
        output = await wrapped(*args, **kwargs)
        mark_paused(output)
        return output

    return body


class _CallSpan:
    """The span of a call that is not a boundary, current while the block runs: ended as
    failed by an exception, else by :meth:`end` with the call's output.

    This is the zero-code hot path, so it starts the span directly (no ``BoundarySpec``, no
    context-manager generator) from the graph's cached attributes, in ``ctx`` (the current
    context, read once rather than by every step of the SDK's span start).
    """

    __slots__ = ("_attached", "span", "thread_id")

    def __init__(
        self,
        meta: GraphMeta,
        graph_call: ActiveGraphCall,
        ctx: Any,
        args: Any,
        kwargs: Any,
        *,
        nested: bool,
    ) -> None:
        config = kwargs.get("config")
        if config is None and len(args) > 1:
            config = args[1]
        if config is None and not nested:  # ``graph.invoke(input)``: the graph's own attributes
            attrs, self.thread_id = meta.attrs, None
        else:
            attrs, self.thread_id = call_attributes(meta, config, nested=nested)
        self.span = span = meta.tracer.start_span(meta.span_name, ctx, attributes=attrs)
        graph_call.span = span
        self._attached = otel_context.attach(trace.set_span_in_context(span, ctx))

    def __enter__(self) -> _CallSpan:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is not None:
                fail_span(self.span, exc)
        finally:
            otel_context.detach(self._attached)

    def end(self, output: Any, args: Any, kwargs: Any) -> Any:
        """End the span of a call that returned ``output``; return it."""
        end_graph_span(self.span, output, self.thread_id, args, kwargs)
        return output


def _entered(instance: Any) -> tuple[ActiveGraphCall | None, ActiveGraphCall, Any]:
    """The enclosing patched graph call, this call of ``instance``, and the token that made
    this one active (reset it when the call ends)."""
    parent = ACTIVE.get()
    graph_call = ActiveGraphCall(instance, inner_stream_pending=True)
    return parent, graph_call, ACTIVE.set(graph_call)


def _adopts(parent: ActiveGraphCall | None, graph_call: ActiveGraphCall, ctx: Any) -> bool:
    """Whether the call runs under a span it adopts (:func:`adopted_span`), noted as its own."""
    adopted = adopted_span(parent, ctx, graph_call.graph)
    if adopted is None:
        return False
    graph_call.span = adopted
    return True


def _durable_call(
    meta: GraphMeta, graph_call: ActiveGraphCall, body: Callable[..., Any], args: Any, kwargs: Any
) -> Any:
    """The call as a boundary of the current run (executed or replayed)."""
    spec = _durable_spec(meta, graph_call.graph, args, kwargs)
    output = span_call(spec, _owning(graph_call, body), *args, **kwargs)
    _note(current_run(), output)  # replayed too: a stopped run stays stopped
    return output


async def _adurable_call(
    meta: GraphMeta, graph_call: ActiveGraphCall, body: Callable[..., Any], args: Any, kwargs: Any
) -> Any:
    """The async form of :func:`_durable_call`."""
    spec = _durable_spec(meta, graph_call.graph, args, kwargs)
    output = await aspan_call(spec, _aowning(graph_call, body), *args, **kwargs)
    _note(current_run(), output)  # replayed too: a stopped run stays stopped
    return output


def graph_invoke(options: PatchOptions, switch: Any = On) -> Wrapper:
    """``Pregel.invoke``: a graph-call span, the outermost one a boundary inside a run.

    ``switch.active`` false (the instrumentor was uninstrumented) makes it a pass-through.
    """
    graphs = Graphs(options)

    def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if not switch.active:
            return wrapped(*args, **kwargs)
        parent, graph_call, token = _entered(instance)
        try:
            ctx = otel_context.get_current()
            if _adopts(parent, graph_call, ctx):
                return wrapped(*args, **kwargs)
            meta = graphs.meta(instance)
            body = _rerunning(wrapped, instance, meta, parent, options, args, kwargs)
            if _durable(options, parent):
                return _durable_call(meta, graph_call, body, args, kwargs)
            nested = parent is not None
            with _CallSpan(meta, graph_call, ctx, args, kwargs, nested=nested) as call_span:
                output = body(*args, **kwargs)
            return call_span.end(output, args, kwargs)
        finally:
            ACTIVE.reset(token)

    return traced


def graph_ainvoke(options: PatchOptions, switch: Any = On) -> Wrapper:
    """``Pregel.ainvoke``: the async form of :func:`graph_invoke`."""
    graphs = Graphs(options)

    async def traced(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if not switch.active:
            return await wrapped(*args, **kwargs)
        parent, graph_call, token = _entered(instance)
        try:
            ctx = otel_context.get_current()
            if _adopts(parent, graph_call, ctx):
                return await wrapped(*args, **kwargs)
            meta = graphs.meta(instance)
            body = _rerunning(
                wrapped, instance, meta, parent, options, args, kwargs, asynchronous=True
            )
            if _durable(options, parent):
                return await _adurable_call(meta, graph_call, body, args, kwargs)
            nested = parent is not None
            with _CallSpan(meta, graph_call, ctx, args, kwargs, nested=nested) as call_span:
                output = await body(*args, **kwargs)
            return call_span.end(output, args, kwargs)
        finally:
            ACTIVE.reset(token)

    return traced
