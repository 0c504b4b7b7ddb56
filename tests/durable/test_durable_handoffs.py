"""Supervisor and swarm handoffs replay exactly (issue 15, acceptance 4).

Real ``langgraph_supervisor.create_supervisor`` (its supervisor is the prebuilt
``create_react_agent``: no middleware; its hand-back messages carry ``uuid4`` ids) and real
``langgraph_swarm.create_swarm`` (its handoff ``Command(goto=..., graph=Command.PARENT)``
carries the whole message list). Every fake model mints random ``uuid4`` tool-call ids, as
real providers do, so identity must come from positions, never from id values.

Each attempt is ``GraphRunner(app, strategy="calls")`` inside ``spanpoint.run`` in its own
process. Supervisor members carry ``CheckpointMiddleware`` (the middleware seam); swarm
members carry none (only the direct call seams) - both seams are exercised. Attempt 1 is
SIGKILLed after the first handoff, or inside the second agent right after its side effect
committed. Then the messages (type, name, content, tool-call names; never ids) equal a
crash-free run's, each side effect ran once, and a third attempt executes nothing, the
supervisor's own model calls included.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from durable_support import attempt, total

RUN = "ticket-team"

SUPERVISOR_CALLS = [
    "supervisor:handoff:billing", "billing:call:send_invoice", "billing:final",
    "supervisor:handoff:travel", "travel:call:book_flight", "travel:final", "supervisor:final",
]  # fmt: skip
SWARM_CALLS = ["alice:call:send_invoice", "alice:handoff:bob", "bob:call:book_flight", "bob:final"]

# app -> kill point -> (kill env, model calls attempt 2 must execute)
POINTS: dict[str, dict[str, tuple[str, list[str]]]] = {
    "supervisor": {
        # transfer_to_billing committed; billing's first model call starts
        "after-first-handoff": ("before:billing:call:send_invoice", SUPERVISOR_CALLS[1:]),
        # travel's book_flight committed; travel's next model call starts
        "inside-second-agent": ("before:travel:final", ["travel:final", "supervisor:final"]),
    },
    "swarm": {
        # alice's transfer_to_bob committed; bob's first model call starts
        "after-first-handoff": ("before:bob:call:book_flight", SWARM_CALLS[2:]),
        # bob's book_flight committed; bob's final model call starts
        "inside-second-agent": ("before:bob:final", ["bob:final"]),
    },
}
CLEAN_CALLS = {"supervisor": SUPERVISOR_CALLS, "swarm": SWARM_CALLS}
EFFECTS = {"send_invoice": 1, "book_flight": 1}


def options(app: str, saver: str) -> list[str]:
    extra = ["--member-middleware"] if app == "supervisor" else []
    return ["--saver", saver, "--strategy", "calls", *extra]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """The messages of a crash-free run of each app."""
    found = {}
    for app in ("supervisor", "swarm"):
        folder = tmp_path_factory.mktemp(f"{app}-clean")
        done = attempt(app, folder, RUN, 1, *options(app, "none"))
        assert done.executed("model") == Counter(CLEAN_CALLS[app])
        assert done.executed("tool") == EFFECTS
        found[app] = done.out["results"][0]["messages"]
    return found


@pytest.mark.parametrize("saver", ["none", "sqlite"])
@pytest.mark.parametrize("point", ["after-first-handoff", "inside-second-agent"])
@pytest.mark.parametrize("app", ["supervisor", "swarm"])
def test_killed_handoffs_replay_exactly(
    tmp_path: Path, clean: dict[str, list[Any]], app: str, point: str, saver: str
) -> None:
    kill_at, expected = POINTS[app][point]
    first = attempt(app, tmp_path, RUN, 1, *options(app, saver), kill_at=kill_at)
    assert first.killed, f"rc={first.returncode}\n{first.stderr[-3000:]}"

    second = attempt(app, tmp_path, RUN, 2, *options(app, saver))
    [result] = second.out["results"]
    assert result["status"] == "completed"
    assert result["messages"] == clean[app], "the replayed handoffs changed the conversation"
    assert second.executed("model") == Counter(expected)
    assert total(tmp_path, "tool") == EFFECTS, "a side effect ran twice"

    third = attempt(app, tmp_path, RUN, 3, *options(app, saver))
    assert third.out["results"][0]["messages"] == clean[app]
    assert third.executed() == Counter(), "the third run executed calls (supervisor's included)"


@pytest.mark.parametrize("app", ["supervisor", "swarm"])
def test_a_completed_team_run_replays_without_executing_anything(tmp_path: Path, app: str) -> None:
    """No crash at all: the rerun of a completed run executes nothing and says the same."""
    first = attempt(app, tmp_path, RUN, 1, *options(app, "none"))
    second = attempt(app, tmp_path, RUN, 2, *options(app, "none"))
    assert second.out["results"][0]["messages"] == first.out["results"][0]["messages"]
    assert second.executed() == Counter()
