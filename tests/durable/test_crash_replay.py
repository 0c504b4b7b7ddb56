"""A process killed inside a step: the rerun executes only what had not committed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from spanpoint.stores import SqliteStore
from spawn import run_python

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "three_steps.py"


def run_script(tmp_path: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_python(
        [
            str(SCRIPT),
            run_id,
            str(tmp_path / "store.db"),
            str(tmp_path / "effects.txt"),
            *extra,
        ],
        env=dict(os.environ),
        timeout=120,
        cwd=tmp_path,
    )


def effects(tmp_path: Path) -> Counter[str]:
    path = tmp_path / "effects.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def crash_free_result(tmp_path: Path, run_id: str) -> str:
    clean = tmp_path / "clean"
    clean.mkdir()
    done = run_script(clean, run_id)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["result"]


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_killed_in_step_3_reruns_step_3_only(tmp_path: Path, how: str) -> None:
    crashed = run_script(tmp_path, "T-1", "--crash-in", "publish", "--how", how)
    expected_code = 17 if how == "exit" else -signal.SIGKILL
    assert crashed.returncode == expected_code, crashed.stderr
    assert effects(tmp_path) == Counter(load=1, transform=1, publish=1)

    rerun = run_script(tmp_path, "T-1")
    assert rerun.returncode == 0, rerun.stderr
    # load and transform replayed from the store; publish (never committed) executed again.
    assert effects(tmp_path) == Counter(load=1, transform=1, publish=2)
    assert json.loads(rerun.stdout)["result"] == crash_free_result(tmp_path, "T-1")

    store = SqliteStore(tmp_path / "store.db")
    try:
        run = store.get_run("T-1")
        assert run is not None and run.attempts == 2 and run.status == "completed"
        names = [cp.name for cp in store.list_checkpoints("T-1")]
        assert names == ["main.load", "main.transform", "main.publish"]
    finally:
        store.close()


def test_killed_in_step_2_reruns_step_2(tmp_path: Path) -> None:
    assert run_script(tmp_path, "T-2", "--crash-in", "transform").returncode == 17
    assert effects(tmp_path) == Counter(load=1, transform=1)

    rerun = run_script(tmp_path, "T-2")
    assert rerun.returncode == 0, rerun.stderr
    assert effects(tmp_path) == Counter(load=1, transform=2, publish=1)
    assert json.loads(rerun.stdout)["result"] == crash_free_result(tmp_path, "T-2")


def test_completed_run_replays_everything(tmp_path: Path) -> None:
    first = run_script(tmp_path, "T-3")
    second = run_script(tmp_path, "T-3")
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    assert effects(tmp_path) == Counter(load=1, transform=1, publish=1)
