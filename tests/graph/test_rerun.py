"""Rerun with a checkpointer, in one process (issue 15 item 4; docs/concepts.md, the rerun
table). The crash rows, with real SIGKILLed subprocesses and SqliteSaver, are in
tests/durable/test_durable_rerun.py; here are the rows that need no crash:

- under ``strategy="calls"`` nothing commits the graph call, so a rerun of an interrupted
  call finds the thread paused by this very call: it returns the interrupt and executes
  nothing (before: the input was submitted again and the node ran again);
- the same with ``ainvoke`` and LangGraph's async SQLite saver;
- a rerun of two calls (interrupted, then resumed) returns each call's own result;
- another input on the same thread is another call: it starts as asked;
- a durable checkpointer inside a run gets ``durability="sync"`` unless the caller chose.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import spanpoint
from fakes import count_effect, read_effects
from spanpoint import semconv
from spanpoint.graph import DurabilityPolicy, GraphRunner, build_resume_request

QUIET = DurabilityPolicy(warn_in_process=False)


class State(TypedDict, total=False):
    request: str
    draft: str
    sent: str


def approval_graph(effects: Path, checkpointer: Any) -> Any:
    def draft(state: State) -> dict[str, str]:
        count_effect(effects, "draft")
        return {"draft": f"reply to {state['request']}"}

    def approve(state: State) -> dict[str, str]:
        decision = interrupt({"approve": state["draft"]})
        count_effect(effects, "send")
        return {"sent": state["draft"] if decision == "yes" else ""}

    g = StateGraph(State)
    g.add_node("draft", draft)
    g.add_node("approve", approve)
    g.add_edge(START, "draft")
    g.add_edge("draft", "approve")
    g.add_edge("approve", END)
    return g.compile(checkpointer=checkpointer)


@pytest.fixture
def saver(tmp_path: Path) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(tmp_path / "langgraph.db", check_same_thread=False)
    yield SqliteSaver(conn)
    conn.close()


def rerun_values(telemetry: Any, name: str) -> list[Any]:
    spans = telemetry.graph_spans(f"invoke_workflow {name}")
    return [s.attributes.get(semconv.GRAPH_RERUN) for s in spans]


def test_a_rerun_of_an_interrupted_calls_strategy_call_returns_the_interrupt(
    configured_sqlite: Any, tmp_path: Path, saver: Any
) -> None:
    effects = tmp_path / "effects"
    runner = GraphRunner(approval_graph(effects, saver), name="approver", strategy="calls")
    with spanpoint.run("R-1"):
        first = runner.invoke({"request": "refund"}, thread_id="t")
    with spanpoint.run("R-1"):
        again = runner.invoke({"request": "refund"}, thread_id="t")
    assert first.status == again.status == "interrupted"
    assert [i.id for i in again.interrupts] == [i.id for i in first.interrupts]
    assert again.output["__interrupt__"][0].value == {"approve": "reply to refund"}
    assert read_effects(effects) == {"draft": 1}, "the rerun submitted the input again"
    assert rerun_values(configured_sqlite, "approver") == [None, "returned"]


def test_a_rerun_of_a_call_and_its_resume_returns_each_result_and_executes_nothing(
    configured_sqlite: Any, tmp_path: Path, saver: Any
) -> None:
    effects = tmp_path / "effects"
    runner = GraphRunner(approval_graph(effects, saver), name="approver", strategy="calls")
    results = []
    for _attempt in (1, 2):
        with spanpoint.run("R-2"):
            paused = runner.invoke({"request": "refund"}, thread_id="t")
            done = runner.invoke(build_resume_request(paused, "yes"))
        results.append((paused, done))
    (paused1, done1), (paused2, done2) = results
    assert paused2.status == "interrupted" and done2.status == "completed"
    assert done2.output == done1.output == {
        "request": "refund", "draft": "reply to refund", "sent": "reply to refund",
    }  # fmt: skip
    assert read_effects(effects) == {"draft": 1, "send": 1}
    # The thread moved on after the first call: its state is its last own checkpoint.
    assert paused2.latest_checkpoint_id == paused1.latest_checkpoint_id
    assert rerun_values(configured_sqlite, "approver") == [None, None, "returned", "returned"]


def test_another_input_on_the_thread_starts_as_asked(
    configured_sqlite: Any, tmp_path: Path, saver: Any
) -> None:
    effects = tmp_path / "effects"
    runner = GraphRunner(approval_graph(effects, saver), name="approver", strategy="calls")
    with spanpoint.run("R-3"):
        runner.invoke({"request": "refund"}, thread_id="t")
    with spanpoint.run("R-3"):
        other = runner.invoke({"request": "invoice"}, thread_id="t")
    assert other.output["__interrupt__"][0].value == {"approve": "reply to invoice"}
    assert read_effects(effects) == {"draft": 2}


def test_async_rerun_with_the_async_sqlite_saver(configured_sqlite: Any, tmp_path: Path) -> None:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    effects = tmp_path / "effects"

    async def attempt() -> Any:
        async with aiosqlite.connect(tmp_path / "async.db") as conn:
            graph = approval_graph(effects, AsyncSqliteSaver(conn))
            runner = GraphRunner(graph, name="approver", strategy="calls", durability=QUIET)
            async with spanpoint.run("R-4"):
                return await runner.ainvoke({"request": "refund"}, thread_id="t")

    first = asyncio.run(attempt())
    again = asyncio.run(attempt())
    assert again.status == "interrupted"
    assert [i.id for i in again.interrupts] == [i.id for i in first.interrupts]
    assert read_effects(effects) == {"draft": 1}
    assert rerun_values(configured_sqlite, "approver") == [None, "returned"]


@pytest.mark.parametrize("chosen", [None, "async"])
def test_a_durable_checkpointer_in_a_run_defaults_to_sync_durability(
    configured_sqlite: Any,
    tmp_path: Path,
    saver: Any,
    monkeypatch: pytest.MonkeyPatch,
    chosen: str | None,
) -> None:
    graph = approval_graph(tmp_path / "effects", saver)
    seen: list[Any] = []
    stream = graph.stream

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("durability"))
        return stream(*args, **kwargs)

    monkeypatch.setattr(graph, "stream", spy)
    runner = GraphRunner(graph, name="approver", strategy="calls")
    extra = {"durability": chosen} if chosen else {}
    with spanpoint.run("R-5"):
        runner.invoke({"request": "refund"}, thread_id="t", **extra)
    runner.invoke({"request": "other"}, thread_id="t2")  # outside a run: LangGraph's default
    assert seen == [chosen or "sync", None]


def breakpoint_graph(effects: Path, checkpointer: Any, *, compiled_with: bool) -> Any:
    """draft, then send; a static breakpoint after draft (LangGraph's ``interrupt_after``),
    set when compiling or, with ``compiled_with=False``, by the caller of each call."""

    def draft(state: State) -> dict[str, str]:
        count_effect(effects, "draft")
        return {"draft": f"reply to {state['request']}"}

    def send(state: State) -> dict[str, str]:
        count_effect(effects, "send")
        return {"sent": state["draft"]}

    g = StateGraph(State)
    g.add_node("draft", draft)
    g.add_node("send", send)
    g.add_edge(START, "draft")
    g.add_edge("draft", "send")
    g.add_edge("send", END)
    return g.compile(
        checkpointer=checkpointer, interrupt_after=["draft"] if compiled_with else None
    )


@pytest.mark.parametrize("compiled_with", [True, False], ids=["compiled", "per-call"])
@pytest.mark.parametrize("how", ["runner", "zero-code", "runner-async"])
def test_a_rerun_of_a_call_stopped_after_a_breakpoint_reports_the_pause(
    configured_sqlite: Any,
    tmp_path: Path,
    saver: Any,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    compiled_with: bool,
) -> None:
    """A thread stopped at a static ``interrupt_after`` breakpoint is paused, not crashed:
    a rerun returns the pause and never runs past the breakpoint the user set."""
    from langgraph.checkpoint.memory import InMemorySaver

    effects = tmp_path / "effects"
    # SqliteSaver has no async methods: the async driver reads an in-process saver.
    checkpointer = InMemorySaver() if how == "runner-async" else saver
    graph = breakpoint_graph(effects, checkpointer, compiled_with=compiled_with)
    extra: dict[str, Any] = {} if compiled_with else {"interrupt_after": ["draft"]}
    outputs: list[Any] = []
    if how == "zero-code":
        from spanpoint.instrumentation import SpanpointInstrumentor

        monkeypatch.setenv("SPANPOINT_STRATEGY", "calls")
        instrumentor = SpanpointInstrumentor()
        instrumentor.instrument(tracer_provider=configured_sqlite.provider)
        try:
            for _attempt in (1, 2):
                with spanpoint.run("R-bp"):
                    config = {"configurable": {"thread_id": "t"}}
                    outputs.append(graph.invoke({"request": "refund"}, config, **extra))
        finally:
            instrumentor.uninstrument()
    else:
        runner = GraphRunner(graph, name="drafter", strategy="calls", durability=QUIET)
        for _attempt in (1, 2):
            with spanpoint.run("R-bp"):
                if how == "runner":
                    result = runner.invoke({"request": "refund"}, thread_id="t", **extra)
                else:
                    result = asyncio.run(
                        runner.ainvoke({"request": "refund"}, thread_id="t", **extra)
                    )
            assert result.status == "interrupted", result
            assert result.next_nodes == ("send",)
            outputs.append(result.output)
    assert [o.get("sent") for o in outputs] == [None, None], "a rerun ran past the breakpoint"
    assert read_effects(effects) == {"draft": 1}
    spans = configured_sqlite.graph_spans("invoke_workflow")
    assert [s.attributes.get(semconv.GRAPH_RERUN) for s in spans] == [None, "returned"]


# --- what the notes in spanpoint's store decide (LangGraph's metadata holds nothing) --------


async def _collect(chunks: Any) -> list[Any]:
    return [chunk async for chunk in chunks]


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("how", ["invoke", "stream"])
@pytest.mark.parametrize("later", ["plain invoke", "update_state"])
def test_a_returned_call_reruns_to_its_own_state_whatever_wrote_to_the_thread_after_it(
    configured_sqlite: Any, tmp_path: Path, is_async: bool, how: str, later: str
) -> None:
    """A call that returned is closed at its own last checkpoint in spanpoint's store: a
    rerun returns that state, not a later write that spanpoint never planned (a plain
    ``graph.invoke``, ``update_state``), and executes nothing."""
    from langgraph.checkpoint.memory import InMemorySaver

    effects = tmp_path / "effects"
    graph = approval_graph(effects, InMemorySaver())
    runner = GraphRunner(graph, name="approver", strategy="calls", durability=QUIET)
    config = {"configurable": {"thread_id": "t"}}

    def call() -> Any:
        given = {"request": "refund"}
        if how == "stream" and is_async:
            return asyncio.run(
                _collect(runner.astream(given, thread_id="t", stream_mode="values"))
            )[-1]
        if how == "stream":
            return list(runner.stream(given, thread_id="t", stream_mode="values"))[-1]
        if is_async:
            return asyncio.run(runner.ainvoke(given, thread_id="t")).output
        return runner.invoke(given, thread_id="t").output

    with spanpoint.run("R-later"):
        first = call()
        if later == "plain invoke":
            graph.invoke({"request": "invoice"}, config)
        else:
            graph.update_state(config, {"draft": "edited by hand"})
    with spanpoint.run("R-later"):
        again = call()
    assert again["__interrupt__"][0].value == {"approve": "reply to refund"}
    assert first["__interrupt__"][0].value == {"approve": "reply to refund"}
    assert {k: v for k, v in again.items() if k != "__interrupt__"} == {
        "request": "refund", "draft": "reply to refund",
    }  # fmt: skip
    drafts = {"plain invoke": 2, "update_state": 1}[later]  # the plain invoke drafted once
    assert read_effects(effects) == {"draft": drafts}, "the rerun executed the call again"
    assert rerun_values(configured_sqlite, "approver") == [None, "returned"]


@pytest.mark.parametrize("is_async", [False, True])
def test_two_runs_on_one_thread_are_told_apart_by_the_notes(
    configured_sqlite: Any, tmp_path: Path, is_async: bool
) -> None:
    """Run A pauses on the thread; run B's first attempt on the same thread and input is
    another run's call: it starts as asked. B's rerun then returns B's own pause."""
    from langgraph.checkpoint.memory import InMemorySaver

    effects = tmp_path / "effects"
    runner = GraphRunner(
        approval_graph(effects, InMemorySaver()), name="approver", strategy="calls",
        durability=QUIET,
    )  # fmt: skip

    def call() -> Any:
        if is_async:
            return asyncio.run(runner.ainvoke({"request": "refund"}, thread_id="t"))
        return runner.invoke({"request": "refund"}, thread_id="t")

    with spanpoint.run("R-A"):
        call()
    with spanpoint.run("R-B"):
        b1 = call()
    with spanpoint.run("R-B"):
        b2 = call()
    assert read_effects(effects) == {"draft": 2}, "run B did not start as asked"
    assert b2.latest_checkpoint_id == b1.latest_checkpoint_id
    assert rerun_values(configured_sqlite, "approver") == [None, None, "returned"]
