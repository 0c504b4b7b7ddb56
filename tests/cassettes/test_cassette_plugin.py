"""The pytest plugin's cassettes: the marker, the fixture and ``--spanpoint-record``.

Each session is a real ``pytest -p spanpoint.pytest_plugin`` in its own process, on a small
test file of an agent whose model counts its calls in a file and is unreachable offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from fakes import read_effects
from spawn import run_python

TESTS_DIR = Path(__file__).resolve().parents[1]

TESTS = '''
import os
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

import spanpoint
from fakes import CountingModel, count_effect

EFFECTS = Path(os.environ["CASSETTE_EFFECTS"])
PROMPT = os.environ.get("CASSETTE_PROMPT", "You are a support agent.")


@tool
def lookup(ticket_id: int) -> str:
    """Look up a ticket."""
    count_effect(EFFECTS, "tool")
    return f"ticket {ticket_id}: toner"


def agent():
    return create_agent(
        CountingModel(
            plan=[[{"name": "lookup", "args": {"ticket_id": 7}}]],
            final="Done.",
            effects=str(EFFECTS),
            offline=os.environ.get("CASSETTE_OFFLINE") == "1",
        ),
        [lookup],
        system_prompt=PROMPT,
        middleware=[spanpoint.CheckpointMiddleware()],
    )


@pytest.mark.spanpoint_cassette("cassettes/marked")
def test_marked():
    result = agent().invoke({"messages": [{"role": "user", "content": "ticket 7"}]})
    assert result["messages"][-1].content == "Done."


def test_fixture(spanpoint_cassette):
    result = agent().invoke({"messages": [{"role": "user", "content": "ticket 7"}]})
    assert result["messages"][-1].content == "Done."
    assert spanpoint_cassette.path.name == "test_fixture.json"
'''


def session(
    root: Path, *args: str, offline: bool = False, prompt: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["CASSETTE_EFFECTS"] = str(root / "effects.txt")
    env.pop("CASSETTE_OFFLINE", None)
    if offline:
        env["CASSETTE_OFFLINE"] = "1"
    if prompt is not None:
        env["CASSETTE_PROMPT"] = prompt
    (root / "effects.txt").unlink(missing_ok=True)
    command = ["-m", "pytest", "-p", "spanpoint.pytest_plugin", "-q"]
    command += ["-p", "no:cacheprovider", "--rootdir", str(root), str(root / "test_agent.py")]
    return run_python([*command, *args], cwd=root, env=env, timeout=180)


def test_the_marker_and_the_fixture_record_once_then_replay_offline(tmp_path: Path) -> None:
    shutil.copy(TESTS_DIR / "fakes.py", tmp_path / "fakes.py")
    (tmp_path / "test_agent.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text("")

    recorded = session(tmp_path)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert read_effects(tmp_path / "effects.txt") == {"model": 4, "tool": 2}
    marked = tmp_path / "cassettes" / "marked.json"
    by_fixture = tmp_path / "cassettes" / "test_agent" / "test_fixture.json"
    assert marked.exists() and by_fixture.exists()
    kinds = sorted(c["kind"] for c in json.loads(marked.read_text())["calls"])
    # The plugin's zero-code instrumentation makes the graph call a boundary too; a cassette
    # holds only model and tool calls (a graph call's identity does not cover its prompt).
    assert kinds == ["model_call", "model_call", "tool_call"]

    replayed = session(tmp_path, "--spanpoint-record=none", offline=True)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert read_effects(tmp_path / "effects.txt") == {}

    changed = session(tmp_path, "--spanpoint-record=none", offline=True, prompt="Be terse.")
    assert changed.returncode == 1
    assert "CassetteMissError" in changed.stdout
    assert "message 0 (system prompt) 'You are a support agent.' -> 'Be terse.'" in changed.stdout
    assert "2 failed" in changed.stdout

    rerecorded = session(tmp_path, "--spanpoint-record=all", prompt="Be terse.")
    assert rerecorded.returncode == 0, rerecorded.stdout + rerecorded.stderr
    assert read_effects(tmp_path / "effects.txt") == {"model": 4, "tool": 2}
    assert "Be terse." in marked.read_text()
