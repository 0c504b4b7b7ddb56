"""Run or resume a guarded thread in its own process (SQLite checkpointer).

``python guard_resume_worker.py DB start`` runs a stuck agent until the guard stops it;
``... DB resume`` resumes it with a correction; ``... DB race N CHECKPOINT`` waits until N
racers are ready (files next to DB), then resumes that stop with DB as the claim store.
Prints one JSON line.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakes.py

from guard_fakes import stuck_on_search
from guard_support import Tools, kinds, make_graph_builder
from langgraph.checkpoint.sqlite import SqliteSaver

from spanpoint.errors import GuardConcurrentResumeError
from spanpoint.guard import GuardConfig, compile_guarded_graph
from spanpoint.stores import SqliteStore


def race(runner, db: str, racers: int, checkpoint: str) -> dict:
    folder = Path(db).parent
    (folder / f"ready-{time.monotonic_ns()}").touch()
    while len(list(folder.glob("ready-*"))) < racers:
        time.sleep(0.005)
    config = {"configurable": {"thread_id": "shared", "checkpoint_id": checkpoint}}
    try:
        out = runner.resume(config, correction="Stop searching; answer now.")
    except GuardConcurrentResumeError as exc:
        return {"won": False, "error": type(exc).__name__}
    return {"won": True, "last": out["messages"][-1].text}


def main(db: str, action: str, *rest: str) -> None:
    tools = Tools()
    saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    claims = SqliteStore(Path(db).with_suffix(".claims")) if action == "race" else None
    runner = compile_guarded_graph(builder, GuardConfig(), checkpointer=saver, claim_store=claims)
    config = {"configurable": {"thread_id": "shared"}}
    if action == "race":
        result = race(runner, db, int(rest[0]), rest[1])
    elif action == "report":
        result = {"checkpoint_id": runner.get_report("shared").checkpoint_id}
    elif action == "start":
        out = runner.invoke({"messages": [("user", "meaning of life?")]}, config)
        result = {
            "terminated": out["guard_terminated"],
            "reason": out["guard_reason"],
            "tool_runs": tools.count(),
        }
    else:
        out = runner.resume(config, correction="Stop searching; answer now.")
        result = {
            "last": out["messages"][-1].text,
            "tool_runs": tools.count(),
            "steps": out["spanpoint_guard"]["steps"],
            "kinds": kinds(out["messages"]),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
