"""The guard's resume claims are once-tokens of their own kind: never a checkpoint, swept by gc."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from guard_fakes import stuck_on_search
from guard_support import Tools, make_graph_builder
from langgraph.checkpoint.memory import InMemorySaver
from typer.testing import CliRunner

from spanpoint.cli import app
from spanpoint.errors import GuardConcurrentResumeError
from spanpoint.guard import GuardConfig, compile_guarded_graph
from spanpoint.guard.claims import CLAIM_KIND
from spanpoint.stores import SqliteStore


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def tokens(path: Path) -> list[tuple[str, bool]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT kind, spent_at IS NOT NULL FROM once_tokens").fetchall()
    return [(kind, bool(spent)) for kind, spent in rows]


def test_a_resume_spends_a_once_token_writes_no_checkpoint_and_gc_sweeps_it(
    tools: Tools, tmp_path: Path
) -> None:
    path = tmp_path / "claims.db"
    store = SqliteStore(path)
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    runner = compile_guarded_graph(
        builder, GuardConfig(), checkpointer=InMemorySaver(), claim_store=store
    )
    assert runner.invoke({"messages": [("user", "meaning of life?")]}, cfg("t"))["guard_terminated"]
    stop = runner.graph.get_state(cfg("t")).config["configurable"]["checkpoint_id"]
    runner.resume(cfg("t"), correction="answer now")
    # One spent token; no checkpoint row, no run (the old claims wrote a fake boundary).
    assert tokens(path) == [(CLAIM_KIND, True)]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone() == (0,)
    assert store.list_runs() == []
    stopped_at = {"configurable": {"thread_id": "t", "checkpoint_id": stop}}
    with pytest.raises(GuardConcurrentResumeError, match="already resumed"):
        runner.resume(stopped_at, correction="again")
    time.sleep(1.2)
    result = CliRunner().invoke(app, ["gc", "--older-than", "1s", "--store", str(path)])
    assert result.exit_code == 0, result.output
    assert tokens(path) == []
    store.close()
