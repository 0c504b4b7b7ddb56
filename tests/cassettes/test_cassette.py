"""Cassettes (issue 16 item 1): recorded once, replayed in a fresh process with no model.

The agent of tests/cassettes/cassette_app.py (parallel tool calls, a sub-agent inside a tool, a tool
that is ``always_execute``) runs in its own process for every recording and every replay, so
a replay proves the cassette file is all it needs. Effects are counted in a file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
import spanpoint.errors
from fakes import ConversationModel, CountingModel, count_effect, read_effects
from spanpoint.cassettes import CASSETTE_RUN_ID
from spawn import run_python

APP = Path(__file__).resolve().parent / "cassette_app.py"
RECORDED = {
    "model:main": 4,
    "model:sub": 2,
    "tool:lookup_ticket": 3,
    "tool:call_vendor": 1,
    "tool:ask_specialist": 1,
    "tool:clock": 1,
}


def run_app(
    tmp_path: Path,
    mode: str,
    kind: str,
    *extra: str,
    offline: bool = False,
    plant: bool = False,
    new_interpreter: bool = False,
) -> subprocess.CompletedProcess[str]:
    """The app in a fresh process: a fork of a pre-imported server (tests/spawn.py), or with
    ``new_interpreter`` a whole new Python, for the tests whose subject is another process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANPOINT_TEST_")}
    if offline:
        env["SPANPOINT_TEST_OFFLINE"] = "1"
    if plant:
        env["SPANPOINT_TEST_PLANT"] = "1"
    effects = tmp_path / "effects.txt"
    effects.unlink(missing_ok=True)
    args = [str(APP), str(tmp_path / "agent.json"), mode, kind, str(effects), *extra]
    if new_interpreter:
        return subprocess.run(
            [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
    return run_python(args, cwd=tmp_path, env=env, timeout=120)


@pytest.mark.parametrize("kind", ["SYNC", "ASYNC"])
def test_a_recorded_cassette_replays_in_a_fresh_process_with_no_model(
    tmp_path: Path, kind: str
) -> None:
    recorded = run_app(tmp_path, "once", kind)
    assert recorded.returncode == 0, recorded.stderr
    assert read_effects(tmp_path / "effects.txt") == RECORDED
    assert (tmp_path / "agent.json").exists()

    replayed = run_app(tmp_path, "none", kind, offline=True)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == json.loads(recorded.stdout)  # tool-call ids too
    # Zero model calls, zero tool executions; the always_execute tool still runs.
    assert read_effects(tmp_path / "effects.txt") == {"tool:clock": 1}

    again = run_app(tmp_path, "once", kind, offline=True)  # once + an existing file: replay
    assert again.returncode == 0, again.stderr
    assert read_effects(tmp_path / "effects.txt") == {"tool:clock": 1}


def test_a_changed_system_prompt_in_mode_none_names_the_changed_message(tmp_path: Path) -> None:
    assert run_app(tmp_path, "once", "SYNC").returncode == 0
    before = (tmp_path / "agent.json").read_text()
    changed = run_app(tmp_path, "none", "SYNC", "You are a billing agent.", offline=True)
    assert changed.returncode != 0
    assert "spanpoint.errors.CassetteMissError: model call 'main'" in changed.stderr
    assert re.search(
        r"Nearest recorded call: #\d+ 'main'\. What changed: message 0 \(system prompt\) "
        r"'You are a support agent\.' -> 'You are a billing agent\.'",
        changed.stderr,
    )
    assert "model:main" not in read_effects(tmp_path / "effects.txt")  # never reached
    assert (tmp_path / "agent.json").read_text() == before  # replay only: nothing written


def test_keys_depend_on_content_and_position_not_on_the_process(tmp_path: Path) -> None:
    assert run_app(tmp_path, "all", "SYNC", new_interpreter=True).returncode == 0
    first = json.loads((tmp_path / "agent.json").read_text())
    assert run_app(tmp_path, "all", "SYNC", new_interpreter=True).returncode == 0
    second = json.loads((tmp_path / "agent.json").read_text())
    # The first model call's key is the same: no run id, process or clock goes into it. Later
    # keys differ only through what the model answered (its tool-call ids are random, as a
    # provider's are; a replay returns the recorded ones, so a replay's keys match).
    assert first["calls"][0]["key"] == second["calls"][0]["key"]
    shape = sorted((c["kind"], c["path"], c["ordinal"]) for c in first["calls"])
    assert shape == sorted((c["kind"], c["path"], c["ordinal"]) for c in second["calls"])
    assert len(first["calls"]) == 11  # 6 model calls, 5 boundary tool calls (not clock)
    assert {c["path"] for c in first["calls"]} >= {"main", "ask_specialist/sub"}
    text = (tmp_path / "agent.json").read_text()
    assert str(tmp_path) not in text and "_at_ns" not in text and "run_id" not in text


def test_planted_api_keys_never_reach_the_file_and_a_redacted_output_misses_loudly(
    tmp_path: Path,
) -> None:
    recorded = run_app(tmp_path, "once", "SYNC", plant=True)
    assert recorded.returncode == 0, recorded.stderr
    text = (tmp_path / "agent.json").read_text()
    # The key the model passed as a tool argument and the key in the config.
    assert "PLANTtoolArgKey" in recorded.stdout and "PLANTtoolArgKey" not in text
    assert "PLANTcfgApiKey" not in text
    calls = json.loads(text)["calls"]
    assert [c["path"] for c in calls if c["output_redacted"]] == ["main"]
    # The model's recorded answer no longer holds the key: the calls after it cannot be the
    # same calls. A replay says so; it never feeds the tool a redacted key as if recorded.
    replayed = run_app(tmp_path, "none", "SYNC", offline=True, plant=True)
    assert replayed.returncode != 0
    assert "CassetteMissError: tool call 'call_vendor'" in replayed.stderr
    assert "output was redacted (it held a credential)" in replayed.stderr
    assert "tool:call_vendor" not in read_effects(tmp_path / "effects.txt")


# --- in process: modes and bad input ----------------------------------------------------------


@tool
def lookup(ticket_id: int) -> str:
    """Look up a ticket."""
    return f"ticket {ticket_id}"


def agent(final: str = "Done.", tickets: tuple[int, ...] = (7,)) -> Any:
    plan = [[{"name": "lookup", "args": {"ticket_id": t}} for t in tickets]]
    return create_agent(
        ConversationModel(plan=plan, final=final),
        [lookup],
        middleware=[spanpoint.CheckpointMiddleware()],
    )


REQUEST = {"messages": [{"role": "user", "content": "ticket 7"}]}


def test_modes_new_episodes_and_all(configured: Any, tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    with spanpoint.cassette(path) as first:
        agent().invoke(REQUEST)
    assert first.recorded == 3 and first.replayed == 0
    other = {"messages": [{"role": "user", "content": "ticket 8"}]}
    with spanpoint.cassette(path, mode="new_episodes") as grown:
        agent().invoke(REQUEST)  # replayed
        agent().invoke(other)  # new: executed and recorded
    assert grown.replayed == 3 and grown.recorded == 3
    assert len(json.loads(path.read_text())["calls"]) == 6
    with spanpoint.cassette(path, mode="none") as replay:  # the session, in its order
        agent().invoke(REQUEST)
        agent().invoke(other)
    assert replay.replayed == 6 and replay.recorded == 0
    with pytest.raises(spanpoint.errors.CassetteMissError, match="recorded at another position"):
        with spanpoint.cassette(path, mode="none"):  # keyed by position too: out of order
            agent().invoke(other)
    with spanpoint.cassette(path, mode="all") as again:  # vcrpy's all: the rest is kept
        agent().invoke(REQUEST)
    assert again.recorded == 3 and len(json.loads(path.read_text())["calls"]) == 6
    with spanpoint.cassette(path, mode="rewrite") as fresh:  # pytest-recording's rewrite
        agent().invoke(REQUEST)
    assert fresh.recorded == 3 and len(json.loads(path.read_text())["calls"]) == 3


def test_bad_input_gets_a_clear_error(configured: Any, tmp_path: Path) -> None:
    with pytest.raises(spanpoint.ConfigurationError, match="mode must be one of once, none"):
        spanpoint.cassette(tmp_path / "c.json", mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(spanpoint.ConfigurationError, match=r"no cassette at .* record it once"):
        with spanpoint.cassette(tmp_path / "absent.json", mode="none"):
            pass
    (tmp_path / "junk.json").write_text("not json")
    with pytest.raises(spanpoint.ConfigurationError, match="is not a spanpoint cassette"):
        with spanpoint.cassette(tmp_path / "junk.json"):
            pass
    with pytest.raises(spanpoint.ConfigurationError, match="a cassette is a run of its own"):
        with spanpoint.run("outer"), spanpoint.cassette(tmp_path / "c.json"):
            pass
    assert spanpoint.current_run() is None


def test_a_new_tool_call_in_mode_once_names_the_arguments(configured: Any, tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    with spanpoint.cassette(path):
        agent(tickets=(7,)).invoke(REQUEST)
    with pytest.raises(spanpoint.errors.CassetteMissError) as caught:
        with spanpoint.cassette(path):
            agent(tickets=(9,)).invoke(REQUEST)
    message = str(caught.value)
    # The model's turn changed (another plan): the model call is what misses first.
    assert "model call" in message and "is not in cassette" in message
    assert re.search(r"Nearest recorded call: #\d+", message)
    assert CASSETTE_RUN_ID == "spanpoint.cassette"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_an_interrupted_and_resumed_run_replays_from_its_cassette(
    configured: Any, tmp_path: Path, is_async: bool
) -> None:
    import asyncio

    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    effects = tmp_path / "effects.txt"

    @tool
    def approve_ticket(ticket_id: int) -> str:
        """Approve a ticket (a human reviews it first)."""
        count_effect(effects, "approve_ticket")
        return f"ticket {ticket_id} approved"

    def make(offline: bool) -> Any:  # a fresh checkpointer, as a new process has
        plan = [[{"name": "approve_ticket", "args": {"ticket_id": 7}}]]
        return create_agent(
            CountingModel(plan=plan, final="Approved.", effects=str(effects), offline=offline),
            [approve_ticket],
            middleware=[
                HumanInTheLoopMiddleware(interrupt_on={"approve_ticket": True}),
                spanpoint.CheckpointMiddleware(),
            ],
            checkpointer=InMemorySaver(),
        )

    config = {"configurable": {"thread_id": "t-7"}}
    request = {"messages": [{"role": "user", "content": "Approve ticket 7"}]}
    resume = Command(resume={"decisions": [{"type": "approve"}]})

    def session(agent: Any, mode: str) -> tuple[Any, Any]:
        async def both() -> tuple[Any, Any]:
            async with spanpoint.cassette(tmp_path / "hitl.json", mode=mode):  # type: ignore[arg-type]
                paused = await agent.ainvoke(request, config)
                return paused, await agent.ainvoke(resume, config)

        if is_async:
            return asyncio.run(both())
        with spanpoint.cassette(tmp_path / "hitl.json", mode=mode):  # type: ignore[arg-type]
            paused = agent.invoke(request, config)
            return paused, agent.invoke(resume, config)

    paused, done = session(make(offline=False), "once")
    assert "__interrupt__" in paused
    assert read_effects(effects) == {"model": 2, "approve_ticket": 1}
    effects.unlink()
    paused_again, done_again = session(make(offline=True), "none")
    assert "__interrupt__" in paused_again
    assert [(m.type, m.content) for m in done_again["messages"][1:]] == [
        (m.type, m.content) for m in done["messages"][1:]
    ]
    assert read_effects(effects) == {}  # zero model calls, zero tool executions


def test_calls_made_boundaries_by_the_seams_replay_and_miss_by_name(
    configured: Any, tmp_path: Path
) -> None:
    """No CheckpointMiddleware: the issue-15 seams make the calls boundaries; the cassette
    catches a seam's model-call miss at its claim, before the provider is reached."""
    from spanpoint.calls import seams

    effects = tmp_path / "effects.txt"

    @tool
    def lookup7(ticket_id: int) -> str:
        """Look up a ticket."""
        count_effect(effects, "tool")
        return f"ticket {ticket_id}"

    def make(offline: bool, prompt: str = "You are a support agent.") -> Any:
        plan = [[{"name": "lookup7", "args": {"ticket_id": 7}}]]
        model = CountingModel(plan=plan, final="Done.", effects=str(effects), offline=offline)
        return create_agent(model, [lookup7], system_prompt=prompt)

    path = tmp_path / "seams.json"
    with seams.enabled():
        with spanpoint.cassette(path):
            first = make(offline=False).invoke(REQUEST)
        assert read_effects(effects) == {"model": 2, "tool": 1}
        calls = json.loads(path.read_text())["calls"]
        assert sorted(c["kind"] for c in calls) == ["model_call", "model_call", "tool_call"]
        assert all(c["request"] for c in calls)  # what each call asked for, seams or not
        effects.unlink()
        with spanpoint.cassette(path, mode="none"):
            again = make(offline=True).invoke(REQUEST)
        assert again["messages"][-1].content == first["messages"][-1].content
        assert read_effects(effects) == {}
        with pytest.raises(spanpoint.errors.CassetteMissError) as caught:
            with spanpoint.cassette(path, mode="none"):
                make(offline=True, prompt="You are a billing agent.").invoke(REQUEST)
    assert "message 0 (system prompt) 'You are a support agent.' -> 'You are a billing" in str(
        caught.value
    )
    assert read_effects(effects) == {}
