"""Zero-code leaves LangGraph's checkpoint metadata exactly as LangGraph writes it.

With model and tool calls durable on every checkpointed thread (``SPANPOINT_DURABLE=thread``)
the instrumentor still writes nothing into LangGraph's checkpoints: every snapshot of
``get_state_history`` has the metadata plain LangGraph gives the same graph, while a resume
still links to the span that paused. Generated over graph shapes (a pause and its resume,
steps in a row, a subgraph), sync and async; and inside ``spanpoint.run``, for GraphRunner and
zero-code alike (below).
"""

from __future__ import annotations

import asyncio
import operator
import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


# --- inside spanpoint.run: GraphRunner and zero-code, every way a call is made -------------
#
# A durable graph call inside a run keeps what a rerun must find again (its run and key, where
# it began on the thread) and the span that paused in spanpoint's own store: LangGraph's
# checkpoints carry nothing of it. Generated over who makes the call (GraphRunner under
# either strategy, zero-code under ``calls``), inside a run or not, sync or async, invoke or
# stream, SqliteSaver or InMemorySaver, and how the thread ends (paused at an interrupt, or
# completed: the pause answered, steps in a row, a subgraph).

CALLERS = ["runner-graph_call", "runner-calls", "zero-code"]
ENDINGS = ["paused", "resumed", "steps", "subgraph"]


def _saver(kind: str, path: str, is_async: bool) -> Any:
    if kind == "memory":
        return InMemorySaver(), None
    import sqlite3

    if is_async:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        conn: Any = aiosqlite.connect(path)
        return AsyncSqliteSaver(conn), conn
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    return SqliteSaver(conn), conn


def _graph(ending: str, saver: Any) -> Any:
    shape = {"paused": "pause", "resumed": "pause"}.get(ending, ending)
    built = build(shape)
    built.checkpointer = saver
    return built


def _inputs(ending: str) -> list[Any]:
    if ending == "paused":
        return [{"log": []}]
    if ending in ("resumed", "subgraph"):
        return [{"log": []}, Command(resume="yes")]
    return [{"log": []}]


async def _arun_calls(caller: str, graph: Any, config: Any, call: str, inputs: list[Any]) -> None:
    from spanpoint.graph import DurabilityPolicy, GraphRunner

    quiet = DurabilityPolicy(warn_in_process=False)
    thread = config["configurable"]["thread_id"]
    strategy = caller.split("-", 1)[1] if caller.startswith("runner") else None
    runner = (
        GraphRunner(graph, name="meta", strategy=strategy, durability=quiet) if strategy else None
    )
    for item in inputs:
        if runner is not None and call == "invoke":
            await runner.ainvoke(item, thread_id=thread)
        elif runner is not None:
            async for _ in runner.astream(item, thread_id=thread):
                pass
        elif call == "invoke":
            await graph.ainvoke(item, config)
        else:
            async for _ in graph.astream(item, config):
                pass


def _run_calls(caller: str, graph: Any, config: Any, call: str, inputs: list[Any]) -> None:
    from spanpoint.graph import DurabilityPolicy, GraphRunner

    quiet = DurabilityPolicy(warn_in_process=False)
    thread = config["configurable"]["thread_id"]
    strategy = caller.split("-", 1)[1] if caller.startswith("runner") else None
    runner = (
        GraphRunner(graph, name="meta", strategy=strategy, durability=quiet) if strategy else None
    )
    for item in inputs:
        if runner is not None and call == "invoke":
            runner.invoke(item, thread_id=thread)
        elif runner is not None:
            for _ in runner.stream(item, thread_id=thread):
                pass
        elif call == "invoke":
            graph.invoke(item, config)
        else:
            for _ in graph.stream(item, config):
                pass


def drive_case(
    tmp: Any, case: tuple[str, bool, bool, str, str, str], *, plain: bool
) -> list[dict[str, Any]]:
    """Every snapshot's metadata after ``case``'s calls: plain LangGraph (no spanpoint
    installed, no run), or as ``case`` makes them."""
    import spanpoint

    caller, in_run, is_async, call, saver_kind, ending = case
    path = str(tmp / f"lg-{uuid.uuid4().hex}.db")
    config = {"configurable": {"thread_id": "t"}}
    if plain:
        caller = "plain"

    async def arun() -> list[dict[str, Any]]:
        saver, conn = _saver(saver_kind, path, True)
        if conn is not None:
            await conn
        graph = _graph(ending, saver)
        try:
            with spanpoint.run(f"R-{uuid.uuid4().hex}") if in_run and not plain else nullcontext():
                await _arun_calls(caller, graph, config, call, _inputs(ending))
            return [dict(s.metadata or {}) async for s in graph.aget_state_history(config)]
        finally:
            if conn is not None:
                await conn.close()

    if is_async:
        return asyncio.run(arun())
    saver, conn = _saver(saver_kind, path, False)
    graph = _graph(ending, saver)
    graph.spanpoint_test_inputs = _inputs(ending)
    try:
        with spanpoint.run(f"R-{uuid.uuid4().hex}") if in_run and not plain else nullcontext():
            _run_calls(caller, graph, config, call, _inputs(ending))
        return [dict(s.metadata or {}) for s in graph.get_state_history(config)]
    finally:
        if conn is not None:
            conn.close()


CASES = st.tuples(
    st.sampled_from(CALLERS),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["invoke", "stream"]),
    st.sampled_from(["sqlite", "memory"]),
    st.sampled_from(ENDINGS),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=CASES)
def test_every_snapshot_keeps_langgraphs_metadata_in_runs_and_runners(
    configured: Telemetry, tmp_path_factory: pytest.TempPathFactory, case: Any
) -> None:
    tmp = tmp_path_factory.mktemp("meta")
    plain = drive_case(tmp, case, plain=True)
    assert plain, "precondition: the thread has checkpoints"
    instrumentor = None
    if case[0] == "zero-code":
        before = tasks.durable_scope()
        tasks.set_durable_scope("thread")
        instrumentor = SpanpointInstrumentor()
        instrumentor.instrument(tracer_provider=configured.provider, strategy="calls")
    try:
        assert drive_case(tmp, case, plain=False) == plain
    finally:
        if instrumentor is not None:
            instrumentor.uninstrument()
            tasks.set_durable_scope(before)
