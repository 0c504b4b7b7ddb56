"""Crash fuzz: kill a worker at a random point of a 10-step run, rerun it, check the books.

For every trial (20 per store; 100 in the full suite, ``--full``, or ``--fuzz-trials N``): no
boundary committed before the crash executes again, no committed output is lost or changed,
every step ran at most once per attempt, and the rerun (two local processes at once) returns
what a crash-free run returns.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DRIVER = Path(__file__).resolve().parents[1] / "stores" / "crash_driver.py"
STEPS = 10


def fuzz(store: str, workdir: Path, seed: int, trials: int) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, str(DRIVER), store, str(workdir), str(trials), str(seed)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def check(trials: list[dict[str, Any]], count: int) -> None:
    # The seeds below plan a crash in at least half of the first 20 trials.
    assert len(trials) == count >= 20
    for t in trials:
        where = f"trial {t['trial']} (crash {t['crash']}, delay {t['delay']})"
        assert all(r.get("result") == t["expected"] for r in t["results"]), where
        assert t["committed_after"] == list(range(STEPS)), where
        assert t["kept"], f"{where}: a committed output changed"
        for i, count in enumerate(t["effects"]):
            if i in t["committed_before"]:
                assert count == 1, f"{where}: committed step {i} executed again"
            else:
                assert 1 <= count <= 2, f"{where}: step {i} executed {count} times"
        if t["crash"] is not None:
            step, phase = t["crash"]
            assert t["first"]["signal"] == 9, where
            done = list(range(step + 1 if phase == "after_commit" else step))
            assert t["committed_before"] == done, where
    crashed = [t for t in trials if t["first"]["signal"] == 9]
    assert len(crashed) >= count * 0.5, "too few trials actually crashed to prove anything"


@pytest.mark.slow
def test_crash_fuzz_sqlite(tmp_path: Path, fuzz_trials: int) -> None:
    check(fuzz(str(tmp_path / "fuzz.db"), tmp_path, 7, fuzz_trials), fuzz_trials)


@pytest.mark.slow
@pytest.mark.postgres
def test_crash_fuzz_postgres(tmp_path: Path, pg_dsn: str, fuzz_trials: int) -> None:
    check(fuzz(pg_dsn, tmp_path, 11, fuzz_trials), fuzz_trials)
