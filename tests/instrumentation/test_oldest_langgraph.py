"""The graph tests and the fan-out crash tests pass on the oldest langgraph that pyproject.toml
allows, as they do on the newest in .venv (scripts/oldest_langgraph.sh builds and caches its
virtualenv; docs/compatibility.md)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Minutes (a clean machine also builds the virtualenv): the full suite (.ci/run) runs it.
pytestmark = [pytest.mark.slow, pytest.mark.full]


def test_graph_and_fan_out_tests_pass_on_the_oldest_langgraph_allowed() -> None:
    floor = re.search(r'"langgraph>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert floor is not None, "pyproject.toml names no langgraph floor"
    proc = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "oldest_langgraph.sh"),
            floor.group(1),
            "tests/durable/test_durable_fanout.py",
            "-x",
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=ROOT,
        # The default suite of those tests, not the full one (no nested upstream runs).
        env={k: v for k, v in os.environ.items() if k != "SPANPOINT_FULL_SUITE"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert f"langgraph {floor.group(1)}" in proc.stderr  # the script's own report
    assert re.search(r"\b\d{3,} passed", proc.stdout), proc.stdout[-2000:]
