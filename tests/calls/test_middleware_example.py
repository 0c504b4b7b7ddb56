"""examples/calls_agent.py: the second run with the same run id executes nothing."""

from __future__ import annotations

import os
from pathlib import Path

from spawn import run_python

EXAMPLE = Path(__file__).parents[2] / "examples" / "calls_agent.py"


def test_calls_agent_example_replays_everything(tmp_path: Path) -> None:
    done = run_python(
        [str(EXAMPLE), str(tmp_path / "calls.db")], env=dict(os.environ), timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "first run : executed {'model': 3, 'lookup_ticket': 1, 'approve_ticket': 1}" in done.stdout
    )
    assert "second run: executed {}" in done.stdout
