"""Deep Agents under the calls strategy, SIGKILLed at four points (issue 15, acceptance 3).

The agent (durable_agents.deep_agent, a real ``create_deep_agent``) plans with two tool calls
in one model turn (``write_todos`` from LangChain's todo middleware, which deepagents 0.7.32
lacks, and ``write_file``), delegates to the default ``general-purpose`` sub-agent with
``task`` (the sub-agent reads the file and drafts the message), sends it with
``notify_customer`` and answers. Six model calls in a crash-free run.

Each attempt runs ``GraphRunner(agent, strategy="calls")`` inside ``spanpoint.run`` in its own
process, with no checkpointer or with a SqliteSaver; attempt 1 is SIGKILLed (a real signal,
raised by the process itself at the chosen point). Attempt 2 must execute only the model
calls that had not committed, and end with the same answer, messages, todos and files as a
crash-free run; attempt 3 executes nothing.

How "notify runs once wherever its commit happened" is read here: a tool call that committed
never runs again. A kill *inside* notify (after its side effect, before it returned) leaves
no commit, and spanpoint cannot know the effect happened: attempt 2 runs notify again, exactly
once, and that run commits, so no attempt after it runs notify. Total effects there are 2,
one per uncommitted-then-committed execution; every other kill point gives 1.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from durable_agents import DEEP_MODEL_CALLS
from durable_support import attempt, total

RUN = "ticket-deep"

# kill point -> (model calls attempt 2 must execute, notify executions in attempt 2).
# "before:X" kills as model call X starts (nothing of it ran); "after:X" right after X ran
# (logged, its reply never returned); "in:notify_customer" after notify's side effect.
KILL_POINTS: dict[str, tuple[list[str], int]] = {
    # inside the sub-agent: its first model call and read_file committed, its answer did not
    "inside-subagent": (["sub:draft", "main:notify", "main:final"], 1),
    # after the parallel calls: write_todos and write_file committed; the next call starts
    "after-parallel": (["main:delegate", "sub:read", "sub:draft", "main:notify", "main:final"], 1),
    # after notify: its call committed; the final model call starts
    "after-notify": (["main:final"], 0),
    # inside notify: the effect happened, the call did not commit
    "inside-notify": (["main:final"], 1),
}
KILL_AT = {
    "inside-subagent": "after:deep:sub:draft",
    "after-parallel": "before:deep:main:delegate",
    "after-notify": "before:deep:main:final",
    "inside-notify": "in:notify_customer",
}


def models(counter: Counter[str]) -> Counter[str]:
    return Counter({k[5:]: n for k, n in counter.items() if k.startswith("deep:")})


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A crash-free run: the answer, messages, todos and files every attempt must reach."""
    folder = tmp_path_factory.mktemp("deep-clean")
    done = attempt("deep", folder, RUN, 1)
    result = done.out["results"][0]
    assert models(done.executed("model")) == Counter(DEEP_MODEL_CALLS)
    assert done.executed("tool") == {"notify_customer": 1}
    assert result["files"] == {"/plan.md": "Refund 42 EUR for order 42. Apologise for the delay."}
    assert "Refund 42 EUR" in result["messages"][-1][2], "the sub-agent read the file"
    return result


def same_outcome(out: dict[str, Any], clean: dict[str, Any]) -> None:
    [result] = out["results"]
    assert result["status"] == "completed"
    assert result["messages"][-1][2] == clean["messages"][-1][2], "a different final answer"
    assert result["messages"] == clean["messages"]
    assert result["files"] == clean["files"], "the files written in attempt 1 were lost"
    assert result["todos"] == clean["todos"]


@pytest.mark.parametrize("mode", [[], ["--async"]], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("saver", ["none", "sqlite"])
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_deep_agent_reruns_only_what_had_not_committed(
    tmp_path: Path, clean: dict[str, Any], point: str, saver: str, mode: list[str]
) -> None:
    options = ["--saver", saver, "--strategy", "calls", *mode]
    first = attempt("deep", tmp_path, RUN, 1, *options, kill_at=KILL_AT[point])
    assert first.killed, f"not killed at {point}: rc={first.returncode}\n{first.stderr[-3000:]}"

    second = attempt("deep", tmp_path, RUN, 2, *options)
    expected_models, expected_notify = KILL_POINTS[point]
    same_outcome(second.out, clean)
    assert models(second.executed("model")) == Counter(expected_models), (
        "attempt 2 re-executed model calls that had committed (or skipped ones that had not)"
    )
    assert second.executed("tool")["notify_customer"] == expected_notify
    # notify's commit happened exactly once, wherever: no attempt after it runs notify again.
    third = attempt("deep", tmp_path, RUN, 3, *options)
    same_outcome(third.out, clean)
    assert third.executed() == Counter(), "a completed run executed something again"
    notified = total(tmp_path, "tool")["notify_customer"]
    assert notified == (2 if point == "inside-notify" else 1)
