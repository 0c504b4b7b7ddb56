"""Context that holds: one trace per top-level call, every span under the right parent.

Nodes run in LangGraph's thread pool, as asyncio tasks, as parallel branches and as ``Send``
fan-out; a span another library opens inside a node (an HTTP client, a DB driver — here a
tracer with another instrumentation scope) must nest under the graph call that ran it. No
orphan roots, and no "Failed to detach context" from OpenTelemetry.
"""

from __future__ import annotations

import asyncio
import logging
import operator
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Send
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from spanpoint.instrumentation import SpanpointInstrumentor
from tests.conftest import Telemetry


class Items(TypedDict, total=False):
    items: Annotated[list[str], operator.add]
    job: str


@pytest.fixture
def telemetry(configured: Telemetry, caplog: pytest.LogCaptureFixture) -> Iterator[Telemetry]:
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    caplog.set_level(logging.ERROR, logger="opentelemetry.context")
    yield configured
    instrumentor.uninstrument()
    detach_errors = [r for r in caplog.records if "detach" in r.getMessage().lower()]
    assert detach_errors == []


def library_span(telemetry: Telemetry, name: str) -> None:
    """What an instrumented HTTP or DB client does inside a node: a span on its own tracer."""
    tracer = telemetry.provider.get_tracer("some.http.client")
    with tracer.start_as_current_span(name):
        pass


def assert_tree(spans: list[ReadableSpan], root_name: str, children: dict[str, int]) -> None:
    """One root named ``root_name``; ``children[name]`` spans directly under it; one trace."""
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == [root_name]
    root = roots[0]
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    for name, count in children.items():
        found = [s for s in spans if s.name == name]
        assert len(found) == count, name
        assert all(s.parent.span_id == root.context.span_id for s in found), name


def test_thread_pool_nodes_and_parallel_branches(telemetry: Telemetry) -> None:
    def branch(name: str) -> Any:
        def node(state: Items) -> Items:
            library_span(telemetry, f"GET /{name}")
            return {"items": [name]}

        return node

    builder = StateGraph(Items)
    for name in ("a", "b", "c"):  # three branches in one super-step, run in the thread pool
        builder.add_node(name, branch(name))
        builder.add_edge(START, name)
    graph = builder.compile(name="fan")
    assert sorted(graph.invoke({"items": []})["items"]) == ["a", "b", "c"]
    assert_tree(
        telemetry.spans(),
        "invoke_workflow fan",
        {"GET /a": 1, "GET /b": 1, "GET /c": 1},
    )


def send_graph(telemetry: Telemetry, *, is_async: bool) -> Any:
    def worker(state: Items) -> Items:
        library_span(telemetry, "db.query")
        return {"items": [state["job"]]}

    async def aworker(state: Items) -> Items:
        await asyncio.sleep(0)
        library_span(telemetry, "db.query")
        return {"items": [state["job"]]}

    builder = StateGraph(Items)
    builder.add_node("worker", aworker if is_async else worker)
    builder.add_conditional_edges(
        START, lambda state: [Send("worker", {"job": f"j{i}"}) for i in range(5)], ["worker"]
    )
    return builder.compile(name="sender")


def test_send_fan_out(telemetry: Telemetry) -> None:
    out = send_graph(telemetry, is_async=False).invoke({"items": []})
    assert len(out["items"]) == 5
    assert_tree(telemetry.spans(), "invoke_workflow sender", {"db.query": 5})


def test_async_nodes_and_tasks(telemetry: Telemetry) -> None:
    async def gathering(state: Items) -> Items:
        async def one(i: int) -> str:
            await asyncio.sleep(0)
            library_span(telemetry, "rpc")
            return f"r{i}"

        return {"items": list(await asyncio.gather(*(one(i) for i in range(4))))}

    builder = StateGraph(Items)
    builder.add_node("gathering", gathering)
    builder.add_edge(START, "gathering")
    graph = builder.compile(name="tasks")
    assert len(asyncio.run(graph.ainvoke({"items": []}))["items"]) == 4
    assert_tree(telemetry.spans(), "invoke_workflow tasks", {"rpc": 4})
    telemetry.clear()
    asyncio.run(send_graph(telemetry, is_async=True).ainvoke({"items": []}))
    assert_tree(telemetry.spans(), "invoke_workflow sender", {"db.query": 5})


def test_spans_inside_a_subgraph_nest_under_the_subgraph(telemetry: Telemetry) -> None:
    def inner_node(state: Items) -> Items:
        library_span(telemetry, "inner.http")
        return {"items": ["inner"]}

    inner = StateGraph(Items)
    inner.add_node("inner_node", inner_node)
    inner.add_edge(START, "inner_node")
    outer = StateGraph(Items)
    outer.add_node("sub", inner.compile(name="inner"))
    outer.add_edge(START, "sub")
    outer.compile(name="outer").invoke({"items": []})
    spans = telemetry.spans()
    by_name = {s.name: s for s in spans}
    assert by_name["inner.http"].parent.span_id == by_name["invoke_workflow inner"].context.span_id
    assert (
        by_name["invoke_workflow inner"].parent.span_id
        == by_name["invoke_workflow outer"].context.span_id
    )
    assert [s.name for s in spans if s.parent is None] == ["invoke_workflow outer"]


def test_streams_keep_context_even_when_abandoned(telemetry: Telemetry) -> None:
    graph = send_graph(telemetry, is_async=False)
    chunks = graph.stream({"items": []}, stream_mode="updates")
    next(chunks)
    # The consumer holds a chunk: the graph's span is not current in the caller's code.
    assert not trace.get_current_span().get_span_context().is_valid
    chunks.close()

    async def abandon() -> None:
        stream = send_graph(telemetry, is_async=True).astream({"items": []})
        await anext(stream)
        assert not trace.get_current_span().get_span_context().is_valid
        # Closed from another task than the one that iterated it.
        await asyncio.create_task(stream.aclose())

    asyncio.run(abandon())
    spans = telemetry.spans()
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["invoke_workflow sender"] * 2
    root_ids = {r.context.span_id for r in roots}
    assert all(s.parent.span_id in root_ids for s in spans if s.parent is not None)


def test_concurrent_invokes_get_one_trace_each(telemetry: Telemetry) -> None:
    graph = send_graph(telemetry, is_async=False)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: graph.invoke({"items": []}), range(8)))
    spans = telemetry.spans()
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 8
    assert len({r.context.trace_id for r in roots}) == 8
    for root in roots:
        in_trace = [s for s in spans if s.context.trace_id == root.context.trace_id]
        assert len(in_trace) == 6  # the graph call and its five workers' queries
