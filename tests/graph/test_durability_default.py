"""The durability spanpoint chooses for a graph call never crashes a graph LangGraph runs.

Inside a run, a graph with a durable checkpointer gets ``durability="sync"`` unless the caller
chose one. A subgraph compiled with ``checkpointer=False`` inherits its parent's durability
and LangGraph 1.2 cannot run it under ``sync`` (it waits for a save it never started:
``'SyncPregelLoop' object has no attribute '_put_checkpoint_fut'``), so a graph that reaches
one keeps LangGraph's default (docs/compatibility.md). Generated: where the subgraph sits (a
node, or called from a node's function), its checkpointer, sync and async, both strategies,
the runner and zero-code.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

import spanpoint
from spanpoint.graph import DurabilityPolicy, GraphRunner
from spanpoint.graph.rerun import wants_sync_durability


class S(TypedDict):
    n: int


def subgraph(checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(S)
    g.add_node("x", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "x")
    g.add_edge("x", END)
    return g.compile(checkpointer=checkpointer)


def parent(saver: Any, sub_checkpointer: Any, placement: str) -> Any:
    from langgraph.graph import END, START, StateGraph

    sub = subgraph(sub_checkpointer)

    def calls_sub(state: S) -> S:
        return sub.invoke(state)

    async def acalls_sub(state: S) -> S:
        return await sub.ainvoke(state)

    g = StateGraph(S)
    if placement == "node":
        g.add_node("sub", sub)
    else:
        from langchain_core.runnables import RunnableLambda

        g.add_node("sub", RunnableLambda(calls_sub, afunc=acalls_sub))
    g.add_edge(START, "sub")
    g.add_edge("sub", END)
    return g.compile(checkpointer=saver)


def saver(db: Path) -> Any:
    return SqliteSaver(sqlite3.connect(db, check_same_thread=False))


async def in_async_saver(db: Path, call: Any) -> Any:
    """``call(saver)`` with an AsyncSqliteSaver on ``db`` open."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(db)) as found:
        return await call(found)


SUB_CHECKPOINTERS = {"False": False, "None": None}
CASES = list(itertools.product(SUB_CHECKPOINTERS, ["node", "called"]))


@pytest.mark.parametrize(("sub", "placement"), CASES)
def test_sync_is_chosen_only_where_langgraph_can_run_it(
    tmp_path: Path, sub: str, placement: str
) -> None:
    graph = parent(saver(tmp_path / "lg.db"), SUB_CHECKPOINTERS[sub], placement)
    assert wants_sync_durability(graph, {}) is (sub != "False")
    # The rule is LangGraph's: where spanpoint would not choose sync, sync itself crashes.
    config = {"configurable": {"thread_id": "t"}}
    if sub == "False":
        with pytest.raises(AttributeError, match="_put_checkpoint_fut"):
            graph.invoke({"n": 1}, config, durability="sync")
    else:
        assert graph.invoke({"n": 1}, config, durability="sync") == {"n": 2}


@pytest.fixture
def zero_code(configured: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    from spanpoint.calls import tasks
    from spanpoint.instrumentation import SpanpointInstrumentor

    before = tasks.durable_scope()
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider, strategy=request.param)
    yield configured
    instrumentor.uninstrument()
    tasks.set_durable_scope(before)


@pytest.mark.parametrize("zero_code", ["graph_call", "calls"], indirect=True)
@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("placement", ["node", "called"])
def test_a_run_over_an_uncheckpointed_subgraph_completes_zero_code(
    zero_code: Any, tmp_path: Path, is_async: bool, placement: str
) -> None:
    config = {"configurable": {"thread_id": "t"}}
    with spanpoint.run("uncheckpointed"):
        if is_async:
            out = asyncio.run(
                in_async_saver(
                    tmp_path / "lg.db",
                    lambda found: parent(found, False, placement).ainvoke({"n": 1}, config),
                )
            )
        else:
            out = parent(saver(tmp_path / "lg.db"), False, placement).invoke({"n": 1}, config)
    assert out == {"n": 2}


@pytest.mark.parametrize("strategy", ["graph_call", "calls"])
@pytest.mark.parametrize("is_async", [False, True])
def test_a_run_over_an_uncheckpointed_subgraph_completes_with_a_runner(
    configured: Any, tmp_path: Path, strategy: str, is_async: bool
) -> None:
    def runner(found: Any) -> GraphRunner:
        return GraphRunner(
            parent(found, False, "node"),
            name="parent",
            strategy=strategy,
            durability=DurabilityPolicy(warn_in_process=False),
        )

    with spanpoint.run("uncheckpointed-runner"):
        if is_async:
            result = asyncio.run(
                in_async_saver(
                    tmp_path / "lg.db",
                    lambda found: runner(found).ainvoke({"n": 1}, thread_id="t"),
                )
            )
        else:
            result = runner(saver(tmp_path / "lg.db")).invoke({"n": 1}, thread_id="t")
    assert result.output == {"n": 2}


def test_a_checkpointer_set_after_compiling_is_read_on_every_call(tmp_path: Path) -> None:
    """LangGraph's own tests set ``subgraph.checkpointer = False`` between calls."""
    from langgraph.graph import END, START, StateGraph

    sub = subgraph(None)
    g = StateGraph(S)
    g.add_node("sub", sub)
    g.add_edge(START, "sub")
    g.add_edge("sub", END)
    graph = g.compile(checkpointer=saver(tmp_path / "lg.db"))
    assert wants_sync_durability(graph, {})
    sub.checkpointer = False
    assert not wants_sync_durability(graph, {})
    sub.checkpointer = None
    assert wants_sync_durability(graph, {})
