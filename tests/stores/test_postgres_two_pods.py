"""Acceptance: the ticket flow on PostgreSQL across two processes, as on two pods.

Process A runs the flow with LangGraph's PostgresSaver until the supervisor's interrupt and
exits with the run waiting. Process B, fresh, provides the approval, replays the first graph
call from the Postgres store (the model is not called again) and resumes the same LangGraph
thread from PostgreSQL to completion. Side effects are counted across both processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psycopg
import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "postgres" / "ticket_two_pods.py"


def pod(dsn: str, role: str, tmp_path: Path) -> dict[str, object]:
    env = {**os.environ, "SPANPOINT_EFFECTS": str(tmp_path / "effects.txt")}
    env["SPANPOINT_TRACE_FILE"] = str(tmp_path / f"{role}-traces.jsonl")
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), dsn, role, "ticket-42"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def test_pod_b_resumes_the_thread_pod_a_left_at_the_interrupt(pg_dsn: str, tmp_path: Path) -> None:
    a = pod(pg_dsn, "pod-a", tmp_path)
    assert (a["attempt"], a["status"], a["graph_calls"]) == (1, "waiting", ["interrupted"])
    effects = Counter((tmp_path / "effects.txt").read_text().split())
    assert effects == Counter({"ticket_loaded": 1, "model_call": 1})

    b = pod(pg_dsn, "pod-b", tmp_path)
    assert (b["attempt"], b["status"]) == (2, "completed")
    assert b["graph_calls"] == ["interrupted", "completed"]
    assert b["replayed"] == ["load_ticket", "triage"], "the first graph call came from the store"
    assert "posted to #oncall (critical)" in str(b["answer"])
    effects = Counter((tmp_path / "effects.txt").read_text().split())
    assert effects == Counter(
        {
            "ticket_loaded": 1,  # replayed by B
            "model_call": 2,  # A's first turn; B's final turn only (the first is replayed)
            "slack_post": 1,  # the approved tool ran once, in B
            "report_attempt": 1,
            "report_written": 1,
            "customer_notified": 1,
        }
    )
    with psycopg.connect(pg_dsn) as conn:
        threads = conn.execute("SELECT DISTINCT thread_id FROM checkpoints").fetchall()
        run = conn.execute(
            "SELECT attempts, status FROM spanpoint_runs WHERE run_id = 'ticket-42'"
        ).fetchone()
    assert threads == [("ticket-42:triage",)], "one LangGraph thread, continued by pod B"
    assert run == (2, "completed")
