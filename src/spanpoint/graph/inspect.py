"""What spanpoint learns about a graph once, when its ``GraphRunner`` is built.

Agent or workflow (the span name), which checkpointer it has (a durable one, an in-process
``InMemorySaver`` detected by type, or none), and for ``strategy="calls"`` whether spanpoint's
``CheckpointMiddleware`` is installed. The durability policy is enforced here, before the
graph ever runs.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    saver = getattr(graph, "checkpointer", None)
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
    # boundary with or without it (issue 15 item 6); the middleware only adds its policy.
    middleware = find_checkpoint_middleware(graph) if strategy == "calls" else None
    operation = semconv.OP_INVOKE_AGENT if is_agent else semconv.OP_INVOKE_WORKFLOW
    return GraphInfo(
        is_agent=is_agent,
        span_name=operation,
        checkpointer_type=type(saver).__name__ if has_saver else None,
        has_state=has_saver and callable(getattr(graph, "get_state", None)),
        warnings=tuple(warnings),
        calls_summary=middleware is None or middleware.policy.summary,
    )


#: ``ls_integration`` values of harnesses built on ``create_agent`` (Deep Agents replaces
#: create_agent's own value when it wraps the graph, langchain 1.5 / deepagents 0.7).
AGENT_INTEGRATIONS = frozenset({"langchain_create_agent", "deepagents"})


def agent_metadata(graph: Any) -> Mapping[str, Any]:
    """The metadata a graph was configured with (``with_config``, ``create_agent``)."""
    config = getattr(graph, "config", None)
    metadata = config.get("metadata") if isinstance(config, Mapping) else None
    return metadata if isinstance(metadata, Mapping) else {}


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
    return _search_graph(graph, CheckpointMiddleware, set())


def _search_graph(graph: Any, cls: type, graphs: set[int]) -> Any:
    """Search each node of ``graph`` with a visited set of its own.

    One visited set shared across nodes made a node's search stop where an earlier node had
    only passed by at the depth limit (issue 15 item 6: the false "no CheckpointMiddleware"
    warning). ``graphs`` holds the graphs already searched, so graphs that hold each other
    end the search.
    """
    if id(graph) in graphs:
        return None
    graphs.add(id(graph))
    nodes = getattr(graph, "nodes", None)
    if not isinstance(nodes, Mapping):
        return None
    for node in nodes.values():
        found = _find(getattr(node, "bound", node), cls, set(), 0, graphs)
        if found is not None:
            return found
    return None


def _is_graph(obj: Any) -> bool:
    """A compiled LangGraph graph (nodes and channels), without importing Pregel."""
    return isinstance(getattr(obj, "nodes", None), Mapping) and hasattr(obj, "channels")


def has_checkpoint_middleware(graph: Any) -> bool:
    """Whether a ``create_agent`` graph was built with spanpoint's ``CheckpointMiddleware``."""
    return find_checkpoint_middleware(graph) is not None


def _find(obj: Any, cls: type, seen: set[int], depth: int, graphs: set[int]) -> Any:
    """``obj`` if it is an instance of ``cls``, else the first one reached through closures,
    bound methods, ``func``/``afunc`` attributes, sequences, mapping values, instance
    attributes or the nodes of a graph reached on the way."""
    if isinstance(obj, cls):
        return obj
    if depth > 6 or id(obj) in seen or obj is None or isinstance(obj, str | bytes | int | float):
        return None
    seen.add(id(obj))
    if _is_graph(obj):
        return _search_graph(obj, cls, graphs)
    children: list[Any] = [getattr(obj, "__self__", None)]
    children.extend(getattr(obj, attr, None) for attr in ("func", "afunc", "__wrapped__"))
    for cell in getattr(obj, "__closure__", None) or ():
        try:
            children.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    if isinstance(obj, list | tuple):
        children.extend(obj)
    elif isinstance(obj, dict):
        children.extend(obj.values())
    elif not isinstance(obj, type) and isinstance(getattr(obj, "__dict__", None), dict):
        children.extend(vars(obj).values())
    for child in children:
        found = _find(child, cls, seen, depth + 1, graphs)
        if found is not None:
            return found
    return None
