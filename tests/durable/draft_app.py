"""One phase of the draft -> interrupt -> send node, in its own process, on a SqliteSaver.

``python draft_app.py PHASE FOLDER RUN_ID MODE`` with PHASE ``start`` (runs until the
interrupt, prints what the interrupt shows) or ``resume`` (answers "yes", prints what was
sent). MODE:

- ``graph_call`` / ``calls``: ``GraphRunner(graph, strategy=MODE)`` inside
  ``spanpoint.run(RUN_ID)``, spanpoint configured on a SQLite store in FOLDER.
- ``plain``: plain LangGraph, no spanpoint import at all. The parent runs it under the real
  ``opentelemetry-instrument`` launcher with the documented durable switch in the
  environment: the zero-code case.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from durable_agents import draft_graph
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

THREAD = "draft-thread"
REQUEST = {"request": "refund order 42"}


def main() -> None:
    phase, folder, run_id, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    saver = SqliteSaver(sqlite3.connect(folder / "langgraph.db", check_same_thread=False))
    graph = draft_graph(checkpointer=saver)
    payload = REQUEST if phase == "start" else Command(resume="yes")
    if mode == "plain":
        out = graph.invoke(payload, {"configurable": {"thread_id": THREAD}})
        interrupts = out.get("__interrupt__") or []
        shown = interrupts[0].value["approve"] if interrupts else None
        print(json.dumps({"shown": shown, "sent": out.get("sent")}))
        return

    import spanpoint

    spanpoint.configure(store=spanpoint.SqliteStore(folder / "spanpoint.db"))
    runner = spanpoint.GraphRunner(graph, name="drafter", strategy=mode)
    with spanpoint.run(run_id):
        result = runner.invoke(payload, thread_id=THREAD)
    shown = result.interrupts[0].value["approve"] if result.interrupts else None
    sent = result.output.get("sent") if isinstance(result.output, dict) else None
    print(json.dumps({"status": result.status, "shown": shown, "sent": sent}))


if __name__ == "__main__":
    main()
