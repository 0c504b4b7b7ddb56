"""Rerun of a completed functional-API run (``@entrypoint``) with a checkpointer: it returns
what the run returned — a dict, a scalar, a list or None — and executes nothing.

LangGraph keeps an entrypoint's return value in its one output channel (``__end__``), so its
snapshot holds that value itself, not a mapping of channels."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint
from langgraph.types import interrupt

import spanpoint
from fakes import count_effect, read_effects
from spanpoint import semconv
from spanpoint.graph import DurabilityPolicy, GraphRunner

QUIET = DurabilityPolicy(warn_in_process=False)

#: What an entrypoint returns, by the shape of its input (a dict input's "ticket").
RETURNS: dict[str, Any] = {
    "dict": {"ticket": 7, "status": "refunded"},
    "int": 42,
    "str": "refunded",
    "list": [1, "two", {"three": 3}],
    "none": None,
    "empty-dict": {},
}


def savers(tmp_path: Path) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(tmp_path / "langgraph.db", check_same_thread=False)
    return {"sqlite": SqliteSaver(conn), "memory": InMemorySaver()}


def workflow(effects: Path, checkpointer: Any) -> Any:
    @entrypoint(checkpointer=checkpointer)
    def refund(shape: str) -> Any:
        count_effect(effects, "refund")
        return RETURNS[shape]

    return refund


@pytest.mark.parametrize("saver_name", ["sqlite", "memory"])
@pytest.mark.parametrize("shape", sorted(RETURNS))
def test_a_rerun_of_a_completed_entrypoint_returns_what_it_returned(
    configured_sqlite: Any, tmp_path: Path, saver_name: str, shape: str
) -> None:
    effects = tmp_path / "effects"
    graph = workflow(effects, savers(tmp_path)[saver_name])
    runner = GraphRunner(graph, name="refund", strategy="calls", durability=QUIET)
    results = []
    for _attempt in (1, 2):
        with spanpoint.run(f"F-{shape}"):
            results.append(runner.invoke(shape, thread_id="t"))
    first, again = results
    assert first.status == again.status == "completed"
    assert first.output == RETURNS[shape]
    assert again.output == first.output and type(again.output) is type(first.output)
    assert read_effects(effects) == {"refund": 1}, "the rerun executed the entrypoint again"
    spans = configured_sqlite.graph_spans("invoke_workflow refund")
    assert [s.attributes.get(semconv.GRAPH_RERUN) for s in spans] == [None, "returned"]


def test_a_rerun_of_an_interrupted_entrypoint_returns_the_interrupt(
    configured_sqlite: Any, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"

    @entrypoint(checkpointer=savers(tmp_path)["sqlite"])
    def approve(amount: int) -> Any:
        count_effect(effects, "ask")
        return {"approved": interrupt({"amount": amount})}

    runner = GraphRunner(approve, name="approve", strategy="calls", durability=QUIET)
    results = []
    for _attempt in (1, 2):
        with spanpoint.run("F-int"):
            results.append(runner.invoke(10, thread_id="t"))
    first, again = results
    assert first.status == again.status == "interrupted"
    assert again.output["__interrupt__"][0].value == {"amount": 10}
    assert [i.id for i in again.interrupts] == [i.id for i in first.interrupts]
    assert read_effects(effects) == {"ask": 1}
