"""Zero-code leaves LangGraph's checkpoint metadata exactly as LangGraph writes it.

With model and tool calls durable on every checkpointed thread (``SPANPOINT_DURABLE=thread``)
the instrumentor still writes nothing into LangGraph's checkpoints: every snapshot of
``get_state_history`` has the metadata plain LangGraph gives the same graph, while a resume
still links to the span that paused. Generated over graph shapes (a pause and its resume,
steps in a row, a subgraph), sync and async.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from spanpoint.calls import tasks
from spanpoint.instrumentation import SpanpointInstrumentor
from tests.conftest import Telemetry


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def step(name: str) -> Any:
    def node(state: State) -> State:
        return {"log": [name]}

    return node


def ask(state: State) -> State:
    return {"log": [str(interrupt("approve?"))]}


def build(shape: str) -> Any:
    g = StateGraph(State)
    names = {"pause": ["a", "ask", "b"], "steps": ["a", "b", "c"], "subgraph": ["a", "sub"]}[shape]
    for name in names:
        if name == "ask":
            g.add_node(name, ask)
        elif name == "sub":
            inner = StateGraph(State)
            inner.add_node("x", step("x"))
            inner.add_node("ask", ask)
            inner.add_edge(START, "x")
            inner.add_edge("x", "ask")
            inner.add_edge("ask", END)
            g.add_node(name, inner.compile())
        else:
            g.add_node(name, step(name))
    previous = START
    for name in names:
        g.add_edge(previous, name)
        previous = name
    g.add_edge(previous, END)
    return g.compile(checkpointer=InMemorySaver())


def drive(shape: str, is_async: bool) -> list[dict[str, Any]]:
    """Run the shape to the end (answering its pause) and return every snapshot's metadata."""
    graph = build(shape)
    config = {"configurable": {"thread_id": "t"}}

    async def arun() -> None:
        out = await graph.ainvoke({"log": []}, config)
        if "__interrupt__" in out:
            await graph.ainvoke(Command(resume="yes"), config)

    if is_async:
        asyncio.run(arun())
    else:
        out = graph.invoke({"log": []}, config)
        if "__interrupt__" in out:
            graph.invoke(Command(resume="yes"), config)
    return [dict(s.metadata or {}) for s in graph.get_state_history(config)]


@pytest.fixture
def thread_durable(configured: Telemetry, monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    monkeypatch.setenv("SPANPOINT_DURABLE", "thread")
    before = tasks.durable_scope()
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider, strategy="calls")
    yield configured
    instrumentor.uninstrument()
    tasks.set_durable_scope(before)


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("shape", ["pause", "steps", "subgraph"])
def test_every_snapshot_keeps_langgraphs_metadata(
    configured: Telemetry, monkeypatch: pytest.MonkeyPatch, shape: str, is_async: bool
) -> None:
    plain = drive(shape, is_async)
    monkeypatch.setenv("SPANPOINT_DURABLE", "thread")
    before = tasks.durable_scope()
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider, strategy="calls")
    try:
        assert drive(shape, is_async) == plain
    finally:
        instrumentor.uninstrument()
        tasks.set_durable_scope(before)
    assert configured.spans(), "precondition: the instrumentor was live"


def test_a_resume_still_links_to_the_span_that_paused(thread_durable: Telemetry) -> None:
    graph = build("pause")
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"log": []}, config)
    graph.invoke(Command(resume="yes"), config)
    first, second = thread_durable.graph_spans("invoke_workflow LangGraph")
    links = [
        link.context.span_id
        for link in second.links
        if (link.attributes or {}).get("spanpoint.link") == "paused"
    ]
    assert links == [first.context.span_id]
