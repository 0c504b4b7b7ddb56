"""examples/calls_agent.py: the second run with the same run id executes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "examples" / "calls_agent.py"


def test_calls_agent_example_replays_everything(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "calls.db")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "first run : executed {'model': 3, 'lookup_ticket': 1, 'approve_ticket': 1}" in done.stdout
    )
    assert "second run: executed {}" in done.stdout
