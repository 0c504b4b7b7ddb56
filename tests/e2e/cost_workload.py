"""Priced agent runs, executed and replayed: what makes the dashboards' cost panels show real
data.

The fake model (the suite's ``fakes.ScriptedModel``) answers from the conversation (it looks
up ``lookups`` orders, one per turn, counted by the tool answers it was given, then answers)
and reports its token usage under a model name the price table knows, as a provider's
response would. A run executed twice under one run id replays the second time, so replay
saves exactly the first attempt's cost.
Telemetry goes where the standard ``OTEL_EXPORTER_OTLP_*`` variables say.

    python tests/e2e/cost_workload.py RUN_ID
        one run of graph ``orders`` (one lookup, ``gpt-4o-mini``), executed then replayed

    python tests/e2e/cost_workload.py --plan PLAN.json --calls CALLS.jsonl [--ready F --go F]
        the runs PLAN.json lists, in order (``run_id``, ``graph``, ``model``, ``lookups``,
        ``attempts``, ``phase``); every model call the fake actually executes is appended to
        CALLS.jsonl (with its run, attempt, phase and usage), under a file lock. With --ready
        and --go, before its first run of phase ``b`` the process creates the --ready file and
        waits for the --go file: one long-lived process whose counters grow while Prometheus
        watches (set OTEL_METRIC_EXPORT_INTERVAL to export while it waits).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakes.py

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage
from langchain_core.tools import tool

import spanpoint
from fakes import ScriptedModel

#: Where the fake logs its executed calls, and the run/attempt being driven (this script's).
CALLS_LOG: Path | None = None
CURRENT: dict[str, Any] = {}


def priced_model(model: str, lookups: int) -> ScriptedModel:
    """Looks ``lookups`` orders up, then answers; reports usage like a real provider (input
    tokens grow with the conversation), under a model name the price table knows."""

    def usage(messages: Sequence[BaseMessage]) -> tuple[int, int]:
        return 400 * len(messages), 120

    def script(turn: int, messages: Sequence[BaseMessage]) -> list[dict[str, Any]] | str:
        inp, out = usage(messages)
        _log_call({"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out})
        looked_up = sum(m.type == "tool" for m in messages)
        if looked_up < lookups:
            return [{"name": "order_status", "args": {"order": str(looked_up + 1)}}]
        return f"{looked_up} order(s) ship tomorrow."

    return ScriptedModel(script=script, usage=usage, model_name=model, provider="openai")


def _log_call(usage: dict[str, int]) -> None:
    if CALLS_LOG is None:
        return
    line = json.dumps({**CURRENT, **usage})
    with CALLS_LOG.open("a") as out:
        fcntl.flock(out, fcntl.LOCK_EX)
        out.write(line + "\n")


@tool
def order_status(order: str) -> str:
    """The status of an order."""
    return f"order {order}: ships tomorrow"


def run(run_id: str, graph: str, model: str, lookups: int, attempts: int, phase: str) -> bool:
    """Run one agent ``attempts`` times under ``run_id``; True when every attempt answered
    the same (the later ones replayed the first)."""
    agent = create_agent(priced_model(model, lookups), [order_status])
    runner = spanpoint.GraphRunner(agent, name=graph, strategy="calls")
    answers = []
    for attempt in range(1, attempts + 1):
        CURRENT.update(run_id=run_id, graph=graph, model=model, attempt=attempt, phase=phase)
        with spanpoint.run(run_id, name=graph):
            question = {"messages": [("user", "where are my orders?")]}
            answers.append(runner.invoke(question, thread_id=run_id).output["messages"][-1].content)
    return len(set(answers)) == 1


def _wait_for_go(ready: Path, go: Path) -> None:
    ready.touch()
    deadline = time.monotonic() + 600
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {go} within 600 s")
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    """Run the plan (or one default run); 0 when every replay gave the executed answer."""
    global CALLS_LOG
    parser = argparse.ArgumentParser()
    parser.add_argument("run_id", nargs="?", default=f"cost-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--plan", type=Path)
    parser.add_argument("--calls", type=Path)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--go", type=Path)
    args = parser.parse_args(argv)
    CALLS_LOG = args.calls
    plan = (
        json.loads(args.plan.read_text())
        if args.plan
        else [dict(run_id=args.run_id, graph="orders", model="gpt-4o-mini", lookups=1, attempts=2)]
    )
    spanpoint.configure()
    same = True
    for index, item in enumerate(plan):
        phase = item.get("phase", "a")
        first_of_b = phase == "b" and all(p.get("phase", "a") != "b" for p in plan[:index])
        if first_of_b and args.ready and args.go:
            _wait_for_go(args.ready, args.go)
        keys = ("run_id", "graph", "model", "lookups", "attempts")
        same = run(*(item[k] for k in keys), phase=phase) and same
    print(f"replayed the same answers: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
