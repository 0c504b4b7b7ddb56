"""Nested graph calls under ``GraphRunner``: the spans of sub-agents and sub-graphs.

A graph called inside a task of the runner's graph (Deep Agents' ``task`` tool running its
``general-purpose`` sub-agent, a supervisor's members, swarm agents, a compiled graph added
as a node) gets an ``invoke_agent {name}`` / ``invoke_workflow {name}`` span under the span
current where it is called (``execute_tool task`` for a sub-agent), with the conversation of
the thread it runs in (``gen_ai.conversation.id``): the span the zero-code instrumentor gives
it, with no instrumentor.

A nested call is a span, never a boundary: LangGraph's checkpointer owns a subgraph's
progress, and its model and tool calls are boundaries of their own (``spanpoint.calls.seams``).

``Pregel.invoke`` / ``ainvoke`` are patched once, by the first runner call, and a patched
call does anything only inside a runner call of its own context (:data:`CURRENT`), from a
LangGraph task of it: the runner's own ``graph.invoke`` runs where the runner was called,
outside any of its tasks. Elsewhere it calls what it replaced.

:func:`runner_call` is the whole scope of a runner call, set in its context only (never
per call on a class): this module's :data:`CURRENT`, the model and tool seams
(``spanpoint.calls.seams``) and the positions of a subgraph's tasks (``spanpoint.calls.tasks``).
With the zero-code instrumentor on, its patches trace nested calls: it :func:`claim`\\ s them
and this module steps aside, so a graph call never gets two spans. The instrumentor asks
:func:`own_call` to adopt the runner's span for the runner's own call, whatever its strategy.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config
from opentelemetry import trace

from spanpoint import semconv, spans
from spanpoint._patches import PatchSet
from spanpoint.calls import official, seams, tasks
from spanpoint.capture import exception_text
from spanpoint.config import settings
from spanpoint.graph import approvals
from spanpoint.graph.inspect import GraphInfo, graph_call_attributes, inspect_graph
from spanpoint.graph.results import build_result, output_interrupts, result_attributes
from spanpoint.graph.types import DurabilityPolicy


class RunnerCall:
    """One ``GraphRunner`` call in flight: its graph, its strategy, and the LangGraph config
    current where it was called (a call made under that same config is the runner's own)."""

    __slots__ = ("graph", "outer", "strategy")

    def __init__(self, graph: Any, strategy: str) -> None:
        self.graph = graph
        self.strategy = strategy
        self.outer = var_child_runnable_config.get()


#: The runner call of this context (None outside any).
CURRENT: ContextVar[RunnerCall | None] = ContextVar("spanpoint_runner_call", default=None)


def own_call(graph: Any) -> bool:
    """Whether a call of ``graph`` made here is a runner's own graph call (not a nested one):
    the zero-code instrumentor then adopts the runner's span rather than opening a second."""
    call = CURRENT.get()
    if call is None or call.graph is not graph:
        return False
    return var_child_runnable_config.get() is call.outer


def _enter(call: RunnerCall) -> tuple[Any, ...]:
    """Open a runner call's scope in this context; the tokens :func:`_exit` takes."""
    PATCHES.apply()
    return CURRENT.set(call), seams.PATCHES.enable(), tasks.POSITION_PATCHES.enable()


def _exit(tokens: tuple[Any, ...]) -> None:
    current, seams_on, positions_on = tokens
    tasks.POSITION_PATCHES.disable(positions_on)
    seams.PATCHES.disable(seams_on)
    CURRENT.reset(current)


@contextmanager
def runner_call(graph: Any, strategy: str) -> Iterator[None]:
    """The scope of one runner call: nested graph calls made inside it get their spans,
    model and tool calls meet the seams, subgraphs learn their callers' positions."""
    tokens = _enter(RunnerCall(graph, strategy))
    try:
        yield
    finally:
        _exit(tokens)


def scoped_stream(graph: Any, strategy: str, chunks: Iterator[Any]) -> Iterator[Any]:
    """``chunks`` (a runner's stream), with each step computed inside the runner call's
    scope: never across a ``yield``, so a consumer holding a chunk is outside it."""
    stream = _Scoped(graph, strategy, chunks)  # on the first step: where the caller iterates
    while (chunk := stream.step()) is not _END:
        try:
            yield chunk
        except GeneratorExit:
            stream.close()  # the runner's stream ends its span as closed early
            raise


async def ascoped_stream(
    graph: Any, strategy: str, chunks: AsyncIterator[Any]
) -> AsyncIterator[Any]:
    """The async form of :func:`scoped_stream`."""
    stream = _Scoped(graph, strategy, chunks)
    while (chunk := await stream.astep()) is not _END:
        try:
            yield chunk
        except GeneratorExit:
            await stream.aclose()
            raise


#: The end of a stream (``next(chunks, _END)``).
_END: Any = object()


class _Scoped:
    """A runner's stream and its runner call: each step inside the call's scope."""

    __slots__ = ("call", "chunks")

    def __init__(self, graph: Any, strategy: str, chunks: Any) -> None:
        self.call = RunnerCall(graph, strategy)
        self.chunks = chunks

    def step(self) -> Any:
        tokens = _enter(self.call)
        try:
            return next(self.chunks, _END)
        finally:
            _exit(tokens)

    async def astep(self) -> Any:
        tokens = _enter(self.call)
        try:
            return await anext(self.chunks, _END)
        finally:
            _exit(tokens)

    def close(self) -> None:
        close = getattr(self.chunks, "close", None)
        if callable(close):
            tokens = _enter(self.call)  # the stream's last step: ends its span
            try:
                close()
            finally:
                _exit(tokens)

    async def aclose(self) -> None:
        close = getattr(self.chunks, "aclose", None)
        if callable(close):
            tokens = _enter(self.call)
            try:
                await close()
            finally:
                _exit(tokens)


# --- who traces nested calls ---------------------------------------------------------------

_LOCK = threading.Lock()
#: Holders that trace nested graph calls themselves (the zero-code instrumentor).
_CLAIMS: set[object] = set()


def claim(holder: object) -> None:
    """``holder`` traces nested graph calls itself (the instrumentor, while instrumented)."""
    with _LOCK:
        _CLAIMS.add(holder)


def release(holder: object) -> None:
    """``holder`` no longer traces nested graph calls."""
    with _LOCK:
        _CLAIMS.discard(holder)


def _targets() -> list[tuple[type, str, Callable[[Any], Any]]]:
    from langgraph.pregel import Pregel

    return [(Pregel, "invoke", _invoke), (Pregel, "ainvoke", _ainvoke)]


#: ``Pregel.invoke`` / ``ainvoke``, in spanpoint's one patch registry: applied by the first
#: runner call, on in a runner call's context (:data:`CURRENT`).
PATCHES = PatchSet("graph.nested", _targets)

# A runner's calls strategy opens chat and execute_tool spans through the seams: the official
# LangChain instrumentation steps aside for them (spanpoint.calls.official).
official.watch()


# --- the nested call's span ----------------------------------------------------------------


def _nested(graph: Any) -> RunnerCall | None:
    """The runner call a call of ``graph`` made here nests in, or None to pass it through."""
    call = CURRENT.get()
    if call is None or _CLAIMS:
        return None
    if var_child_runnable_config.get() is call.outer:
        return None  # the runner's own call, or one made beside it: not inside its tasks
    return call


_INFO: weakref.WeakKeyDictionary[Any, GraphInfo] = weakref.WeakKeyDictionary()


def _info(graph: Any) -> GraphInfo:
    """Agent or workflow, and the checkpointer, of a nested graph (once per graph)."""
    try:
        info = _INFO.get(graph)
    except TypeError:  # not weakly referenceable: described every call
        info = None
    if info is None:
        # A nested graph's checkpointer is its parent's business: no durability warning.
        info = inspect_graph(graph, "graph_call", DurabilityPolicy(warn_in_process=False), None)
        with suppress(TypeError):
            _INFO[graph] = info
    return info


def _open(graph: Any, call: RunnerCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Start the nested call's span (not current yet), with the zero-code attributes."""
    info = _info(graph)
    name = str(getattr(graph, "name", None) or type(graph).__name__)
    config = kwargs.get("config")
    if config is None and len(args) > 1:
        config = args[1]
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    parent = var_child_runnable_config.get() or {}
    inherited = parent.get("configurable") or {}
    thread_id = (configurable or {}).get("thread_id")
    if thread_id is None:
        # A sub-agent invoked with a config of its own (Deep Agents' ``task`` passes only
        # ``ls_agent_type``) still runs in its parent's conversation.
        thread_id = inherited.get("thread_id")
    current = settings()
    attrs = graph_call_attributes(
        info,
        name,
        call.strategy,
        current.capture,
        thread_id=None if thread_id is None else str(thread_id),
    )
    namespace = (configurable or inherited).get("checkpoint_ns")
    if namespace:
        attrs[semconv.LANGGRAPH_CHECKPOINT_NS] = str(namespace)
    attrs[semconv.BOUNDARY_KIND] = semconv.KIND_GRAPH_CALL
    attrs[semconv.BOUNDARY_NAME] = name
    span = current.tracer.start_span(f"{info.span_name} {name}", attributes=attrs)
    return span, thread_id


def _close(span: trace.Span, output: Any, thread_id: Any) -> Any:
    """End a nested call's span OK: its pause, and its result's attributes; ``output``."""
    if span.is_recording():
        try:
            interrupts = output_interrupts(output)
            if interrupts:
                spans.paused_event(span, [i.id for i in interrupts], [i.value for i in interrupts])
                pairs = ((i.id, i.value) for i in interrupts)
                approvals.requested(span, approvals.gates_of(pairs, output))
            if interrupts or (isinstance(output, dict) and "messages" in output):
                result = build_result(output, "" if thread_id is None else str(thread_id), None)
                attrs = result_attributes(result)
                attrs.pop(semconv.LANGGRAPH_CHECKPOINT_NS, None)  # None here: kept from start
                span.set_attributes(attrs)
        except Exception as exc:  # observability is best effort
            span.set_attribute(semconv.WARNINGS, [f"describe failed: {exception_text(exc)}"])
    spans.end_ok(span)
    return output


def _invoke(original: Callable[..., Any]) -> Callable[..., Any]:
    def invoke(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _nested(self)
        # Bound through the descriptor: the original may be another library's wrapper.
        if call is None:
            return original.__get__(self, type(self))(*args, **kwargs)
        span, thread_id = _open(self, call, args, kwargs)
        try:
            with spans.current(span):
                output = original.__get__(self, type(self))(*args, **kwargs)
        except BaseException as exc:  # a sub-agent's interrupt too: one rule (spans.fail)
            spans.fail_span(span, exc)
            raise
        return _close(span, output, thread_id)

    return invoke


def _ainvoke(original: Callable[..., Any]) -> Callable[..., Any]:
    async def ainvoke(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _nested(self)
        if call is None:  # bound through the descriptor, as in invoke
            return await original.__get__(self, type(self))(*args, **kwargs)
        span, thread_id = _open(self, call, args, kwargs)
        try:
            with spans.current(span):
                output = await original.__get__(self, type(self))(*args, **kwargs)
        except BaseException as exc:  # a sub-agent's interrupt too: one rule (spans.fail)
            spans.fail_span(span, exc)
            raise
        return _close(span, output, thread_id)

    return ainvoke
