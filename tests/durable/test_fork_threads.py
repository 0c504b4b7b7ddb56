"""A fork of a run whose agent keeps its state on a LangGraph thread with a persistent
checkpointer (``SqliteSaver``).

LangGraph names a task on such a thread by ids derived from that thread's checkpoints, so the
calls of the original run are keyed by the original thread's task ids. A fork runs on a new
thread (the original thread has already answered): its calls upstream of the cut replay, the
cut returns the override, and what read the override executes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import test_fork_unrun
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from test_fork import PLAN, REQUEST, _unique_run_ids, fork, rid  # noqa: F401

import spanpoint
from fakes import CountingModel, count_effect, read_effects
from spanpoint.forks import RERUN, attempt_steps, chosen_attempt

telemetry = test_fork_unrun.telemetry  # spanpoint configured on each store in turn


def make_runner(effects: Path, saver: SqliteSaver) -> spanpoint.GraphRunner:
    @tool
    def lookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        count_effect(effects, f"lookup_ticket:{ticket_id}")
        return f"ticket {ticket_id}: printer out of toner"

    @tool
    def notify(ticket_id: int, token: str) -> str:
        """Tell the ticket's owner."""
        count_effect(effects, f"notify:{ticket_id}")
        return f"notified the owner of ticket {ticket_id}"

    agent = create_agent(
        CountingModel(plan=PLAN, final="Both tickets are handled.", effects=str(effects)),
        [lookup_ticket, notify],
        system_prompt="You are a support agent.",
        middleware=[spanpoint.CheckpointMiddleware()],
        checkpointer=saver,
    )
    return spanpoint.GraphRunner(agent, name="support", strategy="calls")


@pytest.fixture
def saver(tmp_path: Path) -> Any:
    conn = sqlite3.connect(tmp_path / "graph.db", check_same_thread=False)
    yield SqliteSaver(conn)
    conn.close()


def run_on(agent: spanpoint.GraphRunner, run_id: str, thread: str) -> Any:
    with spanpoint.run(rid(run_id)) as run:
        result = agent.invoke(REQUEST, thread_id=thread)
    return result, run


def tool_texts(result: Any) -> list[str]:
    return [m.content for m in result.output["messages"] if m.type == "tool"]


def labels(store: Any, run_id: str) -> list[Any]:
    """The run's boundaries as ``spanpoint show`` labels them (the attempt it prints last)."""
    checkpoints, journal = store.list_checkpoints(run_id), store.list_journal(run_id)
    return attempt_steps(checkpoints, journal, chosen_attempt(checkpoints, journal))


def override(label: str) -> Any:
    return {"content": "All done."} if label.startswith("fake-chat") else "ticket: closed"


@pytest.mark.parametrize("rerun", [False, True], ids=["override", "rerun"])
@pytest.mark.parametrize("fresh_saver", [False, True], ids=["same-saver", "new-saver"])
def test_a_fork_on_a_new_thread_replays_every_call_upstream_of_any_cut(
    telemetry: Any, tmp_path: Path, saver: SqliteSaver, fresh_saver: bool, rerun: bool
) -> None:
    store = telemetry.store
    effects = tmp_path / "effects"
    original, _ = run_on(make_runner(effects, saver), "orig", "thread-orig")
    steps = labels(store, rid("orig"))
    assert [s.label for s in steps] == ["fake-chat#1", "lookup_ticket#1", "fake-chat#2",
        "lookup_ticket#2", "fake-chat#3", "notify#1", "fake-chat#4"]  # fmt: skip
    if fresh_saver:  # the thread's checkpoints read back by another saver object
        saver = SqliteSaver(sqlite3.connect(tmp_path / "graph.db", check_same_thread=False))
    for position, cut in enumerate(steps):  # every call of the run is a cut
        name = f"fork-{position}"
        fork("orig", at=cut.label, output=RERUN if rerun else override(cut.label), new_run_id=name)
        effects.unlink(missing_ok=True)
        forked, run = run_on(make_runner(effects, saver), name, f"thread-{name}")
        assert not [w for w in run.warnings if "fork" in w], run.warnings
        went = labels(store, rid(name))
        # Upstream of the cut: replayed (nothing executed); the cut: the override, or
        # executed again without one.
        assert [s.label for s in went[:position]] == [s.label for s in steps[:position]]
        assert {s.status for s in went[:position]} <= {"replayed"}
        assert (went[position].label, went[position].status) == (
            cut.label,
            "ok" if rerun else "replayed",
        )
        # What executed is what the fork journaled as executed, one side effect each.
        executed = [s for s in went if s.status == "ok"]
        assert sum(read_effects(effects).values()) == len(executed)
        if rerun:
            assert tool_texts(forked) == tool_texts(original)
        elif cut.kind == "tool_call":
            assert "ticket: closed" in tool_texts(forked)
        else:
            assert forked.output["messages"][-1].content == "All done."


def test_a_fork_at_the_second_tool_call_on_a_new_thread_executes_what_read_it(
    configured_sqlite: Any, tmp_path: Path, saver: SqliteSaver
) -> None:
    effects = tmp_path / "effects"
    original, _ = run_on(make_runner(effects, saver), "orig", "thread-orig")
    fork("orig", at="lookup_ticket#2", output="ticket 8: closed", new_run_id="fork-1")
    effects.unlink()
    forked, _ = run_on(make_runner(effects, saver), "fork-1", "thread-fork")
    # The two model calls that read the overridden ticket execute; notify(7) is reused.
    assert read_effects(effects) == {"model": 2}
    assert tool_texts(forked) == [
        "ticket 7: printer out of toner",
        "ticket 8: closed",
        "notified the owner of ticket 7",
    ]
    # A fork of the fork, on a third thread: the model call that read the override answers
    # instead, so nothing executes.
    fork("fork-1", at="fake-chat#3", output={"content": "All closed."}, new_run_id="fork-2")
    effects.unlink()
    again, run = run_on(make_runner(effects, saver), "fork-2", "thread-fork-2")
    assert read_effects(effects) == {}
    assert again.output["messages"][-1].content == "All closed."
    assert not [w for w in run.warnings if "fork" in w], run.warnings
    # The original thread is untouched: it still ends with the original answer.
    graph = make_runner(effects, saver).graph
    state = graph.get_state({"configurable": {"thread_id": "thread-orig"}})
    assert state.values["messages"][-1].content == original.output["messages"][-1].content


async def arun_on(agent: spanpoint.GraphRunner, run_id: str, thread: str) -> Any:
    with spanpoint.run(rid(run_id)) as run:
        result = await agent.ainvoke(REQUEST, thread_id=thread)
    return result, run


@pytest.mark.parametrize("original_mode", ["sync", "async"])
@pytest.mark.parametrize("fork_mode", ["sync", "async"])
async def test_sync_and_async_runs_on_a_thread_fork_into_each_other(
    telemetry: Any, tmp_path: Path, original_mode: str, fork_mode: str
) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    effects, db = tmp_path / "effects", str(tmp_path / "graph.db")

    async def go(mode: str, run_id: str, thread: str) -> Any:
        if mode == "sync":
            conn = sqlite3.connect(db, check_same_thread=False)
            try:
                return run_on(make_runner(effects, SqliteSaver(conn)), run_id, thread)[0]
            finally:
                conn.close()
        async with AsyncSqliteSaver.from_conn_string(db) as saver:
            return (await arun_on(make_runner(effects, saver), run_id, thread))[0]

    await go(original_mode, "orig", "thread-orig")
    fork("orig", at="lookup_ticket#2", output="ticket 8: closed", new_run_id="fork-1")
    effects.unlink()
    forked = await go(fork_mode, "fork-1", "thread-fork")
    assert read_effects(effects) == {"model": 2}
    assert tool_texts(forked)[1] == "ticket 8: closed"


def test_a_cut_inside_a_sub_agent_on_the_thread_replays_the_sub_agents_calls_before_it(
    configured_sqlite: Any, tmp_path: Path, saver: SqliteSaver
) -> None:
    """A sub-agent called from a tool runs its tasks under the parent's thread (its namespace
    below the tool's task): its calls are keyed by position too."""
    effects = tmp_path / "effects"

    def build() -> spanpoint.GraphRunner:
        expert = create_agent(
            CountingModel(
                plan=[[{"name": "lookup_ticket", "args": {"ticket_id": 7}}]],
                final="Toner is on order.",
                effects=str(effects),
                model_name="expert-chat",
            ),
            [make_lookup(effects)],
            system_prompt="You are the printer expert.",
        )

        @tool
        def ask_expert(question: str) -> str:
            """Ask the printer expert."""
            count_effect(effects, "ask_expert")
            reply = expert.invoke({"messages": [{"role": "user", "content": question}]})
            return str(reply["messages"][-1].content)

        agent = create_agent(
            CountingModel(
                plan=[[{"name": "ask_expert", "args": {"question": "Ticket 7?"}}]],
                final="The expert says toner is on order.",
                effects=str(effects),
            ),
            [ask_expert],
            system_prompt="You are a support agent.",
            middleware=[spanpoint.CheckpointMiddleware()],
            checkpointer=saver,
        )
        return spanpoint.GraphRunner(agent, name="support", strategy="calls")

    run_on(build(), "orig", "thread-orig")
    steps = [s.label for s in labels(configured_sqlite.store, rid("orig"))]
    assert steps == ["fake-chat#1", "ask_expert#1", "ask_expert/expert-chat#1",
        "ask_expert/lookup_ticket#1", "ask_expert/expert-chat#2", "fake-chat#2"]  # fmt: skip
    # Cut inside the sub-agent: the tool around it executes again (it was committed whole),
    # the sub-agent's calls before the cut replay, and the parent's model call that reads
    # the tool's new result executes.
    fork("orig", at="ask_expert/expert-chat#2", output="Toner is free.", new_run_id="fork-1")
    effects.unlink()
    forked, run = run_on(build(), "fork-1", "thread-fork")
    assert read_effects(effects) == {"ask_expert": 1, "model": 1}
    assert tool_texts(forked) == ["Toner is free."]
    assert not [w for w in run.warnings if "fork" in w], run.warnings


def make_lookup(effects: Path) -> Any:
    @tool
    def lookup_ticket(ticket_id: int) -> str:
        """Look up a support ticket."""
        count_effect(effects, f"lookup_ticket:{ticket_id}")
        return f"ticket {ticket_id}: printer out of toner"

    return lookup_ticket
