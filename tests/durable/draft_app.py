"""One phase of the draft -> interrupt -> send node, in its own process, on a SqliteSaver.

``python draft_app.py PHASE FOLDER RUN_ID MODE`` with PHASE ``start`` (runs until the
interrupt, prints what the interrupt shows), ``continue`` (the same, from the thread's last
checkpoint with ``None`` input: LangGraph's resume after a crash) or ``resume`` (answers
"yes", prints what was sent). ``DRAFT_KILL=before-interrupt`` kills the process with
SIGKILL inside the node, between its committed model call and its ``interrupt()``. MODE:

- ``graph_call`` / ``calls``: ``GraphRunner(graph, strategy=MODE)`` inside
  ``spanpoint.run(RUN_ID)``, spanpoint configured on a SQLite store in FOLDER.
- ``plain``: plain LangGraph, no spanpoint import at all. The parent runs it under the real
  ``opentelemetry-instrument`` launcher with the documented durable switch in the
  environment: the zero-code case.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakes.py

from durable_agents import draft_graph
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

THREAD = "draft-thread"
REQUEST = {"request": "refund order 42"}


def die_before_interrupt() -> None:
    """``DRAFT_KILL=before-interrupt``: SIGKILL this process inside the node, after the model
    call returned (its boundary committed) and before ``interrupt()`` pauses the node."""
    import langgraph.types

    real = langgraph.types.interrupt

    def interrupt(value: object) -> object:
        os.kill(os.getpid(), signal.SIGKILL)
        return real(value)

    langgraph.types.interrupt = interrupt  # draft_graph imports it when it builds the node


def main() -> None:
    phase, folder, run_id, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    if os.environ.get("DRAFT_KILL") == "before-interrupt":
        die_before_interrupt()
    saver = SqliteSaver(sqlite3.connect(folder / "langgraph.db", check_same_thread=False))
    graph = draft_graph(checkpointer=saver)
    # `continue`: LangGraph's own resume of a crashed thread (`invoke(None)`).
    payload = {"start": REQUEST, "continue": None}.get(phase, Command(resume="yes"))
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
