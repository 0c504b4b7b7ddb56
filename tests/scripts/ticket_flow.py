"""One attempt of the demo's ticket flow in its own process, for crash and restart tests.

Usage: ticket_flow.py RUN_ID STORE LANGGRAPH_DB EFFECTS_FILE RESULTS_FILE
       [--crash] [--approve true|false|wait]

Side effects (model calls, Slack posts, steps) are appended to EFFECTS_FILE under an
exclusive lock as they happen, so a process killed right afterwards still counts them.
The graph calls' RunResults are written (LangGraph's serializer) to RESULTS_FILE as soon as
the triage agent is done, before "write report" runs — and, with ``--crash``, kills the
process on the first attempt (os._exit(17)).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sqlite3

from langgraph.checkpoint.sqlite import SqliteSaver
from opentelemetry.sdk.trace import TracerProvider

import spanpoint
from spanpoint import serde
from spanpoint.demo import flow
from spanpoint.graph import GraphRunner


def count(path: str, name: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
        fcntl.flock(fh, fcntl.LOCK_UN)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("run_id", "store", "langgraph_db", "effects", "results"):
        parser.add_argument(name)
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--approve", choices=["true", "false", "wait"], default="true")
    args = parser.parse_args()

    spanpoint.configure(store=args.store, tracer_provider=TracerProvider())

    def effects(name: str) -> None:
        count(args.effects, name)

    def save(results: list) -> None:
        tag, data = serde.dumps(results)
        with open(args.results, "wb") as fh:
            fh.write(tag.encode() + b"\n" + data)
            fh.flush()
            os.fsync(fh.fileno())

    flow.HOOKS.effects = effects
    flow.HOOKS.crash = "exit" if args.crash else "none"
    saver = SqliteSaver(sqlite3.connect(args.langgraph_db, check_same_thread=False))
    runner = GraphRunner(flow.build_triage_agent(effects, saver), name="triage")
    approve = {"true": True, "false": False, "wait": "wait"}[args.approve]
    outcome = flow.run_ticket_flow(runner, args.run_id, approve=approve, on_triaged=save)
    if outcome.error is not None:
        raise outcome.error
    print(json.dumps({"status": outcome.status, "attempt": outcome.attempt}))


if __name__ == "__main__":
    main()
