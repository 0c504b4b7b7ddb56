"""Inspecting a graph never raises and never creates an attribute, whatever its nodes are.

LangGraph's own suite builds graphs from ``unittest.mock.Mock`` nodes; users pass partials,
callable objects and proxies. ``spanpoint.graph.inspect`` searches every node for a
``CheckpointMiddleware`` and reads the graph's checkpointer and metadata: on objects like
these it must read only what already exists. Hypothesis builds the objects, nested in each
other (closures, partials, bound methods, containers, instance attributes).
"""

from __future__ import annotations

import functools
from typing import Any, TypedDict
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanpoint.graph import inspect as graph_inspect
from spanpoint.graph.types import DurabilityPolicy

#: Every attribute an object below was asked for and did not have (it would have made one).
ASKED: list[str] = []


class Inventing:
    """Makes up any attribute it is asked for (and remembers being asked)."""

    def __init__(self, held: Any) -> None:
        self.held = held

    def __getattr__(self, name: str) -> Any:
        ASKED.append(name)
        value = Inventing(None)
        object.__setattr__(self, name, value)
        return value

    def __call__(self, state: Any) -> dict[str, Any]:
        return {}


class Raising:
    """Raises on any attribute it does not have, and on ``__class__``."""

    def __init__(self, held: Any) -> None:
        self.held = held

    def __getattr__(self, name: str) -> Any:
        ASKED.append(name)
        raise RuntimeError(f"no {name} here")

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise RuntimeError("no class either")

    def __call__(self, state: Any) -> dict[str, Any]:
        return {}


class Hostile:
    """``__getattribute__`` raises for every name but its own two."""

    def __init__(self, held: Any) -> None:
        object.__setattr__(self, "held", held)

    def __getattribute__(self, name: str) -> Any:
        ASKED.append(name)
        raise RuntimeError(f"{name}: no")


class OddClosure:
    """A callable whose ``__closure__`` (and ``func``) are not what a function's are."""

    def __init__(self, held: Any, closure: Any) -> None:
        self.held = held
        self.__closure__ = closure
        self.func = closure

    def __call__(self, state: Any) -> dict[str, Any]:
        return {}


class Slotted:
    __slots__ = ("afunc", "held")

    def __init__(self, held: Any) -> None:
        self.held = held


class WithProperty:
    def __init__(self, held: Any) -> None:
        self.held = held

    @property
    def func(self) -> Any:
        ASKED.append("func")
        raise RuntimeError("a property is never run")


def closing_over(held: Any) -> Any:
    def node(state: Any) -> Any:
        return held

    return node


def odd_closures() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.integers(),
        st.lists(st.integers(), max_size=3),
        st.tuples(st.integers(), st.text(max_size=3)),
        st.just((closing_over(1).__closure__ or (None,))[0]),
        st.just(mock.Mock()),
    )


def mock_holding(made: Any, held: Any) -> Any:
    """``made`` holding ``held`` as an attribute (set without letting mock inspect it)."""
    object.__getattribute__(made, "__dict__")["held"] = held
    return made


def wrap(held: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        held.map(lambda h: mock_holding(mock.Mock(), h)),
        held.map(lambda h: mock_holding(mock.MagicMock(), h)),
        held.map(lambda h: mock_holding(mock.NonCallableMock(spec=["held"]), h)),
        held.map(lambda h: functools.partial(closing_over, h)),
        held.map(closing_over),
        held.map(Inventing),
        held.map(Raising),
        held.map(Hostile),
        held.map(Slotted),
        held.map(WithProperty),
        held.map(lambda h: WithProperty(h).__init__),  # a bound method
        st.tuples(held, odd_closures()).map(lambda p: OddClosure(*p)),
        st.lists(held, max_size=3),
        st.dictionaries(st.text(max_size=3), held, max_size=3),
    )


NODES = st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=3)), wrap, max_leaves=8)


class FakeGraph:
    """A graph shape (``nodes`` and ``channels``) whose nodes are anything."""

    def __init__(self, nodes: dict[str, Any]) -> None:
        self.nodes = nodes
        self.channels: dict[str, Any] = {}


def state_of(obj: Any, seen: set[int] | None = None, depth: int = 0) -> Any:
    """What ``obj`` holds (its own dict, a mock's children), read without asking it."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 12:
        return "..."
    seen.add(id(obj))
    try:
        own = object.__getattribute__(obj, "__dict__")
    except Exception:
        own = {}
    if type(own) is not dict:
        own = {}
    children = own.get("_mock_children") or {}
    held = [own.get("held")] if "held" in own else []
    if type(obj) in (list, tuple):
        held = list(obj)
    elif type(obj) is dict:
        held = list(obj.values())
    return (
        sorted(own),
        sorted(children),
        [state_of(h, seen, depth + 1) for h in held],
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.dictionaries(st.sampled_from(["a", "b", "c"]), NODES, min_size=1, max_size=3))
def test_searching_any_nodes_never_raises_and_creates_nothing(nodes: dict[str, Any]) -> None:
    before = state_of(nodes)
    ASKED.clear()
    graph = FakeGraph(nodes)
    assert graph_inspect.find_checkpoint_middleware(graph) is None
    info = graph_inspect.inspect_graph(graph, "calls", DurabilityPolicy(), None)
    assert info.checkpointer_type is None and not info.is_agent
    assert ASKED == []
    assert state_of(nodes) == before


@settings(max_examples=25, deadline=None)
@given(graph=NODES)
def test_any_object_as_the_graph_itself(graph: Any) -> None:
    """A ``GraphRunner`` takes "any object with invoke": it is inspected the same way."""
    before = state_of(graph)
    ASKED.clear()
    info = graph_inspect.inspect_graph(graph, "calls", DurabilityPolicy(), None)
    assert info.checkpointer_type is None and not info.has_state
    assert ASKED == []
    assert state_of(graph) == before


def test_the_middleware_is_still_found_through_what_exists() -> None:
    """Reading statically still reaches the middleware through every route the search has."""
    from spanpoint.calls.middleware import CheckpointMiddleware

    middleware = CheckpointMiddleware()
    routes = [
        closing_over(middleware),
        functools.partial(closing_over, middleware),
        [closing_over([middleware])],
        {"x": middleware},
        Inventing(middleware),
        mock_holding(mock.Mock(), middleware),
    ]
    for route in routes:
        assert graph_inspect.find_checkpoint_middleware(FakeGraph({"n": route})) is middleware


class Counter(TypedDict):
    n: int


@pytest.mark.parametrize("factory", [mock.Mock, mock.MagicMock], ids=["Mock", "MagicMock"])
def test_a_graph_of_mock_nodes_runs_under_the_instrumentor(configured: Any, factory: Any) -> None:
    """LangGraph's own tests build graphs like this one; the first call of every graph is
    inspected under the ``calls`` strategy."""
    from langgraph.graph import END, START, StateGraph

    from spanpoint.instrumentation import SpanpointInstrumentor

    node = factory(return_value={"n": 2})
    builder = StateGraph(Counter)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    graph = builder.compile()
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider, strategy="calls")
    try:
        assert graph.invoke({"n": 1}) == {"n": 2}
    finally:
        instrumentor.uninstrument()
    assert node.call_count == 1
    assert configured.spans("invoke_workflow LangGraph")
