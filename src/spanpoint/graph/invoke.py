"""``graph.invoke`` as LangGraph runs it, counting the nodes that ran (for run summaries).

``Pregel.invoke`` is a loop over ``Pregel.stream(stream_mode=["updates", "values"])`` that
keeps the latest values and collects interrupts from the updates. Running that loop here
yields the same output and, from the updates, which nodes ran — with no LangChain callback
handler on the hot path. Any other object, or an ``invoke`` asked for another output shape,
goes through its own ``invoke``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from spanpoint.run import current_run

#: invoke() arguments that change what it returns: with these the graph's own invoke runs.
_SHAPE_ARGS = frozenset({"stream_mode", "version", "subgraphs"})


def counts_nodes(graph: Any, kwargs: dict[str, Any]) -> bool:
    """Whether :func:`invoke_counting` can stand in for ``graph.invoke`` with these kwargs."""
    return is_pregel(graph) and not shapes_output(kwargs)


def is_pregel(graph: Any) -> bool:
    """Whether ``graph`` is a LangGraph ``Pregel`` (compiled graph or ``create_agent`` agent)."""
    from langgraph.pregel import Pregel

    return isinstance(graph, Pregel)


def shapes_output(kwargs: dict[str, Any]) -> bool:
    """Whether ``kwargs`` ask ``invoke`` for another output shape than the final values."""
    return bool(kwargs) and not _SHAPE_ARGS.isdisjoint(kwargs)


class NodeCounts(Counter[str]):
    """The nodes that ran in one call, and whether it stopped at an interrupt or breakpoint.

    LangGraph reports every stop in the updates stream (``__interrupt__``, empty for a static
    breakpoint), so a counted call that saw none ran to its end: no pending nodes.
    """

    paused: bool = False


def invoke_counting(
    graph: Any, graph_input: Any, config: Any, kwargs: dict[str, Any], nodes: Counter[str]
) -> Any:
    """``graph.invoke`` as LangGraph itself runs it — a stream of updates and values — with
    the nodes that ran counted from the updates (no callback handler needed)."""
    output = _Collected(nodes)
    kw = {"output_keys": graph.output_channels, **kwargs}
    for chunk in graph.stream(graph_input, config, stream_mode=["updates", "values"], **kw):
        output.add(chunk)
    return output.result()


async def ainvoke_counting(
    graph: Any, graph_input: Any, config: Any, kwargs: dict[str, Any], nodes: Counter[str]
) -> Any:
    """The async form of :func:`invoke_counting`."""
    output = _Collected(nodes)
    kw = {"output_keys": graph.output_channels, **kwargs}
    async for chunk in graph.astream(graph_input, config, stream_mode=["updates", "values"], **kw):
        output.add(chunk)
    return output.result()


class _Collected:
    """What ``Pregel.invoke`` keeps from its stream: the latest values and the interrupts."""

    __slots__ = ("interrupts", "latest", "nodes", "paused")

    def __init__(self, nodes: Counter[str]) -> None:
        self.nodes = nodes
        self.latest: Any = None
        self.interrupts: list[Any] = []
        self.paused = False

    def add(self, chunk: Any) -> None:
        mode, payload = chunk  # (mode, payload): subgraphs=True never comes here
        if mode == "values":
            self.latest = payload
        elif mode == "updates" and isinstance(payload, dict):
            for key in payload:
                if key[:2] != "__":  # one node per update, most of the time
                    self.nodes[key] += 1
                elif key == "__interrupt__":
                    self.paused = True
                    self.interrupts.extend(payload[key] or ())

    def result(self) -> Any:
        if self.paused and isinstance(self.nodes, NodeCounts):
            self.nodes.paused = True
        if not self.interrupts:
            return self.latest
        if isinstance(self.latest, dict):
            return {**self.latest, "__interrupt__": self.interrupts}
        return {"__interrupt__": self.interrupts}


_NODE_KEYS: dict[str, str] = {}


def node_counters(nodes: Counter[str]) -> dict[str, int]:
    """Node executions of this call (none for a replayed call)."""
    counters = {"nodes": sum(nodes.values())}
    for name, count in nodes.items():
        key = _NODE_KEYS.get(name)
        if key is None:
            key = f"node.{name}"
            if len(_NODE_KEYS) < 4096:  # node names are few and fixed per graph
                _NODE_KEYS[name] = key
        counters[key] = count
    return counters


def journal_mark() -> int:
    """Where the run's journal stands before a call (see :func:`journal_counters`)."""
    scope = current_run()
    return len(scope.journal) if scope is not None else 0


def journal_counters(mark: int, nodes: Counter[str]) -> dict[str, int]:
    """Nodes that ran, and boundaries (model and tool calls) replayed or failed inside the
    call, from the run's journal."""
    scope = current_run()
    if scope is None:
        return node_counters(nodes)
    entries = scope.journal[mark:]
    return {
        **node_counters(nodes),
        "boundaries_replayed": sum(1 for e in entries if e.status == "replayed"),
        "boundaries_failed": sum(1 for e in entries if e.status == "error"),
    }
