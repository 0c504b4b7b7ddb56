"""The rerun table: checkpointer kind x how attempt 1 ended -> what attempt 2 does (issue 15,
Build 4 and acceptance "Rerun table": every row is a test).

The agent is a real ``create_agent`` (durable_agents.refund_agent): per question it looks the
order up, notifies the customer, answers. Each attempt runs in its own process inside
``spanpoint.run``, as ``GraphRunner`` in both strategies and zero-code (the instrumentor
loaded from its entry point, ``agent.invoke`` unchanged), on the same thread.

- SqliteSaver, attempt 1 crashed mid-graph (its graph call did not commit): attempt 2
  continues the thread, never submits the input again, executes only what had not completed.
- No checkpointer, crashed mid-graph: attempt 2 starts as asked; completed calls replay.
- SqliteSaver, the graph call finished but its commit was lost: attempt 2 returns the
  thread's final state and executes nothing.
- SqliteSaver, the thread's state came from another run: the call starts as asked.
- SqliteSaver, the thread's state came from an earlier completed call of this run: the call
  starts as asked (and a rerun of both calls submits each input once).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from durable_support import attempt, total

# durability="sync" (LangGraph's own option) makes the rows' precondition certain: when
# attempt 1 is killed, the thread holds every step before the kill. With the default "async"
# the last step's checkpoint may or may not have landed (a race: both outcomes must end the
# same, which test_durable_deep_agents covers; here each row needs its precondition).
SYNC = ["--durability", "sync"]
MODES = {
    "runner-calls": ["--mode", "runner", "--strategy", "calls", *SYNC],
    "runner-graph_call": ["--mode", "runner", "--strategy", "graph_call", *SYNC],
    "zero-code-calls": ["--mode", "zero-code", "--strategy", "calls", *SYNC],
    "zero-code-graph_call": ["--mode", "zero-code", "--strategy", "graph_call", *SYNC],
}
ONE_TURN = ["refund:lookup:1", "refund:notify:1", "refund:final:1"]
TWO_TURNS = [*ONE_TURN, "refund:lookup:2", "refund:notify:2", "refund:final:2"]

mode_param = pytest.mark.parametrize("mode", list(MODES))


def humans(result: dict[str, Any]) -> list[str]:
    return [content for kind, _name, content, _calls in result["messages"] if kind == "human"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, Any]]]:
    """Crash-free runs of one and of two questions (runner, calls, SqliteSaver)."""
    found = {}
    for turns in (1, 2):
        folder = tmp_path_factory.mktemp(f"refund-clean-{turns}")
        options = ["--saver", "sqlite", *MODES["runner-calls"], "--turns", str(turns)]
        done = attempt("refund", folder, "ticket-clean", 1, *options)
        assert done.executed("model") == Counter(TWO_TURNS[: 3 * turns])
        found[turns] = done.out["results"]
    return found


@mode_param
@pytest.mark.parametrize("saver", ["sqlite", "none"])
def test_crashed_mid_graph_rerun_continues_without_resubmitting_the_input(
    tmp_path: Path, clean: dict[int, list[dict[str, Any]]], mode: str, saver: str
) -> None:
    options = ["--saver", saver, *MODES[mode]]
    first = attempt("refund", tmp_path, "ticket-1", 1, *options, kill_at="before:refund:final:1")
    assert first.killed, first.stderr[-3000:]
    second = attempt("refund", tmp_path, "ticket-1", 2, *options)
    [result] = second.out["results"]
    assert result["status"] == "completed"
    assert humans(result) == ["Where is my refund for order 42?"], "the input was submitted twice"
    assert result["messages"] == clean[1][0]["messages"]
    assert second.executed("model") == {"refund:final:1": 1}
    assert total(tmp_path, "tool") == {"lookup_order": 1, "notify_customer": 1}


@mode_param
def test_finished_but_commit_lost_rerun_returns_the_final_state_and_executes_nothing(
    tmp_path: Path, clean: dict[int, list[dict[str, Any]]], mode: str
) -> None:
    options = ["--saver", "sqlite", *MODES[mode]]
    first = attempt("refund", tmp_path, "ticket-2", 1, *options, kill_at="graph-end")
    assert first.killed, first.stderr[-3000:]
    assert first.executed("model") == Counter(ONE_TURN), "attempt 1 ran the whole graph call"
    second = attempt("refund", tmp_path, "ticket-2", 2, *options)
    [result] = second.out["results"]
    assert result["status"] == "completed"
    assert result["messages"] == clean[1][0]["messages"]
    assert humans(result) == ["Where is my refund for order 42?"]
    assert second.executed() == Counter(), "a finished graph call executed again"


@mode_param
def test_a_thread_from_another_run_starts_as_asked(
    tmp_path: Path, clean: dict[int, list[dict[str, Any]]], mode: str
) -> None:
    options = ["--saver", "sqlite", *MODES[mode]]
    other = attempt("refund", tmp_path, "ticket-other", 1, *options)
    assert other.out["results"][0]["status"] == "completed"
    mine = attempt("refund", tmp_path, "ticket-mine", 2, *options)
    [result] = mine.out["results"]
    question = "Where is my refund for order 42?"
    assert humans(result) == [question, question], "the new run's input was not submitted"
    assert mine.executed("model") == {
        "refund:lookup:2": 1, "refund:notify:2": 1, "refund:final:2": 1,
    }  # fmt: skip
    assert total(tmp_path, "tool")["notify_customer"] == 2


@mode_param
def test_a_thread_from_an_earlier_completed_call_starts_as_asked(
    tmp_path: Path, clean: dict[int, list[dict[str, Any]]], mode: str
) -> None:
    """Two calls of one run on one thread: the second starts with its own input. Crashed in
    the second call, the rerun submits neither input again and ends like a crash-free run."""
    options = ["--saver", "sqlite", *MODES[mode], "--turns", "2"]
    first = attempt("refund", tmp_path, "ticket-3", 1, *options, kill_at="before:refund:final:2")
    assert first.killed, first.stderr[-3000:]
    assert first.executed("model") == Counter(TWO_TURNS[:5]), "call 2 started as asked"
    second = attempt("refund", tmp_path, "ticket-3", 2, *options)
    results = second.out["results"]
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert humans(results[1]) == [
        "Where is my refund for order 42?", "And when does the money arrive?",
    ], "an input was submitted twice"  # fmt: skip
    assert [r["messages"] for r in results] == [r["messages"] for r in clean[2]]
    assert second.executed("model") == {"refund:final:2": 1}
    assert total(tmp_path, "tool") == {"lookup_order": 2, "notify_customer": 2}
