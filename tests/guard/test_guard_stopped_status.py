"""A run the guard stopped has its own status, ``stopped`` (issue 15 item 7).

Before, a guard-stopped run reported ``completed``: a viewer counted a run that gave up as a
run that did its job. Now ``stopped`` is in the ``RunResult``, ``run.status``, the run span's
``spanpoint.run.status``, the graph call's summary record, the graph-call metric, the store's
run record and so ``spanpoint show``, executed and replayed alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from guard_fakes import stuck_on_search
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from typer.testing import CliRunner

import spanpoint
from fakes import ScriptedModel
from signals import Signals, install_signals
from spanpoint import semconv
from spanpoint.cli import app
from spanpoint.graph import DurabilityPolicy, GraphRunner

QUIET = DurabilityPolicy(warn_in_process=False)
QUESTION = {"messages": [HumanMessage("What is the meaning of life?")]}


@tool
def search(query: str, limit: int = 3) -> str:
    """Search the documentation."""
    return "No results."


def stuck_agent() -> Any:
    guard = spanpoint.guard.GuardMiddleware(spanpoint.guard.GuardConfig(max_reflections=0))
    return create_agent(
        ScriptedModel(script=stuck_on_search), [search], middleware=[guard],
        checkpointer=InMemorySaver(), name="stuck",
    )  # fmt: skip


@pytest.fixture
def signals(configured_sqlite: Any) -> Iterator[Signals]:
    installed = install_signals()
    yield installed
    installed.logger_provider.shutdown()
    installed.meter_provider.shutdown()


@pytest.mark.parametrize("strategy", ["graph_call", "calls"])
def test_a_guard_stopped_run_is_stopped_everywhere(
    configured_sqlite: Any, signals: Signals, sqlite_store: Any, strategy: str
) -> None:
    runner = GraphRunner(stuck_agent(), name="stuck", strategy=strategy, durability=QUIET)
    results, runs = [], []
    for _attempt in (1, 2):  # the second attempt replays (graph_call) or re-runs (calls)
        with spanpoint.run("ticket-stuck") as run:
            results.append(runner.invoke(QUESTION, thread_id=f"t-{strategy}"))
        runs.append(run)
    assert [r.output.get("guard_terminated") for r in results] == [True, True]
    assert [r.status for r in results] == ["stopped", "stopped"]
    assert [r.status for r in runs] == ["stopped", "stopped"]
    roots = configured_sqlite.runs()
    assert [s.attributes[semconv.RUN_STATUS] for s in roots] == ["stopped", "stopped"]
    if strategy == "graph_call":
        assert results[1].replayed
        bodies = [r.log_record.body for r in signals.summaries()]
        assert [b["status"] for b in bodies] == ["stopped", "stopped"]
        calls = signals.points(semconv.METRIC_GRAPH_CALLS)
        assert {p.attributes[semconv.STATUS] for p in calls} == {"stopped"}
    [record] = sqlite_store.list_runs()
    assert record.status == "stopped"
    shown = CliRunner().invoke(
        app, ["show", "ticket-stuck", "--store", str(Path(sqlite_store.path))], terminal_width=200
    )
    assert shown.exit_code == 0, shown.output
    assert "last status stopped" in shown.output


def test_a_run_that_completes_after_a_stop_is_completed(configured: Any) -> None:
    """The last call decides: a completed call after a stopped one leaves the run completed."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class S(TypedDict, total=False):
        done: bool

    g = StateGraph(S)
    g.add_node("n", lambda s: {"done": True})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    plain = GraphRunner(g.compile(), name="plain", durability=QUIET)
    stuck = GraphRunner(stuck_agent(), name="stuck", durability=QUIET)
    with spanpoint.run("ticket-after") as run:
        assert stuck.invoke(QUESTION, thread_id="t-a").status == "stopped"
        assert plain.invoke({}, thread_id="t-b").status == "completed"
    assert run.status == "completed"


@pytest.mark.parametrize("saver", [True, False])
def test_a_zero_code_guard_stop_makes_the_run_stopped(configured: Any, saver: bool) -> None:
    from spanpoint.instrumentation import SpanpointInstrumentor

    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    try:
        guard = spanpoint.guard.GuardMiddleware(spanpoint.guard.GuardConfig(max_reflections=0))
        agent = create_agent(
            ScriptedModel(script=stuck_on_search), [search], middleware=[guard],
            checkpointer=InMemorySaver() if saver else None, name="stuck",
        )  # fmt: skip
        with spanpoint.run("ticket-zero") as run:
            output = agent.invoke(QUESTION, {"configurable": {"thread_id": "t-z"}})
    finally:
        instrumentor.uninstrument()
    assert output["guard_terminated"] is True
    assert run.status == "stopped"
    [root] = configured.runs()
    assert root.attributes[semconv.RUN_STATUS] == "stopped"


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
@pytest.mark.parametrize("strategy", ["graph_call", "calls"])
def test_a_zero_code_rerun_of_a_stopped_run_is_stopped(
    configured: Any, monkeypatch: pytest.MonkeyPatch, strategy: str, mode: str
) -> None:
    """Attempt 2 replays attempt 1's graph call (graph_call) or its calls (calls) from the
    store: the guard does not run again, yet the run is still the one the guard stopped."""
    from spanpoint.instrumentation import SpanpointInstrumentor

    monkeypatch.setenv("SPANPOINT_STRATEGY", strategy)
    instrumentor = SpanpointInstrumentor()
    instrumentor.instrument(tracer_provider=configured.provider)
    outputs, runs = [], []
    try:
        for _attempt in (1, 2):
            guard = spanpoint.guard.GuardMiddleware(spanpoint.guard.GuardConfig(max_reflections=0))
            agent = create_agent(
                ScriptedModel(script=stuck_on_search), [search], middleware=[guard],
                checkpointer=InMemorySaver(), name="stuck",
            )  # fmt: skip
            with spanpoint.run("ticket-zero-rerun") as run:
                config = {"configurable": {"thread_id": "t-zr"}}
                if mode == "invoke":
                    outputs.append(agent.invoke(QUESTION, config))
                else:
                    outputs.append(asyncio.run(agent.ainvoke(QUESTION, config)))
            runs.append(run)
    finally:
        instrumentor.uninstrument()
    assert [o["guard_terminated"] for o in outputs] == [True, True]
    if strategy == "graph_call":  # precondition: attempt 2 replayed the whole graph call
        [_, replayed] = configured.spans("invoke_agent stuck")
        assert replayed.attributes.get(semconv.REPLAYED) is True
    assert [r.status for r in runs] == ["stopped", "stopped"]
    roots = configured.runs()
    assert [s.attributes[semconv.RUN_STATUS] for s in roots] == ["stopped", "stopped"]
