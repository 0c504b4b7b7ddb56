"""examples/guard_loop.py runs offline and tells the whole story."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spawn import run_python

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "guard_loop.py"


@pytest.mark.slow
def test_example_reflects_stops_and_resumes_to_the_answer() -> None:
    done = run_python([str(EXAMPLE)], env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "[reflection]" in out and "[skipped] (error)" in out
    assert "guard_terminated=True guard_reason='tool_repeat'" in out
    assert "A plain invoke is refused" in out
    assert out.rstrip().splitlines()[-1].split() == [
        "resume",
        "spanpoint.guard.recovered",
        "tool_repeat",
    ]
    assert "Release 4.2 shipped on 12 March, per the changelog." in out
    assert "status=completed" in out
