"""The ticket flow across two pods: PostgreSQL keeps both the checkpoints and the thread.

    python examples/postgres/ticket_two_pods.py DSN pod-a RUN_ID   # runs until the approval
    python examples/postgres/ticket_two_pods.py DSN pod-b RUN_ID   # approves, finishes

Pod A runs the ticket flow of ``spanpoint demo`` (load ticket → triage agent → report →
notify) with spanpoint's checkpoints in ``PostgresStore`` and the agent's LangGraph thread in
LangGraph's own ``PostgresSaver``, both in the database at DSN. The agent's escalation tool
asks a supervisor through a LangGraph ``interrupt``; pod A turns it into a durable wait and
exits with the run ``waiting``.

Pod B is a fresh process, as on another machine. It provides the approval, then runs the same
run id: ``load_ticket`` and the first graph call are replayed from the store (the model is not
called again), the wait returns the approval, and the resume call continues the *same*
LangGraph thread from PostgreSQL to completion. ``SPANPOINT_EFFECTS=FILE`` appends every side
effect to FILE, so a test can count them across both processes.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
from typing import Any

from langgraph.checkpoint.postgres import PostgresSaver

import spanpoint
from spanpoint.demo.flow import HOOKS, build_triage_agent, run_ticket_flow
from spanpoint.graph import GraphRunner
from spanpoint.waits import provide_input


def count_effect(name: str) -> None:
    """Append ``name`` to $SPANPOINT_EFFECTS (locked), so both pods' effects add up."""
    path = os.environ.get("SPANPOINT_EFFECTS")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(name + "\n")


def pod(dsn: str, role: str, run_id: str) -> dict[str, Any]:
    """One pod's attempt of the run; returns what it saw."""
    spanpoint.configure(store=dsn)
    store = spanpoint.settings().store
    if role == "pod-b":  # the supervisor approved, through any pod (or `spanpoint input`)
        provide_input(run_id, "approval", True, store=store)
    HOOKS.effects = count_effect
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()  # LangGraph's own migrations, beside spanpoint's tables
        runner = GraphRunner(build_triage_agent(count_effect, saver), name="triage")
        outcome = run_ticket_flow(runner, run_id, approve="wait")
        if outcome.error is not None:
            raise outcome.error
        thread = saver.get_tuple({"configurable": {"thread_id": f"{run_id}:triage"}})
    journal = store.list_journal(run_id)
    return {
        "role": role,
        "attempt": outcome.attempt,
        "status": outcome.status,
        "graph_calls": [r.status for r in outcome.results],
        "replayed": [r.path for r in journal if r.status == "replayed" and r.attempt == 2],
        "thread_step": thread.metadata.get("step") if thread else None,
        "answer": (
            str(outcome.results[-1].output["messages"][-1].content)
            if outcome.status == "completed"
            else None
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dsn", help="postgresql://user@host:port/db")
    parser.add_argument("role", choices=["pod-a", "pod-b"])
    parser.add_argument("run_id")
    args = parser.parse_args()
    print(json.dumps(pod(args.dsn, args.role, args.run_id)))


if __name__ == "__main__":
    main()
