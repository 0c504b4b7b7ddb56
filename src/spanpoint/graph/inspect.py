"""What spanpoint learns about a graph once, when its ``GraphRunner`` is built.

Agent or workflow (the span name), which checkpointer it has (a durable one, an in-process
``InMemorySaver`` detected by type, or none), and for ``strategy="calls"`` whether spanpoint's
``CheckpointMiddleware`` is installed. The durability policy is enforced here, before the
graph ever runs.

Whatever a graph or a node is (a ``unittest.mock.Mock``, a ``functools.partial``, an object
whose ``__getattr__`` raises or makes attributes up), inspecting it never raises and never
creates an attribute: values are read only where they already exist (:func:`read_attr`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from spanpoint import semconv
from spanpoint.capture import CapturePolicy
from spanpoint.errors import MissingCheckpointerError
from spanpoint.graph.types import DurabilityPolicy


@dataclass(frozen=True, slots=True)
class GraphInfo:
    """What spanpoint learned about a graph once, when its runner was built."""

    is_agent: bool
    span_name: str
    checkpointer_type: str | None
    has_state: bool
    warnings: tuple[str, ...]
    #: With ``strategy="calls"``: whether the middleware asks for the aggregate run summary.
    calls_summary: bool = True


def inspect_graph(
    graph: Any, strategy: str, durability: DurabilityPolicy, kind: str | None
) -> GraphInfo:
    """Classify ``graph`` and check its durability; raises before the graph ever runs."""
    from langgraph.checkpoint.memory import InMemorySaver

    is_agent = kind == "agent" or (kind is None and looks_like_agent(graph))
    saver = read_attr(graph, "checkpointer")
    has_saver = isinstance(saver, BaseCheckpointSaver)
    warnings: list[str] = []
    if not has_saver:
        problem = (
            "the graph has no checkpointer: it cannot be interrupted and resumed, and its "
            "LangGraph state is lost between calls; compile it with a durable checkpointer "
            "(SqliteSaver, PostgresSaver)"
        )
    elif isinstance(saver, InMemorySaver):
        problem = (
            f"the graph's checkpointer {type(saver).__name__} lives in this process: a thread "
            "interrupted here cannot be resumed after a restart; use SqliteSaver or PostgresSaver"
        )
    else:
        problem = ""
    if problem and durability.require_checkpointer:
        raise MissingCheckpointerError(problem + " (require_checkpointer=True)")
    if problem and (durability.warn_in_process or not has_saver):
        warnings.append(problem)
    # No warning when the middleware is missing: GraphRunner installs the model and tool
    # seams (spanpoint.calls.seams) for every call, so each model and tool call is a
    # boundary with or without it; the middleware only adds its policy.
    middleware = find_checkpoint_middleware(graph) if strategy == "calls" else None
    operation = semconv.OP_INVOKE_AGENT if is_agent else semconv.OP_INVOKE_WORKFLOW
    return GraphInfo(
        is_agent=is_agent,
        span_name=operation,
        checkpointer_type=type(saver).__name__ if has_saver else None,
        has_state=has_saver and has_method(graph, "get_state"),
        warnings=tuple(warnings),
        calls_summary=middleware is None or middleware.policy.summary,
    )


#: ``ls_integration`` values of harnesses built on ``create_agent`` (Deep Agents replaces
#: create_agent's own value when it wraps the graph, langchain 1.5 / deepagents 0.7).
AGENT_INTEGRATIONS = frozenset({"langchain_create_agent", "deepagents"})


def agent_metadata(graph: Any) -> Mapping[str, Any]:
    """The metadata a graph was configured with (``with_config``, ``create_agent``)."""
    config = read_attr(graph, "config")
    metadata = config.get("metadata") if _is(config, Mapping) else None
    return metadata if _is(metadata, Mapping) else {}


def looks_like_agent(graph: Any) -> bool:
    """Whether ``graph`` is an agent: ``create_agent`` or a harness built on it.

    Recognised by the metadata ``create_agent`` and Deep Agents set (``ls_integration``,
    ``lc_agent_name``). Not by shape: a hand-built graph with ``model`` and ``tools`` nodes
    stays the workflow its author built (``kind="agent"`` says otherwise).
    """
    metadata = agent_metadata(graph)
    return bool(
        metadata.get("ls_integration") in AGENT_INTEGRATIONS or metadata.get("lc_agent_name")
    )


def base_attributes(info: GraphInfo, name: str, strategy: str) -> dict[str, Any]:
    """The attributes every call of one graph shares (a fresh dict)."""
    attrs: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: info.span_name,
        semconv.GEN_AI_AGENT_NAME: name,
        semconv.STRATEGY: strategy,
    }
    if not info.is_agent:
        attrs[semconv.GEN_AI_WORKFLOW_NAME] = name
    if info.checkpointer_type:
        attrs[semconv.LANGGRAPH_CHECKPOINTER] = info.checkpointer_type
    return attrs


def captured_attributes(
    attrs: dict[str, Any],
    policy: CapturePolicy,
    configurable: Mapping[str, Any] | None,
    context: Any,
    graph_input: Any,
) -> dict[str, Any]:
    """Add to ``attrs`` the redacted config, context and input ``policy`` captures."""
    if policy.capture_config:
        if configurable:
            attrs[semconv.GRAPH_CONFIG] = policy.to_json(configurable)
        if context is not None:
            attrs[semconv.GRAPH_CONTEXT] = policy.to_json(context)
    if policy.capture_state and graph_input is not None:
        attrs[semconv.GRAPH_INPUT] = policy.to_json(graph_input)
    return attrs


def graph_call_attributes(
    info: GraphInfo,
    name: str,
    strategy: str,
    policy: CapturePolicy,
    *,
    thread_id: str | None,
    configurable: Mapping[str, Any] | None = None,
    context: Any = None,
    graph_input: Any = None,
) -> dict[str, Any]:
    """The attributes of a graph-call span, for ``GraphRunner`` and the zero-code patches."""
    attrs = base_attributes(info, name, strategy)
    if thread_id is not None:
        attrs[semconv.GEN_AI_CONVERSATION_ID] = thread_id
    return captured_attributes(attrs, policy, configurable, context, graph_input)


def find_checkpoint_middleware(graph: Any) -> Any:
    """The ``CheckpointMiddleware`` a ``create_agent`` graph was built with, or None.

    Middleware that only wraps model/tool calls adds no graph node: it lives in the closures
    of the ``model`` and ``tools`` nodes, so those are searched (a few levels deep). A node
    that is itself a graph, or a closure holding one (a supervisor's members, a swarm's
    agents, a Deep Agents sub-agent), is searched the same way: the first agent found with
    the middleware answers.
    """
    try:
        # For import time: the middleware loads langchain.agents (over a second).
        from spanpoint.calls.middleware import CheckpointMiddleware
    except ImportError:
        return None
    return _search_graph(graph, lambda obj: _is(obj, CheckpointMiddleware), set())


def has_uncheckpointed_subgraph(graph: Any) -> bool:
    """Whether a graph compiled with ``checkpointer=False`` is reachable from ``graph``'s
    nodes (a node that is one, or a node that calls one).

    Such a subgraph runs with its parent's durability and no checkpointer, and LangGraph
    (1.2) then cannot honour ``durability="sync"``: its loop waits for a checkpoint save it
    never started (``'SyncPregelLoop' object has no attribute '_put_checkpoint_fut'``).
    The graphs reachable from ``graph`` are searched once; their ``checkpointer`` is read on
    every call (LangGraph's own tests set it after compiling).
    """
    return any(read_attr(sub, "checkpointer") is False for sub in _subgraphs(graph))


_SUBGRAPHS: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _subgraphs(graph: Any) -> tuple[Any, ...]:
    try:
        return _SUBGRAPHS[graph]
    except (KeyError, TypeError):
        pass
    found: list[Any] = []

    def collect(obj: Any) -> bool:
        if obj is not graph and _is_graph(obj):
            found.append(obj)
        return False

    _search_graph(graph, collect, set())
    subgraphs = tuple(found)
    with contextlib.suppress(TypeError):  # not weakly referenceable: searched again next time
        _SUBGRAPHS[graph] = subgraphs
    return subgraphs


def _search_graph(graph: Any, match: Callable[[Any], bool], graphs: set[int]) -> Any:
    """Search each node of ``graph`` with a visited set of its own.

    One visited set shared across nodes made a node's search stop where an earlier node had
    only passed by at the depth limit (the false "no CheckpointMiddleware" warning).
    ``graphs`` holds the graphs already searched, so graphs that hold each other end the
    search.
    """
    if id(graph) in graphs:
        return None
    graphs.add(id(graph))
    nodes = read_attr(graph, "nodes")
    if not _is(nodes, Mapping):
        return None
    try:
        found_nodes = list(nodes.values())
    except Exception:  # a mapping that cannot be read is not searched
        return None
    for node in found_nodes:
        bound = read_attr(node, "bound")
        found = _find(node if bound is None else bound, match, set(), 0, graphs)
        if found is not None:
            return found
    return None


def _is_graph(obj: Any) -> bool:
    """A compiled LangGraph graph (nodes and channels), without importing Pregel."""
    return _is(read_attr(obj, "nodes"), Mapping) and read_attr(obj, "channels") is not None


def has_checkpoint_middleware(graph: Any) -> bool:
    """Whether a ``create_agent`` graph was built with spanpoint's ``CheckpointMiddleware``."""
    return find_checkpoint_middleware(graph) is not None


def _find(
    obj: Any, match: Callable[[Any], bool], seen: set[int], depth: int, graphs: set[int]
) -> Any:
    """``obj`` if it is what ``match`` looks for, else the first one reached through closures,
    bound methods, ``func``/``afunc`` attributes, sequences, mapping values, instance
    attributes or the nodes of a graph reached on the way."""
    if match(obj):
        return obj
    if depth > 6 or id(obj) in seen or obj is None or _is(obj, str | bytes | int | float):
        return None
    seen.add(id(obj))
    if _is_graph(obj):
        return _search_graph(obj, match, graphs)
    for child in _children(obj):
        found = _find(child, match, seen, depth + 1, graphs)
        if found is not None:
            return found
    return None


def _children(obj: Any) -> list[Any]:
    """What ``obj`` holds, read without running its code: bound ``__self__``, ``func`` /
    ``afunc`` / ``__wrapped__``, a partial's arguments, closure cells, items, mapping values,
    instance attributes."""
    children = [read_attr(obj, name) for name in ("__self__", "func", "afunc", "__wrapped__")]
    if _is(obj, functools.partial):
        children.extend(read_attr(obj, "args") or ())
        children.extend((read_attr(obj, "keywords") or {}).values())
    closure = read_attr(obj, "__closure__")
    if _is(closure, tuple):
        for cell in closure:
            if _is(cell, types.CellType):
                try:
                    children.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    continue
    if type(obj) in (list, tuple):
        children.extend(obj)
    elif type(obj) is dict:
        children.extend(obj.values())
    elif not _is(obj, type):
        instance = _instance_dict(obj)
        if instance is not None:
            children.extend(instance.values())
    return children


# --- reading what exists ---------------------------------------------------------------------

_MISSING = object()
#: Descriptors implemented in C (slots, ``partial.func``, a function's ``__closure__``, a
#: method's ``__self__``): reading one runs no user code.
_C_DESCRIPTORS = (types.MemberDescriptorType, types.GetSetDescriptorType)


def _is(obj: Any, cls: type | types.UnionType) -> bool:
    """``isinstance`` by the object's real type: ``isinstance`` also asks ``obj.__class__``,
    which a mock or a proxy answers with code of its own (that may raise)."""
    try:
        return issubclass(type(obj), cls)
    except Exception:
        return False


def _instance_dict(obj: Any) -> dict[str, Any] | None:
    """``obj``'s own ``__dict__`` when it has a real one (a copy), else None."""
    try:
        found = object.__getattribute__(obj, "__dict__")
    except Exception:
        return None
    return dict(found) if type(found) is dict else None


def read_attr(obj: Any, name: str) -> Any:
    """``obj.name`` when it exists as data, else None; never runs ``__getattr__``,
    ``__getattribute__`` or a property, so it never raises and never creates the attribute.

    Read: the instance's ``__dict__``, a C-level descriptor of its type (slots,
    ``functools.partial.func``, a function's ``__closure__``), or a plain value on the class.
    Not read: properties and other Python descriptors (their code could do anything).
    """
    instance = _instance_dict(obj)
    if instance is not None and name in instance:
        return instance[name]
    try:
        found = inspect.getattr_static(obj, name, _MISSING)
    except Exception:
        return None
    if found is _MISSING:
        return None
    if _is(found, _C_DESCRIPTORS):
        try:
            return found.__get__(obj, type(obj))
        except Exception:
            return None
    if hasattr(type(found), "__get__"):  # a property, method or other Python descriptor
        return None
    return found


def has_method(obj: Any, name: str) -> bool:
    """Whether ``obj``'s type defines a callable ``name`` (read statically, never called)."""
    try:
        found = inspect.getattr_static(obj, name, _MISSING)
    except Exception:
        return False
    return found is not _MISSING and callable(found)
