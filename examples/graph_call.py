"""A LangGraph graph call as a replay boundary, with an approval interrupt (offline).

    python examples/graph_call.py [WORKDIR]

The flow is load ticket → triage graph → write report. The triage graph classifies the
ticket, stops at an approval ``interrupt``, and pages on-call once approved (the side effect).
``write report`` fails on the first attempt; the second attempt with the same run id replays
``load_ticket`` and both graph calls from the store — on-call is paged exactly once — and
only writes the report. The LangGraph thread is kept by ``SqliteSaver``, so the interrupted
thread would survive a restart too.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import spanpoint
from spanpoint import GraphRunner, RunRequest

EXECUTED: Counter[str] = Counter()  # what really ran in this process


class Triage(TypedDict, total=False):
    ticket: str
    severity: str
    action: str


def classify(state: Triage) -> Triage:
    EXECUTED["classify"] += 1
    return {"severity": "critical" if "down" in state["ticket"] else "low"}


def page_on_call(state: Triage) -> Triage:
    approved = interrupt({"question": f"Page on-call for a {state['severity']} ticket?"})
    if not approved:
        return {"action": "queued"}
    EXECUTED["page_on_call"] += 1  # the side effect a replay must not repeat
    return {"action": "paged on-call"}


def build_graph(checkpointer: SqliteSaver) -> object:
    graph = StateGraph(Triage)
    graph.add_node("classify", classify)
    graph.add_node("page_on_call", page_on_call)
    graph.add_edge(START, "classify")
    graph.add_edge("classify", "page_on_call")
    graph.add_edge("page_on_call", END)
    return graph.compile(checkpointer=checkpointer)


@spanpoint.step(name="load_ticket")
def load_ticket(ticket_id: str) -> str:
    EXECUTED["load_ticket"] += 1
    return f"ticket {ticket_id}: checkout is down"


@spanpoint.step(name="write_report")
def write_report(triage: dict) -> str:
    run = spanpoint.current_run()
    if run is not None and run.attempt == 1:
        raise TimeoutError("report store timed out (first attempt only)")
    EXECUTED["write_report"] += 1
    return f"report: {triage['severity']} ticket, {triage['action']}"


def attempt(runner: GraphRunner, run_id: str) -> None:
    with spanpoint.run(run_id, name="ticket") as run:
        ticket = load_ticket("42")
        result = runner.invoke(RunRequest.start({"ticket": ticket}, thread_id=f"{run_id}/triage"))
        print(
            f"  triage: {result.status}, interrupts={len(result.interrupts)}, "
            f"replayed={result.replayed}"
        )
        if result.interrupted:
            result = runner.invoke(result.resume_request(True))
            print(f"  resume: {result.status}, replayed={result.replayed}")
        print("  " + write_report(result.output))
    print(f"  run {run.status}")


def main() -> int:
    workdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    workdir.mkdir(parents=True, exist_ok=True)
    spanpoint.configure(store=str(workdir / "checkpoints.db"))
    saver = SqliteSaver(sqlite3.connect(workdir / "langgraph.db", check_same_thread=False))
    runner = GraphRunner(build_graph(saver), name="triage")
    for number in (1, 2):
        print(f"attempt {number}")
        try:
            attempt(runner, "ticket-42")
        except TimeoutError as exc:
            print(f"  failed: {exc}")
    print(f"executed in this process: {dict(EXECUTED)}")
    expected = Counter(classify=1, page_on_call=1, load_ticket=1, write_report=1)
    ok = expected == EXECUTED
    print("on-call paged once, graph not rerun:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
