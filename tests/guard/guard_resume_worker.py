"""Run or resume a guarded thread in its own process (SQLite checkpointer).

``python guard_resume_worker.py DB start`` runs a stuck agent until the guard stops it;
``... DB resume`` resumes it with a correction. Prints one JSON line.
"""

from __future__ import annotations

import json
import sqlite3
import sys

from guard_fakes import stuck_on_search
from guard_support import Tools, kinds, make_graph_builder
from langgraph.checkpoint.sqlite import SqliteSaver

from spanpoint.guard import GuardConfig, compile_guarded_graph


def main(db: str, action: str) -> None:
    tools = Tools()
    saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
    builder = make_graph_builder(stuck_on_search, [tools.make("search")])
    runner = compile_guarded_graph(builder, GuardConfig(), checkpointer=saver)
    config = {"configurable": {"thread_id": "shared"}}
    if action == "start":
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
    main(sys.argv[1], sys.argv[2])
