"""An agent killed after its 2nd of 3 tool calls: the rerun executes only what had not completed.

The agent runs in a real subprocess against a SQLite store and is killed with ``os._exit``
right after the 2nd tool call returned. Tool side effects are counted in a file under a lock,
so the killed process's effects are counted too.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fakes import read_effects
from spanpoint.stores import SqliteStore
from spawn import run_python

SCRIPT = Path(__file__).parents[1] / "scripts" / "calls_agent.py"
TOOLS = ["lookup_ticket", "check_inventory", "approve_ticket"]


def run_agent(folder: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_python(
        [str(SCRIPT), run_id, str(folder / "store.db"), str(folder / "effects.txt"), *extra],
        env=dict(os.environ), timeout=120, cwd=folder,
    )  # fmt: skip


def output(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", [[], ["--async"]], ids=["invoke", "ainvoke"])
def test_killed_after_second_tool_call_rerun_executes_only_the_rest(
    tmp_path: Path, mode: list[str]
) -> None:
    crashed = run_agent(tmp_path, "ticket-7", "--crash-after-tools", "2", *mode)
    assert crashed.returncode == 17, crashed.stderr
    assert read_effects(tmp_path / "effects.txt") == {"lookup_ticket": 1, "check_inventory": 1}

    rerun = output(run_agent(tmp_path, "ticket-7", *mode))
    assert rerun["spans"] == [
        ["chat fake-chat", True],
        ["execute_tool lookup_ticket", True],
        ["chat fake-chat", True],
        ["execute_tool check_inventory", True],
        ["chat fake-chat", False],
        ["execute_tool approve_ticket", False],
        ["chat fake-chat", False],
    ]
    # Exactly once for every completed call, across the crash.
    assert read_effects(tmp_path / "effects.txt") == dict.fromkeys(TOOLS, 1)

    clean = tmp_path / "clean"
    clean.mkdir()
    assert rerun["conversation"] == output(run_agent(clean, "ticket-7", *mode))["conversation"]

    store = SqliteStore(tmp_path / "store.db")
    try:
        record = store.get_run("ticket-7")
        assert record is not None and record.attempts == 2 and record.status == "completed"
        kinds = [cp.kind for cp in store.list_checkpoints("ticket-7")]
        assert kinds.count("model_call") == 4 and kinds.count("tool_call") == 3
    finally:
        store.close()


def test_a_completed_run_replays_without_executing_anything(tmp_path: Path) -> None:
    first = output(run_agent(tmp_path, "ticket-8"))
    second = output(run_agent(tmp_path, "ticket-8", "--async"))
    assert second["conversation"] == first["conversation"]
    assert all(replayed for _name, replayed in second["spans"])
    assert read_effects(tmp_path / "effects.txt") == dict.fromkeys(TOOLS, 1)
